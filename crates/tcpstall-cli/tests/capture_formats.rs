//! The capture input accepts every container format and link type it claims.
//!
//! Each test re-encodes the shipped capture `captures/seed002-two-writes.pcap` (classic pcap,
//! little-endian, microseconds, Ethernet, IPv4 loopback) into another variant, runs the real
//! `tcpstall analyze --json` on it, and checks that the verdicts are those of the original:
//! one connection, 9 `nagle-delayed-ack` stalls held by the client and delayed by the server,
//! at the same times. The encoders are written here by hand so that they owe nothing to the
//! reader they test. Unusable inputs must end with exit status 2 and one readable error line.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

mod common;
use common::pcap::*;
use common::verdicts::*;
use common::{BIN, TempDir, analyze_json, check_refused, parse_report, run, text};

// ---------------------------------------------------------------------------------------------
// pcapng.
// ---------------------------------------------------------------------------------------------

/// A Name Resolution Block mapping 127.0.0.1 to "localhost".
fn ng_name_resolution(endian: Endian) -> Vec<u8> {
    let mut value = vec![127, 0, 0, 1];
    value.extend_from_slice(b"localhost\0");
    let mut body = Buf::new(endian);
    body.u16(1) // nrb_record_ipv4
        .u16(value.len() as u16)
        .raw(&value)
        .pad4()
        .u16(0) // nrb_record_end
        .u16(0);
    ng_block(endian, NRB, &body.bytes)
}

/// An Interface Statistics Block for interface 0 with an isb_ifrecv option.
fn ng_interface_statistics(endian: Endian, units: u64, received: u64) -> Vec<u8> {
    let mut body = Buf::new(endian);
    body.u32(0)
        .u32((units >> 32) as u32)
        .u32(units as u32)
        .u16(4) // isb_ifrecv
        .u16(8)
        .u64(received)
        .u16(0) // opt_endofopt
        .u16(0);
    ng_block(endian, ISB, &body.bytes)
}

// ---------------------------------------------------------------------------------------------
// Link layers: an Ethernet frame re-wrapped for another link type.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Link {
    Ethernet,
    LinuxSll,
    LinuxSll2,
    Raw,
    Ipv4,
    Null,
    Loop,
    Vlan,
    QinQ,
}

impl Link {
    fn link_type(self) -> u32 {
        match self {
            Link::Ethernet | Link::Vlan | Link::QinQ => 1,
            Link::LinuxSll => 113,
            Link::LinuxSll2 => 276,
            Link::Raw => 101,
            Link::Ipv4 => 228,
            Link::Null => 0,
            Link::Loop => 108,
        }
    }

    fn wrap(self, frame: &[u8]) -> Vec<u8> {
        let macs = &frame[..12];
        let proto = ether_type(frame);
        let payload = &frame[14..];
        // ARPHRD_LOOPBACK, the hardware type of a Linux loopback interface.
        const ARPHRD_LOOPBACK: u16 = 772;
        let mut out = Vec::new();
        match self {
            Link::Ethernet => out.extend_from_slice(frame),
            Link::LinuxSll => {
                out.extend_from_slice(&0u16.to_be_bytes()); // packet type: to us
                out.extend_from_slice(&ARPHRD_LOOPBACK.to_be_bytes());
                out.extend_from_slice(&6u16.to_be_bytes()); // address length
                out.extend_from_slice(&macs[6..12]);
                out.extend_from_slice(&[0, 0]); // address padded to 8 bytes
                out.extend_from_slice(&proto.to_be_bytes());
                assert_eq!(out.len(), 16);
                out.extend_from_slice(payload);
            }
            Link::LinuxSll2 => {
                out.extend_from_slice(&proto.to_be_bytes());
                out.extend_from_slice(&[0, 0]); // reserved
                out.extend_from_slice(&1u32.to_be_bytes()); // interface index
                out.extend_from_slice(&ARPHRD_LOOPBACK.to_be_bytes());
                out.push(0); // packet type: to us
                out.push(6); // address length
                out.extend_from_slice(&macs[6..12]);
                out.extend_from_slice(&[0, 0]);
                assert_eq!(out.len(), 20);
                out.extend_from_slice(payload);
            }
            Link::Raw | Link::Ipv4 => {
                assert_eq!(proto, ETHERTYPE_IPV4);
                out.extend_from_slice(payload);
            }
            Link::Null => {
                assert_eq!(proto, ETHERTYPE_IPV4);
                out.extend_from_slice(&2u32.to_le_bytes()); // AF_INET, host (little-endian) order
                out.extend_from_slice(payload);
            }
            Link::Loop => {
                assert_eq!(proto, ETHERTYPE_IPV4);
                out.extend_from_slice(&2u32.to_be_bytes()); // AF_INET, network order
                out.extend_from_slice(payload);
            }
            Link::Vlan => {
                out.extend_from_slice(macs);
                out.extend_from_slice(&0x8100u16.to_be_bytes());
                out.extend_from_slice(&42u16.to_be_bytes()); // PCP 0, DEI 0, VID 42
                out.extend_from_slice(&proto.to_be_bytes());
                out.extend_from_slice(payload);
            }
            Link::QinQ => {
                out.extend_from_slice(macs);
                out.extend_from_slice(&0x88a8u16.to_be_bytes());
                out.extend_from_slice(&100u16.to_be_bytes()); // service VID 100
                out.extend_from_slice(&0x8100u16.to_be_bytes());
                out.extend_from_slice(&42u16.to_be_bytes()); // customer VID 42
                out.extend_from_slice(&proto.to_be_bytes());
                out.extend_from_slice(payload);
            }
        }
        out
    }
}

fn check_link(test: &str, link: Link) {
    let bytes = pcap_with_frames(link.link_type(), |r| link.wrap(&r.frame));
    check_variant(test, &bytes, "pcap", Family::V4);
}

// ---------------------------------------------------------------------------------------------
// The original and classic pcap variants.
// ---------------------------------------------------------------------------------------------

#[test]
fn original_capture_has_the_expected_verdicts() {
    let report = analyze_json(Path::new(ORIGINAL));
    assert_same_verdicts(&report, "original", "pcap", Family::V4);
}

#[test]
fn hand_written_reencoding_reproduces_the_original_bytes() {
    // Guards the encoder itself: re-encoding unchanged must give the shipped file back.
    let bytes = pcap_with_frames(1, |r| Link::Ethernet.wrap(&r.frame));
    let original = fs::read(ORIGINAL).unwrap();
    // The shipped header's snap length may differ from ours; everything else must match.
    assert_eq!(bytes.len(), original.len());
    assert_eq!(bytes[..16], original[..16]);
    assert_eq!(bytes[20..], original[20..]);
}

#[test]
fn pcap_big_endian_microseconds() {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .map(|r| PcapRecord::whole(r, r.frame.clone(), false))
        .collect();
    let bytes = write_pcap(Endian::Big, false, 1, MAX_RECORD, &records);
    assert_eq!(bytes[..4], [0xa1, 0xb2, 0xc3, 0xd4]);
    check_variant("pcap_be_usec", &bytes, "pcap", Family::V4);
}

#[test]
fn pcap_little_endian_nanoseconds() {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .map(|r| PcapRecord::whole(r, r.frame.clone(), true))
        .collect();
    let bytes = write_pcap(Endian::Little, true, 1, MAX_RECORD, &records);
    assert_eq!(bytes[..4], [0x4d, 0x3c, 0xb2, 0xa1]);
    check_variant("pcap_le_nsec", &bytes, "pcap", Family::V4);
}

#[test]
fn pcap_big_endian_nanoseconds() {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .map(|r| PcapRecord::whole(r, r.frame.clone(), true))
        .collect();
    let bytes = write_pcap(Endian::Big, true, 1, MAX_RECORD, &records);
    assert_eq!(bytes[..4], [0xa1, 0xb2, 0x3c, 0x4d]);
    check_variant("pcap_be_nsec", &bytes, "pcap", Family::V4);
}

// ---------------------------------------------------------------------------------------------
// pcapng.
// ---------------------------------------------------------------------------------------------

#[test]
fn pcapng_little_endian_two_interfaces_with_ignored_blocks() {
    let e = Endian::Little;
    let records = original_records();
    let mut bytes = ng_section_header(e);
    // Interface 0: Linux cooked v2, nanosecond timestamps. Interface 1: Ethernet, microseconds.
    bytes.extend(ng_interface(e, 276, Some(9), None));
    bytes.extend(ng_interface(e, 1, None, None));
    let middle = records.len() / 2;
    for (i, r) in records.iter().enumerate() {
        if i == middle {
            bytes.extend(ng_name_resolution(e));
            bytes.extend(ng_interface_statistics(e, r.nanos(), i as u64));
        }
        let block = if i % 2 == 0 {
            let data = Link::LinuxSll2.wrap(&r.frame);
            ng_enhanced_packet(e, 0, r.nanos(), &data)
        } else {
            ng_enhanced_packet(e, 1, r.micros(), &r.frame)
        };
        bytes.extend(block);
    }
    assert_eq!(bytes[8..12], [0x4d, 0x3c, 0x2b, 0x1a]);
    check_variant("pcapng_le_two_ifaces", &bytes, "pcapng", Family::V4);
}

#[test]
fn pcapng_big_endian_one_interface() {
    let e = Endian::Big;
    let mut bytes = ng_section_header(e);
    bytes.extend(ng_interface(e, 1, None, Some("lo")));
    for r in original_records() {
        bytes.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
    }
    assert_eq!(bytes[8..12], [0x1a, 0x2b, 0x3c, 0x4d]);
    check_variant("pcapng_be_one_iface", &bytes, "pcapng", Family::V4);
}

/// if_tsoffset (option 14) is read in the section's byte order: packets stored 1000 s
/// early with an offset of +1000 s land at the original times.
#[test]
fn pcapng_timestamp_offset_in_both_byte_orders() {
    const OFFSET_SECS: u64 = 1000;
    let original = analyze_json(Path::new(ORIGINAL));
    let first_time = original["input"]["first_packet_time"].as_f64().unwrap();
    for e in [Endian::Little, Endian::Big] {
        let mut idb = Buf::new(e);
        idb.u16(1).u16(0).u32(MAX_RECORD);
        idb.u16(14).u16(8).u64(OFFSET_SECS);
        idb.u16(0).u16(0);
        let mut bytes = ng_section_header(e);
        bytes.extend(ng_block(e, IDB, &idb.bytes));
        for r in original_records() {
            let units = r.micros() - OFFSET_SECS * 1_000_000;
            bytes.extend(ng_enhanced_packet(e, 0, units, &r.frame));
        }
        let dir = TempDir::new("capture-formats", "pcapng_tsoffset");
        let path = dir.write("offset.pcapng", &bytes);
        let report = analyze_json(&path);
        assert_same_verdicts(&report, "pcapng_tsoffset", "pcapng", Family::V4);
        let got = report["input"]["first_packet_time"].as_f64().unwrap();
        assert!(
            (got - first_time).abs() < 1e-6,
            "{got} against {first_time}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Link types.
// ---------------------------------------------------------------------------------------------

#[test]
fn link_linux_sll() {
    check_link("link_sll", Link::LinuxSll);
}

#[test]
fn link_linux_sll2() {
    check_link("link_sll2", Link::LinuxSll2);
}

#[test]
fn link_raw_ip() {
    check_link("link_raw", Link::Raw);
}

#[test]
fn link_raw_ipv4() {
    check_link("link_ipv4", Link::Ipv4);
}

#[test]
fn link_bsd_null_loopback() {
    check_link("link_null", Link::Null);
}

#[test]
fn link_openbsd_loop() {
    check_link("link_loop", Link::Loop);
}

#[test]
fn link_ethernet_802_1q() {
    check_link("link_vlan", Link::Vlan);
}

#[test]
fn link_ethernet_802_1ad_qinq() {
    check_link("link_qinq", Link::QinQ);
}

// ---------------------------------------------------------------------------------------------
// IPv6, snap length, standard input.
// ---------------------------------------------------------------------------------------------

#[test]
fn ipv6_without_extension_headers() {
    let bytes = pcap_with_frames(1, |r| to_ipv6(&r.frame, false));
    check_variant("ipv6", &bytes, "pcap", Family::V6);
}

#[test]
fn ipv6_with_hop_by_hop_header() {
    let bytes = pcap_with_frames(1, |r| to_ipv6(&r.frame, true));
    check_variant("ipv6_hbh", &bytes, "pcap", Family::V6);
}

#[test]
fn snaplen_cuts_every_payload() {
    let mut cut_short = 0;
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .map(|r| {
            let (ihl, _) = ipv4_lengths(&r.frame);
            let tcp_header = usize::from(r.frame[14 + ihl + 12] >> 4) * 4;
            let keep = 14 + ihl + tcp_header;
            assert!(keep <= r.frame.len());
            if keep < r.frame.len() {
                cut_short += 1;
            }
            PcapRecord {
                sec: r.sec,
                frac: r.usec,
                orig_len: r.frame.len() as u32,
                data: r.frame[..keep].to_vec(),
            }
        })
        .collect();
    assert!(
        cut_short >= 2 * STALLS,
        "only {cut_short} records carried a payload"
    );
    let snaplen = records.iter().map(|r| r.data.len()).max().unwrap() as u32;
    let bytes = write_pcap(Endian::Little, false, 1, snaplen, &records);
    check_variant("snaplen", &bytes, "pcap", Family::V4);
}

#[test]
fn stdin_in_small_chunks() {
    let bytes = fs::read(ORIGINAL).unwrap();
    let mut child = Command::new(BIN)
        .args(["analyze", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpstall");
    let mut stdin = child.stdin.take().unwrap();
    let writer = thread::spawn(move || {
        for chunk in bytes.chunks(97) {
            stdin.write_all(chunk).expect("write to tcpstall's stdin");
            stdin.flush().unwrap();
            thread::sleep(Duration::from_millis(2));
        }
        // Dropping stdin closes the pipe: end of input.
    });
    let out = child.wait_with_output().expect("wait for tcpstall");
    writer.join().expect("writer thread");
    let report = parse_report(&out, "stdin");
    assert_eq!(report["input"]["source"], "stdin");
    assert_same_verdicts(&report, "stdin", "pcap", Family::V4);
}

// ---------------------------------------------------------------------------------------------
// Unusable inputs.
// ---------------------------------------------------------------------------------------------

/// The input is refused: exit status 2, one `tcpstall: error:` line naming the problem.
fn assert_refused(test: &str, bytes: &[u8], needles: &[&str]) {
    let dir = TempDir::new("capture-formats", test);
    let path = dir.write(&format!("{test}.pcap"), bytes);
    let out = run(&["analyze", path.to_str().unwrap()]);
    check_refused(&out, test, needles);
}

#[test]
fn refuses_empty_file() {
    assert_refused("empty", b"", &["empty"]);
}

#[test]
fn refuses_text_file() {
    assert_refused("text", b"hello, not a capture\n", &["not a capture"]);
}

#[test]
fn refuses_file_header_cut_at_10_bytes() {
    let original = fs::read(ORIGINAL).unwrap();
    assert_refused("header_cut", &original[..10], &["truncated file header"]);
}

#[test]
fn refuses_record_claiming_4_gib() {
    let mut bytes = pcap_header(LINK_ETHERNET);
    pcap_record(
        &mut bytes,
        1_795_305_676_000_000,
        u32::MAX,
        u32::MAX,
        &[0u8; 64],
    );
    assert_refused("huge_record", &bytes, &["over the", "4294967"]);
}

#[test]
fn refuses_unknown_link_type() {
    let bytes = pcap_with_frames(147, |r| r.frame.clone());
    assert_refused(
        "link_147",
        &bytes,
        &["no TCP segments", "unsupported link type 147"],
    );
}

#[test]
fn refuses_udp_only_capture() {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, r)| {
            let payload = b"ping";
            let udp_len = 8 + payload.len();
            let total = 20 + udp_len;
            let mut frame = r.frame[..12].to_vec();
            frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let mut ip = vec![
                0x45, 0, 0, 0, 0, i as u8, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
            ];
            ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            let sum = ip
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum::<u32>();
            let sum = (sum & 0xffff) + (sum >> 16);
            let checksum = !(((sum & 0xffff) + (sum >> 16)) as u16);
            ip[10..12].copy_from_slice(&checksum.to_be_bytes());
            frame.extend(ip);
            frame.extend_from_slice(&40000u16.to_be_bytes());
            frame.extend_from_slice(&9u16.to_be_bytes()); // discard
            frame.extend_from_slice(&(udp_len as u16).to_be_bytes());
            frame.extend_from_slice(&[0, 0]); // no UDP checksum
            frame.extend_from_slice(payload);
            PcapRecord::whole(r, frame, false)
        })
        .collect();
    let bytes = write_pcap(Endian::Little, false, 1, MAX_RECORD, &records);
    assert_refused("udp_only", &bytes, &["no TCP segments"]);
}

#[test]
fn last_record_cut_is_a_warning() {
    let original = fs::read(ORIGINAL).unwrap();
    let dir = TempDir::new("capture-formats", "tail_cut");
    let path = dir.write("tail_cut.pcap", &original[..original.len() - 10]);
    let path_str = path.to_str().unwrap();

    let out = run(&["analyze", path_str]);
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert!(!stderr.contains("panicked"), "panic:\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "exit status; stderr:\n{stderr}");
    assert!(
        stderr.lines().any(
            |l| l.starts_with("tcpstall: warning:") && l.contains("capture ends inside record")
        ),
        "no truncation warning on standard error:\n{stderr}"
    );
    assert!(
        !stdout.contains("warning"),
        "a warning on standard output:\n{stdout}"
    );

    let report = analyze_json(&path);
    let warnings = report["input"]["warnings"]
        .as_array()
        .expect("warnings array");
    assert!(
        !warnings.is_empty(),
        "input.warnings is empty: {}",
        report["input"]
    );
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.contains("capture ends inside record"))),
        "input.warnings: {warnings:?}"
    );
}
