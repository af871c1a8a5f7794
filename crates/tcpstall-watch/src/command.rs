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

/// The prefix of the cgroups `watch` creates; the rest of the name is the owner's pid
/// (as its own PID namespace numbers it) and a token that no other watch shares, since
/// two watches in two PID namespaces can have the same pid.
const CGROUP_PREFIX: &str = "tcpstall-watch-";

/// A cgroup created for one command, removed when dropped.
///
/// Ownership is a lock, not a pid: the watch that creates the cgroup holds an exclusive
/// flock(2) on its directory for its whole life (the open directory is close-on-exec, so
/// the command does not inherit it). The kernel drops the lock when the owner's last
/// descriptor closes, at its exit however it ends, so a cgroup whose lock can be taken
/// has no live owner, in any PID namespace ([`remove_stale`]).
pub struct CommandCgroup {
    path: PathBuf,
    directory: File,
    id: u64,
}

impl CommandCgroup {
    /// Creates `tcpstall-watch-<pid>-<token>` under the cgroup v2 mount and locks it.
    pub fn create(cgroup2_root: &Path) -> io::Result<CommandCgroup> {
        // Between mkdir and flock the new cgroup is unlocked: the root's lock keeps
        // another watch's clean-up from taking it for a dead one's meanwhile.
        let root = RootLock::take(cgroup2_root)?;
        let path = cgroup2_root.join(format!(
            "{CGROUP_PREFIX}{}-{:016x}",
            std::process::id(),
            unique_token()
        ));
        std::fs::create_dir(&path)?;
        let directory = File::open(&path)?;
        if !try_lock(&directory)? {
            return Err(io::Error::other(format!(
                "{} is locked by another process",
                path.display()
            )));
        }
        drop(root);
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

/// A token no other watch's cgroup name has: the boot-time clock's nanoseconds mixed
/// with this process's pid and the address of a fresh allocation.
fn unique_token() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    let nanos = (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64);
    let place = Box::new(0u8);
    let address = &*place as *const u8 as u64;
    (nanos ^ (u64::from(std::process::id()) << 40) ^ address.rotate_left(17))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// An exclusive flock(2) on `file` if no one else holds one: true when taken.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock(2) on a descriptor this File owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// The cgroup root's flock, held while a watch creates and locks its cgroup or while
/// another looks for stale ones; released when dropped (the descriptor closes).
struct RootLock {
    _root: File,
}

impl RootLock {
    fn take(cgroup2_root: &Path) -> io::Result<RootLock> {
        let root = File::open(cgroup2_root)?;
        // SAFETY: flock(2) on a descriptor this File owns; both holders of this lock
        // keep it for a few system calls only.
        if unsafe { libc::flock(root.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RootLock { _root: root })
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
    /// The pid of the watch that created it, as its PID namespace numbered it.
    pub owner: u32,
    /// Processes still in it, ended.
    pub ended: usize,
    /// Removal failed: why.
    pub error: Option<String>,
}

/// Removes the `tcpstall-watch-*` cgroups under `cgroup2_root` that no live watch owns
/// (their lock can be taken, see [`CommandCgroup`]), ending the processes still in them
/// (SIGTERM, then SIGKILL after `grace`): what a watch killed before it could clean up
/// left behind. A cgroup whose owner lives, in whatever PID namespace, is left alone.
pub fn remove_stale(cgroup2_root: &Path, grace: Duration) -> Vec<Stale> {
    let Ok(entries) = std::fs::read_dir(cgroup2_root) else {
        return Vec::new();
    };
    // Taken under the root's lock, so that a cgroup being created is never taken for
    // an abandoned one; each taken cgroup's own lock then keeps any other clean-up off
    // it while its processes end.
    let mut taken = Vec::new();
    if let Ok(_root) = RootLock::take(cgroup2_root) {
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            let Some(owner) = name
                .to_str()
                .and_then(|n| n.strip_prefix(CGROUP_PREFIX))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let Ok(directory) = File::open(&path) else {
                continue;
            };
            if !directory.metadata().is_ok_and(|m| m.is_dir()) {
                continue;
            }
            if try_lock(&directory).unwrap_or(false) {
                taken.push((path, owner, directory));
            }
        }
    }
    let mut stale = Vec::new();
    for (path, owner, _lock) in taken {
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
