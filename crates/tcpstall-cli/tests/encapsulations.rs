//! The shipped exchange carried inside every tunnel, label stack, link layer and IP
//! fragmentation the capture input decodes, and compressed.
//!
//! Each test wraps every frame of `captures/seed002-two-writes.pcap` (IPv4 loopback, one
//! connection, 9 `nagle-delayed-ack` stalls) in another encapsulation, built here by
//! hand from the specifications, runs the real `tcpstall analyze --json` on it, and
//! checks that the report gives the same stalls as the plain capture: same endpoints
//! (the inner ones), same classes, holder, delayer, start times and durations.

use serde_json::Value;

mod common;
use common::compress::{gzip_stored, zstd_raw};
use common::pcap::*;
use common::verdicts::*;
use common::{TempDir, analyze_json, parse_report, run, run_with_stdin};

// ---------------------------------------------------------------------------------------------
// Headers, built by hand.
// ---------------------------------------------------------------------------------------------

/// The IPv4 packet inside an original Ethernet frame.
fn ip_packet(frame: &[u8]) -> &[u8] {
    let (_, total) = ipv4_lengths(frame);
    &frame[14..14 + total]
}

/// An Ethernet frame with the original frame's addresses.
fn ether(record: &Record, ether_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = record.frame[..12].to_vec();
    out.extend(ether_type.to_be_bytes());
    out.extend(payload);
    out
}

/// Outer tunnel endpoints (TEST-NET-1), swapped with the direction of the inner packet.
fn outer_v4(record: &Record) -> ([u8; 4], [u8; 4]) {
    let (a, b) = ([192, 0, 2, 1], [192, 0, 2, 2]);
    if record.sent_by_client() {
        (a, b)
    } else {
        (b, a)
    }
}

/// An IPv4 header (RFC 791) and payload: `flags_offset` is the flags and fragment
/// offset field; the checksum is left zero (nothing checks it).
fn ipv4_with(
    source: [u8; 4],
    destination: [u8; 4],
    protocol: u8,
    id: u16,
    flags_offset: u16,
    payload: &[u8],
) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut out = vec![0x45, 0];
    out.extend(total.to_be_bytes());
    out.extend(id.to_be_bytes());
    out.extend(flags_offset.to_be_bytes());
    out.extend([64, protocol, 0, 0]);
    out.extend(source);
    out.extend(destination);
    out.extend(payload);
    out
}

fn outer_ipv4(record: &Record, protocol: u8, payload: &[u8]) -> Vec<u8> {
    let (source, destination) = outer_v4(record);
    // Don't Fragment.
    ipv4_with(source, destination, protocol, 1, 0x4000, payload)
}

/// An IPv6 header (RFC 8200) between documentation addresses, and payload.
fn outer_ipv6(record: &Record, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    let mut b = a;
    a[15] = 1;
    b[15] = 2;
    let (source, destination) = if record.sent_by_client() {
        (a, b)
    } else {
        (b, a)
    };
    let mut out = vec![0x60, 0, 0, 0];
    out.extend((payload.len() as u16).to_be_bytes());
    out.extend([next_header, 64]);
    out.extend(source);
    out.extend(destination);
    out.extend(payload);
    out
}

/// A UDP header (RFC 768) with no checksum, and payload.
fn udp(source: u16, destination: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = source.to_be_bytes().to_vec();
    out.extend(destination.to_be_bytes());
    out.extend(((8 + payload.len()) as u16).to_be_bytes());
    out.extend([0, 0]);
    out.extend(payload);
    out
}

/// An LLC/SNAP header (RFC 1042) for IPv4.
const SNAP_IPV4: [u8; 8] = [0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];

const IPPROTO_IPIP: u8 = 4;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_IPV6: u8 = 41;
const IPPROTO_GRE: u8 = 47;

// ---------------------------------------------------------------------------------------------
// Running.
// ---------------------------------------------------------------------------------------------

/// Every original record as the frames `frames` makes of it, at the record's time.
fn pcap_with_frame_lists(link_type: u32, frames: impl Fn(&Record) -> Vec<Vec<u8>>) -> Vec<u8> {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .flat_map(|r| {
            frames(r)
                .into_iter()
                .map(|data| PcapRecord::whole(r, data, false))
                .collect::<Vec<_>>()
        })
        .collect();
    write_pcap(Endian::Little, false, link_type, MAX_RECORD, &records)
}

fn check(test: &str, link_type: u32, frame: impl Fn(&Record) -> Vec<u8>) {
    check_family(test, link_type, Family::V4, frame);
}

fn check_family(test: &str, link_type: u32, family: Family, frame: impl Fn(&Record) -> Vec<u8>) {
    let bytes = pcap_with_frames(link_type, frame);
    check_variant(test, &bytes, "pcap", family);
}

// ---------------------------------------------------------------------------------------------
// Label stacks and PPPoE.
// ---------------------------------------------------------------------------------------------

#[test]
fn mpls_two_labels() {
    check("mpls", LINK_ETHERNET, |r| {
        // Label 1000 (not bottom), label 17 (bottom of stack), TTL 64.
        let mut stack = vec![0x00, 0x3e, 0x80, 64, 0x00, 0x01, 0x11, 64];
        stack.extend(ip_packet(&r.frame));
        ether(r, 0x8847, &stack)
    });
}

#[test]
fn mpls_ethernet_pseudowire_with_control_word() {
    check("mpls_pw", LINK_ETHERNET, |r| {
        let mut stack = vec![0x00, 0x01, 0x11, 64, 0, 0, 0, 0];
        stack.extend(&r.frame);
        ether(r, 0x8847, &stack)
    });
}

fn pppoe_session(record: &Record) -> Vec<u8> {
    let ip = ip_packet(&record.frame);
    let mut out = vec![0x11, 0x00, 0x12, 0x34];
    out.extend(((2 + ip.len()) as u16).to_be_bytes());
    out.extend([0x00, 0x21]); // PPP: IPv4
    out.extend(ip);
    out
}

#[test]
fn pppoe() {
    check("pppoe", LINK_ETHERNET, |r| {
        ether(r, 0x8864, &pppoe_session(r))
    });
}

#[test]
fn pppoe_over_qinq() {
    check("pppoe_qinq", LINK_ETHERNET, |r| {
        let mut tags = vec![0x00, 100, 0x81, 0x00, 0x00, 42, 0x88, 0x64];
        tags.extend(pppoe_session(r));
        ether(r, 0x88a8, &tags)
    });
}

// ---------------------------------------------------------------------------------------------
// GRE, NVGRE and ERSPAN.
// ---------------------------------------------------------------------------------------------

#[test]
fn gre_ipv4() {
    check("gre", LINK_ETHERNET, |r| {
        let mut gre = vec![0x00, 0x00, 0x08, 0x00];
        gre.extend(ip_packet(&r.frame));
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_GRE, &gre))
    });
}

#[test]
fn gre_in_udp() {
    check("gre_in_udp", LINK_ETHERNET, |r| {
        let mut gre = vec![0x00, 0x00, 0x08, 0x00];
        gre.extend(ip_packet(&r.frame));
        ether(
            r,
            0x0800,
            &outer_ipv4(r, IPPROTO_UDP, &udp(50_000, 4754, &gre)),
        )
    });
}

#[test]
fn aruba_802_11_frames_in_gre() {
    check("gre_aruba", LINK_ETHERNET, |r| {
        let mut gre = vec![0x00, 0x00, 0x82, 0x00];
        gre.extend(ieee802_11_qos_data(r));
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_GRE, &gre))
    });
}

#[test]
fn provider_backbone_bridging() {
    check("pbb", LINK_ETHERNET, |r| {
        // Backbone VLAN tag, then the I-TAG (priority, flags, service identifier 0x123456)
        // and the customer's whole frame.
        let mut tagged = vec![0x00, 0x0a, 0x88, 0xe7];
        tagged.extend([0x00, 0x12, 0x34, 0x56]);
        tagged.extend(&r.frame);
        ether(r, 0x8100, &tagged)
    });
}

#[test]
fn cisco_fabricpath() {
    check("fabricpath", LINK_ETHERNET, |r| {
        // FTag and TTL, then the classic Ethernet frame.
        let mut inner = vec![0x00, 0x3f];
        inner.extend(&r.frame);
        ether(r, 0x8903, &inner)
    });
}

#[test]
fn vn_tag() {
    check("vntag", LINK_ETHERNET, |r| {
        let mut tagged = vec![0x80, 0x01, 0x00, 0x02, 0x08, 0x00];
        tagged.extend(ip_packet(&r.frame));
        ether(r, 0x8926, &tagged)
    });
}

#[test]
fn gre_with_checksum_key_and_sequence() {
    check("gre_csum_key_seq", LINK_ETHERNET, |r| {
        let mut gre = vec![0xb0, 0x00, 0x08, 0x00];
        gre.extend([0; 4]); // checksum, reserved
        gre.extend(7u32.to_be_bytes()); // key
        gre.extend(1u32.to_be_bytes()); // sequence
        gre.extend(ip_packet(&r.frame));
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_GRE, &gre))
    });
}

#[test]
fn nvgre() {
    check("nvgre", LINK_ETHERNET, |r| {
        // Key: virtual subnet 0x00beef, flow 0x01.
        let mut gre = vec![0x20, 0x00, 0x65, 0x58, 0x00, 0xbe, 0xef, 0x01];
        gre.extend(&r.frame);
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_GRE, &gre))
    });
}

#[test]
fn erspan_type_ii() {
    check("erspan_ii", LINK_ETHERNET, |r| {
        let mut gre = vec![0x10, 0x00, 0x88, 0xbe];
        gre.extend(9u32.to_be_bytes()); // sequence
        // Version 1, VLAN 42; CoS 0, En 3, T 0, session 5; reserved, index 0.
        gre.extend([0x10, 42, 0x18, 5, 0, 0, 0, 0]);
        gre.extend(&r.frame);
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_GRE, &gre))
    });
}

#[test]
fn erspan_type_iii_with_platform_subheader() {
    check("erspan_iii", LINK_ETHERNET, |r| {
        let mut gre = vec![0x10, 0x00, 0x22, 0xeb];
        gre.extend(9u32.to_be_bytes()); // sequence
        // Version 2, VLAN 42, session 5; timestamp; SGT; P 0, frame type 0 (Ethernet),
        // hardware ID 1, D 0, granularity 0, O 1.
        gre.extend([0x20, 42, 0x00, 5]);
        gre.extend(123_456u32.to_be_bytes());
        gre.extend([0, 0, 0x00, 0x11]);
        gre.extend([0; 8]); // platform-specific subheader
        gre.extend(&r.frame);
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_GRE, &gre))
    });
}

// ---------------------------------------------------------------------------------------------
// UDP tunnels.
// ---------------------------------------------------------------------------------------------

fn vxlan_frame(record: &Record, vni: u32) -> Vec<u8> {
    let mut vxlan = vec![0x08, 0, 0, 0];
    vxlan.extend(&vni.to_be_bytes()[1..]);
    vxlan.push(0);
    vxlan.extend(&record.frame);
    let port = if record.sent_by_client() {
        49_152
    } else {
        49_153
    };
    ether(
        record,
        0x0800,
        &outer_ipv4(record, IPPROTO_UDP, &udp(port, 4789, &vxlan)),
    )
}

#[test]
fn vxlan() {
    check("vxlan", LINK_ETHERNET, |r| vxlan_frame(r, 5001));
}

#[test]
fn geneve_over_ipv6_with_an_option() {
    check("geneve", LINK_ETHERNET, |r| {
        // Options length 1 word; protocol Transparent Ethernet Bridging; VNI 77.
        let mut geneve = vec![0x01, 0x00, 0x65, 0x58, 0, 0, 77, 0];
        geneve.extend([0x01, 0x02, 0x80, 0x00]); // option class, type, no data
        geneve.extend(&r.frame);
        let frame_v6 = outer_ipv6(r, IPPROTO_UDP, &udp(40_000, 6081, &geneve));
        ether(r, 0x86dd, &frame_v6)
    });
}

#[test]
fn gtp_u_with_an_extension_header() {
    check("gtp_u", LINK_ETHERNET, |r| {
        let ip = ip_packet(&r.frame);
        // Version 1, protocol type GTP, E: sequence, N-PDU and next extension follow.
        let teid: u32 = if r.sent_by_client() { 0x1111 } else { 0x2222 };
        let mut gtp = vec![0x34, 0xff];
        gtp.extend(((4 + 4 + ip.len()) as u16).to_be_bytes());
        gtp.extend(teid.to_be_bytes());
        gtp.extend([0, 0, 0, 0x85]); // sequence, N-PDU, PDU session container next
        gtp.extend([1, 0x10, 0x09, 0x00]); // one word, QFI 9, no further extension
        gtp.extend(ip);
        ether(
            r,
            0x0800,
            &outer_ipv4(r, IPPROTO_UDP, &udp(2152, 2152, &gtp)),
        )
    });
}

/// Two VXLAN networks with the same addresses inside: two connections, not one.
#[test]
fn vxlan_networks_reusing_addresses_stay_apart() {
    let bytes = pcap_with_frame_lists(LINK_ETHERNET, |r| {
        vec![vxlan_frame(r, 100), vxlan_frame(r, 200)]
    });
    let dir = TempDir::new("encapsulations", "vxlan_two_networks");
    let path = dir.write("two_networks.pcap", &bytes);
    let report = analyze_json(&path);
    let base = baseline();
    assert_eq!(
        report["input"]["tcp_segments"].as_u64(),
        Some(2 * base.segments)
    );
    let conns = report["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 2, "one connection per network");
    for conn in conns {
        assert_eq!(conn["duplicates"].as_u64().unwrap_or(0), 0);
        let stalls = conn["stalls"].as_array().expect("stalls");
        assert_eq!(stalls.len(), STALLS);
        for (stall, (start, duration)) in stalls.iter().zip(&base.stalls) {
            assert_eq!(stall["class"], CLASS);
            assert!((stall["start"].as_f64().unwrap() - start).abs() <= TOLERANCE);
            assert!((stall["duration"].as_f64().unwrap() - duration).abs() <= TOLERANCE);
        }
    }
    assert_eq!(report["input"]["duplicates"].as_u64(), Some(0));
}

// ---------------------------------------------------------------------------------------------
// IP in IP.
// ---------------------------------------------------------------------------------------------

#[test]
fn ipv4_in_ipv4() {
    check("ipip", LINK_ETHERNET, |r| {
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_IPIP, ip_packet(&r.frame)))
    });
}

#[test]
fn ipv4_in_ipv6() {
    check("4in6", LINK_ETHERNET, |r| {
        ether(r, 0x86dd, &outer_ipv6(r, IPPROTO_IPIP, ip_packet(&r.frame)))
    });
}

#[test]
fn ipv6_in_ipv4() {
    check_family("6in4", LINK_ETHERNET, Family::V6, |r| {
        let inner = to_ipv6(&r.frame, false);
        ether(r, 0x0800, &outer_ipv4(r, IPPROTO_IPV6, &inner[14..]))
    });
}

// ---------------------------------------------------------------------------------------------
// Link layers: NFLOG, IP over InfiniBand, ARCnet, 802.11, LLC/SNAP, FDDI.
// ---------------------------------------------------------------------------------------------

#[test]
fn nflog() {
    const LINKTYPE_NFLOG: u32 = 239;
    check("nflog", LINKTYPE_NFLOG, |r| {
        let ip = ip_packet(&r.frame);
        // AF_INET, version 0, resource id (big-endian); TLVs in host (little-endian) order.
        let mut out = vec![2, 0, 0, 1];
        let mut tlv = |kind: u16, value: &[u8]| {
            out.extend(((4 + value.len()) as u16).to_le_bytes());
            out.extend(kind.to_le_bytes());
            out.extend(value);
            while out.len() % 4 != 0 {
                out.push(0);
            }
        };
        tlv(1, &[0x08, 0x00, 3, 0]); // NFULA_PACKET_HDR: IPv4, hook 3
        tlv(10, b"tcpstall\0"); // NFULA_PREFIX
        tlv(9, ip); // NFULA_PAYLOAD
        out
    });
}

#[test]
fn cisco_hdlc() {
    const LINKTYPE_C_HDLC: u32 = 104;
    check("chdlc", LINKTYPE_C_HDLC, |r| {
        // Unicast address, control 0, EtherType.
        let mut out = vec![0x0f, 0x00, 0x08, 0x00];
        out.extend(ip_packet(&r.frame));
        out
    });
}

#[test]
fn cisco_hdlc_under_the_ppp_link_type() {
    const LINKTYPE_PPP: u32 = 9;
    check("chdlc_as_ppp", LINKTYPE_PPP, |r| {
        let mut out = vec![0x0f, 0x00, 0x08, 0x00];
        out.extend(ip_packet(&r.frame));
        out
    });
}

#[test]
fn ip_over_infiniband() {
    const LINKTYPE_IPOIB: u32 = 242;
    check("ipoib", LINKTYPE_IPOIB, |r| {
        // Destination and source hardware addresses (20 bytes each, the 4-byte queue pair
        // number and 16-byte GID of RFC 4391 9.1.1), then EtherType and reserved bytes.
        let (here, there) = ([0x00, 0x00, 0x04, 0x04], [0x00, 0x00, 0x05, 0x05]);
        let (destination, source) = if r.sent_by_client() {
            (there, here)
        } else {
            (here, there)
        };
        let mut out = Vec::new();
        for address in [destination, source] {
            out.extend(address);
            out.extend([0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
            out.extend([0, 2, 0xc9, 3, 0, 1, address[2], address[3]]);
        }
        out.extend([0x08, 0x00, 0, 0]);
        out.extend(ip_packet(&r.frame));
        out
    });
}

#[test]
fn linux_arcnet_rfc1201_and_rfc1051_framing() {
    const LINKTYPE_ARCNET_LINUX: u32 = 129;
    let hosts = |r: &Record| if r.sent_by_client() { [1, 2] } else { [2, 1] };
    check("arcnet-rfc1201", LINKTYPE_ARCNET_LINUX, |r| {
        // Source, destination, offset; protocol 212 (IP), split flag 0, sequence number.
        let mut out = hosts(r).to_vec();
        out.extend([0, 0, 212, 0, 0, 1]);
        out.extend(ip_packet(&r.frame));
        out
    });
    check("arcnet-rfc1051", LINKTYPE_ARCNET_LINUX, |r| {
        // Source, destination, offset; protocol 240 (IP, RFC 1051), no split flag.
        let mut out = hosts(r).to_vec();
        out.extend([0, 0, 240]);
        out.extend(ip_packet(&r.frame));
        out
    });
}

/// An 802.11 QoS data frame (to or from the access point) with LLC/SNAP and the packet.
fn ieee802_11_qos_data(record: &Record) -> Vec<u8> {
    let to_ap = record.sent_by_client();
    let mut frame = vec![0x88, if to_ap { 0x01 } else { 0x02 }, 0x2c, 0x00];
    frame.extend([0x02, 0, 0, 0, 0, 1]); // address 1
    frame.extend([0x02, 0, 0, 0, 0, 2]); // address 2
    frame.extend([0x02, 0, 0, 0, 0, 3]); // address 3
    frame.extend([0x10, 0x00]); // sequence control
    frame.extend([0x00, 0x00]); // QoS control: TID 0, no A-MSDU
    frame.extend(SNAP_IPV4);
    frame.extend(ip_packet(&record.frame));
    frame
}

#[test]
fn ieee802_11_behind_radiotap_with_fcs() {
    const LINKTYPE_RADIOTAP: u32 = 127;
    check("radiotap", LINKTYPE_RADIOTAP, |r| {
        // Version 0, length 18; present: TSFT, Flags, Rate; TSFT at 8; Flags at 16 (FCS
        // at the end); Rate at 17.
        let mut out = vec![0, 0, 18, 0];
        out.extend((0b111u32).to_le_bytes());
        out.extend(1_000_000u64.to_le_bytes());
        out.extend([0x10, 0x0c]);
        out.extend(ieee802_11_qos_data(r));
        out.extend([0xde, 0xad, 0xbe, 0xef]); // FCS
        out
    });
}

#[test]
fn ieee802_11_behind_prism() {
    const LINKTYPE_PRISM: u32 = 119;
    check("prism", LINKTYPE_PRISM, |r| {
        // Message code and length (144) in host order, device name, then items.
        let mut out = 0x44u32.to_le_bytes().to_vec();
        out.extend(144u32.to_le_bytes());
        out.extend(b"wlan0");
        out.resize(144, 0);
        // A plain data frame from the distribution system: 24 bytes of header.
        out.extend([0x08, 0x02, 0x2c, 0x00]);
        out.extend([
            0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 3, 0x10, 0x00,
        ]);
        out.extend(SNAP_IPV4);
        out.extend(ip_packet(&r.frame));
        out
    });
}

#[test]
fn llc_snap_in_an_802_3_frame() {
    check("llc_snap", LINK_ETHERNET, |r| {
        let ip = ip_packet(&r.frame);
        let mut llc = SNAP_IPV4.to_vec();
        llc.extend(ip);
        ether(r, llc.len() as u16, &llc)
    });
}

#[test]
fn fddi_with_llc_snap() {
    const LINKTYPE_FDDI: u32 = 10;
    check("fddi", LINKTYPE_FDDI, |r| {
        let mut out = vec![0x50];
        out.extend(&r.frame[..12]);
        out.extend(SNAP_IPV4);
        out.extend(ip_packet(&r.frame));
        out
    });
}

// ---------------------------------------------------------------------------------------------
// IP fragments.
// ---------------------------------------------------------------------------------------------

/// The pieces (offset, bytes, more) of an IP payload cut every 16 bytes, so that even
/// the TCP header is split; the client's come last piece first.
fn pieces(record: &Record, payload: &[u8]) -> Vec<(usize, Vec<u8>, bool)> {
    let mut out: Vec<(usize, Vec<u8>, bool)> = payload
        .chunks(16)
        .enumerate()
        .map(|(i, chunk)| (i * 16, chunk.to_vec(), (i + 1) * 16 < payload.len()))
        .collect();
    if record.sent_by_client() {
        out.reverse();
    }
    out
}

#[test]
fn ipv4_fragments_out_of_order_with_the_tcp_header_split() {
    let bytes = pcap_with_frame_lists(LINK_ETHERNET, |r| {
        let ip = ip_packet(&r.frame);
        let (ihl, _) = ipv4_lengths(&r.frame);
        let source: [u8; 4] = ip[12..16].try_into().unwrap();
        let destination: [u8; 4] = ip[16..20].try_into().unwrap();
        let id = u16::from_be_bytes([ip[4], ip[5]]) ^ 0x5a5a;
        pieces(r, &ip[ihl..])
            .into_iter()
            .map(|(offset, bytes, more)| {
                let flags = (u16::from(more) << 13) | (offset / 8) as u16;
                ether(
                    r,
                    0x0800,
                    &ipv4_with(source, destination, 6, id, flags, &bytes),
                )
            })
            .collect()
    });
    let dir = TempDir::new("encapsulations", "ipv4_fragments");
    let path = dir.write("fragments.pcap", &bytes);
    let report = analyze_json(&path);
    assert_same_verdicts(&report, "ipv4_fragments", "pcap", Family::V4);
    let fragments = &report["input"]["ip_fragments"];
    assert_eq!(fragments["datagrams"].as_u64(), Some(baseline().segments));
    assert_eq!(fragments["seen"], fragments["reassembled"]);
}

#[test]
fn ipv6_fragments_out_of_order() {
    let bytes = pcap_with_frame_lists(LINK_ETHERNET, |r| {
        let v6 = to_ipv6(&r.frame, false);
        let header = &v6[14..54];
        let tcp = &v6[54..];
        let id = 0x0100_0000 + r.micros() as u32;
        pieces(r, tcp)
            .into_iter()
            .map(|(offset, bytes, more)| {
                let mut packet = header.to_vec();
                packet[4..6].copy_from_slice(&((8 + bytes.len()) as u16).to_be_bytes());
                packet[6] = 44; // next header: fragment
                // Fragment header: TCP next, offset in 8-byte units, M flag, identification.
                let offset_field = ((offset / 8) as u16) << 3 | u16::from(more);
                packet.extend([6, 0]);
                packet.extend(offset_field.to_be_bytes());
                packet.extend(id.to_be_bytes());
                packet.extend(bytes);
                ether(r, 0x86dd, &packet)
            })
            .collect()
    });
    let dir = TempDir::new("encapsulations", "ipv6_fragments");
    let path = dir.write("fragments6.pcap", &bytes);
    let report = analyze_json(&path);
    assert_same_verdicts(&report, "ipv6_fragments", "pcap", Family::V6);
}

#[test]
fn vxlan_whose_outer_packets_are_fragmented() {
    let bytes = pcap_with_frame_lists(LINK_ETHERNET, |r| {
        let whole = vxlan_frame(r, 9);
        let outer = &whole[14..];
        let (source, destination) = outer_v4(r);
        // The outer UDP datagram cut after 64 bytes: VXLAN and the inner Ethernet and IP
        // headers in the first fragment, the inner TCP header across both.
        let payload = &outer[20..];
        let id = 0x7000 + (r.micros() % 0x1000) as u16;
        vec![
            ether(
                r,
                0x0800,
                &ipv4_with(source, destination, IPPROTO_UDP, id, 0x2000, &payload[..64]),
            ),
            ether(
                r,
                0x0800,
                &ipv4_with(source, destination, IPPROTO_UDP, id, 64 / 8, &payload[64..]),
            ),
        ]
    });
    let dir = TempDir::new("encapsulations", "vxlan_fragments");
    let path = dir.write("vxlan_fragments.pcap", &bytes);
    let report = analyze_json(&path);
    assert_same_verdicts(&report, "vxlan_fragments", "pcap", Family::V4);
}

// ---------------------------------------------------------------------------------------------
// Compressed captures (written by hand in tests/common/compress.rs).
// ---------------------------------------------------------------------------------------------

fn check_compressed(test: &str, bytes: &[u8], format: &str, compression: &str) -> Value {
    let dir = TempDir::new("encapsulations", test);
    let path = dir.write(test, bytes);
    let report = analyze_json(&path);
    assert_same_verdicts(&report, test, format, Family::V4);
    assert_eq!(report["input"]["compression"], compression, "{test}");
    report
}

#[test]
fn gzip_pcap_and_pcapng() {
    check_compressed(
        "gzip.pcap.gz",
        &gzip_stored(original_bytes()),
        "pcap",
        "gzip",
    );
    let pcapng = pcapng(Endian::Little, original_records());
    check_compressed("gzip.pcapng.gz", &gzip_stored(&pcapng), "pcapng", "gzip");
}

#[test]
fn zstd_pcap() {
    check_compressed("zstd.pcap.zst", &zstd_raw(original_bytes()), "pcap", "zstd");
}

#[test]
fn gzip_from_standard_input() {
    let bytes = gzip_stored(original_bytes());
    let out = run_with_stdin(&["analyze", "--json", "-"], &bytes);
    let report = parse_report(&out, "gzip stdin");
    assert_same_verdicts(&report, "gzip stdin", "pcap", Family::V4);
    assert_eq!(report["input"]["compression"], "gzip");
}

#[test]
fn a_gzip_stream_cut_short_is_a_warning() {
    let whole = gzip_stored(original_bytes());
    // Cut inside the last stored block: most packets are there, the trailer is not.
    let cut = &whole[..whole.len() - 200];
    let dir = TempDir::new("encapsulations", "gzip_cut");
    let path = dir.write("cut.pcap.gz", cut);
    let out = run(&["analyze", "--json", path.to_str().unwrap()]);
    let report = parse_report(&out, "gzip cut");
    let warnings = report["input"]["warnings"].to_string();
    assert!(warnings.contains("gzip stream ends early"), "{warnings}");
    assert!(report["input"]["packets"].as_u64().unwrap() > 40);
}
