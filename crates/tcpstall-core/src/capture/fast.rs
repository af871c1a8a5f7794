//! The common case, decoded without building a whole sliced packet: Ethernet (or a raw
//! IP link) carrying IPv4 carrying a complete TCP header. Anything else (fragments,
//! tunnels, other links), or anything unusual about these headers, is left to the
//! general decoder.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use crate::capture::{Packet, SkipReason};
use crate::segment::{Segment, TcpFlags};
use crate::seq::SeqNumber;

const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERNET_HEADER: usize = 14;

/// `Some` when the packet took the fast path (a segment, written to `segment`, or a sure
/// reason to skip it); `None` to let the general decoder look.
#[inline]
pub(crate) fn decode_ethernet_ipv4(
    packet: &Packet<'_>,
    segment: &mut Segment,
) -> Option<Result<(), SkipReason>> {
    let data = packet.data;
    if data.len() < ETHERNET_HEADER || data[12..14] != ETHERTYPE_IPV4 {
        return None;
    }
    decode_ipv4(packet, &data[ETHERNET_HEADER..], segment)
}

/// IPv4 carrying TCP, starting at `ip`; the segment is written to `segment` (in place: a
/// segment is 120 bytes, and returning it moved it once more on every packet).
#[inline(always)]
pub(crate) fn decode_ipv4(
    packet: &Packet<'_>,
    ip: &[u8],
    segment: &mut Segment,
) -> Option<Result<(), SkipReason>> {
    // RFC 791 3.1: version and header length, total length, identification, flags and
    // fragment offset, protocol, source and destination addresses.
    let &[
        version_ihl,
        _,
        len_hi,
        len_lo,
        id_hi,
        id_lo,
        frag_hi,
        frag_lo,
        ttl,
        protocol,
        _,
        _,
        ..,
    ] = ip
    else {
        return None;
    };
    let ip_header_len = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || ip_header_len < 20 || ip.len() < ip_header_len {
        return None;
    }
    // More fragments, or an offset: a piece of a datagram (the top bit is reserved, the
    // next is Don't Fragment), for the general decoder to reassemble.
    if u16::from_be_bytes([frag_hi, frag_lo]) & 0x3fff != 0 {
        return None;
    }
    if protocol != IPPROTO_TCP {
        // UDP, GRE and IP itself may carry a tunnel with TCP inside.
        return match protocol {
            IPPROTO_IPIP | IPPROTO_UDP | IPPROTO_IPV6 | IPPROTO_GRE => None,
            _ => Some(Err(SkipReason::NotTcp)),
        };
    }
    let total_len = usize::from(u16::from_be_bytes([len_hi, len_lo]));
    let source = Ipv4Addr::from_bits(be_u32(&ip[12..16]));
    let destination = Ipv4Addr::from_bits(be_u32(&ip[16..20]));
    // RFC 9293 3.1: ports, sequence and acknowledgment numbers, data offset, flags, window.
    let tcp = &ip[ip_header_len..];
    let tcp_header_len = usize::from(*tcp.get(12)? >> 4) * 4;
    if tcp_header_len < 20 || tcp.len() < tcp_header_len {
        return None;
    }
    // A total length of 0 is what TSO-offloaded packets carry in captures; a total
    // length shorter than the headers is malformed: the general decoder says which, as
    // it does for one longer than the frame was on the wire.
    if total_len > packet.wire_bytes_from(ip)? {
        return None;
    }
    let payload_len = if total_len == 0 {
        ip.len().checked_sub(ip_header_len + tcp_header_len)?
    } else {
        total_len.checked_sub(ip_header_len + tcp_header_len)?
    };
    *segment = Segment {
        time: packet.time,
        src: SocketAddr::V4(SocketAddrV4::new(source, be_u16(&tcp[0..2]))),
        dst: SocketAddr::V4(SocketAddrV4::new(destination, be_u16(&tcp[2..4]))),
        seq: SeqNumber(be_u32(&tcp[4..8])),
        ack: SeqNumber(be_u32(&tcp[8..12])),
        flags: TcpFlags(tcp[13] & 0x3f),
        window: be_u16(&tcp[14..16]),
        payload_len: payload_len as u32,
        ip_id: u16::from_be_bytes([id_hi, id_lo]),
        ttl,
        options: crate::capture::tcp_options::tcp_options(&tcp[20..tcp_header_len]),
        tunnel: 0,
    };
    Some(Ok(()))
}

/// A segment to decode into: every field is overwritten.
pub(crate) const BLANK_SEGMENT: Segment = Segment {
    time: 0,
    src: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
    dst: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
    seq: SeqNumber(0),
    ack: SeqNumber(0),
    flags: TcpFlags(0),
    window: 0,
    payload_len: 0,
    ip_id: 0,
    ttl: 0,
    options: crate::segment::TcpOptions {
        mss: None,
        window_scale: None,
        sack_permitted: false,
        sack_blocks: 0,
        timestamps: None,
    },
    tunnel: 0,
};

/// IP protocol numbers (IANA): TCP, and those a tunnel may ride on.
const IPPROTO_TCP: u8 = 6;
const IPPROTO_IPIP: u8 = 4;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_IPV6: u8 = 41;
const IPPROTO_GRE: u8 = 47;

fn be_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}
