//! tcpstall's simulator: two TCP stacks, a link and an application pattern, run packet
//! by packet, with the ground truth of every Nagle hold and delayed ACK.
//!
//! Down the data flow: [`scenario`] says what to run and [`profile`] holds each stack's
//! values; [`endpoint`] applies the TCP rules, with the receive buffer and windows in
//! [`window`]; the applications write and read on top of it; [`link`] carries the
//! segments (bottleneck queue included); [`capture`] records them where the capture point
//! is (offload, misses); [`engine`] runs the events; [`truth`] names every hold, stall and
//! gap; [`summary`], [`sweep`], [`report`] and [`accuracy`] read the results.

pub mod accuracy;
mod apps;
pub mod capture;
pub mod endpoint;
pub mod engine;
pub mod infer;
pub mod link;
pub mod profile;
pub mod report;
pub mod scenario;
pub mod summary;
pub mod sweep;
pub mod truth;
pub mod window;

pub use engine::{RunResult, Simulation};
pub use scenario::{Scenario, ScenarioFile};

/// Runs a scenario; `capture` keeps the packets seen at its capture point.
pub fn run(scenario: &Scenario, capture: bool) -> RunResult {
    Simulation::new(scenario, capture).run()
}
