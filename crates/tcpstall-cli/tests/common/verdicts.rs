//! The verdicts of the shipped capture, and what a re-encoding of it must report: the
//! helpers of the tests that carry the shipped exchange in another format, link type,
//! tunnel or set of files.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use super::pcap::*;
use super::{TempDir, analyze_json};

pub const STALLS: usize = 9;
pub const CLASS: &str = "nagle-delayed-ack";
/// Stall times are printed in seconds with microsecond precision.
pub const TOLERANCE: f64 = 1e-6 + 1e-9;

/// IPv4 header length and total length of the IPv4 packet in an Ethernet frame.
pub fn ipv4_lengths(frame: &[u8]) -> (usize, usize) {
    let ip = &frame[14..];
    assert_eq!(ip[0] >> 4, 4);
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    assert!(total <= ip.len(), "IPv4 total length beyond the frame");
    (ihl, total)
}

/// The same frame with its IPv4 header replaced by an IPv6 one (::1 to ::1), optionally with
/// an 8-byte Hop-by-Hop options header (one PadN option) in front of TCP.
pub fn to_ipv6(frame: &[u8], hop_by_hop: bool) -> Vec<u8> {
    let (ihl, total) = ipv4_lengths(frame);
    let ip = &frame[14..];
    assert_eq!(ip[9], 6, "IPv4 protocol is TCP");
    let tcp = &ip[ihl..total];
    let ext_len = if hop_by_hop { 8 } else { 0 };
    let loopback: [u8; 16] = std::array::from_fn(|i| u8::from(i == 15));
    let mut out = Vec::new();
    out.extend_from_slice(&frame[..12]);
    out.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    out.extend_from_slice(&[0x60, 0, 0, 0]); // version 6, traffic class 0, flow label 0
    out.extend_from_slice(&((total - ihl + ext_len) as u16).to_be_bytes());
    out.push(if hop_by_hop { 0 } else { 6 }); // next header
    out.push(64); // hop limit
    out.extend_from_slice(&loopback);
    out.extend_from_slice(&loopback);
    if hop_by_hop {
        // Next header TCP, length 0 (8 bytes), PadN with 4 bytes of padding.
        out.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
    }
    out.extend_from_slice(tcp);
    out
}

/// What the original capture reports: the client port and each stall's (start, duration).
pub struct Baseline {
    pub client_port: u16,
    pub stalls: Vec<(f64, f64)>,
    pub segments: u64,
}

pub fn baseline() -> &'static Baseline {
    static BASELINE: OnceLock<Baseline> = OnceLock::new();
    BASELINE.get_or_init(|| {
        let report = analyze_json(Path::new(ORIGINAL));
        let conn = &report["connections"][0];
        let client = conn["client"].as_str().expect("client endpoint");
        let port = client
            .strip_prefix("127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("original client is {client}"));
        let stalls: Vec<(f64, f64)> = conn["stalls"]
            .as_array()
            .expect("stalls array")
            .iter()
            .map(|s| {
                (
                    s["start"].as_f64().unwrap(),
                    s["duration"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(stalls.len(), STALLS, "original capture: stall count");
        Baseline {
            client_port: port,
            stalls,
            segments: report["input"]["tcp_segments"].as_u64().unwrap(),
        }
    })
}

#[derive(Clone, Copy, Debug)]
pub enum Family {
    V4,
    V6,
}

pub fn endpoint(family: Family, port: u16) -> String {
    match family {
        Family::V4 => format!("127.0.0.1:{port}"),
        Family::V6 => format!("[::1]:{port}"),
    }
}

/// The verdicts of `report` are those of the original capture.
pub fn assert_same_verdicts(report: &Value, what: &str, format: &str, family: Family) {
    let base = baseline();
    let client = endpoint(family, base.client_port);
    let server = endpoint(family, SERVER_PORT);
    assert_eq!(report["schema_version"], 3, "{what}: schema_version");
    assert_eq!(report["input"]["format"], format, "{what}: input.format");
    assert_eq!(
        report["input"]["tcp_segments"].as_u64(),
        Some(base.segments),
        "{what}: every packet decoded as TCP; input = {}",
        report["input"]
    );
    assert_eq!(
        report["input"]["skipped"],
        serde_json::json!({}),
        "{what}: skipped packets"
    );
    assert_eq!(
        report["input"]["warnings"],
        serde_json::json!([]),
        "{what}: warnings"
    );
    let conns = report["connections"].as_array().expect("connections array");
    assert_eq!(conns.len(), 1, "{what}: connection count");
    let conn = &conns[0];
    assert_eq!(conn["client"], client.as_str(), "{what}: client");
    assert_eq!(conn["server"], server.as_str(), "{what}: server");
    let stalls = conn["stalls"].as_array().expect("stalls array");
    assert_eq!(stalls.len(), STALLS, "{what}: stall count");
    for (i, (stall, &(start, duration))) in stalls.iter().zip(&base.stalls).enumerate() {
        assert_eq!(stall["class"], CLASS, "{what}: stall {i} class");
        assert_eq!(stall["holder"], client.as_str(), "{what}: stall {i} holder");
        assert_eq!(
            stall["delayer"],
            server.as_str(),
            "{what}: stall {i} delayer"
        );
        let got_start = stall["start"].as_f64().expect("start");
        let got_duration = stall["duration"].as_f64().expect("duration");
        assert!(
            (got_start - start).abs() <= TOLERANCE,
            "{what}: stall {i} start {got_start}, original {start}"
        );
        assert!(
            (got_duration - duration).abs() <= TOLERANCE,
            "{what}: stall {i} duration {got_duration}, original {duration}"
        );
    }
}

/// Writes `bytes` as a variant and checks its verdicts.
pub fn check_variant(test: &str, bytes: &[u8], format: &str, family: Family) {
    let dir = TempDir::new("capture-formats", test);
    let path = dir.write(&format!("{test}.{format}"), bytes);
    let report = analyze_json(&path);
    assert_same_verdicts(&report, test, format, family);
}
