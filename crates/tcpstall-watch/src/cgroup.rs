//! `watch --cgroup PATH` and `--unit NAME`: a service already running, watched (and
//! fixed) through its cgroup v2, which `watch` opens but neither creates nor removes.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// How deep under the cgroup root a unit's directory is looked for when systemd does not
/// answer: systemd nests units in slices (`user.slice/user-1000.slice/user@1000.service/
/// app.slice/x.service` is 5 deep); 8 leaves room for containers' own nesting.
const MAX_SEARCH_DEPTH: usize = 8;
/// Directories visited at most in that search, so that it ends on any host.
const MAX_SEARCH_DIRECTORIES: usize = 100_000;
/// Systemd's unit type suffixes (systemd.unit(5)) a process can run in; a bare NAME is a
/// service, as `systemctl` takes it.
const UNIT_SUFFIXES: [&str; 3] = [".service", ".scope", ".slice"];

/// An existing cgroup, open.
pub struct ServiceCgroup {
    path: PathBuf,
    directory: File,
    id: u64,
}

impl ServiceCgroup {
    /// Opens the cgroup at `path`: absolute under the cgroup v2 mount, or as
    /// /proc/PID/cgroup shows it (from the mount: `/system.slice/nginx.service`).
    pub fn open(cgroup2_root: &Path, path: &Path) -> Result<ServiceCgroup, String> {
        let full = if path.starts_with(cgroup2_root) {
            path.to_path_buf()
        } else {
            let relative: PathBuf = path
                .components()
                .filter(|c| !matches!(c, Component::RootDir))
                .collect();
            cgroup2_root.join(relative)
        };
        if full.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(format!("{}: `..` is not allowed", path.display()));
        }
        if !full.join("cgroup.procs").is_file() {
            return Err(format!(
                "{} is not a cgroup v2 directory (no cgroup.procs)",
                full.display()
            ));
        }
        let directory = File::open(&full).map_err(|e| format!("{}: {e}", full.display()))?;
        // bpf_get_current_cgroup_id() is the kernfs node id: the directory's inode.
        let id = directory
            .metadata()
            .map_err(|e| format!("{}: {e}", full.display()))?
            .ino();
        Ok(ServiceCgroup {
            path: full,
            directory,
            id,
        })
    }

    /// Opens the cgroup of systemd unit `name` (a bare name is a service): the one
    /// `systemctl show -P ControlGroup` gives, or, where systemd does not answer, the
    /// directory of that name under the cgroup root, as systemd lays units out.
    pub fn unit(cgroup2_root: &Path, name: &str) -> Result<ServiceCgroup, String> {
        if name.is_empty() || name.contains('/') {
            return Err(format!("{name:?} is not a unit name"));
        }
        let unit = if UNIT_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            name.to_string()
        } else {
            format!("{name}.service")
        };
        if let Some(path) = systemd_control_group(&unit) {
            return ServiceCgroup::open(cgroup2_root, Path::new(&path));
        }
        match find_directory(cgroup2_root, &unit) {
            Some(path) => ServiceCgroup::open(cgroup2_root, &path),
            None => Err(format!(
                "unit {unit}: systemd does not know it and no cgroup of that name is under {}",
                cgroup2_root.display()
            )),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory, to attach cgroup programs to.
    pub fn directory(&self) -> &File {
        &self.directory
    }
}

/// The unit's cgroup as systemd has it, when systemd runs and the unit is active.
fn systemd_control_group(unit: &str) -> Option<String> {
    let out = Command::new("systemctl")
        .args(["show", "--property=ControlGroup", "--value", "--", unit])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && path.starts_with('/')).then_some(path)
}

/// The first directory named `name` under `root`, breadth first, within the bounds.
fn find_directory(root: &Path, name: &str) -> Option<PathBuf> {
    let mut level = vec![root.to_path_buf()];
    let mut visited = 0;
    for _ in 0..MAX_SEARCH_DEPTH {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                visited += 1;
                if visited > MAX_SEARCH_DIRECTORIES {
                    return None;
                }
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if entry.file_name() == name {
                    return Some(entry.path());
                }
                next.push(entry.path());
            }
        }
        if next.is_empty() {
            return None;
        }
        level = next;
    }
    None
}

impl std::fmt::Debug for ServiceCgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceCgroup")
            .field("path", &self.path)
            .field("id", &self.id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_root(test: &str) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("tcpstall-cgroup-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["system.slice/web.service", "user.slice/u.slice/app.scope"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join("cgroup.procs"), "").unwrap();
        }
        root
    }

    #[test]
    fn opens_a_cgroup_by_either_path() {
        let root = fake_root("paths");
        let a = ServiceCgroup::open(&root, Path::new("/system.slice/web.service")).unwrap();
        let b = ServiceCgroup::open(&root, &root.join("system.slice/web.service")).unwrap();
        assert_eq!(a.path(), b.path());
        assert_eq!(a.id(), b.id());
        let err = ServiceCgroup::open(&root, Path::new("/system.slice")).unwrap_err();
        assert!(err.contains("not a cgroup v2 directory"), "{err}");
        let err = ServiceCgroup::open(&root, Path::new("/system.slice/../x")).unwrap_err();
        assert!(err.contains(".."), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn finds_a_unit_by_its_directory() {
        let root = fake_root("units");
        let found = |name: &str| find_directory(&root, name);
        assert_eq!(
            found("web.service"),
            Some(root.join("system.slice/web.service"))
        );
        assert_eq!(
            found("app.scope"),
            Some(root.join("user.slice/u.slice/app.scope"))
        );
        assert_eq!(found("missing.service"), None);
        assert!(ServiceCgroup::unit(&root, "a/b").is_err());
        assert!(ServiceCgroup::unit(&root, "").is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
