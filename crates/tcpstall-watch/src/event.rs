//! Decodes the records `bpf/watch.bpf.c` writes to its ring buffer (`struct
//! watch_event`, native byte order, 144 bytes with the C compiler's padding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Size of `struct watch_event` as the eBPF program writes it.
pub const RAW_EVENT_SIZE: usize = 144;

const KIND_NAGLE_HOLD: u32 = 1;
const KIND_DELACK_FIRED: u32 = 2;
const KIND_DELAYER_SIDE: u32 = 3;
/// `watch_event.flags` of a fired timer: a process held the socket.
const FIRED_DEFERRED: u16 = 1;
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
    /// The holder's round trips as its kernel measured them before the releasing ACK:
    /// smoothed, RFC 6298's RTTVAR (the kernel's `mdev_us / 4`) and the windowed least
    /// (`tcp_min_rtt`).
    pub smoothed_rtt_us: u32,
    pub rtt_var_us: u32,
    pub min_rtt_us: u32,
    pub start_ns: u64,
    pub released_ns: u64,
    /// The releasing segment's payload: 0 for a pure ACK, the only kind a delayed-ACK
    /// timer sends.
    pub ack_payload: u32,
    /// Data segments the holder's socket had received and sent (`tp->data_segs_in`,
    /// `data_segs_out`) when the ACK came.
    pub data_segments_in: u32,
    pub data_segments_out: u32,
}

#[cfg(test)]
impl NagleHold {
    /// For tests: `pid` (`comm`) held 6 bytes for `held_ns` on a loopback socket from
    /// `port` to port 8000.
    pub(crate) fn on_loopback(pid: u32, comm: &str, port: u16, held_ns: u64) -> NagleHold {
        NagleHold {
            holder: Process {
                pid,
                comm: comm.into(),
            },
            cgroup: 0,
            socket: Endpoints {
                local: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                remote: std::net::SocketAddr::from(([127, 0, 0, 1], 8000)),
            },
            held_bytes: 6,
            mss: 65483,
            smoothed_rtt_us: 40,
            rtt_var_us: 10,
            min_rtt_us: 30,
            start_ns: 0,
            released_ns: held_ns,
            ack_payload: 0,
            data_segments_in: 20,
            data_segments_out: 40,
        }
    }
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
    /// The timer as it ran on its socket: from the last segment's arrival to the fire,
    /// by the socket's own clock (`None` when unknown).
    pub timer_ns: Option<u64>,
    /// A process held the socket when the timer fired: the kernel sends the ACK when it
    /// lets go (`release_sock`), later by as long as it held it.
    pub deferred: bool,
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

/// One field of `struct watch_event`: its C name, offset and size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    name: &'static str,
    at: usize,
    size: usize,
}

const KIND: Field = Field {
    name: "kind",
    at: 0,
    size: 4,
};
const PID: Field = Field {
    name: "pid",
    at: 4,
    size: 4,
};
const START_NS: Field = Field {
    name: "start_ns",
    at: 8,
    size: 8,
};
const END_NS: Field = Field {
    name: "end_ns",
    at: 16,
    size: 8,
};
const CGROUP: Field = Field {
    name: "cgroup",
    at: 24,
    size: 8,
};
const HELD_BYTES: Field = Field {
    name: "held_bytes",
    at: 32,
    size: 4,
};
const SRTT_US: Field = Field {
    name: "srtt_us",
    at: 36,
    size: 4,
};
const MSS: Field = Field {
    name: "mss",
    at: 40,
    size: 4,
};
const FAMILY: Field = Field {
    name: "family",
    at: 44,
    size: 2,
};
const LOCAL_PORT: Field = Field {
    name: "local_port",
    at: 46,
    size: 2,
};
const REMOTE_PORT: Field = Field {
    name: "remote_port",
    at: 48,
    size: 2,
};
const FLAGS: Field = Field {
    name: "flags",
    at: 50,
    size: 2,
};
const LOCAL_ADDR: Field = Field {
    name: "local_addr",
    at: 52,
    size: 16,
};
const REMOTE_ADDR: Field = Field {
    name: "remote_addr",
    at: 68,
    size: 16,
};
const COMM: Field = Field {
    name: "comm",
    at: 84,
    size: 16,
};
const SOCKET_INODE: Field = Field {
    name: "socket_inode",
    at: 104,
    size: 8,
};
const TIMER_NS: Field = Field {
    name: "timer_ns",
    at: 112,
    size: 8,
};
const MIN_RTT_US: Field = Field {
    name: "min_rtt_us",
    at: 120,
    size: 4,
};
const RTT_VAR_US: Field = Field {
    name: "rtt_var_us",
    at: 124,
    size: 4,
};
const ACK_PAYLOAD: Field = Field {
    name: "ack_payload",
    at: 128,
    size: 4,
};
const DATA_SEGS_IN: Field = Field {
    name: "data_segs_in",
    at: 132,
    size: 4,
};
const DATA_SEGS_OUT: Field = Field {
    name: "data_segs_out",
    at: 136,
    size: 4,
};
const PAD2: Field = Field {
    name: "pad2",
    at: 140,
    size: 4,
};

/// Every field of `struct watch_event` in order, as the decoder reads it; a test checks
/// it field by field against the C source.
const LAYOUT: [Field; 23] = [
    KIND,
    PID,
    START_NS,
    END_NS,
    CGROUP,
    HELD_BYTES,
    SRTT_US,
    MSS,
    FAMILY,
    LOCAL_PORT,
    REMOTE_PORT,
    FLAGS,
    LOCAL_ADDR,
    REMOTE_ADDR,
    COMM,
    SOCKET_INODE,
    TIMER_NS,
    MIN_RTT_US,
    RTT_VAR_US,
    ACK_PAYLOAD,
    DATA_SEGS_IN,
    DATA_SEGS_OUT,
    PAD2,
];

// The last field ends the record: the decoder reads every byte the program writes.
const _: () = {
    let last = LAYOUT[LAYOUT.len() - 1];
    assert!(last.at + last.size == RAW_EVENT_SIZE);
};

struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn bytes(&self, field: Field) -> &[u8] {
        &self.0[field.at..field.at + field.size]
    }
    fn u16(&self, field: Field) -> u16 {
        u16::from_ne_bytes(self.bytes(field).try_into().expect("2 bytes"))
    }
    fn u32(&self, field: Field) -> u32 {
        u32::from_ne_bytes(self.bytes(field).try_into().expect("4 bytes"))
    }
    fn u64(&self, field: Field) -> u64 {
        u64::from_ne_bytes(self.bytes(field).try_into().expect("8 bytes"))
    }
    fn bytes16(&self, field: Field) -> [u8; 16] {
        self.bytes(field).try_into().expect("16 bytes")
    }
}

/// Decodes one ring-buffer record.
pub fn decode(record: &[u8]) -> Result<WatchEvent, DecodeError> {
    if record.len() != RAW_EVENT_SIZE {
        return Err(DecodeError::Size(record.len()));
    }
    let f = Fields(record);
    let kind = f.u32(KIND);
    let pid = f.u32(PID);
    let start_ns = f.u64(START_NS);
    let end_ns = f.u64(END_NS);
    let cgroup = f.u64(CGROUP);
    let held_bytes = f.u32(HELD_BYTES);
    let smoothed_rtt_us = f.u32(SRTT_US);
    let mss = f.u32(MSS);
    let family = f.u16(FAMILY);
    let local_port = f.u16(LOCAL_PORT);
    let remote_port = f.u16(REMOTE_PORT);
    let local = address(family, f.bytes16(LOCAL_ADDR))?;
    let remote = address(family, f.bytes16(REMOTE_ADDR))?;
    let comm = comm(f.bytes(COMM));
    let socket_inode = f.u64(SOCKET_INODE);
    let timer_ns = f.u64(TIMER_NS);
    let min_rtt_us = f.u32(MIN_RTT_US);
    let rtt_var_us = f.u32(RTT_VAR_US);
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
            rtt_var_us,
            min_rtt_us,
            start_ns,
            released_ns: end_ns,
            ack_payload: f.u32(ACK_PAYLOAD),
            data_segments_in: f.u32(DATA_SEGS_IN),
            data_segments_out: f.u32(DATA_SEGS_OUT),
        })),
        KIND_DELACK_FIRED => Ok(WatchEvent::DelayedAckFired(DelayedAckFired {
            owner: None,
            socket_inode,
            socket,
            fired_ns: end_ns,
            timer_ns: (timer_ns > 0).then_some(timer_ns),
            deferred: f.u16(FLAGS) & FIRED_DEFERRED != 0,
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
        // Least round trip 30 us, RTTVAR 10 us; 20 data segments received, 40 sent.
        r[120..124].copy_from_slice(&30u32.to_ne_bytes());
        r[124..128].copy_from_slice(&10u32.to_ne_bytes());
        r[132..136].copy_from_slice(&20u32.to_ne_bytes());
        r[136..140].copy_from_slice(&40u32.to_ne_bytes());
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
        assert_eq!((hold.min_rtt_us, hold.rtt_var_us), (30, 10));
        assert_eq!((hold.data_segments_in, hold.data_segments_out), (20, 40));
        assert_eq!(hold.ack_payload, 0);
        let mut by_data = r.clone();
        by_data[128..132].copy_from_slice(&6u32.to_ne_bytes());
        let WatchEvent::NagleHold(hold) = decode(&by_data).unwrap() else {
            unreachable!()
        };
        assert_eq!(hold.ack_payload, 6);
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
        assert_eq!(fired.timer_ns, None);
        let mut timed = r.clone();
        timed[112..120].copy_from_slice(&40_000_000u64.to_ne_bytes());
        let WatchEvent::DelayedAckFired(fired) = decode(&timed).unwrap() else {
            unreachable!()
        };
        assert_eq!(fired.timer_ns, Some(40_000_000));
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

    /// The C compiler's layout of `struct watch_event` as `bpf/watch.bpf.c` declares it:
    /// each field at the next multiple of its type's alignment (the BPF target aligns
    /// `__u64` to 8), the struct padded to its largest alignment.
    fn c_layout(source: &str) -> (Vec<(String, usize, usize)>, usize) {
        let start = source
            .find("struct watch_event {")
            .expect("struct watch_event in watch.bpf.c");
        let body = &source[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
        let mut fields = Vec::new();
        let (mut at, mut largest) = (0usize, 1usize);
        let mut comment = false;
        for line in body.lines().map(str::trim) {
            if comment || line.starts_with("/*") {
                comment = !line.ends_with("*/");
                continue;
            }
            let Some(declaration) = line.strip_suffix(';') else {
                continue;
            };
            let (ty, name) = declaration.rsplit_once(' ').expect("TYPE NAME;");
            let align = match ty {
                "__u8" | "char" => 1,
                "__u16" => 2,
                "__u32" => 4,
                "__u64" => 8,
                other => panic!("type {other} in struct watch_event"),
            };
            let (name, count) = match name.split_once('[') {
                Some((name, n)) => (name, n.trim_end_matches(']').parse::<usize>().unwrap()),
                None => (name, 1),
            };
            at = at.next_multiple_of(align);
            fields.push((name.to_string(), at, align * count));
            at += align * count;
            largest = largest.max(align);
        }
        (fields, at.next_multiple_of(largest))
    }

    #[test]
    fn the_decoder_reads_struct_watch_event_as_the_c_source_lays_it_out() {
        let (fields, size) = c_layout(include_str!("../bpf/watch.bpf.c"));
        let rust: Vec<(String, usize, usize)> = LAYOUT
            .iter()
            .map(|f| (f.name.to_string(), f.at, f.size))
            .collect();
        assert_eq!(rust, fields, "the decoder's fields against the C struct's");
        assert_eq!(size, RAW_EVENT_SIZE);
    }
}
