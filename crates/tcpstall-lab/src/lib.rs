//! The lab: does the stall the simulator predicts really happen on this machine's kernel?
//!
//! It runs the simulator's scenario descriptions ([`tcpstall_sim::scenario`]) with real
//! client and server sockets, measures every transaction, and can capture its own
//! traffic, run the analyzer on that capture, and hold the simulator's `linux` profile
//! to what it measured.
//!
//! - [`exchange`]: the client and server applications, with the scenario's writes and
//!   socket options (TCP_NODELAY, TCP_CORK, MSG_MORE, TCP_QUICKACK re-armed after reads),
//!   request/response or one-way (on the client's own clock, or a stream).
//! - [`reader`]: how each application reads: SO_RCVBUF, bytes per read, pace, late wake-ups.
//! - [`net`]: where they run: loopback (no root), a private namespace's loopback, or two
//!   namespaces joined by a veth pair with the user-space [`delayline`] between them,
//!   whose delay may vary per packet as a [`queue`] shared with cross traffic would.
//! - [`programs`]: seed 002's Java client and server, and an HTTP keep-alive server
//!   (seed 004) with its client, run as they are in the lab's namespaces.
//! - [`capture`]: AF_PACKET capture of the lab's own packets at the client, the server
//!   or the middle of the delay line, written as pcap.
//! - [`measure`]: latency percentiles, throughput, and which transactions stalled.
//! - [`held`]: whether a delayed ACK held a round trip, from captures at both ends.
//! - [`compare`]: the analyzer against the measurements, the simulator against the lab.
//! - [`suites`]: the published cases (seed 002's table, seed 000's bulk blocks, the
//!   closed-loop matrix, the delay line's accuracy, seeds 003 and 004 at 20 and 100 ms,
//!   the Java programs over varying delays captured at three points).

pub mod capture;
pub mod compare;
pub mod delayline;
pub mod exchange;
pub mod held;
pub mod lab;
pub mod measure;
pub mod net;
pub mod netns;
pub mod privileges;
pub mod programs;
pub mod queue;
pub mod reader;
pub mod report;
pub mod suites;

pub use lab::{Lab, LabRun, RunOptions};

/// Why a lab run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    Scenario(#[from] tcpstall_sim::scenario::ScenarioError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`ip {command}` failed: {detail}")]
    Ip { command: String, detail: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Failed(String),
}

impl LabError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> LabError {
        LabError::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, LabError>;
