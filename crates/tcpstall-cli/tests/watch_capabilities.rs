//! Least privilege: each mode of `tcpstall watch` runs with exactly the capabilities
//! docs/watch.md lists for it, and not without any one of them. Run two ways, as the
//! deployments do: as root with only those capabilities left (a Kubernetes container's
//! `capabilities: {drop: [ALL], add: [...]}`, systemd's CapabilityBoundingSet=), and as
//! the unprivileged user nobody given them as ambient capabilities (the systemd unit's
//! AmbientCapabilities=). If watch comes to need one more, the runs with the set fail.
//! Needs root (to drop to the sets), setpriv (util-linux), BTF and Linux 6.3; skipped
//! with a message otherwise.

mod common;

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::watch::{
    COMMAND, FIX, NOT_ROOT, TestCgroup, WATCH, can_watch, cgroup2_root, echo_pair, free_port,
    reply_client, reply_server,
};

#[derive(Clone, Copy, Debug)]
enum As {
    /// uid 0 with only the capabilities given.
    Root,
    /// uid 65534 with the capabilities given as ambient ones.
    Nobody,
}

fn setpriv(user: As, caps: &[&str]) -> Command {
    let list: String = caps.iter().map(|c| format!(",+{c}")).collect();
    let mut command = Command::new("setpriv");
    match user {
        As::Root => command.args([
            format!("--bounding-set=-all{list}"),
            "--inh-caps=-all".into(),
        ]),
        As::Nobody => command.args([
            "--reuid=65534".to_string(),
            "--regid=65534".into(),
            "--clear-groups".into(),
            format!("--inh-caps=-all{list}"),
            format!("--ambient-caps=-all{list}"),
        ]),
    };
    command
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_tcpstall"))
        .arg("watch");
    command
}

fn without<'a>(set: &[&'a str], cap: &str) -> Vec<&'a str> {
    set.iter().copied().filter(|c| *c != cap).collect()
}

fn with<'a>(set: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    set.iter().chain(more).copied().collect()
}

/// Whether /proc/kallsyms shows addresses without CAP_SYSLOG (kernel/kallsyms.c
/// kallsyms_show_value: kptr_restrict 0 and perf_event_paranoid <= 1).
fn kallsyms_open_to_all() -> bool {
    let read = |p: &str| std::fs::read_to_string(p).ok()?.trim().parse::<i32>().ok();
    read("/proc/sys/kernel/kptr_restrict") == Some(0)
        && read("/proc/sys/kernel/perf_event_paranoid").is_some_and(|p| p <= 1)
}

fn can_run(what: &str) -> bool {
    if can_watch(what).is_none() {
        return false;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped {what}: setpriv (util-linux) not installed");
        return false;
    }
    if cgroup2_root().is_none() {
        eprintln!("skipped {what}: cgroup v2 is not mounted");
        return false;
    }
    true
}

fn summary(out: &Output) -> Result<serde_json::Value, String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("exit {}: {stderr}", out.status));
    }
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .ok_or(format!("no summary: {stderr}"))
}

fn stalls(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "stall")
        .collect()
}

/// Runs a watch in the background until its metrics answer (its programs are attached),
/// then `workload`, then stops it with SIGTERM.
fn around(mut watch: Command, workload: impl FnOnce()) -> Result<Output, String> {
    let metrics = free_port();
    watch.args(["--prometheus", &metrics.to_string()]);
    let mut child: Child = watch
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", metrics)).is_ok() {
            break;
        }
        if child.try_wait().map_err(|e| e.to_string())?.is_some()
            // Not a measure: a busy host loads the programs slowly.
            || started.elapsed() > Duration::from_secs(60)
        {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            let _ = child.wait();
            return Err(format!("watch did not start: {err}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    workload();
    // SAFETY: kill(2) on our own child (setpriv exec'd tcpstall), not reaped yet.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    child.wait_with_output().map_err(|e| e.to_string())
}

/// Host-wide watch of a two-writes workload run outside it (as root, all capabilities):
/// its stalls, each with the delayer's process named.
fn watch_host(user: As, caps: &[&str]) -> Result<(), String> {
    let port = free_port();
    let mut watch = setpriv(user, caps);
    watch.args(["--json", "--duration", "60", "--port", &port.to_string()]);
    let out = around(watch, || {
        let _ = Command::new(echo_pair())
            .args(["two-writes", "5", &port.to_string()])
            .output();
    })?;
    summary(&out)?;
    let stalls = stalls(&out);
    if stalls.len() < 3 {
        return Err(format!("{} stalls of 4", stalls.len()));
    }
    if let Some(s) = stalls.iter().find(|s| s["delayer"]["process"].is_null()) {
        return Err(format!("delayer not named: {s}"));
    }
    Ok(())
}

/// `watch [--fix nodelay] -- echo_pair two-writes`.
fn watch_command(user: As, caps: &[&str], fix: bool) -> Result<(), String> {
    let port = free_port().to_string();
    let mut watch = setpriv(user, caps);
    watch.arg("--json");
    if fix {
        watch.args(["--fix", "nodelay"]);
    }
    let out = watch
        .arg("--")
        .arg(echo_pair())
        .args(["two-writes", "5", &port])
        .output()
        .map_err(|e| e.to_string())?;
    let summary = summary(&out)?;
    let stalled = summary["total"]["stalls"].as_u64().unwrap_or(0);
    match fix {
        false if stalled < 3 => Err(format!("{stalled} stalls of 4")),
        true if stalled > 0 || summary["fix"]["sockets"].as_u64().unwrap_or(0) == 0 => {
            Err(format!("the fix did not work: {summary}"))
        }
        _ => Ok(()),
    }
}

/// `watch --cgroup PATH --fix nodelay --fix-after 0` on a reply_server running outside.
fn fix_service(user: As, caps: &[&str]) -> Result<(), String> {
    let mut cgroup = TestCgroup::create(&format!(
        "tcpstall-caps-{}.slice/reply.service",
        std::process::id()
    ));
    let port = free_port();
    let mut out = cgroup.spawn(&reply_server(), &["serve", &port.to_string()]);
    let mut first = [0u8; 9];
    out.read_exact(&mut first).map_err(|e| e.to_string())?;
    let mut watch = setpriv(user, caps);
    watch.args([
        "--json",
        "--duration",
        "60",
        "--fix",
        "nodelay",
        "--fix-after",
        "0",
    ]);
    watch.arg("--cgroup").arg(&cgroup.path);
    let mut round_trips = Vec::new();
    let out = around(watch, || round_trips = reply_client(port, 2, 5))?;
    let summary = summary(&out)?;
    // No round trip held (slow by its own timing, each connection's first not judged).
    let truth = common::truth::LOOPBACK.judge_except(&round_trips, |i| i % 5 == 0);
    if summary["fix"]["sockets"] != 2 || truth.slow > 0 {
        return Err(format!("the fix did not work ({round_trips:?}): {summary}"));
    }
    Ok(())
}

/// Passes with `set` (up to 3 tries: timing), fails without each of `needed`.
fn exactly(what: &str, set: &[&str], needed: &[&str], run: impl Fn(&[&str]) -> Result<(), String>) {
    common::with_retries(&format!("{what} with {set:?}"), || run(set));
    for cap in needed {
        if *cap == "syslog" && kallsyms_open_to_all() {
            eprintln!("{what}: CAP_SYSLOG not needed here (kernel.perf_event_paranoid <= 1)");
            continue;
        }
        let fewer = without(set, cap);
        assert!(
            run(&fewer).is_err(),
            "{what} worked without CAP_{}: the documented set is not the least",
            cap.to_uppercase()
        );
    }
}

#[test]
fn watch_needs_bpf_perfmon_syslog_sys_ptrace() {
    if !can_run("least privilege of watch") {
        return;
    }
    exactly("watch as root", &WATCH, &WATCH, |caps| {
        watch_host(As::Root, caps)
    });
    let nobody = with(&WATCH, &[NOT_ROOT]);
    exactly("watch as nobody", &nobody, &[NOT_ROOT], |caps| {
        watch_host(As::Nobody, caps)
    });
}

#[test]
fn a_command_adds_dac_override_and_its_fix_net_admin() {
    if !can_run("least privilege of watch -- CMD") {
        return;
    }
    let command = with(&WATCH, &[COMMAND]);
    exactly("watch -- CMD", &command, &[COMMAND], |caps| {
        watch_command(As::Root, caps, false)
    });
    let fix = with(&command, &[FIX]);
    exactly("watch --fix -- CMD", &fix, &[FIX], |caps| {
        watch_command(As::Root, caps, true)
    });
}

#[test]
fn a_fix_on_a_running_service_adds_net_admin() {
    if !can_run("least privilege of watch --cgroup --fix") {
        return;
    }
    let fix = with(&WATCH, &[FIX]);
    exactly("watch --cgroup --fix", &fix, &[FIX], |caps| {
        fix_service(As::Root, caps)
    });
    let nobody = with(&fix, &[NOT_ROOT]);
    common::with_retries("watch --cgroup --fix as nobody", || {
        fix_service(As::Nobody, &nobody)
    });
}
