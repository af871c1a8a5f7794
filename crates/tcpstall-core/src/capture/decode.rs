//! Link, network and transport headers of one captured packet, down to a [`Segment`].
//!
//! The common case takes the fast path; everything else walks the headers layer by
//! layer: the link (link.rs), etherparse for Ethernet, VLAN tags, IP and TCP, tunnels
//! and label stacks (tunnel.rs) between them, fragments joined on the way
//! (fragments.rs), until a TCP header or a reason to stop.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use etherparse::err::packet::SliceError;
use etherparse::err::{Layer as StopLayer, ip::LaxHeaderSliceError};
use etherparse::{EtherType, IpNumber, LaxNetSlice, LaxSlicedPacket, TcpSlice, TransportSlice};

use super::tcp_options::tcp_options;
use crate::capture::Packet;
use crate::capture::fragments::{Fragment, FragmentCounts, FragmentKey, Fragments};
use crate::capture::link::{self, Layer, link_type};
use crate::capture::tunnel::{self, Inner};
use crate::segment::{Segment, TcpFlags};
use crate::seq::SeqNumber;

/// Why a packet did not become a segment. Every skipped packet is counted by reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipReason {
    UnsupportedLinkType(i32),
    NotIp,
    NotTcp,
    /// A piece of an IP datagram that was not reassembled (its other pieces were not
    /// captured, or the stateless [`decode_packet`] was used).
    IpFragment,
    TruncatedHeaders,
    /// A header field that cannot be right: an IPv4 header length or TCP data offset
    /// below 5 words, an IP version that contradicts the link layer, and the like.
    MalformedHeaders,
    /// An encrypted or compressed payload (an 802.11 protected frame, PPP's CCP or ECP).
    Encrypted,
    /// A header this decoder does not follow, named.
    UnsupportedEncapsulation(&'static str),
}

impl SkipReason {
    pub fn describe(&self) -> String {
        match self {
            SkipReason::UnsupportedLinkType(t) => format!("unsupported link type {t}"),
            SkipReason::NotIp => "not IP".into(),
            SkipReason::NotTcp => "IP but not TCP".into(),
            SkipReason::IpFragment => "IP fragment not reassembled".into(),
            SkipReason::TruncatedHeaders => "cut off before the end of the TCP header".into(),
            SkipReason::MalformedHeaders => "malformed IP or TCP header".into(),
            SkipReason::Encrypted => "encrypted or compressed payload".into(),
            SkipReason::UnsupportedEncapsulation(what) => {
                format!("unsupported encapsulation ({what})")
            }
        }
    }

    /// Stable machine name for JSON.
    pub fn key(&self) -> String {
        match self {
            SkipReason::UnsupportedLinkType(t) => format!("unsupported_link_type_{t}"),
            SkipReason::NotIp => "not_ip".into(),
            SkipReason::NotTcp => "not_tcp".into(),
            SkipReason::IpFragment => "ip_fragment".into(),
            SkipReason::TruncatedHeaders => "truncated_headers".into(),
            SkipReason::MalformedHeaders => "malformed_headers".into(),
            SkipReason::Encrypted => "encrypted".into(),
            SkipReason::UnsupportedEncapsulation(what) => {
                let slug: String = what
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_lowercase()
                        } else {
                            '_'
                        }
                    })
                    .collect();
                format!("unsupported_encapsulation_{slug}")
            }
        }
    }
}

/// Skipped packets by reason.
#[derive(Clone, Debug, Default)]
pub struct SkipCounts {
    pub by_reason: BTreeMap<SkipReason, u64>,
}

impl SkipCounts {
    pub fn add(&mut self, reason: SkipReason) {
        self.add_many(reason, 1);
    }
    pub fn add_many(&mut self, reason: SkipReason, count: u64) {
        if count > 0 {
            *self.by_reason.entry(reason).or_insert(0) += count;
        }
    }
    pub fn total(&self) -> u64 {
        self.by_reason.values().sum()
    }
}

/// What became of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A TCP segment, written where [`Decoder::decode`] was told.
    Segment,
    Skipped(SkipReason),
    /// A fragment kept until its datagram is whole.
    Held,
}

/// Decodes the packets of a capture in order, joining IP fragments into datagrams.
#[derive(Default)]
pub struct Decoder {
    fragments: Fragments,
    /// Packets whose IP header claims more bytes than the frame had on the wire.
    ip_length_beyond_frame: u64,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes `packet`; a TCP segment is written to `segment`, in place (it is large,
    /// and the common case writes it field by field where the caller keeps it).
    #[inline(always)]
    pub fn decode(&mut self, packet: &Packet<'_>, segment: &mut Segment) -> Decoded {
        match fast_path_into(packet, segment) {
            Some(Ok(())) => Decoded::Segment,
            Some(Err(reason)) => Decoded::Skipped(reason),
            None => {
                let mut beyond_frame = false;
                let decoded = decode_general(packet, Some(&mut self.fragments), &mut beyond_frame);
                self.ip_length_beyond_frame += u64::from(beyond_frame);
                match decoded {
                    Ok(decoded) => {
                        *segment = decoded;
                        Decoded::Segment
                    }
                    Err(Stop::Skip(reason)) => Decoded::Skipped(reason),
                    Err(Stop::Held) => Decoded::Held,
                }
            }
        }
    }

    /// Packets so far whose IP header (total length, IPv6 payload length) claimed more
    /// bytes than the frame's original length left for it; their lengths were taken from
    /// the frame instead.
    pub fn ip_length_beyond_frame(&self) -> u64 {
        self.ip_length_beyond_frame
    }

    /// Fragments seen, and those that made whole datagrams (so far).
    pub fn fragment_counts(&self) -> FragmentCounts {
        self.fragments.counts()
    }
}

/// Decodes one packet into a TCP segment, or says why it is not one. Each packet is
/// decoded on its own: IP fragments are skipped ([`Decoder`] joins them).
#[inline]
pub fn decode_packet(packet: &Packet<'_>) -> Result<Segment, SkipReason> {
    match fast_path(packet) {
        Some(decoded) => decoded,
        None => decode_general(packet, None, &mut false).map_err(|stop| match stop {
            Stop::Skip(reason) => reason,
            Stop::Held => SkipReason::IpFragment,
        }),
    }
}

#[inline]
fn fast_path(packet: &Packet<'_>) -> Option<Result<Segment, SkipReason>> {
    let mut segment = crate::capture::fast::BLANK_SEGMENT;
    fast_path_into(packet, &mut segment).map(|decoded| decoded.map(|()| segment))
}

/// [`fast_path`], writing the segment to `segment`.
#[inline]
fn fast_path_into(packet: &Packet<'_>, segment: &mut Segment) -> Option<Result<(), SkipReason>> {
    match packet.link_type {
        link_type::ETHERNET => crate::capture::fast::decode_ethernet_ipv4(packet, segment),
        link_type::RAW | link_type::IPV4 if packet.data.first().is_some_and(|b| b >> 4 == 4) => {
            crate::capture::fast::decode_ipv4(packet, packet.data, segment)
        }
        _ => None,
    }
}

/// Why decoding stopped short of a segment.
#[derive(Debug)]
enum Stop {
    Skip(SkipReason),
    /// A fragment was kept for reassembly.
    Held,
}

impl From<SkipReason> for Stop {
    fn from(reason: SkipReason) -> Stop {
        Stop::Skip(reason)
    }
}

/// The layer inside a tunnel; the tunnel's overlay network, if it names one, replaces
/// `overlay`.
fn enter<'a>(inner: Inner<'a>, overlay: &mut u32) -> Layer<'a> {
    *overlay = inner.overlay.unwrap_or(*overlay);
    inner.layer
}

/// Headers followed in one packet at most: a link, a few tunnels with their own
/// Ethernet and IP headers, and TCP fit well within it.
const MAX_LAYERS: usize = 16;

/// Every link type and header chain.
#[inline(never)]
fn decode_general(
    packet: &Packet<'_>,
    fragments: Option<&mut Fragments>,
    beyond_frame: &mut bool,
) -> Result<Segment, Stop> {
    let layer = link::link_layer(packet.link_type, packet.data)?;
    walk(packet, layer, 0, MAX_LAYERS, fragments, beyond_frame)
}

/// Follows the layers from `layer` down to TCP, within `budget` layers; `overlay` is
/// the overlay network the packet is in so far (0: none). `beyond_frame` is set when the
/// segment's IP header (or a fragment's) claims more than the frame holds.
fn walk(
    packet: &Packet<'_>,
    mut layer: Layer<'_>,
    mut overlay: u32,
    budget: usize,
    mut fragments: Option<&mut Fragments>,
    beyond_frame: &mut bool,
) -> Result<Segment, Stop> {
    for used in 0..budget {
        let sliced = match layer {
            Layer::Ethernet(data) => {
                LaxSlicedPacket::from_ethernet(data).map_err(|_| SkipReason::TruncatedHeaders)?
            }
            Layer::EtherType(kind, data) => {
                if let Some(inner) = tunnel::ether_type_payload(kind, data) {
                    layer = enter(inner?, &mut overlay);
                    continue;
                }
                LaxSlicedPacket::from_ether_type(EtherType(kind), data)
            }
            Layer::Ip(data) => from_ip(data)?,
        };
        // An EtherType that etherparse left undecoded, after an Ethernet header or tags.
        if sliced.net.is_none()
            && sliced.stop_err.is_none()
            && let Some(payload) = sliced.ether_payload()
            && let Some(inner) = tunnel::ether_type_payload(payload.ether_type.0, payload.payload)
        {
            layer = enter(inner?, &mut overlay);
            continue;
        }
        let network = network_payload(&sliced, packet)?;
        let next = match network.fragment {
            None => {
                let next = transport(packet, &network, &sliced, overlay)?;
                *beyond_frame |= network.beyond_frame && matches!(next, Next::Segment(_));
                next
            }
            Some(piece) => {
                let Some(table) = fragments.as_deref_mut() else {
                    return Err(SkipReason::IpFragment.into());
                };
                *beyond_frame |= network.beyond_frame;
                let key = FragmentKey {
                    source: network.source,
                    destination: network.destination,
                    identification: piece.identification,
                    protocol: network.protocol,
                    overlay,
                };
                let fragment = Fragment {
                    offset: piece.offset,
                    more: piece.more,
                    captured: network.bytes,
                    declared: network.declared,
                };
                let whole = table.add(key, fragment, packet.time).ok_or(Stop::Held)?;
                let reassembled = NetworkPayload {
                    bytes: &whole.head,
                    declared: whole.len,
                    fragment: None,
                    beyond_frame: false,
                    ..network
                };
                // The datagram's bytes live here: what is inside is followed from here.
                return match transport(packet, &reassembled, &sliced, overlay)? {
                    Next::Segment(segment) => Ok(segment),
                    Next::Inner(inner) => {
                        let overlay = inner.overlay.unwrap_or(overlay);
                        walk(
                            packet,
                            inner.layer,
                            overlay,
                            budget - used - 1,
                            fragments,
                            beyond_frame,
                        )
                    }
                };
            }
        };
        match next {
            Next::Segment(segment) => return Ok(segment),
            Next::Inner(inner) => layer = enter(inner, &mut overlay),
        }
    }
    Err(SkipReason::UnsupportedEncapsulation("headers nested too deep").into())
}

fn from_ip(data: &[u8]) -> Result<LaxSlicedPacket<'_>, SkipReason> {
    match data.first().map(|b| b >> 4) {
        Some(4) | Some(6) => LaxSlicedPacket::from_ip(data).map_err(|e| match e {
            LaxHeaderSliceError::Len(_) => SkipReason::TruncatedHeaders,
            LaxHeaderSliceError::Content(_) => SkipReason::MalformedHeaders,
        }),
        Some(_) => Err(SkipReason::NotIp),
        None => Err(SkipReason::TruncatedHeaders),
    }
}

/// Where a fragment's payload belongs in its datagram.
#[derive(Clone, Copy)]
struct Piece {
    offset: u32,
    more: bool,
    identification: u32,
}

/// The payload of an IP packet: its addresses, protocol, captured bytes, and the length
/// its header declares (the capture may have cut the bytes short), or the frame's when
/// the header claims more than the frame had (`beyond_frame`).
#[derive(Clone, Copy)]
struct NetworkPayload<'a> {
    source: IpAddr,
    destination: IpAddr,
    protocol: u8,
    bytes: &'a [u8],
    declared: usize,
    fragment: Option<Piece>,
    beyond_frame: bool,
    /// The IPv4 Identification field (0 for IPv6, which has none outside fragments).
    ip_id: u16,
    /// The TTL (IPv4) or hop limit (IPv6).
    ttl: u8,
}

/// The payload length an IP header declares, `total` bytes counted from the header's
/// start, the payload starting `payload_offset` bytes in. The header's own length is
/// trusted when it fits in the frame's original length (a snap length cuts the captured
/// bytes, never the wire's); one that claims more cannot be right (RFC 791 3.1: total
/// length is the datagram's, RFC 8200 3: payload length is the rest of the packet), and
/// the frame decides: its bytes after the headers (then the second value is true).
fn declared_payload(
    packet: &Packet<'_>,
    header: &[u8],
    total: usize,
    payload_offset: usize,
) -> (usize, bool) {
    match packet.wire_bytes_from(header) {
        Some(room) if total > room => (room.saturating_sub(payload_offset), true),
        _ => (total - payload_offset, false),
    }
}

fn network_payload<'a>(
    sliced: &LaxSlicedPacket<'a>,
    packet: &Packet<'_>,
) -> Result<NetworkPayload<'a>, SkipReason> {
    match &sliced.net {
        Some(LaxNetSlice::Ipv4(ipv4)) => {
            let header = ipv4.header();
            let payload = ipv4.payload();
            let payload_offset =
                payload.payload.as_ptr() as usize - header.slice().as_ptr() as usize;
            let total = usize::from(header.total_len());
            // A total length of 0 is what TSO-offloaded packets carry in captures.
            let (declared, beyond_frame) = if total >= payload_offset {
                declared_payload(packet, header.slice(), total, payload_offset)
            } else {
                (payload.payload.len(), false)
            };
            let fragment = payload.fragmented.then(|| Piece {
                offset: u32::from(header.fragments_offset().byte_offset()),
                more: header.more_fragments(),
                identification: u32::from(header.identification()),
            });
            Ok(NetworkPayload {
                source: IpAddr::V4(header.source_addr()),
                destination: IpAddr::V4(header.destination_addr()),
                protocol: payload.ip_number.0,
                bytes: payload.payload,
                declared,
                fragment,
                beyond_frame,
                ip_id: header.identification(),
                ttl: header.ttl(),
            })
        }
        Some(LaxNetSlice::Ipv6(ipv6)) => {
            let header = ipv6.header();
            let payload = ipv6.payload();
            let payload_offset =
                payload.payload.as_ptr() as usize - header.slice().as_ptr() as usize;
            let total = 40 + usize::from(header.payload_length());
            let (declared, beyond_frame) =
                if header.payload_length() != 0 && total >= payload_offset {
                    declared_payload(packet, header.slice(), total, payload_offset)
                } else {
                    (payload.payload.len(), false)
                };
            let fragment = if payload.fragmented {
                let piece = ipv6
                    .extensions()
                    .clone()
                    .into_iter()
                    .find_map(|ext| match ext {
                        etherparse::Ipv6ExtensionSlice::Fragment(f) => Some(Piece {
                            offset: u32::from(f.fragment_offset().byte_offset()),
                            more: f.more_fragments(),
                            identification: f.identification(),
                        }),
                        _ => None,
                    });
                Some(piece.ok_or(SkipReason::IpFragment)?)
            } else {
                None
            };
            Ok(NetworkPayload {
                source: IpAddr::V6(header.source_addr()),
                destination: IpAddr::V6(header.destination_addr()),
                protocol: payload.ip_number.0,
                bytes: payload.payload,
                declared,
                fragment,
                beyond_frame,
                ip_id: 0,
                ttl: header.hop_limit(),
            })
        }
        Some(LaxNetSlice::Arp(_)) | None => Err(match &sliced.stop_err {
            Some((error, _)) if sliced.link.is_some() && is_ip_ether_type(sliced) => {
                stop_reason(error)
            }
            // IP after a tunnel or a link header of this module's, cut or malformed.
            Some((error, StopLayer::Ipv4Header | StopLayer::Ipv6Header)) => stop_reason(error),
            _ => SkipReason::NotIp,
        }),
    }
}

/// What comes after an IP header.
enum Next<'a> {
    Segment(Segment),
    Inner(Inner<'a>),
}

/// The transport (or tunnel) an IP payload carries.
fn transport<'a>(
    packet: &Packet<'_>,
    network: &NetworkPayload<'a>,
    sliced: &LaxSlicedPacket<'a>,
    overlay: u32,
) -> Result<Next<'a>, SkipReason> {
    match IpNumber(network.protocol) {
        IpNumber::TCP => {
            let tcp = match &sliced.transport {
                Some(TransportSlice::Tcp(tcp))
                    if network.fragment.is_none()
                        && tcp.slice().as_ptr() == network.bytes.as_ptr() =>
                {
                    tcp.clone()
                }
                _ => TcpSlice::from_slice(network.bytes).map_err(|e| match e {
                    etherparse::err::tcp::HeaderSliceError::Len(_) => SkipReason::TruncatedHeaders,
                    etherparse::err::tcp::HeaderSliceError::Content(_) => {
                        SkipReason::MalformedHeaders
                    }
                })?,
            };
            Ok(Next::Segment(segment(packet, network, &tcp, overlay)))
        }
        IpNumber::UDP => {
            let [sp_hi, sp_lo, dp_hi, dp_lo, _, _, _, _, ref payload @ ..] = *network.bytes else {
                return Err(SkipReason::NotTcp);
            };
            let source = u16::from_be_bytes([sp_hi, sp_lo]);
            let destination = u16::from_be_bytes([dp_hi, dp_lo]);
            match tunnel::udp_payload(source, destination, payload) {
                Some(inner) => Ok(Next::Inner(inner?)),
                None => Err(SkipReason::NotTcp),
            }
        }
        // IPv4 in IP (RFC 2003), IPv6 in IP (RFC 4213 3.5, RFC 2473).
        IpNumber::IPV4 | IpNumber::IPV6 => Ok(Next::Inner(Inner {
            layer: Layer::Ip(network.bytes),
            overlay: None,
        })),
        IpNumber::GRE => Ok(Next::Inner(tunnel::gre(network.bytes)?)),
        _ => Err(SkipReason::NotTcp),
    }
}

fn segment(
    packet: &Packet<'_>,
    network: &NetworkPayload<'_>,
    tcp: &TcpSlice<'_>,
    overlay: u32,
) -> Segment {
    let header_len = tcp.header_slice().len();
    let payload_len = network.declared.saturating_sub(header_len) as u32;
    Segment {
        time: packet.time,
        src: SocketAddr::new(network.source, tcp.source_port()),
        dst: SocketAddr::new(network.destination, tcp.destination_port()),
        seq: SeqNumber(tcp.sequence_number()),
        ack: SeqNumber(tcp.acknowledgment_number()),
        flags: TcpFlags(tcp.header_slice()[13] & 0x3f),
        window: tcp.window_size(),
        payload_len,
        ip_id: network.ip_id,
        ttl: network.ttl,
        options: tcp_options(tcp.options()),
        tunnel: overlay,
    }
}

/// Why etherparse stopped: too few bytes, or a field that cannot be right.
fn stop_reason(error: &SliceError) -> SkipReason {
    match error {
        SliceError::Len(_) => SkipReason::TruncatedHeaders,
        _ => SkipReason::MalformedHeaders,
    }
}

fn is_ip_ether_type(sliced: &LaxSlicedPacket<'_>) -> bool {
    matches!(
        sliced.ether_payload().map(|p| p.ether_type),
        Some(EtherType::IPV4) | Some(EtherType::IPV6)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet, IPv4 and TCP headers (with `options`), and `payload` bytes of data.
    fn ethernet_ipv4_tcp(options: &[u8], payload: usize) -> Vec<u8> {
        let tcp_len = 20 + options.len();
        let total = 20 + tcp_len + payload;
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0]);
        frame.extend_from_slice(&[64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        frame.extend_from_slice(&[0x9c, 0x40, 0x1f, 0x90, 0, 0, 0, 7, 0, 0, 0, 9]);
        frame.extend_from_slice(&[((tcp_len / 4) << 4) as u8, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        frame.extend_from_slice(options);
        frame.resize(frame.len() + payload, 0xab);
        frame
    }

    fn packet_of(data: &[u8], wire_len: usize) -> Packet<'_> {
        Packet {
            number: 1,
            time: 7,
            link_type: link_type::ETHERNET,
            data,
            wire_len: wire_len as u32,
            interface: 0,
            time_units: 1_000_000,
        }
    }

    #[test]
    fn an_ip_length_past_the_original_frame_is_taken_from_the_frame() {
        let mut decoder = Decoder::new();
        let mut segment = crate::capture::fast::BLANK_SEGMENT;
        // IPv4, 12 bytes of data, a total length of 65,535.
        let mut v4 = ethernet_ipv4_tcp(&[], 12);
        v4[16..18].copy_from_slice(&[0xff, 0xff]);
        // IPv6 (the same TCP segment), a payload length of 65,535.
        let mut v6 = v4[..12].to_vec();
        v6.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0xff, 0xff, 6, 64]);
        v6.extend_from_slice(&[0; 32]);
        v6.extend_from_slice(&v4[34..]);
        for frame in [&v4, &v6] {
            let packet = packet_of(frame, frame.len());
            assert_eq!(decoder.decode(&packet, &mut segment), Decoded::Segment);
            assert_eq!(segment.payload_len, 12);
        }
        assert_eq!(decoder.ip_length_beyond_frame(), 2);
        // A packet that is not TCP: its length does not count towards any answer.
        let mut udp = v4.clone();
        udp[23] = 17;
        let packet = packet_of(&udp, udp.len());
        assert_eq!(
            decoder.decode(&packet, &mut segment),
            Decoded::Skipped(SkipReason::NotTcp)
        );
        assert_eq!(decoder.ip_length_beyond_frame(), 2);
        // Cut by a snap length: the header's length stands while it fits in the frame's
        // original length (here 1,000 bytes of data on the wire).
        let mut cut = ethernet_ipv4_tcp(&[], 1000);
        let whole = cut.len();
        cut.truncate(80);
        let packet = packet_of(&cut, whole);
        assert_eq!(decoder.decode(&packet, &mut segment), Decoded::Segment);
        assert_eq!(segment.payload_len, 1000);
        let mut v6_cut = v6.clone();
        v6_cut[18..20].copy_from_slice(&1020u16.to_be_bytes());
        let packet = packet_of(&v6_cut, 14 + 40 + 1020);
        assert_eq!(decoder.decode(&packet, &mut segment), Decoded::Segment);
        assert_eq!(segment.payload_len, 1000);
        assert_eq!(decoder.ip_length_beyond_frame(), 2);
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_decoder() {
        let timestamps = [1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6];
        let syn_options = [
            2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let mut frames = vec![
            ethernet_ipv4_tcp(&[], 0),
            ethernet_ipv4_tcp(&timestamps, 100),
            ethernet_ipv4_tcp(&syn_options, 0),
        ];
        // A fragment; UDP; a TSO total length of 0; a total length below the headers; a
        // TCP data offset of 4 words; the TCP header cut short; a total length past the
        // frame.
        let mut fragment = ethernet_ipv4_tcp(&[], 10);
        fragment[20] = 0x20;
        let mut udp = ethernet_ipv4_tcp(&[], 10);
        udp[23] = 17;
        let mut tso = ethernet_ipv4_tcp(&timestamps, 50);
        tso[16..18].copy_from_slice(&[0, 0]);
        let mut short_total = ethernet_ipv4_tcp(&[], 10);
        short_total[16..18].copy_from_slice(&[0, 30]);
        let mut small_offset = ethernet_ipv4_tcp(&[], 10);
        small_offset[46] = 0x40;
        let cut = ethernet_ipv4_tcp(&timestamps, 0)[..50].to_vec();
        let mut long_total = ethernet_ipv4_tcp(&[], 12);
        long_total[16..18].copy_from_slice(&[0xff, 0xff]);
        frames.extend([
            fragment,
            udp,
            tso,
            short_total,
            small_offset,
            cut,
            long_total,
        ]);
        for (i, data) in frames.iter().enumerate() {
            let packet = Packet {
                number: 1,
                time: 7,
                link_type: link_type::ETHERNET,
                data,
                wire_len: data.len() as u32,
                interface: 0,
                time_units: 1_000_000,
            };
            let general = decode_general(&packet, None, &mut false).map_err(|stop| match stop {
                Stop::Skip(reason) => reason,
                Stop::Held => unreachable!("no fragment table"),
            });
            if let Some(fast) = fast_path(&packet) {
                assert_eq!(fast, general, "frame {i}");
            }
            assert_eq!(decode_packet(&packet), general, "frame {i}");
        }
    }
}
