//! The lab's measurements held against two other views of the same run: the analyzer's
//! diagnosis of the lab's capture (closed loop), and the simulator's `linux` profile
//! running the same scenario (fidelity).

use std::time::Duration;

use serde::Serialize;
use tcpstall_sim::engine::RunResult;
use tcpstall_sim::scenario::ScenarioFile;

use crate::Result;
use crate::lab::{LabRun, unstalled_reference};
use crate::net::Net;

/// Stall durations agree when within this fraction of the simulator's.
pub const DURATION_TOLERANCE: f64 = 0.20;

/// Counts of one stalled-or-not prediction against the lab's measurement.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Confusion {
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
    pub true_negatives: usize,
}

impl Confusion {
    /// `predicted` against `measured`, transaction by transaction.
    pub fn of(predicted: &[bool], measured: &[bool]) -> Confusion {
        let mut c = Confusion::default();
        for (&p, &m) in predicted.iter().zip(measured) {
            match (p, m) {
                (true, true) => c.true_positives += 1,
                (true, false) => c.false_positives += 1,
                (false, true) => c.false_negatives += 1,
                (false, false) => c.true_negatives += 1,
            }
        }
        c
    }

    /// `predicted` against `measured`, leaving out the transactions `unjudged` marks
    /// (their measurement says neither).
    pub fn of_judged(predicted: &[bool], measured: &[bool], unjudged: &[bool]) -> Confusion {
        let judged = |values: &[bool]| -> Vec<bool> {
            values
                .iter()
                .zip(unjudged)
                .filter(|(_, u)| !**u)
                .map(|(&v, _)| v)
                .collect()
        };
        Confusion::of(&judged(predicted), &judged(measured))
    }

    pub fn add(&mut self, other: Confusion) {
        self.true_positives += other.true_positives;
        self.false_positives += other.false_positives;
        self.false_negatives += other.false_negatives;
        self.true_negatives += other.true_negatives;
    }

    pub fn total(&self) -> usize {
        self.true_positives + self.false_positives + self.false_negatives + self.true_negatives
    }

    pub fn precision(&self) -> f64 {
        tcpstall_sim::accuracy::precision(self.true_positives, self.false_positives)
    }

    pub fn recall(&self) -> f64 {
        tcpstall_sim::accuracy::recall(self.true_positives, self.false_negatives)
    }

    /// The fraction of transactions where both said the same.
    pub fn agreement(&self) -> f64 {
        let total = self.total();
        if total == 0 {
            1.0
        } else {
            (self.true_positives + self.true_negatives) as f64 / total as f64
        }
    }
}

/// One transaction, lab and simulator side by side.
#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    pub index: usize,
    pub lab_ms: f64,
    pub sim_ms: f64,
    pub lab_stalled: bool,
    pub sim_stalled: bool,
    /// Time above the unstalled baseline, in each.
    pub lab_stall_ms: f64,
    pub sim_stall_ms: f64,
}

/// The simulator against the lab for one scenario.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimComparison {
    pub pairs: Vec<Pair>,
    /// Simulator (predicted) against lab (measured).
    pub confusion: Confusion,
    /// Transactions stalled in both, and those whose stall durations agree within 20%.
    pub both_stalled: usize,
    pub durations_within: usize,
}

impl SimComparison {
    pub fn add(&mut self, other: &SimComparison) {
        self.confusion.add(other.confusion);
        self.both_stalled += other.both_stalled;
        self.durations_within += other.durations_within;
    }
}

/// The scenario as the simulator should see it for this lab network: Linux on both
/// sides, the delay line's round trip, and a pipelined client that wakes after each
/// response as the lab's own does ([`tcpstall_sim::sweep::pipelined`]).
pub fn simulator_file(file: &ScenarioFile, net: &Net) -> ScenarioFile {
    // The depth as resolved: a pattern such as `pipeline` implies its own.
    let depth = file.resolve().map_or(file.workload.depth, |s| s.depth);
    let mut sim = tcpstall_sim::sweep::pipelined(file, depth);
    sim.client.stack = "linux".into();
    sim.server.stack = "linux".into();
    if let Some(line) = &net.line {
        let rtt = line.round_trip().as_secs_f64() * 1e3;
        sim.link.rtt_ms = rtt;
        if sim.link.client_to_server_ms.is_some() || sim.link.server_to_client_ms.is_some() {
            sim.link.client_to_server_ms = None;
            sim.link.server_to_client_ms = None;
        }
    }
    sim
}

fn latency(run: &RunResult, i: usize) -> Option<Duration> {
    run.transactions
        .get(i)
        .map(|t| Duration::from_nanos((t.end_nanos - t.start_nanos).max(0) as u64))
}

/// Runs the scenario through the simulator's `linux` profile and compares.
pub fn compare_with_simulator(
    run: &LabRun,
    file: &ScenarioFile,
    net: &Net,
) -> Result<SimComparison> {
    let scenario = simulator_file(file, net).resolve()?;
    let sim = tcpstall_sim::run(&scenario, false);
    let sim_reference = tcpstall_sim::run(&unstalled_reference(&scenario), false);
    let reference: Vec<Duration> = (0..sim_reference.transactions.len())
        .filter_map(|i| latency(&sim_reference, i))
        .collect();
    let sim_baselines = crate::measure::baselines(&reference, sim.transactions.len());
    let mut out = SimComparison::default();
    let lab_extra = run.extra();
    for (i, t) in run.exchange.transactions.iter().enumerate() {
        let (Some(sim_latency), Some(sim_t)) = (latency(&sim, i), sim.transactions.get(i)) else {
            break;
        };
        let sim_extra = sim_latency.saturating_sub(sim_baselines[i]);
        let pair = Pair {
            index: i,
            lab_ms: crate::measure::millis(t.latency),
            sim_ms: crate::measure::millis(sim_latency),
            lab_stalled: run.stalled[i],
            sim_stalled: sim_t.stalled,
            lab_stall_ms: crate::measure::millis(lab_extra[i]),
            sim_stall_ms: crate::measure::millis(sim_extra),
        };
        if pair.lab_stalled && pair.sim_stalled {
            out.both_stalled += 1;
            if (pair.lab_stall_ms - pair.sim_stall_ms).abs()
                <= DURATION_TOLERANCE * pair.sim_stall_ms
            {
                out.durations_within += 1;
            }
        }
        out.pairs.push(pair);
    }
    let predicted: Vec<bool> = out.pairs.iter().map(|p| p.sim_stalled).collect();
    let measured: Vec<bool> = out.pairs.iter().map(|p| p.lab_stalled).collect();
    out.confusion = Confusion::of(&predicted, &measured);
    Ok(out)
}
