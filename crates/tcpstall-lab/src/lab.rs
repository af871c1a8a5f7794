//! One lab run: the scenario's exchange on the chosen network, its unstalled reference,
//! and (when asked) the capture and the analyzer's diagnosis of it.

use std::io::Cursor;
use std::time::Duration;

use tcpstall_core::analyze::{Analysis, AnalyzeOptions, analyze};
use tcpstall_core::segment::NANOS_PER_MILLI;
use tcpstall_sim::scenario::{Scenario, SocketOptions};

use crate::capture::{Capture, Packet, Point, write_pcap};
use crate::exchange::{self, Exchange, Measured, Placement, Plan};
use crate::held::{self, Ends, Until};
use crate::measure::{self, LatencySummary};
use crate::net::Net;
use crate::{LabError, Result};

/// The reference run never needs more transactions than this.
const MAX_REFERENCE_TRANSACTIONS: u32 = 50;
/// A stall's end may be stamped this much after the client saw the transaction end
/// (capture timestamps are taken in the kernel, transaction ends in the application).
const END_TOLERANCE: i64 = NANOS_PER_MILLI;

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Capture the run's packets and diagnose them.
    pub capture: bool,
    /// A run that takes longer fails.
    pub time_limit: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            capture: false,
            time_limit: Duration::from_secs(120),
        }
    }
}

/// Everything one run produced.
pub struct LabRun {
    pub plan: Plan,
    pub exchange: Exchange,
    pub baselines: Vec<Duration>,
    pub stalled: Vec<bool>,
    pub summary: LatencySummary,
    pub packets: Option<Vec<Packet>>,
    /// On the delay line, the server's end captured beside `packets` (the client's end);
    /// on loopback `packets` sees both ends.
    pub server_packets: Option<Vec<Packet>>,
    pub analysis: Option<Analysis>,
    /// Per transaction: the analyzer found a TCP stall ending inside it.
    pub analyzer_stalled: Option<Vec<bool>>,
}

impl LabRun {
    pub fn latencies(&self) -> Vec<Duration> {
        self.exchange
            .transactions
            .iter()
            .map(|t| t.latency)
            .collect()
    }

    /// Each transaction's time above its baseline (zero when below).
    pub fn extra(&self) -> Vec<Duration> {
        self.exchange
            .transactions
            .iter()
            .zip(&self.baselines)
            .map(|(t, &b)| t.latency.saturating_sub(b))
            .collect()
    }

    /// Per transaction: whether the captures at both ends of the line show a pure ACK on
    /// its chain held for a delayed-ACK timer ([`crate::held`]), `None` for one whose chain
    /// they do not show; nothing without a capture.
    pub fn held_by_ack(&self) -> Option<Vec<Option<bool>>> {
        let client = self.packets.as_deref()?;
        let server = self.server_packets.as_deref().unwrap_or(client);
        let ends = if self.plan.shape.is_one_way() {
            Ends::AtServer
        } else {
            Ends::AtClient
        };
        Some(held::held_by_ack(
            &self.exchange.transactions,
            Until::OwnEnd(END_TOLERANCE),
            ends,
            client,
            server,
        ))
    }

    /// The path's one-way delays as the captures at both ends saw each packet cross
    /// (client to server, server to client, ms); nothing without both ends captured.
    pub fn crossing_times_ms(&self) -> Option<[Vec<f64>; 2]> {
        let client = self.packets.as_deref()?;
        let server = self.server_packets.as_deref()?;
        Some(held::crossing_times_ms(client, server))
    }
}

/// The lab on one network.
pub struct Lab {
    pub net: Net,
}

/// The same scenario with nothing to hold: Nagle off and quick ACKs on both sides.
pub fn unstalled_reference(scenario: &Scenario) -> Scenario {
    let mut reference = scenario.clone();
    let clear = SocketOptions {
        nodelay: true,
        quickack: true,
        cork: false,
        msg_more: false,
    };
    reference.client.options = clear;
    reference.server.options = clear;
    reference.transactions = scenario.transactions.min(MAX_REFERENCE_TRANSACTIONS);
    reference
}

impl Lab {
    pub fn new(net: Net) -> Lab {
        Lab { net }
    }

    /// Runs the scenario and its reference; captures and diagnoses when asked.
    pub fn run(&self, scenario: &Scenario, options: &RunOptions) -> Result<LabRun> {
        let reference = unstalled_reference(scenario);
        let reference_plan = Plan::from_scenario(&reference)?;
        let reference_run = self.exchange(&reference_plan, options.time_limit)?;
        let plan = Plan::from_scenario(scenario)?;
        let capture = if options.capture {
            Some(Capture::start(self.net.capture_ns().cloned())?)
        } else {
            None
        };
        let server_capture = match (&capture, &self.net.line) {
            (Some(_), Some(_)) => Some(Capture::start_at(
                self.net.capture_ns_at(Point::Server)?.cloned(),
                Point::Server,
            )?),
            _ => None,
        };
        let exchange = self.exchange(&plan, options.time_limit)?;
        let packets = capture.map(Capture::finish).transpose()?;
        let server_packets = server_capture.map(Capture::finish).transpose()?;
        let latencies: Vec<Duration> = exchange.transactions.iter().map(|t| t.latency).collect();
        let reference_latencies: Vec<Duration> = reference_run
            .transactions
            .iter()
            .map(|t| t.latency)
            .collect();
        let baselines = measure::baselines(&reference_latencies, latencies.len());
        let path_rtt = self
            .net
            .line
            .as_ref()
            .map_or(Duration::ZERO, |l| l.round_trip());
        // A reader that reads at most once per interval ends a transaction up to one
        // interval later or sooner, by the phase of its reads alone.
        let slack = path_rtt + plan.ending_reader().interval;
        let stalled = measure::stalled(&latencies, &baselines, slack);
        let bytes = plan.request_bytes() + plan.response_bytes();
        let summary = measure::summarize(&latencies, &stalled, exchange.elapsed, bytes);
        let analysis = match &packets {
            Some(packets) => Some(diagnose(packets)?),
            None => None,
        };
        let analyzer_stalled = analysis
            .as_ref()
            .map(|a| analyzer_stalled(a, &exchange.transactions));
        Ok(LabRun {
            plan,
            exchange,
            baselines,
            stalled,
            summary,
            packets,
            server_packets,
            analysis,
            analyzer_stalled,
        })
    }

    fn exchange(&self, plan: &Plan, time_limit: Duration) -> Result<Exchange> {
        let place = Placement {
            client_ns: self.net.client_ns.as_ref(),
            server_ns: self.net.server_ns.as_ref(),
            server_ip: self.net.server_ip,
        };
        exchange::run_concurrent(plan, &place, time_limit)
    }
}

/// Runs the analyzer on captured packets.
pub fn diagnose(packets: &[Packet]) -> Result<Analysis> {
    let bytes = write_pcap(Vec::new(), packets).map_err(|e| LabError::io("pcap", e))?;
    analyze(
        Cursor::new(bytes),
        "lab capture",
        &AnalyzeOptions::default(),
    )
    .map_err(|e| LabError::Failed(format!("the analyzer refused the lab's capture: {e}")))
}

/// Per transaction: does a TCP stall the analyzer found end while it was in flight, on
/// its own connection (when the transaction says which)?
pub fn analyzer_stalled(analysis: &Analysis, transactions: &[Measured]) -> Vec<bool> {
    let mut stalled = vec![false; transactions.len()];
    let ends = analysis.connections.iter().flat_map(|c| {
        c.events
            .iter()
            .filter(|e| e.class.is_tcp_stall())
            .map(move |e| (c.client.port(), e.end))
    });
    // A stall delays every transaction in flight when it ends (with pipelining, more
    // than one), as the simulator's ground truth counts them.
    for (client_port, end) in ends {
        for (i, t) in transactions.iter().enumerate() {
            let same_connection = t.client_port.is_none_or(|p| p == client_port);
            if same_connection && t.start < end && end <= t.end + END_TOLERANCE {
                stalled[i] = true;
            }
        }
    }
    stalled
}
