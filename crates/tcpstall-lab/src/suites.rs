//! The published cases, each one command: seed 002's table of patterns and fixes, seed
//! 000's bulk blocks, the closed-loop and fidelity matrix, the look-alikes of a stall,
//! the delay line's accuracy, seeds 003 and 004 through the delay line, and the Java
//! programs over delays that vary, captured at the client, the middle and the server.

use std::time::Duration;

use serde::Serialize;
use tcpstall_sim::scenario::ScenarioFile;

use crate::Result;
use crate::capture::Point;
use crate::compare::{Confusion, SimComparison, compare_with_simulator};
use crate::delayline::{Lateness, Variation};
use crate::held::{self, Ends, Until};
use crate::lab::{Lab, LabRun, RunOptions, analyzer_stalled, diagnose};
use crate::measure::{LatencySummary, Timed, judge_round_trips};
use crate::programs::{Java, Program, ProgramRun};

/// One row of a side-by-side table: a scenario, the lab's run, the simulator's view.
pub struct Row {
    pub name: String,
    pub file: ScenarioFile,
    pub run: LabRun,
    pub sim: SimComparison,
}

impl Row {
    pub fn summary(&self) -> &LatencySummary {
        &self.run.summary
    }

    /// The simulator's median latency over the same transactions, ms.
    pub fn sim_p50_ms(&self) -> f64 {
        let mut ms: Vec<f64> = self.sim.pairs.iter().map(|p| p.sim_ms).collect();
        ms.sort_by(f64::total_cmp);
        crate::measure::percentile(&ms, 50.0)
    }

    pub fn sim_stalled(&self) -> usize {
        self.sim.pairs.iter().filter(|p| p.sim_stalled).count()
    }

    /// The exchanges the row's captures show waiting for a delayed ACK, and the analyzer's
    /// verdict on the same capture; nothing without a capture.
    pub fn waited(&self) -> Option<Waited> {
        Some(Waited {
            held: self.run.held_by_ack()?,
            found: self.run.analyzer_stalled.clone()?,
        })
    }
}

/// The truth of one run from its captures at both ends of the line, and what the analyzer
/// said of the same capture, exchange by exchange.
pub struct Waited {
    /// A pure ACK on the exchange's chain held for a delayed-ACK timer ([`crate::held`]);
    /// `None` where the captures do not show its chain.
    pub held: Vec<Option<bool>>,
    /// A TCP stall the analyzer found ends while the exchange was in flight.
    pub found: Vec<bool>,
}

impl Waited {
    /// Exchanges that waited for a delayed ACK.
    pub fn count(&self) -> usize {
        self.held.iter().filter(|h| **h == Some(true)).count()
    }

    /// Exchanges whose chain the captures do not show.
    pub fn unknown(&self) -> usize {
        self.held.iter().filter(|h| h.is_none()).count()
    }

    /// The analyzer against the truth, over the exchanges whose chain is known.
    pub fn analyzer(&self) -> Confusion {
        let unknown: Vec<bool> = self.held.iter().map(Option::is_none).collect();
        let held: Vec<bool> = self.held.iter().map(|h| *h == Some(true)).collect();
        Confusion::of_judged(&self.found, &held, &unknown)
    }

    /// The analyzer found a stall in exactly the exchanges that waited, and every chain is
    /// known.
    pub fn exact(&self) -> bool {
        let c = self.analyzer();
        self.unknown() == 0 && c.false_positives == 0 && c.false_negatives == 0
    }

    /// The simulator's stalled exchanges against the truth.
    pub fn simulator(&self, sim: &SimComparison) -> Confusion {
        let predicted: Vec<bool> = sim.pairs.iter().map(|p| p.sim_stalled).collect();
        let unknown: Vec<bool> = self.held.iter().map(Option::is_none).collect();
        let held: Vec<bool> = self.held.iter().map(|h| *h == Some(true)).collect();
        let n = predicted.len().min(held.len());
        Confusion::of_judged(&predicted[..n], &held[..n], &unknown[..n])
    }
}

/// Runs one named scenario file and compares it with the simulator.
pub fn run_row(lab: &Lab, name: &str, file: ScenarioFile, options: &RunOptions) -> Result<Row> {
    let scenario = file.resolve()?;
    let run = lab.run(&scenario, options)?;
    let sim = compare_with_simulator(&run, &file, &lab.net)?;
    Ok(Row {
        name: name.to_string(),
        file,
        run,
        sim,
    })
}

fn pattern_file(pattern: &str, transactions: u32) -> ScenarioFile {
    let mut file = ScenarioFile::default();
    file.workload.pattern = pattern.to_string();
    file.workload.transactions = transactions;
    file
}

/// Seed 002: the request "hello " + "world\n" and its fixes, side by side.
pub fn seed002_files(transactions: u32) -> Vec<(String, ScenarioFile)> {
    let two = pattern_file("two-writes", transactions);
    let mut nodelay = two.clone();
    nodelay.client.options.nodelay = true;
    let mut quickack = two.clone();
    quickack.server.options.quickack = true;
    let mut pipeline = pattern_file("pipeline", transactions);
    pipeline.workload.depth = 2;
    vec![
        ("two writes, then read".into(), two),
        ("one write".into(), pattern_file("one-write", transactions)),
        (
            "writev (one call)".into(),
            pattern_file("writev", transactions),
        ),
        ("two writes, TCP_NODELAY client".into(), nodelay),
        ("two writes, TCP_QUICKACK server".into(), quickack),
        ("two writes, pipelining depth 2".into(), pipeline),
    ]
}

pub fn seed002(lab: &Lab, transactions: u32, options: &RunOptions) -> Result<Vec<Row>> {
    seed002_files(transactions)
        .into_iter()
        .map(|(name, file)| run_row(lab, &name, file, options))
        .collect()
}

/// Seed 000's block sizes, as in the simulator's sweep: exactly 69 full segments at MSS
/// 1448, one byte more, and 100,000 bytes (69 full + 88).
pub const BULK_BLOCKS: [u32; 3] = [99_912, 99_913, 100_000];
/// The second of the two partial writes.
pub const BULK_TAIL_WRITE: u32 = 100;

/// Seed 000 on Linux: each block in one write, and the same bytes in two partial writes.
pub fn bulk_files(transactions: u32) -> Vec<(String, ScenarioFile)> {
    let mut files = Vec::new();
    for block in BULK_BLOCKS {
        let mut one = pattern_file("bulk", transactions);
        one.workload.request = vec![block];
        files.push((format!("{block} bytes in one write"), one));
        let mut two = pattern_file("custom", transactions);
        two.workload.request = vec![block - BULK_TAIL_WRITE, BULK_TAIL_WRITE];
        two.workload.response = vec![1];
        let mut spaced = two.clone();
        files.push((
            format!(
                "{block} bytes as {} + {BULK_TAIL_WRITE}",
                block - BULK_TAIL_WRITE
            ),
            two,
        ));
        // Autocorking joins back-to-back writes while the first is still leaving the
        // host; writes 5 ms apart leave the tail of the first on its own.
        spaced.workload.write_gap_ms = 5.0;
        files.push((
            format!(
                "{block} bytes as {} + {BULK_TAIL_WRITE}, 5 ms apart",
                block - BULK_TAIL_WRITE
            ),
            spaced,
        ));
    }
    files
}

pub fn bulk(lab: &Lab, transactions: u32, options: &RunOptions) -> Result<Vec<Row>> {
    bulk_files(transactions)
        .into_iter()
        .map(|(name, file)| run_row(lab, &name, file, options))
        .collect()
}

/// The matrix: every request/response pattern with and without each option.
pub fn matrix_files(transactions: u32) -> Vec<(String, ScenarioFile)> {
    let patterns = [
        "two-writes",
        "one-write",
        "writev",
        "pipeline",
        "bulk",
        "sftp",
        "proxy-split",
        "http-keepalive",
    ];
    let mut files = Vec::new();
    for pattern in patterns {
        let base = pattern_file(pattern, transactions);
        let mut variants = vec![("as given", base.clone())];
        let mut v = base.clone();
        v.client.options.nodelay = true;
        v.server.options.nodelay = true;
        variants.push(("TCP_NODELAY", v));
        let mut v = base.clone();
        v.client.options.quickack = true;
        v.server.options.quickack = true;
        variants.push(("TCP_QUICKACK", v));
        let mut v = base.clone();
        v.client.options.cork = true;
        v.server.options.cork = true;
        variants.push(("TCP_CORK", v));
        let mut v = base;
        v.client.options.msg_more = true;
        v.server.options.msg_more = true;
        variants.push(("MSG_MORE", v));
        for (variant, file) in variants {
            files.push((format!("{pattern}, {variant}"), file));
        }
    }
    files
}

/// Closed loop and fidelity over the matrix.
#[derive(Default)]
pub struct MatrixResult {
    pub rows: Vec<Row>,
    /// Analyzer (from the capture) against the exchanges that waited for a delayed ACK by
    /// the same capture ([`Waited`]); `None` without capture.
    pub closed_loop: Option<Confusion>,
    /// Exchanges whose chain the captures do not show, left out of the closed loop.
    pub unknown: usize,
    /// Simulator against the same truth; `None` without capture.
    pub fidelity_to_truth: Option<Confusion>,
    /// Simulator against the lab's latencies.
    pub fidelity: SimComparison,
}

pub fn matrix(lab: &Lab, transactions: u32, options: &RunOptions) -> Result<MatrixResult> {
    closed_loop(lab, matrix_files(transactions), options)
}

/// Runs each file; the analyzer and the simulator against the exchanges that waited for a
/// delayed ACK by the captures (with capture), and the simulator against the lab's
/// latencies, transaction by transaction, over all of them.
fn closed_loop(
    lab: &Lab,
    files: Vec<(String, ScenarioFile)>,
    options: &RunOptions,
) -> Result<MatrixResult> {
    let mut result = MatrixResult::default();
    let mut closed = Confusion::default();
    let mut to_truth = Confusion::default();
    for (name, file) in files {
        let row = run_row(lab, &name, file, options)?;
        if let Some(waited) = row.waited() {
            closed.add(waited.analyzer());
            to_truth.add(waited.simulator(&row.sim));
            result.unknown += waited.unknown();
        }
        result.fidelity.add(&row.sim);
        result.rows.push(row);
    }
    if options.capture {
        result.closed_loop = Some(closed);
        result.fidelity_to_truth = Some(to_truth);
    }
    Ok(result)
}

/// The look-alikes of a stall on this kernel, each a case the analyzer must not call a
/// stall unless the lab measured one: a slow reader behind a small SO_RCVBUF (the window
/// closes and reopens on reads), a reader that pauses long enough for persist probes, a
/// TCP_NODELAY sender on its own clock whose peer's ACKs come late, and pipelined
/// requests whose responses the client reads two at a time (real stalls among fast
/// round trips). `transactions` is the message count of each (the persist case sends
/// half as many).
pub fn lookalike_files(transactions: u32) -> Vec<(String, ScenarioFile)> {
    let mut slow = pattern_file("stream", transactions);
    slow.workload.request = vec![4096];
    slow.server.reader.rcvbuf = Some(8192);
    slow.server.reader.read_bytes = Some(1024);
    slow.server.reader.read_interval_ms = 10.0;

    // The persist timer fires after the RTO, at least 200 ms (TCP_RTO_MIN): a reader
    // pausing 400 ms between reads leaves the window closed long enough for probes.
    let mut persist = pattern_file("stream", transactions.div_ceil(2));
    persist.workload.request = vec![2048];
    persist.server.reader.rcvbuf = Some(4096);
    persist.server.reader.read_interval_ms = 400.0;

    let mut periodic = pattern_file("periodic", transactions);
    periodic.workload.period_ms = 50.0;
    periodic.client.options.nodelay = true;
    periodic.server.reader.read_delay_ms = 45.0;

    let mut pipelined = pattern_file("pipeline", transactions);
    pipelined.workload.depth = 2;
    pipelined.client.reader.read_delay_ms = 2.0;

    vec![
        ("slow reader, 8 KB buffer".into(), slow),
        ("reader pausing 400 ms (persist)".into(), persist),
        ("TCP_NODELAY sender every 50 ms".into(), periodic),
        ("pipelining, 2 responses per read".into(), pipelined),
    ]
}

pub fn lookalikes(lab: &Lab, transactions: u32, options: &RunOptions) -> Result<MatrixResult> {
    closed_loop(lab, lookalike_files(transactions), options)
}

/// Requested against measured round trips through the delay line.
#[derive(Clone, Debug, Serialize)]
pub struct DelayPoint {
    pub requested_ms: f64,
    pub measured_min_ms: f64,
    pub measured_p50_ms: f64,
    pub measured_p99_ms: f64,
    pub line: LatenessReport,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct LatenessReport {
    pub packets: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl From<Lateness> for LatenessReport {
    fn from(l: Lateness) -> Self {
        LatenessReport {
            packets: l.packets,
            p50_us: l.p50_us,
            p99_us: l.p99_us,
            max_us: l.max_us,
        }
    }
}

pub const DELAY_POINTS_MS: [f64; 7] = [0.0, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0];

/// Measures round trips through the line with a one-byte echo that nothing can hold
/// (TCP_NODELAY and TCP_QUICKACK on both sides): each transaction is one round trip.
pub fn delay_accuracy(lab: &Lab, rtts_ms: &[f64], transactions: u32) -> Result<Vec<DelayPoint>> {
    let mut points = Vec::new();
    for &rtt in rtts_ms {
        let one_way = Duration::from_secs_f64(rtt / 2e3);
        lab.net.set_delays(one_way, one_way)?;
        let mut file = pattern_file("custom", transactions);
        file.workload.request = vec![1];
        file.workload.response = vec![1];
        for side in [&mut file.client, &mut file.server] {
            side.options.nodelay = true;
            side.options.quickack = true;
        }
        if let Some(line) = &lab.net.line {
            line.stats.take_lateness();
        }
        let run = lab.run(&file.resolve()?, &RunOptions::default())?;
        let mut ms: Vec<f64> = run
            .latencies()
            .iter()
            .map(|&d| crate::measure::millis(d))
            .collect();
        ms.sort_by(f64::total_cmp);
        let lateness = lab
            .net
            .line
            .as_ref()
            .map(|l| l.stats.take_lateness())
            .unwrap_or_default();
        points.push(DelayPoint {
            requested_ms: rtt,
            measured_min_ms: ms.first().copied().unwrap_or(0.0),
            measured_p50_ms: crate::measure::percentile(&ms, 50.0),
            measured_p99_ms: crate::measure::percentile(&ms, 99.0),
            line: lateness.into(),
        });
    }
    Ok(points)
}

/// Seeds 003 (proxy-split) and 004 (http-keepalive) through the delay line.
pub const WAN_RTTS_MS: [f64; 2] = [20.0, 100.0];

pub fn wan(lab: &Lab, transactions: u32, options: &RunOptions) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for rtt in WAN_RTTS_MS {
        let one_way = Duration::from_secs_f64(rtt / 2e3);
        lab.net.set_delays(one_way, one_way)?;
        for (seed, pattern) in [("seed 003", "proxy-split"), ("seed 004", "http-keepalive")] {
            let mut file = pattern_file(pattern, transactions);
            file.link.rtt_ms = rtt;
            let name = format!("{seed} {pattern}, RTT {rtt:.0} ms");
            rows.push(run_row(lab, &name, file, options)?);
        }
    }
    Ok(rows)
}

/// The scenario files of seeds 003 and 004 under load, as shipped in `scenarios/`.
const SEED003_PROXY_LOAD: &str = include_str!("../../../scenarios/seed003-proxy-load.toml");
const SEED004_AB_KEEPALIVE: &str = include_str!("../../../scenarios/seed004-ab-keepalive.toml");
const SEED004_HEADERS_ONLY: &str =
    include_str!("../../../scenarios/seed004-ab-keepalive-headers-only.toml");

/// Concurrent connections the load suite opens per scenario: enough to load the host,
/// few enough for two cores.
pub const LOAD_CONNECTIONS: u32 = 8;

/// Seeds 003 and 004 with their load tests' concurrency, each as given and fixed:
/// SETs of 4 KB through the splitting proxy and direct, 1 KB SETs (not split) and 4 KB
/// GETs, and `ab -k` against headers and body in two writes and headers only.
pub fn load_files(transactions: u32) -> Result<Vec<(String, ScenarioFile)>> {
    let parse = |text: &str| -> Result<ScenarioFile> {
        let mut file = ScenarioFile::from_toml(text)?;
        file.workload.connections = LOAD_CONNECTIONS;
        file.workload.transactions = transactions;
        file.workload.request_sizes.clear();
        Ok(file)
    };
    let proxy = parse(SEED003_PROXY_LOAD)?;
    let request = |bytes: u32, split: bool| {
        let mut file = proxy.clone();
        file.workload.request = vec![bytes];
        if !split {
            file.workload.split_over = None;
        }
        file
    };
    let mut get = proxy.clone();
    get.workload.request = vec![36];
    get.workload.response = vec![4096 + 12];
    Ok(vec![
        ("seed 003 SET 4096 via proxy".into(), request(4096, true)),
        ("seed 003 SET 4096 direct".into(), request(4096, false)),
        ("seed 003 SET 1024 via proxy".into(), request(1024, true)),
        ("seed 003 SET 1024 direct".into(), request(1024, false)),
        ("seed 003 GET 4096 via proxy".into(), get),
        (
            "seed 004 ab -k, headers + body".into(),
            parse(SEED004_AB_KEEPALIVE)?,
        ),
        (
            "seed 004 ab -k, headers only".into(),
            parse(SEED004_HEADERS_ONLY)?,
        ),
    ])
}

pub fn load(lab: &Lab, transactions: u32, options: &RunOptions) -> Result<Vec<Row>> {
    load_files(transactions)?
        .into_iter()
        .map(|(name, file)| run_row(lab, &name, file, options))
        .collect()
}

/// A path of the varying-delay suite: a round trip and how much it varies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VaryingPath {
    pub name: &'static str,
    pub rtt_ms: f64,
    /// Up to this fraction of each one-way delay more, from the delay line's queues.
    pub variation: f64,
}

/// A LAN-like path (1 ms, a switch's queues adding up to 30%) and a WAN-like one (30 ms
/// across a region, up to 20%): round trips of 1 to 1.3 ms and 30 to 36 ms. On both, a
/// round trip no timer held (at most 2 x 1.3 or 2 x 36 ms) and one a delayed-ACK timer
/// held (at least 2 x 1 or 2 x 30 ms + 40 ms) stay apart by the programs' timings
/// ([`crate::measure::judge_round_trips`]); a slow one counts as held only when the
/// captures show a pure ACK on its chain held for a timer ([`crate::held`]).
pub const VARYING_PATHS: [VaryingPath; 2] = [
    VaryingPath {
        name: "LAN",
        rtt_ms: 1.0,
        variation: 0.30,
    },
    VaryingPath {
        name: "WAN",
        rtt_ms: 30.0,
        variation: 0.20,
    },
];
/// Round trips each client makes (seed 002's client makes 10).
pub const VARYING_ROUND_TRIPS: u32 = 20;
/// The seed of the line's queues unless one is given.
pub const VARYING_SEED: u64 = 2;
/// A run whose delay line sent a packet later than this after its due time did not give
/// the path asked for (a 1 ms path made 2 ms for a moment varies by far more than 30%):
/// it is run again. With its threads at real-time priority and its code locked in memory
/// the line's largest lateness in a run was 0.1 to 0.5 ms in 32 of 36 runs of a pair on
/// this 2-core host under a load of 4.5 to 4.9, and 1.2 to 5.3 ms in the other 4 (lab
/// measurement, `--suite varying`, seeds 1 to 8).
pub const LATE_LIMIT: Duration = Duration::from_millis(1);
/// Runs of one pair of programs over one path at most, when the line was late or a round
/// trip fell in the band between fast and slow: with one run in nine late, five in a row
/// are about one in 60,000.
pub const MAX_ATTEMPTS: u32 = 5;

/// What the analyzer found in one capture point's packets.
pub struct PointResult {
    pub point: Point,
    pub packets: usize,
    /// TCP stalls (Nagle x delayed ACK, delayed ACK) the analyzer reported.
    pub stalls: usize,
    /// Per round trip: a stall the analyzer found ends while it was in flight.
    pub found: Vec<bool>,
    /// The analyzer against the programs' slow round trips.
    pub confusion: Confusion,
}

/// One pair of programs over one path.
pub struct VaryingRow {
    pub program: Program,
    pub path: VaryingPath,
    pub seed: u64,
    pub run: ProgramRun,
    /// Per round trip: slow by the client's own timing.
    pub slow: Vec<bool>,
    /// Per round trip: in the band between fast and slow, neither (judged either way); the
    /// first round trip too when it is not fast.
    pub between: Vec<bool>,
    pub points: Vec<PointResult>,
    /// The delay line's queue waits and lateness, per stage, over the run.
    pub waits: Lateness,
    pub lateness: Lateness,
    /// The largest lateness of each earlier run, run again for it, microseconds.
    pub late_runs: Vec<f64>,
    /// Earlier runs run again for round trips in the band: (index, ms) of each.
    pub unclear_runs: Vec<Vec<(usize, f64)>>,
}

impl VaryingRow {
    /// The line gave the path asked for: no packet later than [`LATE_LIMIT`].
    pub fn faithful(&self) -> bool {
        self.lateness.max_us <= LATE_LIMIT.as_secs_f64() * 1e6
    }

    pub fn slow_count(&self) -> usize {
        self.slow.iter().filter(|&&s| s).count()
    }

    pub fn between_count(&self) -> usize {
        self.between.iter().filter(|&&b| b).count()
    }

    /// Every point: a stall in each slow round trip, none in a fast one, as many stalls
    /// as that makes (a round trip in the band counts either way).
    pub fn agrees(&self) -> bool {
        let slow = self.slow_count();
        self.points.iter().all(|p| {
            (slow..=slow + self.between_count()).contains(&p.stalls)
                && p.confusion.false_positives == 0
                && p.confusion.false_negatives == 0
        })
    }
}

/// Per round trip of a run: whether the captures at the client's and the server's ends
/// show a pure ACK on its chain held for a delayed-ACK timer ([`crate::held`]).
fn held_by_ack(run: &ProgramRun) -> Vec<bool> {
    let capture = |point: Point| {
        run.captures
            .iter()
            .find(|(p, _)| *p == point)
            .map_or(&[][..], |(_, packets)| packets.as_slice())
    };
    held::held_by_ack(
        &run.round_trips,
        Until::NextStart,
        Ends::AtClient,
        capture(Point::Client),
        capture(Point::Server),
    )
    .into_iter()
    .map(|held| held == Some(true))
    .collect()
}

/// The programs over each path with its varying delay, captured at all three points,
/// each capture diagnosed and held against the programs' own timings. `variation`
/// replaces each path's own; `seed` seeds the line's queues (each run starts from it).
pub fn varying(
    lab: &Lab,
    java: &Java,
    round_trips: u32,
    variation: Option<f64>,
    seed: u64,
    time_limit: Duration,
) -> Result<Vec<VaryingRow>> {
    let mut rows = Vec::new();
    for base in VARYING_PATHS {
        let path = VaryingPath {
            variation: variation.unwrap_or(base.variation),
            ..base
        };
        let one_way = Duration::from_secs_f64(path.rtt_ms / 2e3);
        lab.net.set_delays(one_way, one_way)?;
        for program in Program::ALL {
            let rtt = Duration::from_secs_f64(path.rtt_ms / 1e3);
            let mut late_runs = Vec::new();
            let mut unclear_runs = Vec::new();
            let (run, waits, lateness, timed) = loop {
                lab.net.set_variation(Variation {
                    fraction: path.variation,
                    seed,
                })?;
                if let Some(line) = &lab.net.line {
                    line.stats.take_lateness();
                    line.stats.take_waits();
                }
                let run = java.run(program, &lab.net, round_trips, &Point::ALL, time_limit)?;
                let (waits, lateness): (Lateness, Lateness) =
                    lab.net.line.as_ref().map_or_else(Default::default, |l| {
                        (l.stats.take_waits(), l.stats.take_lateness())
                    });
                let latencies: Vec<Duration> = run.round_trips.iter().map(|t| t.latency).collect();
                let mut timed =
                    judge_round_trips(&latencies, rtt, rtt.mul_f64(1.0 + path.variation));
                // Slow only when the captures show why: a pure ACK on its chain held for
                // a timer. Without one, a program was late (a JVM pausing): neither.
                for (t, held) in timed.iter_mut().zip(held_by_ack(&run)) {
                    if *t == Timed::Slow && !held {
                        *t = Timed::Between;
                    }
                }
                let late = lateness.max_us > LATE_LIMIT.as_secs_f64() * 1e6;
                // The first round trip is not judged unless fast: a new connection's
                // receiver ACKs at once (quick-ACK mode), so no delayed ACK holds it, and a
                // busy host makes it slow (a JVM warming up: 41 ms on the 1 ms path, 101 ms
                // on the 30 ms one beside two CPU hogs, with no stall in the capture).
                let unclear: Vec<(usize, f64)> = timed
                    .iter()
                    .zip(&latencies)
                    .enumerate()
                    .filter(|(i, (t, _))| *i > 0 && **t == Timed::Between)
                    .map(|(i, (_, &l))| (i, crate::measure::millis(l)))
                    .collect();
                let runs = late_runs.len() + unclear_runs.len() + 1;
                if (!late && unclear.is_empty()) || runs >= MAX_ATTEMPTS as usize {
                    break (run, waits, lateness, timed);
                }
                if late {
                    late_runs.push(lateness.max_us);
                } else {
                    unclear_runs.push(unclear);
                }
            };
            let mut timed = timed;
            if let Some(first) = timed.first_mut()
                && *first != Timed::Fast
            {
                *first = Timed::Between;
            }
            let slow = timed.iter().map(|&t| t == Timed::Slow).collect::<Vec<_>>();
            let between = timed
                .iter()
                .map(|&t| t == Timed::Between)
                .collect::<Vec<_>>();
            let mut points = Vec::new();
            for (point, packets) in &run.captures {
                let analysis = diagnose(packets)?;
                let stalls = analysis
                    .connections
                    .iter()
                    .flat_map(|c| c.events.iter())
                    .filter(|e| e.class.is_tcp_stall())
                    .count();
                let found = analyzer_stalled(&analysis, &run.round_trips);
                points.push(PointResult {
                    point: *point,
                    packets: packets.len(),
                    stalls,
                    confusion: Confusion::of_judged(&found, &slow, &between),
                    found,
                });
            }
            rows.push(VaryingRow {
                program,
                path,
                seed,
                run,
                slow,
                between,
                points,
                waits,
                lateness,
                late_runs,
                unclear_runs,
            });
        }
    }
    Ok(rows)
}
