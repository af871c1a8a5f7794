//! tcpstall's core: segments, capture input, connection tracking, stall detection and
//! diagnosis, and the renderers over a diagnosis.
//!
//! Data flows in that order: [`capture`] turns packets into [`segment::Segment`]s
//! (their sequence numbers [`seq::SeqNumber`]s; a connection's two sides are
//! [`side::Side`]s),
//! [`flow`] tracks connections (with [`flow::sender`], what each side's own segments
//! prove, and [`flow::acks`], what its ACKs show) and hands each gap to [`detect`], which
//! holds it to the chain of evidence, one link a file; [`diagnosis`] concludes per
//! connection, [`analyze`] wires the pipeline, and [`report`] renders. Every file any
//! part of tcpstall writes goes through [`output`]: whole or not at all, never through a
//! link.
//! docs/architecture.md draws the flow and says where a new decoder, rule, stall class
//! or output goes.

pub mod analyze;
pub mod capture;
pub mod detect;
pub mod diagnosis;
pub mod escape;
pub mod flow;
pub mod output;
pub mod path;
pub mod report;
pub mod segment;
pub mod seq;
pub mod side;
pub mod stacks;

/// The names of the chain's links, and what a flow's sides show, by their shorter paths.
pub use detect::basis;
pub use flow::{acks, sender};
