//! `tcpstall watch` on a service started outside it: stalls named by the service's cgroup
//! (as systemd and as container runtimes name them), and `--fix` tried on the running
//! service through `--unit` or `--cgroup`, attached after a while and detached when
//! watch ends, however it ends. The service is the reply_server example, which stalls
//! as the holder on every connection (a new one each time); its client's round trips
//! are the reference. Skipped with a message without root, BTF, Linux 6.3 or cgroup v2.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::watch::{
    TestCgroup, can_watch, cgroup2_root, free_port, http_get, reply_client, reply_server,
};
use common::with_retries;

/// A round trip the delayed-ACK timer held: the 40 ms timer against a loopback round
/// trip of well under a millisecond.
const SLOW_MS: f64 = 20.0;
/// Connections and requests per client run: the first request of a connection is
/// answered at once (the client ACKs at once while in quick-ACK mode), the others stall.
const CONNECTIONS: u32 = 2;
const ROUNDS: u32 = 10;

fn can_run(what: &str) -> bool {
    if can_watch(what).is_none() {
        return false;
    }
    if cgroup2_root().is_none() {
        eprintln!("skipped {what}: cgroup v2 is not mounted");
        return false;
    }
    true
}

/// The service: reply_server in `cgroup`, listening on `port`.
fn start_service(cgroup: &mut TestCgroup, port: u16) -> Result<(), String> {
    let out = cgroup.spawn(&reply_server(), &["serve", &port.to_string()]);
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    line.starts_with("listening")
        .then_some(())
        .ok_or(format!("the service did not start: {line:?}"))
}

fn slow(round_trips: &[f64]) -> usize {
    round_trips.iter().filter(|&&ms| ms > SLOW_MS).count()
}

/// The service stalls: every request but each connection's first is slow.
fn stalls(round_trips: &[f64]) -> Result<(), String> {
    let expected = (CONNECTIONS * (ROUNDS - 1)) as usize;
    if round_trips.len() != (CONNECTIONS * ROUNDS) as usize || slow(round_trips) < expected - 1 {
        return Err(format!("the service does not stall: {round_trips:?}"));
    }
    Ok(())
}

/// `watch` running in the background, its standard output read line by line.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watch {
    fn start(args: &[&str]) -> Watch {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tcpstall watch");
        let out = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Watch { child, lines }
    }

    /// Lines until one satisfies `found` (returned), for at most `limit`.
    fn wait_for(&self, limit: Duration, found: impl Fn(&str) -> bool) -> Result<String, String> {
        let until = std::time::Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if found(&line) => return Ok(line),
                Ok(_) => {}
                Err(_) => return Err("watch did not print the line awaited".into()),
            }
        }
    }

    /// SIGTERM, then every JSON object it printed after the last line read.
    fn stop(mut self) -> Result<(Vec<serde_json::Value>, String), String> {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().map_err(|e| e.to_string())?;
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        if !status.success() {
            return Err(format!("watch exited with {status}: {stderr}"));
        }
        let objects = self
            .lines
            .try_iter()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(&l).map_err(|e| format!("{e}: {l}")))
            .collect::<Result<_, _>>()?;
        Ok((objects, stderr))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sockops programs attached to a cgroup, as bpftool lists them; `None` without
/// bpftool.
fn attached_programs(cgroup: &TestCgroup) -> Option<String> {
    let out = Command::new("bpftool")
        .args(["cgroup", "show"])
        .arg(&cgroup.path)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn fix_on_a_running_service_then_it_stalls_again() {
    if !can_run("--fix on a running service") {
        return;
    }
    with_retries("--unit with --fix nodelay", || {
        let unit = format!("tcpstall-test-reply-{}.service", std::process::id());
        let mut cgroup = TestCgroup::create(&format!(
            "tcpstall-test-{}-unit.slice/{unit}",
            std::process::id()
        ));
        let port = free_port();
        start_service(&mut cgroup, port)?;
        // Before watch: the service stalls.
        stalls(&reply_client(port, CONNECTIONS, ROUNDS))?;

        let metrics_port = free_port().to_string();
        let unit_name = unit.trim_end_matches(".service");
        let watch = Watch::start(&[
            "--json",
            "--unit",
            unit_name,
            "--fix",
            "nodelay",
            "--fix-after",
            "4",
            "--prometheus",
            &metrics_port,
        ]);
        // Loaded once the metrics answer; the fix attaches 4 s after watching began.
        let metrics = |port: &str| http_get(port.parse().ok()?, "/metrics");
        let mut loaded = false;
        for _ in 0..40 {
            if metrics(&metrics_port).is_some() {
                loaded = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !loaded {
            return Err("watch did not serve metrics".into());
        }
        let before = reply_client(port, CONNECTIONS, ROUNDS);
        stalls(&before)?;
        watch.wait_for(Duration::from_secs(10), |l| l.contains("\"type\":\"fix\""))?;
        let with_fix = reply_client(port, CONNECTIONS, ROUNDS);
        if slow(&with_fix) > 0 || with_fix.len() != (CONNECTIONS * ROUNDS) as usize {
            return Err(format!("stalls with the fix: {with_fix:?}"));
        }
        // Each connection's socket got the option before the metrics were read again.
        std::thread::sleep(Duration::from_millis(300));
        let text = metrics(&metrics_port).ok_or("no metrics with the fix")?;
        for series in [
            "tcpstall_fix_attached{fix=\"nodelay\"} 1",
            "tcpstall_fix_stalls_total{fix=\"nodelay\",phase=\"after\"} 0",
            &format!("tcpstall_fix_sockets_total{{fix=\"nodelay\"}} {CONNECTIONS}"),
            &format!("role=\"holder\",service=\"{unit}\""),
        ] {
            if !text.contains(series) {
                return Err(format!("no {series} in the metrics:\n{text}"));
            }
        }
        let attached = attached_programs(&cgroup);
        if attached.as_ref().is_some_and(|a| !a.contains("apply_fix")) {
            return Err(format!("bpftool does not show the fix: {attached:?}"));
        }

        let (objects, stderr) = watch.stop()?;
        let summary = objects
            .iter()
            .find(|o| o["type"] == "summary")
            .ok_or(format!("no summary: {stderr}"))?;
        let fix = &summary["fix"];
        let before_stalls = fix["before"]["stalls"].as_u64().unwrap_or(0) as usize;
        if before_stalls + 1 < slow(&before)
            || fix["after"]["stalls"] != 0
            || fix["sockets"] != CONNECTIONS
            || !fix["cgroup"].as_str().unwrap_or("").ends_with(&unit)
            || fix["before"]["stalls_per_s"].as_f64().unwrap_or(0.0) <= 0.0
        {
            return Err(format!(
                "fix phases not as the client saw them ({} slow before): {fix}",
                slow(&before)
            ));
        }
        for stall in objects.iter().filter(|o| o["type"] == "stall") {
            let service = &stall["holder"]["service"];
            if service["name"] != unit.as_str()
                || service["kind"] != "systemd-unit"
                || service["cgroup"] != format!("/{}", cgroup.relative)
            {
                return Err(format!("stall not named by its unit: {stall}"));
            }
        }
        // Watch ended: nothing attached, and new connections stall again.
        if let Some(attached) = attached_programs(&cgroup)
            && attached.contains("apply_fix")
        {
            return Err(format!("the fix stayed attached: {attached}"));
        }
        stalls(&reply_client(port, CONNECTIONS, ROUNDS))
    });
}

#[test]
fn a_watch_killed_leaves_no_fix_behind() {
    if !can_run("--fix on a running service, watch killed") {
        return;
    }
    with_retries("--cgroup with --fix nodelay, then SIGKILL", || {
        let id: String = format!("{:064x}", u128::from(std::process::id()) * 0x9e37_79b9);
        let mut cgroup = TestCgroup::create(&format!(
            "tcpstall-test-{}-killed.slice/docker-{id}.scope",
            std::process::id()
        ));
        let port = free_port();
        start_service(&mut cgroup, port)?;
        let mut watch = Watch::start(&[
            "--json",
            "--cgroup",
            &format!("/{}", cgroup.relative),
            "--fix",
            "nodelay",
            "--fix-after",
            "0",
        ]);
        watch.wait_for(Duration::from_secs(10), |l| l.contains("\"type\":\"fix\""))?;
        let with_fix = reply_client(port, CONNECTIONS, ROUNDS);
        if slow(&with_fix) > 0 {
            return Err(format!("stalls with the fix: {with_fix:?}"));
        }
        let _ = watch.child.kill();
        let _ = watch.child.wait();
        // The link went with watch's descriptors.
        if let Some(attached) = attached_programs(&cgroup)
            && attached.contains("apply_fix")
        {
            return Err(format!("the fix stayed attached: {attached}"));
        }
        stalls(&reply_client(port, CONNECTIONS, ROUNDS))
    });
}

#[test]
fn stalls_are_named_by_the_container_of_their_cgroup() {
    if !can_run("stalls named by container") {
        return;
    }
    let id = "4f9a2c1d7b3e8f60a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcdef01";
    for (relative, name) in [
        (
            format!(
                "tcpstall-test-kubepods.slice/tcpstall-test-kubepods-pod{}.slice/cri-containerd-{id}.scope",
                std::process::id()
            ),
            "containerd:4f9a2c1d7b3e",
        ),
        (
            format!("tcpstall-test-{}/docker/{id}", std::process::id()),
            "docker:4f9a2c1d7b3e",
        ),
    ] {
        with_retries(&format!("stalls of a server in {relative}"), || {
            let mut cgroup = TestCgroup::create(&relative);
            let port = free_port();
            start_service(&mut cgroup, port)?;
            let watch = Watch::start(&["--json", "--port", &port.to_string()]);
            // Watching once the programs are loaded: the first stall shows it.
            std::thread::sleep(Duration::from_secs(2));
            let round_trips = reply_client(port, CONNECTIONS, ROUNDS);
            stalls(&round_trips)?;
            let (objects, stderr) = watch.stop()?;
            let stalls: Vec<_> = objects.iter().filter(|o| o["type"] == "stall").collect();
            if stalls.len() + 1 < slow(&round_trips) {
                return Err(format!(
                    "{} stalls for {} slow round trips: {stderr}",
                    stalls.len(),
                    slow(&round_trips)
                ));
            }
            for stall in stalls {
                let service = &stall["holder"]["service"];
                if service["name"] != name || service["kind"] != "container" {
                    return Err(format!("stall not named {name}: {stall}"));
                }
            }
            let summary = objects
                .iter()
                .find(|o| o["type"] == "summary")
                .ok_or("no summary")?;
            if !summary["services"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["service"] == name && s["role"] == "holder")
            }) {
                return Err(format!("no {name} in the summary's services: {summary}"));
            }
            Ok(())
        });
    }
}

#[test]
fn bad_service_options_are_one_line_and_exit_2() {
    for args in [
        &[
            "watch",
            "--fix-after",
            "3",
            "--fix",
            "nodelay",
            "--",
            "true",
        ][..],
        &["watch", "--cgroup", "/no/such/cgroup", "--duration", "1"],
        &[
            "watch",
            "--unit",
            "tcpstall-no-such-unit",
            "--duration",
            "1",
        ],
        &[
            "watch",
            "--cgroup",
            "/",
            "--fix",
            "nodelay",
            "--fix-after",
            "-1",
        ],
        &["watch", "--cgroup", "/x", "--unit", "y"],
        &["watch", "--fix-after", "3"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(args)
            .output()
            .expect("run tcpstall");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let errors: Vec<_> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            errors.len() == 1 || stderr.contains("Usage:"),
            "{args:?}: {stderr}"
        );
    }
}
