//! The systemd unit's sandbox fits what `watch` does: every system call a real run of
//! the service's mode makes (the programs loaded and read, the metrics endpoint
//! scraped) is in the unit's `SystemCallFilter=`, as systemd expands its groups, and
//! the bounds the unit sets are there.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;
use common::watch::{can_watch, free_port, http_get};

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/systemd/tcpstall-watch.service"
);

/// The values of `key=` in the unit, one per line it appears on.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

/// systemd's system call groups (`@system-service`, ...) and what each holds, groups
/// included by name, from `systemd-analyze syscall-filter`.
fn syscall_groups() -> BTreeMap<String, Vec<String>> {
    let out = Command::new("systemd-analyze")
        .arg("syscall-filter")
        .stderr(Stdio::null())
        .output()
        .expect("run systemd-analyze syscall-filter");
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let item = line.trim();
        if item.is_empty() || item.starts_with('#') {
            continue;
        }
        if !line.starts_with(' ') && item.starts_with('@') {
            current = Some(item.to_string());
            groups.entry(item.to_string()).or_default();
        } else if let Some(group) = &current {
            groups.get_mut(group).unwrap().push(item.to_string());
        }
    }
    groups
}

fn expand(item: &str, groups: &BTreeMap<String, Vec<String>>, into: &mut BTreeSet<String>) {
    match groups.get(item) {
        Some(members) => {
            for member in members {
                expand(member, groups, into);
            }
        }
        None => {
            into.insert(item.to_string());
        }
    }
}

/// The system calls the unit allows: its allow lists' union, less its deny lists (`~`).
fn allowed_by_unit(unit: &str) -> BTreeSet<String> {
    let groups = syscall_groups();
    let (mut allowed, mut denied) = (BTreeSet::new(), BTreeSet::new());
    for value in unit_values(unit, "SystemCallFilter") {
        let (into, items) = match value.strip_prefix('~') {
            Some(items) => (&mut denied, items.to_string()),
            None => (&mut allowed, value),
        };
        for item in items.split_whitespace() {
            expand(item, &groups, into);
        }
    }
    allowed.difference(&denied).cloned().collect()
}

#[test]
fn the_unit_bounds_the_agent() {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for key in [
        "LimitNOFILE",
        "MemoryMax",
        "TasksMax",
        "SystemCallFilter",
        "SystemCallArchitectures",
        "IPAddressDeny",
        "IPAddressAllow",
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "RestrictAddressFamilies",
        "Restart",
    ] {
        assert!(!unit_values(&unit, key).is_empty(), "the unit lacks {key}=");
    }
    assert_eq!(unit_values(&unit, "Restart"), ["on-failure"]);
    assert_eq!(unit_values(&unit, "IPAddressDeny"), ["any"]);
}

#[test]
#[ignore = "needs root, a kernel with BTF (watch), strace and systemd-analyze"]
fn every_system_call_watch_makes_is_in_the_units_filter() {
    let Some(()) = can_watch("the unit's system call filter") else {
        return;
    };
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let allowed = allowed_by_unit(&unit);
    assert!(
        allowed.contains("bpf") && allowed.contains("read"),
        "{allowed:?}"
    );

    let dir = TempDir::new("watch_sandbox", "syscalls");
    let trace = dir.0.join("strace.txt");
    let port = free_port();
    let mut watch = Command::new("strace")
        .args(["-f", "-qq", "-c", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_tcpstall"))
        .args(["watch", "--duration", "4", "--prometheus"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run strace (Debian: strace)");
    // Scrape it while it runs, as Prometheus would.
    let until = Instant::now() + Duration::from_secs(30);
    let mut scraped = false;
    while !scraped && Instant::now() < until && watch.try_wait().unwrap().is_none() {
        scraped = http_get(port, "/metrics").is_some();
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = watch.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "watch under strace: {stderr}");
    assert!(scraped, "the endpoint never answered: {stderr}");

    let summary = std::fs::read_to_string(&trace).unwrap();
    let used: BTreeSet<String> = summary
        .lines()
        .skip(2)
        .filter(|l| !l.starts_with('-') && !l.ends_with(" total"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    assert!(used.contains("bpf"), "no bpf(2) traced: {summary}");
    let refused: Vec<&String> = used.difference(&allowed).collect();
    assert!(
        refused.is_empty(),
        "the unit's SystemCallFilter= would refuse {refused:?} (traced: {used:?})"
    );
}
