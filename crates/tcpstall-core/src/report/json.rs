//! The JSON report, schema version 3 (documented in `docs/json-schema.md`).
//!
//! Times are seconds as floating-point numbers: `start` values count from the first
//! packet of the capture, durations and delays are plain lengths. Endpoints are
//! "ip:port" strings (`"[v6]:port"` for IPv6).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analyze::Analysis;
use crate::detect::{Evidence, StallEvent};
use crate::diagnosis::ConnectionDiagnosis;
use crate::segment::{Nanos, secs};

pub const SCHEMA_VERSION: u32 = 3;

#[derive(Serialize)]
pub struct JsonReport {
    pub schema_version: u32,
    pub tool: JsonTool,
    pub input: JsonInput,
    pub settings: JsonSettings,
    pub summary: JsonSummary,
    pub connections: Vec<JsonConnection>,
}

#[derive(Serialize)]
pub struct JsonTool {
    pub name: &'static str,
    pub version: &'static str,
}

#[derive(Serialize)]
pub struct JsonInput {
    pub source: String,
    pub format: Option<&'static str>,
    /// `"gzip"` or `"zstd"` when the capture came compressed.
    pub compression: Option<&'static str>,
    /// Each file, when several were read as one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<JsonFile>,
    pub ip_fragments: JsonFragments,
    pub packets: u64,
    pub tcp_segments: u64,
    pub filtered_out: u64,
    pub duplicates: u64,
    pub late_segments: u64,
    pub connections_ended_idle: u64,
    /// Seconds since the Unix epoch of the first packet.
    pub first_packet_time: Option<f64>,
    pub duration: f64,
    pub skipped: BTreeMap<String, u64>,
    pub warnings: Vec<String>,
    /// Packets one file held that another held too (same time, same bytes): left out.
    pub file_duplicates: u64,
    /// The capture points, when several files saw the same traffic at different points
    /// and each was analysed on its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capture_points: Vec<String>,
}

#[derive(Serialize)]
pub struct JsonFile {
    pub path: String,
    pub format: Option<&'static str>,
    pub compression: Option<&'static str>,
    pub packets: u64,
    /// Why the file could not be read, or not to its end.
    pub error: Option<String>,
}

#[derive(Serialize)]
pub struct JsonFragments {
    /// IP fragments seen.
    pub seen: u64,
    /// Fragments joined into whole datagrams, and those datagrams.
    pub reassembled: u64,
    pub datagrams: u64,
}

#[derive(Serialize)]
pub struct JsonSettings {
    pub min_gap: f64,
}

#[derive(Serialize)]
pub struct JsonSummary {
    pub connections: u64,
    /// The least severe connections beyond the listing limit: counted here, not listed.
    pub connections_not_listed: u64,
    pub connections_with_stalls: u64,
    pub stalls: u64,
    pub time_lost: f64,
    pub gaps_by_class: BTreeMap<&'static str, u64>,
    /// With several capture points, each point's totals: the ones above count a
    /// connection seen at two points once per point.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_capture_point: Vec<JsonPointTotals>,
}

#[derive(Serialize)]
pub struct JsonPointTotals {
    pub capture_point: String,
    pub connections: u64,
    pub connections_with_stalls: u64,
    pub stalls: u64,
    pub time_lost: f64,
}

#[derive(Serialize)]
pub struct JsonConnection {
    pub client: String,
    pub server: String,
    /// The capture point it was seen at, when the files held several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_point: Option<String>,
    /// False when the handshake was not captured and the roles are a guess.
    pub handshake_seen: bool,
    pub start: f64,
    pub duration: f64,
    pub first_packet: u64,
    pub packets: u64,
    pub bytes_client_to_server: u64,
    pub bytes_server_to_client: u64,
    pub retransmitted_segments: u64,
    pub mss: JsonMss,
    pub path_rtt: JsonPathRtt,
    /// 0.0 = capture taken at the client, 1.0 = at the server.
    pub capture_position: Option<f64>,
    pub verdict: &'static str,
    pub stall_count: usize,
    pub time_lost: f64,
    pub time_lost_share: f64,
    pub holder: Option<String>,
    pub delayer: Option<String>,
    pub delayed_ack: Option<JsonDelayedAck>,
    pub pattern: Option<JsonPattern>,
    pub directions: Vec<JsonDirection>,
    pub fixes: Vec<JsonFix>,
    /// The scenario inferred from the worst direction and its simulation, for the
    /// connections `analyze` simulated.
    pub inferred_scenario: Option<JsonInferred>,
    pub gaps_by_class: BTreeMap<&'static str, JsonClassTotal>,
    pub stalls_by_confidence: BTreeMap<&'static str, usize>,
    pub stalls: Vec<JsonStall>,
}

/// One direction that stalled: who held, who delayed, the timer, the pattern, the fixes.
#[derive(Serialize)]
pub struct JsonDirection {
    pub holder: String,
    pub holder_role: &'static str,
    pub delayer: String,
    pub delayer_role: &'static str,
    pub stall_count: usize,
    pub time_lost: f64,
    pub delayed_ack: Option<JsonDelayedAck>,
    pub pattern: Option<JsonPattern>,
    pub classic_nagle: bool,
    pub fixes: Vec<JsonFix>,
}

#[derive(Serialize)]
pub struct JsonMss {
    pub client: u32,
    pub client_source: &'static str,
    pub server: u32,
    pub server_source: &'static str,
}

#[derive(Serialize)]
pub struct JsonPathRtt {
    pub client: Option<f64>,
    pub server: Option<f64>,
}

#[derive(Serialize)]
pub struct JsonDelayedAck {
    pub endpoint: String,
    pub role: &'static str,
    pub samples: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub timer: &'static str,
    pub stacks: &'static [&'static str],
    /// The timer at the delayer, least and most (seconds), the path's share taken out.
    pub at_delayer: [f64; 2],
    /// The timers the delays fit when none is named alone.
    pub could_be: Vec<&'static str>,
    /// The delays fit Linux's timer, which the first acknowledgment it held rules out.
    pub linux_ruled_out: bool,
    /// The TTL the delayer's packets left with, where it ruled out a timer the delays fit.
    pub ttl_ruled_out: Option<u8>,
}

#[derive(Serialize)]
pub struct JsonPattern {
    pub name: &'static str,
    pub full_segments: Option<u32>,
}

#[derive(Serialize)]
pub struct JsonFix {
    pub rank: usize,
    pub role: &'static str,
    pub endpoint: String,
    pub action: String,
    pub note: String,
    pub saves: f64,
    pub speedup: f64,
    /// True when `saves` and `speedup` are an estimate (every stall, or every ACK
    /// delay, removed) rather than simulated.
    pub estimate: bool,
    pub predicted: Option<JsonPrediction>,
}

#[derive(Serialize)]
pub struct JsonPrediction {
    /// The connection's duration with the fix, seconds.
    pub time: f64,
    pub speedup: f64,
    pub stalled_share: f64,
}

#[derive(Serialize)]
pub struct JsonInferred {
    pub holder_role: &'static str,
    /// Each scenario key: its value and where in the capture it comes from.
    pub values: BTreeMap<String, JsonInferredValue>,
    pub transactions_simulated: u32,
    /// Seconds per transaction of the scenario as inferred, and the share stalled.
    pub simulated_transaction_time: f64,
    pub simulated_stalled_share: f64,
    /// False when the scenario as inferred does not stall: the fixes keep their estimates.
    pub reproduced: bool,
    /// The capture's own seconds per transaction (duration over the client's messages).
    pub capture_transaction_time: Option<f64>,
    pub variants: Vec<JsonVariant>,
    /// The scenario file, for `tcpstall simulate`.
    pub toml: String,
}

#[derive(Serialize)]
pub struct JsonInferredValue {
    pub value: serde_json::Value,
    pub source: String,
}

#[derive(Serialize)]
pub struct JsonVariant {
    pub name: String,
    pub transaction_time: f64,
    pub speedup: f64,
    pub stalled_share: f64,
}

#[derive(Serialize)]
pub struct JsonClassTotal {
    pub count: usize,
    pub duration: f64,
}

#[derive(Serialize)]
pub struct JsonStall {
    pub class: &'static str,
    pub start: f64,
    pub duration: f64,
    pub sender: String,
    pub holder: Option<String>,
    pub delayer: Option<String>,
    pub held_bytes: u64,
    pub ack_start: Option<f64>,
    pub ack_delay: Option<f64>,
    pub idle: Option<f64>,
    pub pattern: Option<&'static str>,
    pub evidence: Evidence,
}

/// Builds the report value (serialize it with `serde_json`).
pub fn build(analysis: &Analysis) -> JsonReport {
    let origin = analysis.input.first_time.unwrap_or(0);
    let connections: Vec<JsonConnection> = analysis
        .connections
        .iter()
        .map(|c| connection(c, origin))
        .collect();
    let gaps_by_class: BTreeMap<&'static str, u64> = crate::detect::StallClass::ALL
        .into_iter()
        .zip(analysis.gaps_by_class())
        .filter(|(_, (count, _))| *count > 0)
        .map(|(class, (count, _))| (class.name(), count))
        .collect();
    JsonReport {
        schema_version: SCHEMA_VERSION,
        tool: JsonTool {
            name: "tcpstall",
            version: env!("CARGO_PKG_VERSION"),
        },
        input: JsonInput {
            source: analysis.input.source.clone(),
            format: analysis.input.read.format.map(|f| f.name()),
            compression: analysis.input.read.compression.map(|c| c.name()),
            files: analysis
                .input
                .files
                .iter()
                .map(|f| JsonFile {
                    path: f.path.display().to_string(),
                    format: f.notes.format.map(|f| f.name()),
                    compression: f.notes.compression.map(|c| c.name()),
                    packets: f.notes.packets,
                    error: f.error.clone(),
                })
                .collect(),
            ip_fragments: JsonFragments {
                seen: analysis.input.fragments.fragments,
                reassembled: analysis.input.fragments.reassembled_fragments,
                datagrams: analysis.input.fragments.datagrams,
            },
            packets: analysis.input.read.packets,
            tcp_segments: analysis.input.tcp_segments,
            filtered_out: analysis.input.filtered_out,
            duplicates: analysis.input.duplicates,
            late_segments: analysis.input.late_segments,
            connections_ended_idle: analysis.input.connections_ended_idle,
            first_packet_time: analysis.input.first_time.map(secs),
            duration: secs(analysis.input.last_time.unwrap_or(origin) - origin),
            skipped: analysis
                .input
                .skipped
                .by_reason
                .iter()
                .map(|(r, n)| (r.key(), *n))
                .collect(),
            warnings: analysis.input.warnings.clone(),
            file_duplicates: analysis.input.file_duplicates,
            capture_points: analysis.input.capture_points.clone(),
        },
        settings: JsonSettings {
            min_gap: secs(analysis.min_gap),
        },
        summary: JsonSummary {
            connections: analysis.total_connections(),
            connections_not_listed: analysis.unlisted.connections,
            connections_with_stalls: analysis.connections_with_stalls(),
            stalls: analysis.total_stalls(),
            time_lost: secs(analysis.total_time_lost()),
            gaps_by_class,
            by_capture_point: analysis
                .per_capture_point()
                .into_iter()
                .map(|p| JsonPointTotals {
                    capture_point: p.label,
                    connections: p.connections,
                    connections_with_stalls: p.connections_with_stalls,
                    stalls: p.stalls,
                    time_lost: secs(p.time_lost),
                })
                .collect(),
        },
        connections,
    }
}

fn connection(c: &ConnectionDiagnosis, origin: Nanos) -> JsonConnection {
    let duration = c.duration();
    JsonConnection {
        client: c.client.to_string(),
        server: c.server.to_string(),
        capture_point: c.capture_point.as_deref().map(str::to_string),
        handshake_seen: c.handshake_seen,
        start: secs(c.first_time - origin),
        duration: secs(duration),
        first_packet: c.first_packet,
        packets: c.packets,
        bytes_client_to_server: c.bytes_client_to_server,
        bytes_server_to_client: c.bytes_server_to_client,
        retransmitted_segments: c.retransmitted_segments,
        mss: JsonMss {
            client: c.client_mss.0,
            client_source: c.client_mss.1.name(),
            server: c.server_mss.0,
            server_source: c.server_mss.1.name(),
        },
        path_rtt: JsonPathRtt {
            client: c.client_path_rtt.map(secs),
            server: c.server_path_rtt.map(secs),
        },
        capture_position: c.capture_position(),
        verdict: c.verdict.name(),
        stall_count: c.stall_count,
        time_lost: secs(c.time_lost),
        time_lost_share: c.time_lost_share(),
        holder: c.holder.map(|r| role_endpoint(c, r)),
        delayer: c.delayer.map(|r| role_endpoint(c, r)),
        delayed_ack: c.delayed_ack.as_ref().map(delayed_ack),
        pattern: c.pattern.map(pattern),
        directions: c
            .directions
            .iter()
            .map(|d| JsonDirection {
                holder: d.holder_endpoint.to_string(),
                holder_role: d.holder.name(),
                delayer: d.delayer_endpoint.to_string(),
                delayer_role: d.delayer.name(),
                stall_count: d.stall_count,
                time_lost: secs(d.time_lost),
                delayed_ack: d.delayed_ack.as_ref().map(delayed_ack),
                pattern: d.pattern.map(pattern),
                classic_nagle: d.classic_nagle_evidence,
                fixes: fixes(&d.fixes, duration),
            })
            .collect(),
        fixes: fixes(c.fixes(), duration),
        inferred_scenario: c.inferred.as_ref().map(|i| inferred(c, i)),
        gaps_by_class: c
            .class_counts()
            .into_iter()
            .map(|(class, (count, total))| {
                (
                    class.name(),
                    JsonClassTotal {
                        count,
                        duration: secs(total),
                    },
                )
            })
            .collect(),
        stalls_by_confidence: c
            .confidence_counts()
            .into_iter()
            .map(|(confidence, n)| (confidence.name(), n))
            .collect(),
        stalls: c.events.iter().map(|e| stall(c, e, origin)).collect(),
    }
}

fn delayed_ack(p: &crate::diagnosis::DelayedAckProfile) -> JsonDelayedAck {
    JsonDelayedAck {
        endpoint: p.endpoint.to_string(),
        role: p.role.name(),
        samples: p.samples,
        median: secs(p.reading.median),
        min: secs(p.reading.min),
        max: secs(p.reading.max),
        timer: p.reading.timer.name(),
        stacks: p.reading.timer.stacks(),
        at_delayer: [secs(p.reading.at_delayer.0), secs(p.reading.at_delayer.1)],
        could_be: p.reading.could_be.iter().map(|t| t.name()).collect(),
        linux_ruled_out: p.reading.linux_ruled_out,
        ttl_ruled_out: p.reading.ttl_ruled_out,
    }
}

fn pattern(p: crate::detect::Pattern) -> JsonPattern {
    JsonPattern {
        name: p.name(),
        full_segments: match p {
            crate::detect::Pattern::BulkOddTail { full_segments } => Some(full_segments),
            _ => None,
        },
    }
}

fn fixes<'a>(
    fixes: impl IntoIterator<Item = &'a crate::diagnosis::Fix>,
    duration: Nanos,
) -> Vec<JsonFix> {
    fixes
        .into_iter()
        .enumerate()
        .map(|(i, f)| JsonFix {
            rank: i + 1,
            role: f.role.name(),
            endpoint: f.endpoint.to_string(),
            action: f.action.to_string(),
            note: f.note.to_string(),
            saves: secs(f.saves),
            speedup: match f.predicted {
                Some(p) => (p.speedup * 10.0).round() / 10.0,
                None => speedup(duration, f.saves),
            },
            estimate: f.predicted.is_none(),
            predicted: f.predicted.map(|p| JsonPrediction {
                time: secs(p.time),
                speedup: p.speedup,
                stalled_share: p.stalled_share,
            }),
        })
        .collect()
}

fn inferred(c: &ConnectionDiagnosis, i: &crate::diagnosis::InferredScenario) -> JsonInferred {
    JsonInferred {
        holder_role: i.holder.name(),
        values: i
            .values
            .iter()
            .map(|v| {
                (
                    v.key.clone(),
                    JsonInferredValue {
                        value: v.value.clone(),
                        source: v.source.clone(),
                    },
                )
            })
            .collect(),
        transactions_simulated: i.transactions_simulated,
        simulated_transaction_time: secs(i.simulated_transaction_time),
        simulated_stalled_share: i.simulated_stalled_share,
        reproduced: i.reproduced,
        capture_transaction_time: (c.client_messages > 0)
            .then(|| secs(c.duration() / Nanos::from(c.client_messages))),
        variants: i
            .variants
            .iter()
            .map(|(name, time, speedup, stalled)| JsonVariant {
                name: name.clone(),
                transaction_time: secs(*time),
                speedup: *speedup,
                stalled_share: *stalled,
            })
            .collect(),
        toml: i.toml.clone(),
    }
}

fn role_endpoint(c: &ConnectionDiagnosis, role: crate::diagnosis::Role) -> String {
    match role {
        crate::diagnosis::Role::Client => c.client.to_string(),
        crate::diagnosis::Role::Server => c.server.to_string(),
    }
}

fn stall(c: &ConnectionDiagnosis, e: &StallEvent, origin: Nanos) -> JsonStall {
    JsonStall {
        class: e.class.name(),
        start: secs(e.start - origin),
        duration: secs(e.duration()),
        sender: c.endpoint_of_side(e.sender).to_string(),
        holder: e.holder.map(|s| c.endpoint_of_side(s).to_string()),
        delayer: e.delayer.map(|s| c.endpoint_of_side(s).to_string()),
        held_bytes: e.held_bytes,
        ack_start: e.ack_time.map(|t| secs(t - origin)),
        ack_delay: e.ack_delay.map(secs),
        idle: e.idle.map(secs),
        pattern: e.pattern.map(|p| p.name()),
        evidence: e.evidence.clone(),
    }
}

/// How many times faster the connection would run without `saved` of its `duration`.
pub fn speedup(duration: Nanos, saved: Nanos) -> f64 {
    let remaining = duration - saved;
    if remaining <= 0 || duration <= 0 {
        return 1.0;
    }
    let ratio = duration as f64 / remaining as f64;
    (ratio * 10.0).round() / 10.0
}
