//! `tcpstall watch` through the real binary, on this kernel. Watching needs root (or
//! CAP_BPF and CAP_PERFMON), BTF and Linux 6.3 or later: without them these tests print
//! what they skip and pass. The workload is the echo_pair example (the seed 002 client
//! and its echo server), and its own round-trip times in that very run, judged fast or
//! slow with a band between (common::truth), are the reference.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::truth::{Failed, LOOPBACK, Truth, keep, record_until_clear};
use common::watch::{can_watch, delayed_and_lagged_answers, echo_pair, free_port};
use tcpstall_lab::capture::Capture;

fn tcpstall(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args)
        .output()
        .expect("run tcpstall")
}

/// The watch report of `echo_pair MODE ROUNDS PORT` run under `watch --json [extra]`:
/// the program's round-trip times (ms), the stalls, and the summary.
struct Watched {
    round_trips_ms: Vec<f64>,
    stalls: Vec<serde_json::Value>,
    summary: serde_json::Value,
    /// What the client and watch printed, kept when the run fails.
    stdout: String,
}

impl Watched {
    /// The client's round trips judged, but for the first: no delayed ACK holds it (a new
    /// connection's receiver ACKs at once), and a busy host makes it slow.
    fn truth(&self) -> Truth {
        LOOPBACK.judge_except(&self.round_trips_ms, |i| i == 0)
    }

    /// `why`, with this run's output kept under target/ and named.
    fn kept(&self, name: &str, why: String) -> Failed {
        let dir = keep(name, &[("stdout.txt", self.stdout.as_bytes())]);
        Failed::Wrong(format!(
            "{why} (the run's output kept in {})",
            dir.display()
        ))
    }
}

fn watch_echo_pair(extra: &[&str], mode: &str, rounds: u32) -> Result<Watched, String> {
    let echo: PathBuf = echo_pair();
    let port = free_port().to_string();
    let rounds = rounds.to_string();
    let mut args = vec!["watch", "--json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", echo.to_str().unwrap(), mode, &rounds, &port]);
    let out = tcpstall(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "watch failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse_watched(&stdout)
}

/// The RTT lines of a client and the JSON objects of a watch, from their output.
fn parse_watched(stdout: &str) -> Result<Watched, String> {
    let mut watched = Watched {
        round_trips_ms: Vec::new(),
        stalls: Vec::new(),
        summary: serde_json::Value::Null,
        stdout: stdout.to_string(),
    };
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("RTT: ") {
            let ms = rest.split_whitespace().next().unwrap_or("");
            watched
                .round_trips_ms
                .push(ms.parse().map_err(|_| format!("bad line {line}"))?);
        } else if line.starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
            match v["type"].as_str() {
                Some("stall") => watched.stalls.push(v),
                Some("summary") => watched.summary = v,
                _ => return Err(format!("unknown object {line}")),
            }
        }
    }
    if watched.summary.is_null() {
        return Err(format!("no summary\n{stdout}"));
    }
    Ok(watched)
}

#[test]
fn every_stalled_round_trip_is_reported_with_the_client_as_holder() {
    let Some(()) = can_watch("watch on a two-writes client") else {
        return;
    };
    record_until_clear("two writes under watch", |last| {
        let w = watch_echo_pair(&[], "two-writes", 20)?;
        let truth = slow_round_trips(&w, 20)?;
        truth.clear_unless_last(last)?;
        one_event_lost(&w, &truth, "timer-seen", last)?;
        let reported = w.stalls.len();
        // One stall in each slow round trip, none in a fast one.
        if !truth.admits(reported) {
            return Err(w.kept(
                "watch_cli-two-writes",
                format!(
                    "{reported} stalls reported, {} slow round trips",
                    truth.expected()
                ),
            ));
        }
        let reported = reported as i64;
        let pid = w.summary["command"]["pid"]
            .as_u64()
            .ok_or("no command pid")?;
        // The server's timer is seen firing; on a busy host its process may read the
        // small segment before the late timer runs, and that read sends the ACK
        // (tcp_cleanup_rbuf): no timer fired, and the stall is inferred from the hold.
        let mut seen_firing = 0;
        for stall in &w.stalls {
            if stall["class"] != "nagle-delayed-ack"
                || stall["holder"]["pid"].as_u64() != Some(pid)
                || stall["holder"]["comm"] != "echo_pair"
                || !(stall["evidence"] == "timer-seen" || stall["evidence"] == "inferred")
            {
                return Err(format!("stall not as expected (command pid {pid}): {stall}").into());
            }
            seen_firing += usize::from(stall["evidence"] == "timer-seen");
        }
        if seen_firing * 2 < w.stalls.len() {
            return Err(format!(
                "{seen_firing} of {} stalls saw the server's timer fire: {}",
                w.stalls.len(),
                w.stdout
            )
            .into());
        }
        if w.summary["total"]["stalls"].as_i64() != Some(reported) {
            return Err(format!("summary disagrees: {}", w.summary).into());
        }
        // Both ends watched: the server's side saw the same stalls, reported once.
        if w.summary["seen_from_both_sides"].as_i64().unwrap_or(0) < reported - 1 {
            return Err(format!("the delayer's side did not see them: {}", w.summary).into());
        }
        Ok(())
    });
}

/// The server and the client of two-writes as two processes, one under `watch --json
/// -- echo_pair ...` and the other outside it. Returns the client's round trips and the
/// watch's stalls and summary, and the client's pid.
fn watch_one_end(watched: &str, rounds: u32, port: u16) -> Result<(Watched, u32), String> {
    let echo = echo_pair();
    let port = port.to_string();
    let rounds = rounds.to_string();
    let end_args =
        |mode: &'static str| -> Vec<String> { vec![mode.into(), rounds.clone(), port.clone()] };
    let ready = |child: &mut std::process::Child| -> Result<(), String> {
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.starts_with("listening") {
            Ok(())
        } else {
            Err(format!("server did not start: {line:?}"))
        }
    };
    if watched == "serve" {
        let mut watch = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--json", "--"])
            .arg(&echo)
            .args(end_args("serve"))
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        // The command's first line ("listening") comes through watch's standard output.
        let mut out = BufReader::new(watch.stdout.take().ok_or("no stdout")?);
        let mut first = String::new();
        out.read_line(&mut first).map_err(|e| e.to_string())?;
        if !first.starts_with("listening") {
            let _ = watch.kill();
            let _ = watch.wait();
            return Err(format!("server did not start: {first:?}"));
        }
        let client = Command::new(&echo)
            .args(end_args("client"))
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let client_pid = client.id();
        let client_out = client.wait_with_output().map_err(|e| e.to_string())?;
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).map_err(|e| e.to_string())?;
        let status = watch.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("watch exited with {status}"));
        }
        let text = format!(
            "{}{first}{rest}",
            String::from_utf8_lossy(&client_out.stdout)
        );
        Ok((parse_watched(&text)?, client_pid))
    } else {
        let mut server = Command::new(&echo)
            .args(end_args("serve"))
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        if let Err(e) = ready(&mut server) {
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--json", "--"])
            .arg(&echo)
            .args(end_args("client"))
            .output()
            .map_err(|e| e.to_string())?;
        let _ = server.wait();
        if !out.status.success() {
            return Err(format!(
                "watch failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let watched = parse_watched(&String::from_utf8_lossy(&out.stdout))?;
        let pid = watched.summary["command"]["pid"].as_u64().unwrap_or(0) as u32;
        Ok((watched, pid))
    }
}

/// The client's round trips judged, when the workload stalled as it does: most round
/// trips slow or in the band (the 40 ms delayed-ACK timer held them).
fn slow_round_trips(w: &Watched, rounds: usize) -> Result<Truth, String> {
    let truth = w.truth();
    if w.round_trips_ms.len() != rounds || truth.slow + truth.between.len() < rounds * 3 / 4 {
        return Err(format!("the workload itself: {:?}", w.round_trips_ms));
    }
    Ok(truth)
}

/// On a host beside CPU-bound loops, about one run in five to eight loses one kernel
/// event: the kernel did not run a program of the watch for it (docs/watch.md, limits).
/// Such a run, one stall fewer than the slow round trips or one stall whose timer was not
/// seen (`expected_evidence` is what the others carry), is recorded again; the last run is
/// judged as it is.
fn one_event_lost(
    w: &Watched,
    truth: &Truth,
    expected_evidence: &str,
    last: bool,
) -> Result<(), Failed> {
    if last || !truth.between.is_empty() {
        return Ok(());
    }
    let other_evidence = w
        .stalls
        .iter()
        .filter(|s| s["evidence"] != expected_evidence)
        .count();
    let one_fewer = w.stalls.len() + 1 == truth.slow && other_evidence == 0;
    let one_unseen = w.stalls.len() == truth.slow && other_evidence == 1;
    if one_fewer || one_unseen {
        return Err(Failed::Unclear(format!(
            "one event lost: {} stalls for {} slow round trips, {other_evidence} without evidence {expected_evidence}",
            w.stalls.len(),
            truth.slow
        )));
    }
    Ok(())
}

/// One stall in each slow round trip of the client, none in a fast one.
fn stalls_match(w: &Watched, truth: &Truth, name: &str) -> Result<(), Failed> {
    if truth.admits(w.stalls.len()) {
        return Ok(());
    }
    Err(w.kept(
        name,
        format!(
            "{} stalls reported, {} slow round trips",
            w.stalls.len(),
            truth.expected()
        ),
    ))
}

#[test]
fn a_watched_server_sees_the_stalls_of_a_client_outside() {
    let Some(()) = can_watch("watch on the delaying server alone") else {
        return;
    };
    record_until_clear("server under watch, client outside", |last| {
        // The loopback capture tells where the host lagged past the rule.
        let port = free_port();
        let capture = Capture::start(None).map_err(|e| e.to_string())?;
        let run = watch_one_end("serve", 20, port);
        let packets = capture.finish().map_err(|e| e.to_string())?;
        let (w, client_pid) = run?;
        let truth = slow_round_trips(&w, 20)?;
        truth.clear_unless_last(last)?;
        let (delayed, lagged) = delayed_and_lagged_answers(&packets, port, LOOPBACK.slow_from_ms)?;
        if delayed < truth.slow {
            return Err(w.kept(
                "watch_cli-server-watched",
                format!(
                    "the loopback capture shows {delayed} delayed ACKs for {} slow round trips",
                    truth.slow
                ),
            ));
        }
        // Those stalls may be reported or not; a run made only of them says nothing.
        if lagged > 0 && !last && lagged == truth.slow {
            return Err(Failed::Unclear(format!(
                "the host lagged on all {lagged} answers"
            )));
        }
        let found = w.stalls.len();
        if lagged == 0 {
            one_event_lost(&w, &truth, "delayer-side", last)?;
        }
        if lagged == 0 || !(truth.slow.saturating_sub(lagged)..truth.slow).contains(&found) {
            stalls_match(&w, &truth, "watch_cli-server-watched")?;
        }
        let server = w.summary["command"]["pid"]
            .as_u64()
            .ok_or("no command pid")?;
        for stall in &w.stalls {
            if stall["evidence"] != "delayer-side"
                || stall["delayer"]["process"]["pid"].as_u64() != Some(server)
                || stall["holder"]["pid"].as_u64() != Some(u64::from(client_pid))
                || stall["delayer"]["timer_ms"].as_f64().unwrap_or(0.0) < 30.0
            {
                return Err(format!(
                    "stall not as expected (server {server}, client {client_pid}): {stall}"
                )
                .into());
            }
        }
        if w.summary["nagle_holds"]["total"] != 0 {
            return Err(format!("the client's holds are not watched: {}", w.summary).into());
        }
        Ok(())
    });
}

#[test]
fn a_watched_client_sees_its_stalls_with_the_server_outside() {
    let Some(()) = can_watch("watch on the holding client alone") else {
        return;
    };
    record_until_clear("client under watch, server outside", |last| {
        let (w, client_pid) = watch_one_end("client", 20, free_port())?;
        let truth = slow_round_trips(&w, 20)?;
        truth.clear_unless_last(last)?;
        one_event_lost(&w, &truth, "timer-seen", last)?;
        stalls_match(&w, &truth, "watch_cli-client-watched")?;
        let reported = w.stalls.len() as i64;
        for stall in &w.stalls {
            if stall["evidence"] != "timer-seen"
                || stall["holder"]["pid"].as_u64() != Some(u64::from(client_pid))
            {
                return Err(format!("stall not as expected: {stall}").into());
            }
        }
        // Every stall began with a Nagle hold, counted for the client.
        let holds = w.summary["nagle_holds"]["total"].as_i64().unwrap_or(0);
        if holds < reported {
            return Err(format!("{holds} Nagle holds for {reported} stalls").into());
        }
        Ok(())
    });
}

#[test]
fn fix_nodelay_removes_every_stall() {
    let Some(()) = can_watch("watch --fix nodelay") else {
        return;
    };
    record_until_clear("two writes under watch --fix nodelay", |last| {
        let w = watch_echo_pair(&["--fix", "nodelay"], "two-writes", 20)?;
        if !w.stalls.is_empty() {
            return Err(w.kept(
                "watch_cli-fix-nodelay",
                format!("{} stalls with the fix", w.stalls.len()),
            ));
        }
        let truth = w.truth();
        if w.round_trips_ms.len() != 20 || truth.slow > 0 {
            return Err(w.kept(
                "watch_cli-fix-nodelay",
                format!("round trips held with the fix: {:?}", w.round_trips_ms),
            ));
        }
        truth.clear_unless_last(last)?;
        let fix = &w.summary["fix"];
        if fix["fix"] != "nodelay" || fix["sockets"].as_u64().unwrap_or(0) < 1 {
            return Err(format!("fix not reported: {}", w.summary).into());
        }
        Ok(())
    });
}

#[test]
fn fix_delack_max_shortens_the_stalls() {
    let Some(()) = can_watch("watch --fix delack-max") else {
        return;
    };
    record_until_clear("two writes under watch --fix delack-max=10", |last| {
        let w = watch_echo_pair(&["--fix", "delack-max=10"], "two-writes", 20)?;
        // Held by a 10 ms timer, not a 40 ms one: no round trip of the client slow, each
        // stall shorter than the round trip it held. Without the fix every held round trip
        // is slow; a busy host can make one slow that the fix held for 10 ms, and such a
        // run is recorded again.
        let truth = w.truth();
        if truth.slow > 0 && truth.slow < truth.round_trips_ms.len() / 2 && !last {
            return Err(Failed::Unclear(format!(
                "{} of {} round trips as slow as a 40 ms timer's: {:?}",
                truth.slow,
                truth.round_trips_ms.len(),
                truth.round_trips_ms
            )));
        }
        let longest = w.summary["total"]["longest_ms"]
            .as_f64()
            .unwrap_or(f64::MAX);
        let longest_round_trip = w.round_trips_ms.iter().copied().fold(0.0, f64::max);
        if w.round_trips_ms.len() != 20
            || truth.slow > 0
            || w.stalls.is_empty()
            || longest > longest_round_trip
        {
            return Err(w.kept(
                "watch_cli-fix-delack-max",
                format!(
                    "{} stalls, the longest {longest} ms, with a 10 ms timer; round trips {:?}",
                    w.stalls.len(),
                    w.round_trips_ms
                ),
            ));
        }
        if w.summary["fix"]["sockets"].as_u64().unwrap_or(0) < 1 {
            return Err(format!("fix not reported: {}", w.summary).into());
        }
        Ok(())
    });
}

#[test]
fn exits_with_the_commands_status() {
    let Some(()) = can_watch("watch's exit status") else {
        return;
    };
    let out = tcpstall(&["watch", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn without_privilege_one_line_says_what_is_missing() {
    // As root, the same binary run as nobody; otherwise as we are.
    let out = if common::watch::is_root() {
        match Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--duration", "1"])
            .output()
        {
            Ok(out) => out,
            Err(_) => {
                common::skipped(format_args!("skipped: setpriv (util-linux) not installed"));
                return;
            }
        }
    } else {
        tcpstall(&["watch", "--duration", "1"])
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot run here: needs root"), "{stderr}");
    assert!(stderr.contains("tcpstall analyze"), "{stderr}");
}

#[test]
fn bad_usage_is_one_line_and_exit_2() {
    for args in [
        &["watch", "--fix", "nodelay"][..],
        &["watch", "--fix", "quickack", "--", "true"],
        &["watch", "--prometheus", "nowhere", "--duration", "1"],
        &["watch", "--duration", "-1"],
        &["watch", "--duration", "1", "--", "true"],
    ] {
        let out = tcpstall(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn echo_pair_on_a_port_in_use_says_so_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("its address").port().to_string();
    let out = Command::new(echo_pair())
        .args(["two-writes", "1", &port])
        .output()
        .expect("run echo_pair");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("port {port} is in use")),
        "{stderr}"
    );
}
