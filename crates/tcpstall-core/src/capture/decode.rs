//! Link, network and transport headers of one captured packet, down to a [`Segment`].

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use etherparse::err::packet::SliceError;
use etherparse::err::{Layer, ip::LaxHeaderSliceError};
use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};

use crate::capture::Packet;
use crate::segment::{Segment, TcpFlags, TcpOptions};

/// pcap LINKTYPE_ values this module decodes (tcpdump.org/linktypes.html).
mod link {
    pub const NULL: i32 = 0;
    pub const ETHERNET: i32 = 1;
    pub const RAW_OLD_A: i32 = 12;
    pub const RAW_OLD_B: i32 = 14;
    pub const RAW: i32 = 101;
    pub const LOOP: i32 = 108;
    pub const LINUX_SLL: i32 = 113;
    pub const IPV4: i32 = 228;
    pub const IPV6: i32 = 229;
    pub const LINUX_SLL2: i32 = 276;
}

/// Why a packet did not become a segment. Every skipped packet is counted by reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkipReason {
    UnsupportedLinkType(i32),
    NotIp,
    NotTcp,
    IpFragment,
    TruncatedHeaders,
    /// A header field that cannot be right: an IPv4 header length or TCP data offset
    /// below 5 words, an IP version that contradicts the link layer, and the like.
    MalformedHeaders,
}

impl SkipReason {
    pub fn describe(&self) -> String {
        match self {
            SkipReason::UnsupportedLinkType(t) => format!("unsupported link type {t}"),
            SkipReason::NotIp => "not IP".into(),
            SkipReason::NotTcp => "IP but not TCP".into(),
            SkipReason::IpFragment => "IP fragment".into(),
            SkipReason::TruncatedHeaders => "cut off before the end of the TCP header".into(),
            SkipReason::MalformedHeaders => "malformed IP or TCP header".into(),
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
        *self.by_reason.entry(reason).or_insert(0) += 1;
    }
    pub fn total(&self) -> u64 {
        self.by_reason.values().sum()
    }
}

/// Decodes one packet into a TCP segment, or says why it is not one.
#[inline]
pub fn decode_packet(packet: &Packet<'_>) -> Result<Segment, SkipReason> {
    let fast = match packet.link_type {
        link::ETHERNET => crate::capture::fast::decode_ethernet_ipv4(packet),
        link::RAW | link::IPV4 if packet.data.first().is_some_and(|b| b >> 4 == 4) => {
            crate::capture::fast::decode_ipv4(packet, packet.data)
        }
        _ => None,
    };
    match fast {
        Some(decoded) => decoded,
        None => decode_general(packet),
    }
}

/// Every link type and header chain, through etherparse.
#[inline(never)]
fn decode_general(packet: &Packet<'_>) -> Result<Segment, SkipReason> {
    let data = packet.data;
    let sliced = match packet.link_type {
        link::ETHERNET => {
            LaxSlicedPacket::from_ethernet(data).map_err(|_| SkipReason::TruncatedHeaders)?
        }
        link::RAW | link::RAW_OLD_A | link::RAW_OLD_B | link::IPV4 | link::IPV6 => from_ip(data)?,
        link::NULL | link::LOOP => {
            // BSD loopback: a 4-byte address family, host byte order for NULL, network for LOOP.
            let family = data.get(..4).ok_or(SkipReason::TruncatedHeaders)?;
            // A family value is small, so whichever byte order the capturing host used,
            // the reading with the zero bytes in front is the right one.
            let bytes = [family[0], family[1], family[2], family[3]];
            let family = if packet.link_type == link::LOOP || (bytes[0] == 0 && bytes[1] == 0) {
                u32::from_be_bytes(bytes)
            } else {
                u32::from_le_bytes(bytes)
            };
            // AF_INET is 2 everywhere; AF_INET6 is 10, 24, 28 or 30 depending on the BSD.
            match family {
                2 | 10 | 24 | 28 | 30 => from_ip(&data[4..])?,
                _ => return Err(SkipReason::NotIp),
            }
        }
        link::LINUX_SLL => {
            // 16-byte header; the protocol (an EtherType) is its last two bytes.
            let header = data.get(..16).ok_or(SkipReason::TruncatedHeaders)?;
            let ether_type = u16::from_be_bytes([header[14], header[15]]);
            LaxSlicedPacket::from_ether_type(EtherType(ether_type), &data[16..])
        }
        link::LINUX_SLL2 => {
            // 20-byte header; the protocol (an EtherType) is its first two bytes.
            let header = data.get(..20).ok_or(SkipReason::TruncatedHeaders)?;
            let ether_type = u16::from_be_bytes([header[0], header[1]]);
            LaxSlicedPacket::from_ether_type(EtherType(ether_type), &data[20..])
        }
        other => return Err(SkipReason::UnsupportedLinkType(other)),
    };
    segment_from_sliced(packet, &sliced)
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

fn segment_from_sliced(
    packet: &Packet<'_>,
    sliced: &LaxSlicedPacket<'_>,
) -> Result<Segment, SkipReason> {
    let (src_ip, dst_ip, ip_payload_declared) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(ipv4)) => {
            let header = ipv4.header();
            let payload = ipv4.payload();
            if payload.fragmented {
                return Err(SkipReason::IpFragment);
            }
            let payload_offset =
                payload.payload.as_ptr() as usize - header.slice().as_ptr() as usize;
            let total = usize::from(header.total_len());
            // A total length of 0 is what TSO-offloaded packets carry in captures.
            let declared = if total >= payload_offset {
                total - payload_offset
            } else {
                payload.payload.len()
            };
            (
                IpAddr::V4(header.source_addr()),
                IpAddr::V4(header.destination_addr()),
                declared,
            )
        }
        Some(LaxNetSlice::Ipv6(ipv6)) => {
            let header = ipv6.header();
            let payload = ipv6.payload();
            if payload.fragmented {
                return Err(SkipReason::IpFragment);
            }
            let payload_offset =
                payload.payload.as_ptr() as usize - header.slice().as_ptr() as usize;
            let total = 40 + usize::from(header.payload_length());
            let declared = if header.payload_length() != 0 && total >= payload_offset {
                total - payload_offset
            } else {
                payload.payload.len()
            };
            (
                IpAddr::V6(header.source_addr()),
                IpAddr::V6(header.destination_addr()),
                declared,
            )
        }
        Some(LaxNetSlice::Arp(_)) | None => {
            return Err(match &sliced.stop_err {
                Some((error, _)) if sliced.link.is_some() && is_ip_ether_type(sliced) => {
                    stop_reason(error)
                }
                _ => SkipReason::NotIp,
            });
        }
    };
    let tcp = match &sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => tcp,
        Some(_) => return Err(SkipReason::NotTcp),
        None => {
            let ip_number = sliced
                .net
                .as_ref()
                .and_then(|n| n.ip_payload_ref())
                .map(|p| p.ip_number);
            return Err(match &sliced.stop_err {
                Some((error, Layer::TcpHeader)) => stop_reason(error),
                _ if ip_number == Some(etherparse::IpNumber::TCP) => SkipReason::TruncatedHeaders,
                _ => SkipReason::NotTcp,
            });
        }
    };
    let header_len = tcp.header_slice().len();
    let payload_len = ip_payload_declared.saturating_sub(header_len) as u32;
    let options = tcp_options(tcp.options());
    Ok(Segment {
        time: packet.time,
        src: SocketAddr::new(src_ip, tcp.source_port()),
        dst: SocketAddr::new(dst_ip, tcp.destination_port()),
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        flags: TcpFlags(tcp.header_slice()[13] & 0x3f),
        window: tcp.window_size(),
        payload_len,
        options,
    })
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

/// TCP option kinds this project reads (RFC 9293 3.2, RFC 7323, RFC 2018).
mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// The TCP options this project reads, from the option bytes of a TCP header (RFC 9293
/// 3.2, RFC 7323, RFC 2018). Unknown kinds are skipped by their length; an option whose
/// length cannot be right ends the list, as a receiving stack would stop there.
pub(crate) fn tcp_options(mut bytes: &[u8]) -> TcpOptions {
    // Nearly every segment of a connection with timestamps carries exactly these: two
    // NOPs, then the timestamps (RFC 7323 appendix A); read them at once.
    if let [
        option::NOP,
        option::NOP,
        option::TIMESTAMPS,
        10,
        values @ ..,
    ] = bytes
        && let Ok(values) = <&[u8; 8]>::try_from(values)
    {
        return TcpOptions {
            timestamps: Some(timestamps(values)),
            ..TcpOptions::default()
        };
    }
    let mut options = TcpOptions::default();
    while let [kind, rest @ ..] = bytes {
        match *kind {
            option::END => break,
            option::NOP => {
                bytes = rest;
                continue;
            }
            _ => {}
        }
        let Some(&len) = rest.first() else { break };
        let len = usize::from(len);
        let Some(body) = bytes.get(2..len.max(2)).filter(|_| len >= 2) else {
            break;
        };
        match (*kind, body) {
            (option::MSS, &[hi, lo]) => options.mss = Some(u16::from_be_bytes([hi, lo])),
            (option::WINDOW_SCALE, &[shift]) => options.window_scale = Some(shift),
            (option::SACK_PERMITTED, []) => options.sack_permitted = true,
            (option::SACK, blocks)
                if !blocks.is_empty() && blocks.len() % 8 == 0 && blocks.len() <= 32 =>
            {
                options.sack_blocks = (blocks.len() / 8) as u8;
            }
            (option::TIMESTAMPS, values) if values.len() == 8 => {
                options.timestamps = <&[u8; 8]>::try_from(values).ok().map(timestamps);
            }
            (
                option::MSS
                | option::WINDOW_SCALE
                | option::SACK_PERMITTED
                | option::SACK
                | option::TIMESTAMPS,
                _,
            ) => break,
            _ => {}
        }
        bytes = &bytes[len..];
    }
    options
}

/// TSval and TSecr, from the timestamps option's body (RFC 7323 section 3).
fn timestamps(values: &[u8; 8]) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = *values;
    (
        u32::from_be_bytes([a, b, c, d]),
        u32::from_be_bytes([e, f, g, h]),
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
        // TCP data offset of 4 words; the TCP header cut short.
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
        frames.extend([fragment, udp, tso, short_total, small_offset, cut]);
        for (i, data) in frames.iter().enumerate() {
            let packet = Packet {
                number: 1,
                time: 7,
                link_type: link::ETHERNET,
                data,
            };
            assert_eq!(decode_packet(&packet), decode_general(&packet), "frame {i}");
        }
    }

    #[test]
    fn reads_a_syn_s_options_and_a_data_segment_s_timestamps() {
        // MSS 1460, SACK permitted, timestamps, NOP, window scale 7: Linux's SYN.
        let syn = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let options = tcp_options(&syn);
        assert_eq!(options.mss, Some(1460));
        assert!(options.sack_permitted);
        assert_eq!(options.timestamps, Some((1, 0)));
        assert_eq!(options.window_scale, Some(7));
        let data = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8];
        assert_eq!(tcp_options(&data).timestamps, Some((9, 8)));
    }

    #[test]
    fn counts_sack_blocks_and_skips_unknown_kinds_by_their_length() {
        // An unknown 4-byte option (kind 30, as MPTCP), then SACK with two blocks.
        let mut bytes = vec![30, 4, 0xaa, 0xbb, 1, 1, 5, 18];
        bytes.extend_from_slice(&[0; 16]);
        let options = tcp_options(&bytes);
        assert_eq!(options.sack_blocks, 2);
    }

    #[test]
    fn a_malformed_option_ends_the_list() {
        // A length of 1, a known kind with the wrong length, a length past the end.
        assert_eq!(tcp_options(&[30, 1, 8, 10]), TcpOptions::default());
        assert_eq!(tcp_options(&[2, 3, 5, 1, 3, 3, 7]), TcpOptions::default());
        assert_eq!(tcp_options(&[3, 3, 7, 8, 10, 0]).window_scale, Some(7));
        assert_eq!(tcp_options(&[3, 3, 7, 8, 10, 0]).timestamps, None);
        // Nothing after the end-of-list option is read.
        assert_eq!(tcp_options(&[0, 3, 3, 7]).window_scale, None);
    }
}
