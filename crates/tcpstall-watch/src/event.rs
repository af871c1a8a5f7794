//! Decodes the records `bpf/watch.bpf.c` writes to its ring buffer (`struct
//! watch_event`, native byte order, 128 bytes with the C compiler's padding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Size of `struct watch_event` as the eBPF program writes it.
pub const RAW_EVENT_SIZE: usize = 128;

const KIND_NAGLE_HOLD: u32 = 1;
const KIND_DELACK_FIRED: u32 = 2;
const KIND_DELAYER_SIDE: u32 = 3;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// A process as the kernel names it: its pid (thread group id) and comm.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
}

/// One socket's endpoints, seen from that socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoints {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// Bytes Nagle held on a socket, from the send that left them to the ACK that released
/// them (monotonic clock, nanoseconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NagleHold {
    pub holder: Process,
    /// The cgroup v2 watched (`-- CMD`), or 0 when the whole host is.
    pub cgroup: u64,
    pub socket: Endpoints,
    pub held_bytes: u32,
    pub mss: u32,
    pub smoothed_rtt_us: u32,
    pub start_ns: u64,
    pub released_ns: u64,
}

/// A socket's delayed-ACK timer fired with an ACK to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedAckFired {
    /// The process holding the socket, named in user space from `socket_inode` when the
    /// timer turns out to have held a stall (the kernel side leaves it `None`).
    pub owner: Option<Process>,
    /// The socket's inode (`socket:[inode]` in /proc/PID/fd); 0 when it has no file.
    pub socket_inode: u64,
    pub socket: Endpoints,
    pub fired_ns: u64,
}

/// Seen on the side that delayed its ACK: its delayed-ACK timer fired with an ACK pending
/// after a segment smaller than the receive MSS, while it had nothing to send; then the
/// peer's next data segment came, smaller than the MSS, with nothing sent in between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedAckAnswered {
    /// The delayer's socket (its inode names its process, as for a fired timer).
    pub socket: Endpoints,
    pub socket_inode: u64,
    pub fired_ns: u64,
    /// When the peer's segment arrived.
    pub answered_ns: u64,
    /// From the last segment before the timer to the ACK, by the socket's own clock.
    pub timer_ns: Option<u64>,
    /// The peer's segment: what its Nagle held.
    pub released_bytes: u32,
    /// The MSS the delayer advertised (tp->advmss): the peer's full segment.
    pub mss: u32,
    pub smoothed_rtt_us: u32,
    /// The kernel's windowed least round trip (tcp_min_rtt).
    pub min_rtt_us: u32,
    /// RFC 6298 RTTVAR as the kernel keeps it (mdev_us / 4).
    pub rtt_var_us: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    NagleHold(NagleHold),
    DelayedAckFired(DelayedAckFired),
    DelayedAckAnswered(DelayedAckAnswered),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("event record of {0} bytes, expected {RAW_EVENT_SIZE}")]
    Size(usize),
    #[error("unknown event kind {0}")]
    Kind(u32),
    #[error("unknown address family {0}")]
    Family(u16),
}

struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u16(&self, at: usize) -> u16 {
        u16::from_ne_bytes([self.0[at], self.0[at + 1]])
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.0[at..at + 8].try_into().expect("8 bytes"))
    }
    fn bytes16(&self, at: usize) -> [u8; 16] {
        self.0[at..at + 16].try_into().expect("16 bytes")
    }
}

/// Decodes one ring-buffer record.
pub fn decode(record: &[u8]) -> Result<WatchEvent, DecodeError> {
    if record.len() != RAW_EVENT_SIZE {
        return Err(DecodeError::Size(record.len()));
    }
    let f = Fields(record);
    let kind = f.u32(0);
    let pid = f.u32(4);
    let start_ns = f.u64(8);
    let end_ns = f.u64(16);
    let cgroup = f.u64(24);
    let held_bytes = f.u32(32);
    let smoothed_rtt_us = f.u32(36);
    let mss = f.u32(40);
    let family = f.u16(44);
    let local_port = f.u16(46);
    let remote_port = f.u16(48);
    let local = address(family, f.bytes16(52))?;
    let remote = address(family, f.bytes16(68))?;
    let comm = comm(&record[84..100]);
    let socket_inode = f.u64(104);
    let timer_ns = f.u64(112);
    let min_rtt_us = f.u32(120);
    let rtt_var_us = f.u32(124);
    let socket = Endpoints {
        local: SocketAddr::new(local, local_port),
        remote: SocketAddr::new(remote, remote_port),
    };
    match kind {
        KIND_NAGLE_HOLD => Ok(WatchEvent::NagleHold(NagleHold {
            holder: Process { pid, comm },
            cgroup,
            socket,
            held_bytes,
            mss,
            smoothed_rtt_us,
            start_ns,
            released_ns: end_ns,
        })),
        KIND_DELACK_FIRED => Ok(WatchEvent::DelayedAckFired(DelayedAckFired {
            owner: None,
            socket_inode,
            socket,
            fired_ns: end_ns,
        })),
        KIND_DELAYER_SIDE => Ok(WatchEvent::DelayedAckAnswered(DelayedAckAnswered {
            socket,
            socket_inode,
            fired_ns: start_ns,
            answered_ns: end_ns,
            timer_ns: (timer_ns > 0).then_some(timer_ns),
            released_bytes: held_bytes,
            mss,
            smoothed_rtt_us,
            min_rtt_us,
            rtt_var_us,
        })),
        other => Err(DecodeError::Kind(other)),
    }
}

fn address(family: u16, bytes: [u8; 16]) -> Result<IpAddr, DecodeError> {
    match family {
        AF_INET => Ok(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        // A dual-stack socket talking IPv4 has ::ffff:a.b.c.d: the peer socket may be
        // plain IPv4, so both are written as IPv4 to be matched.
        AF_INET6 => Ok(IpAddr::V6(Ipv6Addr::from(bytes)).to_canonical()),
        other => Err(DecodeError::Family(other)),
    }
}

fn comm(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record laid out as `struct watch_event`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        kind: u32,
        pid: u32,
        start_ns: u64,
        end_ns: u64,
        held: u32,
        local: ([u8; 4], u16),
        remote: ([u8; 4], u16),
        comm: &str,
    ) -> Vec<u8> {
        let mut r = vec![0u8; RAW_EVENT_SIZE];
        r[0..4].copy_from_slice(&kind.to_ne_bytes());
        r[4..8].copy_from_slice(&pid.to_ne_bytes());
        r[8..16].copy_from_slice(&start_ns.to_ne_bytes());
        r[16..24].copy_from_slice(&end_ns.to_ne_bytes());
        r[24..32].copy_from_slice(&7u64.to_ne_bytes());
        r[32..36].copy_from_slice(&held.to_ne_bytes());
        r[36..40].copy_from_slice(&50u32.to_ne_bytes());
        r[40..44].copy_from_slice(&65483u32.to_ne_bytes());
        r[44..46].copy_from_slice(&AF_INET.to_ne_bytes());
        r[46..48].copy_from_slice(&local.1.to_ne_bytes());
        r[48..50].copy_from_slice(&remote.1.to_ne_bytes());
        r[52..56].copy_from_slice(&local.0);
        r[68..72].copy_from_slice(&remote.0);
        r[84..84 + comm.len()].copy_from_slice(comm.as_bytes());
        r[104..112].copy_from_slice(&(pid as u64 * 1000).to_ne_bytes());
        r
    }

    /// A delayer-side record: timer `timer` ns, least round trip 30 us, RTTVAR 10 us.
    pub(crate) fn answered_record(
        fired: u64,
        answered: u64,
        timer: u64,
        delayer: ([u8; 4], u16),
        peer: ([u8; 4], u16),
    ) -> Vec<u8> {
        let mut r = record(3, 11, fired, answered, 6, delayer, peer, "");
        r[112..120].copy_from_slice(&timer.to_ne_bytes());
        r[120..124].copy_from_slice(&30u32.to_ne_bytes());
        r[124..128].copy_from_slice(&10u32.to_ne_bytes());
        r
    }

    #[test]
    fn decodes_a_nagle_hold() {
        let r = record(
            1,
            42,
            1_000,
            41_000_000,
            6,
            ([127, 0, 0, 1], 40000),
            ([127, 0, 0, 1], 8000),
            "client",
        );
        let WatchEvent::NagleHold(hold) = decode(&r).unwrap() else {
            panic!("not a hold");
        };
        assert_eq!(hold.holder.pid, 42);
        assert_eq!(hold.holder.comm, "client");
        assert_eq!(hold.held_bytes, 6);
        assert_eq!(hold.socket.local, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(hold.socket.remote, "127.0.0.1:8000".parse().unwrap());
        assert_eq!(hold.released_ns - hold.start_ns, 40_999_000);
    }

    #[test]
    fn a_fired_timer_carries_its_socket_inode() {
        let r = record(
            2,
            31,
            0,
            9,
            0,
            ([10, 0, 0, 1], 80),
            ([10, 0, 0, 2], 5000),
            "",
        );
        let WatchEvent::DelayedAckFired(fired) = decode(&r).unwrap() else {
            panic!("not a timer");
        };
        assert_eq!(fired.owner, None);
        assert_eq!(fired.socket_inode, 31_000);
        assert_eq!(fired.fired_ns, 9);
    }

    #[test]
    fn a_delayer_side_record_carries_its_timer_and_round_trip() {
        let r = answered_record(40, 90, 39, ([10, 0, 0, 1], 80), ([10, 0, 0, 2], 5000));
        let WatchEvent::DelayedAckAnswered(a) = decode(&r).unwrap() else {
            panic!("not a delayer-side record");
        };
        assert_eq!((a.fired_ns, a.answered_ns, a.timer_ns), (40, 90, Some(39)));
        assert_eq!((a.min_rtt_us, a.rtt_var_us, a.released_bytes), (30, 10, 6));
        assert_eq!(a.socket.local, "10.0.0.1:80".parse().unwrap());
        assert_eq!(a.socket_inode, 11_000);
        let mut unknown = r.clone();
        unknown[112..120].copy_from_slice(&0u64.to_ne_bytes());
        let WatchEvent::DelayedAckAnswered(a) = decode(&unknown).unwrap() else {
            unreachable!()
        };
        assert_eq!(a.timer_ns, None);
    }

    #[test]
    fn v4_mapped_addresses_read_as_ipv4() {
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(
            address(AF_INET6, mapped).unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        let mut loopback6 = [0u8; 16];
        loopback6[15] = 1;
        assert_eq!(
            address(AF_INET6, loopback6).unwrap(),
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        );
    }

    #[test]
    fn rejects_bad_records() {
        assert_eq!(decode(&[0; 10]), Err(DecodeError::Size(10)));
        let mut r = record(9, 1, 0, 0, 0, ([0; 4], 0), ([0; 4], 0), "");
        assert_eq!(decode(&r), Err(DecodeError::Kind(9)));
        r[0] = 1;
        r[44] = 99;
        assert_eq!(decode(&r), Err(DecodeError::Family(99)));
    }
}
