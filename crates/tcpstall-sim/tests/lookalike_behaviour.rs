//! What the simulator does for each look-alike of a stall, packet by packet, and the
//! true class it gives the gaps: windows that close and reopen, persist probes, window
//! updates on reads, senders on their own clock, a bottleneck queue, offloaded and lossy
//! captures, two responses read in one call, a path that stops forwarding for a while, a
//! reader that stops, urgent data.

use std::io::Cursor;

use tcpstall_core::analyze::{Analysis, AnalyzeOptions, analyze};
use tcpstall_core::capture::PcapWriter;
use tcpstall_core::detect::StallClass;
use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos, Segment};
use tcpstall_sim::RunResult;
use tcpstall_sim::endpoint::SegmentKind;
use tcpstall_sim::engine::capture_segments;
use tcpstall_sim::engine::{CLIENT, SERVER};
use tcpstall_sim::scenario::ScenarioFile;
use tcpstall_sim::truth::Label;

const MS: Nanos = NANOS_PER_MILLI;

mod common;
use common::{run, scenario};

/// A one-way stream of 8 KB blocks into a server that reads `read` bytes every
/// `interval_ms` from a buffer of `rcvbuf` bytes.
fn slow_reader(rcvbuf: u32, read: u32, interval_ms: f64) -> ScenarioFile {
    let mut file = scenario("linux", "linux", "stream");
    file.workload.request = vec![8192];
    file.workload.transactions = 4;
    file.link.rtt_ms = 1.0;
    file.server.reader.rcvbuf = Some(rcvbuf);
    file.server.reader.read_bytes = Some(read);
    file.server.reader.read_interval_ms = interval_ms;
    file
}

#[test]
fn a_slow_readers_window_closes_and_reopens_and_the_sender_keeps_inside_it() {
    let result = run(&slow_reader(8192, 1024, 20.0));
    assert!(result.completed);
    let windows: Vec<u64> = result
        .captured
        .iter()
        .filter(|c| c.segment.from == SERVER && !c.segment.syn)
        .map(|c| c.segment.window)
        .collect();
    let closed = windows.iter().position(|&w| w == 0).expect("a zero window");
    assert!(
        windows[closed..].iter().any(|&w| w >= 1448),
        "the window reopens: {windows:?}"
    );
    // Every data segment ends inside the window the server last offered.
    let mut right_edge = 0;
    for c in &result.captured {
        let s = &c.segment;
        if s.from == SERVER && !s.syn {
            right_edge = s.ack + s.window;
        } else if s.from == CLIENT && s.len > 0 && right_edge > 0 {
            assert!(
                s.seq + u64::from(s.len) <= right_edge || s.kind == SegmentKind::WindowProbe,
                "segment {}..{} beyond the edge {right_edge}",
                s.seq,
                s.seq + u64::from(s.len)
            );
        }
    }
}

#[test]
fn reads_send_window_updates() {
    let result = run(&slow_reader(8192, 1024, 20.0));
    let updates: Vec<_> = result
        .captured
        .iter()
        .filter(|c| c.segment.from == SERVER && c.segment.kind == SegmentKind::ReadAck)
        .collect();
    assert!(!updates.is_empty(), "no window update");
    // An update acknowledges nothing new: it only opens the window.
    let mut last: Option<(u64, u64)> = None;
    let mut pure_updates = 0;
    for c in result
        .captured
        .iter()
        .filter(|c| c.segment.from == SERVER && !c.segment.syn)
    {
        let s = &c.segment;
        if let Some((ack, window)) = last
            && s.kind == SegmentKind::ReadAck
            && s.ack == ack
            && s.window > window
        {
            pure_updates += 1;
        }
        last = Some((s.ack, s.window));
    }
    assert!(pure_updates > 0, "no update that only opened the window");
}

#[test]
fn the_persist_timer_probes_a_closed_window_with_backoff() {
    // 512 bytes every 2 s from a 4 KB buffer: Linux offers nothing until an MSS is free,
    // so the window stays shut for seconds and the sender probes.
    let mut file = slow_reader(4096, 512, 2000.0);
    file.workload.transactions = 1;
    let result = run(&file);
    let probes: Vec<Nanos> = result
        .captured
        .iter()
        .filter(|c| c.segment.kind == SegmentKind::WindowProbe)
        .map(|c| c.time)
        .collect();
    assert!(probes.len() >= 3, "{} probes", probes.len());
    let intervals: Vec<Nanos> = probes.windows(2).map(|p| p[1] - p[0]).collect();
    // Each probe that finds the window still closed doubles the interval (tcp_probe0_when).
    let doubled = intervals
        .windows(2)
        .filter(|i| i[1] >= 2 * i[0] - MS && i[1] <= 2 * i[0] + MS)
        .count();
    assert!(doubled >= 1, "intervals {intervals:?}");
    // The probes are answered at once, with the window as it is.
    assert!(
        result
            .captured
            .iter()
            .any(|c| c.segment.kind == SegmentKind::ProbeAnswer)
    );
    assert!(
        result
            .gaps
            .iter()
            .any(|g| g.label == Label::Class(StallClass::ReceiverWindow))
    );
}

#[test]
fn a_bsd_sender_probes_with_one_byte() {
    let mut file = slow_reader(4096, 512, 2000.0);
    file.client.stack = "freebsd".into();
    file.workload.transactions = 1;
    let result = run(&file);
    assert!(
        result
            .captured
            .iter()
            .any(|c| c.segment.kind == SegmentKind::WindowProbe && c.segment.len == 1),
        "no one-byte probe"
    );
}

fn periodic(receiver: &str, period_ms: f64) -> ScenarioFile {
    let mut file = scenario("linux", receiver, "periodic");
    file.client.options.nodelay = true;
    file.workload.period_ms = period_ms;
    file.workload.transactions = 20;
    file.link.rtt_ms = 1.0;
    file
}

#[test]
fn a_nodelay_sender_on_its_period_ignores_acks() {
    // Windows' ACK waits 200 ms for a second segment; the client writes every 20 ms.
    let result = run(&periodic("windows", 20.0));
    let sends: Vec<&tcpstall_sim::capture::Captured> = result
        .captured
        .iter()
        .filter(|c| c.segment.from == CLIENT && c.segment.len > 0)
        .collect();
    assert_eq!(sends.len(), 20);
    for pair in sends.windows(2) {
        let spacing = pair[1].time - pair[0].time;
        assert!((spacing - 20 * MS).abs() < MS / 10, "spacing {spacing}");
        assert!(pair[1].segment.held.is_none());
    }
    // Some messages left while the one before was still unacknowledged.
    let mut acked = 1;
    let mut sent_unacked = 0;
    for c in &result.captured {
        let s = &c.segment;
        if s.from == SERVER {
            acked = acked.max(s.ack);
        } else if s.len > 0 && s.seq > acked {
            sent_unacked += 1;
        }
    }
    assert!(sent_unacked > 0);
    // Every gap is the application's period.
    assert!(!result.gaps.is_empty());
    assert!(
        result
            .gaps
            .iter()
            .all(|g| g.label == Label::Class(StallClass::AppThinkTime)),
        "{:?}",
        result.gaps.iter().map(|g| g.label).collect::<Vec<_>>()
    );
    assert!(result.stalls.is_empty());
}

#[test]
fn a_linux_receiver_acks_a_pushed_segment_when_it_is_read_late() {
    // After quick-ack mode, the ACK waits for the timer or for the read 45 ms later,
    // whichever comes first (__tcp_cleanup_rbuf), outside ping-pong mode.
    let mut file = periodic("linux", 50.0);
    file.server.reader.read_delay_ms = 45.0;
    file.workload.transactions = 30;
    let result = run(&file);
    assert!(
        result
            .captured
            .iter()
            .any(|c| c.segment.from == SERVER && c.segment.kind == SegmentKind::ReadAck)
    );
    assert!(
        result
            .gaps
            .iter()
            .all(|g| g.label == Label::Class(StallClass::AppThinkTime))
    );
}

fn through_bottleneck(bps: Option<f64>) -> ScenarioFile {
    let mut file = scenario("linux", "linux", "bulk");
    file.workload.transactions = 2;
    file.link.rtt_ms = 1.0;
    file.link.bottleneck_bps = bps;
    file.link.bottleneck_queue_packets = 1000;
    file
}

/// The longest time from a client data segment to the first ACK covering it, at the
/// client.
fn longest_ack_wait(result: &RunResult) -> Nanos {
    let mut waiting: Vec<(u64, Nanos)> = Vec::new();
    let mut longest = 0;
    for c in &result.captured {
        let s = &c.segment;
        if s.from == CLIENT && s.len > 0 {
            waiting.push((s.seq + u64::from(s.len), c.time));
        } else if s.from == SERVER {
            waiting.retain(|&(end, sent)| {
                let covered = s.ack >= end;
                if covered {
                    longest = longest.max(c.time - sent);
                }
                !covered
            });
        }
    }
    longest
}

#[test]
fn a_bottleneck_queue_delays_the_acks() {
    let idle = run(&through_bottleneck(None));
    let loaded = run(&through_bottleneck(Some(5e6)));
    assert!(
        longest_ack_wait(&idle) < 2 * MS,
        "{}",
        longest_ack_wait(&idle)
    );
    assert!(
        longest_ack_wait(&loaded) > 20 * MS,
        "{}",
        longest_ack_wait(&loaded)
    );
    // Holds released by those late but prompt ACKs are path time, not stalls.
    assert!(loaded.stalls.is_empty());
    assert!(loaded.gaps.iter().all(|g| !g.label.is_stall()
        && g.label != Label::Class(StallClass::AppThinkTime)
        || g.sender == SERVER));
}

#[test]
fn offload_makes_records_larger_than_the_mss_and_the_wire_keeps_them_small() {
    let mut file = scenario("windows", "linux", "bulk");
    file.workload.transactions = 2;
    let plain = run(&file);
    file.capture_offload = true;
    let offloaded = run(&file);
    let largest = |r: &RunResult| r.captured.iter().map(|c| c.segment.len).max().unwrap_or(0);
    let bytes =
        |r: &RunResult| -> u64 { r.captured.iter().map(|c| u64::from(c.segment.len)).sum() };
    assert_eq!(largest(&plain), 1460);
    assert!(largest(&offloaded) > 1460, "{}", largest(&offloaded));
    assert!(largest(&offloaded) <= 65_535);
    assert_eq!(bytes(&plain), bytes(&offloaded));
    assert!(offloaded.captured.len() < plain.captured.len());
    assert_eq!(plain.segments_sent, offloaded.segments_sent);
}

#[test]
fn a_lossy_capture_misses_records_and_the_link_does_not() {
    let mut file = scenario("windows", "aix", "two-writes");
    file.workload.transactions = 8;
    let whole = run(&file);
    file.capture_miss = 0.2;
    let lossy = run(&file);
    assert_eq!(whole.segments_sent, lossy.segments_sent);
    assert_eq!(whole.transactions.len(), lossy.transactions.len());
    assert!(lossy.captured.len() < whole.captured.len());
    assert!(lossy.gaps.iter().any(|g| !g.observable));
    assert!(
        lossy
            .gaps
            .iter()
            .filter(|g| !g.observable)
            .all(|g| g.accepts(Label::Class(StallClass::Unexplained)))
    );
}

/// Requests issued at the same instant as the one before them (after the first two).
fn back_to_back_requests(result: &RunResult) -> usize {
    result
        .transactions
        .windows(2)
        .skip(1)
        .filter(|t| t[0].start_nanos == t[1].start_nanos)
        .count()
}

#[test]
fn a_late_reader_takes_two_responses_in_one_call_and_writes_two_requests() {
    let mut file = scenario("linux", "linux", "pipeline");
    file.workload.depth = 2;
    file.workload.transactions = 12;
    let prompt = run(&file);
    file.client.reader.read_delay_ms = 2.0;
    let late = run(&file);
    assert_eq!(back_to_back_requests(&prompt), 0);
    assert!(back_to_back_requests(&late) > 0);
    // The pieces of the second request wait behind the first one's: real stalls.
    assert!(
        late.gaps
            .iter()
            .any(|g| g.label == Label::Class(StallClass::NagleDelayedAck))
    );
}

#[test]
fn offloaded_captures_keep_their_stalls_in_the_truth() {
    let mut file = scenario("linux", "linux", "two-writes");
    file.capture = Some("server".into());
    file.capture_offload = true;
    let result = run(&file);
    let stalls = result
        .gaps
        .iter()
        .filter(|g| g.label == Label::Class(StallClass::NagleDelayedAck))
        .count();
    assert_eq!(stalls, result.stalls.len());
    assert!(stalls >= 8, "{stalls}");
}

#[test]
fn an_outage_holds_packets_in_order_and_loses_none() {
    let mut file = scenario("linux", "linux", "two-writes");
    file.link.rtt_ms = 2.0;
    file.workload.transactions = 3;
    let plain = run(&file);
    file.link.outage_at_ms = Some(3.5);
    file.link.outage_ms = 300.0;
    let cut = run(&file);
    assert!(cut.completed);
    assert_eq!(
        plain.segments_sent, cut.segments_sent,
        "nothing lost or resent"
    );
    // The server's first ACK reaches the capture point at the client when the path
    // resumes, and nothing passes it meanwhile.
    let resumed = 303_500_000;
    assert!(
        cut.captured
            .iter()
            .all(|c| c.segment.from == CLIENT || c.time < 3_500_000 || c.time >= resumed)
    );
    let first_ack = cut
        .captured
        .iter()
        .find(|c| c.segment.from == SERVER && !c.segment.syn)
        .unwrap();
    assert_eq!(first_ack.time, resumed);
    assert!(cut.end_time - plain.end_time >= 300 * MS - MS);
    let mut bad = file.clone();
    bad.link.outage_ms = -1.0;
    assert!(bad.resolve().is_err());
}

#[test]
fn a_reader_that_stops_reads_no_more_and_its_window_stays_closed() {
    let mut file = slow_reader(4096, 1024, 20.0);
    file.workload.transactions = 1;
    file.server.reader.stop_after_bytes = Some(3072);
    let result = run(&file);
    // One 64 KiB block never completes: the reader took 3 KiB and stopped.
    assert!(!result.completed);
    let last = result
        .captured
        .iter()
        .rev()
        .find(|c| c.segment.from == SERVER)
        .unwrap();
    assert_eq!(last.segment.window, 0);
    // What the client got acknowledged is what fits: 3 KiB read and 4 KiB buffered.
    assert!(last.segment.ack - 1 <= 3072 + 4096, "{}", last.segment.ack);
    assert!(result.window_probes >= 3);
}

#[test]
fn urgent_data_goes_past_nagle_until_it_is_acknowledged() {
    // A FreeBSD server writes 3 bytes, then 1 with MSG_OOB, then 1, back to back; later
    // 69 and 2 bytes, the 2 after the urgent byte was acknowledged.
    let mut file = scenario("freebsd", "freebsd", "script");
    file.workload.client_script = vec![(1.0, 5)];
    file.workload.server_script = vec![(10.0, 3), (10.1, 1), (10.2, 1), (300.0, 69), (300.1, 2)];
    file.workload.server_urgent = vec![1];
    let result = run(&file);
    let server_data: Vec<&tcpstall_sim::capture::Captured> = result
        .captured
        .iter()
        .filter(|c| c.segment.from == SERVER && c.segment.len > 0)
        .collect();
    let lens: Vec<u32> = server_data.iter().map(|c| c.segment.len).collect();
    assert_eq!(lens, [3, 1, 1, 69, 2]);
    // Classic Nagle would hold the urgent byte and the one after it behind the 3 bytes;
    // in urgent mode they leave at once.
    assert!(server_data[1..3].iter().all(|c| c.segment.held.is_none()));
    assert!(server_data[1].segment.urg && !server_data[2].segment.urg);
    assert!(server_data[2].time - server_data[0].time < MS);
    // Once the urgent byte is acknowledged, Nagle holds small segments again.
    assert!(matches!(
        server_data[4].segment.held,
        Some((tcpstall_sim::endpoint::HoldReason::Nagle, _))
    ));
    let mut bad = file.clone();
    bad.workload.server_urgent = vec![5];
    assert!(bad.resolve().is_err());
}

/// A capture taken on several mirrored links holds each packet 2 to 4 times, each copy
/// behind its original with other packets between (as arkime's wireshark-retrans sample
/// does; here up to 300 us behind, within a side's last four segments). The copies are
/// counted and left out, and the detector reads the gaps as in the capture holding each
/// packet once. A bulk transfer losing 1 % at 100 Mbit/s, so that the receiver's
/// duplicate ACKs, the same header and TSval within its clock's tick but for the IP ID,
/// stay in.
#[test]
fn copies_of_each_packet_from_mirrored_links_are_left_out() {
    let mut file = scenario("linux", "macos", "bulk");
    file.workload.transactions = 10;
    file.link.rtt_ms = 80.0;
    file.link.bandwidth_bps = 1e8;
    file.link.loss = 0.01;
    let scenario = file.resolve().expect("valid scenario");
    let result = tcpstall_sim::run(&scenario, true);
    let once = capture_segments(&result, scenario.link.seed);
    let mut mirrored = Vec::new();
    // Copies after the last ACK, which closes the connection, are counted apart (as
    // segments that came after their connection closed): none is made.
    let closed = once.last().expect("a capture").time;
    for (i, segment) in once.iter().enumerate() {
        for copy in 0..1 + i % 4 {
            let mut seen = *segment;
            seen.time += (copy * (1 + i % 5)) as Nanos * 20_000;
            if copy == 0 || seen.time < closed {
                mirrored.push(seen);
            }
        }
    }
    mirrored.sort_by_key(|s| s.time);
    let analyze_segments = |segments: &[Segment]| {
        let mut writer = PcapWriter::new(Vec::new(), 0).expect("a pcap in memory");
        for segment in segments {
            writer.write_segment(segment).expect("written to memory");
        }
        analyze(
            Cursor::new(writer.into_inner()),
            "simulation",
            &AnalyzeOptions::default(),
        )
        .expect("analyzes")
    };
    let events = |analysis: &Analysis| -> Vec<(Nanos, &'static str)> {
        analysis
            .connections
            .iter()
            .flat_map(|c| c.events.iter().map(|e| (e.end, e.class.name())))
            .collect()
    };
    let (single, copied) = (analyze_segments(&once), analyze_segments(&mirrored));
    assert_eq!(single.input.duplicates, 0);
    assert_eq!(
        copied.input.duplicates as usize,
        mirrored.len() - once.len()
    );
    // What the stacks sent again themselves, header for header but for the IP ID, within
    // 100 ms: the duplicate ACKs and resends a copy must not be taken for.
    let lookalikes = once
        .iter()
        .enumerate()
        .filter(|&(i, s)| {
            once[i.saturating_sub(8)..i].iter().any(|earlier| {
                Segment {
                    time: s.time,
                    ip_id: s.ip_id,
                    ..*earlier
                } == *s
                    && s.time - earlier.time < 100 * MS
            })
        })
        .count();
    assert!(lookalikes > 10, "only {lookalikes} segments sent again");
    // The stalls found in the capture with copies: the truth's, and as many as without.
    let stalls: Vec<Nanos> = events(&copied)
        .iter()
        .filter(|(_, class)| class.contains("delayed-ack"))
        .map(|&(end, _)| end)
        .collect();
    assert!(stalls.len() >= 10, "only {} stalls found", stalls.len());
    for end in &stalls {
        assert!(
            result
                .gaps
                .iter()
                .any(|g| g.end == *end && g.label.is_stall()),
            "a stall at {end} ns the truth does not have"
        );
    }
    assert_eq!(events(&copied), events(&single));
}
