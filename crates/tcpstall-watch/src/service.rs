//! Names the service a process belongs to, from its cgroup v2 path (the `0::` line of
//! /proc/PID/cgroup): a systemd unit (`nginx.service`, `session-3.scope`), or a
//! container's id from the directory its runtime made for it.
//!
//! The container directories recognised, with a 64-hex-digit id:
//! - `docker-ID.scope` (Docker, systemd cgroup driver), `docker/ID` (cgroupfs driver);
//! - `cri-containerd-ID.scope` (containerd's CRI plugin), `crio-ID.scope` (CRI-O),
//!   `libpod-ID.scope` (Podman);
//! - `kubepods/.../podUID/ID` (the kubelet's cgroupfs driver).
//!
//! A container is named `RUNTIME:ID12` (the id's first 12 digits, as `docker ps` shows
//! it); the runtime is `container` when only the id says so.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

/// Length of a container id (a SHA-256 in hex, as Docker, containerd and CRI-O make it).
const CONTAINER_ID_LEN: usize = 64;
/// The digits of a container id shown (`docker ps` shows 12).
const SHORT_ID_LEN: usize = 12;
/// Runtimes that name a container's systemd scope `PREFIX-ID.scope`, and the runtime
/// each is.
const SCOPE_PREFIXES: [(&str, &str); 4] = [
    ("docker-", "docker"),
    ("cri-containerd-", "containerd"),
    ("crio-", "cri-o"),
    ("libpod-", "podman"),
];
/// Systemd unit types a process can be in (systemd.unit(5)): a service or a scope; a
/// slice holds only other units.
const UNIT_SUFFIXES: [&str; 2] = [".service", ".scope"];
/// Processes whose service is remembered at most; past it the memory starts afresh.
const MAX_KNOWN: usize = 1 << 16;

/// What kind of name a service has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceKind {
    /// A systemd unit (service or scope).
    SystemdUnit,
    /// A container, by its runtime's id.
    Container,
    /// Neither: the cgroup's own directory name (`/` for the root).
    Cgroup,
}

/// The service of a process: its cgroup and the name taken from it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Service {
    /// `nginx.service`, `docker:0123456789ab`, or the cgroup's directory name.
    pub name: String,
    pub kind: ServiceKind,
    /// The cgroup v2 path, from the cgroup root as /proc/PID/cgroup shows it.
    pub cgroup: String,
}

impl Service {
    /// The service of a cgroup path (`/system.slice/nginx.service`): the innermost
    /// container or systemd unit on the path, else its last directory.
    pub fn from_cgroup(path: &str) -> Service {
        let cgroup = path.to_string();
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate().rev() {
            if let Some((runtime, id)) = container(part, i.checked_sub(1).map(|j| parts[j])) {
                return Service {
                    name: format!("{runtime}:{}", &id[..SHORT_ID_LEN]),
                    kind: ServiceKind::Container,
                    cgroup,
                };
            }
        }
        if let Some(unit) = parts.iter().rev().find(|p| {
            UNIT_SUFFIXES
                .iter()
                .any(|s| p.len() > s.len() && p.ends_with(s))
        }) {
            return Service {
                name: (*unit).to_string(),
                kind: ServiceKind::SystemdUnit,
                cgroup,
            };
        }
        Service {
            name: parts.last().map_or("/".to_string(), |p| (*p).to_string()),
            kind: ServiceKind::Cgroup,
            cgroup,
        }
    }
}

fn is_container_id(text: &str) -> bool {
    text.len() == CONTAINER_ID_LEN && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The runtime and id of a container directory, given its parent's name.
fn container<'a>(part: &'a str, parent: Option<&str>) -> Option<(&'static str, &'a str)> {
    for (prefix, runtime) in SCOPE_PREFIXES {
        if let Some(id) = part
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(".scope"))
            .filter(|id| is_container_id(id))
        {
            return Some((runtime, id));
        }
    }
    if is_container_id(part) {
        let runtime = match parent {
            Some("docker") => "docker",
            _ => "container",
        };
        return Some((runtime, part));
    }
    None
}

/// The cgroup v2 path in a /proc/PID/cgroup text: its `0::PATH` line.
pub fn cgroup2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|p| p.trim_end())
        .filter(|p| p.starts_with('/'))
}

/// Services of processes, read from /proc and remembered by pid and comm (a pid reused
/// by another program is read again).
pub struct ServiceNames {
    proc_root: std::path::PathBuf,
    known: HashMap<(u32, String), Option<Service>>,
}

impl Default for ServiceNames {
    fn default() -> ServiceNames {
        ServiceNames::new("/proc")
    }
}

impl ServiceNames {
    pub fn new(proc_root: impl AsRef<Path>) -> ServiceNames {
        ServiceNames {
            proc_root: proc_root.as_ref().to_path_buf(),
            known: HashMap::new(),
        }
    }

    /// The service of a running process; `None` when it has exited or its cgroup cannot
    /// be read.
    pub fn service(&mut self, pid: u32, comm: &str) -> Option<Service> {
        let key = (pid, comm.to_string());
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        let text =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("cgroup")).ok()?;
        let service = cgroup2_path(&text).map(Service::from_cgroup);
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        self.known.insert(key, service.clone());
        service
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f9a2c1d7b3e8f60a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcdef01";

    fn named(path: &str) -> (String, ServiceKind) {
        let s = Service::from_cgroup(path);
        assert_eq!(s.cgroup, path);
        (s.name, s.kind)
    }

    #[test]
    fn systemd_units() {
        assert_eq!(
            named("/system.slice/nginx.service"),
            ("nginx.service".into(), ServiceKind::SystemdUnit)
        );
        assert_eq!(
            named("/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service"),
            ("foo.service".into(), ServiceKind::SystemdUnit)
        );
        assert_eq!(
            named("/user.slice/user-1000.slice/session-3.scope"),
            ("session-3.scope".into(), ServiceKind::SystemdUnit)
        );
        // A service's own sub-cgroup (Delegate=yes) is still the service.
        assert_eq!(
            named("/system.slice/app.service/worker"),
            ("app.service".into(), ServiceKind::SystemdUnit)
        );
    }

    #[test]
    fn containers_as_their_runtimes_name_them() {
        let short = &ID[..12];
        for (path, name) in [
            (
                format!("/system.slice/docker-{ID}.scope"),
                format!("docker:{short}"),
            ),
            (format!("/docker/{ID}"), format!("docker:{short}")),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-{ID}.scope"
                ),
                format!("containerd:{short}"),
            ),
            (
                format!("/kubepods.slice/kubepods-pod1.slice/crio-{ID}.scope"),
                format!("cri-o:{short}"),
            ),
            (
                format!(
                    "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
                ),
                format!("podman:{short}"),
            ),
            (
                format!("/kubepods/besteffort/pod0d1e/{ID}"),
                format!("container:{short}"),
            ),
        ] {
            assert_eq!(named(&path), (name, ServiceKind::Container), "{path}");
        }
        // Not a container id: too short, not hex.
        assert_eq!(named("/docker-1234.scope").1, ServiceKind::SystemdUnit);
        assert_eq!(named(&format!("/x/{}", &ID[1..])).1, ServiceKind::Cgroup);
    }

    #[test]
    fn other_cgroups_by_their_directory() {
        assert_eq!(named("/"), ("/".into(), ServiceKind::Cgroup));
        assert_eq!(
            named("/tcpstall-watch-123"),
            ("tcpstall-watch-123".into(), ServiceKind::Cgroup)
        );
        assert_eq!(named("/a.slice"), ("a.slice".into(), ServiceKind::Cgroup));
    }

    #[test]
    fn reads_the_cgroup2_line() {
        let text = "12:memory:/x\n0::/system.slice/sshd.service\n";
        assert_eq!(cgroup2_path(text), Some("/system.slice/sshd.service"));
        assert_eq!(cgroup2_path("1:cpu:/\n"), None);
    }

    #[test]
    fn names_this_process() {
        let mut names = ServiceNames::default();
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let expected = cgroup2_path(&own).map(Service::from_cgroup);
        assert_eq!(names.service(std::process::id(), comm.trim()), expected);
        assert_eq!(names.service(u32::MAX, "none"), None);
    }
}
