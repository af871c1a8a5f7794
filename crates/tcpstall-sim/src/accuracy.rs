//! Detection accuracy: the analyzer, run on the simulator's own capture, against the
//! simulator's ground truth of every gap ([`crate::truth`]).
//!
//! Each gap the capture shows has a true label (the detector's six classes, or no gap:
//! path time only) and the detector's answer (a class, or none). The confusion matrix
//! counts them; stall precision and recall count the two stall classes
//! (`nagle-delayed-ack`, `delayed-ack`). A gap whose evidence the capture lacks (a record
//! missed inside it, or its releasing ACK missed) counts in the matrix but not against
//! recall, and `unexplained` is then a right answer.

use std::collections::HashMap;
use std::io::Cursor;

use serde::Serialize;

use tcpstall_core::analyze::{AnalyzeOptions, analyze};
use tcpstall_core::capture::PcapWriter;
use tcpstall_core::diagnosis::{Role, TimerGuess};
use tcpstall_core::segment::Nanos;
use tcpstall_core::side::Side;
use tcpstall_core::stacks;

use crate::engine::{RunResult, capture_segments, side_name};
use crate::profile::{DelayedAckTimer, StackProfile};
use crate::scenario::ScenarioFile;
use crate::truth::{Label, TruthGap};

/// Reasons kept per run, so a matrix of thousands of runs stays small.
const REASONS_PER_RUN: usize = 8;

/// The outcome for one run (or, added up, for many).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Accuracy {
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
    /// Human-readable reasons for misses and false alarms (at most a few per run).
    pub misses: Vec<String>,
    /// Rows: the true label; columns: the detector's answer (`Label::index`; the last is
    /// "no gap").
    pub confusion: [[u64; Label::COUNT]; Label::COUNT],
    /// Gaps the truth names, and those whose evidence the capture lacks.
    pub gaps: usize,
    pub not_observable: usize,
    /// Stalls reported on gaps whose true class is no stall and which the truth does not
    /// accept as one either (every false positive counts against precision; these are
    /// the ones the capture could have ruled out).
    pub stalls_where_none: usize,
    /// Stalled directions whose delayer's stack has a timer `analyze` names, and those
    /// where it named that timer.
    pub stacks_read: usize,
    pub stacks_named_right: usize,
    /// Of the rest, those where `analyze` named no stack alone but listed the right one
    /// among the stacks the delays fit (the others were named wrong).
    pub stacks_left_open: usize,
}

impl Accuracy {
    pub fn add(&mut self, other: &Accuracy) {
        self.true_positives += other.true_positives;
        self.false_positives += other.false_positives;
        self.false_negatives += other.false_negatives;
        self.misses.extend(other.misses.iter().cloned());
        for (row, other_row) in self.confusion.iter_mut().zip(&other.confusion) {
            for (cell, other_cell) in row.iter_mut().zip(other_row) {
                *cell += other_cell;
            }
        }
        self.gaps += other.gaps;
        self.not_observable += other.not_observable;
        self.stalls_where_none += other.stalls_where_none;
        self.stacks_read += other.stacks_read;
        self.stacks_named_right += other.stacks_named_right;
        self.stacks_left_open += other.stacks_left_open;
    }

    /// Stalled directions whose reading named a stack the delayer does not run, or
    /// listed the stacks it could be without it.
    pub fn stacks_named_wrong(&self) -> usize {
        self.stacks_read - self.stacks_named_right - self.stacks_left_open
    }

    /// The share of stalled directions whose delayer's stack was named right.
    pub fn stacks_named(&self) -> f64 {
        share(
            self.stacks_named_right,
            self.stacks_read - self.stacks_named_right,
        )
    }

    pub fn precision(&self) -> f64 {
        precision(self.true_positives, self.false_positives)
    }

    pub fn recall(&self) -> f64 {
        recall(self.true_positives, self.false_negatives)
    }

    /// Keeps a reason: at most a few false stalls and a few misses per run.
    fn note(&mut self, reason: String) {
        let false_stall = reason.starts_with("false");
        let same_kind = self
            .misses
            .iter()
            .filter(|m| m.starts_with("false") == false_stall)
            .count();
        if same_kind < REASONS_PER_RUN {
            self.misses.push(reason);
        }
    }
}

/// The share of what was reported that was real (1 when nothing was reported).
pub fn precision(true_positives: usize, false_positives: usize) -> f64 {
    share(true_positives, false_positives)
}

/// The share of what was real that was reported (1 when nothing was real).
pub fn recall(true_positives: usize, false_negatives: usize) -> f64 {
    share(true_positives, false_negatives)
}

/// `hits` out of `hits + misses`; 1 when both are 0.
fn share(hits: usize, misses: usize) -> f64 {
    let all = hits + misses;
    if all == 0 {
        1.0
    } else {
        hits as f64 / all as f64
    }
}

/// Writes the run's capture as a pcap file in memory (headers only).
pub fn pcap_bytes(result: &RunResult, seed: u64) -> Vec<u8> {
    let mut writer = match PcapWriter::new(Vec::new(), 0) {
        Ok(w) => w,
        Err(_) => return Vec::new(),
    };
    for segment in capture_segments(result, seed) {
        // Writing to a Vec cannot fail.
        let _ = writer.write_segment(&segment);
    }
    writer.into_inner()
}

/// A gap the detector named: its class, and its basis for the reasons.
struct Detected {
    label: Label,
    basis: String,
}

/// The timer `analyze` should name for a stack's delayed ACKs (None: one it does not
/// name, as a tick that fires on the second tick).
pub fn named_timer(profile: &StackProfile) -> Option<TimerGuess> {
    match profile.delayed_ack {
        DelayedAckTimer::LinuxAto { .. } => Some(TimerGuess::Linux40),
        DelayedAckTimer::PerConnection { delay } if delay == stacks::FREEBSD_DELACKTIME => {
            Some(TimerGuess::FreeBsd100)
        }
        DelayedAckTimer::PerConnection { delay } if delay == stacks::WINDOWS_DELACK => {
            Some(TimerGuess::Fixed200)
        }
        DelayedAckTimer::GlobalTick { period, ticks: 1 } if period == stacks::BSD_FAST_TICK => {
            Some(TimerGuess::PhasedTick200)
        }
        DelayedAckTimer::GlobalTick { period, ticks }
            if period == stacks::WINDOWS_XP_TICK && ticks == stacks::WINDOWS_XP_DELACK_TICKS =>
        {
            Some(TimerGuess::WindowsTicks)
        }
        _ => None,
    }
}

/// Runs the analyzer on the run's capture and scores every gap against the truth.
pub fn evaluate(result: &RunResult, seed: u64, options: &AnalyzeOptions) -> Accuracy {
    evaluate_with_stacks(result, seed, options, [None, None])
}

/// As [`evaluate`], and scores the delayer's stack named in each stalled direction
/// against `timers`, the timer each side's stack uses (client, server).
pub fn evaluate_with_stacks(
    result: &RunResult,
    seed: u64,
    options: &AnalyzeOptions,
    timers: [Option<TimerGuess>; 2],
) -> Accuracy {
    let bytes = pcap_bytes(result, seed);
    let mut accuracy = Accuracy::default();
    let analysis = match analyze(Cursor::new(bytes), "simulation", options) {
        Ok(a) => a,
        Err(e) => {
            accuracy.false_negatives = result.gaps.iter().filter(|g| g.label.is_stall()).count();
            accuracy.note(format!("the analyzer refused the capture: {e}"));
            return accuracy;
        }
    };
    for c in &analysis.connections {
        for d in &c.directions {
            let Some(profile) = &d.delayed_ack else {
                continue;
            };
            let Some(truth) = timers[usize::from(profile.role == Role::Server)] else {
                continue;
            };
            accuracy.stacks_read += 1;
            // Right: the stack named, or a tick whose steady phase gave one delay that
            // only a tick explains among the stacks named.
            let reading = &profile.reading;
            let right = reading.timer == truth
                || (reading.timer == TimerGuess::Other && reading.could_be == [truth]);
            if right {
                accuracy.stacks_named_right += 1;
            } else if reading.timer == TimerGuess::Other && reading.could_be.contains(&truth) {
                accuracy.stacks_left_open += 1;
            } else {
                accuracy.note(format!(
                    "stack: the {} delays with {}; analyze read {} ms median: {}",
                    profile.role.name(),
                    truth.describe(),
                    reading.median as f64 / 1e6,
                    reading.describe()
                ));
            }
        }
    }
    // The detector's gaps by the record that ends them: its time, and its sender.
    let mut detected: HashMap<(Nanos, Side), Detected> = HashMap::new();
    for c in &analysis.connections {
        for e in &c.events {
            let sender = Side::second_if(c.role_of_side(e.sender) == Role::Server);
            detected.insert(
                (e.end, sender),
                Detected {
                    label: Label::Class(e.class),
                    basis: e.evidence.basis.names().join(" > "),
                },
            );
        }
    }
    for gap in &result.gaps {
        let answer = detected.remove(&(gap.end, gap.sender));
        let found = answer.as_ref().map_or(Label::NoGap, |d| d.label);
        score_gap(
            &mut accuracy,
            gap,
            found,
            answer.as_ref().map(|d| d.basis.as_str()),
        );
    }
    // Gaps only the detector saw (a threshold rounding apart): the truth calls them none.
    for ((end, sender), answer) in detected {
        accuracy.confusion[Label::NoGap.index()][answer.label.index()] += 1;
        if answer.label.is_stall() {
            accuracy.false_positives += 1;
            accuracy.stalls_where_none += 1;
            accuracy.note(format!(
                "false {} on the {} at {:.6} s where the truth has no gap ({})",
                answer.label.name(),
                side_name(sender),
                end as f64 / 1e9,
                answer.basis
            ));
        }
    }
    accuracy
}

fn score_gap(accuracy: &mut Accuracy, gap: &TruthGap, found: Label, basis: Option<&str>) {
    accuracy.gaps += 1;
    if !gap.observable {
        accuracy.not_observable += 1;
    }
    accuracy.confusion[gap.label.index()][found.index()] += 1;
    let basis = basis.unwrap_or("no event");
    if gap.label.is_stall() {
        if found == gap.label {
            accuracy.true_positives += 1;
            return;
        }
        if gap.accepts(found) && !found.is_stall() {
            return;
        }
        if gap.observable && !gap.accepts(found) {
            accuracy.false_negatives += 1;
            accuracy.note(format!(
                "missed: detected {}: {} [{basis}]",
                found.name(),
                gap.describe()
            ));
        }
        if found.is_stall() {
            accuracy.false_positives += 1;
            accuracy.note(format!(
                "wrong stall class {}: {} [{basis}]",
                found.name(),
                gap.describe()
            ));
        }
    } else if found.is_stall() {
        // A stall reported where the truth is another class is a false stall, even where
        // the truth accepts it as what the capture cannot tell apart (a hold the threshold
        // splits, loss recovery released by a delayed ACK): precision counts what was said.
        accuracy.false_positives += 1;
        if !gap.accepts(found) {
            accuracy.stalls_where_none += 1;
        }
        accuracy.note(format!(
            "false {}: {} [{basis}]",
            found.name(),
            gap.describe()
        ));
    }
}

/// One run of the accuracy matrix: which family, and the scenario.
#[derive(Clone, Debug)]
pub struct CellSpec {
    pub family: &'static str,
    pub label: String,
    pub file: ScenarioFile,
}

/// One cell of the accuracy matrix.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixCell {
    pub family: String,
    pub client: String,
    pub server: String,
    pub pattern: String,
    pub rtt_ms: f64,
    pub capture: String,
    /// What sets this cell apart within its family.
    pub variant: String,
    pub truth_stalls: usize,
    pub accuracy: Accuracy,
}

/// The families of the matrix: request/response over every stack pair (where stalls
/// are), then each look-alike of a stall.
pub const FAMILIES: &[(&str, &str)] = &[
    (
        "request-response",
        "7 x 7 stacks x 8 patterns x RTT 0.05/1/20/100 ms x capture at client/server/tap",
    ),
    (
        "slow-reader",
        "small receive buffers read slowly: the window closes, zero windows, persist probes, window updates",
    ),
    (
        "periodic-nodelay",
        "TCP_NODELAY messages on the client's clock, the receiver's ACK landing just before the next",
    ),
    (
        "bottleneck",
        "a FIFO bottleneck queue beyond the capture point delays data and the ACKs behind it",
    ),
    (
        "offload",
        "host captures with TSO/GRO: records larger than the MSS",
    ),
    (
        "capture-miss",
        "captures that miss a share of the records (the link delivers them)",
    ),
    (
        "multi-response-read",
        "pipelined requests; the client reads two responses in one call and writes two requests",
    ),
    (
        "varying-delay",
        "a per-packet delay varying up to 10-30 % without reordering, on 1, 80 and 400 ms paths",
    ),
    (
        "strict-1323",
        "holders that take TS.Recent only from a segment covering their last ACK (RFC 1323), a Linux delayer",
    ),
    (
        "slow-ts-clock",
        "holders whose TSval clock ticks 2 or 10 times a second, or 0.5 % slow",
    ),
    (
        "windows-wan",
        "Windows holders (no timestamps) on 80 and 150 ms paths whose delay varies",
    ),
    (
        "two-way",
        "both ends write at once and each its next message after reading the other's (SSH, VPN over TCP)",
    ),
    (
        "send-buffer",
        "bulk writes through a small SO_SNDBUF and a bottleneck: data waits for ACKs the bottleneck paces",
    ),
    (
        "cork",
        "TCP_CORK and MSG_MORE messages whose writes are 0, 50 or 250 ms apart (Linux flushes after 200 ms)",
    ),
    (
        "prompt-ack-400ms",
        "Nagle holds released by ACKs sent at once over a 400 ms path whose delay varies",
    ),
    (
        "steady-poller",
        "requests in pieces after a fixed think time on a steady path: every pause recurs alike",
    ),
    (
        "clocked-sender",
        "a server writing 1031 B chunks, one or two at a time, on its own clock of a period near, below and above the round trip",
    ),
    (
        "paced-bulk",
        "full-sized segments a 64-100 kbit/s bottleneck spaces, to a receiver that delays each lone segment's ACK",
    ),
    (
        "delayer-stack",
        "Linux, Windows, Windows XP, BSD-tick and macOS delayers over 20, 60 (+0-40) and 150 ms paths whose delay varies",
    ),
    (
        "upstream-relay",
        "a relay writing what a slow upstream delivers as it trickles in: its writes follow the upstream, not the ACKs",
    ),
    (
        "transfer-end",
        "FTP control replies: 150, then 226 written when the data connection closes, a time the transfer sets",
    ),
];

const CLASSIC_PATTERNS: [&str; 8] = [
    "two-writes",
    "one-write",
    "pipeline",
    "bulk",
    "sftp",
    "proxy-split",
    "http-keepalive",
    "interactive",
];
const CAPTURES: [&str; 3] = ["client", "server", "tap"];

fn file(client: &str, server: &str, pattern: &str, rtt: f64, capture: &str) -> ScenarioFile {
    let mut file = ScenarioFile::default();
    file.client.stack = client.to_string();
    file.server.stack = server.to_string();
    file.workload.pattern = pattern.to_string();
    file.link.rtt_ms = rtt;
    file.capture = Some(capture.to_string());
    file
}

/// One run of `family` at each capture point: `client` to `server` running `pattern`
/// over `rtt` ms, set up by `set`.
fn at_each_capture(
    cells: &mut Vec<CellSpec>,
    family: &'static str,
    label: String,
    (client, server, pattern, rtt): (&str, &str, &str, f64),
    set: impl Fn(&mut ScenarioFile),
) {
    for capture in CAPTURES {
        let mut file = file(client, server, pattern, rtt, capture);
        set(&mut file);
        cells.push(CellSpec {
            family,
            label: label.clone(),
            file,
        });
    }
}

/// Every run of the matrix. `transactions` sets the request/response family's count.
pub fn cells(transactions: u32) -> Vec<CellSpec> {
    let mut cells = Vec::new();
    let profiles = crate::profile::names();
    for client in &profiles {
        for server in &profiles {
            for pattern in CLASSIC_PATTERNS {
                for rtt in [0.05, 1.0, 20.0, 100.0] {
                    at_each_capture(
                        &mut cells,
                        "request-response",
                        String::new(),
                        (client, server, pattern, rtt),
                        |f| f.workload.transactions = transactions,
                    );
                }
            }
        }
    }
    slow_readers(&mut cells);
    periodic_senders(&mut cells);
    bottlenecks(&mut cells);
    offloaded_captures(&mut cells);
    missing_captures(&mut cells);
    multi_response_reads(&mut cells);
    varying_delays(&mut cells);
    strict_1323_holders(&mut cells);
    slow_ts_clocks(&mut cells);
    windows_wan(&mut cells);
    two_way(&mut cells);
    send_buffers(&mut cells);
    corks(&mut cells);
    prompt_acks_on_long_paths(&mut cells);
    steady_pollers(&mut cells);
    clocked_senders(&mut cells);
    paced_bulk(&mut cells);
    delayer_stacks(&mut cells);
    upstream_relays(&mut cells);
    transfer_ends(&mut cells);
    cells
}

fn slow_readers(cells: &mut Vec<CellSpec>) {
    // (rcvbuf, read_bytes, read_interval_ms): a steady slow reader, a slower one with
    // bigger reads, and one so slow that the persist timer probes.
    let readers = [(8192, 1024, 20.0), (16384, 4096, 100.0), (4096, 512, 300.0)];
    for sender in ["linux", "windows", "freebsd"] {
        for receiver in ["linux", "windows", "macos"] {
            for (rcvbuf, read_bytes, interval) in readers {
                for pattern in ["stream", "proxy-split"] {
                    for rtt in [1.0, 20.0] {
                        at_each_capture(
                            cells,
                            "slow-reader",
                            format!("rcvbuf {rcvbuf}, {read_bytes} B every {interval} ms"),
                            (sender, receiver, pattern, rtt),
                            |f| {
                                f.server.reader.rcvbuf = Some(rcvbuf);
                                f.server.reader.read_bytes = Some(read_bytes);
                                f.server.reader.read_interval_ms = interval;
                                if pattern == "stream" {
                                    f.workload.request = vec![8192];
                                }
                                f.workload.transactions = 6;
                            },
                        );
                    }
                }
            }
        }
    }
}

fn periodic_senders(cells: &mut Vec<CellSpec>) {
    // The receiver, how late its application reads, and a period just above the time
    // its ACK comes: a Linux read (or timer) at 38 to 45 ms against 40 and 50 ms, a
    // 17 ms read against 20 ms, FreeBSD's 100 ms timer against 110, Windows' 200 ms
    // timer against 210, the BSD tick against 210 and 250 ms.
    let receivers: [(&str, f64, f64); 8] = [
        ("linux", 45.0, 50.0),
        ("linux", 38.0, 40.0),
        ("linux", 17.0, 20.0),
        ("linux", 0.0, 50.0),
        ("freebsd", 0.0, 110.0),
        ("windows", 0.0, 210.0),
        ("macos", 0.0, 210.0),
        ("aix", 0.0, 250.0),
    ];
    for (receiver, read_delay, period) in receivers {
        for sender in ["linux", "windows"] {
            for rtt in [0.05, 1.0, 5.0, 20.0] {
                at_each_capture(
                    cells,
                    "periodic-nodelay",
                    format!("period {period} ms, server reads {read_delay} ms late"),
                    (sender, receiver, "periodic", rtt),
                    |f| {
                        f.client.options.nodelay = true;
                        f.server.reader.read_delay_ms = read_delay;
                        f.workload.period_ms = period;
                        f.workload.transactions = 30;
                    },
                );
            }
        }
    }
}

fn bottlenecks(cells: &mut Vec<CellSpec>) {
    let pairs = [
        ("linux", "linux"),
        ("macos-legacy", "macos-legacy"),
        ("linux", "windows"),
    ];
    for pattern in ["bulk", "sftp", "proxy-split", "pipeline", "stream"] {
        for bps in [1e6, 5e6, 20e6] {
            for queue in [30, 200] {
                for (client, server) in pairs {
                    for rtt in [1.0, 20.0] {
                        at_each_capture(
                            cells,
                            "bottleneck",
                            format!("{} Mbit/s, {queue} packets", bps / 1e6),
                            (client, server, pattern, rtt),
                            |f| {
                                f.link.bottleneck_bps = Some(bps);
                                f.link.bottleneck_queue_packets = queue;
                                f.workload.transactions = if pattern == "stream" { 4 } else { 6 };
                            },
                        );
                    }
                }
            }
        }
    }
}

fn offloaded_captures(cells: &mut Vec<CellSpec>) {
    for pattern in CLASSIC_PATTERNS {
        for (client, server) in [
            ("linux", "linux"),
            ("linux", "windows"),
            ("windows", "linux"),
        ] {
            for rtt in [0.05, 1.0, 20.0] {
                for capture in ["client", "server"] {
                    let mut f = file(client, server, pattern, rtt, capture);
                    f.capture_offload = true;
                    f.workload.transactions = 8;
                    cells.push(CellSpec {
                        family: "offload",
                        label: "TSO/GRO".into(),
                        file: f,
                    });
                }
            }
        }
    }
}

fn missing_captures(cells: &mut Vec<CellSpec>) {
    for miss in [0.05, 0.15] {
        for pattern in CLASSIC_PATTERNS {
            for (client, server) in [("linux", "linux"), ("windows", "aix")] {
                for rtt in [1.0, 20.0] {
                    at_each_capture(
                        cells,
                        "capture-miss",
                        format!("{:.0}% missed", miss * 100.0),
                        (client, server, pattern, rtt),
                        |f| {
                            f.capture_miss = miss;
                            f.workload.transactions = 8;
                        },
                    );
                }
            }
        }
    }
}

fn multi_response_reads(cells: &mut Vec<CellSpec>) {
    for (pattern, request) in [
        ("pipeline", None),
        ("http-keepalive", None),
        ("sftp", Some(vec![96u32, 656])),
    ] {
        for read_delay in [0.2, 2.0, 15.0] {
            for (client, server) in [
                ("linux", "linux"),
                ("linux", "windows"),
                ("windows", "linux"),
            ] {
                for rtt in [0.05, 1.0, 20.0] {
                    at_each_capture(
                        cells,
                        "multi-response-read",
                        format!("client reads {read_delay} ms late"),
                        (client, server, pattern, rtt),
                        |f| {
                            f.workload.depth = 2;
                            if let Some(request) = &request {
                                f.workload.request = request.clone();
                            }
                            f.client.reader.read_delay_ms = read_delay;
                            f.workload.transactions = 12;
                        },
                    );
                }
            }
        }
    }
}

/// The patterns where a request or response is written in two calls, and a bulk block.
const HOLDING_PATTERNS: [&str; 5] = [
    "two-writes",
    "http-keepalive",
    "proxy-split",
    "sftp",
    "bulk",
];

/// Six transactions of `run` at each capture point, over a path whose delay varies by up
/// to `variation` of itself.
fn over_varying_delay(
    cells: &mut Vec<CellSpec>,
    family: &'static str,
    run: (&str, &str, &str, f64),
    variation: f64,
) {
    at_each_capture(
        cells,
        family,
        format!("delay varying by up to {:.0}%", variation * 100.0),
        run,
        |f| {
            f.link.delay_variation = variation;
            f.workload.transactions = 6;
        },
    );
}

fn varying_delays(cells: &mut Vec<CellSpec>) {
    // A queue on the path that fills and drains: the round trip varies per packet, in
    // order (RFC 6298 2: the reason RTTVAR exists); a LAN, a WAN of 80 to 88 or 104 ms,
    // and a 400 ms satellite-like path.
    let paths = [(1.0, 0.3), (80.0, 0.1), (80.0, 0.3), (400.0, 0.2)];
    for (rtt, variation) in paths {
        for (client, server) in [("linux", "linux"), ("windows", "linux"), ("linux", "macos")] {
            for pattern in HOLDING_PATTERNS {
                over_varying_delay(
                    cells,
                    "varying-delay",
                    (client, server, pattern, rtt),
                    variation,
                );
            }
        }
    }
}

/// Which side holds data in a pattern: the server for headers and body written apart.
fn holder_is_server(pattern: &str) -> bool {
    pattern == "http-keepalive"
}

/// A `holder` stack on the holding side of `pattern`, Linux on the other.
fn holding<'a>(holder: &'a str, pattern: &'a str, rtt: f64) -> (&'a str, &'a str, &'a str, f64) {
    if holder_is_server(pattern) {
        ("linux", holder, pattern, rtt)
    } else {
        (holder, "linux", pattern, rtt)
    }
}

/// The options of the side holding data in the file's pattern.
fn holder_of(f: &mut ScenarioFile) -> &mut crate::scenario::SideConfig {
    if holder_is_server(&f.workload.pattern) {
        &mut f.server
    } else {
        &mut f.client
    }
}

fn strict_1323_holders(cells: &mut Vec<CellSpec>) {
    // RFC 1323 4.3 (4.4BSD-Lite2 tcp_input.c, embedded BSD-derived stacks): TS.Recent
    // only from a segment covering Last.ACK.sent, so the released data echoes the
    // delayer's older data, not its ACK.
    for holder in ["linux", "freebsd", "macos"] {
        for pattern in ["two-writes", "sftp", "proxy-split", "http-keepalive"] {
            for rtt in [1.0, 20.0, 100.0] {
                at_each_capture(
                    cells,
                    "strict-1323",
                    format!("{holder} holder on RFC 1323's TS.Recent rule"),
                    holding(holder, pattern, rtt),
                    |f| {
                        holder_of(f).ts_recent = Some("rfc1323".into());
                        f.workload.transactions = 8;
                    },
                );
            }
        }
    }
}

fn slow_ts_clocks(cells: &mut Vec<CellSpec>) {
    // RFC 7323 5.4: a TSval tick of 1 ms to 1 s; 2 Hz as 4.4BSD's slow timer (KAME and
    // old BSD stacks), 10 Hz, and a nominal 1 kHz clock running 0.5 % slow.
    for hz in [2.0, 10.0, 995.0] {
        for holder in ["linux", "freebsd", "macos-legacy"] {
            for pattern in ["two-writes", "sftp", "http-keepalive"] {
                for rtt in [1.0, 20.0] {
                    at_each_capture(
                        cells,
                        "slow-ts-clock",
                        format!("holder's TSval clock at {hz} Hz"),
                        holding(holder, pattern, rtt),
                        |f| {
                            holder_of(f).ts_hz = Some(hz);
                            f.workload.transactions = 8;
                        },
                    );
                }
            }
        }
    }
}

fn windows_wan(cells: &mut Vec<CellSpec>) {
    // Windows' Tcp1323Opts default: no timestamps, so nothing but timing shows when held
    // data left; its 200 ms delayed-ACK timer against a WAN round trip that varies.
    let pairs = [
        ("windows", "linux"),
        ("windows", "windows"),
        ("linux", "windows"),
        ("macos", "windows"),
    ];
    for (client, server) in pairs {
        for pattern in ["two-writes", "sftp", "proxy-split", "http-keepalive"] {
            for rtt in [80.0, 150.0] {
                for variation in [0.1, 0.3] {
                    over_varying_delay(
                        cells,
                        "windows-wan",
                        (client, server, pattern, rtt),
                        variation,
                    );
                }
            }
        }
    }
}

fn two_way(cells: &mut Vec<CellSpec>) {
    // Both ends with unacknowledged data at once (RFC 1122 4.2.3.2: an ACK rides on data
    // when there is some): either may be held by Nagle while the other delays its ACK.
    let pairs = [
        ("linux", "linux"),
        ("freebsd", "freebsd"),
        ("windows", "windows"),
        ("freebsd", "windows"),
        ("macos", "freebsd"),
        ("linux", "windows"),
    ];
    for (client, server) in pairs {
        for rtt in [1.0, 20.0, 80.0] {
            for think in [0.0, 5.0] {
                at_each_capture(
                    cells,
                    "two-way",
                    format!("server thinks {think} ms"),
                    (client, server, "two-way", rtt),
                    |f| {
                        f.workload.server_think_ms = think;
                        f.workload.transactions = 10;
                    },
                );
            }
        }
    }
}

fn send_buffers(cells: &mut Vec<CellSpec>) {
    // SO_SNDBUF (Linux sk_stream_write_space, BSD sowwakeup at SO_SNDLOWAT): a blocked
    // writer's data leaves on each ACK, and a bottleneck paces the ACKs.
    for sender in ["linux", "windows", "freebsd"] {
        for receiver in ["linux", "windows"] {
            for sndbuf in [4096, 16384] {
                for bps in [1e6, 5e6] {
                    for rtt in [1.0, 20.0] {
                        at_each_capture(
                            cells,
                            "send-buffer",
                            format!("SO_SNDBUF {sndbuf}, {} Mbit/s", bps / 1e6),
                            (sender, receiver, "bulk", rtt),
                            |f| {
                                f.client.sndbuf = Some(sndbuf);
                                f.link.bottleneck_bps = Some(bps);
                                f.link.bottleneck_queue_packets = 30;
                                f.workload.transactions = 3;
                            },
                        );
                    }
                }
            }
        }
    }
}

fn corks(cells: &mut Vec<CellSpec>) {
    // TCP_CORK and MSG_MORE (tcp(7): corked output is sent after 200 ms at most): a
    // message's writes leave together, or its first after the flush.
    for option in ["cork", "msg_more"] {
        for server in ["linux", "windows"] {
            for pattern in ["two-writes", "http-keepalive", "proxy-split", "sftp"] {
                for gap in [0.0, 50.0, 250.0] {
                    for rtt in [1.0, 20.0] {
                        at_each_capture(
                            cells,
                            "cork",
                            format!("{option}, writes {gap} ms apart"),
                            ("linux", server, pattern, rtt),
                            |f| {
                                for (side, linux) in
                                    [(&mut f.client, true), (&mut f.server, server == "linux")]
                                {
                                    if linux {
                                        side.options.cork = option == "cork";
                                        side.options.msg_more = option == "msg_more";
                                    }
                                }
                                f.workload.write_gap_ms = gap;
                                f.workload.transactions = 6;
                            },
                        );
                    }
                }
            }
        }
    }
}

fn prompt_acks_on_long_paths(cells: &mut Vec<CellSpec>) {
    // TCP_QUICKACK (Linux) and TcpAckFrequency=1 (Windows): every segment acknowledged
    // at once, so a Nagle hold lasts one round trip, however long.
    for client in ["linux", "windows", "macos"] {
        for server in ["linux", "windows"] {
            for pattern in ["two-writes", "sftp", "proxy-split", "http-keepalive"] {
                for variation in [0.1, 0.3] {
                    at_each_capture(
                        cells,
                        "prompt-ack-400ms",
                        format!(
                            "ACKs at once, delay varying by up to {:.0}%",
                            variation * 100.0
                        ),
                        (client, server, pattern, 400.0),
                        |f| {
                            f.client.options.quickack = true;
                            f.server.options.quickack = true;
                            f.link.delay_variation = variation;
                            f.workload.transactions = 6;
                        },
                    );
                }
            }
        }
    }
}

fn steady_pollers(cells: &mut Vec<CellSpec>) {
    // A poller (a monitoring agent, a Modbus or Redis health check) waits a fixed time
    // after each reply, then writes its next request in pieces; on a steady path each
    // think time and each hold lasts the same every time, so its pauses keep a rhythm
    // that is the exchange's, not a clock of its own.
    let pairs = [
        ("linux", "linux"),
        ("windows", "linux"),
        ("linux", "aix"),
        ("aix", "linux"),
        ("linux", "macos-legacy"),
    ];
    for (client, server) in pairs {
        for pattern in ["two-writes", "proxy-split", "sftp", "http-keepalive"] {
            for (rtt, think) in [(20.0, 15.0), (50.0, 50.0), (150.0, 50.0)] {
                at_each_capture(
                    cells,
                    "steady-poller",
                    format!("{think} ms think time, steady path"),
                    (client, server, pattern, rtt),
                    |f| {
                        f.link.jitter_ms = 0.1;
                        if holder_is_server(pattern) {
                            f.workload.server_think_ms = think;
                        } else {
                            f.workload.client_think_ms = think;
                        }
                        f.workload.transactions = 10;
                    },
                );
            }
        }
    }
}

fn clocked_senders(cells: &mut Vec<CellSpec>) {
    // A server streaming a slow response (a chunked HTTP body, a feed) writes a chunk, or
    // two back to back, every period on its own clock, whatever the ACKs do; the client
    // delays the ACK of each lone chunk. Periods near, below and above the round trip.
    for client in ["windows", "linux"] {
        for nodelay in [false, true] {
            for (rtt, period) in [(190.0, 205.0), (190.0, 150.0), (100.0, 205.0), (20.0, 45.0)] {
                for chunks in [1usize, 2] {
                    at_each_capture(
                        cells,
                        "clocked-sender",
                        format!(
                            "{chunks} x 1031 B every {period} ms{}",
                            if nodelay { ", TCP_NODELAY" } else { "" }
                        ),
                        (client, "linux", "script", rtt),
                        |f| {
                            f.server.options.nodelay = nodelay;
                            f.workload.client_script = vec![(0.0, 595)];
                            f.workload.server_script = (0..16)
                                .flat_map(|k| {
                                    std::iter::repeat_n(
                                        (rtt * 2.0 + period * k as f64, 1031),
                                        chunks,
                                    )
                                })
                                .collect();
                        },
                    );
                }
            }
        }
    }
}

fn paced_bulk(cells: &mut Vec<CellSpec>) {
    // A response of full-sized segments through a bottleneck of tens of kbit/s on a
    // long path: the link spaces the segments by their crossing, and the receiver
    // delays the ACK of each lone one.
    for client in ["windows", "windows-xp", "linux"] {
        for bps in [64e3, 100e3] {
            for rtt in [300.0, 500.0] {
                at_each_capture(
                    cells,
                    "paced-bulk",
                    format!("{} kbit/s", bps / 1e3),
                    (client, "linux", "custom", rtt),
                    |f| {
                        f.link.bottleneck_bps = Some(bps);
                        f.link.bottleneck_queue_packets = 30;
                        f.workload.request = vec![479];
                        f.workload.response = vec![16 * 1380];
                        f.workload.transactions = 2;
                    },
                );
            }
        }
    }
}

fn delayer_stacks(cells: &mut Vec<CellSpec>) {
    // The delayer's timer read through a path whose delay varies per packet, from each
    // capture point: Linux's 40 ms, Windows' 200 ms, Windows XP's two 100 ms ticks, a
    // classic BSD tick (Mac OS X before 10.5) and macOS, delaying a client's request (two writes) or a server's response
    // (headers and body apart), over 20 ms, 60 ms + 0 to 40 ms and 150 ms paths.
    for delayer in ["linux", "windows", "windows-xp", "macos-legacy", "macos"] {
        for pattern in ["two-writes", "http-keepalive"] {
            let (client, server) = if holder_is_server(pattern) {
                (delayer, "linux")
            } else {
                ("linux", delayer)
            };
            for (rtt, variation) in [(20.0, 0.3), (60.0, 0.67), (150.0, 0.3)] {
                at_each_capture(
                    cells,
                    "delayer-stack",
                    format!(
                        "{delayer} delayer, delay varying by up to {:.0}%",
                        variation * 100.0
                    ),
                    (client, server, pattern, rtt),
                    |f| {
                        f.link.delay_variation = variation;
                        f.workload.transactions = 8;
                    },
                );
            }
        }
    }
}

/// A fixed sequence of draws in [0, 1) (xorshift64*), so a family's irregular timings are
/// the same in every run of the matrix.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// When a relay writes what its upstream delivers, starting at `start` ms: a burst every
/// `mean_gap` ms or so (half to one and a half of it), each of one to three upstream
/// segments of 1448 B and a shorter tail, written as each arrives (`spacing` ms apart).
fn upstream_arrivals(
    draws: &mut Draws,
    start: f64,
    mean_gap: f64,
    spacing: f64,
) -> Vec<(f64, u32)> {
    let mut writes = Vec::new();
    let mut at = start;
    for _ in 0..14 {
        let full = (draws.next() * 3.0) as usize;
        for k in 0..full {
            writes.push((at + spacing * k as f64, 1448));
        }
        let tail = 100 + (draws.next() * 1300.0) as u32;
        writes.push((at + spacing * full as f64, tail));
        at += mean_gap * (0.5 + draws.next());
    }
    writes
}

fn upstream_relays(cells: &mut Vec<CellSpec>) {
    // A relay (nginx with proxy_buffering off, HAProxy, a TLS terminator) writes what its
    // upstream delivers as it arrives (one read, one write): its writes follow the
    // upstream's arrivals, never the client's ACKs, and a data segment that leaves just
    // after an ACK arrives does so by chance. nginx and HAProxy set TCP_NODELAY on client
    // connections; a relay that does not is held by Nagle like any other sender.
    let mut draws = Draws(0x005e_ed0f_7e1a);
    for client in ["linux", "windows"] {
        for nodelay in [true, false] {
            // Upstreams slower than, as slow as and faster than the client's round trip,
            // their segments spaced by a link of a few Mbit/s.
            for (rtt, mean_gap, spacing) in
                [(20.0, 35.0, 3.0), (100.0, 90.0, 5.0), (190.0, 60.0, 12.0)]
            {
                let writes = upstream_arrivals(&mut draws, rtt * 1.5, mean_gap, spacing);
                at_each_capture(
                    cells,
                    "upstream-relay",
                    format!(
                        "upstream bursts every {mean_gap} ms or so{}",
                        if nodelay { ", TCP_NODELAY" } else { "" }
                    ),
                    (client, "linux", "script", rtt),
                    |f| {
                        f.server.options.nodelay = nodelay;
                        f.workload.client_script = vec![(0.0, 420)];
                        f.workload.server_script = writes.clone();
                    },
                );
            }
        }
    }
}

fn transfer_ends(cells: &mut Vec<CellSpec>) {
    // FTP (RFC 959 4.2): on the control connection the server writes `150` when it opens
    // the data connection and `226` when that connection has closed, so the 226 leaves
    // when the transfer ends, a time the file's size and the data path set, not the
    // client's ACK of the 150. The client sends its next command once the 226 arrives.
    let mut draws = Draws(0x00f7_b226);
    for client in ["linux", "windows"] {
        for server in ["linux", "freebsd"] {
            for rtt in [1.0, 20.0, 60.0] {
                let mut client_script = Vec::new();
                let mut server_script = Vec::new();
                let mut command = 0.0;
                for _ in 0..10 {
                    client_script.push((command, 16));
                    let opened = command + rtt / 2.0 + 0.3;
                    server_script.push((opened, 54));
                    // The transfer: 2 to 400 ms, whatever the control connection does.
                    let closed = opened + 2.0 + 398.0 * draws.next();
                    server_script.push((closed, 24));
                    command = closed + rtt / 2.0 + 1.0;
                }
                at_each_capture(
                    cells,
                    "transfer-end",
                    "226 when the data connection closes".into(),
                    (client, server, "script", rtt),
                    |f| {
                        f.workload.client_script = client_script.clone();
                        f.workload.server_script = server_script.clone();
                    },
                );
            }
        }
    }
}

/// Runs one cell of the matrix.
pub fn run_cell(spec: &CellSpec, options: &AnalyzeOptions) -> Option<MatrixCell> {
    let scenario = spec.file.resolve().ok()?;
    let result = crate::run(&scenario, true);
    let timers = [
        named_timer(&scenario.client.profile),
        named_timer(&scenario.server.profile),
    ];
    let accuracy = evaluate_with_stacks(&result, scenario.link.seed, options, timers);
    Some(MatrixCell {
        family: spec.family.to_string(),
        client: spec.file.client.stack.clone(),
        server: spec.file.server.stack.clone(),
        pattern: spec.file.workload.pattern.clone(),
        rtt_ms: spec.file.link.rtt_ms,
        capture: spec.file.capture.clone().unwrap_or_default(),
        variant: spec.label.clone(),
        truth_stalls: result.gaps.iter().filter(|g| g.label.is_stall()).count(),
        accuracy,
    })
}

/// The matrix the detector is held to: every family's cells, run and scored. With
/// `seed`, every cell's seed (its jitter, loss, varying delay and timer phases) is set to
/// it: other draws of the same behaviours, which the rules were not written against.
pub fn matrix(transactions: u32, options: &AnalyzeOptions, seed: Option<u64>) -> Vec<MatrixCell> {
    let mut specs = cells(transactions);
    if let Some(seed) = seed {
        for spec in &mut specs {
            spec.file.link.seed = seed;
        }
    }
    specs
        .iter()
        .filter_map(|spec| run_cell(spec, options))
        .collect()
}
