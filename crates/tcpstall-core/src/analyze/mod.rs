//! The pipeline of `tcpstall analyze`: capture → segments → flows → diagnoses.
//!
//! `pipeline.rs` reads one input into diagnoses; `files.rs` reads several capture files
//! as one input, or as one input per capture point (`traces.rs`: whether they are one
//! trace). The records both use are here.

mod files;
mod pipeline;
mod traces;

pub use files::{FileOptions, analyze_files};
pub use pipeline::analyze;
pub use traces::{NotOneTrace, TRACE_GAP};

use crate::detect::StallClass;
use std::cmp::Reverse;
use std::net::IpAddr;

use crate::capture::{CaptureError, FileError, FileNotes, FragmentCounts, ReadNotes, SkipCounts};
use crate::detect::DetectConfig;
use crate::diagnosis::ConnectionDiagnosis;
use crate::segment::{Nanos, Segment};

/// Which connections to keep: those with an endpoint matching a host (when any is given)
/// and an endpoint matching a port (when any is given).
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub hosts: Vec<IpAddr>,
    pub ports: Vec<u16>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.ports.is_empty()
    }

    #[inline]
    pub fn matches(&self, segment: &Segment) -> bool {
        if self.is_empty() {
            return true;
        }
        let host_ok = self.hosts.is_empty()
            || self.hosts.contains(&segment.src.ip())
            || self.hosts.contains(&segment.dst.ip());
        let port_ok = self.ports.is_empty()
            || self.ports.contains(&segment.src.port())
            || self.ports.contains(&segment.dst.port());
        host_ok && port_ok
    }
}

#[derive(Clone, Debug, Default)]
pub struct AnalyzeOptions {
    pub detect: DetectConfig,
    pub filter: Filter,
}

/// What was read, and what was not used and why.
#[derive(Clone, Debug, Default)]
pub struct InputSummary {
    pub source: String,
    pub read: ReadNotes,
    pub tcp_segments: u64,
    pub filtered_out: u64,
    pub duplicates: u64,
    /// Segments that arrived just after their connection closed (its last ACK).
    pub late_segments: u64,
    /// Connections ended because they fell silent, or because too many were open.
    pub connections_ended_idle: u64,
    pub skipped: SkipCounts,
    /// IP fragments seen, and those joined into whole datagrams.
    pub fragments: FragmentCounts,
    /// Each file, when several were read as one (empty for a single input).
    pub files: Vec<FileNotes>,
    pub first_time: Option<Nanos>,
    pub last_time: Option<Nanos>,
    pub warnings: Vec<String>,
    /// Packets of one file that another file holds too, at the same time with the same
    /// bytes (one file given twice, or one interface captured twice): left out.
    pub file_duplicates: u64,
    /// When several files saw the same traffic at different capture points: each
    /// point's name (its file, or its files), each analysed on its own.
    pub capture_points: Vec<String>,
}

/// The result of one analysis.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub input: InputSummary,
    /// Worst first: most time lost to TCP stalls, then most gaps, then by start time;
    /// at most [`MAX_LISTED_CONNECTIONS`].
    pub connections: Vec<ConnectionDiagnosis>,
    /// The connections beyond the listing limit (the least severe): only their totals.
    pub unlisted: UnlistedTotals,
    pub min_gap: Nanos,
}

impl Analysis {
    /// Every connection, listed or not.
    pub fn total_connections(&self) -> u64 {
        self.connections.len() as u64 + self.unlisted.connections
    }

    pub fn connections_with_stalls(&self) -> u64 {
        self.connections
            .iter()
            .filter(|c| c.stall_count > 0)
            .count() as u64
            + self.unlisted.connections_with_stalls
    }

    pub fn total_stalls(&self) -> u64 {
        self.connections
            .iter()
            .map(|c| c.stall_count as u64)
            .sum::<u64>()
            + self.unlisted.stalls
    }

    pub fn total_time_lost(&self) -> Nanos {
        self.connections.iter().map(|c| c.time_lost).sum::<Nanos>() + self.unlisted.time_lost
    }

    /// With several capture points, each point's own totals, in the order of
    /// `input.capture_points`: a connection seen at two points is counted at each, so
    /// the totals above count its stalls and time lost once per point. Empty with one.
    pub fn per_capture_point(&self) -> Vec<PointTotals> {
        if self.input.capture_points.len() < 2 {
            return Vec::new();
        }
        let mut points: Vec<PointTotals> = self
            .input
            .capture_points
            .iter()
            .map(|label| PointTotals {
                label: label.clone(),
                ..PointTotals::default()
            })
            .collect();
        for c in &self.connections {
            let Some(point) = points
                .iter_mut()
                .find(|p| c.capture_point.as_deref() == Some(p.label.as_str()))
            else {
                continue;
            };
            point.connections += 1;
            point.connections_with_stalls += u64::from(c.stall_count > 0);
            point.stalls += c.stall_count as u64;
            point.time_lost += c.time_lost;
        }
        points
    }

    /// Gaps of each class over every connection: (count, total duration) by class index.
    pub fn gaps_by_class(&self) -> [(u64, Nanos); StallClass::COUNT] {
        let mut totals = self.unlisted.gaps_by_class;
        for c in &self.connections {
            add_gaps_by_class(&mut totals, c);
        }
        totals
    }
}

/// One capture point's totals over the connections listed at it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PointTotals {
    pub label: String,
    pub connections: u64,
    pub connections_with_stalls: u64,
    pub stalls: u64,
    pub time_lost: Nanos,
}

/// Adds the gaps of `d`, listed and counted, to `totals` (count, duration) by class index.
fn add_gaps_by_class(totals: &mut [(u64, Nanos); StallClass::COUNT], d: &ConnectionDiagnosis) {
    for (class, (count, duration)) in d.class_counts() {
        totals[class.index()].0 += count as u64;
        totals[class.index()].1 += duration;
    }
}

/// Connections listed in detail. Beyond this the least severe are only added to
/// totals, so memory stays bounded on captures of millions of connections.
pub const MAX_LISTED_CONNECTIONS: usize = 20_000;

/// Totals of the connections not listed.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnlistedTotals {
    pub connections: u64,
    pub connections_with_stalls: u64,
    pub stalls: u64,
    pub time_lost: Nanos,
    pub packets: u64,
    pub bytes: u64,
    /// (count, total duration) by class index.
    pub gaps_by_class: [(u64, Nanos); StallClass::COUNT],
}

impl UnlistedTotals {
    fn merge(&mut self, other: &UnlistedTotals) {
        self.connections += other.connections;
        self.connections_with_stalls += other.connections_with_stalls;
        self.stalls += other.stalls;
        self.time_lost += other.time_lost;
        self.packets += other.packets;
        self.bytes += other.bytes;
        for (total, (count, duration)) in self.gaps_by_class.iter_mut().zip(other.gaps_by_class) {
            total.0 += count;
            total.1 += duration;
        }
    }

    fn add(&mut self, d: &ConnectionDiagnosis) {
        self.connections += 1;
        self.connections_with_stalls += u64::from(d.stall_count > 0);
        self.stalls += d.stall_count as u64;
        self.time_lost += d.time_lost;
        self.packets += d.packets;
        self.bytes += d.bytes_client_to_server + d.bytes_server_to_client;
        add_gaps_by_class(&mut self.gaps_by_class, d);
    }
}

/// Each diagnosis's severity key with its index: ordering these instead of the large
/// diagnoses spares moving them through the sort.
fn severity_keys(diagnoses: &[ConnectionDiagnosis]) -> Vec<(SeverityKey, usize)> {
    diagnoses
        .iter()
        .enumerate()
        .map(|(i, d)| (severity_key(d), i))
        .collect()
}

/// The indices of `diagnoses`, most severe first. The order is total (no two
/// connections begin with the same packet), so an unstable sort gives it.
fn severity_ranking(diagnoses: &[ConnectionDiagnosis]) -> Vec<usize> {
    let mut keys = severity_keys(diagnoses);
    keys.sort_unstable();
    keys.into_iter().map(|(_, i)| i).collect()
}

/// Most severe first: time lost to stalls, then gaps, then the earliest; a total order,
/// so the report does not depend on which tracking thread saw which connection.
type SeverityKey = (Reverse<Nanos>, Reverse<usize>, Nanos, u64);

fn severity_key(d: &ConnectionDiagnosis) -> SeverityKey {
    (
        Reverse(d.time_lost),
        Reverse(d.gap_count()),
        d.first_time,
        d.first_packet,
    )
}

/// Gaps listed one by one over all listed connections (208 bytes each); beyond this the
/// least severe connections keep only their gaps' counts.
pub const MAX_LISTED_GAPS: usize = 200_000;

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{0}")]
    Capture(#[from] CaptureError),
    /// One of several files (its path is in the message).
    #[error("{0}")]
    File(#[from] FileError),
    /// None of several files could be read: each one's problem.
    #[error("no file could be read: {0}")]
    NoFileRead(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("no TCP segments in the capture ({0})")]
    NoTcp(String),
    /// Several files that are not one trace, read as one only when asked.
    #[error("{0}")]
    NotOneTrace(NotOneTrace),
}

/// What the reading of the input gave, besides its packets.
struct InputRead {
    read: ReadNotes,
    files: Vec<FileNotes>,
    warnings: Vec<String>,
}
