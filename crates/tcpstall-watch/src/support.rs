//! What `watch` needs from this host, checked before anything is loaded, so that where
//! it cannot run one line says what is missing.

use std::path::{Path, PathBuf};

/// The tracepoints the programs attach to. `sock:sock_send_length` is the newest: Linux
/// 6.3 added it; older kernels cannot run `watch`.
pub const TRACEPOINTS: [&str; 4] = [
    "sock_send_length",
    "tcp_probe",
    "timer_expire_entry",
    "tcp_destroy_sock",
];
/// The delayed-ACK timer's function (net/ipv4/tcp_timer.c): timer events are kept only
/// for timers that run it.
pub const DELACK_TIMER_FUNCTION: &str = "tcp_delack_timer";
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Capability bits of `CapEff` (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// What the host offers, read from /proc and /sys.
#[derive(Clone, Debug)]
pub struct Host {
    pub can_load_bpf: bool,
    pub kernel_btf: bool,
    pub missing_tracepoints: Vec<&'static str>,
    /// The address of tcp_delack_timer (zero when /proc/kallsyms hides addresses).
    pub delack_timer_address: Option<u64>,
    /// Where cgroup v2 is mounted.
    pub cgroup2_root: Option<PathBuf>,
}

impl Host {
    pub fn detect() -> Host {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let caps = effective_capabilities().unwrap_or(0);
        let has = |bit: u32| caps & (1u64 << bit) != 0;
        Host {
            can_load_bpf: has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)),
            kernel_btf: Path::new(KERNEL_BTF).exists(),
            missing_tracepoints: missing_tracepoints(&kallsyms),
            delack_timer_address: function_address(&kallsyms, DELACK_TIMER_FUNCTION),
            cgroup2_root: std::fs::read_to_string("/proc/self/mountinfo")
                .ok()
                .and_then(|m| cgroup2_mount(&m)),
        }
    }

    /// The first thing missing for watching, in a few words; `None` when nothing is.
    pub fn missing(&self, run_command: bool) -> Option<String> {
        if !self.can_load_bpf {
            return Some("needs root (or CAP_BPF and CAP_PERFMON) to load eBPF programs".into());
        }
        if !self.kernel_btf {
            return Some(format!("needs a kernel with BTF ({KERNEL_BTF} is missing)"));
        }
        if !self.missing_tracepoints.is_empty() {
            return Some(format!(
                "needs the kernel tracepoints {} (Linux 6.3 or later)",
                self.missing_tracepoints.join(", ")
            ));
        }
        if self.delack_timer_address.is_none() {
            return Some(format!(
                "cannot find {DELACK_TIMER_FUNCTION} in /proc/kallsyms (it shows addresses only with CAP_SYSLOG, or to all when kernel.perf_event_paranoid <= 1, and to none when kernel.kptr_restrict = 2)"
            ));
        }
        if run_command && self.cgroup2_root.is_none() {
            return Some("needs cgroup v2 mounted to watch a command".into());
        }
        None
    }
}

fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// A tracepoint `name` built into the kernel has the symbol `__traceiter_<name>`.
fn missing_tracepoints(kallsyms: &str) -> Vec<&'static str> {
    TRACEPOINTS
        .into_iter()
        .filter(|tp| {
            let symbol = format!("__traceiter_{tp}");
            !kallsyms
                .lines()
                .any(|line| line.split_whitespace().nth(2) == Some(symbol.as_str()))
        })
        .collect()
}

fn function_address(kallsyms: &str, name: &str) -> Option<u64> {
    kallsyms.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let address = fields.next()?;
        let _kind = fields.next()?;
        (fields.next()? == name && fields.next().is_none())
            .then(|| u64::from_str_radix(address, 16).ok())
            .flatten()
            .filter(|&a| a != 0)
    })
}

/// The mount point of cgroup v2 in a /proc/self/mountinfo text.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        (fs.split_whitespace().next()? == "cgroup2")
            .then(|| mount.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cgroup2_on_a_hybrid_host() {
        let mountinfo = "\
35 24 0:30 / /sys/fs/cgroup rw - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("36 35 0:31 / /x rw - cgroup cgroup rw"), None);
    }

    #[test]
    fn reads_symbols() {
        let kallsyms = "\
ffffffff81eb68a0 T __traceiter_sock_send_length
ffffffff81eb6e20 T __traceiter_tcp_probe
ffffffff82028ea0 t tcp_delack_timer
0000000000000000 t hidden_function
ffffffffc0000000 t module_function [some_module]";
        assert_eq!(
            function_address(kallsyms, "tcp_delack_timer"),
            Some(0xffffffff82028ea0)
        );
        assert_eq!(function_address(kallsyms, "hidden_function"), None);
        assert_eq!(function_address(kallsyms, "module_function"), None);
        assert_eq!(
            missing_tracepoints(kallsyms),
            vec!["timer_expire_entry", "tcp_destroy_sock"]
        );
    }

    #[test]
    fn says_the_first_thing_missing() {
        let host = Host {
            can_load_bpf: true,
            kernel_btf: true,
            missing_tracepoints: vec![],
            delack_timer_address: Some(1),
            cgroup2_root: None,
        };
        assert_eq!(host.missing(false), None);
        assert!(host.missing(true).unwrap().contains("cgroup v2"));
        let old = Host {
            missing_tracepoints: vec!["sock_send_length"],
            ..host.clone()
        };
        assert!(old.missing(false).unwrap().contains("6.3"));
        let user = Host {
            can_load_bpf: false,
            ..old
        };
        assert!(user.missing(false).unwrap().contains("root"));
    }
}
