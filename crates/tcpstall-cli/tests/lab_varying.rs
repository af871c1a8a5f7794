//! `tcpstall lab --suite varying` through the real binary: seed 002's Java client and
//! echo server and the HTTP keep-alive server with its client, over a LAN-like and a
//! WAN-like path whose delay varies per packet, captured at the client, the middle and
//! the server. At every point the analyzer must report exactly the stalls the programs'
//! own timings in that very run show: one in each round trip the client timed as slow,
//! none in one it timed as fast, and name the delayer's stack Linux. A round trip in the
//! band between the two (a busy host delayed a program) makes the suite run the pair
//! again, a bounded number of times, and counts either way in the last run. Without root
//! or without a JDK the test says what it skipped and why.

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

/// A capture point's result: `  client: 107 packets; analyzer 19 stalls, programs 19
/// slow (1 neither); agree on 19 of 19`.
struct PointLine {
    point: String,
    stalls: u32,
    slow: u32,
    neither: u32,
    agree: u32,
    total: u32,
}

fn point_line(line: &str) -> Option<PointLine> {
    let (point, rest) = line.trim_start().split_once(": ")?;
    if !["client", "middle", "server"].contains(&point) {
        return None;
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    let number_before = |word: &str| -> Option<u32> {
        let i = words
            .iter()
            .position(|w| w.trim_end_matches([';', ',', ')']) == word)?;
        words
            .get(i.checked_sub(1)?)?
            .trim_start_matches('(')
            .parse()
            .ok()
    };
    let (agree, total) = rest.split_once("agree on ")?.1.split_once(" of ")?;
    Some(PointLine {
        point: point.to_string(),
        stalls: number_before("stalls")?,
        slow: number_before("slow")?,
        neither: number_before("neither").unwrap_or(0),
        agree: agree.trim().parse().ok()?,
        total: total.trim().parse().ok()?,
    })
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
    // One block per pair of programs and path, each with its three capture points.
    let pairs: Vec<&str> = text
        .split("\n\n")
        .filter(|block| block.lines().any(|l| point_line(l).is_some()))
        .collect();
    // Two programs, two paths.
    assert_eq!(pairs.len(), 4, "pairs reported:\n{text}");
    let mut failures = Vec::new();
    let mut judged = 0;
    for pair in &pairs {
        let what = pair.lines().next().unwrap_or("");
        if pair.contains("not the path asked for") {
            // The delay line was late in every run of this pair: not the path asked for,
            // nothing to judge the analyzer by.
            common::skipped(format_args!(
                "lab_varying: not judged, the delay line was late in every run: {what}"
            ));
            continue;
        }
        judged += 1;
        let points: Vec<PointLine> = pair.lines().filter_map(point_line).collect();
        assert_eq!(points.len(), 3, "capture points of {what}:\n{text}");
        for p in &points {
            // Both programs write-write-read: every round trip after the first waits for a
            // delayed ACK, so a run without slow round trips did not test anything.
            assert!(
                p.slow > 0,
                "{}: no slow round trip measured:\n{text}",
                p.point
            );
            assert_eq!(
                p.total + p.neither,
                20,
                "{}: round trips timed:\n{text}",
                p.point
            );
            if !(p.slow..=p.slow + p.neither).contains(&p.stalls) || p.agree != p.total {
                failures.push(format!(
                    "{what} {}: analyzer {} stalls, programs {} slow ({} neither), agree on {} of {}",
                    p.point, p.stalls, p.slow, p.neither, p.agree, p.total
                ));
            }
        }
    }
    // Both programs run on this Linux kernel: at every capture point, however the path's
    // delay varied, the delayer's timer reads as Linux's.
    let mut captures: Vec<_> = std::fs::read_dir(&dir.0)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "pcap"))
        .collect();
    captures.sort();
    assert_eq!(captures.len(), 12, "captures written: {captures:?}\n{text}");
    for capture in &captures {
        let report = common::analyze_json(capture);
        let timers: Vec<String> = report["connections"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["directions"].as_array().into_iter().flatten())
            .filter(|d| !d["delayed_ack"].is_null())
            .map(|d| d["delayed_ack"]["timer"].to_string())
            .collect();
        if timers.is_empty() || timers.iter().any(|t| t != "\"40ms\"") {
            failures.push(format!(
                "{}: the delayer's timer read as {timers:?}, not Linux's 40 ms",
                capture.display()
            ));
        }
    }
    if judged == 0 {
        common::skipped(format_args!(
            "lab_varying: no pair judged, the delay line was late in every run of each"
        ));
    }
    if !failures.is_empty() {
        // Kept for the detector's rules: each capture and the programs' timings.
        let keep = common::truth::failure_dir("lab_varying");
        for entry in std::fs::read_dir(&dir.0).into_iter().flatten().flatten() {
            let _ = std::fs::copy(entry.path(), keep.join(entry.file_name()));
        }
        let _ = std::fs::write(keep.join("suite.txt"), &text);
        panic!(
            "the analyzer and the programs' timings differ, or the delayer was not named Linux (captures and the suite's report kept in {}):\n{}\n\n{text}",
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
