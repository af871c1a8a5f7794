//! The link layer of a captured packet, down to what the network layer starts with: an
//! Ethernet frame, a payload of a known EtherType, or an IP packet.
//!
//! Ethernet itself (with its VLAN tags) is etherparse's; the headers it does not cover
//! (BSD loopback, Linux cooked capture, 802.11 behind radiotap, Prism or AVS headers,
//! FDDI, LLC/SNAP, PPP, Cisco HDLC, NFLOG, IP over InfiniBand, Linux ARCnet) are each
//! read here down to their payload, no further.

use crate::capture::SkipReason;

/// Where decoding goes on after a header: the layer below it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Layer<'a> {
    /// An Ethernet II frame (its VLAN tags included).
    Ethernet(&'a [u8]),
    /// A payload whose protocol an EtherType names (values below 0x0600, an 802.3
    /// length, announce an LLC header).
    EtherType(u16, &'a [u8]),
    /// An IPv4 or IPv6 packet.
    Ip(&'a [u8]),
}

/// pcap LINKTYPE_ values decoded here (tcpdump.org/linktypes.html).
pub(crate) mod link_type {
    pub const NULL: i32 = 0;
    pub const ETHERNET: i32 = 1;
    pub const PPP: i32 = 9;
    pub const FDDI: i32 = 10;
    pub const RAW_OLD_A: i32 = 12;
    pub const RAW_OLD_B: i32 = 14;
    pub const PPP_HDLC: i32 = 50;
    pub const PPP_ETHER: i32 = 51;
    pub const C_HDLC: i32 = 104;
    pub const ATM_RFC1483: i32 = 100;
    pub const RAW: i32 = 101;
    pub const IEEE802_11: i32 = 105;
    pub const LOOP: i32 = 108;
    pub const LINUX_SLL: i32 = 113;
    pub const ARCNET_LINUX: i32 = 129;
    pub const IEEE802_11_PRISM: i32 = 119;
    pub const IEEE802_11_RADIOTAP: i32 = 127;
    pub const IEEE802_11_AVS: i32 = 163;
    pub const IPV4: i32 = 228;
    pub const IPV6: i32 = 229;
    pub const NFLOG: i32 = 239;
    pub const IPOIB: i32 = 242;
    pub const LINUX_SLL2: i32 = 276;
}

/// A family of link types decoded here, as a capture with none of them is told.
pub(crate) struct LinkFamily {
    /// The name people know it by.
    pub name: &'static str,
    /// Its LINKTYPE_ values.
    pub types: &'static [i32],
    /// The headers a capture may put before its frames, each with its own LINKTYPE_ value.
    pub headers: &'static [(&'static str, i32)],
}

/// Every link type [`link_layer`] decodes, in families; a test holds the two to each other.
pub(crate) const SUPPORTED: &[LinkFamily] = {
    use link_type::*;
    const fn family(name: &'static str, types: &'static [i32]) -> LinkFamily {
        LinkFamily {
            name,
            types,
            headers: &[],
        }
    }
    &[
        family("Ethernet", &[ETHERNET]),
        family("BSD loopback", &[NULL, LOOP]),
        family("raw IP", &[RAW_OLD_A, RAW_OLD_B, RAW, IPV4, IPV6]),
        family("Linux cooked", &[LINUX_SLL, LINUX_SLL2]),
        family("PPP", &[PPP, PPP_HDLC, PPP_ETHER]),
        family("Cisco HDLC", &[C_HDLC]),
        family("FDDI", &[FDDI]),
        family("ATM LLC", &[ATM_RFC1483]),
        LinkFamily {
            name: "802.11",
            types: &[IEEE802_11],
            headers: &[
                ("Prism", IEEE802_11_PRISM),
                ("radiotap", IEEE802_11_RADIOTAP),
                ("AVS", IEEE802_11_AVS),
            ],
        },
        family("NFLOG", &[NFLOG]),
        family("IP over InfiniBand", &[IPOIB]),
        family("Linux ARCnet", &[ARCNET_LINUX]),
    ]
};

/// [`SUPPORTED`] in one line: `Ethernet (1), BSD loopback (0, 108), ..., 802.11 (105,
/// with Prism 119, radiotap 127, AVS 163), ...`.
pub(crate) fn supported_link_types() -> String {
    SUPPORTED
        .iter()
        .map(|family| {
            let mut numbers: Vec<String> = family.types.iter().map(i32::to_string).collect();
            for (i, (header, value)) in family.headers.iter().enumerate() {
                let with = if i == 0 { "with " } else { "" };
                numbers.push(format!("{with}{header} {value}"));
            }
            format!("{} ({})", family.name, numbers.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// EtherTypes that name something other than IP or a VLAN tag (IEEE registry).
pub(crate) mod ether_type {
    /// Transparent Ethernet Bridging: an Ethernet frame inside (GRE, Geneve).
    pub const TRANSPARENT_ETHERNET: u16 = 0x6558;
    pub const MPLS_UNICAST: u16 = 0x8847;
    pub const MPLS_MULTICAST: u16 = 0x8848;
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// Provider backbone bridging (IEEE 802.1ah): an I-TAG, then the customer's frame.
    pub const PBB_ITAG: u16 = 0x88e7;
    /// Cisco VN-Tag: 4 bytes of tag, then the next EtherType.
    pub const VN_TAG: u16 = 0x8926;
    /// Cisco FabricPath: the outer header's FTag and TTL, then the inner Ethernet frame.
    pub const FABRICPATH: u16 = 0x8903;
    /// 802.11 frames in GRE from Aruba access points to their controller.
    pub const ARUBA_IEEE802_11: u16 = 0x8200;
    /// Values up to this are 802.3 lengths, not types (IEEE 802.3 3.2.6).
    pub const MAX_LENGTH: u16 = 0x05ff;
}

/// What is left to decode of a packet captured on `link`.
pub(crate) fn link_layer(link: i32, data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    use link_type::*;
    match link {
        ETHERNET => Ok(Layer::Ethernet(data)),
        RAW | RAW_OLD_A | RAW_OLD_B | IPV4 | IPV6 => Ok(Layer::Ip(data)),
        NULL | LOOP => bsd_loopback(link, data),
        LINUX_SLL => {
            // 16-byte header; the protocol (an EtherType) is its last two bytes.
            let header = data.get(..16).ok_or(SkipReason::TruncatedHeaders)?;
            Ok(Layer::EtherType(be16(&header[14..]), &data[16..]))
        }
        LINUX_SLL2 => {
            // 20-byte header; the protocol (an EtherType) is its first two bytes.
            let header = data.get(..20).ok_or(SkipReason::TruncatedHeaders)?;
            Ok(Layer::EtherType(be16(header), &data[20..]))
        }
        // Cisco HDLC frames are captured with a PPP link type too (unicast or broadcast
        // address, control 0): tcpdump's print-ppp.c tells them apart the same way.
        PPP | PPP_HDLC if matches!(data, [0x0f | 0x8f, 0x00, ..]) => c_hdlc(data),
        PPP | PPP_HDLC => ppp(data),
        // PPPoE without its Ethernet header (RFC 2516 4): 6 bytes, then PPP.
        PPP_ETHER => ppp(data.get(6..).ok_or(SkipReason::TruncatedHeaders)?),
        // FDDI: frame control, destination and source addresses, then 802.2 LLC.
        FDDI => llc(data.get(13..).ok_or(SkipReason::TruncatedHeaders)?),
        // RFC 1483 LLC encapsulation over ATM: the LLC header comes first.
        ATM_RFC1483 => llc(data),
        IEEE802_11 => ieee802_11(data, false),
        IEEE802_11_RADIOTAP => radiotap(data),
        IEEE802_11_PRISM | IEEE802_11_AVS => prism_or_avs(data),
        NFLOG => nflog(data),
        // IP over InfiniBand (RFC 4391 6), as Linux captures it: the destination and
        // source hardware addresses (20 bytes each), then the 4-byte encapsulation
        // header, an EtherType and 2 reserved bytes.
        IPOIB => {
            let header = data.get(..44).ok_or(SkipReason::TruncatedHeaders)?;
            Ok(Layer::EtherType(be16(&header[40..42]), &data[44..]))
        }
        ARCNET_LINUX => arcnet_linux(data),
        C_HDLC => c_hdlc(data),
        other => Err(SkipReason::UnsupportedLinkType(other)),
    }
}

fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn le16(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[0], bytes[1]])
}

/// Cisco HDLC: address, control, then an EtherType.
fn c_hdlc(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let header = data.get(..4).ok_or(SkipReason::TruncatedHeaders)?;
    Ok(Layer::EtherType(be16(&header[2..]), &data[4..]))
}

/// ARCnet as Linux captures it: source, destination, a 2-byte offset, the protocol
/// (ARCnet protocol IDs), then for RFC 1201 framing a split flag and a sequence number.
fn arcnet_linux(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    /// RFC 1051 IP (the old framing, no split flag); RFC 1201 IP and IPv6 (RFC 2497).
    const IP_OLD: u8 = 240;
    const IP: u8 = 212;
    const IPV6: u8 = 0xc4;
    match data {
        [_, _, _, _, IP_OLD, rest @ ..] => Ok(Layer::Ip(rest)),
        // A split flag of 0: the packet is whole in this frame (RFC 1201 "Split Flag").
        [_, _, _, _, IP | IPV6, 0, _, _, rest @ ..] => Ok(Layer::Ip(rest)),
        [_, _, _, _, IP | IPV6, _, _, _, ..] => {
            Err(SkipReason::UnsupportedEncapsulation("ARCnet split packet"))
        }
        [_, _, _, _, IP | IPV6, ..] | [] | [_] | [_, _] | [_, _, _] | [_, _, _, _] => {
            Err(SkipReason::TruncatedHeaders)
        }
        _ => Err(SkipReason::NotIp),
    }
}

/// BSD loopback: a 4-byte address family, host byte order for NULL, network for LOOP.
fn bsd_loopback(link: i32, data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let family = data.get(..4).ok_or(SkipReason::TruncatedHeaders)?;
    // A family value is small, so whichever byte order the capturing host used, the
    // reading with the zero bytes in front is the right one.
    let bytes = [family[0], family[1], family[2], family[3]];
    let family = if link == link_type::LOOP || (bytes[0] == 0 && bytes[1] == 0) {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    };
    // AF_INET is 2 everywhere; AF_INET6 is 10, 24, 28 or 30 depending on the BSD.
    match family {
        2 | 10 | 24 | 28 | 30 => Ok(Layer::Ip(&data[4..])),
        _ => Err(SkipReason::NotIp),
    }
}

/// A PPP frame, with or without the HDLC address and control bytes (RFC 1662 3.1) and
/// with a one- or two-byte protocol field (RFC 1661 6.5: an odd first byte ends it).
pub(crate) fn ppp(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let data = match data {
        [0xff, 0x03, rest @ ..] => rest,
        _ => data,
    };
    let (protocol, rest) = match data {
        [first, rest @ ..] if first & 1 == 1 => (u16::from(*first), rest),
        [hi, lo, rest @ ..] => (u16::from_be_bytes([*hi, *lo]), rest),
        _ => return Err(SkipReason::TruncatedHeaders),
    };
    ppp_payload(protocol, rest)
}

/// The payload of a PPP frame by its protocol number (RFC 1332, RFC 5072, RFC 3032 2.4).
pub(crate) fn ppp_payload(protocol: u16, rest: &[u8]) -> Result<Layer<'_>, SkipReason> {
    match protocol {
        0x0021 | 0x0057 => Ok(Layer::Ip(rest)),
        0x0281 => Ok(Layer::EtherType(ether_type::MPLS_UNICAST, rest)),
        0x0283 => Ok(Layer::EtherType(ether_type::MPLS_MULTICAST, rest)),
        // Compressed or encrypted datagrams (CCP, ECP) cannot be read.
        0x00fd | 0x00fb | 0x0053 | 0x0055 => Err(SkipReason::Encrypted),
        _ => Err(SkipReason::NotIp),
    }
}

/// An IEEE 802.2 LLC header: SNAP (AA AA 03, an OUI and an EtherType: RFC 1042) leads
/// on to the EtherType; SAP 06 carries IP directly (RFC 948); nothing else is IP.
pub(crate) fn llc(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    match data {
        [0xaa, 0xaa, 0x03, _, _, _, hi, lo, rest @ ..] => {
            Ok(Layer::EtherType(u16::from_be_bytes([*hi, *lo]), rest))
        }
        [0x06, 0x06, 0x03, rest @ ..] => Ok(Layer::Ip(rest)),
        [0xaa, 0xaa, ..] | [0x06, 0x06, ..] if data.len() < 8 => Err(SkipReason::TruncatedHeaders),
        _ => Err(SkipReason::NotIp),
    }
}

/// An IEEE 802.11 frame (802.11-2020 9.2.3): data frames lead on to their LLC header;
/// `padded` says the header is padded to 4 bytes (radiotap's DATAPAD flag).
pub(crate) fn ieee802_11(data: &[u8], padded: bool) -> Result<Layer<'_>, SkipReason> {
    let [control, flags, ..] = *data else {
        return Err(SkipReason::TruncatedHeaders);
    };
    let frame_type = (control >> 2) & 0x3;
    let subtype = control >> 4;
    // Type 2 is data; subtypes with bit 2 set (null, CF-ack and poll only) carry none.
    const DATA: u8 = 2;
    if frame_type != DATA || subtype & 0x4 != 0 {
        return Err(SkipReason::NotIp);
    }
    let qos = subtype & 0x8 != 0;
    let to_and_from_ds = flags & 0x03 == 0x03;
    let protected = flags & 0x40 != 0;
    let has_ht_control = qos && flags & 0x80 != 0;
    if protected {
        return Err(SkipReason::Encrypted);
    }
    // Frame control, duration, three addresses, sequence control; a fourth address
    // between two distribution systems; QoS control; HT control.
    let mut header = 24;
    if to_and_from_ds {
        header += 6;
    }
    if qos {
        header += 2;
    }
    if has_ht_control {
        header += 4;
    }
    if qos {
        // QoS control bit 7: an A-MSDU, several frames in one.
        let qos_control = *data
            .get(header - 2 - 4 * usize::from(has_ht_control))
            .ok_or(SkipReason::TruncatedHeaders)?;
        if qos_control & 0x80 != 0 {
            return Err(SkipReason::UnsupportedEncapsulation("802.11 A-MSDU"));
        }
    }
    if padded {
        header = header.div_ceil(4) * 4;
    }
    llc(data.get(header..).ok_or(SkipReason::TruncatedHeaders)?)
}

/// A radiotap header (radiotap.org): its length, and its Flags field for the padding
/// after the 802.11 header, then the 802.11 frame.
fn radiotap(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let [version, _, len_lo, len_hi, ..] = *data else {
        return Err(SkipReason::TruncatedHeaders);
    };
    if version != 0 {
        return Err(SkipReason::MalformedHeaders);
    }
    let len = usize::from(u16::from_le_bytes([len_lo, len_hi]));
    let header = data.get(..len).ok_or(SkipReason::TruncatedHeaders)?;
    let padded = radiotap_flags(header).is_some_and(|flags| flags & RADIOTAP_DATAPAD != 0);
    ieee802_11(&data[len..], padded)
}

/// Radiotap Flags bit: the 802.11 header is padded to a multiple of 4 bytes.
const RADIOTAP_DATAPAD: u8 = 0x20;

/// The Flags field (bit 1) of a radiotap header, when present: after the present words
/// (bit 31 announces another) and the TSFT field (bit 0: 8 bytes aligned to 8).
fn radiotap_flags(header: &[u8]) -> Option<u8> {
    let mut at = 4;
    // Each present word is 4 bytes of a header of at most 64 KiB.
    loop {
        let word = u32::from_le_bytes(header.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if word & (1 << 31) == 0 {
            break;
        }
    }
    let first = u32::from_le_bytes(header.get(4..8)?.try_into().ok()?);
    if first & 0b10 == 0 {
        return None;
    }
    if first & 0b01 != 0 {
        at = at.div_ceil(8) * 8 + 8;
    }
    header.get(at).copied()
}

/// A Prism monitoring header (its length in its second word, host byte order; 144
/// bytes in practice) or an AVS one (magic 80 21 10 01, its length in its second
/// word, big-endian), then the 802.11 frame.
fn prism_or_avs(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let head = data.get(..8).ok_or(SkipReason::TruncatedHeaders)?;
    let second = [head[4], head[5], head[6], head[7]];
    let len = if head[..4] == [0x80, 0x21, 0x10, 0x01] {
        u32::from_be_bytes(second)
    } else {
        // The length fits in 16 bits: the byte order with the zeros in front is right.
        let le = u32::from_le_bytes(second);
        if le <= 0xffff {
            le
        } else {
            u32::from_be_bytes(second)
        }
    };
    let len = usize::try_from(len).map_err(|_| SkipReason::MalformedHeaders)?;
    if len < 8 {
        return Err(SkipReason::MalformedHeaders);
    }
    ieee802_11(data.get(len..).ok_or(SkipReason::TruncatedHeaders)?, false)
}

/// Linux NFLOG (tcpdump.org/linktypes/LINKTYPE_NFLOG.html): family, version, resource
/// id, then TLVs in the logging host's byte order, each padded to 4 bytes; the packet
/// is the NFULA_PAYLOAD one.
fn nflog(data: &[u8]) -> Result<Layer<'_>, SkipReason> {
    let [family, version, _, _, ..] = *data else {
        return Err(SkipReason::TruncatedHeaders);
    };
    if version != 0 {
        return Err(SkipReason::MalformedHeaders);
    }
    // AF_INET and AF_INET6 on Linux.
    if family != 2 && family != 10 {
        return Err(SkipReason::NotIp);
    }
    // The host's byte order is not recorded: little-endian first (nearly every host),
    // then big-endian if that does not read as a list of TLVs.
    nflog_payload(&data[4..], le16)
        .or_else(|| nflog_payload(&data[4..], be16))
        .ok_or(SkipReason::MalformedHeaders)?
}

/// NFULA_PAYLOAD (linux/netfilter/nfnetlink_log.h): the logged packet.
const NFULA_PAYLOAD: u16 = 9;

/// The payload TLV of an NFLOG TLV list read with `u16_of`: `None` when the list does
/// not hold together in that byte order.
fn nflog_payload(
    mut tlvs: &[u8],
    u16_of: fn(&[u8]) -> u16,
) -> Option<Result<Layer<'_>, SkipReason>> {
    // Each TLV is at least 4 bytes long, so this ends.
    while tlvs.len() >= 4 {
        let len = usize::from(u16_of(&tlvs[0..2]));
        // The top bits of the type are netlink flags.
        let kind = u16_of(&tlvs[2..4]) & 0x3fff;
        if len < 4 {
            return None;
        }
        let Some(value) = tlvs.get(4..len) else {
            // A payload cut by the snap length still holds its headers.
            return (kind == NFULA_PAYLOAD).then(|| Ok(Layer::Ip(&tlvs[4..])));
        };
        if kind == NFULA_PAYLOAD {
            return Some(Ok(Layer::Ip(value)));
        }
        tlvs = tlvs.get(len.div_ceil(4) * 4..).unwrap_or(&[]);
    }
    tlvs.is_empty().then_some(Err(SkipReason::NotIp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip_of(layer: Result<Layer<'_>, SkipReason>) -> Vec<u8> {
        match layer {
            Ok(Layer::Ip(ip)) => ip.to_vec(),
            Ok(Layer::EtherType(0x0800, ip)) => ip.to_vec(),
            other => panic!("not IP: {other:?}"),
        }
    }

    const SNAP_IPV4: [u8; 8] = [0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];

    #[test]
    fn the_supported_list_is_every_link_type_decoded() {
        let listed: Vec<i32> = SUPPORTED
            .iter()
            .flat_map(|f| f.types.iter().copied().chain(f.headers.iter().map(|h| h.1)))
            .collect();
        let frame = [0u8; 64];
        for link in -1..=1024 {
            let decoded = !matches!(
                link_layer(link, &frame),
                Err(SkipReason::UnsupportedLinkType(_))
            );
            let times = listed.iter().filter(|&&t| t == link).count();
            assert_eq!(times, usize::from(decoded), "link type {link}");
        }
    }

    #[test]
    fn the_supported_list_reads_as_one_line() {
        let line = supported_link_types();
        assert!(
            line.starts_with("Ethernet (1), BSD loopback (0, 108), raw IP (12, 14, 101, "),
            "{line}"
        );
        assert!(
            line.contains(", 802.11 (105, with Prism 119, radiotap 127, AVS 163), "),
            "{line}"
        );
        assert!(!line.ends_with(", "), "{line}");
    }

    #[test]
    fn llc_snap_and_sap_6_lead_to_ip() {
        let mut frame = SNAP_IPV4.to_vec();
        frame.extend([0x45, 1, 2]);
        assert_eq!(ip_of(llc(&frame)), [0x45, 1, 2]);
        assert_eq!(ip_of(llc(&[6, 6, 3, 0x45])), [0x45]);
        assert!(matches!(llc(&[0x42, 0x42, 3, 0]), Err(SkipReason::NotIp)));
        assert!(matches!(
            llc(&[0xaa, 0xaa, 3]),
            Err(SkipReason::TruncatedHeaders)
        ));
    }

    #[test]
    fn arcnet_old_and_new_framing_lead_to_ip_and_a_split_packet_is_named() {
        assert_eq!(ip_of(arcnet_linux(&[1, 2, 0, 0, 240, 0x45])), [0x45]);
        assert_eq!(
            ip_of(arcnet_linux(&[1, 2, 0, 0, 212, 0, 0, 7, 0x45])),
            [0x45]
        );
        assert_eq!(
            ip_of(arcnet_linux(&[1, 2, 0, 0, 0xc4, 0, 0, 7, 0x60])),
            [0x60]
        );
        assert!(matches!(
            arcnet_linux(&[1, 2, 0, 0, 212, 1, 0, 7, 0x45]),
            Err(SkipReason::UnsupportedEncapsulation(_))
        ));
        assert!(matches!(
            arcnet_linux(&[1, 2, 0, 0, 213, 0, 0, 7]),
            Err(SkipReason::NotIp)
        ));
        assert!(matches!(
            arcnet_linux(&[1, 2, 0, 0, 212, 0]),
            Err(SkipReason::TruncatedHeaders)
        ));
        assert!(matches!(
            arcnet_linux(&[1, 2, 0]),
            Err(SkipReason::TruncatedHeaders)
        ));
    }

    #[test]
    fn an_802_11_qos_data_frame_with_four_addresses() {
        // QoS data (type 2, subtype 8), to and from DS: 24 + 6 + 2 header bytes.
        let mut frame = vec![0x88, 0x03];
        frame.resize(32, 0);
        frame.extend(SNAP_IPV4);
        frame.push(0x45);
        assert_eq!(ip_of(ieee802_11(&frame, false)), [0x45]);
        // Padded to 4 bytes after the header (32 already is).
        assert_eq!(ip_of(ieee802_11(&frame, true)), [0x45]);
        // Protected, a beacon, a null frame.
        let mut protected = frame.clone();
        protected[1] |= 0x40;
        assert!(matches!(
            ieee802_11(&protected, false),
            Err(SkipReason::Encrypted)
        ));
        assert!(matches!(
            ieee802_11(&[0x80, 0, 0, 0], false),
            Err(SkipReason::NotIp)
        ));
        assert!(matches!(
            ieee802_11(&[0x48, 0x01, 0, 0], false),
            Err(SkipReason::NotIp)
        ));
    }

    #[test]
    fn radiotap_flags_after_tsft_and_an_extended_present_word() {
        // Present: TSFT, Flags, Ext (bit 31); a second present word; TSFT aligned to 8
        // (bytes 16..24); Flags at 24 with DATAPAD.
        let mut header = vec![0, 0, 26, 0];
        header.extend((1u32 | 2 | 1 << 31).to_le_bytes());
        header.extend(0u32.to_le_bytes());
        header.extend([0; 4]); // padding to 16
        header.extend([0; 8]); // TSFT
        header.push(RADIOTAP_DATAPAD);
        header.push(0);
        assert_eq!(radiotap_flags(&header), Some(RADIOTAP_DATAPAD));
        // A data frame (subtype 0, 24 bytes) padded to 24 (already aligned).
        let mut packet = header.clone();
        packet.extend([0x08, 0x02]);
        packet.resize(header.len() + 24, 0);
        packet.extend(SNAP_IPV4);
        packet.push(0x45);
        assert_eq!(ip_of(radiotap(&packet)), [0x45]);
    }

    #[test]
    fn nflog_in_either_byte_order_cut_or_whole() {
        for big_endian in [false, true] {
            let u16_bytes = |v: u16| {
                if big_endian {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
            };
            let mut packet = vec![2, 0, 0, 1];
            // NFULA_PACKET_HDR (type 1, 4 bytes of value), then the payload.
            packet.extend(u16_bytes(8));
            packet.extend(u16_bytes(1));
            packet.extend([0x08, 0x00, 3, 0]);
            packet.extend(u16_bytes(4 + 3));
            packet.extend(u16_bytes(NFULA_PAYLOAD));
            packet.extend([0x45, 7, 7, 0]);
            assert_eq!(ip_of(nflog(&packet)), [0x45, 7, 7], "{big_endian}");
        }
        assert!(matches!(nflog(&[2, 0, 0, 1]), Err(SkipReason::NotIp)));
        assert!(matches!(nflog(&[7, 0, 0, 1]), Err(SkipReason::NotIp)));
    }

    #[test]
    fn ppp_with_and_without_address_and_control() {
        assert_eq!(ip_of(ppp(&[0xff, 0x03, 0x00, 0x21, 0x45])), [0x45]);
        assert_eq!(ip_of(ppp(&[0x21, 0x45])), [0x45]);
        assert!(matches!(ppp(&[0x00, 0xfd, 1]), Err(SkipReason::Encrypted)));
        assert!(matches!(ppp(&[0xc0, 0x21, 1]), Err(SkipReason::NotIp)));
    }

    #[test]
    fn prism_and_avs_headers_are_skipped_by_their_length() {
        let mut prism = vec![0x44, 0, 0, 0, 144, 0, 0, 0];
        prism.resize(144, 0);
        prism.extend([0x08, 0x02]);
        prism.resize(144 + 24, 0);
        prism.extend(SNAP_IPV4);
        prism.push(0x45);
        assert_eq!(ip_of(prism_or_avs(&prism)), [0x45]);
        let mut avs = vec![0x80, 0x21, 0x10, 0x01, 0, 0, 0, 64];
        avs.resize(64, 0);
        avs.extend_from_slice(&prism[144..]);
        assert_eq!(ip_of(prism_or_avs(&avs)), [0x45]);
    }
}
