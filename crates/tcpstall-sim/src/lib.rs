//! tcpstall's simulator: two TCP stacks, a link and an application pattern, run packet
//! by packet, with the ground truth of every Nagle hold and delayed ACK.
//!
//! Down the data flow: [`scenario`] says what to run (checked part by part in `resolve`)
//! and [`profile`] holds each stack's values; [`endpoint`] applies the TCP rules, with the receive buffer and windows in
//! [`window`]; the applications write and read on top of it; [`link`] carries the
//! segments (bottleneck queue included); [`capture`] records them where the capture point
//! is (offload, misses); [`engine`] runs the events ([`run`] runs concurrent connections
//! on one link); [`truth`] names every hold, stall and
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
mod resolve;
pub mod scenario;
pub mod summary;
pub mod sweep;
pub mod truth;
pub mod window;

use std::cell::RefCell;
use std::rc::Rc;

pub use engine::{RunResult, Simulation};
pub use scenario::{Scenario, ScenarioFile};

/// Runs a scenario; `capture` keeps the packets seen at its capture point. With
/// `connections` above one, they all run at once over one link (each with its own timer
/// phases), and the result holds all their transactions, holds and stalls; the capture
/// and the truth of its gaps are the first connection's.
pub fn run(scenario: &Scenario, capture: bool) -> RunResult {
    if scenario.connections <= 1 {
        return Simulation::new(scenario, capture).run();
    }
    let link = Rc::new(RefCell::new(link::Link::new(
        &scenario.link,
        scenario.capture.fraction(),
    )));
    let mut simulations: Vec<Simulation> = (0..u64::from(scenario.connections))
        .map(|index| Simulation::on_link(scenario, capture && index == 0, link.clone(), index))
        .collect();
    for simulation in &mut simulations {
        simulation.begin();
    }
    // Always the earliest event of all connections next, so they meet on the link in
    // time order.
    while let Some(next) = simulations
        .iter_mut()
        .filter_map(|s| s.next_event_time().map(|t| (t, s)))
        .min_by_key(|(t, _)| *t)
        .map(|(_, s)| s)
    {
        next.step();
    }
    let mut results = simulations.into_iter().map(Simulation::finish);
    let mut merged = results.next().expect("at least two connections");
    for result in results {
        merged.transactions.extend(result.transactions);
        merged.stalls.extend(result.stalls);
        merged.holds.extend(result.holds);
        merged.delayed_acks.extend(result.delayed_acks);
        merged.segments_sent += result.segments_sent;
        merged.events += result.events;
        merged.window_probes += result.window_probes;
        merged.zero_windows += result.zero_windows;
        merged.end_time = merged.end_time.max(result.end_time);
        merged.completed &= result.completed;
    }
    merged
}
