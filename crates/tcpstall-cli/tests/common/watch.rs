//! What the `watch` tests share: whether this host can watch, the echo_pair example as a
//! workload, free loopback ports, retries for timing noise.

use std::path::PathBuf;
use std::process::Command;

/// Effective root (CAP_SYS_ADMIN in CapEff).
pub fn is_root() -> bool {
    super::effective_capabilities() & (1 << 21) != 0
}

/// `Some(())` when `tcpstall watch` can run here; otherwise prints why `what` is skipped.
pub fn can_watch(what: &str) -> Option<()> {
    if !is_root() {
        eprintln!("skipped {what}: needs root");
        return None;
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        eprintln!("skipped {what}: the kernel has no BTF");
        return None;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    if !kallsyms.contains(" __traceiter_sock_send_length\n") {
        eprintln!("skipped {what}: the kernel lacks sock:sock_send_length (Linux 6.3+)");
        return None;
    }
    Some(())
}

/// The echo_pair example beside the tcpstall binary (cargo test builds the examples);
/// built when a narrower test command did not.
pub fn echo_pair() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tcpstall"));
    let path = bin
        .parent()
        .expect("target directory")
        .join("examples")
        .join("echo_pair");
    if !path.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "tcpstall-cli", "--example", "echo_pair"]);
        if bin.components().any(|c| c.as_os_str() == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo");
        assert!(status.success(), "building the echo_pair example");
    }
    path
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
