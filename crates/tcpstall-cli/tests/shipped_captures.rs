//! The verdicts on the captures shipped in `captures/`, recorded from real programs on a
//! Linux kernel over loopback (`scripts/record-captures.sh`).

use std::path::PathBuf;

use serde_json::Value;

mod common;
use common::{TempDir, analyze_json, run, shipped, text};

fn only_connection(report: &Value) -> &Value {
    assert_eq!(report["schema_version"], 3);
    let connections = report["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 1, "{report:#}");
    &connections[0]
}

fn stalls_of_class<'a>(connection: &'a Value, class: &str) -> Vec<&'a Value> {
    connection["stalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["class"] == class)
        .collect()
}

#[test]
fn seed002_two_writes_then_read_stalls_on_every_round_trip_after_the_first() {
    let report = analyze_json(&shipped("seed002-two-writes.pcap"));
    let c = only_connection(&report);
    assert_eq!(c["server"], "127.0.0.1:8000");
    assert!(c["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    let stalls = c["stalls"].as_array().unwrap();
    // Ten round trips: the first is fast (quick-ack mode), the nine after it stall.
    assert_eq!(stalls.len(), 9, "{c:#}");
    for s in stalls {
        assert_eq!(s["class"], "nagle-delayed-ack");
        assert_eq!(s["holder"], c["client"]);
        assert_eq!(s["delayer"], c["server"]);
        let delay = s["ack_delay"].as_f64().unwrap();
        assert!(
            (0.035..0.050).contains(&delay),
            "ACK delay {delay} s is not near 40 ms"
        );
        let duration = s["duration"].as_f64().unwrap();
        assert!((0.035..0.050).contains(&duration), "stall of {duration} s");
        assert_eq!(s["pattern"], "write-write-read");
        assert_eq!(s["evidence"]["tsecr_echoes_ack"], true);
    }
    assert_eq!(c["verdict"], "nagle-delayed-ack-stalls");
    assert_eq!(c["delayed_ack"]["timer"], "40ms");
    assert_eq!(c["delayed_ack"]["stacks"][0], "Linux");
    assert_eq!(c["pattern"]["name"], "write-write-read");
    assert_eq!(c["fixes"][0]["role"], "client");
    // A Linux receiver can also be told per route, with no code change.
    let route = c["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["action"].as_str().unwrap_or("").contains("quickack 1"))
        .unwrap_or_else(|| panic!("no route fix: {c:#}"));
    assert_eq!(route["role"], "server");
    // Loopback goes through the local routing table, looked up before main: the fix
    // changes the local route (tests/route_fix.rs runs it in a namespace).
    assert!(route["action"].as_str().unwrap().contains(
        "ip route replace $(ip route show table local 127.0.0.1) table local quickack 1"
    ));
    assert!(c["time_lost_share"].as_f64().unwrap() > 0.9);
    assert_eq!(report["summary"]["stalls"], 9);
}

#[test]
fn seed002_fixed_variants_do_not_stall() {
    for name in ["seed002-one-write.pcap", "seed002-nodelay.pcap"] {
        let report = analyze_json(&shipped(name));
        let c = only_connection(&report);
        assert_eq!(c["stalls"].as_array().unwrap().len(), 0, "{name}: {c:#}");
        assert_eq!(c["verdict"], "no-stall", "{name}");
    }
}

#[test]
fn server_sleeping_before_a_one_write_reply_is_app_think_time_not_nagle() {
    let report = analyze_json(&shipped("server-sleep-40ms.pcap"));
    let c = only_connection(&report);
    assert!(stalls_of_class(c, "nagle-delayed-ack").is_empty(), "{c:#}");
    assert_eq!(c["stall_count"], 0);
    let think = stalls_of_class(c, "app-think-time");
    assert_eq!(think.len(), 10, "{c:#}");
    for s in think {
        assert_eq!(s["sender"], c["server"]);
        let duration = s["duration"].as_f64().unwrap();
        assert!((0.038..0.050).contains(&duration), "{duration}");
    }
}

#[test]
fn bulk_transfer_of_100_megabytes_does_not_stall() {
    let report = analyze_json(&shipped("bulk-100MB.pcap"));
    let c = only_connection(&report);
    assert_eq!(c["bytes_client_to_server"], 100_000_000u64);
    assert_eq!(c["stall_count"], 0);
    assert_eq!(c["stalls"].as_array().unwrap().len(), 0, "{c:#}");
}

#[test]
fn fail_on_stall_sets_the_exit_status() {
    let stalled = shipped("seed002-two-writes.pcap");
    let clean = shipped("seed002-one-write.pcap");
    let out = run(&["analyze", "--fail-on-stall", stalled.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let out = run(&["analyze", "--fail-on-stall", clean.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let out = run(&["analyze", stalled.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn text_report_names_the_stall_its_actors_and_the_fix() {
    let path = shipped("seed002-two-writes.pcap");
    let out = run(&["analyze", "--stalls", path.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("stalls: Nagle's algorithm waited for delayed ACKs"),
        "{text}"
    );
    assert!(text.contains("held by:    client"), "{text}");
    assert!(text.contains("delayed by: server 127.0.0.1:8000"), "{text}");
    assert!(text.contains("Linux (TCP_DELACK_MIN 40 ms)"), "{text}");
    assert!(text.contains("1. client"), "{text}");
    assert!(text.contains("write each request in one call"), "{text}");
    assert_eq!(text.matches(" nagle-delayed-ack ").count(), 9, "{text}");
}

#[test]
fn host_and_port_filters_select_connections() {
    let path = shipped("seed002-two-writes.pcap");
    let path = path.to_str().unwrap();
    let count = |args: &[&str]| -> usize {
        let mut all = vec!["analyze", "--json"];
        all.extend_from_slice(args);
        all.push(path);
        let out = run(&all);
        assert!(out.status.success());
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["connections"].as_array().unwrap().len()
    };
    assert_eq!(count(&["--port", "8000"]), 1);
    assert_eq!(count(&["--port", "9999"]), 0);
    assert_eq!(count(&["--host", "127.0.0.1"]), 1);
    assert_eq!(count(&["--host", "10.1.2.3"]), 0);
    assert_eq!(count(&["--host", "127.0.0.1", "--port", "9999"]), 0);
}

#[test]
fn min_gap_above_the_stalls_hides_them_and_bad_values_are_refused() {
    let path = shipped("seed002-two-writes.pcap");
    let out = run(&[
        "analyze",
        "--json",
        "--min-gap",
        "100",
        path.to_str().unwrap(),
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["summary"]["stalls"], 0);
    let out = run(&["analyze", "--min-gap=0", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--min-gap"), "{err}");
}

#[test]
fn missing_file_is_a_one_line_error() {
    let out = run(&["analyze", "/nonexistent/capture.pcap"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("tcpstall: error: /nonexistent/capture.pcap:"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

/// The seed 002 exchange `copies` times over, each copy on its own client port and
/// later than the one before: as many stalled connections, written into `dir`.
fn seed002_copies(dir: &TempDir, copies: u16) -> PathBuf {
    use std::fs::File;
    use tcpstall_core::capture::{CaptureReader, PcapWriter, decode_packet};

    let mut segments = Vec::new();
    CaptureReader::new(File::open(shipped("seed002-two-writes.pcap")).unwrap())
        .unwrap()
        .for_each_packet(|packet| segments.push(decode_packet(packet).unwrap()))
        .unwrap();
    let span = segments.last().unwrap().time - segments[0].time + 1_000_000_000;
    let mut writer = PcapWriter::new(Vec::new(), u32::MAX).unwrap();
    for copy in 0..copies {
        for segment in &segments {
            let mut segment = *segment;
            segment.time += i64::from(copy) * span;
            // The server keeps port 8000; each copy's client gets a port of its own.
            for end in [&mut segment.src, &mut segment.dst] {
                if end.port() != 8000 {
                    end.set_port(20_000 + copy);
                }
            }
            writer.write_segment(&segment).unwrap();
        }
    }
    dir.write(
        &format!("seed002-copies-{copies}.pcap"),
        &writer.into_inner(),
    )
}

#[test]
fn top_limits_the_connections_shown_in_detail_and_totals_cover_all() {
    let dir = TempDir::new("shipped-captures", "top");
    let path = seed002_copies(&dir, 30);
    let file = path.to_str().unwrap();
    let shown = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report = text(&out.stdout);
        (report.matches("  verdict:").count(), report)
    };
    let (count, text) = shown(&["analyze", file]);
    assert_eq!(count, 20, "{text}");
    assert!(
        text.contains("30 connections, 30 with stalls: 270 stalls"),
        "{text}"
    );
    assert!(text.contains("10 more connections with gaps"), "{text}");
    assert_eq!(shown(&["analyze", "--top", "5", file]).0, 5);
    // With --all, connections without gaps may be among those not shown.
    let (count, text) = shown(&["analyze", "--all", "--top", "5", file]);
    assert_eq!(count, 5, "{text}");
    assert!(text.contains("25 more connections, less severe"), "{text}");
    let (count, text) = shown(&["analyze", "--top", "0", file]);
    assert_eq!(count, 30, "{text}");
    assert!(!text.contains("more connection"), "{text}");

    // Connections are split between two tracking threads by a hash of their endpoints;
    // every one of them is diagnosed whole, whichever thread had it.
    let out = run(&["analyze", "--json", file]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let connections = report["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 30);
    for connection in connections {
        assert_eq!(
            stalls_of_class(connection, "nagle-delayed-ack").len(),
            9,
            "{connection:#}"
        );
    }
}
