//! Capture input and output: pcap/pcapng files in, [`Segment`](crate::segment::Segment)s out;
//! pcap out (simulations, the lab), and a capture written again as pcapng with comments.

mod annotate;
mod compressed;
mod decode;
pub(crate) mod fast;
mod fragments;
mod link;
mod multi;
mod reader;
mod tcp_options;
mod tunnel;
mod writer;

use std::io;

pub use annotate::{AnnotateError, AnnotateSummary, PcapngWriter, annotate};
pub use compressed::{
    Compression, DEFAULT_MAX_EXPANSION, EXPANSION_FLOOR_BYTES, set_max_expansion,
};
pub use decode::{Decoded, Decoder, SkipCounts, SkipReason, decode_packet};
pub use fragments::FragmentCounts;
pub(crate) use link::supported_link_types;
pub use multi::{
    ExpandedPaths, FileError, FileNotes, MergedCaptures, MergedNotes, OnFileError, ProgressFn,
    expand_paths,
};
pub use reader::{
    CaptureFormat, CaptureReader, MAX_INTERFACES, MAX_RECORD_BYTES, MAX_TIME, Packet, ReadNotes,
    ReadStep, is_capture_magic,
};
pub use writer::PcapWriter;

/// Why a capture could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("the input is empty")]
    Empty,
    #[error("not a capture: {detail}")]
    NotACapture { detail: String },
    #[error("truncated file header: the input ends before its {format} header is complete")]
    TruncatedHeader { format: &'static str },
    #[error("truncated capture: {detail}")]
    Truncated { detail: String },
    #[error("unsupported capture format: {detail}")]
    Unsupported { detail: String },
    #[error(
        "packet {packet} at byte offset {offset} claims {claimed} bytes, over the {limit}-byte limit: the capture is corrupt from here"
    )]
    RecordTooLong {
        packet: u64,
        offset: u64,
        claimed: u64,
        limit: u64,
    },
    #[error("packet {packet} at byte offset {offset}: {detail}")]
    Corrupt {
        packet: u64,
        offset: u64,
        detail: String,
    },
    /// A compressed capture expanded past the limit (`--max-expansion`).
    #[error("{detail}")]
    ExpansionLimit { detail: String },
    #[error("read error: {0}")]
    Io(#[from] io::Error),
}
