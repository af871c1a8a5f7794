//! The detector on every look-alike family of the accuracy matrix: it must not report a
//! stall (`nagle-delayed-ack`, `delayed-ack`) on a gap whose true class is none, and on
//! the families whose stalls hide among other traffic it must find every observable one.
//! On paths whose delay varies, the families are held to what a capture can show: no
//! false stall where the capture point is beside the ACK's sender.

use tcpstall_core::analyze::AnalyzeOptions;
use tcpstall_sim::accuracy::{Accuracy, CellSpec, MatrixCell, cells, run_cell};

/// Runs every cell of `family` and returns the false stalls, with their reasons.
fn false_stalls(family: &str) -> (usize, Accuracy) {
    let options = AnalyzeOptions::default();
    let mut total = Accuracy::default();
    let mut runs = 0;
    for spec in cells(8).iter().filter(|c| c.family == family) {
        let cell = run_cell(spec, &options).expect("the family's scenarios are valid");
        runs += 1;
        let mut accuracy = cell.accuracy.clone();
        accuracy.misses.retain(|m| m.starts_with("false"));
        accuracy.misses.iter_mut().for_each(|m| {
            *m = format!(
                "{} -> {} {} RTT {} ms at {} ({}): {m}",
                cell.client, cell.server, cell.pattern, cell.rtt_ms, cell.capture, cell.variant
            )
        });
        total.add(&accuracy);
    }
    (runs, total)
}

/// The reasons `cell` gives for its mistakes of the `kinds` named (`false`, `missed`,
/// `wrong`), each led by `label`.
fn reasons<'a>(
    cell: &'a MatrixCell,
    label: &'a str,
    kinds: &'a [&str],
) -> impl Iterator<Item = String> + 'a {
    cell.accuracy
        .misses
        .iter()
        .filter(|m| kinds.iter().any(|kind| m.starts_with(kind)))
        .map(move |m| format!("{label}: {m}"))
}

/// The reasons for `cell`'s false stalls.
fn false_stall_reasons<'a>(
    cell: &'a MatrixCell,
    label: &'a str,
) -> impl Iterator<Item = String> + 'a {
    reasons(cell, label, &["false"])
}

/// The reasons for the stalls `cell` missed or named wrongly.
fn missed_stall_reasons<'a>(
    cell: &'a MatrixCell,
    label: &'a str,
) -> impl Iterator<Item = String> + 'a {
    reasons(cell, label, &["missed", "wrong"])
}

fn assert_no_false_stall(family: &str) {
    assert_no_false_stall_in_runs(family, 100);
}

/// No stall where the truth has none, over more than `least_runs` runs of `family`.
fn assert_no_false_stall_in_runs(family: &str, least_runs: usize) {
    let (runs, total) = false_stalls(family);
    assert!(runs > least_runs, "{family}: only {runs} runs");
    assert!(total.gaps > 0, "{family}: no gap to judge");
    assert_eq!(
        total.stalls_where_none,
        0,
        "{family}: {} stalls where the truth has none in {runs} runs, e.g.:\n{}",
        total.stalls_where_none,
        total
            .misses
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every observable stall of `family` found, with the right class.
fn assert_every_stall_found(family: &str) {
    assert_every_stall_found_where(family, |_| true);
}

/// The same, over the cells `keep` picks.
fn assert_every_stall_found_where(family: &str, keep: impl Fn(&CellSpec) -> bool) {
    assert_every_stall_found_seeded(family, keep, None);
}

/// The same, with every cell's seed (varying delays, timer phases) set to `seed`.
fn assert_every_stall_found_seeded(
    family: &str,
    keep: impl Fn(&CellSpec) -> bool,
    seed: Option<u64>,
) {
    let (stalls, missed) = stalls_and_misses(family, keep, seed);
    assert!(stalls > 100, "{family}: only {stalls} stalls in the truth");
    assert_none(&format!("{family}: of {stalls} stalls, missed"), &missed);
}

/// The stalls in the truth of `family`'s cells that `keep` picks, and the reasons for
/// those missed or named wrongly, with every cell's seed set to `seed`.
fn stalls_and_misses(
    family: &str,
    keep: impl Fn(&CellSpec) -> bool,
    seed: Option<u64>,
) -> (usize, Vec<String>) {
    let options = AnalyzeOptions::default();
    let mut missed = Vec::new();
    let mut stalls = 0;
    for spec in cells(8).iter().filter(|c| c.family == family && keep(c)) {
        let mut spec = spec.clone();
        if let Some(seed) = seed {
            spec.file.link.seed = seed;
        }
        let cell = run_cell(&spec, &options).expect("the family's scenarios are valid");
        stalls += cell.truth_stalls;
        let label = format!("{} -> {} at {}", cell.client, cell.server, cell.capture);
        missed.extend(missed_stall_reasons(&cell, &label));
    }
    (stalls, missed)
}

/// Fails with the count of `found` and its first five, when there is any.
fn assert_none(what: &str, found: &[String]) {
    assert!(
        found.is_empty(),
        "{what}: {}, e.g.:\n{}",
        found.len(),
        found[..found.len().min(5)].join("\n")
    );
}

#[test]
fn slow_readers_are_not_stalls() {
    assert_no_false_stall("slow-reader");
}

#[test]
fn periodic_nodelay_senders_are_not_stalls() {
    assert_no_false_stall("periodic-nodelay");
}

#[test]
fn bottleneck_queues_are_not_stalls() {
    assert_no_false_stall("bottleneck");
}

/// Data released behind a narrow link reaches a capture point past it a serialization
/// later than the ACK's round trip: its sender's TSvals, against its last pure ACK's,
/// show that time was the link's. Linux on both ends, every observable stall found.
#[test]
fn bottleneck_queues_hide_no_linux_stall() {
    assert_every_stall_found_where("bottleneck", |c| {
        c.file.client.stack == "linux" && c.file.server.stack == "linux"
    });
}

/// Behind a 1 Mbit/s link a full segment takes 12 ms to cross. An ACK sent at once for
/// two of them came after both crossed; an ACK for one, after one: a macOS tick that held
/// the ACK of a bulk block's last full segment 20 ms stands out from that, not from the
/// round trip of two (macOS on both ends, 1 and 5 Mbit/s).
#[test]
fn a_one_segment_ack_behind_a_narrow_link_is_judged_against_one_crossing() {
    assert_every_stall_found_where("bottleneck", |c| {
        c.file.client.stack == "macos-legacy" && c.file.link.bottleneck_bps < Some(20e6)
    });
}

/// A capture point before a bottleneck's queue leaves the hold at the delayer uncertain
/// by what the queue added: a classic BSD tick's delays (macOS before 10.5 on both ends)
/// then fit a per-connection timer as they fit the tick, and neither is named alone.
#[test]
fn a_tick_behind_a_queue_is_named_no_per_connection_timer() {
    let ticks = scored(|c| {
        c.family == "bottleneck"
            && c.file.server.stack == "macos-legacy"
            && matches!(c.file.capture.as_deref(), Some("client" | "tap"))
    });
    assert!(ticks.stacks_read >= 100, "only {} read", ticks.stacks_read);
    assert_eq!(ticks.stacks_named_wrong(), 0, "{:#?}", ticks.misses);
}

#[test]
fn offloaded_captures_are_not_stalls() {
    assert_no_false_stall("offload");
}

#[test]
fn captures_with_misses_are_not_stalls() {
    assert_no_false_stall("capture-miss");
}

/// A missed record that a captured ACK already covered leaves no hole for the next ACK:
/// its delay is measured; a stall whose ACK covered missed data is not observable.
#[test]
fn captures_with_misses_have_every_observable_stall_found() {
    assert_every_stall_found("capture-miss");
}

#[test]
fn multi_response_reads_are_not_stalls() {
    assert_no_false_stall("multi-response-read");
}

#[test]
fn cork_and_msg_more_holds_are_not_stalls() {
    assert_no_false_stall("cork");
}

#[test]
fn two_way_exchanges_have_no_false_stalls() {
    assert_no_false_stall("two-way");
}

/// Both ends held at once: the data of one crosses the delayed ACK that releases the
/// other's, so the other's gap at the capture point is short, and its release answers a
/// pure ACK from before that gap.
#[test]
fn two_way_exchanges_have_every_stall_found() {
    assert_every_stall_found("two-way");
}

/// A poller that waits a fixed time after each reply and writes its request in pieces:
/// on a steady path its pauses recur alike, a think time after the peer's data and a hold
/// after its own, which together once read as a clock of its own (528 of these 3,042
/// stalls missed).
#[test]
fn steady_pollers_have_every_stall_found() {
    assert_no_false_stall("steady-poller");
    assert_every_stall_found("steady-poller");
}

#[test]
fn send_buffers_paced_by_a_bottleneck_are_not_stalls() {
    assert_no_false_stall("send-buffer");
}

/// The side of the capture point the delayed ACK would come from: the server, except
/// where the server holds data (headers and body written apart).
fn delayer_side(pattern: &str) -> &'static str {
    if pattern == "http-keepalive" {
        "client"
    } else {
        "server"
    }
}

/// Beside the ACK's sender the capture shows how long it kept the ACK, not a round trip
/// across the path: no false stall there, however the path varies. From the holder's
/// side, an ACK sent at once over a path whose round trip varies by more than the 10 ms
/// gap threshold can look held by a timer (docs/accuracy.md); those are counted, not
/// asserted.
fn assert_no_false_stall_beside_the_delayer(family: &str) {
    let options = AnalyzeOptions::default();
    let mut runs = 0;
    let mut false_stalls = Vec::new();
    for spec in cells(8).iter().filter(|c| c.family == family) {
        let cell = run_cell(spec, &options).expect("the family's scenarios are valid");
        if cell.capture != delayer_side(&cell.pattern) {
            continue;
        }
        runs += 1;
        let label = format!("{} -> {} {}", cell.client, cell.server, cell.pattern);
        false_stalls.extend(false_stall_reasons(&cell, &label));
    }
    assert!(runs >= 40, "{family}: only {runs} runs beside the delayer");
    assert_none(
        &format!("{family}: false stalls beside the delayer"),
        &false_stalls,
    );
}

#[test]
fn prompt_acks_over_a_400_ms_path_are_not_stalls_beside_the_acker() {
    assert_no_false_stall_beside_the_delayer("prompt-ack-400ms");
}

#[test]
fn varying_delays_have_no_false_stalls_beside_the_delayer() {
    assert_no_false_stall_beside_the_delayer("varying-delay");
}

#[test]
fn windows_holders_on_varying_wan_paths_have_no_false_stalls_beside_the_delayer() {
    assert_no_false_stall_beside_the_delayer("windows-wan");
}

/// A request written as a large segment and its tail: the delayed ACKs of the large one
/// (a macOS tick holds them less than Linux's shortest timer) are judged against the
/// path, not against the least of those delayed ACKs.
#[test]
fn large_segments_on_varying_paths_have_every_stall_found() {
    assert_every_stall_found_where("varying-delay", |c| {
        c.file.workload.pattern == "proxy-split" && c.file.link.rtt_ms < 100.0
    });
}

/// A tick-phased timer (macOS, AIX) may hold the first request's large segment less than
/// Linux's shortest timer; that ACK is no reference for large data, nor for itself.
#[test]
fn a_first_large_segment_held_by_a_tick_is_found() {
    assert_every_stall_found_seeded(
        "request-response",
        |c| c.file.workload.pattern == "proxy-split",
        Some(2),
    );
}

/// A slow reader on a macOS tick: its application reads in step with the tick, so every
/// ACK of the request's large segment is held alike, 16 to 23 ms (timer phases of seeds 2
/// and 5), and each reply waits for a read. Neither is the path's round trip for large
/// data; only an ACK sent at once for two full segments would be.
#[test]
fn large_segments_held_alike_by_a_tick_are_found() {
    for seed in [2, 5] {
        assert_every_stall_found_seeded(
            "slow-reader",
            |c| c.file.server.stack == "macos" && c.file.workload.pattern == "proxy-split",
            Some(seed),
        );
    }
}

/// A Windows holder (no timestamps) on an 80 ms path whose delay varies, seen beside its
/// Linux delayer: a handshake that met the queue is no floor for the holder's reaction,
/// when a reply came back sooner.
#[test]
fn a_handshake_that_met_a_queue_is_no_floor() {
    assert_every_stall_found_seeded(
        "windows-wan",
        |c| c.file.link.rtt_ms == 80.0 && c.file.client.stack == "windows",
        Some(4),
    );
}

/// A capture that missed a pure ACK of a connection without timestamps shows nothing of
/// it: a small segment behind one in flight proves Nagle off only when sent sooner than
/// that ACK could have come back, or, while the capture shows no miss, more often than
/// the misses it may still have made could explain.
#[test]
fn a_missed_ack_is_no_proof_that_nagle_is_off() {
    // Seed 2: a capture missing 15% showed a Windows server behind its own unacknowledged
    // segment once or twice before it missed any data, which a count of two had taken as
    // proof; only more than its misses could explain is.
    for seed in [2, 8] {
        assert_every_stall_found_seeded("capture-miss", |_| true, Some(seed));
    }
}

/// Nagle holds released by ACKs sent at once over a 400 ms path whose delay varies by up
/// to 10% (40 ms, as much as Linux's shortest timer): from every capture point, the
/// releasing ACK is judged against the first pure ACK for the data it released, the
/// path a moment later, and no false stall is left. (At 30% the queue moves by more
/// than that between two packets, and some are counted in docs/accuracy.md.)
#[test]
fn prompt_acks_are_judged_against_the_next_prompt_ack() {
    assert_no_false_stall_in_prompt_acks(&[2, 3, 4], |variation| variation < 0.2);
}

/// At 30% the queue can move by more than Linux's shortest timer between an ACK and the
/// next prompt ACK. Where the connection shows its peer acknowledges at once, an ACK no
/// later than the path took just before it (within the reach of its prompt ACKs) is the
/// path too: on the matrix's own draw, a keep-alive ACK 497 ms after the headers lies
/// between the 506 ms of the ACK before it and the 462 ms of the one after.
#[test]
fn prompt_acks_are_judged_against_the_prompt_ack_before_too() {
    assert_no_false_stall_in_prompt_acks(&[1], |variation| variation > 0.2);
}

/// No false stall in `prompt-ack-400ms` on any of `seeds`, over the cells whose delay
/// variation `keep` picks, at every capture point.
fn assert_no_false_stall_in_prompt_acks(seeds: &[u64], keep: impl Fn(f64) -> bool) {
    let options = AnalyzeOptions::default();
    let mut runs = 0;
    let mut false_stalls = Vec::new();
    for &seed in seeds {
        for spec in cells(8)
            .iter()
            .filter(|c| c.family == "prompt-ack-400ms" && keep(c.file.link.delay_variation))
        {
            let mut spec = spec.clone();
            spec.file.link.seed = seed;
            let cell = run_cell(&spec, &options).expect("the family's scenarios are valid");
            runs += 1;
            let label = format!("seed {seed} {} at {}", cell.pattern, cell.capture);
            false_stalls.extend(false_stall_reasons(&cell, &label));
        }
    }
    assert!(runs >= 70 * seeds.len(), "only {runs} runs");
    assert_none("false stalls released late", &false_stalls);
}

/// The same at 30%: the queue moves by up to 30 ms between two packets, so one ACK says
/// nothing, but a side that acknowledges at once reads early against the path a moment
/// later as often as late, over the connection, where a timer's side reads late nearly
/// every time. On these seeds the queue stays within the shortest timer of its floor
/// long enough to show it; on others it drifts above that and stays (docs/accuracy.md).
#[test]
fn a_side_that_acks_at_once_is_told_by_its_acks_over_the_connection() {
    assert_no_false_stall_in_prompt_acks(&[2, 4, 7], |variation| variation > 0.2);
}

/// The same paths, 400 ms varying by 10 and 30%, where each side's own delayed-ACK timer
/// holds its ACKs (no TCP_QUICKACK): every stall is found, at every capture point.
#[test]
fn timers_on_the_same_long_varying_paths_have_every_stall_found() {
    let options = AnalyzeOptions::default();
    let mut missed = Vec::new();
    let mut stalls = 0;
    for seed in 1..=3 {
        for spec in cells(8).iter().filter(|c| c.family == "prompt-ack-400ms") {
            let mut spec = spec.clone();
            spec.file.link.seed = seed;
            spec.file.client.options.quickack = false;
            spec.file.server.options.quickack = false;
            let cell = run_cell(&spec, &options).expect("the family's scenarios are valid");
            stalls += cell.truth_stalls;
            let label = format!("seed {seed} {} at {}", cell.pattern, cell.capture);
            missed.extend(missed_stall_reasons(&cell, &label));
        }
    }
    assert!(stalls > 1000, "only {stalls} stalls in the truth");
    assert_none(&format!("of {stalls} stalls, missed"), &missed);
}

/// A bulk transfer over a 300 ms path that losses have left limited by its congestion
/// window: each delayed ACK holds the sender, whose next data reaches a capture point near
/// the receiver one round trip after that ACK left, after the gap it opened began; the
/// receiver's prompt ACKs for the data before the gap fall inside it. The data's TSecr
/// names the ACK it answered.
#[test]
fn delayed_acks_seen_near_the_receiver_of_a_long_flight_are_found() {
    let found = bulk_with_loss(
        "receiver-side",
        ["server", "tap:0.8"],
        "rtt_ms = 300\nloss = 0.01\nbandwidth_bps = 1e8",
        "",
    );
    assert!(
        found.stalls > 300,
        "only {} stalls in the truth",
        found.stalls
    );
    // Some stay missed: a release after a hole the loss left says only `unexplained`, and
    // the ACK before a gap with nothing of the receiver in it is taken only where no hole
    // precedes the release (51 of 364 today; 94 before that ACK was taken at all; all 364
    // without the rule).
    found.assert_missed_under(3);
}

/// Seen at a tap or near the receiver, the receiver's delayed ACK passes the capture point
/// before the flight already on its way does: the data that ACK releases comes one round
/// trip to the sender later, with no segment of the receiver in the gap, and without
/// timestamps nothing but that timing names the ACK. Windows' default (no timestamps)
/// sends a bulk transfer over a 150 ms path losing 1 % of its packets.
#[test]
fn delayed_acks_that_passed_before_the_flight_are_found_without_timestamps() {
    let found = bulk_with_loss(
        "before-the-flight",
        ["server", "tap"],
        "rtt_ms = 150\nloss = 0.01",
        "[client]\nstack = \"windows\"\n",
    );
    assert!(
        found.stalls > 300,
        "only {} stalls in the truth",
        found.stalls
    );
    // Some stay missed: after a loss the capture shows a hole, and a release past a hole
    // is not measured (129 of 362 today; without the rule, 326).
    found.assert_missed_under(4);
    assert!(
        found.false_stalls <= 2,
        "{} false stalls",
        found.false_stalls
    );
}

/// After a loss, the retransmission that fills the hole below the newest data is
/// acknowledged at once (RFC 5681 4.2), together with all the data above it: that ACK is
/// timed from the retransmission, not from the newest data, which waited behind the hole.
/// A Linux sender to a macOS receiver, 80 ms, 1 % loss.
#[test]
fn an_ack_that_fills_a_hole_is_timed_from_the_retransmission() {
    let found = bulk_with_loss(
        "hole-fill",
        ["client", "server", "tap:0.3"],
        "rtt_ms = 80\nloss = 0.01",
        "[server]\nstack = \"macos\"\n",
    );
    assert!(
        found.stalls > 50,
        "only {} stalls in the truth",
        found.stalls
    );
    // Before, the ACK's wait for the retransmission read as a timer's (18 false stalls).
    assert_eq!(found.false_stalls, 0, "false stalls");
}

/// A request's last piece lost beyond the capture point: the sender's retransmission
/// timer sends it again, and the receiver's ACK answers that copy, a round trip or more
/// after it (Karn's ambiguity, RFC 6298 3). Timed from the first copy, that ACK read as
/// held hundreds of milliseconds: past any timer (a stall missed as `unexplained`), or,
/// where it came at once, as a timer's (a false stall). With and without timestamps,
/// on a LAN and a 50 ms path, 2 % loss.
#[test]
fn an_ack_that_answers_a_retransmission_is_timed_from_it() {
    let (mut stalls, mut false_stalls) = (0, 0);
    let mut reasons = Vec::new();
    for (client, server) in [("windows", "macos-legacy"), ("linux", "linux")] {
        for rtt in [5, 50] {
            let found = runs_with_loss(
                "resent-request",
                ["client", "server", "tap:0.3"],
                &format!("rtt_ms = {rtt}\nloss = 0.02"),
                &format!("[client]\nstack = \"{client}\"\n[server]\nstack = \"{server}\"\n"),
                "pattern = \"two-writes\"\ntransactions = 60",
            );
            stalls += found.stalls;
            false_stalls += found.false_stalls;
            reasons.extend(
                found
                    .reasons
                    .iter()
                    .map(|r| format!("{client} -> {server}, {rtt} ms, {r}")),
            );
        }
    }
    assert!(stalls > 400, "only {stalls} stalls in the truth");
    // Before, of 1,362 stalls 6 were missed, and 16 prompt ACKs read as a timer's.
    assert_eq!(false_stalls, 0, "false stalls");
    assert_none("missed", &reasons);
}

/// A server holding its responses (headers and body written apart) after a think time,
/// over a path whose delay varies, seen at or near the client that delays its ACKs: the
/// handshake, the one round trip measured on the path alone, met the queue higher than
/// the releases did, which came a few milliseconds sooner after their ACKs than it took.
/// The replies' round trips, spread by the same queue, show the path varied by as much.
/// Three draws of `scripts/random-scenarios.py` (seeds 13, 8 and 6), each with its
/// stacks, path and capture point.
#[test]
fn replies_that_vary_show_the_handshake_is_no_exact_floor() {
    let draws = [
        (
            "freebsd", "windows", 150, 0.2, 1.0, 2e6, 60, "client", 402_865,
        ),
        ("freebsd", "aix", 150, 0.2, 0.1, 1e7, 15, "client", 680_318),
        ("aix", "windows", 300, 0.1, 1.0, 1e7, 60, "tap:0.3", 871_815),
    ];
    let options = AnalyzeOptions::default();
    let (mut stalls, mut reasons) = (0, Vec::new());
    for (client, server, rtt, variation, jitter, bps, think, capture, seed) in draws {
        let text = format!(
            "capture = \"{capture}\"\n[client]\nstack = \"{client}\"\n\
             [server]\nstack = \"{server}\"\n[link]\nrtt_ms = {rtt}\n\
             delay_variation = {variation}\njitter_ms = {jitter}\nbandwidth_bps = {bps}\n\
             seed = {seed}\n[workload]\npattern = \"http-keepalive\"\ntransactions = 10\n\
             server_think_ms = {think}\n"
        );
        let cell = run_scenario("varying-think", seed, &text, &options);
        stalls += cell.truth_stalls;
        reasons.extend(
            cell.accuracy
                .misses
                .iter()
                .map(|m| format!("{client} -> {server} at {capture}: {m}")),
        );
    }
    assert!(stalls >= 50, "only {stalls} stalls in the truth");
    // Before, 23 of the 60 were missed as `app-think-time`: left before the ACK could
    // arrive.
    assert_none(&format!("of {stalls} stalls, missed or false"), &reasons);
}

/// What the detector found over bulk transfers seeded 1 and 2 at each capture point.
struct BulkFound {
    stalls: usize,
    missed: usize,
    false_stalls: usize,
    reasons: Vec<String>,
}

impl BulkFound {
    /// Fewer than `tenths` tenths of the stalls missed.
    fn assert_missed_under(&self, tenths: usize) {
        assert!(
            self.missed * 10 < self.stalls * tenths,
            "of {} stalls, missed {}, e.g.:\n{}",
            self.stalls,
            self.missed,
            self.reasons[..self.reasons.len().min(5)].join("\n")
        );
    }
}

/// Runs a bulk transfer of 10 blocks over `link` (scenario lines of its `[link]` table),
/// with `stacks` (scenario tables before it), at each capture point, seeds 1 and 2.
fn bulk_with_loss<const N: usize>(
    family: &'static str,
    captures: [&str; N],
    link: &str,
    stacks: &str,
) -> BulkFound {
    runs_with_loss(
        family,
        captures,
        link,
        stacks,
        "pattern = \"bulk\"\ntransactions = 10",
    )
}

/// Runs `workload` (scenario lines of its `[workload]` table) over `link`, with
/// `stacks`, at each capture point, seeds 1 and 2.
fn runs_with_loss<const N: usize>(
    family: &'static str,
    captures: [&str; N],
    link: &str,
    stacks: &str,
    workload: &str,
) -> BulkFound {
    let options = AnalyzeOptions::default();
    let mut found = BulkFound {
        stalls: 0,
        missed: 0,
        false_stalls: 0,
        reasons: Vec::new(),
    };
    for capture in captures {
        for seed in [1, 2] {
            let text = format!(
                "capture = \"{capture}\"\n{stacks}[link]\n{link}\nseed = {seed}\n\
                 [workload]\n{workload}\n"
            );
            let cell = run_scenario(family, seed, &text, &options);
            found.stalls += cell.truth_stalls;
            found.missed += cell.accuracy.false_negatives;
            found.false_stalls += cell.accuracy.false_positives;
            found.reasons.extend(
                cell.accuracy
                    .misses
                    .iter()
                    .filter(|m| m.starts_with("missed") || m.starts_with("wrong"))
                    .map(|m| format!("at {capture}, seed {seed}: {m}")),
            );
        }
    }
    found
}

/// Runs the scenario file `text` (seeded `seed`) as a cell of `family`.
fn run_scenario(
    family: &'static str,
    seed: u64,
    text: &str,
    options: &AnalyzeOptions,
) -> MatrixCell {
    let file =
        tcpstall_sim::scenario::ScenarioFile::from_toml(text).expect("the scenario is valid");
    let spec = CellSpec {
        family,
        label: format!("seed {seed}"),
        file,
    };
    run_cell(&spec, options).expect("the scenario runs")
}

/// A capture clock's step (a microsecond, as classic pcap stamps packets, or a
/// millisecond) finds what an exact clock finds, where the gaps are longer than it: a
/// receiver's ACK stamped alike with the data it answers, as a clock too coarse to part
/// them stamps it, still came after that data, inside the gap the data began.
#[test]
fn a_coarse_capture_clock_finds_what_an_exact_one_finds() {
    let options = AnalyzeOptions::default();
    let scenarios = [
        // Bulk data over 80 ms with 1% loss, captured at the macOS receiver: its prompt
        // ACK for the flight's last two segments leaves within the clock's step.
        ("linux", "macos", "bulk", "server", "loss = 0.01"),
        ("linux", "freebsd", "bulk", "tap", "loss = 0.01"),
        // The same from an AIX sender, captured beside it on a path without jitter: the
        // first packets fall on whole round trips, so the clock's step reads as one; the
        // delayed ACK of a flight's odd segment is still found.
        ("aix", "macos-legacy", "bulk", "client", "loss = 0.01"),
        (
            "linux",
            "linux",
            "two-writes",
            "server",
            "delay_variation = 0.1",
        ),
        (
            "windows",
            "linux",
            "proxy-split",
            "tap",
            "delay_variation = 0.1",
        ),
        (
            "linux",
            "windows",
            "http-keepalive",
            "client",
            "jitter_ms = 1.0",
        ),
    ];
    let mut differences = Vec::new();
    let mut stalls = 0;
    for (client, server, pattern, capture, link) in scenarios {
        let counts = |clock_us: f64| {
            let text = format!(
                "capture = \"{capture}\"\ncapture_clock_us = {clock_us}\n\
                 [client]\nstack = \"{client}\"\n[server]\nstack = \"{server}\"\n\
                 [link]\nrtt_ms = 80\n{link}\nseed = 5\n\
                 [workload]\npattern = \"{pattern}\"\ntransactions = 10\n"
            );
            let cell = run_scenario("coarse-clock", 5, &text, &options);
            let a = &cell.accuracy;
            (a.true_positives, a.false_positives, a.false_negatives)
        };
        let exact = counts(0.0);
        stalls += exact.0 + exact.2;
        for clock_us in [1.0, 1000.0] {
            let coarse = counts(clock_us);
            if coarse != exact {
                differences.push(format!(
                    "{client} -> {server} {pattern} at {capture}, {clock_us} us: \
                     (found, false, missed) {coarse:?}, exact {exact:?}"
                ));
            }
        }
    }
    assert!(stalls >= 40, "only {stalls} stalls");
    assert_none("a coarse clock found otherwise", &differences);
}

/// A segment is captured once it has crossed the links before the capture point: behind a
/// 2 Mbit/s link, data a bulk sender releases on an ACK's arrival is seen a full segment's
/// crossing (6 ms) after it, at the sender as past the link. The sender's back-to-back
/// segments show that crossing, its peer's ACKs for two segments pace no faster, and the
/// release is judged on time with it. Loss gives the delayed-ACK stalls (an odd segment
/// left after a recovery); stacks with (macOS) and without (Windows) timestamps.
#[test]
fn data_released_behind_a_narrow_sender_link_is_judged_with_its_crossing() {
    let options = AnalyzeOptions::default();
    let (mut missed, mut false_stalls) = (Vec::new(), Vec::new());
    let mut stalls = 0;
    for stack in ["macos", "windows"] {
        for capture in ["client", "tap", "server"] {
            for seed in 1..=3 {
                let mut file = tcpstall_sim::scenario::ScenarioFile::default();
                file.client.stack = stack.to_string();
                file.server.stack = stack.to_string();
                file.workload.pattern = "bulk".to_string();
                file.workload.transactions = 10;
                file.workload.server_think_ms = 15.0;
                file.link.rtt_ms = 150.0;
                file.link.jitter_ms = 1.0;
                file.link.loss = 0.01;
                file.link.bandwidth_bps = 2e6;
                file.link.seed = seed;
                file.capture = Some(capture.to_string());
                let spec = CellSpec {
                    family: "narrow-sender-link",
                    label: String::new(),
                    file,
                };
                let cell = run_cell(&spec, &options).expect("the scenario is valid");
                stalls += cell.truth_stalls;
                let label = format!("{stack} seed {seed} at {capture}");
                missed.extend(
                    missed_stall_reasons(&cell, &label)
                        .filter(|m| m.contains("left-long-after-ack")),
                );
                // A prompt ACK behind the queue read as held is the ACK-timer link's
                // mistake, not this one's: one such (Windows, seed 2, at the client) is
                // there with and without the crossing.
                false_stalls.extend(
                    false_stall_reasons(&cell, &label)
                        .filter(|m| !m.contains("released by a prompt ACK")),
                );
            }
        }
    }
    assert!(stalls > 100, "only {stalls} stalls in the truth");
    assert_none(
        &format!("of {stalls} stalls, missed as left long after the ACK"),
        &missed,
    );
    assert_none("false stalls released late", &false_stalls);
}

/// The delayer's stack, read from each capture point through a path whose delay varies:
/// a per-connection timer (Linux's 40 ms, Windows' 200 ms) is named right everywhere
/// (Linux's, seen from the server's side of a 60 ms + 0-40 ms path, once read as a BSD
/// tick); a global tick in at least half the stalled directions (met at a steady phase by
/// a lock-step exchange, its one delay can be a per-connection timer's).
#[test]
fn the_delayers_stack_is_named_through_a_varying_path() {
    let options = AnalyzeOptions::default();
    for capture in ["client", "server", "tap"] {
        let mut ticks = Accuracy::default();
        let mut wrong = Vec::new();
        for spec in cells(8)
            .iter()
            .filter(|c| c.family == "delayer-stack" && c.file.capture.as_deref() == Some(capture))
        {
            let cell = run_cell(spec, &options).expect("the family's scenarios are valid");
            assert!(
                cell.accuracy.stacks_read > 0,
                "{}: no stall read",
                spec.label
            );
            let per_connection = ["linux ", "windows ", "windows-xp "];
            if per_connection.iter().any(|s| spec.label.starts_with(s)) {
                wrong.extend(reasons(&cell, &spec.label, &["stack"]));
                if cell.accuracy.stacks_named_right < cell.accuracy.stacks_read {
                    wrong.push(format!("{}: left open", spec.label));
                }
            } else {
                ticks.add(&cell.accuracy);
            }
        }
        assert!(wrong.is_empty(), "at {capture}: {wrong:#?}");
        assert!(
            ticks.stacks_named_right * 2 >= ticks.stacks_read,
            "at {capture}: ticks {} of {} named right: {:#?}",
            ticks.stacks_named_right,
            ticks.stacks_read,
            ticks.misses
        );
    }
}

/// The request/response runs of `pattern` over `rtt` ms whose delayer (the client or
/// the server, as `delayer_is_client`) runs a BSD tick, scored together.
fn tick_delayers(pattern: &str, rtt: f64, delayer_is_client: bool) -> Accuracy {
    scored(|c| {
        let delayer = if delayer_is_client {
            &c.file.client.stack
        } else {
            &c.file.server.stack
        };
        c.family == "request-response"
            && c.file.workload.pattern == pattern
            && c.file.link.rtt_ms == rtt
            && ["macos", "macos-legacy", "aix"].contains(&delayer.as_str())
    })
}

/// The matrix's cells that `keep` picks, run and scored together.
fn scored(keep: impl Fn(&CellSpec) -> bool) -> Accuracy {
    let options = AnalyzeOptions::default();
    let mut total = Accuracy::default();
    for spec in cells(8).iter().filter(|c| keep(c)) {
        let cell = run_cell(spec, &options).expect("the matrix's scenarios are valid");
        total.add(&cell.accuracy);
    }
    total
}

/// Keep-alive over a 1 ms path: a global 200 ms tick met at a steady phase holds each
/// ACK 198 ms, and sends them 200 ms apart; Windows' 200 ms timer holds each 200 ms and
/// sends them 201 ms apart. No capture point tells these apart, so a tick's delays are
/// never named Windows' timer: the reading lists both.
#[test]
fn a_tick_on_the_beat_of_a_200ms_timer_is_not_named_windows() {
    let ticks = tick_delayers("http-keepalive", 1.0, true);
    assert!(ticks.stacks_read >= 18, "only {} read", ticks.stacks_read);
    assert_eq!(ticks.stacks_named_wrong(), 0, "{:#?}", ticks.misses);
}

/// Over a 0.05 or a 100 ms path, a lock-step exchange puts Windows' 200 ms timer's ACKs
/// on a 200 ms beat, as a tick met at a steady phase puts its own: their delays and
/// spacings differ by the exchanges' few microseconds. Windows' packets leave with TTL
/// 128, the tick stacks' (macOS before and after 10.5, AIX) with 64, and the reading
/// names the timer the delayer's TTL allows, in every stalled direction at every point.
#[test]
fn the_delayers_ttl_tells_windows_timer_from_a_tick_on_its_beat() {
    let beat = scored(|c| {
        let stacks = ["windows", "windows-xp", "macos", "macos-legacy", "aix"];
        c.family == "request-response"
            && [0.05, 100.0].contains(&c.file.link.rtt_ms)
            && stacks.contains(&c.file.client.stack.as_str())
            && stacks.contains(&c.file.server.stack.as_str())
    });
    assert!(beat.stacks_read >= 300, "only {} read", beat.stacks_read);
    assert_eq!(
        beat.stacks_named_right, beat.stacks_read,
        "{:#?}",
        beat.misses
    );
}

/// Pipelined requests over a 20 ms path to a server whose 200 ms tick meets them at a
/// steady phase: the one delay the connection shows (36 ms) fits Linux's timer, but it
/// held the server's first acknowledgment of the client's data, which a Linux listener
/// sends at once (quick-ack mode on the first data). The tick is never named Linux.
#[test]
fn a_listener_that_held_the_first_datas_ack_is_not_named_linux() {
    let ticks = tick_delayers("pipeline", 20.0, false);
    assert!(ticks.stacks_read >= 45, "only {} read", ticks.stacks_read);
    assert_eq!(ticks.stacks_named_wrong(), 0, "{:#?}", ticks.misses);
}

/// A server writing a chunk every 205 ms to a Windows client over a 100 or 190 ms path:
/// Nagle holds each write until the client's 200 ms timer sends its ACK, and the chunk
/// leaves on the ACK's arrival, so its data is as regular as a clock. Beside the server
/// the chunks are seen to leave microseconds after the ACKs, and every stall is found
/// there and at the client. (At a tap the reaction is timed through the path, where a
/// periodic sender whose ACK lands just before its next message looks alike.)
#[test]
fn writes_a_steady_delayed_ack_releases_are_not_the_senders_own_clock() {
    let (stalls, missed) = stalls_and_misses(
        "clocked-sender",
        |c| c.label.contains("every 205 ms") && c.file.capture.as_deref() != Some("tap"),
        None,
    );
    assert!(stalls >= 30, "only {stalls} stalls in the truth");
    assert_none(&format!("of {stalls} stalls, missed"), &missed);
}

#[test]
fn full_segments_a_slow_link_spaces_are_not_stalled() {
    // Windows', Windows XP's and Linux's timers delaying each lone segment's ACK behind a
    // 64 to 100 kbit/s link: the link, not those timers, spaces the data, and an ACK sent
    // on a timer between two arrivals is no measure of the link's pace.
    assert_no_false_stall_in_runs("paced-bulk", 30);
}

#[test]
fn a_relay_writing_as_its_upstream_delivers_is_not_stalled() {
    // Its writes follow the upstream's arrivals, not the client's ACKs: no stall of any
    // kind where the truth has none, from every capture point.
    assert_no_false_stall_in_runs("upstream-relay", 30);
    let (_, total) = false_stalls("upstream-relay");
    assert_eq!(total.false_positives, 0, "{:?}", total.misses);
}

#[test]
fn a_reply_timed_by_another_connections_end_is_no_stall_beside_its_writer() {
    // At the server the 226 is seen leaving when it was written, whenever the ACK of the
    // 150 came; from the client's side a 226 written just after that ACK arrived cannot
    // be told from one it released (docs/accuracy.md).
    let options = AnalyzeOptions::default();
    let mut runs = 0;
    let mut false_stalls = Vec::new();
    for spec in cells(8).iter().filter(|c| c.family == "transfer-end") {
        let cell = run_cell(spec, &options).expect("the family's scenarios are valid");
        if cell.capture != "server" {
            continue;
        }
        runs += 1;
        let label = format!("{} -> {} RTT {} ms", cell.client, cell.server, cell.rtt_ms);
        false_stalls.extend(false_stall_reasons(&cell, &label));
    }
    assert!(runs >= 12, "transfer-end: only {runs} runs at the server");
    assert_none("transfer-end: false stalls at the server", &false_stalls);
}

#[test]
fn a_226_held_behind_the_150_is_found() {
    // A 226 written while the 150 waits for its delayed ACK is held by Nagle: a stall.
    assert_every_stall_found("transfer-end");
}

/// A bulk transfer over 150 ms losing 1% of its segments: where the segment sent right
/// behind the one the receiver's timer acknowledged alone was lost, not still crossing,
/// the timer held the sender waiting for that odd segment's ACK, a `delayed-ack` stall
/// in the truth as in the capture.
#[test]
fn a_lost_burst_mate_leaves_an_odd_segment_whose_timer_held_the_sender() {
    let text = "capture = \"client\"\ncapture_clock_us = 1000.0\n\
                [client]\nstack = \"macos-legacy\"\n[server]\nstack = \"freebsd\"\n\
                [link]\nrtt_ms = 150\ndelay_variation = 0.05\njitter_ms = 0.1\n\
                loss = 0.01\nseed = 967865\n\
                [workload]\npattern = \"bulk\"\ntransactions = 10\nserver_think_ms = 60\n";
    let cell = run_scenario("lost-burst-mate", 1, text, &AnalyzeOptions::default());
    let a = &cell.accuracy;
    assert!(a.true_positives >= 30, "{a:?}");
    assert_eq!((a.false_positives, a.false_negatives), (0, 0), "{a:?}");
}
