//! The deployment files of `tcpstall watch`: the systemd unit passes `systemd-analyze
//! verify` (its ExecStart pointed at the binary built here, the rest as shipped), and
//! the unit and the Kubernetes DaemonSet grant exactly the capabilities the least
//! privilege tests (watch_capabilities.rs) run watch with.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::TempDir;
use common::watch::{NOT_ROOT, WATCH};

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/systemd/tcpstall-watch.service"
);
const DAEMONSET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/kubernetes/tcpstall-watch-daemonset.yaml"
);
/// Where the unit expects the binary (the Debian package puts it there).
const INSTALLED: &str = "/usr/bin/tcpstall";
/// watch's arguments, which the unit reads from /etc/default/tcpstall-watch.
const DEFAULTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/debian/tcpstall-watch.default"
);

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `CAP_BPF` → `bpf`, as setpriv and the tests name them.
fn setpriv_name(cap: &str) -> String {
    cap.trim_start_matches("CAP_").to_lowercase()
}

#[test]
fn the_systemd_unit_verifies() {
    if !Path::new("/usr/bin/systemd-analyze").exists()
        && Command::new("systemd-analyze")
            .arg("--version")
            .output()
            .is_err()
    {
        common::skipped(format_args!(
            "skipped: systemd-analyze not installed (Debian: systemd)"
        ));
        return;
    }
    let unit = read(UNIT);
    assert!(unit.contains(&format!("ExecStart={INSTALLED} ")), "{unit}");
    let dir = TempDir::new("watch_deploy", "verify");
    let file = dir.write(
        "tcpstall-watch.service",
        unit.replace(INSTALLED, env!("CARGO_BIN_EXE_tcpstall"))
            .as_bytes(),
    );
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on keys it ignores; it says so on stderr, which must stay empty.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {}\n{stderr}",
        out.status
    );
    for needed in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "EnvironmentFile=-/etc/default/tcpstall-watch",
    ] {
        assert!(unit.contains(needed), "the unit lacks {needed}");
    }
    let defaults = read(DEFAULTS);
    assert!(
        defaults.contains("\nARGS=\"--prometheus 127.0.0.1:"),
        "{defaults}"
    );
}

#[test]
fn the_unit_and_the_daemonset_grant_the_tested_capabilities() {
    let unit = read(UNIT);
    let values = |key: &str| -> BTreeSet<String> {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the unit"))
            .split_whitespace()
            .map(setpriv_name)
            .collect()
    };
    // Not root (DynamicUser): the host-wide set, plus reading other users' /proc/PID/fd.
    let tested: BTreeSet<String> = WATCH
        .iter()
        .chain([&NOT_ROOT])
        .map(|c| c.to_string())
        .collect();
    assert!(unit.contains("DynamicUser=yes"));
    assert_eq!(values("AmbientCapabilities="), tested);
    assert_eq!(values("CapabilityBoundingSet="), tested);

    // Root in its container, all capabilities dropped but these.
    let daemonset = read(DAEMONSET);
    let added = daemonset
        .lines()
        .find_map(|l| l.trim().strip_prefix("add:"))
        .expect("capabilities.add in the DaemonSet");
    let added: BTreeSet<String> = added
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|c| setpriv_name(c.trim().trim_matches('"')))
        .collect();
    let as_root: BTreeSet<String> = WATCH.iter().map(|c| c.to_string()).collect();
    assert_eq!(added, as_root);
    assert!(daemonset.contains("drop: [\"ALL\"]"));
    assert!(daemonset.contains("runAsUser: 0"));
    assert!(daemonset.contains("allowPrivilegeEscalation: false"));
}
