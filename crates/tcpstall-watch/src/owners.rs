//! Names the process that holds a socket, from its inode: the kernel links each socket
//! descriptor as `socket:[INODE]` under /proc/PID/fd. The eBPF side reports only the
//! delayer's socket inode, so that no send pays for naming processes; this runs only for
//! the timers that held a stall.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::event::Process;

/// The sockets remembered at most (a few MB); past it the memory starts afresh.
const MAX_KNOWN: usize = 1 << 18;
/// Scans come no closer than this, and than ten times the last scan's length, so that
/// naming costs at most about a tenth of a core on a host with very many descriptors.
const MIN_RESCAN: Duration = Duration::from_millis(100);

/// Socket inodes to their processes, learned by scanning /proc when one is unknown.
pub struct SocketOwners {
    proc_root: PathBuf,
    known: HashMap<u64, Process>,
    next_scan: Option<Instant>,
    /// Full scans of /proc so far.
    pub scans: u64,
}

impl Default for SocketOwners {
    fn default() -> SocketOwners {
        SocketOwners::new("/proc")
    }
}

impl SocketOwners {
    pub fn new(proc_root: impl Into<PathBuf>) -> SocketOwners {
        SocketOwners {
            proc_root: proc_root.into(),
            known: HashMap::new(),
            next_scan: None,
            scans: 0,
        }
    }

    /// The process holding the socket with this inode: remembered, or found by a scan
    /// when the last one is old enough. `None` for inode 0, for a socket no process
    /// holds any more, and for processes whose descriptors cannot be read.
    pub fn owner(&mut self, inode: u64) -> Option<Process> {
        if inode == 0 {
            return None;
        }
        if let Some(process) = self.known.get(&inode) {
            return Some(process.clone());
        }
        let now = Instant::now();
        if self.next_scan.is_some_and(|next| now < next) {
            return None;
        }
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        scan(&self.proc_root, &mut self.known);
        self.scans += 1;
        let took = now.elapsed();
        self.next_scan = Some(Instant::now() + MIN_RESCAN.max(took * 10));
        self.known.get(&inode).cloned()
    }
}

/// Adds every socket descriptor of every readable process under `proc_root`.
fn scan(proc_root: &Path, known: &mut HashMap<u64, Process>) {
    let Ok(processes) = std::fs::read_dir(proc_root) else {
        return;
    };
    for entry in processes.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(descriptors) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let mut comm = None;
        for descriptor in descriptors.flatten() {
            let Some(inode) = std::fs::read_link(descriptor.path())
                .ok()
                .and_then(|target| socket_inode(target.as_os_str().to_str()?))
            else {
                continue;
            };
            let comm = comm.get_or_insert_with(|| {
                std::fs::read_to_string(entry.path().join("comm"))
                    .map(|c| c.trim_end().to_string())
                    .unwrap_or_default()
            });
            known.insert(
                inode,
                Process {
                    pid,
                    comm: comm.clone(),
                },
            );
        }
    }
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn reads_socket_links() {
        assert_eq!(socket_inode("socket:[4026]"), Some(4026));
        assert_eq!(socket_inode("pipe:[4026]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn names_this_process_as_the_owner_of_its_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // The descriptor's inode, as /proc/self/fd/N's target shows it.
        let inode = {
            use std::os::fd::AsRawFd;
            let path = format!("/proc/self/fd/{}", listener.as_raw_fd());
            std::fs::metadata(path).unwrap().ino()
        };
        let mut owners = SocketOwners::default();
        let me = owners.owner(inode).expect("this process holds the socket");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(owners.scans, 1);
        // Remembered: no second scan.
        assert_eq!(owners.owner(inode), Some(me));
        assert_eq!(owners.scans, 1);
        assert_eq!(owners.owner(0), None);
    }

    #[test]
    fn an_unknown_socket_waits_for_the_next_scan() {
        let mut owners = SocketOwners::default();
        assert_eq!(owners.owner(u64::MAX), None);
        assert_eq!(owners.owner(u64::MAX - 1), None);
        assert_eq!(owners.scans, 1, "the second miss came too soon for a scan");
    }
}
