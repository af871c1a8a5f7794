//! tcpstall's core: segments, capture input, connection tracking, stall detection and
//! diagnosis, and the renderers over a diagnosis.
//!
//! Data flows in that order: [`capture`] turns packets into [`segment::Segment`]s,
//! [`flow`] tracks connections (with [`sender`], what each side's own segments prove, and
//! [`acks`], what its ACKs show)
//! and hands each gap to [`detect`], which holds it to the chain in [`evidence`]; [`diagnosis`]
//! concludes per connection, [`analyze`] wires the pipeline, and [`report`] renders.

pub mod analyze;
pub mod capture;
pub mod detect;
pub mod diagnosis;
pub mod flow;
pub mod path;
pub mod report;
pub mod segment;

pub use detect::basis;
pub use flow::{acks, sender};
