//! `tcpstall lab --suite varying` through the real binary: seed 002's Java client and
//! echo server and the HTTP keep-alive server with its client, over a LAN-like and a
//! WAN-like path whose delay varies per packet, captured at the client, the middle and
//! the server. At every point the analyzer must report exactly the stalls the programs'
//! own timings show: as many, and each in a round trip the client timed as slow.
//! Without root or without a JDK the test says what it skipped and why.

mod common;

use std::process::Command;

fn tcpstall(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args)
        .output()
        .expect("run tcpstall")
}

fn is_root() -> bool {
    let caps = common::effective_capabilities();
    caps & (1 << 12) != 0
        && caps & (1 << 13) != 0
        && caps & (1 << 21) != 0
        && std::path::Path::new("/dev/net/tun").exists()
        && Command::new("ip").arg("-V").output().is_ok()
}

fn has_jdk() -> bool {
    ["java", "javac"].iter().all(|program| {
        Command::new(program)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// One capture point's line: `  client: 107 packets; analyzer 19 stalls, programs 19
/// slow; agree on 20 of 20`, as (point, stalls, slow, agreeing, total).
fn point_line(line: &str) -> Option<(String, u32, u32, u32, u32)> {
    let (point, rest) = line.trim_start().split_once(": ")?;
    if !["client", "middle", "server"].contains(&point) {
        return None;
    }
    let number_before = |word: &str| -> Option<u32> {
        let words: Vec<&str> = rest.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| w.trim_end_matches([';', ',']) == word)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    let stalls = number_before("stalls")?;
    let slow = number_before("slow")?;
    let (agree, total) = rest.split_once("agree on ")?.1.split_once(" of ")?;
    Some((
        point.to_string(),
        stalls,
        slow,
        agree.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

#[test]
fn varying_delays_every_measured_stall_at_every_capture_point() {
    if !is_root() {
        common::skipped(format_args!(
            "skipped: the varying-delay suite needs root (namespaces, veth, TUN, AF_PACKET)"
        ));
        return;
    }
    if !has_jdk() {
        common::skipped(format_args!(
            "skipped: the varying-delay suite runs Java programs: no java/javac (apt-get install default-jdk-headless)"
        ));
        return;
    }
    let dir = common::TempDir::new("lab_varying", "three_points");
    let pcap = dir.0.join("v.pcap");
    let out = tcpstall(&[
        "lab",
        "--suite",
        "varying",
        "--capture",
        pcap.to_str().expect("a UTF-8 temp path"),
    ]);
    let text = common::text(&out.stdout);
    assert!(
        out.status.success(),
        "the suite failed: {}\n{text}",
        common::text(&out.stderr)
    );
    let points: Vec<_> = text.lines().filter_map(point_line).collect();
    // Two programs, two paths, three points.
    assert_eq!(points.len(), 12, "capture points reported:\n{text}");
    assert!(
        !text.contains("not the path asked for"),
        "the delay line was late in every run of a pair, so the path varied more than asked; a host too loaded to judge:\n{text}"
    );
    let mut failures = Vec::new();
    for (point, stalls, slow, agree, total) in &points {
        // Both programs write-write-read: every round trip after the first waits for a
        // delayed ACK, so a run without slow round trips did not test anything.
        assert!(*slow > 0, "{point}: no slow round trip measured:\n{text}");
        assert_eq!(*total, 20, "{point}: round trips timed:\n{text}");
        if stalls != slow || agree != total {
            failures.push(format!(
                "{point}: analyzer {stalls} stalls, programs {slow} slow, agree on {agree} of {total}"
            ));
        }
    }
    if !failures.is_empty() {
        // Kept for the detector's rules: each capture and the programs' timings.
        let keep =
            std::env::temp_dir().join(format!("tcpstall-lab-varying-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&keep);
        for entry in std::fs::read_dir(&dir.0).into_iter().flatten().flatten() {
            let _ = std::fs::copy(entry.path(), keep.join(entry.file_name()));
        }
        let _ = std::fs::write(keep.join("suite.txt"), &text);
        panic!(
            "the analyzer and the programs' timings differ (captures kept in {}):\n{}\n\n{text}",
            keep.display(),
            failures.join("\n")
        );
    }
}

#[test]
fn bad_variation_is_one_line_and_exit_2() {
    for (args, needle) in [
        (
            &["lab", "--rtt", "20", "--delay-variation=-5"][..],
            "0 to 100",
        ),
        (
            &["lab", "--rtt", "20", "--delay-variation", "150"],
            "0 to 100",
        ),
        (
            &["lab", "--rtt", "20", "--delay-variation", "nan"],
            "0 to 100",
        ),
        (&["lab", "--delay-variation", "20"], "--rtt"),
        (
            &["lab", "--rtt", "20", "--delay-seed", "7"],
            "--delay-variation",
        ),
    ] {
        let out = tcpstall(args);
        common::check_refused(&out, &format!("{args:?}"), &[needle]);
    }
}
