//! The lab's own packets, captured with AF_PACKET inside the lab's namespace and written
//! as pcap (link type 101, raw IP: TUN and loopback packets reach a cooked packet socket
//! without a link-layer header). Only headers are kept: the analyzer needs no payload.
//!
//! Three points on the delay line: the client (its namespace's TUN device, where its TCP
//! sends and receives), the server (the same in its namespace), and the middle (the veth
//! between the line's two stages, where each packet travels inside a UDP datagram halfway
//! through its delay: the capture takes the TCP packet out of the datagram).

use std::io::{IoSliceMut, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessageOwned, LinkAddr, MsgFlags, SockFlag, SockProtocol, SockType,
    recvmsg, setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;
use tcpstall_core::capture::PcapWriter;

use crate::delayline::LINE_PORT;
use crate::netns::Namespace;
use crate::{LabError, Result};

/// pcap link type of packets that begin with their IP header.
pub const LINKTYPE_RAW: u32 = 101;
/// The capture thread looks at its stop flag this often.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// A capture keeps at most this many packets.
const MAX_PACKETS: usize = 5_000_000;
/// `sll_pkttype` of a packet this host sent (linux/if_packet.h).
const PACKET_OUTGOING: u8 = 4;
const LOOPBACK_IFINDEX: usize = 1;

/// Where on the path a capture sees the packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Client,
    Middle,
    Server,
}

impl Point {
    pub const ALL: [Point; 3] = [Point::Client, Point::Middle, Point::Server];

    pub fn name(self) -> &'static str {
        match self {
            Point::Client => "client",
            Point::Middle => "middle",
            Point::Server => "server",
        }
    }
}

/// One captured packet, cut after its TCP header.
#[derive(Clone, Debug)]
pub struct Packet {
    /// Kernel receive time, CLOCK_REALTIME nanoseconds (SO_TIMESTAMPNS).
    pub time: i64,
    pub headers: Vec<u8>,
    pub orig_len: u32,
}

/// A capture running on its own thread.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Vec<Packet>>>>,
}

impl Capture {
    /// Starts capturing every IPv4 TCP packet in `namespace`; returns once the socket
    /// is open, so nothing sent afterwards is missed.
    pub fn start(namespace: Option<Arc<Namespace>>) -> Result<Capture> {
        Capture::start_at(namespace, Point::Client)
    }

    /// Starts capturing at `point` in `namespace` (the middle: the TCP packets inside the
    /// delay line's datagrams on the veth; elsewhere: IPv4 TCP packets).
    pub fn start_at(namespace: Option<Arc<Namespace>>, point: Point) -> Result<Capture> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = channel::<Result<()>>();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let opened = namespace
                .as_ref()
                .map_or(Ok(()), |ns| ns.enter())
                .and_then(|()| open_packet_socket());
            match opened {
                Ok(fd) => {
                    let _ = ready_tx.send(Ok(()));
                    Ok(capture_loop(&fd, &flag, point))
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(LabError::Failed(e.to_string())));
                    Err(e)
                }
            }
        });
        match ready_rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => Ok(Capture {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(LabError::Failed("the capture did not start".into())),
        }
    }

    /// Stops the capture (after a short grace for packets in flight) and returns it.
    pub fn finish(mut self) -> Result<Vec<Packet>> {
        std::thread::sleep(Duration::from_millis(20));
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            _ => Err(LabError::Failed("the capture thread failed".into())),
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn open_packet_socket() -> Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Packet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::EthAll,
    )
    .map_err(|e| LabError::Failed(format!("AF_PACKET socket: {e} (needs CAP_NET_RAW)")))?;
    let fail = |what: &str, e: nix::Error| LabError::Failed(format!("{what}: {e}"));
    setsockopt(&fd, sockopt::ReceiveTimestampns, &true).map_err(|e| fail("SO_TIMESTAMPNS", e))?;
    let timeout = TimeVal::new(0, STOP_CHECK.as_micros() as _);
    setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).map_err(|e| fail("SO_RCVTIMEO", e))?;
    setsockopt(&fd, sockopt::RcvBuf, &(8 << 20)).map_err(|e| fail("SO_RCVBUF", e))?;
    Ok(fd)
}

fn capture_loop(fd: &OwnedFd, stop: &AtomicBool, point: Point) -> Vec<Packet> {
    let mut packets = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let mut control = nix::cmsg_space!(nix::sys::time::TimeSpec);
    while !stop.load(Ordering::Relaxed) && packets.len() < MAX_PACKETS {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let Ok(msg) = recvmsg::<LinkAddr>(
            fd.as_raw_fd(),
            &mut iov,
            Some(&mut control),
            MsgFlags::empty(),
        ) else {
            continue;
        };
        let len = msg.bytes;
        let Some(link) = msg.address else { continue };
        // Loopback shows each packet twice (sent, then received): keep the sent copy.
        if link.ifindex() == LOOPBACK_IFINDEX && link.pkttype() != PACKET_OUTGOING {
            continue;
        }
        let mut time = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for cmsg in cmsgs {
                if let ControlMessageOwned::ScmTimestampns(ts) = cmsg {
                    time = Some(ts.tv_sec() * 1_000_000_000 + ts.tv_nsec());
                }
            }
        }
        let packet = if point == Point::Middle {
            match line_payload(&buf[..len]) {
                Some(inner) => inner,
                None => continue,
            }
        } else {
            &buf[..len]
        };
        let (Some(time), Some(cut)) = (time, tcp_headers_len(packet)) else {
            continue;
        };
        packets.push(Packet {
            time,
            headers: packet[..cut].to_vec(),
            orig_len: packet.len() as u32,
        });
    }
    packets
}

/// The length of the IPv4 and TCP headers of a TCP packet; `None` for anything else.
fn tcp_headers_len(packet: &[u8]) -> Option<usize> {
    let first = *packet.first()?;
    if first >> 4 != 4 || *packet.get(9)? != 6 {
        return None;
    }
    let ip_len = usize::from(first & 0x0f) * 4;
    let tcp_len = usize::from(packet.get(ip_len + 12)? >> 4) * 4;
    let end = ip_len + tcp_len;
    (end <= packet.len() && tcp_len >= 20).then_some(end)
}

/// The IP packet a delay-line datagram carries (IPv4, UDP from or to the line's port);
/// `None` for anything else.
fn line_payload(packet: &[u8]) -> Option<&[u8]> {
    let first = *packet.first()?;
    if first >> 4 != 4 || *packet.get(9)? != 17 {
        return None;
    }
    let ip_len = usize::from(first & 0x0f) * 4;
    let udp = packet.get(ip_len..ip_len + 8)?;
    let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
    if port(0) != LINE_PORT && port(2) != LINE_PORT {
        return None;
    }
    packet.get(ip_len + 8..)
}

/// Writes packets as a pcap file (raw IP).
pub fn write_pcap<W: Write>(out: W, packets: &[Packet]) -> std::io::Result<W> {
    let mut writer = PcapWriter::with_link_type(out, 0, LINKTYPE_RAW)?;
    for p in packets {
        writer.write_frame(p.time, &p.headers, p.orig_len)?;
    }
    writer.flush()?;
    Ok(writer.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_a_tcp_packet_are_found() {
        let mut packet = vec![0u8; 60];
        packet[0] = 0x45;
        packet[9] = 6;
        packet[20 + 12] = 8 << 4;
        assert_eq!(tcp_headers_len(&packet), Some(52));
        packet[9] = 17;
        assert_eq!(tcp_headers_len(&packet), None);
        assert_eq!(tcp_headers_len(&[]), None);
    }

    #[test]
    fn the_middle_takes_the_tcp_packet_out_of_the_line_datagram() {
        let mut inner = vec![0u8; 52];
        inner[0] = 0x45;
        inner[9] = 6;
        inner[20 + 12] = 8 << 4;
        let mut outer = vec![0u8; 28];
        outer[0] = 0x45;
        outer[9] = 17;
        outer[20..22].copy_from_slice(&LINE_PORT.to_be_bytes());
        outer[22..24].copy_from_slice(&40_000u16.to_be_bytes());
        outer.extend_from_slice(&inner);
        assert_eq!(line_payload(&outer), Some(&inner[..]));
        // Another UDP port, or TCP itself, is not the line's.
        outer[20..22].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(line_payload(&outer), None);
        assert_eq!(line_payload(&inner), None);
    }
}
