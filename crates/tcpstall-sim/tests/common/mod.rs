//! Scenarios built or read from `scenarios/`, their runs, and a run judged: the capture
//! it made analyzed, each gap the ground truth names paired with what the detector said
//! about it.

#![allow(dead_code)]

use std::io::Cursor;

use tcpstall_core::analyze::{AnalyzeOptions, analyze};
use tcpstall_core::detect::StallEvent;
use tcpstall_core::diagnosis::{ConnectionDiagnosis, Role};
use tcpstall_core::side::Side;
use tcpstall_sim::RunResult;
use tcpstall_sim::accuracy::pcap_bytes;
use tcpstall_sim::scenario::ScenarioFile;
use tcpstall_sim::truth::{Label, TruthGap};

/// `client` and `server` stacks running `pattern`, everything else as by default.
pub fn scenario(client: &str, server: &str, pattern: &str) -> ScenarioFile {
    let mut file = ScenarioFile::default();
    file.client.stack = client.into();
    file.server.stack = server.into();
    file.workload.pattern = pattern.into();
    file
}

/// The scenario file `name` of the repository's `scenarios/`.
pub fn scenario_file(name: &str) -> ScenarioFile {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    ScenarioFile::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A run of `file`, with its ground truth.
pub fn run(file: &ScenarioFile) -> RunResult {
    tcpstall_sim::run(&file.resolve().expect("valid scenario"), true)
}

/// A simulated run, its capture analyzed.
pub struct Judged {
    pub result: RunResult,
    pub diagnosis: ConnectionDiagnosis,
}

pub fn judge(file: &ScenarioFile) -> Judged {
    let scenario = file.resolve().expect("valid scenario");
    let result = tcpstall_sim::run(&scenario, true);
    let bytes = pcap_bytes(&result, scenario.link.seed);
    let analysis =
        analyze(Cursor::new(bytes), "simulation", &AnalyzeOptions::default()).expect("analyzes");
    let mut connections = analysis.connections;
    assert_eq!(connections.len(), 1, "one connection");
    Judged {
        result,
        diagnosis: connections.remove(0),
    }
}

impl Judged {
    /// The simulator's side (the client first) that sent the record ending `e`.
    pub fn sender(&self, e: &StallEvent) -> Side {
        Side::second_if(self.diagnosis.role_of_side(e.sender) == Role::Server)
    }

    /// The detector's event on the gap the truth names, if it reported one.
    pub fn event_on(&self, gap: &TruthGap) -> Option<&StallEvent> {
        self.diagnosis
            .events
            .iter()
            .find(|e| e.end == gap.end && self.sender(e) == gap.sender)
    }

    /// Every gap of the truth with the detector's answer on it.
    pub fn pairs(&self) -> Vec<(&TruthGap, Option<&StallEvent>)> {
        self.result
            .gaps
            .iter()
            .map(|g| (g, self.event_on(g)))
            .collect()
    }

    /// One line per gap: the truth, and the detector's class and basis.
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .pairs()
            .iter()
            .map(|(g, e)| match e {
                Some(e) => format!(
                    "{} -> {} [{}]",
                    g.describe(),
                    e.class.name(),
                    e.evidence.basis.names().join(" > ")
                ),
                None => format!("{} -> no event", g.describe()),
            })
            .collect();
        for e in &self.diagnosis.events {
            if !self
                .result
                .gaps
                .iter()
                .any(|g| self.event_on(g).is_some_and(|x| std::ptr::eq(x, e)))
            {
                lines.push(format!(
                    "detector only: {} at {:.6} s [{}]",
                    e.class.name(),
                    e.end as f64 / 1e9,
                    e.evidence.basis.names().join(" > ")
                ));
            }
        }
        lines.join("\n")
    }

    /// Fails if the detector reports a stall on a gap whose truth has none, or on a gap
    /// the truth does not know.
    pub fn assert_no_false_stall(&self) {
        for (gap, event) in self.pairs() {
            if let Some(e) = event {
                let found = Label::Class(e.class);
                assert!(
                    !found.is_stall() || gap.accepts(found),
                    "false {}: {}\n{}",
                    found.name(),
                    gap.describe(),
                    self.describe()
                );
            }
        }
        for e in &self.diagnosis.events {
            let known = self
                .result
                .gaps
                .iter()
                .any(|g| g.end == e.end && g.sender == self.sender(e));
            assert!(
                known || !e.class.is_tcp_stall(),
                "a stall where the truth has no gap:\n{}",
                self.describe()
            );
        }
    }
}
