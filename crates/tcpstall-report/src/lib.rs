//! Pictures people read at a glance: time-sequence graphs, histograms, the HTML report.
//!
//! Everything here renders what the analysis, the simulator or the lab already
//! concluded; nothing here detects anything. The one thing read again is the capture
//! itself ([`trace`]), because the analysis keeps no packets.

pub mod analysis;
pub mod compare;
pub mod graphs;
pub mod page;
pub mod png;
pub mod progress;
pub mod round_trips;
pub mod scale;
pub mod sim;
pub mod spool;
pub mod svg;
pub mod table;
pub mod trace;
pub mod zoom;

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("reading the capture again for the graphs: {0}")]
    SecondPass(String),
    #[error("{path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("rendering {what} as PNG: {detail}")]
    Png { what: String, detail: String },
    #[error("{0}")]
    Input(String),
}
