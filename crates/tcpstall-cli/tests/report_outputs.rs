//! `analyze --html/--graphs` and `simulate --html` through the real binary: files
//! written, self-contained, standard input spooled, errors on one line.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::TempDir;

/// Runs `command` and checks that it succeeded, with its stderr as the message if not.
fn succeeds(command: &mut Command) -> std::process::Output {
    let out = command.output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tcpstall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tcpstall"));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    c
}

fn assert_self_contained(html: &str) {
    for needle in [
        "src=\"http",
        "href=\"http",
        "<link",
        "<img",
        "@import",
        "url(",
    ] {
        assert!(
            !html.contains(needle),
            "the page fetches something: {needle}"
        );
    }
    assert!(html.contains("Content-Security-Policy"));
}

#[test]
fn html_and_graphs_for_the_two_writes_capture() {
    let temp = TempDir::new("report-outputs", "outputs");
    let dir = &temp.0;
    let html = dir.join("r.html");
    let graphs = dir.join("graphs");
    let out = succeeds(
        tcpstall()
            .args(["analyze", "--html"])
            .arg(&html)
            .arg("--graphs")
            .arg(&graphs)
            .arg("captures/seed002-two-writes.pcap"),
    );
    // No progress bar when stderr is not a terminal: only a line per output written.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(
        stderr.lines().all(|l| l.starts_with("tcpstall: wrote ")),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&html).expect("html");
    assert_self_contained(&text);
    assert_eq!(text.matches(r#"class="stall-marker""#).count(), 9);
    // The zoom on one stall: the data held on the client's line, the ACK delayed on
    // the server's, with the timer's duration.
    assert_eq!(text.matches(r#"class="zoom-held""#).count(), 1);
    assert_eq!(text.matches(r#"class="zoom-ack-delay""#).count(), 1);
    assert!(text.contains("ACK delayed 43.7 ms by the server"));
    // One table of every connection, sortable and filterable.
    assert!(text.contains(r#"id="conn-table""#) && text.contains(r#"id="conn-filter""#));
    assert!(text.contains("nagle-delayed-ack"));
    assert!(text.contains("first packet (ms)"));
    assert!(text.contains("relative sequence number (bytes)"));
    for name in ["conn1-sequence", "conn1-zoom", "conn1-round-trips"] {
        let svg = std::fs::read_to_string(graphs.join(format!("{name}.svg"))).expect("svg");
        assert!(svg.starts_with("<svg"));
        let png = std::fs::read(graphs.join(format!("{name}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG", "{name}.png");
    }
}

#[test]
fn standard_input_is_spooled_for_the_graphs() {
    let temp = TempDir::new("report-outputs", "stdin");
    let dir = &temp.0;
    let html = dir.join("r.html");
    let capture = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../captures/seed002-two-writes.pcap"),
    )
    .expect("capture");
    let mut child = tcpstall()
        .args(["analyze", "--html"])
        .arg(&html)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&capture)
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).expect("html");
    assert_eq!(text.matches(r#"class="stall-marker""#).count(), 9);
}

#[test]
fn connections_without_gaps_get_a_table_and_no_graph() {
    let temp = TempDir::new("report-outputs", "quiet");
    let dir = &temp.0;
    let html = dir.join("r.html");
    let out = tcpstall()
        .args(["analyze", "--html"])
        .arg(&html)
        .arg("captures/seed002-one-write.pcap")
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = std::fs::read_to_string(&html).expect("html");
    assert!(text.contains(r#"id="conn-table""#));
    assert!(!text.contains(r##"href="#conn-"##), "no section to link to");
    assert_eq!(text.matches("<svg").count(), 0);
}

#[test]
fn an_unwritable_report_is_one_line_and_status_2() {
    let out = tcpstall()
        .args([
            "analyze",
            "--html",
            "/nonexistent-dir/r.html",
            "captures/seed002-two-writes.pcap",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tcpstall: error: --html /nonexistent-dir/r.html"),
        "{stderr}"
    );
}

#[test]
fn simulate_html_for_a_run_and_a_sweep() {
    let temp = TempDir::new("report-outputs", "simulate");
    let dir = &temp.0;
    let run = dir.join("run.html");
    succeeds(
        tcpstall()
            .args([
                "simulate",
                "--client",
                "linux",
                "--server",
                "linux",
                "--pattern",
                "two-writes",
                "--html",
            ])
            .arg(&run),
    );
    let text = std::fs::read_to_string(&run).expect("html");
    assert_self_contained(&text);
    assert!(text.contains("latency per transaction (log scale)"));
    assert!(text.contains("stalled (ground truth)"));

    let sweep = dir.join("sweep.html");
    succeeds(
        tcpstall()
            .args([
                "simulate",
                "--client",
                "macos-legacy",
                "--server",
                "macos-legacy",
                "--pattern",
                "bulk",
                "--sweep",
                "block=99910..99915",
                "--html",
            ])
            .arg(&sweep),
    );
    let text = std::fs::read_to_string(&sweep).expect("html");
    assert_eq!(text.matches(r#"class="sweep-point""#).count(), 6);
    assert!(text.contains("throughput (Mbit/s)"));
}

/// Seed 001's picture: the simulated SFTP backup over 60 s looks smooth as a whole, and
/// the sequence graph over one second shows its 0.2 s pauses, five bands of about 188 ms.
#[test]
fn seed001_backup_is_smooth_over_60_s_and_pauses_within_one_second() {
    let temp = TempDir::new("report-outputs", "seed001");
    let dir = &temp.0;
    let pcap = dir.join("sftp.pcap");
    let graphs = dir.join("graphs");
    succeeds(
        tcpstall()
            .args(["simulate", "scenarios/seed001-sftp-backup.toml", "--pcap"])
            .arg(&pcap),
    );
    let out = tcpstall()
        .args(["analyze", "--graphs"])
        .arg(&graphs)
        .arg(&pcap)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole = std::fs::read_to_string(graphs.join("conn1-sequence.svg")).expect("svg");
    assert!(whole.contains("time since the connection&#39;s first packet (s)"));
    let second = std::fs::read_to_string(graphs.join("conn1-one-second.svg")).expect("svg");
    assert!(second.contains("time since the connection&#39;s first packet (ms)"));
    let bands = second.matches(r#"class="stall-band""#).count();
    assert!(
        (5..=7).contains(&bands),
        "{bands} stall bands in one second"
    );
    assert!(second.contains("188.8 ms"), "no 0.2 s pause labelled");
}
