//! `tcpstall lab` through the real binary. Which exchanges stalled is judged by what the
//! same run's captures show (an exchange waited when a pure ACK on its chain was held for
//! a delayed-ACK timer, `tcpstall_lab::held`), never by how long it took: a busy host
//! makes a program late without any stall. A run whose captures do not show a chain is
//! recorded again ([`common::truth::record_until_clear`]).

mod common;

use std::process::{Command, Output};

use common::truth::{Failed, record_until_clear};

fn tcpstall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args)
        .output()
        .expect("run tcpstall")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A row of a suite's table: the exchanges that waited for a delayed ACK by the captures
/// at both ends (`19/20`, `+1?` when a chain was not shown) and the analyzer's verdict
/// on the same capture (`exact`, or `+MORE -FEWER`).
struct TableRow {
    waited: usize,
    exchanges: usize,
    unknown: usize,
    analyze: String,
}

fn table_row(table: &str, name: &str) -> Result<TableRow, String> {
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with(name))
        .ok_or(format!("no row {name}"))?;
    let columns: Vec<&str> = line.trim_start()[name.len()..].split_whitespace().collect();
    let (waited, analyze) = match columns.as_slice() {
        [_, _, _, _, _, waited, analyze, ..] => (*waited, *analyze),
        _ => return Err(format!("row {name}: {line}")),
    };
    let (counts, unknown) = match waited.split_once('+') {
        Some((counts, unknown)) => (counts, unknown.trim_end_matches('?')),
        None => (waited, "0"),
    };
    let (held, of) = counts
        .split_once('/')
        .ok_or(format!("row {name}: waited {waited}"))?;
    let number =
        |s: &str| -> Result<usize, String> { s.parse().map_err(|_| format!("row {name}: {line}")) };
    Ok(TableRow {
        waited: number(held)?,
        exchanges: number(of)?,
        unknown: number(unknown)?,
        analyze: analyze.to_string(),
    })
}

/// The rows `names` of a suite's table, each over `exchanges` exchanges, with the
/// analyzer exact in every one: it found a stall in each exchange that waited by the
/// captures of the same run, and in no other. A run whose captures do not show some
/// exchange's chain says nothing of it and is recorded again (the last one is judged).
fn exact_rows(
    text: &str,
    names: &[&'static str],
    exchanges: usize,
    last: bool,
) -> Result<Vec<(&'static str, TableRow)>, Failed> {
    let mut rows = Vec::new();
    for &name in names {
        rows.push((name, table_row(text, name)?));
    }
    let unknown: Vec<&str> = rows
        .iter()
        .filter(|(_, r)| r.unknown > 0)
        .map(|(name, _)| *name)
        .collect();
    if !unknown.is_empty() && !last {
        return Err(Failed::Unclear(format!(
            "chains not shown in {unknown:?}\n{text}"
        )));
    }
    for (name, row) in &rows {
        if row.exchanges != exchanges {
            return Err(
                format!("{name}: {} exchanges of {exchanges}\n{text}", row.exchanges).into(),
            );
        }
        if row.analyze != "exact" {
            return Err(format!("{name}: the analyzer found {}\n{text}", row.analyze).into());
        }
    }
    Ok(rows)
}

/// How many exchanges of row `name` waited.
fn waited_in(rows: &[(&str, TableRow)], name: &str) -> usize {
    rows.iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, r)| r.waited)
}

#[test]
#[ignore = "needs root: the captures at both ends of the lab's line (CAP_NET_RAW, namespaces)"]
fn seed002_table_counts_the_exchanges_that_waited_and_analyze_finds_exactly_those() {
    let n = 20;
    record_until_clear("seed 002 table", |last| {
        let out = tcpstall(&["lab", "--suite", "seed002", "-n", &n.to_string()]);
        let text = stdout(&out);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        let fixes = [
            "one write",
            "writev (one call)",
            "two writes, TCP_NODELAY client",
            "two writes, TCP_QUICKACK server",
        ];
        let mut names = vec!["two writes, then read", "two writes, pipelining depth 2"];
        names.extend(fixes);
        let rows = exact_rows(&text, &names, n, last)?;
        // Every exchange but the first (the receiver ACKs at once in quick-ACK mode at a
        // connection's start) waits for the timer; each fix removes every wait.
        if waited_in(&rows, "two writes, then read") != n - 1 {
            return Err(format!("two writes: expected {} waited\n{text}", n - 1).into());
        }
        for fix in fixes {
            if waited_in(&rows, fix) != 0 {
                return Err(format!("{fix}: exchanges waited for a delayed ACK\n{text}").into());
            }
        }
        Ok(())
    });
}

/// What [`run_truth`] reads: waited, exchanges, chains not shown, agreed, judged.
type RunTruth = (usize, usize, usize, usize, usize);

/// A captured single run's output and its truth ([`run_truth`]); a run whose captures
/// do not show every exchange's chain is recorded again unless it is the last.
fn captured_truth(out: &std::process::Output, last: bool) -> Result<(String, RunTruth), Failed> {
    let text = stdout(out);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    let truth = run_truth(&text)?;
    let unknown = truth.2;
    if unknown > 0 && !last {
        return Err(Failed::Unclear(format!(
            "{unknown} chains not shown\n{text}"
        )));
    }
    Ok((text, truth))
}

/// A single run's lines on its captures: `waited: 5 of 6 transactions waited for a delayed
/// ACK by the captures (0 chains not shown)` and `analyzer: ... agree with the captures on
/// 6 of 6`, as (waited, transactions, not shown, agreed, judged).
fn run_truth(text: &str) -> Result<RunTruth, String> {
    let words = |prefix: &str| -> Result<Vec<&str>, String> {
        Ok(text
            .lines()
            .find(|l| l.starts_with(prefix))
            .ok_or(format!("no {prefix} line\n{text}"))?
            .split_whitespace()
            .collect())
    };
    let number = |w: &str| -> Result<usize, String> {
        w.trim_start_matches('(')
            .parse()
            .map_err(|_| format!("not a count: {w}\n{text}"))
    };
    let waited = words("waited:")?;
    let analyzer = words("analyzer:")?;
    let agree = analyzer
        .iter()
        .position(|w| *w == "on")
        .ok_or(format!("no agreement\n{text}"))?;
    match (waited.as_slice(), analyzer.get(agree + 1..agree + 4)) {
        ([_, w, "of", n, _, _, _, _, _, _, _, _, _, unknown, ..], Some([a, "of", j])) => Ok((
            number(w)?,
            number(n)?,
            number(unknown)?,
            number(a)?,
            number(j)?,
        )),
        _ => Err(format!("unreadable waited or analyzer line\n{text}")),
    }
}

/// A single run on the delay line: the least and the median time its packets took across
/// the line each way, as the captures at both ends saw them (`path:` line), ms.
fn crossings(text: &str) -> Result<[f64; 4], String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("path:"))
        .ok_or(format!("no path line\n{text}"))?;
    let figures: Vec<f64> = line
        .split_whitespace()
        .zip(line.split_whitespace().skip(1))
        .filter(|(label, _)| matches!(*label, "least" | "p50"))
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    figures
        .try_into()
        .map_err(|_| format!("unreadable path line: {line}"))
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    for args in [
        &["lab", "--pattern", "no-such-pattern"][..],
        &["lab", "--rtt=-5"],
        &["lab", "--transactions", "0"],
        &["lab", "--time-limit", "nan"],
        &[
            "lab",
            "--request",
            "0",
            "--pattern",
            "custom",
            "--response",
            "1",
        ],
    ] {
        let out = tcpstall(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("tcpstall: error: "), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
#[ignore = "needs root: --capture (CAP_NET_RAW, namespaces)"]
fn capture_is_diagnosed_and_agrees_with_the_measurement() {
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("two-writes.pcap");
    record_until_clear("capture", |last| {
        // An existing capture is never replaced: each run writes a new file.
        let _ = std::fs::remove_file(&pcap);
        let out = tcpstall(&[
            "lab",
            "--pattern",
            "two-writes",
            "-n",
            "8",
            "--capture",
            pcap.to_str().unwrap_or_default(),
        ]);
        let (text, (waited, n, unknown, agreed, judged)) = captured_truth(&out, last)?;
        // All but the first (quick-ACK mode at the connection's start) waited for the
        // timer by the captures, and the analyzer found exactly those.
        if (waited, n) != (7, 8) || agreed != judged || judged + unknown != n {
            return Err(format!(
                "waited {waited} of {n}, analyzer agrees on {agreed} of {judged}\n{text}"
            )
            .into());
        }
        if !text.contains("Nagle's algorithm waited") {
            return Err(format!("no verdict\n{text}").into());
        }
        let again = tcpstall(&["analyze", pcap.to_str().unwrap_or_default()]);
        if !stdout(&again).contains("nagle") && !stdout(&again).contains("Nagle") {
            return Err(format!("analyze of the written pcap: {}", stdout(&again)).into());
        }
        // One prediction of each fix's gain: the lab's report and analyze on the same
        // capture give the same figures.
        let gains = |report: &str| -> Vec<String> {
            report
                .lines()
                .filter(|l| l.contains("faster"))
                .map(|l| l.trim().to_string())
                .collect()
        };
        let (lab_gains, analyze_gains) = (gains(&text), gains(&stdout(&again)));
        assert!(
            !lab_gains.is_empty(),
            "no fix gains in the lab's report:\n{text}"
        );
        assert_eq!(
            lab_gains, analyze_gains,
            "the lab and analyze disagree on the fixes"
        );
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each way's crossings on a 20 ms line (10 ms each way) as the captures at both ends
/// saw them: none shorter than the delay asked for (a line never delivers early), and the
/// median within [`LINE_LATE_MS`] of it, else the line itself was late (the host stopped
/// it) and the run is recorded again.
fn check_line(text: &str, last: bool) -> Result<(), Failed> {
    let [least_out, p50_out, least_in, p50_in] = crossings(text)?;
    let one_way = 10.0;
    if least_out < one_way || least_in < one_way {
        return Err(format!("a packet crossed in under {one_way} ms\n{text}").into());
    }
    if p50_out.max(p50_in) > one_way + LINE_LATE_MS {
        let why = format!("the line was late: crossings p50 {p50_out} / {p50_in} ms\n{text}");
        return Err(if last {
            Failed::Wrong(why)
        } else {
            Failed::Unclear(why)
        });
    }
    Ok(())
}

/// How late the delay line may send the median packet: its largest lateness in a run kept
/// by the varying suite (`tcpstall_lab::suites::LATE_LIMIT`).
const LINE_LATE_MS: f64 = 1.0;

#[test]
#[ignore = "needs root: the delay line and its captures (namespaces, veth, TUN, CAP_NET_RAW)"]
fn delay_line_reproduces_seed003_against_the_simulator() {
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-line-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("line.pcap");
    record_until_clear("seed 003 at 20 ms", |last| {
        let _ = std::fs::remove_file(&pcap);
        let out = tcpstall(&[
            "lab",
            "--pattern",
            "proxy-split",
            "--rtt",
            "20",
            "-n",
            "6",
            "--compare-sim",
            "--capture",
            pcap.to_str().unwrap_or_default(),
        ]);
        let (text, (waited, n, unknown, agreed, judged)) = captured_truth(&out, last)?;
        // Each split request but the first waits for the server's delayed ACK, and the
        // analyzer finds exactly those.
        if (waited, n) != (5, 6) || agreed != judged || judged + unknown != n {
            return Err(format!("proxy-split: waited {waited} of {n}, analyzer agrees on {agreed} of {judged}\n{text}").into());
        }
        if !text.contains("agreement:") {
            return Err(format!("no comparison with the simulator\n{text}").into());
        }
        check_line(&text, last)
    });
    record_until_clear("delay line round trip", |last| {
        let _ = std::fs::remove_file(&pcap);
        let out = tcpstall(&[
            "lab",
            "--pattern",
            "one-write",
            "--rtt",
            "20",
            "-n",
            "6",
            "--nodelay",
            "both",
            "--capture",
            pcap.to_str().unwrap_or_default(),
        ]);
        let (text, (waited, n, _, agreed, judged)) = captured_truth(&out, last)?;
        if waited != 0 || n != 6 || agreed != judged {
            return Err(format!(
                "one write: waited {waited} of {n}, analyzer agrees on {agreed} of {judged}\n{text}"
            )
            .into());
        }
        check_line(&text, last)
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn html_page_holds_the_table_and_the_latency_distributions() {
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("lab.html");
    let out = tcpstall(&[
        "lab",
        "--pattern",
        "two-writes",
        "-n",
        "4",
        "--compare-sim",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<table"), "{html}");
    assert!(html.contains("<svg"), "{html}");
    assert!(html.contains("simulator, linux profile"), "{html}");
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "the page fetches nothing"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn one_way_patterns_run_with_a_paced_reader() {
    // A TCP_NODELAY sender on its own 10 ms clock, and a stream into a reader that takes
    // 512 bytes every 5 ms: each message is measured to the server's read of its last byte.
    let periodic = tcpstall(&[
        "lab",
        "--pattern",
        "periodic",
        "-n",
        "6",
        "--nodelay",
        "client",
    ]);
    let text = stdout(&periodic);
    assert!(
        periodic.status.success(),
        "{}",
        String::from_utf8_lossy(&periodic.stderr)
    );
    assert!(text.contains("periodic x6"), "{text}");
    assert!(text.contains("per transaction"), "{text}");
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("stream.toml");
    std::fs::write(
        &scenario,
        "[server]\nstack = \"linux\"\nrcvbuf = 4096\nread_bytes = 512\nread_interval_ms = 5\n\n\
         [workload]\npattern = \"stream\"\nrequest = [2048]\ntransactions = 4\n",
    )
    .unwrap();
    let stream = tcpstall(&["lab", scenario.to_str().unwrap()]);
    let text = stdout(&stream);
    assert!(
        stream.status.success(),
        "{}",
        String::from_utf8_lossy(&stream.stderr)
    );
    // 8 KiB read 512 bytes at a time, at most one read per 5 ms: at least 75 ms.
    let last: f64 = text
        .lines()
        .find(|l| l.starts_with("per transaction"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.trim_end_matches('*').parse().ok())
        .unwrap_or_else(|| panic!("no per-transaction line: {text}"));
    assert!(last >= 75.0, "the last block read after {last} ms\n{text}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[ignore = "needs root: the look-alike suite's captures (CAP_NET_RAW, namespaces)"]
fn lookalikes_on_this_kernel_are_not_called_stalls() {
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-lookalikes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("la.pcap");
    record_until_clear("look-alike suite", |last| {
        let out = tcpstall(&[
            "lab",
            "--suite",
            "lookalikes",
            "-n",
            "12",
            "--capture",
            pcap.to_str().unwrap_or_default(),
        ]);
        let text = stdout(&out);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        // In each scenario the analyzer finds exactly the exchanges that waited for a
        // delayed ACK by the same captures; the first three never wait for one (a closed
        // window, persist probes, a sender on its own clock).
        let look_alikes = [
            ("slow reader, 8 KB buffer", 12, "receiver-window"),
            ("reader pausing 400 ms (persist)", 6, "receiver-window"),
            ("TCP_NODELAY sender every 50 ms", 12, "app-think-time"),
        ];
        for (name, exchanges, class) in look_alikes {
            // The look-alike is what the run must produce: a run whose captures show an
            // exchange held by a timer (a busy host can hold an ACK that long) did not
            // produce it, and says nothing of the analyzer.
            let waited = table_row(&text, name)?.waited;
            if waited != 0 && !last {
                return Err(Failed::Unclear(format!(
                    "{name}: {waited} exchanges waited for a delayed ACK by the captures"
                )));
            }
            let rows = exact_rows(&text, &[name], exchanges, last)?;
            if waited_in(&rows, name) != 0 {
                return Err(format!("{name}: waited for a delayed ACK\n{text}").into());
            }
            let line = text
                .lines()
                .rfind(|l| l.trim_start().starts_with(name))
                .ok_or(format!("no gaps line for {name}\n{text}"))?;
            if !line.contains(class) || !line.contains("; 0 stalls") {
                return Err(format!("{name}: {line}\n{text}").into());
            }
        }
        exact_rows(&text, &["pipelining, 2 responses per read"], 12, last)?;
        if !text.contains(", FP 0,") {
            return Err(format!("a stall in an exchange that did not wait\n{text}").into());
        }
        if !dir.join("la-4.pcap").exists() {
            return Err(format!("the fourth scenario's capture was not written\n{text}").into());
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seeds 003 and 004 under load on this kernel: 8 connections at once, each captured and
/// walked on its own packets. Requests split by the proxy, and responses in two writes,
/// wait for the delayed-ACK timer in every exchange but each connection's first (quick-ACK
/// mode at a connection's start); the same requests direct, 1 KB requests (not split), a
/// GET and headers only never do; the analyzer finds exactly those on every connection.
#[test]
#[ignore = "needs root: the load suite's captures (CAP_NET_RAW, namespaces)"]
fn load_suite_stalls_split_writes_on_every_connection() {
    let (connections, n) = (8, 6);
    record_until_clear("load suite", |last| {
        let out = tcpstall(&["lab", "--suite", "load", "-n", &n.to_string()]);
        let text = stdout(&out);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        let split = [
            "seed 003 SET 4096 via proxy",
            "seed 004 ab -k, headers + body",
        ];
        let whole = [
            "seed 003 SET 4096 direct",
            "seed 003 SET 1024 via proxy",
            "seed 003 SET 1024 direct",
            "seed 003 GET 4096 via proxy",
            "seed 004 ab -k, headers only",
        ];
        let mut names = split.to_vec();
        names.extend(whole);
        let rows = exact_rows(&text, &names, connections * n, last)?;
        for name in split {
            let waited = waited_in(&rows, name);
            if waited != connections * (n - 1) {
                return Err(format!(
                    "{name}: {waited} of {} waited, expected {}\n{text}",
                    connections * n,
                    connections * (n - 1)
                )
                .into());
            }
        }
        for name in whole {
            if waited_in(&rows, name) != 0 {
                return Err(format!("{name}: exchanges waited for a delayed ACK\n{text}").into());
            }
        }
        Ok(())
    });
}
