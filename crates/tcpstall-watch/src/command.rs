//! `watch -- CMD`: the command runs in a cgroup v2 of its own, so the programs watch only
//! it and its children (their sends carry that cgroup's id) and the sockops fix attaches
//! to it alone.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// The prefix of the cgroups `watch` creates; the rest of the name is the owner's pid.
const CGROUP_PREFIX: &str = "tcpstall-watch-";

/// A cgroup created for one command, removed when dropped.
pub struct CommandCgroup {
    path: PathBuf,
    directory: File,
    id: u64,
}

impl CommandCgroup {
    /// Creates `tcpstall-watch-<pid>` under the cgroup v2 mount.
    pub fn create(cgroup2_root: &Path) -> io::Result<CommandCgroup> {
        let path = cgroup2_root.join(format!("{CGROUP_PREFIX}{}", std::process::id()));
        std::fs::create_dir(&path)?;
        let directory = File::open(&path)?;
        // bpf_get_current_cgroup_id() is the kernfs node id: the directory's inode.
        let id = directory.metadata()?.ino();
        Ok(CommandCgroup {
            path,
            directory,
            id,
        })
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

    /// Starts the command inside the cgroup: the child moves itself there before exec,
    /// so none of its sockets are created outside it.
    pub fn spawn(&self, command: &[OsString]) -> io::Result<Child> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.procs"))?;
        let procs_fd = procs.as_raw_fd();
        let watcher = std::process::id() as libc::pid_t;
        let mut process = Command::new(program);
        process.args(args);
        // SAFETY: between fork and exec only write(2), prctl(2), getppid(2) and kill(2)
        // run, all async-signal-safe; "0" moves the writing process into the cgroup
        // (cgroup v2 cgroup.procs). The command is sent SIGTERM if watch dies without
        // ending it (SIGKILL, a crash): it lives no longer than its watch.
        unsafe {
            process.pre_exec(move || {
                if libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
                // The command does not inherit the capabilities watch was given as
                // ambient ones (a systemd unit's AmbientCapabilities=): it runs with
                // those its own user has.
                if libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // Watch died before the request was in place.
                if libc::getppid() != watcher {
                    libc::kill(libc::getpid(), libc::SIGTERM);
                }
                Ok(())
            });
        }
        let child = process.spawn();
        drop(procs);
        child
    }
}

impl CommandCgroup {
    /// The processes in the cgroup (the command and its children), by pid.
    pub fn processes(&self) -> Vec<libc::pid_t> {
        processes(&self.path)
    }

    /// Ends every process left in the cgroup: SIGTERM, then SIGKILL for those still
    /// there after `grace`. Returns how many there were.
    pub fn end_processes(&self, grace: Duration) -> usize {
        end_processes(&self.path, grace)
    }

    /// SIGKILL to every process in the cgroup.
    pub fn kill_processes(&self) {
        kill_processes(&self.path);
    }
}

fn processes(cgroup: &Path) -> Vec<libc::pid_t> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Waits up to `limit` for the cgroup to hold no process; true when it holds none.
fn wait_empty(cgroup: &Path, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        if processes(cgroup).is_empty() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill_processes(cgroup: &Path) {
    // cgroup.kill (Linux 5.14) kills them all at once, forks in flight included.
    if std::fs::write(cgroup.join("cgroup.kill"), b"1").is_err() {
        for pid in processes(cgroup) {
            // SAFETY: kill(2) with a pid read from cgroup.procs.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn end_processes(cgroup: &Path, grace: Duration) -> usize {
    let pids = processes(cgroup);
    if pids.is_empty() {
        return 0;
    }
    for &pid in &pids {
        // SAFETY: kill(2) with a pid read from cgroup.procs.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    if !wait_empty(cgroup, grace) {
        kill_processes(cgroup);
        wait_empty(cgroup, Duration::from_secs(1));
    }
    pids.len()
}

/// A cgroup another `watch` created and did not remove (it was killed with SIGKILL, or
/// crashed), found and removed by [`remove_stale`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    pub path: PathBuf,
    /// The pid of the watch that created it.
    pub owner: u32,
    /// Processes still in it, ended.
    pub ended: usize,
    /// Removal failed: why.
    pub error: Option<String>,
}

/// Removes the `tcpstall-watch-PID` cgroups under `cgroup2_root` whose watch (PID) is
/// gone, ending the processes still in them (SIGTERM, then SIGKILL after `grace`): what
/// a watch killed before it could clean up left behind.
pub fn remove_stale(cgroup2_root: &Path, grace: Duration) -> Vec<Stale> {
    let Ok(entries) = std::fs::read_dir(cgroup2_root) else {
        return Vec::new();
    };
    let own = std::process::id();
    let mut stale = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CGROUP_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if owner == own || Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let ended = end_processes(&path, grace);
        let mut error = None;
        for attempt in 0..50 {
            match std::fs::remove_dir(&path) {
                Ok(()) => {
                    error = None;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    error = None;
                    break;
                }
                Err(e) => {
                    error = Some(e.to_string());
                    if attempt < 49 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
        stale.push(Stale {
            path,
            owner,
            ended,
            error,
        });
    }
    stale
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        // A cgroup can be removed once its last process has exited; exiting children
        // may take a moment to leave it.
        for _ in 0..50 {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!(
            "tcpstall watch: could not remove {} (processes still in it)",
            self.path.display()
        );
    }
}

/// The exit status a shell gives a command: its code, or 128 plus the signal that
/// killed it.
pub fn shell_status(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => (128 + signal) as u8,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_as_a_shell_reports_them() {
        assert_eq!(shell_status(ExitStatus::from_raw(0)), 0);
        assert_eq!(shell_status(ExitStatus::from_raw(3 << 8)), 3);
        // killed by SIGINT (2)
        assert_eq!(shell_status(ExitStatus::from_raw(2)), 130);
    }
}
