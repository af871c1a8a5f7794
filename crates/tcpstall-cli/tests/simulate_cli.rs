//! `tcpstall simulate` through the real binary: its outputs, and that `analyze` finds in
//! the simulated capture what the ground truth says.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn tcpstall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args)
        .output()
        .expect("run tcpstall")
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpstall-simulate-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn simulated_capture_is_diagnosed_as_the_truth_says() {
    let dir = temp("pcap");
    let pcap = dir.join("proxy.pcap");
    let truth = dir.join("proxy.json");
    let out = tcpstall(&[
        "simulate",
        "--pattern",
        "proxy-split",
        "--rtt",
        "20",
        "--capture-point",
        "tap",
        "--pcap",
        pcap.to_str().unwrap(),
        "--truth",
        truth.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    let truth_stalls = truth["stalls"].as_array().unwrap();
    assert_eq!(truth_stalls.len(), 19);
    let out = tcpstall(&["analyze", "--json", pcap.to_str().unwrap()]);
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &report["connections"][0];
    assert_eq!(c["stall_count"], 19);
    assert_eq!(c["holder"], c["client"]);
    assert_eq!(c["delayed_ack"]["timer"], "40ms");
    let capture = c["capture_position"].as_f64().unwrap();
    assert!((0.4..0.6).contains(&capture), "capture point at {capture}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn json_report_has_summary_transactions_and_truth() {
    let out = tcpstall(&[
        "simulate",
        "--json",
        "--client",
        "windows",
        "--server",
        "aix",
        "--pattern",
        "sftp",
    ]);
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["scenario"]["client"], "windows");
    assert_eq!(report["transactions"].as_array().unwrap().len(), 20);
    let p50 = report["summary"]["latency_p50"].as_f64().unwrap();
    assert!((0.15..0.21).contains(&p50), "{p50}");
    assert!(
        !report["truth"]["delayed_acks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn sweep_as_csv_and_timeline() {
    let out = tcpstall(&[
        "simulate",
        "--client",
        "macos-legacy",
        "--server",
        "macos-legacy",
        "--pattern",
        "bulk",
        "-n",
        "3",
        "--sweep",
        "block=99911..99914",
        "--csv",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 5, "{text}");
    assert!(rows[0].starts_with("block,"));
    // 99,911 bytes are 68 full segments and a tail (even: no stall), 99,912 exactly 69
    // (no tail: no stall), 99,913 and 99,914 are 69 and a tail (odd: stall).
    let stalled: Vec<&str> = rows[1..]
        .iter()
        .map(|r| r.split(',').nth(2).unwrap())
        .collect();
    assert_eq!(stalled, ["0", "0", "3", "3"], "{text}");

    let out = tcpstall(&["simulate", "--timeline", "-n", "3"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[nagle held"), "{text}");
    assert!(text.contains("[delayed ACK"), "{text}");
}

#[test]
fn scenario_file_and_bad_input() {
    let dir = temp("toml");
    let file = dir.join("seed004.toml");
    std::fs::write(
        &file,
        "[client]\nstack = \"linux\"\n[server]\nstack = \"linux\"\n[workload]\npattern = \"http-keepalive\"\ntransactions = 5\n[link]\nrtt_ms = 1\n",
    )
    .unwrap();
    let out = tcpstall(&["simulate", "--json", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["scenario"]["pattern"], "http-keepalive");
    assert_eq!(report["summary"]["stalled_transactions"], 4);

    std::fs::write(&file, "[client]\nstack = \"solaris\"\n").unwrap();
    for args in [
        vec!["simulate", file.to_str().unwrap()],
        vec!["simulate", "--client", "plan9"],
        vec!["simulate", "--pattern", "nope"],
        vec!["simulate", "--sweep", "block=5..1"],
        vec!["simulate", "--rtt=-1"],
        vec!["simulate", "--bandwidth", "fast"],
    ] {
        let out = tcpstall(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("tcpstall: error:"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A shipped look-alike scenario: the timeline names each gap's true class and the
/// window updates; the truth file lists every gap with its class and observability.
#[test]
fn lookalike_scenario_timeline_and_truth_of_every_gap() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/lookalike-periodic-nodelay.toml"
    );
    let out = tcpstall(&["simulate", scenario, "--timeline", "--check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("scenario:     periodic x30"), "{text}");
    assert!(text.contains("gap 50.0 ms: app-think-time"), "{text}");
    assert!(text.contains("[ACK on read]"), "{text}");
    assert!(
        text.contains("check:        analyzer on this capture:"),
        "{text}"
    );

    let dir = temp("lookalike");
    let truth = dir.join("truth.json");
    let pcap = dir.join("capture.pcap");
    let slow_reader = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/lookalike-slow-reader.toml"
    );
    let out = tcpstall(&[
        "simulate",
        slow_reader,
        "--truth",
        truth.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    let gaps = truth["gaps"].as_array().unwrap();
    assert!(!gaps.is_empty());
    assert!(gaps.iter().all(|g| g["observable"] == true));
    assert!(
        gaps.iter().any(|g| g["label"] == "receiver-window"),
        "{gaps:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The keys of the seeds' real settings and of send scripts refuse bad values on one line.
#[test]
fn bad_load_split_and_script_values_are_one_line_errors() {
    let dir = temp("bad-keys");
    let bad = [
        "[workload]\nconnections = 0\n",
        "[workload]\npattern = \"custom\"\nrequest = [3000]\nresponse = [5]\nsplit_over = 2048\nsplit_first = 4096\n",
        "[workload]\nrequest_sizes = [0]\n",
        "[workload]\nkinds = [\"del\"]\n",
        "[workload]\npattern = \"script\"\n",
        "[workload]\npattern = \"script\"\nclient_script = [[2000, 5], [1000, 5]]\n",
        "[workload]\nclient_script = [[1000, 5]]\n",
        "[server]\nstack = \"linux\"\ndelack_ticks = 2\n",
        "[server]\nstack = \"aix\"\ndelack_ticks = 3\n",
        "capture_clock_us = -1\n",
        "capture_clock_us = 2e6\n",
        "[workload]\nconnections = 2\n",
    ];
    for (i, text) in bad.iter().enumerate() {
        let file = dir.join(format!("bad{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let path = file.to_str().unwrap();
        // The last is valid, but its capture holds one connection of two.
        let args = if i + 1 == bad.len() {
            vec!["simulate", "--check", path]
        } else {
            vec!["simulate", path]
        };
        let out = tcpstall(&args);
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("tcpstall: error:"), "{text}: {err}");
        assert_eq!(err.lines().count(), 1, "{text}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
