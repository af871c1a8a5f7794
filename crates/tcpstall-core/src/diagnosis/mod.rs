//! From a tracked connection and its classified gaps to a verdict a person can act on:
//! how much time the stalls cost and which application pattern caused them
//! (`verdict.rs`), whose timer held the ACKs and what stack that points to (`timer.rs`),
//! and the fixes ranked with their gain (`fixes.rs`).

mod fixes;
mod timer;
mod verdict;

pub use fixes::{Fix, FixAction, FixKind, InferredScenario, InferredValue, Prediction};
pub use timer::{DelayedAckProfile, TimerGuess, infer_timer};
pub use verdict::{ConnectionDiagnosis, DirectionDiagnosis, Verdict, diagnose};

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
