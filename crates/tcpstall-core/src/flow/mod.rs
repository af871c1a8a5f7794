//! Connection tracking: both directions of every TCP connection in a segment stream.
//!
//! Each direction keeps its sequence space (unwrapped to 64 bits), what is in flight,
//! the receiver's window, the MSS, and the round trip between the capture point and its
//! endpoint. Gaps in a connection's data are handed to [`crate::detect`] as they end.
//!
//! A segment goes through the files in this order: `table.rs` finds its connection (or
//! opens one), `connection.rs` updates the state of its two directions (`direction.rs`,
//! with what the sender's own segments prove in [`sender`] and what the ACKs show in
//! [`acks`]), and `gap.rs` assembles the gap its data ends.

pub mod acks;
mod connection;
mod direction;
mod gap;
pub mod sender;
mod table;

pub use connection::{Connection, MssSource};
pub use direction::Direction;
pub use table::{FlowTable, IDLE_TIMEOUT, MAX_OPEN_CONNECTIONS, bucket_of};
