//! What this process may do: network namespaces, TUN devices and AF_PACKET capture need
//! CAP_NET_ADMIN and CAP_NET_RAW (root), and the namespaces need `ip` from iproute2.

use std::path::Path;

/// Capability bits of `CapEff` in /proc/self/status (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_ADMIN: u32 = 21;

/// What the lab can use here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Privileges {
    pub net_admin: bool,
    pub net_raw: bool,
    pub sys_admin: bool,
    pub ip_tool: bool,
    pub tun_device: bool,
}

impl Privileges {
    /// Reads this process's effective capabilities and looks for `ip` and /dev/net/tun.
    pub fn detect() -> Privileges {
        let caps = effective_capabilities().unwrap_or(0);
        let has = |bit: u32| caps & (1u64 << bit) != 0;
        Privileges {
            net_admin: has(CAP_NET_ADMIN),
            net_raw: has(CAP_NET_RAW),
            sys_admin: has(CAP_SYS_ADMIN),
            ip_tool: find_in_path("ip"),
            tun_device: Path::new("/dev/net/tun").exists(),
        }
    }

    /// Namespaces, a veth pair and TUN devices: the delay line and private loopback.
    pub fn can_use_namespaces(&self) -> bool {
        self.net_admin && self.sys_admin && self.ip_tool && self.tun_device
    }

    /// AF_PACKET capture, inside a namespace of the lab's own.
    pub fn can_capture(&self) -> bool {
        self.net_raw && self.can_use_namespaces()
    }

    /// Why namespaces cannot be used, in a few words; `None` when they can.
    pub fn why_not_namespaces(&self) -> Option<String> {
        let mut missing = Vec::new();
        if !(self.net_admin && self.sys_admin) {
            missing.push("root (CAP_NET_ADMIN and CAP_SYS_ADMIN)");
        }
        if !self.ip_tool {
            missing.push("`ip` from iproute2");
        }
        if !self.tun_device {
            missing.push("/dev/net/tun");
        }
        (!missing.is_empty()).then(|| format!("needs {}", missing.join(", ")))
    }

    /// Why capture cannot be used; `None` when it can.
    pub fn why_not_capture(&self) -> Option<String> {
        match self.why_not_namespaces() {
            Some(why) => Some(why),
            None if !self.net_raw => Some("needs CAP_NET_RAW (root)".into()),
            None => None,
        }
    }
}

fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

fn find_in_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(program).is_file())
}
