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
mod copies;
mod direction;
mod gap;
pub mod sender;
mod table;

pub use connection::{Connection, MssSource};
pub use direction::Direction;
pub use table::{FlowTable, IDLE_TIMEOUT, MAX_OPEN_CONNECTIONS, bucket_of};

#[cfg(test)]
mod tests {
    use super::connection::{Connection, PendingGap};
    use crate::detect::StallEvent;
    use crate::diagnosis::ConnectionDiagnosis;

    fn with_thousands(n: usize) -> String {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(digit);
        }
        out
    }

    /// docs/memory-budget.md gives the size of what is kept per connection and per gap:
    /// held to the code, so the budget cannot go stale.
    #[test]
    fn the_memory_budget_gives_the_sizes_the_code_has() {
        let budget = include_str!("../../../../docs/memory-budget.md");
        for (phrase, size) in [
            ("its state, {} bytes", size_of::<Connection>()),
            (
                "| its unacknowledged data segments | {} bytes each",
                size_of::<super::direction::InFlight>(),
            ),
            ("| {} bytes each (the evidence", size_of::<PendingGap>()),
            ("({} bytes, and its fixes", size_of::<ConnectionDiagnosis>()),
            ("| a listed gap | {} bytes", size_of::<StallEvent>()),
        ] {
            let text = phrase.replace("{}", &with_thousands(size));
            assert!(
                budget.contains(&text),
                "docs/memory-budget.md should say \"{text}\""
            );
        }
    }
}
