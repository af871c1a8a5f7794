//! Tunnels and label stacks between the link and the connection: MPLS, PPPoE, GRE (with
//! NVGRE, ERSPAN types I, II and III, Aruba's 802.11 frames; also in UDP), provider
//! backbone bridging, Cisco FabricPath, VN-Tag, VXLAN (and VXLAN-GPE), Geneve and GTP-U. IP in
//! IP needs nothing here: its inner packet is simply the next layer.
//!
//! etherparse decodes the Ethernet, VLAN, IP and UDP headers around these; it has no
//! decoder for these headers, so each is read here, by its specification, down to its
//! payload and (for overlays whose networks may reuse addresses) the network identifier.

use crate::capture::SkipReason;
use crate::capture::link::{Layer, ether_type, ppp, ppp_payload};

/// The layer inside a tunnel, and the overlay network it belongs to (0: none known).
pub(crate) struct Inner<'a> {
    pub layer: Layer<'a>,
    pub overlay: Option<u32>,
}

impl<'a> Inner<'a> {
    fn plain(layer: Layer<'a>) -> Self {
        Inner {
            layer,
            overlay: None,
        }
    }
}

/// Kinds of overlay network, in the top bits of [`Segment::tunnel`](crate::segment::Segment):
/// each has its own 24-bit identifier space.
mod overlay {
    pub const VXLAN: u32 = 1 << 24;
    pub const GENEVE: u32 = 2 << 24;
    pub const NVGRE: u32 = 3 << 24;
}

/// UDP ports of the tunnels decoded here.
mod port {
    /// VXLAN (RFC 7348 5; IANA).
    pub const VXLAN: u16 = 4789;
    /// VXLAN on Linux before the IANA port (drivers/net/vxlan: `vxlan_port` = 8472).
    pub const VXLAN_LINUX: u16 = 8472;
    /// VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe 3.1).
    pub const VXLAN_GPE: u16 = 4790;
    /// Geneve (RFC 8926 3.3).
    pub const GENEVE: u16 = 6081;
    /// GTP-U (3GPP TS 29.281 4.4.2.3).
    pub const GTP_U: u16 = 2152;
    /// GRE-in-UDP (RFC 8086 3.1).
    pub const GRE_IN_UDP: u16 = 4754;
}

/// The payload of an EtherType that etherparse does not decode, when it is one decoded
/// here: `None` leaves it to etherparse (IP, VLAN tags) or to "not IP".
pub(crate) fn ether_type_payload(kind: u16, data: &[u8]) -> Option<Result<Inner<'_>, SkipReason>> {
    match kind {
        ether_type::MPLS_UNICAST | ether_type::MPLS_MULTICAST => Some(mpls(data).map(Inner::plain)),
        ether_type::PPPOE_SESSION => Some(pppoe_session(data).map(Inner::plain)),
        ether_type::TRANSPARENT_ETHERNET => Some(Ok(Inner::plain(Layer::Ethernet(data)))),
        // The I-TAG (IEEE 802.1ah 9.7): flags and the 24-bit service identifier.
        ether_type::PBB_ITAG => Some(
            data.get(4..)
                .map(|frame| Inner::plain(Layer::Ethernet(frame)))
                .ok_or(SkipReason::TruncatedHeaders),
        ),
        ether_type::FABRICPATH => Some(
            data.get(2..)
                .map(|frame| Inner::plain(Layer::Ethernet(frame)))
                .ok_or(SkipReason::TruncatedHeaders),
        ),
        ether_type::VN_TAG => Some(match data {
            [_, _, _, _, hi, lo, rest @ ..] => Ok(Inner::plain(Layer::EtherType(
                u16::from_be_bytes([*hi, *lo]),
                rest,
            ))),
            _ => Err(SkipReason::TruncatedHeaders),
        }),
        ether_type::ARUBA_IEEE802_11 => {
            Some(crate::capture::link::ieee802_11(data, false).map(Inner::plain))
        }
        0..=ether_type::MAX_LENGTH => Some(crate::capture::link::llc(data).map(Inner::plain)),
        _ => None,
    }
}

/// The tunnel a UDP datagram between these ports carries, if it is one decoded here. The
/// tunnel's well-known port is its destination in both directions; a source port is
/// checked too, for tunnels whose replies come back from it (GTP-U).
pub(crate) fn udp_payload(
    source: u16,
    destination: u16,
    data: &[u8],
) -> Option<Result<Inner<'_>, SkipReason>> {
    let tunnel_port = [destination, source].into_iter().find(|p| {
        matches!(
            *p,
            port::VXLAN
                | port::VXLAN_LINUX
                | port::VXLAN_GPE
                | port::GENEVE
                | port::GTP_U
                | port::GRE_IN_UDP
        )
    })?;
    Some(match tunnel_port {
        port::VXLAN | port::VXLAN_LINUX => vxlan(data),
        port::VXLAN_GPE => vxlan_gpe(data),
        port::GENEVE => geneve(data),
        port::GRE_IN_UDP => gre(data),
        _ => gtp_u(data),
    })
}

/// An MPLS label stack (RFC 3032 2.1), then what its payload looks like: IPv4 or IPv6
/// by the version nibble (explicit-null labels 0 and 2 say so too), an Ethernet
/// pseudowire behind a control word when the nibble is 0 (RFC 4385 3, RFC 4448 4.6),
/// and an Ethernet pseudowire without one otherwise.
fn mpls(mut data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    // Each label takes 4 bytes of a finite packet, so this ends.
    loop {
        let [_, _, third, _, ref rest @ ..] = *data else {
            return Err(SkipReason::TruncatedHeaders);
        };
        data = rest;
        let bottom_of_stack = third & 0x01 != 0;
        if bottom_of_stack {
            break;
        }
    }
    match data.first().map(|b| b >> 4) {
        Some(4 | 6) => Ok(Layer::Ip(data)),
        Some(0) => Ok(Layer::Ethernet(
            data.get(4..).ok_or(SkipReason::TruncatedHeaders)?,
        )),
        Some(_) => Ok(Layer::Ethernet(data)),
        None => Err(SkipReason::TruncatedHeaders),
    }
}

/// A PPPoE session frame (RFC 2516 4): version and type 0x11, code 0, session, length,
/// then a PPP protocol number and the datagram.
fn pppoe_session(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let [version_type, code, _, _, _, _, hi, lo, ref rest @ ..] = *data else {
        return Err(SkipReason::TruncatedHeaders);
    };
    if version_type != 0x11 || code != 0 {
        return Err(SkipReason::MalformedHeaders);
    }
    ppp_payload(u16::from_be_bytes([hi, lo]), rest)
}

/// GRE header flags (RFC 2784 2, RFC 2890 2, RFC 2637 4.1).
mod gre_flag {
    pub const CHECKSUM: u16 = 0x8000;
    pub const ROUTING: u16 = 0x4000;
    pub const KEY: u16 = 0x2000;
    pub const SEQUENCE: u16 = 0x1000;
    /// Enhanced GRE (PPTP): an acknowledgment number follows.
    pub const ACK: u16 = 0x0080;
    pub const VERSION: u16 = 0x0007;
}

/// GRE protocol types with a header of their own after GRE.
mod gre_protocol {
    /// ERSPAN types I and II (draft-foschiano-erspan-03 4.1, 4.2).
    pub const ERSPAN_II: u16 = 0x88be;
    /// ERSPAN type III (draft-foschiano-erspan-03 4.3).
    pub const ERSPAN_III: u16 = 0x22eb;
    /// PPP, in PPTP's enhanced GRE.
    pub const PPP: u16 = 0x880b;
}

/// A GRE packet (RFC 2784, keys and sequence numbers RFC 2890, PPTP's version 1 RFC 2637
/// 4.1): its optional fields skipped, its payload by protocol type. An Ethernet payload
/// with a key is NVGRE (RFC 7637 3.2): the key's top 24 bits name the virtual subnet.
pub(crate) fn gre(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let [f_hi, f_lo, p_hi, p_lo, ..] = *data else {
        return Err(SkipReason::TruncatedHeaders);
    };
    let flags = u16::from_be_bytes([f_hi, f_lo]);
    let protocol = u16::from_be_bytes([p_hi, p_lo]);
    let has = |flag: u16| flags & flag != 0;
    let (header, key_at) = match flags & gre_flag::VERSION {
        0 => {
            // Source routing (RFC 1701) is deprecated and nothing sends it.
            if has(gre_flag::ROUTING) {
                return Err(SkipReason::UnsupportedEncapsulation("GRE source routing"));
            }
            let key_at = 4 + 4 * usize::from(has(gre_flag::CHECKSUM));
            let header = key_at
                + 4 * usize::from(has(gre_flag::KEY))
                + 4 * usize::from(has(gre_flag::SEQUENCE));
            (header, has(gre_flag::KEY).then_some(key_at))
        }
        1 => (
            8 + 4 * usize::from(has(gre_flag::SEQUENCE)) + 4 * usize::from(has(gre_flag::ACK)),
            None,
        ),
        _ => return Err(SkipReason::MalformedHeaders),
    };
    let payload = data.get(header..).ok_or(SkipReason::TruncatedHeaders)?;
    match protocol {
        gre_protocol::ERSPAN_II if has(gre_flag::SEQUENCE) => erspan_ii(payload),
        // Type I has no sequence number and no header of its own.
        gre_protocol::ERSPAN_II => Ok(Inner::plain(Layer::Ethernet(payload))),
        gre_protocol::ERSPAN_III => erspan_iii(payload),
        gre_protocol::PPP => ppp(payload).map(Inner::plain),
        ether_type::TRANSPARENT_ETHERNET => {
            let key = key_at.and_then(|at| data.get(at..at + 4));
            Ok(Inner {
                layer: Layer::Ethernet(payload),
                overlay: key.map(|k| overlay::NVGRE | u32::from_be_bytes([0, k[0], k[1], k[2]])),
            })
        }
        other => Ok(Inner::plain(Layer::EtherType(other, payload))),
    }
}

/// ERSPAN type II (draft-foschiano-erspan-03 4.2): version 1, VLAN, CoS, encapsulation,
/// truncation, session, index (8 bytes), then the mirrored Ethernet frame.
fn erspan_ii(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let header = data.get(..8).ok_or(SkipReason::TruncatedHeaders)?;
    if header[0] >> 4 != 1 {
        return Err(SkipReason::MalformedHeaders);
    }
    Ok(Inner::plain(Layer::Ethernet(&data[8..])))
}

/// ERSPAN type III (draft-foschiano-erspan-03 4.3): version 2, VLAN, CoS, BSO, T,
/// session, timestamp, SGT, then P, frame type (5 bits), hardware ID, D, granularity and
/// O (12 bytes); O announces an 8-byte platform-specific subheader. Frame type 0 is an
/// Ethernet frame, 2 an IP packet.
fn erspan_iii(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let header = data.get(..12).ok_or(SkipReason::TruncatedHeaders)?;
    if header[0] >> 4 != 2 {
        return Err(SkipReason::MalformedHeaders);
    }
    let last = u16::from_be_bytes([header[10], header[11]]);
    let frame_type = (last >> 10) & 0x1f;
    let has_subheader = last & 1 != 0;
    let start = 12 + 8 * usize::from(has_subheader);
    let payload = data.get(start..).ok_or(SkipReason::TruncatedHeaders)?;
    match frame_type {
        0 => Ok(Inner::plain(Layer::Ethernet(payload))),
        2 => Ok(Inner::plain(Layer::Ip(payload))),
        _ => Err(SkipReason::UnsupportedEncapsulation("ERSPAN frame type")),
    }
}

/// VXLAN (RFC 7348 5): flags with I set, reserved, a 24-bit network identifier, reserved;
/// then an Ethernet frame.
fn vxlan(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let header = data.get(..8).ok_or(SkipReason::TruncatedHeaders)?;
    let vni_valid = header[0] & 0x08 != 0;
    if !vni_valid {
        return Err(SkipReason::MalformedHeaders);
    }
    Ok(Inner {
        layer: Layer::Ethernet(&data[8..]),
        overlay: Some(overlay::VXLAN | u32::from_be_bytes([0, header[4], header[5], header[6]])),
    })
}

/// VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe 3.3): as VXLAN, with a next-protocol byte (1
/// IPv4, 2 IPv6, 3 Ethernet, 5 MPLS) valid when P is set; without P, Ethernet.
fn vxlan_gpe(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let header = data.get(..8).ok_or(SkipReason::TruncatedHeaders)?;
    let next_protocol_valid = header[0] & 0x04 != 0;
    let payload = &data[8..];
    let layer = match (next_protocol_valid, header[3]) {
        (false, _) | (true, 3) => Layer::Ethernet(payload),
        (true, 1 | 2) => Layer::Ip(payload),
        (true, 5) => Layer::EtherType(ether_type::MPLS_UNICAST, payload),
        _ => {
            return Err(SkipReason::UnsupportedEncapsulation(
                "VXLAN-GPE next protocol",
            ));
        }
    };
    // VXLAN-GPE networks share VXLAN's identifier space on a VTEP.
    let overlay = (header[0] & 0x08 != 0)
        .then(|| overlay::VXLAN | u32::from_be_bytes([0, header[4], header[5], header[6]]));
    Ok(Inner { layer, overlay })
}

/// Geneve (RFC 8926 3.4): version 0, options length (4-byte words), flags, protocol
/// type (an EtherType), a 24-bit network identifier, reserved, options; then the payload.
fn geneve(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let header = data.get(..8).ok_or(SkipReason::TruncatedHeaders)?;
    if header[0] >> 6 != 0 {
        return Err(SkipReason::MalformedHeaders);
    }
    let options = usize::from(header[0] & 0x3f) * 4;
    let payload = data
        .get(8 + options..)
        .ok_or(SkipReason::TruncatedHeaders)?;
    let protocol = u16::from_be_bytes([header[2], header[3]]);
    Ok(Inner {
        layer: Layer::EtherType(protocol, payload),
        overlay: Some(overlay::GENEVE | u32::from_be_bytes([0, header[4], header[5], header[6]])),
    })
}

/// GTP-U message type of a user packet (3GPP TS 29.281 6.1).
const GTP_G_PDU: u8 = 255;

/// GTP-U (3GPP TS 29.281 5.1, 5.2): version 1, protocol type 1, flags E, S and PN (any
/// of them adds sequence number, N-PDU number and next extension type), message type,
/// length, TEID; extension headers, each its length in 4-byte words with the next type
/// in its last byte; then the user's IP packet. TEIDs differ by direction, so they do
/// not identify a network.
fn gtp_u(data: &[u8]) -> Result<Inner<'_>, SkipReason> {
    let header = data.get(..8).ok_or(SkipReason::TruncatedHeaders)?;
    let (flags, message_type) = (header[0], header[1]);
    if flags >> 5 != 1 || flags & 0x10 == 0 {
        return Err(SkipReason::MalformedHeaders);
    }
    if message_type != GTP_G_PDU {
        return Err(SkipReason::NotIp);
    }
    let has_optional = flags & 0x07 != 0;
    let has_extensions = flags & 0x04 != 0;
    let mut at = 8;
    if has_optional {
        let optional = data.get(8..12).ok_or(SkipReason::TruncatedHeaders)?;
        at = 12;
        let mut next = if has_extensions { optional[3] } else { 0 };
        // Each extension takes at least 4 bytes of a finite packet, so this ends.
        while next != 0 {
            let words = usize::from(*data.get(at).ok_or(SkipReason::TruncatedHeaders)?);
            if words == 0 {
                return Err(SkipReason::MalformedHeaders);
            }
            let end = at + 4 * words;
            next = *data.get(end - 1).ok_or(SkipReason::TruncatedHeaders)?;
            at = end;
        }
    }
    Ok(Inner::plain(Layer::Ip(
        data.get(at..).ok_or(SkipReason::TruncatedHeaders)?,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(layer: &Layer<'_>) -> (&'static str, u8) {
        match layer {
            Layer::Ethernet(d) => ("ethernet", d[0]),
            Layer::Ip(d) => ("ip", d[0]),
            Layer::EtherType(_, d) => ("ether_type", d[0]),
        }
    }

    #[test]
    fn mpls_stacks_end_at_the_bottom_label() {
        // Two labels, the second at the bottom, then IPv4.
        let packet = [0, 0x10, 0x00, 64, 0, 0x20, 0x01, 64, 0x45, 0];
        assert_eq!(starts(&mpls(&packet).unwrap()), ("ip", 0x45));
        // A control word, then Ethernet.
        let pseudowire = [0, 0x10, 0x01, 64, 0, 0, 0, 0, 0xaa];
        assert_eq!(starts(&mpls(&pseudowire).unwrap()), ("ethernet", 0xaa));
        assert!(matches!(
            mpls(&[0, 0x10, 0x00, 64]),
            Err(SkipReason::TruncatedHeaders)
        ));
    }

    #[test]
    fn gre_optional_fields_and_nvgre_subnet() {
        // Checksum, key and sequence: 16 bytes; IPv4.
        let mut packet = vec![0xb0, 0x00, 0x08, 0x00];
        packet.extend([0; 12]);
        packet.push(0x45);
        let inner = gre(&packet).unwrap();
        assert!(matches!(inner.layer, Layer::EtherType(0x0800, [0x45])));
        assert_eq!(inner.overlay, None);
        // NVGRE: key 0x00abcd01 (subnet 0xabcd, flow 1).
        let nvgre = [0x20, 0x00, 0x65, 0x58, 0x00, 0xab, 0xcd, 0x01, 0xee];
        let inner = gre(&nvgre).unwrap();
        assert_eq!(starts(&inner.layer), ("ethernet", 0xee));
        assert_eq!(inner.overlay, Some(overlay::NVGRE | 0xabcd));
    }

    #[test]
    fn erspan_types_one_two_and_three() {
        // Type I: no sequence number, the frame right after GRE.
        let type_1 = [0x00, 0x00, 0x88, 0xbe, 0xaa];
        assert_eq!(starts(&gre(&type_1).unwrap().layer), ("ethernet", 0xaa));
        // Type II: sequence number, then 8 bytes of ERSPAN.
        let mut type_2 = vec![0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 1];
        type_2.extend([0x10, 0, 0, 5, 0, 0, 0, 0, 0xbb]);
        assert_eq!(starts(&gre(&type_2).unwrap().layer), ("ethernet", 0xbb));
        // Type III with the platform subheader (O set), frame type 0.
        let mut type_3 = vec![0x10, 0x00, 0x22, 0xeb, 0, 0, 0, 1];
        type_3.extend([0x20, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1]);
        type_3.extend([0; 8]);
        type_3.push(0xcc);
        assert_eq!(starts(&gre(&type_3).unwrap().layer), ("ethernet", 0xcc));
    }

    #[test]
    fn vxlan_geneve_and_gtp_u_by_port() {
        let vxlan = [0x08, 0, 0, 0, 0, 0x01, 0x02, 0, 0xaa];
        let inner = udp_payload(50000, port::VXLAN, &vxlan).unwrap().unwrap();
        assert_eq!(starts(&inner.layer), ("ethernet", 0xaa));
        assert_eq!(inner.overlay, Some(overlay::VXLAN | 0x102));
        // Geneve with one 4-byte option word.
        let geneve = [0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 1, 2, 3, 4, 0xbb];
        let inner = udp_payload(50000, port::GENEVE, &geneve).unwrap().unwrap();
        assert!(matches!(inner.layer, Layer::EtherType(0x6558, [0xbb])));
        assert_eq!(inner.overlay, Some(overlay::GENEVE | 7));
        // GTP-U with a sequence number and one extension header (PDU session container).
        let mut gtp = vec![0x36, 0xff, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x85];
        gtp.extend([1, 0x10, 0x01, 0x00]);
        gtp.push(0x45);
        let inner = udp_payload(port::GTP_U, port::GTP_U, &gtp)
            .unwrap()
            .unwrap();
        assert_eq!(starts(&inner.layer), ("ip", 0x45));
        assert_eq!(inner.overlay, None);
        // An echo request is not a user packet; another port is not a tunnel.
        let echo = [0x32, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            udp_payload(port::GTP_U, port::GTP_U, &echo),
            Some(Err(SkipReason::NotIp))
        ));
        assert!(udp_payload(53, 40000, &vxlan).is_none());
    }

    #[test]
    fn pppoe_session_carries_ip() {
        let frame = [0x11, 0, 0x12, 0x34, 0, 3, 0x00, 0x21, 0x45];
        assert_eq!(starts(&pppoe_session(&frame).unwrap()), ("ip", 0x45));
        assert!(matches!(
            pppoe_session(&[0x11, 0x09, 0, 0, 0, 0, 0, 0]),
            Err(SkipReason::MalformedHeaders)
        ));
    }
}
