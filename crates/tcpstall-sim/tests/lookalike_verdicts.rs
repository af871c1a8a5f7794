//! The detector on each look-alike of a stall its rules speak of, every one produced by
//! the simulator's stacks (a profile, a pattern, a link, a capture point) and judged
//! against the simulator's ground truth of every gap: a sender without Nagle, a sender on
//! its own clock, a burst that fills the window, an ACK for two full segments, ACKs a
//! bottleneck paces, a bare FIN, data sent before an ACK could arrive, an ACK later than
//! any timer, a window closed until the end, a release later than the path allows, a
//! record larger than the MSS, urgent data, and a slow path against think time. Then the
//! stalls themselves, from the seeds' stacks and patterns.

mod common;

use common::{Judged, judge, scenario};
use tcpstall_core::basis::Link;
use tcpstall_core::detect::{Pattern, StallClass, StallEvent};
use tcpstall_core::diagnosis::{Role, TimerGuess, Verdict};
use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};
use tcpstall_core::side::Side;
use tcpstall_sim::capture::Captured;
use tcpstall_sim::endpoint::SegmentKind;
use tcpstall_sim::engine::{CLIENT, SERVER};
use tcpstall_sim::scenario::ScenarioFile;
use tcpstall_sim::truth::{Cause as TruthCause, Label, TruthGap};

const MS: Nanos = NANOS_PER_MILLI;

/// The gaps of `sender` ending in a record of `bytes`, each with the detector's event.
fn gaps_of(j: &Judged, sender: Side, bytes: u32) -> Vec<(&TruthGap, &StallEvent)> {
    let pairs: Vec<_> = j
        .pairs()
        .into_iter()
        .filter(|(g, _)| g.sender == sender && g.bytes == bytes)
        .map(|(g, e)| {
            let e = e.unwrap_or_else(|| panic!("no event on {}\n{}", g.describe(), j.describe()));
            (g, e)
        })
        .collect();
    assert!(
        !pairs.is_empty(),
        "no gap ends in {bytes} bytes\n{}",
        j.describe()
    );
    pairs
}

/// The segment the capture recorded just before the one ending `gap`, from `from`.
fn previous_from<'a>(j: &'a Judged, gap: &TruthGap, from: Side) -> &'a Captured {
    j.result.captured[..gap.packet as usize - 1]
        .iter()
        .rev()
        .find(|c| c.segment.from == from)
        .expect("an earlier segment")
}

/// An HMI that writes 7 bytes then 67 with TCP_NODELAY, the 67 leaving while the 7 are
/// unacknowledged. Once, its 67 bytes follow a FreeBSD delayed ACK by 0.4 ms, on the
/// application's own clock.
#[test]
fn a_sender_seen_without_nagle_is_not_held_by_a_late_ack() {
    let mut file = scenario("linux", "freebsd", "script");
    file.client.options.nodelay = true;
    for k in 0..5 {
        let t = 10.0 + 100.0 * f64::from(k);
        file.workload.client_script.extend([(t, 7), (t + 0.2, 67)]);
        file.workload.server_script.push((t + 3.0, 20));
    }
    file.workload
        .client_script
        .extend([(510.0, 7), (610.4, 67)]);
    let j = judge(&file);
    j.assert_no_false_stall();
    let (gap, event) = *gaps_of(&j, CLIENT, 67).last().unwrap();
    let ack = previous_from(&j, gap, SERVER);
    assert_eq!(
        ack.segment.kind,
        SegmentKind::DelayedAck,
        "{}",
        j.describe()
    );
    assert!(gap.end - ack.time < MS, "{}", j.describe());
    assert_eq!(gap.label, Label::Class(StallClass::AppThinkTime));
    assert_eq!(event.class, StallClass::AppThinkTime, "{}", j.describe());
    assert!(event.evidence.basis.contains(Link::SenderNotUsingNagle));
}

/// A meter writing a 54-byte reading every 46 ms, Nagle on, whatever the ACKs do. The
/// Linux receiver, whose application reads 45 ms after data arrives, first acknowledges
/// each at once (quick-ack mode), then delays its ACKs 40 to 44 ms, so each later reading
/// follows an ACK by about the round trip.
#[test]
fn a_sender_on_its_own_clock_is_not_held_by_the_acks() {
    let mut file = scenario("linux", "linux", "periodic");
    file.server.reader.read_delay_ms = 45.0;
    file.workload.period_ms = 46.0;
    file.workload.transactions = 30;
    file.link.rtt_ms = 3.0;
    file.capture = Some("server".into());
    let j = judge(&file);
    let kinds: Vec<SegmentKind> = j
        .result
        .captured
        .iter()
        .filter(|c| c.segment.from == SERVER && !c.segment.syn)
        .map(|c| c.segment.kind)
        .collect();
    assert_eq!(kinds.first(), Some(&SegmentKind::PromptAck));
    assert!(kinds.contains(&SegmentKind::DelayedAck), "{kinds:?}");
    assert!(j.result.stalls.is_empty());
    j.assert_no_false_stall();
    assert!(!j.diagnosis.events.is_empty());
    for e in &j.diagnosis.events {
        assert_eq!(e.class, StallClass::AppThinkTime, "{}", j.describe());
    }
}

/// A stream into a reader with a 6,144-byte buffer that reads every 60 ms: each burst
/// the window update releases fills the window again, and the window, not an ACK's
/// timer, holds the sender.
#[test]
fn a_burst_that_fills_the_window_is_receiver_window() {
    let mut file = scenario("linux", "linux", "stream");
    file.workload.request = vec![8192];
    file.workload.transactions = 4;
    file.server.reader.rcvbuf = Some(6144);
    file.server.reader.read_interval_ms = 60.0;
    let j = judge(&file);
    j.assert_no_false_stall();
    let gaps = gaps_of(&j, CLIENT, 1448);
    for (gap, event) in gaps {
        assert_eq!(
            gap.label,
            Label::Class(StallClass::ReceiverWindow),
            "{}",
            gap.describe()
        );
        assert_eq!(event.class, StallClass::ReceiverWindow, "{}", j.describe());
        assert!(
            [
                Link::ZeroWindow,
                Link::WindowFullBeforeAck,
                Link::BurstFillsWindow
            ]
            .iter()
            .any(|&l| event.evidence.basis.contains(l)),
            "{}",
            j.describe()
        );
    }
}

/// Linux to Linux, six writes of `bytes` through a send buffer of the same size, over a
/// `rtt_ms` path with a 1 Mbit/s bottleneck.
fn through_send_buffer_and_bottleneck(bytes: u32, rtt_ms: f64) -> ScenarioFile {
    let mut file = scenario("linux", "linux", "stream");
    file.workload.request = vec![bytes];
    file.workload.transactions = 6;
    file.client.sndbuf = Some(bytes);
    file.link.rtt_ms = rtt_ms;
    file.link.bottleneck_bps = Some(1e6);
    file
}

/// Two full segments at a time through a 2,896-byte send buffer over a 300 ms path and
/// a 1 Mbit/s bottleneck: the receiver acknowledges the second at once (RFC 1122
/// 4.2.3.2), one round trip and a queue after the first left.
#[test]
fn an_ack_for_two_full_segments_is_not_a_held_ack() {
    let j = judge(&through_send_buffer_and_bottleneck(2896, 300.0));
    assert!(j.result.delayed_acks.is_empty(), "every ACK at once");
    assert!(j.result.gaps.iter().any(|g| g.end - g.start >= 300 * MS));
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.stall_count, 0, "{}", j.describe());
}

/// Flights of three full segments (a 4,344-byte send buffer) behind a 1 Mbit/s
/// bottleneck: they reach the receiver 12 ms apart, and each ACK comes at the link's pace.
#[test]
fn acks_paced_by_a_bottleneck_are_not_held_acks() {
    let j = judge(&through_send_buffer_and_bottleneck(4344, 1.0));
    // The ACKs of the data, each acknowledging at least a full segment more.
    let mut acked = 1;
    let mut acks: Vec<Nanos> = Vec::new();
    for c in &j.result.captured {
        let s = &c.segment;
        if s.from == SERVER
            && !s.syn
            && s.len == 0
            && s.ack >= acked + u64::from(j.result.client_mss)
        {
            acked = s.ack;
            acks.push(c.time);
        }
    }
    // A 1,514-byte frame takes 12.1 ms at 1 Mbit/s: the ACKs come no faster.
    assert!(acks.len() > 5);
    assert!(
        acks.windows(2).skip(1).all(|w| w[1] - w[0] >= 12 * MS),
        "{acks:?}"
    );
    assert!(j.result.stalls.is_empty());
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.stall_count, 0, "{}", j.describe());
}

/// A 22,080-byte response through a 64 kbit/s FIFO bottleneck beyond a capture point in
/// the middle of a 300 ms path: the link sends each full segment 189.2 ms (1,514 bytes at
/// 64 kbit/s) after the one before while it holds both, the receiver's ACK of each lone
/// one comes back in between, and the truth has no gap there. Nothing measures the link's
/// pace from the ACKs, so only the spacing of the segments of one flight shows it.
#[test]
fn segments_a_bottleneck_queued_are_not_released_by_the_acks_between_them() {
    let mut file = scenario("linux", "linux", "custom");
    file.capture = Some("tap".into());
    file.link.rtt_ms = 300.0;
    file.link.bottleneck_bps = Some(64e3);
    file.link.bottleneck_queue_packets = 30;
    file.workload.request = vec![479];
    file.workload.response = vec![22080];
    file.workload.transactions = 2;
    let j = judge(&file);
    let serialization = 1514 * 8 * 1_000_000_000 / 64_000;
    let queued: Vec<_> = j
        .result
        .gaps
        .iter()
        .filter(|g| g.sender == SERVER && g.label == Label::NoGap)
        .filter(|g| (g.end - g.start - serialization).abs() < MS)
        .collect();
    assert!(queued.len() > 10, "{}", j.describe());
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.stall_count, 0, "{}", j.describe());
}

/// A meter's one reading, acknowledged by FreeBSD's 100 ms timer, and its close two
/// periods (101 ms) after the write: a FIN without data, just after the delayed ACK.
/// Nothing was held.
#[test]
fn a_bare_fin_is_never_the_held_segment() {
    let mut file = scenario("linux", "freebsd", "periodic");
    file.workload.period_ms = 50.5;
    file.workload.transactions = 1;
    file.workload.request = vec![100];
    let j = judge(&file);
    let (gap, event) = gaps_of(&j, CLIENT, 0)[0];
    let ack = previous_from(&j, gap, SERVER);
    assert_eq!(
        ack.segment.kind,
        SegmentKind::DelayedAck,
        "{}",
        j.describe()
    );
    assert!(gap.end - ack.time < 2 * MS);
    assert_eq!(gap.label, Label::Class(StallClass::AppThinkTime));
    assert!(
        event.evidence.basis.contains(Link::BareFin),
        "{}",
        j.describe()
    );
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.stall_count, 0);
}

/// A server with TCP_NODELAY 17 ms from a FreeBSD client captured at the client: it
/// writes 1,348 bytes, then 600 bytes 110 ms later, before the client's 100 ms delayed
/// ACK can reach it. The 600 bytes reach the capture point after that ACK, sooner than
/// the round trip, their TSecr older than it.
#[test]
fn data_sent_before_the_ack_could_arrive_was_not_released_by_it() {
    let mut file = scenario("freebsd", "linux", "script");
    file.server.options.nodelay = true;
    file.link.rtt_ms = 34.0;
    for k in 0..4 {
        let t = 100.0 + 300.0 * f64::from(k);
        file.workload.client_script.push((t, 10));
        file.workload
            .server_script
            .extend([(t + 50.0, 1348), (t + 160.0, 600)]);
    }
    let j = judge(&file);
    j.assert_no_false_stall();
    for (gap, event) in gaps_of(&j, SERVER, 600) {
        let ack = previous_from(&j, gap, CLIENT);
        assert_eq!(
            ack.segment.kind,
            SegmentKind::DelayedAck,
            "{}",
            j.describe()
        );
        assert!(gap.end - ack.time < 34 * MS);
        assert!(ack.segment.timestamps.unwrap().0 > 0);
        assert!(
            event.evidence.basis.contains(Link::TsecrPredatesAck)
                || event
                    .evidence
                    .basis
                    .contains(Link::LeftBeforeAckCouldArrive),
            "{}",
            j.describe()
        );
    }
}

/// Two writes from an AIX client (classic Nagle, a 1 s minimum RTO) over a 2 ms path
/// whose far side stops forwarding for 700 ms right after the first write passed: the
/// server's ACK, sent at once (TCP_QUICKACK), reaches the capture point 700 ms later,
/// longer than any delayed-ACK timer may hold one (RFC 1122 4.2.3.2: under 0.5 s) and
/// sooner than the client's RTO. The second write waited for the path.
#[test]
fn an_ack_later_than_any_timer_is_unexplained() {
    let mut file = scenario("aix", "linux", "two-writes");
    file.server.options.quickack = true;
    file.link.rtt_ms = 2.0;
    file.link.outage_at_ms = Some(3.5);
    file.link.outage_ms = 700.0;
    file.workload.transactions = 3;
    let j = judge(&file);
    assert!(j.result.stalls.is_empty());
    assert!(j.result.captured.iter().all(|c| !c.segment.retransmission));
    j.assert_no_false_stall();
    let (gap, event) = gaps_of(&j, CLIENT, 6)[0];
    assert!(gap.end - gap.start >= 700 * MS);
    assert_eq!(event.class, StallClass::Unexplained, "{}", j.describe());
    assert!(event.evidence.basis.contains(Link::AckLaterThanAnyTimer));
}

/// A reader that stops: its window stays zero until the run ends (an hour), and the
/// Linux sender only probes it. The wait is reported, as the window's.
#[test]
fn a_window_closed_until_the_end_is_reported() {
    let mut file = scenario("linux", "linux", "stream");
    file.workload.transactions = 1;
    file.server.reader.rcvbuf = Some(4096);
    file.server.reader.stop_after_bytes = Some(0);
    let j = judge(&file);
    assert!(j.result.window_probes >= 3, "{}", j.result.window_probes);
    let last = j.result.captured.last().unwrap();
    let last_window = j
        .result
        .captured
        .iter()
        .rev()
        .find(|c| c.segment.from == SERVER)
        .map(|c| c.segment.window);
    assert_eq!(last_window, Some(0));
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.verdict, Verdict::ReceiverWindowLimited);
    let e = j
        .diagnosis
        .events
        .iter()
        .find(|e| e.evidence.basis.contains(Link::StillClosedAtEnd))
        .unwrap_or_else(|| panic!("{}", j.describe()));
    assert_eq!(e.class, StallClass::ReceiverWindow);
    // From the ACK that closed the window to the capture's last records.
    let closed = j
        .result
        .captured
        .iter()
        .find(|c| c.segment.from == SERVER && !c.segment.syn && c.segment.window == 0)
        .unwrap();
    assert_eq!(e.start, closed.time, "{e:#?}");
    assert!(last.time - e.end < MS, "{e:#?}");
}

/// The second write of a message made 8 ms after the delayed ACK of its first could
/// have come back: beyond the path and any turnaround. With timestamps (Linux to
/// FreeBSD) or without (Windows), it is no stall.
#[test]
fn a_release_later_than_the_path_allows_is_no_stall_whatever_tsecr_says() {
    for (client, server, gap_ms, timestamps) in [
        ("linux", "freebsd", 108.0, true),
        ("windows", "windows", 208.0, false),
    ] {
        let mut file = scenario(client, server, "two-writes");
        file.workload.request = vec![16, 44];
        file.workload.response = vec![44];
        file.workload.write_gap_ms = gap_ms;
        file.workload.transactions = 3;
        let j = judge(&file);
        assert!(
            j.result
                .captured
                .iter()
                .all(|c| c.segment.timestamps.is_some() == timestamps)
        );
        j.assert_no_false_stall();
        let late = gaps_of(&j, CLIENT, 44);
        assert_eq!(late.len(), 3, "{}", j.describe());
        for (gap, event) in late {
            let ack = previous_from(&j, gap, SERVER);
            assert_eq!(ack.segment.kind, SegmentKind::DelayedAck);
            assert!((7 * MS..9 * MS).contains(&(gap.end - ack.time)));
            assert_eq!(gap.label, Label::Class(StallClass::AppThinkTime));
            assert!(
                event.evidence.basis.contains(Link::LeftLongAfterAck),
                "{}",
                j.describe()
            );
        }
    }
}

/// A block from a sender that starts with one segment of congestion window (RFC 2581
/// IW 1, as INET's TcpReno) to a Windows receiver that delays the ACK of the lone
/// segment 200 ms, captured on the sender's host with segmentation offload: what the ACK
/// releases is one record of several segments. Nagle never holds a full segment.
#[test]
fn a_record_larger_than_the_mss_is_never_held_by_nagle() {
    let mut file = scenario("inet", "windows", "bulk");
    file.capture_offload = true;
    file.workload.transactions = 2;
    let j = judge(&file);
    j.assert_no_false_stall();
    let mss = j.result.client_mss;
    let large: Vec<_> = j
        .pairs()
        .into_iter()
        .filter(|(g, _)| g.sender == CLIENT && g.bytes > mss)
        .collect();
    assert!(
        large
            .iter()
            .any(|(g, _)| g.label == Label::Class(StallClass::DelayedAck)),
        "no record larger than the MSS released by a delayed ACK\n{}",
        j.describe()
    );
    for (gap, event) in large {
        assert_ne!(gap.label, Label::Class(StallClass::NagleDelayedAck));
        let event = event.unwrap_or_else(|| panic!("{}", j.describe()));
        assert_ne!(event.class, StallClass::NagleDelayedAck, "{}", j.describe());
    }
}

/// A FreeBSD server writes 3 bytes, 1 byte with MSG_OOB and 1 byte more: the last leaves
/// in urgent mode while data is unacknowledged, past Nagle (FreeBSD tcp_output, Linux
/// tcp_nagle_test), so it does not show Nagle off. Its later messages of 69 and 2 bytes
/// are held by Nagle until the client's 100 ms delayed ACK: stalls.
#[test]
fn urgent_data_does_not_count_against_nagle() {
    let mut file = scenario("freebsd", "freebsd", "script");
    file.workload.client_script = vec![(1.0, 5)];
    file.workload.server_script = vec![(10.0, 3), (10.1, 1), (10.2, 1)];
    file.workload.server_urgent = vec![1];
    for t in [300.0, 600.0] {
        file.workload.server_script.extend([(t, 69), (t + 0.03, 2)]);
    }
    let j = judge(&file);
    let urgent: Vec<_> = j.result.captured.iter().filter(|c| c.segment.urg).collect();
    assert_eq!(urgent.len(), 1, "the urgent byte alone carries URG");
    assert!(
        j.result.captured.iter().any(|c| c.segment.from == SERVER
            && c.segment.len == 1
            && !c.segment.urg
            && c.segment.held.is_none()),
        "the byte after the urgent one left unheld"
    );
    assert_eq!(j.result.stalls.len(), 2);
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.stall_count, 2, "{}", j.describe());
    for (gap, event) in gaps_of(&j, SERVER, 2) {
        assert_eq!(gap.label, Label::Class(StallClass::NagleDelayedAck));
        assert_eq!(event.class, StallClass::NagleDelayedAck, "{}", j.describe());
    }
}

/// A request over an 894 ms path to a Linux server that acknowledges it at once (quick-ack
/// mode) and answers 16 ms later: the wait is the path; only the 16 ms are the server's.
#[test]
fn path_latency_is_not_think_time() {
    let mut file = scenario("linux", "linux", "custom");
    file.workload.request = vec![627];
    file.workload.response = vec![1406];
    file.workload.server_think_ms = 16.0;
    file.workload.transactions = 3;
    file.link.rtt_ms = 894.0;
    let j = judge(&file);
    j.assert_no_false_stall();
    for (gap, event) in gaps_of(&j, SERVER, 1406) {
        assert_eq!(gap.label, Label::Class(StallClass::AppThinkTime));
        assert_eq!(event.class, StallClass::AppThinkTime, "{}", j.describe());
        let idle = event.idle.expect("an idle time");
        let think = 16 * MS;
        assert!((idle - think).abs() < MS, "idle {idle}\n{}", j.describe());
    }
}

/// Seed 002's exchange between Linux hosts, captured on the client: "hello " leaves, the
/// server's delayed ACK releases "world\n", the reply comes.
#[test]
fn write_write_read_is_nagle_delayed_ack_held_by_client_delayed_by_server() {
    let j = judge(&scenario("linux", "linux", "two-writes"));
    j.assert_no_false_stall();
    let d = &j.diagnosis;
    assert!(!j.result.stalls.is_empty());
    assert_eq!(d.stall_count, j.result.stalls.len(), "{}", j.describe());
    assert_eq!(d.verdict, Verdict::NagleDelayedAckStalls);
    assert_eq!(d.holder, Some(Role::Client));
    assert_eq!(d.delayer, Some(Role::Server));
    assert_eq!(d.pattern, Some(Pattern::WriteWriteRead));
    assert_eq!(
        d.delayed_ack.as_ref().unwrap().reading.timer,
        TimerGuess::Linux40
    );
    for e in d.events.iter().filter(|e| e.class.is_tcp_stall()) {
        assert_eq!(e.class, StallClass::NagleDelayedAck);
        assert_eq!(e.held_bytes, 6);
        assert!(e.evidence.outstanding_small_segment);
    }
    let first = d.fixes().next().expect("a fix");
    assert_eq!(first.role, Role::Client);
    assert!(first.action.to_string().contains("one call"));
}

/// Seed 000's block of 100,000 bytes between Windows hosts (classic Nagle, a 200 ms
/// timer): at MSS 1448 it is 69 full segments and 88 bytes, and the odd segment's ACK
/// waits for the timer while Nagle holds the tail; at Windows' own MSS 1460 it is 68 and
/// 720 bytes, and nothing waits.
#[test]
fn a_bulk_block_stalls_on_its_tail_only_with_an_odd_segment_count() {
    let mut file = scenario("windows", "windows", "bulk");
    file.workload.transactions = 3;
    file.server.mss = Some(1448);
    let j = judge(&file);
    j.assert_no_false_stall();
    let d = &j.diagnosis;
    assert_eq!(d.stall_count, j.result.stalls.len(), "{}", j.describe());
    assert!(d.stall_count >= 2);
    assert_eq!(d.pattern, Some(Pattern::BulkOddTail { full_segments: 69 }));
    assert!(d.classic_nagle_evidence);
    assert_eq!(
        d.delayed_ack.as_ref().unwrap().reading.timer,
        TimerGuess::Fixed200
    );
    let first = d.fixes().next().expect("a fix");
    assert!(first.action.to_string().contains("double buffering"));

    file.server.mss = None;
    let j = judge(&file);
    assert!(j.result.stalls.is_empty());
    j.assert_no_false_stall();
    assert_eq!(j.diagnosis.verdict, Verdict::NoStall, "{}", j.describe());
}

/// A server whose delayed-ACK timer is shorter than any known stack's (15 ms; suricata-
/// verify's smb-eicar-ph shows a Windows server ACK a lone fragment after 12 to 25 ms),
/// over a 0.8 ms LAN, seen at the client. Its replies come within the round trip, which
/// bounds the path (RFC 9293 3.4): each late ACK waited at the server, and is no queue
/// for the next one to be read against. Every stall is found.
#[test]
fn acks_a_short_timer_held_are_no_queue_the_replies_between_them_deny() {
    let mut file = scenario("linux", "windows", "two-writes");
    file.link.rtt_ms = 0.8;
    file.server.delack_ms = Some(15.0);
    file.workload.transactions = 20;
    let j = judge(&file);
    let truth = j.result.gaps.iter().filter(|g| g.label.is_stall()).count();
    assert_eq!(truth, 20, "{}", j.describe());
    let found = j
        .pairs()
        .iter()
        .filter(|(g, e)| {
            g.label.is_stall() && e.is_some_and(|e| e.class == StallClass::NagleDelayedAck)
        })
        .count();
    assert_eq!(found, truth, "{}", j.describe());
    j.assert_no_false_stall();
}

/// AIX's 200 ms fast timer (a global tick, as classic BSD's `tcp_fasttimo`) delaying a
/// Linux client's requests that follow a steady 50 ms think time over a steady 150 ms path:
/// each exchange meets the tick at the same phase, so every delay is one value that
/// Linux's 40 ms timer could give, but the timer's ACKs leave a whole number of 200 ms
/// apart. From every capture point the delayer is read as the tick, not as Linux.
#[test]
fn a_tick_met_at_a_steady_phase_is_read_from_the_acks_spacing() {
    for capture in ["client", "server", "tap"] {
        let mut file = scenario("linux", "aix", "two-writes");
        file.capture = Some(capture.into());
        file.link.rtt_ms = 150.0;
        file.link.jitter_ms = 0.1;
        file.workload.client_think_ms = 50.0;
        file.workload.transactions = 10;
        let j = judge(&file);
        let profile = j.diagnosis.delayed_ack.as_ref().expect("a delayer");
        assert!(
            (30 * MS..=60 * MS).contains(&profile.reading.median),
            "at the {capture}: one delay within Linux's timer\n{}",
            j.describe()
        );
        assert_eq!(
            (profile.reading.timer, profile.reading.could_be.as_slice()),
            (TimerGuess::Other, &[TimerGuess::PhasedTick200][..]),
            "at the {capture}\n{}",
            j.describe()
        );
    }
}

/// A Windows writer streaming into a Linux reader with an 8,192-byte buffer that reads
/// 1,024 bytes every 20 ms: its last, short segment waits behind Nagle until the reader
/// has made room twice, and the ACK that room sends (__tcp_cleanup_rbuf) comes 40 ms on,
/// as late as Linux's timer would be. The window it offers, twice what was left, shows a
/// read sent it: no stall.
#[test]
fn an_ack_a_read_sent_as_it_opened_the_window_is_not_held_by_a_timer() {
    let mut file = common::scenario_file("lookalike-slow-reader.toml");
    file.link.rtt_ms = 1.0;
    let j = judge(&file);
    let mut read_releases = 0;
    for (gap, event) in j.pairs() {
        let TruthCause::Held {
            released_by: Some((SegmentKind::ReadAck, _, _)),
            ..
        } = gap.cause
        else {
            continue;
        };
        read_releases += 1;
        let class = event.map(|e| e.class);
        assert!(
            !class.is_some_and(StallClass::is_tcp_stall),
            "{class:?}: {}\n{}",
            gap.describe(),
            j.describe()
        );
    }
    assert!(read_releases > 0, "no release by a read\n{}", j.describe());
}
