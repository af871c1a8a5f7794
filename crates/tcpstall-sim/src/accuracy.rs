//! Detection accuracy: the analyzer, run on the simulator's own capture, against the
//! simulator's ground truth.

use std::io::Cursor;

use serde::Serialize;

use tcpstall_core::analyze::{AnalyzeOptions, analyze};
use tcpstall_core::capture::PcapWriter;
use tcpstall_core::diagnosis::Role;
use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};

use crate::engine::{CLIENT, RunResult, capture_segments};

/// How far apart the detector's "data after the gap" and the truth's release may be, as
/// seen at the capture point (serialization and queueing move packets a little).
const MATCH_TOLERANCE: Nanos = 2 * NANOS_PER_MILLI;
/// Stalls whose true ACK delay is this close to the threshold count neither way: the
/// detector measures the delay through the path, the truth at the endpoint.
const BORDERLINE: Nanos = 3 * NANOS_PER_MILLI;

/// The outcome for one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Accuracy {
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
    /// Human-readable reasons for every miss and every false alarm.
    pub misses: Vec<String>,
}

impl Accuracy {
    pub fn add(&mut self, other: &Accuracy) {
        self.true_positives += other.true_positives;
        self.false_positives += other.false_positives;
        self.false_negatives += other.false_negatives;
        self.misses.extend(other.misses.iter().cloned());
    }

    pub fn precision(&self) -> f64 {
        precision(self.true_positives, self.false_positives)
    }

    pub fn recall(&self) -> f64 {
        recall(self.true_positives, self.false_negatives)
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

/// Runs the analyzer on the run's capture and compares its stalls with the truth.
pub fn evaluate(result: &RunResult, seed: u64, options: &AnalyzeOptions) -> Accuracy {
    let bytes = pcap_bytes(result, seed);
    let mut accuracy = Accuracy::default();
    let analysis = match analyze(Cursor::new(bytes), "simulation", options) {
        Ok(a) => a,
        Err(e) => {
            accuracy.false_negatives = result.stalls.len();
            accuracy
                .misses
                .push(format!("the analyzer refused the capture: {e}"));
            return accuracy;
        }
    };
    let origin = analysis.input.first_time.unwrap_or(0);
    let _ = origin;
    let min_gap = options.detect.min_gap;
    let mut detected: Vec<(Nanos, &'static str, Role, Role, bool)> = Vec::new();
    for c in &analysis.connections {
        for e in c.events.iter().filter(|e| e.class.is_tcp_stall()) {
            let holder = e.holder.map_or(Role::Client, |s| c.role_of_side(s));
            let delayer = e.delayer.map_or(Role::Server, |s| c.role_of_side(s));
            detected.push((e.end, e.class.name(), holder, delayer, false));
        }
    }
    for truth in &result.stalls {
        let holder = if truth.holder_side == CLIENT {
            Role::Client
        } else {
            Role::Server
        };
        let borderline = (truth.ack_delay_nanos - min_gap).abs() <= BORDERLINE;
        if truth.ack_delay_nanos < min_gap && !borderline {
            continue;
        }
        let found = detected.iter_mut().find(|(end, class, h, _, used)| {
            !*used
                && (*end - truth.released_at_capture_nanos).abs() <= MATCH_TOLERANCE
                && *class == truth.class
                && *h == holder
        });
        match found {
            Some(entry) => {
                entry.4 = true;
                accuracy.true_positives += 1;
            }
            None if borderline => {}
            None => {
                accuracy.false_negatives += 1;
                accuracy.misses.push(format!(
                    "missed {} held by the {} released at {:.6} s (ACK delay {:.1} ms)",
                    truth.class,
                    truth.holder,
                    truth.released_at_capture,
                    truth.ack_delay * 1e3
                ));
            }
        }
    }
    for (end, class, holder, _, used) in &detected {
        if *used {
            continue;
        }
        let near_borderline = result.stalls.iter().any(|t| {
            (t.released_at_capture_nanos - *end).abs() <= MATCH_TOLERANCE
                && (t.ack_delay_nanos - min_gap).abs() <= BORDERLINE
        });
        if near_borderline {
            continue;
        }
        accuracy.false_positives += 1;
        accuracy.misses.push(format!(
            "false {class} held by the {} ending at {:.6} s",
            holder.name(),
            (*end - origin) as f64 / 1e9
        ));
    }
    accuracy
}

/// One cell of the accuracy matrix.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixCell {
    pub client: String,
    pub server: String,
    pub pattern: String,
    pub rtt_ms: f64,
    pub capture: String,
    pub truth_stalls: usize,
    pub accuracy: Accuracy,
}

/// The matrix the detector is held to: every profile pair, every named pattern, round
/// trips of 0.05, 1, 20 and 100 ms, and three capture points.
pub fn matrix(transactions: u32, options: &AnalyzeOptions) -> Vec<MatrixCell> {
    let profiles = crate::profile::names();
    let patterns = [
        "two-writes",
        "one-write",
        "pipeline",
        "bulk",
        "sftp",
        "proxy-split",
        "http-keepalive",
        "interactive",
    ];
    let rtts = [0.05, 1.0, 20.0, 100.0];
    let captures = ["client", "server", "tap"];
    let mut cells = Vec::new();
    for client in &profiles {
        for server in &profiles {
            for pattern in patterns {
                for rtt in rtts {
                    for capture in captures {
                        let mut file = crate::ScenarioFile::default();
                        file.client.stack = client.to_string();
                        file.server.stack = server.to_string();
                        file.workload.pattern = pattern.to_string();
                        file.workload.transactions = transactions;
                        file.link.rtt_ms = rtt;
                        file.capture = Some(capture.to_string());
                        let Ok(scenario) = file.resolve() else {
                            continue;
                        };
                        let result = crate::run(&scenario, true);
                        let accuracy = evaluate(&result, scenario.link.seed, options);
                        cells.push(MatrixCell {
                            client: client.to_string(),
                            server: server.to_string(),
                            pattern: pattern.to_string(),
                            rtt_ms: rtt,
                            capture: capture.to_string(),
                            truth_stalls: result.stalls.len(),
                            accuracy,
                        });
                    }
                }
            }
        }
    }
    cells
}
