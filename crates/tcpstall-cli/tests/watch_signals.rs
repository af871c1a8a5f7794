//! `tcpstall watch` ended by a signal or by its reader: the command is told and waited
//! for, the summary is printed, the cgroup is removed, and the exit status is the
//! command's; a closed standard output ends watching without a panic; a watch killed
//! with SIGKILL leaves a cgroup that the next watch removes. These need root, BTF and
//! Linux 6.3 or later: without them they print what they skip and pass.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::watch::can_watch;

/// Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified in the hybrid
/// layout).
fn cgroup2_root() -> PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(point))
        })
        .expect("a cgroup2 mount")
}

/// The `tcpstall-watch-*` cgroups there are now.
fn watch_cgroups() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cgroup2_root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("tcpstall-watch-")
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// The cgroup the watch `watch` runs its command in (`tcpstall-watch-PID-TOKEN`), once
/// it has made it.
fn cgroup_of(watch: &mut Child) -> PathBuf {
    let prefix = format!("tcpstall-watch-{}-", watch.id());
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = watch_cgroups().into_iter().find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        }) {
            return found;
        }
        if let Ok(Some(status)) = watch.try_wait() {
            panic!("watch ended before it made its cgroup: {status}");
        }
        assert!(Instant::now() < until, "no cgroup {prefix}* appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn processes_in(cgroup: &Path) -> Vec<u32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether a process runs (a zombie nobody reaped does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// Waits until `cgroup` holds at least `count` processes; returns them.
fn wait_for_processes(watch: &mut Child, cgroup: &Path, count: usize) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = processes_in(cgroup);
        if pids.len() >= count {
            // Let the command set its traps.
            std::thread::sleep(Duration::from_millis(300));
            return processes_in(cgroup);
        }
        if let Ok(Some(status)) = watch.try_wait() {
            panic!("watch ended before its command started: {status}");
        }
        assert!(
            Instant::now() < until,
            "{} never held {count} processes",
            cgroup.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` at most `limit`; kills it and fails the test past that.
fn wait_at_most(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send(pid: u32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// One test at a time: a watch that starts removes the cgroups of killed ones, which
/// the SIGKILL test looks at, and each loads its programs on a small machine.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn watch(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tcpstall watch")
}

fn read_all(mut from: impl Read) -> String {
    let mut text = String::new();
    let _ = from.read_to_string(&mut text);
    text
}

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// `watch --json -- sh` whose shell says which signal it got and exits with status 7,
/// leaving a child of its own: `signal` to watch reaches the shell, watch exits 7 with
/// the summary, the child is ended, and the cgroup is gone.
fn command_is_told_and_waited_for(signal: i32, name: &str) {
    let Some(()) = can_watch(&format!("{name} to watch -- CMD")) else {
        return;
    };
    let _serial = one_at_a_time();
    let script =
        format!("trap 'echo got {name}; exit 7' {name}; sleep 300 & wait; echo not reached");
    let mut child = watch(&["--json", "--", "sh", "-c", &script]);
    let cgroup = cgroup_of(&mut child);
    let pids = wait_for_processes(&mut child, &cgroup, 2);
    send(child.id(), signal);
    let status = wait_at_most(&mut child, Duration::from_secs(20), name);
    let stdout = read_all(child.stdout.take().unwrap());
    let stderr = read_all(child.stderr.take().unwrap());
    assert_eq!(
        status.code(),
        Some(7),
        "{name}: stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains(&format!("got {name}")), "{name}: {stdout}");
    assert!(!stdout.contains("not reached"), "{name}: {stdout}");
    let summary = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .unwrap_or_else(|| panic!("{name}: no summary\n{stdout}"));
    assert_eq!(summary["command"]["exit_status"], 7, "{summary}");
    assert!(!cgroup.exists(), "{name}: {} left behind", cgroup.display());
    for pid in pids {
        assert!(
            !alive(pid),
            "{name}: process {pid} of the command still runs"
        );
    }
}

#[test]
fn sigterm_is_passed_to_the_command_and_watch_exits_as_it_did() {
    command_is_told_and_waited_for(SIGTERM, "TERM");
}

#[test]
fn sigint_is_passed_to_the_command_and_watch_exits_as_it_did() {
    command_is_told_and_waited_for(SIGINT, "INT");
}

#[test]
fn sighup_is_passed_to_the_command_and_watch_exits_as_it_did() {
    command_is_told_and_waited_for(SIGHUP, "HUP");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let Some(()) = can_watch("a command that ignores SIGTERM") else {
        return;
    };
    let _serial = one_at_a_time();
    let mut child = watch(&["--", "sh", "-c", "trap '' TERM; sleep 300; sleep 300"]);
    let cgroup = cgroup_of(&mut child);
    let pids = wait_for_processes(&mut child, &cgroup, 2);
    let asked = Instant::now();
    send(child.id(), SIGTERM);
    let status = wait_at_most(&mut child, Duration::from_secs(20), "ignored SIGTERM");
    let waited = asked.elapsed();
    let stderr = read_all(child.stderr.take().unwrap());
    // The shell ignores SIGTERM and sleep never got it: both are killed after 5 s.
    assert_eq!(status.code(), Some(128 + SIGKILL), "{stderr}");
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(15)).contains(&waited),
        "ended after {waited:?}"
    );
    assert!(stderr.contains("exited with status 137"), "{stderr}");
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    for pid in pids {
        assert!(!alive(pid), "process {pid} of the command still runs");
    }
}

#[test]
fn watch_alone_prints_its_summary_and_exits_0_on_sigterm_and_sigint() {
    let Some(()) = can_watch("SIGTERM and SIGINT to watch alone") else {
        return;
    };
    let _serial = one_at_a_time();
    for (signal, name) in [(SIGTERM, "TERM"), (SIGINT, "INT")] {
        let mut child = watch(&["--json"]);
        // Loading the programs takes a moment; a signal before that is handled too.
        std::thread::sleep(Duration::from_secs(2));
        send(child.id(), signal);
        let status = wait_at_most(&mut child, Duration::from_secs(20), name);
        let stdout = read_all(child.stdout.take().unwrap());
        let stderr = read_all(child.stderr.take().unwrap());
        assert_eq!(status.code(), Some(0), "{name}: {stderr}");
        let last = stdout.lines().last().unwrap_or_default();
        let summary: serde_json::Value = serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("{name}: {e}: {stdout}\n{stderr}"));
        assert_eq!(summary["type"], "summary", "{name}: {last}");
    }
}

#[test]
fn a_closed_standard_output_ends_watch_quietly() {
    let Some(()) = can_watch("watch --json | head -c 0") else {
        return;
    };
    let _serial = one_at_a_time();
    // As `tcpstall watch --json | head -c 0`: the reader is gone before anything is
    // written.
    let mut child = watch(&["--json"]);
    drop(child.stdout.take());
    let status = wait_at_most(&mut child, Duration::from_secs(20), "watch alone");
    let stderr = read_all(child.stderr.take().unwrap());
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // With a command: it is ended, and its cgroup removed.
    let mut child = watch(&["--json", "--", "sleep", "300"]);
    let cgroup = cgroup_of(&mut child);
    let stdout = child.stdout.take().unwrap();
    let pids = wait_for_processes(&mut child, &cgroup, 1);
    drop(stdout);
    let status = wait_at_most(&mut child, Duration::from_secs(20), "watch -- sleep");
    let stderr = read_all(child.stderr.take().unwrap());
    assert!(!stderr.contains("panicked"), "{stderr}");
    // sleep ended by SIGTERM.
    assert_eq!(status.code(), Some(128 + SIGTERM), "{stderr}");
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    for pid in pids {
        assert!(!alive(pid), "process {pid} of the command still runs");
    }
}

#[test]
fn the_next_watch_removes_what_a_killed_one_left() {
    let Some(()) = can_watch("the cgroup of a SIGKILLed watch") else {
        return;
    };
    let _serial = one_at_a_time();
    // The shell's own child outlives the shell.
    let mut child = watch(&["--", "sh", "-c", "sleep 300 & sleep 300; wait"]);
    let cgroup = cgroup_of(&mut child);
    let pids = wait_for_processes(&mut child, &cgroup, 3);
    send(child.id(), SIGKILL);
    let _ = wait_at_most(&mut child, Duration::from_secs(10), "SIGKILL");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        cgroup.exists(),
        "a SIGKILLed watch cannot remove its cgroup"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(["watch", "--duration", "0.5"])
        .stdin(Stdio::null())
        .output()
        .expect("run tcpstall watch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !cgroup.exists(),
        "{} still there: {stderr}",
        cgroup.display()
    );
    assert!(
        stderr.contains(&format!("removed {}", cgroup.display())),
        "{stderr}"
    );
    for pid in pids {
        assert!(
            !alive(pid),
            "process {pid} of the killed watch's command still runs"
        );
    }
}

/// Whether util-linux's unshare can make a PID namespace here.
fn can_unshare_pid() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Two watches, one in a PID namespace of its own: each watch's number means nothing to
/// the other, and neither takes the other's live cgroup for an abandoned one, whichever
/// of the two starts second.
#[test]
fn a_watch_in_another_pid_namespace_keeps_its_command() {
    let Some(()) = can_watch("watches in two PID namespaces") else {
        return;
    };
    if !can_unshare_pid() {
        common::skipped(format_args!(
            "skipped watches in two PID namespaces: unshare --pid cannot run here"
        ));
        return;
    }
    let _serial = one_at_a_time();
    let tcpstall = env!("CARGO_BIN_EXE_tcpstall");
    for first_inside in [true, false] {
        let long = ["watch", "--", "sleep", "60"];
        // Inside, the watch gets a pid that no process of this namespace has: the very
        // case where a pid cannot tell a live owner from a dead one.
        let inner = (200_000..400_000)
            .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            .unwrap();
        let mut first = if first_inside {
            let script = format!(
                "echo {} > /proc/sys/kernel/ns_last_pid && \"$@\"",
                inner - 1
            );
            Command::new("unshare")
                .args(["--pid", "--fork", "--kill-child", "sh", "-c", &script, "sh"])
                .arg(tcpstall)
                .args(long)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run unshare")
        } else {
            watch(&long[1..])
        };
        // Its cgroup, by its pid in its own namespace (other watches may run beside this
        // test: only that pid tells which cgroup is the first watch's).
        let owner = if first_inside { inner } else { first.id() };
        let prefix = format!("tcpstall-watch-{owner}-");
        let until = Instant::now() + Duration::from_secs(30);
        let cgroup = loop {
            if let Some(new) = watch_cgroups().into_iter().find(|c| {
                c.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            }) {
                break new;
            }
            assert!(Instant::now() < until, "the first watch made no cgroup");
            std::thread::sleep(Duration::from_millis(20));
        };
        let sleeper = wait_for_processes(&mut first, &cgroup, 1);
        let mut second = Command::new(if first_inside { tcpstall } else { "unshare" });
        if !first_inside {
            second.args(["--pid", "--fork", tcpstall]);
        }
        let out = second
            .args(["watch", "--", "true"])
            .stdin(Stdio::null())
            .output()
            .expect("run the second watch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            !stderr.contains("removed"),
            "the second watch removed a cgroup: {stderr}"
        );
        assert!(
            cgroup.exists(),
            "{} removed under a live watch",
            cgroup.display()
        );
        for pid in &sleeper {
            assert!(alive(*pid), "the first watch's command {pid} was ended");
        }
        // The first watch ends as it would: SIGTERM to the watch itself (the
        // sleeper's parent), which ends its command and removes its cgroup.
        let parent = std::fs::read_to_string(format!("/proc/{}/status", sleeper[0]))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("PPid:")
                    .map(|p| p.trim().parse::<u32>().unwrap())
            })
            .unwrap();
        send(parent, SIGTERM);
        let _ = wait_at_most(&mut first, Duration::from_secs(20), "the first watch");
        assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    }
}
