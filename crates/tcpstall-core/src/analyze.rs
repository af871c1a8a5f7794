//! The pipeline of `tcpstall analyze`: capture → segments → flows → diagnoses.

use std::io::Read;
use std::net::IpAddr;

use crate::capture::{
    CaptureError, CaptureReader, ReadNotes, SkipCounts, SkipReason, decode_packet,
};
use crate::detect::DetectConfig;
use crate::diagnosis::{ConnectionDiagnosis, diagnose};
use crate::flow::FlowTable;
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

    pub fn matches(&self, segment: &Segment) -> bool {
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
    pub first_time: Option<Nanos>,
    pub last_time: Option<Nanos>,
    pub warnings: Vec<String>,
}

/// The result of one analysis.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub input: InputSummary,
    /// Worst first: most time lost to TCP stalls, then other gaps, then by start time.
    pub connections: Vec<ConnectionDiagnosis>,
    /// Connections without any gap beyond the first [`MAX_QUIET_LISTED`]: only counted.
    pub unlisted_quiet: QuietTotals,
    pub min_gap: Nanos,
}

/// Connections listed without any gap; beyond this they are only counted, so a capture
/// of millions of short connections stays within a fixed memory budget.
pub const MAX_QUIET_LISTED: usize = 100_000;

/// Totals of the connections not listed.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuietTotals {
    pub connections: u64,
    pub packets: u64,
    pub bytes: u64,
}

/// Diagnoses connections as they end, keeping every one with a gap and the first
/// [`MAX_QUIET_LISTED`] without.
#[derive(Default)]
struct Collector {
    diagnoses: Vec<ConnectionDiagnosis>,
    quiet_listed: usize,
    unlisted_quiet: QuietTotals,
    duplicates: u64,
}

impl Collector {
    fn take(&mut self, connection: crate::flow::Connection) {
        self.duplicates += connection.duplicates;
        let diagnosis = diagnose(connection);
        if diagnosis.gap_count() == 0 {
            if self.quiet_listed >= MAX_QUIET_LISTED {
                self.unlisted_quiet.connections += 1;
                self.unlisted_quiet.packets += diagnosis.packets;
                self.unlisted_quiet.bytes +=
                    diagnosis.bytes_client_to_server + diagnosis.bytes_server_to_client;
                return;
            }
            self.quiet_listed += 1;
        }
        self.diagnoses.push(diagnosis);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{0}")]
    Capture(#[from] CaptureError),
    #[error("no TCP segments in the capture ({0})")]
    NoTcp(String),
}

/// Reads a whole capture and diagnoses every TCP connection in it.
pub fn analyze<R: Read + Send + 'static>(
    input: R,
    source: &str,
    options: &AnalyzeOptions,
) -> Result<Analysis, AnalyzeError> {
    let reader = CaptureReader::new(input)?;
    let mut flows = FlowTable::new(options.detect);
    let mut collector = Collector::default();
    let mut summary = InputSummary {
        source: source.to_string(),
        ..InputSummary::default()
    };
    let notes = reader.for_each_packet(|packet| {
        summary.first_time = Some(
            summary
                .first_time
                .map_or(packet.time, |t| t.min(packet.time)),
        );
        summary.last_time = Some(
            summary
                .last_time
                .map_or(packet.time, |t| t.max(packet.time)),
        );
        match decode_packet(packet) {
            Ok(segment) => {
                summary.tcp_segments += 1;
                if options.filter.matches(&segment) {
                    flows.observe(&segment, packet.number);
                    if flows.has_ended() {
                        for connection in flows.take_ended() {
                            collector.take(connection);
                        }
                    }
                } else {
                    summary.filtered_out += 1;
                }
            }
            Err(reason) => summary.skipped.add(reason),
        }
    })?;
    summary.read = notes;
    if let Some(tail) = &summary.read.truncated_tail {
        summary.warnings.push(tail.clone());
    }
    if summary.read.packets_without_timestamp > 0 {
        summary.warnings.push(format!(
            "{} packets in Simple Packet Blocks have no timestamp; they were given the previous packet's time",
            summary.read.packets_without_timestamp
        ));
    }
    if summary.read.packets_unknown_interface > 0 {
        summary.warnings.push(format!(
            "{} packets name an interface no Interface Description Block declared; they were skipped",
            summary.read.packets_unknown_interface
        ));
    }
    if summary.tcp_segments == 0 {
        return Err(AnalyzeError::NoTcp(describe_no_tcp(&summary)));
    }
    summary.late_segments = flows.late_segments;
    summary.connections_ended_idle = flows.ended_idle;
    for connection in flows.into_connections() {
        collector.take(connection);
    }
    summary.duplicates = collector.duplicates;
    // Sorting indices, then moving each diagnosis once, spares moving the large values
    // through the sort.
    let diagnoses = collector.diagnoses;
    let mut order: Vec<usize> = (0..diagnoses.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&diagnoses[a], &diagnoses[b]);
        b.time_lost
            .cmp(&a.time_lost)
            .then_with(|| b.gap_count().cmp(&a.gap_count()))
            .then_with(|| a.first_time.cmp(&b.first_time))
    });
    let mut slots: Vec<Option<ConnectionDiagnosis>> = diagnoses.into_iter().map(Some).collect();
    let diagnoses: Vec<ConnectionDiagnosis> =
        order.into_iter().filter_map(|i| slots[i].take()).collect();
    Ok(Analysis {
        input: summary,
        connections: diagnoses,
        unlisted_quiet: collector.unlisted_quiet,
        min_gap: options.detect.min_gap,
    })
}

fn describe_no_tcp(summary: &InputSummary) -> String {
    let packets = summary.read.packets;
    if packets == 0 {
        return "it holds no packets".to_string();
    }
    let mut parts: Vec<String> = summary
        .skipped
        .by_reason
        .iter()
        .map(|(reason, n)| format!("{n} {}", reason.describe()))
        .collect();
    if summary.read.packets_unknown_interface > 0 {
        parts.push(format!(
            "{} on undeclared interfaces",
            summary.read.packets_unknown_interface
        ));
    }
    let only_link = summary
        .skipped
        .by_reason
        .keys()
        .all(|r| matches!(r, SkipReason::UnsupportedLinkType(_)));
    let hint = if only_link && !summary.skipped.by_reason.is_empty() {
        "; supported link types: Ethernet (1), BSD loopback (0, 108), raw IP (12, 14, 101, 228, 229), Linux cooked (113, 276)"
    } else {
        ""
    };
    format!("{packets} packets: {}{hint}", parts.join(", "))
}
