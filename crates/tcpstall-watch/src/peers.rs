//! Finds the socket on this host at the other end of a connection, from the kernel's
//! socket tables (/proc/net/tcp and /proc/net/tcp6, one line per socket with its local
//! and remote address and its inode), so that a holder the programs did not watch is
//! named by its process when it runs here. Only for stalls seen from the delayer's side
//! whose holder address can be this host's: a loopback address, or the delayer's own.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Reads come no closer than this, and than ten times the last read's length (as
/// [`crate::owners`] scans /proc).
const MIN_REREAD: Duration = Duration::from_millis(100);
/// The sockets remembered at most; past it the table starts afresh.
const MAX_KNOWN: usize = 1 << 18;

/// (local, remote) of each TCP socket of this network namespace to its inode.
pub struct LocalSockets {
    proc_net: PathBuf,
    known: HashMap<(SocketAddr, SocketAddr), u64>,
    next_read: Option<Instant>,
    /// Reads of the tables so far.
    pub reads: u64,
}

impl Default for LocalSockets {
    fn default() -> LocalSockets {
        LocalSockets::new("/proc/net")
    }
}

impl LocalSockets {
    pub fn new(proc_net: impl Into<PathBuf>) -> LocalSockets {
        LocalSockets {
            proc_net: proc_net.into(),
            known: HashMap::new(),
            next_read: None,
            reads: 0,
        }
    }

    /// The inode of the socket of this host whose local end is `local` and remote end
    /// `remote`; `None` when `local` cannot be this host's (not loopback, not `remote`'s
    /// address: the other end of a connection to this host), or no such socket is seen.
    pub fn inode(&mut self, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
        if !(local.ip().is_loopback() || local.ip() == remote.ip()) {
            return None;
        }
        if let Some(&inode) = self.known.get(&(local, remote)) {
            return Some(inode);
        }
        let now = Instant::now();
        if self.next_read.is_some_and(|next| now < next) {
            return None;
        }
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        for table in ["tcp", "tcp6"] {
            if let Ok(text) = std::fs::read_to_string(self.proc_net.join(table)) {
                for (endpoints, inode) in text.lines().skip(1).filter_map(socket_line) {
                    self.known.insert(endpoints, inode);
                }
            }
        }
        self.reads += 1;
        self.next_read = Some(Instant::now() + MIN_REREAD.max(now.elapsed() * 10));
        self.known.get(&(local, remote)).copied()
    }
}

/// One line of /proc/net/tcp or tcp6 (net/ipv4/tcp_ipv4.c get_tcp4_sock, tcp_ipv6.c
/// get_tcp6_sock): `sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...`, with
/// addresses as the kernel's 32-bit words in hexadecimal, in host byte order.
fn socket_line(line: &str) -> Option<((SocketAddr, SocketAddr), u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = endpoint(fields.get(1)?)?;
    let remote = endpoint(fields.get(2)?)?;
    let inode: u64 = fields.get(9)?.parse().ok()?;
    (inode != 0).then_some(((local, remote), inode))
}

/// `0100007F:1F40` or a 32-digit IPv6 address and a port; an IPv4-mapped IPv6 address
/// reads as IPv4, as the programs' records do.
fn endpoint(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = address.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes)).to_canonical()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn reads_the_kernels_lines() {
        let v4 = "   1: 0100007F:9C40 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 20 4 30 10 -1";
        let ((local, remote), inode) = socket_line(v4).unwrap();
        assert_eq!(local, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(remote, "127.0.0.1:8000".parse().unwrap());
        assert_eq!(inode, 4242);
        if cfg!(target_endian = "little") {
            let mapped = "   0: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 77 1";
            let ((local, _), _) = socket_line(mapped).unwrap();
            assert_eq!(local, "127.0.0.1:40000".parse().unwrap());
        }
        assert_eq!(socket_line("  sl  local_address rem_address   st"), None);
        assert_eq!(endpoint("0100007F"), None);
    }

    #[test]
    fn finds_a_connected_socket_of_this_host() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let inode = {
            use std::os::fd::AsRawFd;
            std::fs::metadata(format!("/proc/self/fd/{}", client.as_raw_fd()))
                .unwrap()
                .ino()
        };
        let mut sockets = LocalSockets::default();
        let (local, remote) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
        assert_eq!(sockets.inode(local, remote), Some(inode));
        assert_eq!(sockets.reads, 1);
        // A remote address is never looked up.
        let far: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        assert_eq!(sockets.inode(far, "198.51.100.1:80".parse().unwrap()), None);
        assert_eq!(sockets.reads, 1);
    }
}
