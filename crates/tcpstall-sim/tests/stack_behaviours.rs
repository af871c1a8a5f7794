//! Behaviours the detector's rules speak of, each shown happening in the simulator: a
//! delay that varies without reordering, each stack's TS.Recent rule and TSval clock,
//! both ends holding data at once, a send buffer paced by a bottleneck, TCP_CORK and
//! MSG_MORE holds, and a Nagle hold released by a prompt ACK over a long path.

use std::collections::HashMap;

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};
use tcpstall_sim::RunResult;
use tcpstall_sim::capture::Captured;
use tcpstall_sim::endpoint::{HoldReason, SegmentKind};
use tcpstall_sim::engine::{CLIENT, SERVER};
use tcpstall_sim::scenario::ScenarioFile;

const MS: Nanos = NANOS_PER_MILLI;

mod common;
use common::run;

fn scenario(client: &str, server: &str, pattern: &str, rtt_ms: f64) -> ScenarioFile {
    let mut file = common::scenario(client, server, pattern);
    file.link.rtt_ms = rtt_ms;
    file
}

/// Data segments a Nagle hold kept until a timer-delayed ACK, each with that ACK.
fn released_by_delayed_acks(result: &RunResult) -> Vec<(&Captured, &Captured)> {
    let by_id: HashMap<u64, &Captured> =
        result.captured.iter().map(|c| (c.segment.id, c)).collect();
    result
        .captured
        .iter()
        .filter(|c| matches!(c.segment.held, Some((HoldReason::Nagle, _))))
        .filter_map(|c| {
            let ack = by_id.get(&c.segment.released_by?)?;
            (ack.segment.kind == SegmentKind::DelayedAck).then_some((c, *ack))
        })
        .collect()
}

#[test]
fn an_rfc_1323_holder_echoes_the_older_tsval_and_an_rfc_7323_one_the_acks() {
    let mut strict = scenario("linux", "linux", "two-writes", 1.0);
    strict.client.ts_recent = Some("rfc1323".into());
    let result = run(&strict);
    let released = released_by_delayed_acks(&result);
    assert!(!released.is_empty(), "the client's second writes stall");
    for (data, ack) in &released {
        let (_, tsecr) = data.segment.timestamps.unwrap();
        let (ack_tsval, _) = ack.segment.timestamps.unwrap();
        // A pure ACK never sets TS.Recent under RFC 1323: the TSecr stays on the TSval
        // of the server's last data, sent before its ACK.
        assert!(
            tsecr < ack_tsval,
            "TSecr {tsecr} against the ACK's {ack_tsval}"
        );
    }
    let result = run(&scenario("linux", "linux", "two-writes", 1.0));
    let released = released_by_delayed_acks(&result);
    assert!(!released.is_empty());
    for (data, ack) in &released {
        assert_eq!(
            data.segment.timestamps.unwrap().1,
            ack.segment.timestamps.unwrap().0
        );
    }
}

#[test]
fn a_tsval_clock_ticks_at_its_profiles_rate() {
    let ticks = |hz: f64| {
        let mut file = scenario("linux", "linux", "interactive", 1.0);
        file.client.ts_hz = Some(hz);
        let result = run(&file);
        let client: Vec<&Captured> = result
            .captured
            .iter()
            .filter(|c| c.segment.from == CLIENT)
            .collect();
        let (first, last) = (client[0], client[client.len() - 1]);
        let elapsed = (last.time - first.time) as f64 / 1e9;
        let advanced = last.segment.timestamps.unwrap().0 - first.segment.timestamps.unwrap().0;
        (elapsed, f64::from(advanced))
    };
    // Twenty keystrokes 150 ms apart: about three seconds.
    let (elapsed, advanced) = ticks(2.0);
    assert!(
        (advanced - 2.0 * elapsed).abs() <= 1.0,
        "{advanced} in {elapsed} s"
    );
    let (elapsed, advanced) = ticks(10.0);
    assert!(
        (advanced - 10.0 * elapsed).abs() <= 1.0,
        "{advanced} in {elapsed} s"
    );
    // A clock 0.5 % slow loses 5 ticks a second against a 1 kHz one.
    let (elapsed, advanced) = ticks(995.0);
    assert!(
        (advanced - 995.0 * elapsed).abs() <= 1.0,
        "{advanced} in {elapsed} s"
    );
    assert!(advanced < 1000.0 * elapsed - 10.0);
}

#[test]
fn a_bad_ts_recent_rule_or_clock_is_refused() {
    let mut file = scenario("linux", "linux", "two-writes", 1.0);
    file.client.ts_recent = Some("always".into());
    assert!(file.resolve().is_err());
    let mut file = scenario("linux", "linux", "two-writes", 1.0);
    file.server.ts_hz = Some(5000.0);
    assert!(file.resolve().is_err());
    let text = "[client]\nts_recent = \"rfc1323\"\nts_hz = 2\n[link]\ndelay_variation = 0.2\n";
    let file = ScenarioFile::from_toml(text).unwrap();
    let scenario = file.resolve().unwrap();
    assert_eq!(scenario.client.profile.ts_hz, 2.0);
    assert_eq!(scenario.link.delay_variation, 0.2);
}

#[test]
fn a_varying_delay_varies_the_round_trip_without_reordering() {
    let mut file = scenario("linux", "linux", "bulk", 80.0);
    file.link.delay_variation = 0.3;
    file.workload.transactions = 3;
    file.capture = Some("tap".into());
    let result = run(&file);
    assert!(result.completed);
    for side in [CLIENT, SERVER] {
        let data: Vec<&Captured> = result
            .captured
            .iter()
            .filter(|c| c.segment.from == side && c.segment.len > 0)
            .collect();
        // In sequence order at the tap: nothing overtook.
        assert!(data.windows(2).all(|w| w[0].segment.seq < w[1].segment.seq));
        let transits: Vec<Nanos> = data.iter().map(|c| c.time - c.segment.sent).collect();
        let (min, max) = (transits.iter().min(), transits.iter().max());
        if side == CLIENT {
            let (min, max) = (*min.unwrap(), *max.unwrap());
            // Half of the 40 ms one-way delay to the tap, up to 30 % more.
            assert!(min >= 20 * MS && max <= 27 * MS, "{min} {max}");
            assert!(max - min > 3 * MS, "the delay varies: {min} to {max}");
        }
    }
}

#[test]
fn in_a_two_way_exchange_both_ends_are_held_and_each_ack_delayed_by_the_other() {
    let mut file = scenario("linux", "linux", "two-way", 1.0);
    file.workload.transactions = 10;
    let result = run(&file);
    assert!(result.completed);
    for (holder, delayer) in [("client", "server"), ("server", "client")] {
        assert!(
            result.stalls.iter().any(|s| s.holder == holder
                && s.delayer == delayer
                && s.class == "nagle-delayed-ack"),
            "the {holder} is held until the {delayer}'s delayed ACK: {:?}",
            result.stalls
        );
    }
    // RFC 7323: a holder that owes an ACK for the peer's data when the releasing ACK
    // arrives keeps echoing the TSval of that data, older than the ACK's.
    let mut file = scenario("linux", "linux", "two-way", 20.0);
    file.workload.transactions = 10;
    let result = run(&file);
    assert!(result.completed);
    let owed = released_by_delayed_acks(&result)
        .into_iter()
        .filter(|(data, ack)| {
            let last_ack_sent = result
                .captured
                .iter()
                .filter(|c| c.segment.from == data.segment.from && c.segment.id < data.segment.id)
                .map(|c| c.segment.ack)
                .next_back()
                .unwrap();
            ack.segment.seq > last_ack_sent
        })
        .inspect(|(data, ack)| {
            let (_, tsecr) = data.segment.timestamps.unwrap();
            let (tsval, _) = ack.segment.timestamps.unwrap();
            assert!(tsecr < tsval, "TSecr {tsecr}, the ACK's TSval {tsval}");
        })
        .count();
    assert!(owed > 0, "a holder owed an ACK when it was released");
    // Every gap the capture shows ends in data whose truth names a class.
    assert!(!result.gaps.is_empty());
}

#[test]
fn a_full_send_buffer_waits_for_acks_the_bottleneck_paces_and_is_no_stall() {
    let mut file = scenario("linux", "linux", "bulk", 20.0);
    file.client.sndbuf = Some(4096);
    file.link.bottleneck_bps = Some(1e6);
    file.link.bottleneck_queue_packets = 30;
    file.workload.transactions = 2;
    let result = run(&file);
    assert!(result.completed);
    // Never more than the send buffer unacknowledged, as the client sees its ACKs.
    let mut acked = 1;
    for c in &result.captured {
        let s = &c.segment;
        if s.from == SERVER && !s.syn {
            acked = acked.max(s.ack);
        } else if s.from == CLIENT && s.len > 0 {
            assert!(s.seq + u64::from(s.len) - acked <= 4096, "{s:?}");
        }
    }
    let held: Vec<&Captured> = result
        .captured
        .iter()
        .filter(|c| matches!(c.segment.held, Some((HoldReason::SendBuffer, _))))
        .collect();
    assert!(held.len() > 20, "the writer waits for room again and again");
    // Released by ACKs the bottleneck paced, sent at once: no stall, and the gaps they
    // end are the path's.
    assert!(result.stalls.is_empty(), "{:?}", result.stalls);
    let send_buffer_gaps: Vec<_> = result
        .gaps
        .iter()
        .filter(|g| {
            held.iter()
                .any(|c| c.time == g.end && c.segment.from == g.sender)
        })
        .collect();
    assert!(!send_buffer_gaps.is_empty());
    assert!(
        send_buffer_gaps
            .iter()
            .all(|g| g.label == tcpstall_sim::truth::Label::NoGap)
    );
}

#[test]
fn cork_and_msg_more_hold_a_message_until_its_last_write_or_the_flush_timer() {
    use tcpstall_core::detect::StallClass;
    use tcpstall_sim::truth::Label;
    // TCP_CORK with the second write 250 ms after the first: Linux sends the corked
    // write after 200 ms (its cork ceiling), by the timer: the application's time.
    let mut file = scenario("linux", "windows", "two-writes", 1.0);
    file.client.options.cork = true;
    file.workload.write_gap_ms = 250.0;
    file.workload.transactions = 3;
    let result = run(&file);
    assert!(result.completed);
    let flushed: Vec<&Captured> = result
        .captured
        .iter()
        .filter(|c| matches!(c.segment.held, Some((HoldReason::Cork, held)) if held == 200 * MS))
        .collect();
    assert_eq!(
        flushed.len(),
        3,
        "each message's first write flushed after 200 ms"
    );
    assert!(flushed.iter().all(|c| c.segment.released_by.is_none()));
    let mut gaps = 0;
    for gap in result
        .gaps
        .iter()
        .filter(|g| flushed.iter().any(|c| c.time == g.end))
    {
        assert_eq!(
            gap.label,
            Label::Class(StallClass::AppThinkTime),
            "{}",
            gap.describe()
        );
        gaps += 1;
    }
    assert!(gaps > 0);
    assert!(
        result
            .holds
            .iter()
            .all(|h| h.reason != "cork" || h.released_by_delayed_ack.is_none())
    );
    // MSG_MORE with the writes 50 ms apart: the first waits for the second, and the
    // message leaves in one segment.
    let mut file = scenario("linux", "linux", "two-writes", 1.0);
    file.client.options.msg_more = true;
    file.workload.write_gap_ms = 50.0;
    file.workload.transactions = 3;
    let result = run(&file);
    let corked: Vec<&Captured> = result
        .captured
        .iter()
        .filter(|c| matches!(c.segment.held, Some((HoldReason::Cork, held)) if held == 50 * MS))
        .collect();
    assert_eq!(corked.len(), 3);
    assert!(corked.iter().all(|c| c.segment.len == 12));
    assert!(result.stalls.is_empty());
}

#[test]
fn a_nagle_hold_released_by_a_prompt_ack_over_400_ms_is_no_stall() {
    use tcpstall_sim::truth::Label;
    let mut file = scenario("windows", "linux", "two-writes", 400.0);
    file.server.options.quickack = true;
    file.link.delay_variation = 0.2;
    file.capture = Some("server".into());
    let result = run(&file);
    assert!(result.completed);
    let held: Vec<&Captured> = result
        .captured
        .iter()
        .filter(|c| matches!(c.segment.held, Some((HoldReason::Nagle, held)) if held >= 400 * MS))
        .collect();
    assert!(!held.is_empty(), "the second write waits a round trip");
    assert!(result.stalls.is_empty(), "{:?}", result.stalls);
    let mut gaps = 0;
    for gap in result
        .gaps
        .iter()
        .filter(|g| held.iter().any(|c| c.time == g.end))
    {
        assert_eq!(gap.label, Label::NoGap, "{}", gap.describe());
        gaps += 1;
    }
    assert!(gaps > 0, "the capture shows the round trip as a gap");
}

/// The most resends in a row that each waited for a timer-delayed ACK of their own.
fn resends_released_by_delayed_acks_in_a_row(result: &RunResult) -> usize {
    let by_id: HashMap<u64, &Captured> =
        result.captured.iter().map(|c| (c.segment.id, c)).collect();
    let (mut run, mut most, mut last_ack) = (0, 0, None);
    for c in result
        .captured
        .iter()
        .filter(|c| c.segment.from == CLIENT && c.segment.retransmission)
    {
        let timer_ack = c.segment.released_by.filter(|id| {
            by_id
                .get(id)
                .is_some_and(|a| a.segment.kind == SegmentKind::DelayedAck)
        });
        // Resends one ACK released together are one wait.
        if timer_ack.is_none() || timer_ack != last_ack {
            run = if timer_ack.is_some() { run + 1 } else { 0 };
        }
        last_ack = timer_ack;
        most = most.max(run);
    }
    most
}

#[test]
fn resends_after_a_loss_go_on_as_the_window_allows_not_one_per_delayed_ack() {
    // A bulk upload through a narrow queue loses runs of segments. After a timeout the
    // sender goes back to the first unacknowledged byte in slow start (RFC 5681 3.1),
    // and on a partial ACK resends what the receiver has not SACKed (RFC 8985 6.2): the
    // second resend makes an ACK due at once (RFC 1122 4.2.3.2), so a receiver that
    // delays a lone segment's ACK holds at most one resend of an episode, not each.
    for (stack, bps) in [("macos-legacy", 5e6), ("windows", 20e6), ("linux", 1e6)] {
        let client = if stack == "windows" { "linux" } else { stack };
        let mut file = scenario(client, stack, "bulk", 20.0);
        file.link.bottleneck_bps = Some(bps);
        file.link.bottleneck_queue_packets = 30;
        file.workload.transactions = 6;
        let result = run(&file);
        assert!(result.completed, "{stack}");
        let resends = result
            .captured
            .iter()
            .filter(|c| c.segment.from == CLIENT && c.segment.retransmission)
            .count();
        assert!(resends > 5, "{stack}: the queue drops ({resends} resends)");
        let most = resends_released_by_delayed_acks_in_a_row(&result);
        assert!(
            most <= 1,
            "{stack}: {most} resends in a row waited for a timer"
        );
    }
}
