//! From a tracked connection and its classified gaps to a verdict a person can act on:
//! how much time the stalls cost and which application pattern caused them
//! (`verdict.rs`), whose timer held the ACKs and what stack that points to (`timer.rs`),
//! and the fixes ranked with their gain (`fixes.rs`). The records they share, a role and
//! a stalled direction's diagnosis, are here.

use std::net::SocketAddr;

use crate::detect::Pattern;
use crate::segment::Nanos;

mod fixes;
mod timer;
mod verdict;

pub use fixes::{
    Fix, FixAction, FixKind, InferredScenario, InferredValue, Prediction, helpful_first,
    predicted_gain,
};
pub use timer::{DelayedAckProfile, TimerGuess, TimerReading, infer_timer, read_timer};
pub use verdict::{ConnectionDiagnosis, Verdict, diagnose};

/// The two roles of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Client,
    Server,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// The stalls one side held, and what they point to: who delayed the ACKs and with
/// which timer, the application pattern, and the fixes. A connection can stall both ways
/// (a request held by the client, its reply by the server), each with its own story.
#[derive(Clone, Debug)]
pub struct DirectionDiagnosis {
    /// The side that held the data, and the one whose ACKs it waited for.
    pub holder: Role,
    pub holder_endpoint: SocketAddr,
    pub delayer: Role,
    pub delayer_endpoint: SocketAddr,
    /// Its stalls: how many, how long in all, and the ACK delays behind them.
    pub stall_count: usize,
    pub time_lost: Nanos,
    pub ack_delay_time: Nanos,
    /// How many of them Nagle held.
    pub nagle_stalls: usize,
    pub delayed_ack: Option<DelayedAckProfile>,
    pub pattern: Option<Pattern>,
    /// The holder's Nagle held data behind full-sized segments only: classic Nagle,
    /// which Minshall's variant would not do.
    pub classic_nagle_evidence: bool,
    pub fixes: Vec<Fix>,
}
