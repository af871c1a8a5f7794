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
use std::time::Duration;

/// A cgroup created for one command, removed when dropped.
pub struct CommandCgroup {
    path: PathBuf,
    directory: File,
    id: u64,
}

impl CommandCgroup {
    /// Creates `tcpstall-watch-<pid>` under the cgroup v2 mount.
    pub fn create(cgroup2_root: &Path) -> io::Result<CommandCgroup> {
        let path = cgroup2_root.join(format!("tcpstall-watch-{}", std::process::id()));
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
        let mut process = Command::new(program);
        process.args(args);
        // SAFETY: between fork and exec only write(2), which is async-signal-safe, runs;
        // "0" moves the writing process into the cgroup (cgroup v2 cgroup.procs).
        unsafe {
            process.pre_exec(move || {
                if libc::write(procs_fd, b"0".as_ptr().cast(), 1) == 1 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            });
        }
        let child = process.spawn();
        drop(procs);
        child
    }
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
