//! tcpstall's simulator: two TCP stacks, a link and an application pattern, run packet
//! by packet, with the ground truth of every Nagle hold and delayed ACK.
//!
//! [`scenario`] says what to run, [`profile`] holds each stack's values, [`endpoint`]
//! applies the TCP rules, [`engine`] runs the events, [`summary`] and [`sweep`] report.

pub mod accuracy;
pub mod endpoint;
pub mod engine;
pub mod profile;
pub mod report;
pub mod scenario;
pub mod summary;
pub mod sweep;

pub use engine::{RunResult, Simulation};
pub use scenario::{Scenario, ScenarioFile};

/// Runs a scenario; `capture` keeps the packets seen at its capture point.
pub fn run(scenario: &Scenario, capture: bool) -> RunResult {
    Simulation::new(scenario, capture).run()
}
