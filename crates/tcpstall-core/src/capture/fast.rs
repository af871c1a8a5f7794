//! The common case, decoded without building a whole sliced packet: Ethernet (or a raw
//! IP link) carrying IPv4 carrying a complete TCP header. Anything else, or anything
//! unusual about these headers, is left to the general decoder.

use std::net::{IpAddr, SocketAddr};

use etherparse::{IpNumber, Ipv4HeaderSlice, TcpHeaderSlice};

use crate::capture::{Packet, SkipReason};
use crate::segment::{Segment, TcpFlags};

const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERNET_HEADER: usize = 14;

/// `Some` when the packet took the fast path (a segment, or a sure reason to skip it);
/// `None` to let the general decoder look.
pub(crate) fn decode_ethernet_ipv4(packet: &Packet<'_>) -> Option<Result<Segment, SkipReason>> {
    let data = packet.data;
    if data.len() < ETHERNET_HEADER || data[12..14] != ETHERTYPE_IPV4 {
        return None;
    }
    decode_ipv4(packet, &data[ETHERNET_HEADER..])
}

/// IPv4 carrying TCP, starting at `ip`.
pub(crate) fn decode_ipv4(packet: &Packet<'_>, ip: &[u8]) -> Option<Result<Segment, SkipReason>> {
    let header = Ipv4HeaderSlice::from_slice(ip).ok()?;
    if header.is_fragmenting_payload() {
        return Some(Err(SkipReason::IpFragment));
    }
    if header.protocol() != IpNumber::TCP {
        return Some(Err(SkipReason::NotTcp));
    }
    let ip_header_len = usize::from(header.ihl()) * 4;
    let total_len = usize::from(header.total_len());
    let tcp = TcpHeaderSlice::from_slice(ip.get(ip_header_len..)?).ok()?;
    let tcp_header_len = usize::from(tcp.data_offset()) * 4;
    // A total length of 0 is what TSO-offloaded packets carry in captures; a total
    // length shorter than the headers is malformed: the general decoder says which.
    let payload_len = if total_len == 0 {
        ip.len().checked_sub(ip_header_len + tcp_header_len)?
    } else {
        total_len.checked_sub(ip_header_len + tcp_header_len)?
    };
    let options = crate::capture::decode::tcp_options(tcp.options());
    let raw = tcp.slice();
    Some(Ok(Segment {
        time: packet.time,
        src: SocketAddr::new(IpAddr::V4(header.source_addr()), tcp.source_port()),
        dst: SocketAddr::new(
            IpAddr::V4(header.destination_addr()),
            tcp.destination_port(),
        ),
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        flags: TcpFlags(raw[13] & 0x1f),
        window: tcp.window_size(),
        payload_len: payload_len as u32,
        options,
    }))
}
