//! Malformed and unusual captures: one test per row of docs/malformed-captures.md.
//!
//! Every input is generated here (most from the shipped capture
//! `captures/seed002-two-writes.pcap`, cut, damaged or re-encoded; the rest from scratch)
//! and fed to the real `tcpstall analyze`. Whatever the input, tcpstall must not panic,
//! must not hang, and must end with the documented exit status: 0 with the packets it
//! could use analysed (and a warning when something was left out), or 2 with one
//! `tcpstall: error:` line that says what is wrong and where.
//!
//! The encoders (`tests/common/pcap.rs`) are written by hand so that they owe nothing
//! to the reader they test.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::pcap::*;
use common::verdicts::baseline;
use common::{
    TempDir, analyze_json, check_refused, parse_report, parse_report_with_open_bugs, run,
    run_with_stdin, run_within, text,
};

const REGRESSIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/regressions");
/// The shipped capture: 57 packets, one connection, 9 Nagle x delayed-ACK stalls.
const PACKETS: u64 = 57;
const STALLS: u64 = 9;
/// The documented pcapng block limit.
const MAX_BLOCK: u32 = 16 << 20;

// ---------------------------------------------------------------------------------------------
// The shipped capture, and running the binary on what the tests make of it.
// ---------------------------------------------------------------------------------------------

/// Byte offsets in the shipped file where each record ends.
fn original_record_ends() -> Vec<usize> {
    assert_eq!(original_records().len() as u64, PACKETS);
    let mut at = 24;
    original_records()
        .iter()
        .map(|r| {
            at += 16 + r.frame.len();
            at
        })
        .collect()
}

/// Writes `bytes`, runs `tcpstall analyze --json` on it and returns the report.
fn report_of(test: &str, name: &str, bytes: &[u8]) -> Value {
    let dir = TempDir::new("malformed", test);
    let path = dir.write(name, bytes);
    analyze_json(&path)
}

/// The input is refused: exit status 2, one `tcpstall: error:` line with every needle.
fn assert_refused(test: &str, name: &str, bytes: &[u8], needles: &[&str]) -> String {
    let dir = TempDir::new("malformed", test);
    let path = dir.write(name, bytes);
    let out = run(&["analyze", path.to_str().unwrap()]);
    check_refused(&out, test, needles)
}

fn stall_times(connection: &Value) -> Vec<(f64, f64)> {
    connection["stalls"]
        .as_array()
        .expect("stalls array")
        .iter()
        .filter(|s| s["class"] == "nagle-delayed-ack")
        .map(|s| {
            (
                s["start"].as_f64().unwrap(),
                s["duration"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The shipped connection is in the report with its 9 stalls at their original times.
fn assert_original_stalls(report: &Value, what: &str) {
    let connection = report["connections"]
        .as_array()
        .expect("connections array")
        .iter()
        .find(|c| c["server"] == "127.0.0.1:8000")
        .unwrap_or_else(|| panic!("{what}: the shipped connection is missing"));
    assert_eq!(
        connection["stall_count"].as_u64(),
        Some(STALLS),
        "{what}: stall count"
    );
    assert_eq!(connection["verdict"], "nagle-delayed-ack-stalls", "{what}");
    let got = stall_times(connection);
    let original = &baseline().stalls;
    assert_eq!(got.len(), original.len(), "{what}: stalls listed");
    for (i, (g, b)) in got.iter().zip(original).enumerate() {
        assert!(
            (g.0 - b.0).abs() < 2e-6 && (g.1 - b.1).abs() < 2e-6,
            "{what}: stall {i} at {g:?}, originally {b:?}"
        );
    }
}

fn warnings(report: &Value) -> Vec<String> {
    report["input"]["warnings"]
        .as_array()
        .expect("warnings array")
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

fn skipped(report: &Value, key: &str) -> u64 {
    report["input"]["skipped"][key].as_u64().unwrap_or(0)
}

/// Runs `check` on every item, on a few threads: each item starts a process.
fn in_parallel<T: Sync>(items: &[T], check: impl Fn(&T) + Sync) {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let next = AtomicU32::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(item) = items.get(i) else { break };
                    check(item);
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Truncation at every byte.
// ---------------------------------------------------------------------------------------------

/// The records (1-based) that end at or before `len`, and whether `len` cuts one.
fn complete_records(ends: &[usize], first_record_at: usize, len: usize) -> (usize, bool) {
    let complete = ends.iter().take_while(|&&end| end <= len).count();
    let boundary = len == first_record_at || ends.contains(&len);
    (complete, !boundary)
}

/// What a prefix of `len` bytes must do, whatever the format.
fn check_prefix(
    test: &str,
    dir: &TempDir,
    bytes: &[u8],
    len: usize,
    header_len: usize,
    ends: &[usize],
) {
    let what = format!("{test}: first {len} bytes");
    let path = dir.write(&format!("prefix-{len}"), &bytes[..len]);
    let out = run(&["analyze", "--json", path.to_str().unwrap()]);
    if len == 0 {
        check_refused(&out, &what, &["the input is empty"]);
        return;
    }
    if len < header_len {
        check_refused(&out, &what, &["truncated file header"]);
        return;
    }
    let (complete, cut) = complete_records(ends, header_len, len);
    if complete == 0 {
        if cut {
            check_refused(
                &out,
                &what,
                &["truncated capture", "before any complete packet"],
            );
        } else {
            check_refused(&out, &what, &["no TCP segments", "holds no packets"]);
        }
        return;
    }
    let report = parse_report(&out, &what);
    assert_eq!(
        report["input"]["packets"].as_u64(),
        Some(complete as u64),
        "{what}: packets"
    );
    let warnings = warnings(&report);
    if cut {
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("capture ends inside") && w.contains("were analysed")),
            "{what}: no truncation warning in {warnings:?}"
        );
    } else {
        assert!(warnings.is_empty(), "{what}: warnings {warnings:?}");
    }
}

/// Every prefix of the shipped pcap up to the end of its fifth record: the empty file,
/// the cut file header, the header alone, and a cut at every byte of records 1 to 5.
#[test]
fn pcap_cut_at_every_byte_of_the_first_five_records() {
    let bytes = original_bytes();
    let ends: Vec<usize> = original_record_ends().into_iter().take(5).collect();
    let dir = TempDir::new("malformed", "cut_pcap");
    let lengths: Vec<usize> = (0..=ends[4]).collect();
    in_parallel(&lengths, |&len| {
        check_prefix("cut_pcap", &dir, bytes, len, 24, &ends)
    });
}

/// The same for pcapng: section header, interface description, then five packets.
#[test]
fn pcapng_cut_at_every_byte_of_the_first_five_blocks() {
    let records = &original_records()[..5];
    let bytes = pcapng(Endian::Little, records);
    let shb = ng_section_header(Endian::Little).len();
    let idb = ng_interface(Endian::Little, 1, None, None).len();
    // The interface block is not a packet: a cut inside it is a cut before any packet.
    let mut ends = Vec::new();
    let mut at = shb + idb;
    for r in records {
        at += ng_enhanced_packet(Endian::Little, 0, 0, &r.frame).len();
        ends.push(at);
    }
    assert_eq!(at, bytes.len());
    let dir = TempDir::new("malformed", "cut_pcapng");
    let lengths: Vec<usize> = (0..=bytes.len()).collect();
    in_parallel(&lengths, |&len| {
        if (shb..shb + idb).contains(&len) && len > shb {
            // Inside the interface description block: no packet yet.
            let path = dir.write(&format!("prefix-{len}"), &bytes[..len]);
            let out = run(&["analyze", path.to_str().unwrap()]);
            check_refused(
                &out,
                &format!("cut_pcapng: first {len} bytes"),
                &["truncated capture", "before any complete packet"],
            );
        } else if len == shb {
            let path = dir.write(&format!("prefix-{len}"), &bytes[..len]);
            let out = run(&["analyze", path.to_str().unwrap()]);
            check_refused(
                &out,
                "cut_pcapng: section header only",
                &["holds no packets"],
            );
        } else {
            check_prefix("cut_pcapng", &dir, &bytes, len, shb + idb, &ends);
        }
    });
}

/// A capture cut inside its last record, read from a pipe: the same warning.
#[test]
fn capture_cut_mid_record_through_a_pipe_is_a_warning() {
    let bytes = original_bytes();
    let cut = bytes.len() - 7;
    let out = run_with_stdin(&["analyze", "--json", "-"], &bytes[..cut]);
    let report = parse_report(&out, "pipe");
    assert_eq!(report["input"]["packets"].as_u64(), Some(PACKETS - 1));
    assert!(
        warnings(&report)
            .iter()
            .any(|w| w.contains("capture ends inside record 57")),
        "{:?}",
        warnings(&report)
    );
}

/// Not a capture at all, and the one classic pcap variant pcap-parser cannot read (the
/// big-endian modified format): each refused with its reason. The little-endian
/// modified format (24-byte record headers) is read.
#[test]
fn not_a_capture_and_modified_pcap() {
    assert_refused(
        "text",
        "text.pcap",
        b"GET / HTTP/1.1\r\n\r\n",
        &[
            "not a capture",
            "47 45 54 20",
            "not a pcap or pcapng magic number",
        ],
    );
    let mut modified = Vec::new();
    modified.extend_from_slice(&0xa1b2_cd34u32.to_le_bytes());
    modified.extend_from_slice(&original_bytes()[4..24]);
    for r in original_records() {
        let len = r.frame.len() as u32;
        pcap_record(&mut modified, r.micros(), len, len, &[]);
        modified.extend_from_slice(&1u32.to_le_bytes()); // interface index
        modified.extend_from_slice(&ETHERTYPE_IPV4.to_le_bytes()); // protocol
        modified.extend_from_slice(&[0, 0]); // packet type, padding
        modified.extend_from_slice(&r.frame);
    }
    let report = report_of("modified", "modified.pcap", &modified);
    assert_original_stalls(&report, "modified pcap");

    let mut big_endian = modified.clone();
    big_endian[..4].copy_from_slice(&0xa1b2_cd34u32.to_be_bytes());
    assert_refused(
        "modified_be",
        "modified-be.pcap",
        &big_endian,
        &["unsupported capture format", "big-endian modified pcap"],
    );
}

// ---------------------------------------------------------------------------------------------
// Record lengths.
// ---------------------------------------------------------------------------------------------

/// Zero-length records (pcap) and empty packet blocks (pcapng) are counted as packets
/// cut before the end of their headers; everything else is analysed as usual.
#[test]
fn zero_length_records_are_counted_and_skipped() {
    let records = original_records();
    let mut bytes = pcap_header(LINK_ETHERNET);
    let mut ng = ng_section_header(Endian::Big);
    ng.extend(ng_interface(Endian::Big, 1, None, None));
    for (i, r) in records.iter().enumerate() {
        if i % 10 == 5 {
            // An empty record, and one claiming a 60-byte packet of which none was kept.
            pcap_record(&mut bytes, r.micros(), 0, 0, &[]);
            pcap_record(&mut bytes, r.micros(), 0, 60, &[]);
            ng.extend(ng_enhanced_packet(Endian::Big, 0, r.micros(), &[]));
            ng.extend(ng_enhanced_packet(Endian::Big, 0, r.micros(), &[]));
        }
        let len = r.frame.len() as u32;
        pcap_record(&mut bytes, r.micros(), len, len, &r.frame);
        ng.extend(ng_enhanced_packet(Endian::Big, 0, r.micros(), &r.frame));
    }
    for (name, bytes) in [("zero.pcap", bytes), ("zero.pcapng", ng)] {
        let report = report_of("zero_length", name, &bytes);
        assert_eq!(report["input"]["packets"].as_u64(), Some(PACKETS + 12));
        assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(PACKETS));
        assert_eq!(skipped(&report, "truncated_headers"), 12, "{name}");
        assert_original_stalls(&report, name);
    }
}

/// A pcap record of exactly the 262,144-byte limit is read; one byte more is an error
/// that names the packet and its byte offset, even though the whole record is there.
#[test]
fn pcap_record_longer_than_the_limit_is_an_error() {
    let records = original_records();
    let build = |caplen: u32| {
        let mut bytes = pcap_header(LINK_ETHERNET);
        for (i, r) in records.iter().enumerate() {
            let mut data = r.frame.clone();
            if i == 2 {
                // Padding after the IP packet, as a capture of a jumbo link might hold.
                data.resize(caplen as usize, 0xee);
            }
            let len = data.len() as u32;
            pcap_record(&mut bytes, r.micros(), len, len, &data);
        }
        bytes
    };
    let report = report_of("limit_ok", "limit.pcap", &build(MAX_RECORD));
    assert_original_stalls(&report, "record at the limit");

    let offset = original_record_ends()[1];
    let line = assert_refused(
        "limit_over",
        "over.pcap",
        &build(MAX_RECORD + 1),
        &[
            "packet 3",
            &format!("byte offset {offset}"),
            "claims 262145 bytes",
            "over the 262144-byte limit",
        ],
    );
    assert!(line.contains("corrupt"), "{line}");
}

/// A pcapng block over 16 MiB is an error; a 2 MiB block (larger than the read buffer)
/// of a type tcpstall does not need is read past.
#[test]
fn pcapng_block_lengths_over_the_limit() {
    let e = Endian::Little;
    let records = original_records();
    let mut big = pcapng(e, &records[..20]);
    big.extend(ng_block(e, 0x0000_0bad, &vec![0x5a; 2 << 20]));
    for r in &records[20..] {
        big.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
    }
    let report = report_of("block_2mib", "big.pcapng", &big);
    assert_original_stalls(&report, "2 MiB custom block");

    let mut over = pcapng(e, &records[..3]);
    let at = over.len();
    over.extend_from_slice(&e.u32(EPB));
    over.extend_from_slice(&e.u32(MAX_BLOCK + 4));
    over.extend_from_slice(&[0; 64]);
    assert_refused(
        "block_over",
        "over.pcapng",
        &over,
        &[
            "packet 4",
            &format!("byte offset {at}"),
            "claims 16777220 bytes",
            "over the 16777216-byte limit",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Bogus pcapng blocks.
// ---------------------------------------------------------------------------------------------

/// The shipped packets as pcapng with `bad` inserted before packet 11.
fn pcapng_with_block_before_packet_11(e: Endian, bad: &[u8]) -> (Vec<u8>, usize) {
    let records = original_records();
    let mut bytes = pcapng(e, &records[..10]);
    let at = bytes.len();
    bytes.extend_from_slice(bad);
    for r in &records[10..] {
        bytes.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
    }
    (bytes, at)
}

/// A block length below 12 bytes or not a multiple of 4 is corruption: an error that
/// names the place, never a panic or a wait for more input.
#[test]
fn pcapng_bad_block_lengths_are_errors() {
    for e in [Endian::Little, Endian::Big] {
        for (len, block_type) in [
            (0, EPB),
            (8, EPB),
            (4, 0x8000_0001),
            (10, 0x8000_0001),
            (46, EPB),
            (41, 0x1234),
        ] {
            let mut bad = Vec::new();
            bad.extend_from_slice(&e.u32(block_type));
            bad.extend_from_slice(&e.u32(len));
            bad.extend_from_slice(&[0; 60]);
            let (bytes, at) = pcapng_with_block_before_packet_11(e, &bad);
            assert_refused(
                "bad_block_len",
                "bad.pcapng",
                &bytes,
                &[
                    "packet 11",
                    &format!("byte offset {at}"),
                    &format!("claims {len} bytes"),
                    "multiple of 4",
                ],
            );
        }
    }
}

/// A block whose trailing length differs from its leading one, or whose packet claims
/// more bytes than the block holds, is an error, at once, however long the file.
#[test]
fn pcapng_inconsistent_blocks_are_errors() {
    let e = Endian::Little;
    let frame = &original_records()[10].frame;
    let mut trailing = ng_enhanced_packet(e, 0, 0, frame);
    let n = trailing.len();
    trailing[n - 4..].copy_from_slice(&e.u32(n as u32 + 4));
    let (bytes, at) = pcapng_with_block_before_packet_11(e, &trailing);
    assert_refused(
        "trailing_len",
        "trailing.pcapng",
        &bytes,
        &[
            &format!("byte offset {at}"),
            &format!("claims {n} bytes at its start and {} at its end", n + 4),
        ],
    );

    // An enhanced packet block whose captured length (100) overruns its 8 data bytes,
    // followed by 2 MiB more: the reader once waited for those bytes forever.
    let mut body = Vec::new();
    for v in [0u32, 0, 0, 100, 100] {
        body.extend_from_slice(&e.u32(v));
    }
    body.extend_from_slice(&[0; 8]);
    let mut overrun = ng_block(e, EPB, &body);
    overrun.extend(ng_block(e, 0x1234_5678, &vec![0; 2 << 20]));
    let (bytes, at) = pcapng_with_block_before_packet_11(e, &overrun);
    let dir = TempDir::new("malformed", "overrun");
    let path = dir.write("overrun.pcapng", &bytes);
    let out = run_within(
        &["analyze", path.to_str().unwrap()],
        Duration::from_secs(10),
    );
    check_refused(
        &out,
        "overrun",
        &[
            "packet 11",
            &format!("byte offset {at}"),
            "enhanced packet block",
            "overrun its length",
        ],
    );
}

/// Blocks of types tcpstall does not read, known or not, with contents that would not
/// parse, are skipped whole: the packets around them are analysed as usual.
#[test]
fn pcapng_unknown_and_unused_blocks_are_skipped() {
    for e in [Endian::Little, Endian::Big] {
        let junk: Vec<u8> = (0..=255u8).collect();
        let mut blocks = Vec::new();
        for block_type in [
            0x1234_5678, // unknown
            0x0000_0bad, // custom, copyable
            0x4000_0bad, // custom, not copyable
            NRB,
            ISB,
            9,           // systemd journal export
            0x0a,        // decryption secrets
            0x8000_0001, // process information
            0x0000_0007, // reserved
        ] {
            blocks.extend(ng_block(e, block_type, &junk));
            blocks.extend(ng_block(e, block_type, &[]));
        }
        let (bytes, _) = pcapng_with_block_before_packet_11(e, &blocks);
        let report = report_of("unknown_blocks", "unknown.pcapng", &bytes);
        assert_eq!(report["input"]["packets"].as_u64(), Some(PACKETS));
        assert!(warnings(&report).is_empty(), "{:?}", warnings(&report));
        assert_original_stalls(&report, "unknown blocks");
    }
}

/// Packets on an interface no Interface Description Block declared are counted and
/// skipped with a warning; when no packet is left, the error says why.
#[test]
fn pcapng_packets_on_undeclared_interfaces() {
    let e = Endian::Little;
    let records = original_records();
    let mut bytes = pcapng(e, records);
    for r in &records[..5] {
        bytes.extend(ng_enhanced_packet(e, 3, r.micros(), &r.frame));
    }
    let report = report_of("undeclared", "undeclared.pcapng", &bytes);
    assert_eq!(report["input"]["packets"].as_u64(), Some(PACKETS + 5));
    assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(PACKETS));
    assert!(
        warnings(&report).iter().any(|w| w
            .starts_with("5 packets name an interface no Interface Description Block declared")),
        "{:?}",
        warnings(&report)
    );
    assert_original_stalls(&report, "undeclared interface");

    // Packets before any interface is declared: nothing to analyse.
    let mut none = ng_section_header(e);
    for r in &records[..4] {
        none.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
    }
    let mut spb = Vec::new();
    spb.extend_from_slice(&e.u32(records[4].frame.len() as u32));
    spb.extend_from_slice(&records[4].frame);
    none.extend(ng_block(e, SPB, &spb));
    assert_refused(
        "undeclared_all",
        "none.pcapng",
        &none,
        &["no TCP segments", "5 packets", "5 on undeclared interfaces"],
    );
}

/// A section header whose byte-order magic is neither order is not a pcapng file; a
/// later one is corruption at its offset.
#[test]
fn pcapng_bad_byte_order_magic() {
    let e = Endian::Little;
    let mut bytes = pcapng(e, original_records());
    let mut first = bytes.clone();
    first[8..12].copy_from_slice(&[1, 2, 3, 4]);
    assert_refused(
        "bom_first",
        "bom.pcapng",
        &first,
        &["not a capture", "byte-order magic 01 02 03 04"],
    );
    let at = bytes.len();
    let mut second = ng_section_header(Endian::Big);
    second[8..12].copy_from_slice(&[0x1a, 0x2b, 0x3c, 0x4e]);
    bytes.extend(second);
    assert_refused(
        "bom_later",
        "bom2.pcapng",
        &bytes,
        &[&format!("byte offset {at}"), "byte-order magic 1a 2b 3c 4e"],
    );
}

/// Unusual but valid pcapng: sections in both byte orders one after the other, the
/// obsolete Packet Block (type 2), power-of-two timestamp resolutions, and interfaces
/// whose timestamps put packets outside 1970 to 2106.
#[test]
fn pcapng_unusual_but_valid_layouts() {
    let records = original_records();
    let half = records.len() / 2;

    // Little-endian section with the first half, big-endian section with the rest, in
    // obsolete Packet Blocks (interface 16 bits, drops 16 bits, then as an EPB).
    let mut bytes = pcapng(Endian::Little, &records[..half]);
    let e = Endian::Big;
    bytes.extend(ng_section_header(e));
    bytes.extend(ng_interface(e, 1, None, None));
    for r in &records[half..] {
        let mut body = Vec::new();
        body.extend_from_slice(&e.u16(0));
        body.extend_from_slice(&e.u16(0));
        body.extend_from_slice(&e.u32((r.micros() >> 32) as u32));
        body.extend_from_slice(&e.u32(r.micros() as u32));
        body.extend_from_slice(&e.u32(r.frame.len() as u32));
        body.extend_from_slice(&e.u32(r.frame.len() as u32));
        body.extend_from_slice(&r.frame);
        bytes.extend(ng_block(e, OBSOLETE_PB, &body));
    }
    let report = report_of("sections", "sections.pcapng", &bytes);
    assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(PACKETS));
    assert_original_stalls(&report, "two sections, obsolete packet blocks");

    // if_tsresol 0x94: units of 2^-20 s.
    let mut bytes = ng_section_header(e);
    bytes.extend(ng_interface(e, 1, Some(0x80 | 20), None));
    for r in records {
        let units = (u128::from(r.micros()) << 20) / 1_000_000;
        bytes.extend(ng_enhanced_packet(e, 0, units as u64, &r.frame));
    }
    let report = report_of("tsresol", "binary.pcapng", &bytes);
    let first = report["input"]["first_packet_time"].as_f64().unwrap();
    let expected = records[0].micros() as f64 / 1e6;
    assert!(
        (first - expected).abs() < 1e-5,
        "{first} against {expected}"
    );
    let connection = &report["connections"][0];
    assert_eq!(connection["stall_count"].as_u64(), Some(STALLS));

    // Timestamps far beyond 2106 (nanoseconds with the top bit set), and before 1970
    // (an if_tsoffset of minus 3000 years): no overflow, no negative time.
    for (tsresol, offset) in [(Some(9u8), 0i64), (None, -95_000_000_000)] {
        let mut idb = Vec::new();
        idb.extend_from_slice(&e.u16(1));
        idb.extend_from_slice(&e.u16(0));
        idb.extend_from_slice(&e.u32(MAX_RECORD));
        if let Some(resol) = tsresol {
            idb.extend_from_slice(&e.u16(9));
            idb.extend_from_slice(&e.u16(1));
            idb.extend_from_slice(&[resol, 0, 0, 0]);
        }
        idb.extend_from_slice(&e.u16(14));
        idb.extend_from_slice(&e.u16(8));
        idb.extend_from_slice(&e.u64(offset as u64));
        idb.extend_from_slice(&[0; 4]);
        let mut bytes = ng_section_header(e);
        bytes.extend(ng_block(e, IDB, &idb));
        for (i, r) in records.iter().enumerate() {
            let units = if tsresol.is_some() {
                u64::MAX - 1_000_000 + i as u64
            } else {
                r.micros()
            };
            bytes.extend(ng_enhanced_packet(e, 0, units, &r.frame));
        }
        let report = report_of("far_times", "far.pcapng", &bytes);
        assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(PACKETS));
    }
}

// ---------------------------------------------------------------------------------------------
// Link types.
// ---------------------------------------------------------------------------------------------

/// A link type tcpstall cannot decode: in a pcap, nothing to analyse (the error lists
/// the supported types); on one interface of a pcapng, those packets are counted and
/// the others analysed.
#[test]
fn unknown_link_types() {
    let records = original_records();
    assert_refused(
        "link_147",
        "link147.pcap",
        &pcap(147, records),
        &[
            "no TCP segments",
            "57 unsupported link type 147",
            "supported link types",
        ],
    );

    let e = Endian::Little;
    let mut bytes = ng_section_header(e);
    bytes.extend(ng_interface(e, 1, None, None));
    bytes.extend(ng_interface(e, 147, None, None));
    for r in records {
        bytes.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
        bytes.extend(ng_enhanced_packet(e, 1, r.micros(), &r.frame));
    }
    let report = report_of("link_mixed", "mixed.pcapng", &bytes);
    assert_eq!(skipped(&report, "unsupported_link_type_147"), PACKETS);
    assert_original_stalls(&report, "one unknown interface");
}

/// The upper bits of a pcap link type field say whether frames carry a frame check
/// sequence (FCS length 2 words, P bit): the link type is still Ethernet.
#[test]
fn pcap_link_type_with_fcs_bits_is_still_ethernet() {
    let records: Vec<Record> = original_records()
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.frame.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
            r
        })
        .collect();
    let report = report_of("fcs", "fcs.pcap", &pcap(0x2400_0001, &records));
    assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(PACKETS));
    assert_original_stalls(&report, "link type with FCS bits");
}

// ---------------------------------------------------------------------------------------------
// Network and transport headers.
// ---------------------------------------------------------------------------------------------

/// IPv4 fragments (first, middle) and IPv6 packets with a fragment header are counted
/// as skipped fragments; they do not disturb the connection around them.
#[test]
fn ip_fragments_are_counted_as_skipped() {
    let records = original_records();
    let template = &records[10];
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        out.push(r.clone());
        if i == 20 {
            // First fragment: more fragments, offset 0, a whole TCP header inside.
            let mut first = template.clone();
            first.frame[14 + 6] = 0x20;
            first.frame[14 + 7] = 0;
            first.set_micros(r.micros());
            // A later fragment: offset 1480 bytes, last.
            let mut later = first.clone();
            later.frame[14 + 6] = 0x00;
            later.frame[14 + 7] = 185;
            // IPv6 with a fragment header (offset 0, more fragments) before TCP.
            let mut v6 = first.clone();
            let ip = &template.frame[14..];
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let tcp = &ip[ihl..total];
            let mut frame = template.frame[..12].to_vec();
            frame.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            frame.extend_from_slice(&[0x60, 0, 0, 0]);
            frame.extend_from_slice(&((tcp.len() + 8) as u16).to_be_bytes());
            frame.push(44); // fragment header
            frame.push(64);
            frame.extend_from_slice(&[0; 15]);
            frame.push(1);
            frame.extend_from_slice(&[0; 15]);
            frame.push(1);
            frame.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 42]); // TCP, offset 0, M
            frame.extend_from_slice(tcp);
            v6.frame = frame;
            out.extend([first, later, v6]);
        }
    }
    let report = report_of("fragments", "fragments.pcap", &pcap(LINK_ETHERNET, &out));
    assert_eq!(skipped(&report, "ip_fragment"), 3);
    assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(PACKETS));
    assert_original_stalls(&report, "fragments");
}

/// The shipped exchange with the IPv4 total length of every data segment (the held
/// ones among them) set to `total`, each record cut to `snap` bytes (0: whole).
fn with_ip_total_length(total: u16, snap: usize) -> Vec<u8> {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .map(|r| {
            let mut frame = r.frame.clone();
            if r.payload_len() > 0 {
                frame[16..18].copy_from_slice(&total.to_be_bytes());
            }
            let orig_len = frame.len() as u32;
            if snap > 0 {
                frame.truncate(snap);
            }
            PcapRecord {
                orig_len,
                ..PcapRecord::whole(r, frame, false)
            }
        })
        .collect();
    write_pcap(Endian::Little, false, LINK_ETHERNET, MAX_RECORD, &records)
}

/// An IPv4 total length longer than the frame was on the wire cannot be right: the
/// payload is what the frame holds after the headers, and a warning counts the packets.
/// A record cut by the snap length keeps the length its IP header gives, as long as it
/// fits in the frame's original length.
#[test]
fn ip_length_longer_than_the_frame_is_taken_from_the_frame() {
    const SNAP: usize = 80;
    let data_segments = original_records()
        .iter()
        .filter(|r| r.payload_len() > 0)
        .count();
    assert!(data_segments > 9, "the held segments are among them");
    let original = analyze_json(Path::new(ORIGINAL));
    let dir = TempDir::new("malformed", "ip-length");
    let path = dir.write("ip-length.pcap", &with_ip_total_length(65_535, 0));
    let out = run(&["analyze", "--json", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    let report = parse_report(&out, "IP length over the frame");
    assert_original_stalls(&report, "IP length over the frame");
    for key in ["bytes_client_to_server", "bytes_server_to_client"] {
        assert_eq!(
            report["connections"][0][key], original["connections"][0][key],
            "{key}"
        );
    }
    let warning =
        format!("{data_segments} packets have an IP length longer than the frame they came in");
    assert!(stderr.contains(&warning), "stderr: {stderr}");
    let warnings = report["input"]["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains(&warning))),
        "{warnings:?}"
    );

    // Cut to 80 bytes by the snap length (past the headers, inside the data): the IP
    // header's length is the packet's (it fits in the frame's original length), with no
    // warning.
    let records = original_records();
    let snapped: Vec<PcapRecord> = records
        .iter()
        .map(|r| PcapRecord {
            orig_len: r.frame.len() as u32,
            ..PcapRecord::whole(r, r.frame[..r.frame.len().min(SNAP)].to_vec(), false)
        })
        .collect();
    let snapped = write_pcap(Endian::Little, false, LINK_ETHERNET, SNAP as u32, &snapped);
    let report = report_of("ip-length", "snapped.pcap", &snapped);
    assert_original_stalls(&report, "snap length 80");
    assert_eq!(report["input"]["warnings"], serde_json::json!([]));
    assert_eq!(
        report["connections"][0]["bytes_client_to_server"],
        original["connections"][0]["bytes_client_to_server"]
    );
    // ... and cut, with a length past the original frame: taken from the frame.
    let report = report_of(
        "ip-length",
        "both.pcap",
        &with_ip_total_length(65_535, SNAP),
    );
    assert_original_stalls(&report, "snap length 80, IP length over the frame");
    let warnings = report["input"]["warnings"].to_string();
    assert!(warnings.contains(&warning), "{warnings}");
}

/// A pcapng section keeps 65,536 interfaces; the packets on any past them are skipped
/// and counted, apart from those on interfaces never declared.
#[test]
fn pcapng_interfaces_past_the_limit_are_counted() {
    const KEPT: u32 = 65_536;
    let e = Endian::Little;
    let mut file = ng_section_header(e);
    let interface = ng_interface(e, LINK_ETHERNET as u16, None, None);
    for _ in 0..KEPT + 2 {
        file.extend(&interface);
    }
    for r in original_records() {
        file.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
    }
    let last = original_records().last().unwrap();
    for if_id in [KEPT - 1, KEPT, KEPT + 1, KEPT + 1, KEPT + 2, u32::MAX] {
        file.extend(ng_enhanced_packet(e, if_id, last.micros(), &last.frame));
    }
    let dir = TempDir::new("malformed", "interfaces");
    let path = dir.write("interfaces.pcapng", &file);
    let out = run(&["analyze", "--json", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    let report = parse_report(&out, "interfaces past the limit");
    assert_original_stalls(&report, "interfaces past the limit");
    for warning in [
        "2 Interface Description Blocks past the first 65536 of a section were not kept; the 3 packets on them were skipped",
        "2 packets name an interface no Interface Description Block declared",
    ] {
        assert!(stderr.contains(warning), "{warning}: {stderr}");
        assert!(report["input"]["warnings"].to_string().contains(warning));
    }
}

/// A pcap record's fraction of a second of a second or more (a microsecond field of
/// 10^6 or more, a nanosecond field of 10^9 or more) is carried into the seconds, and
/// counted.
#[test]
fn pcap_fraction_of_a_second_past_a_second_is_counted() {
    for nanos in [false, true] {
        let per_second = if nanos { 1_000_000_000 } else { 1_000_000 };
        let records: Vec<PcapRecord> = original_records()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut record = PcapRecord::whole(r, r.frame.clone(), nanos);
                // The last three: a second less, and the second in the fraction.
                if i >= original_records().len() - 3 {
                    record.sec -= 1;
                    record.frac += per_second;
                }
                record
            })
            .collect();
        let bytes = write_pcap(Endian::Little, nanos, LINK_ETHERNET, MAX_RECORD, &records);
        let what = if nanos { "nanoseconds" } else { "microseconds" };
        let dir = TempDir::new("malformed", "fraction");
        let path = dir.write("fraction.pcap", &bytes);
        let out = run(&["analyze", "--json", path.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        let report = parse_report(&out, what);
        assert_original_stalls(&report, what);
        let warning = "3 pcap records have a fraction of a second of a second or more";
        assert!(stderr.contains(warning), "{what}: {stderr}");
        assert!(report["input"]["warnings"].to_string().contains(warning));
    }
}

/// A zstd frame (RFC 8878 3.1.1, no content size, a 128 KiB window) of the shipped
/// capture as a raw block, then `records` records of 256 KiB of zeros (at the time of its
/// last packet), each an RLE block pair: 27 bytes of frame for 256 KiB of capture.
fn zstd_bomb(records: usize) -> Vec<u8> {
    const BLOCK: u32 = 128 << 10;
    let mut blocks: Vec<(u32, Vec<u8>, u32)> = vec![(0, original_bytes().to_vec(), 0)];
    let mut header = Vec::new();
    let last = original_records().last().unwrap().micros();
    pcap_record(&mut header, last, 2 * BLOCK, 2 * BLOCK, &[]);
    for _ in 0..records {
        blocks.push((0, header.clone(), 0));
        blocks.push((1, vec![0], BLOCK));
        blocks.push((1, vec![0], BLOCK));
    }
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
    let count = blocks.len();
    for (i, (kind, data, rle_size)) in blocks.into_iter().enumerate() {
        let size = if kind == 1 {
            rle_size
        } else {
            data.len() as u32
        };
        let header = u32::from(i + 1 == count) | kind << 1 | size << 3;
        out.extend(&header.to_le_bytes()[..3]);
        out.extend(data);
    }
    out
}

/// A compressed capture that expands past 1000 times its size, beyond the first 64 MiB,
/// is refused (exit 2, one line); `--max-expansion` lifts the limit.
#[test]
fn decompression_bomb_is_refused() {
    // 1,000 records: 27 KB of zstd, 262 MB of capture.
    let bomb = zstd_bomb(1000);
    assert!(bomb.len() < 40_000, "{}", bomb.len());
    let dir = TempDir::new("malformed", "bomb");
    let path = dir.write("bomb.pcap.zst", &bomb);
    let path = path.to_str().unwrap();
    let out = run(&["analyze", path]);
    check_refused(
        &out,
        "zstd bomb",
        &["zstd stream expands to more than", "--max-expansion"],
    );
    let out = run(&["analyze", "--json", "--max-expansion", "unlimited", path]);
    let report = parse_report(&out, "zstd bomb, no limit");
    assert_original_stalls(&report, "zstd bomb, no limit");
    assert_eq!(
        report["input"]["packets"].as_u64(),
        Some(PACKETS + 1000),
        "every record read"
    );
    let out = run(&["analyze", "--max-expansion", "0", path]);
    check_refused(&out, "--max-expansion 0", &["--max-expansion"]);
}

/// A TCP data offset below 5 words (the header would end inside its fixed part), or an
/// IPv4 header length below 5, is counted as a malformed header and skipped.
#[test]
fn tcp_data_offset_too_small_is_counted_as_malformed() {
    let records = original_records();
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, r) in records.iter().enumerate() {
        out.push(r.clone());
        if i == 30 {
            for offset in 0..5u8 {
                let mut b = r.clone();
                let at = b.tcp_at() + 12;
                b.frame[at] = offset << 4;
                bad.push(b);
            }
            let mut b = r.clone();
            b.frame[14] = 0x44; // IPv4 header length 16 bytes
            bad.push(b);
            out.extend(bad.iter().cloned());
        }
    }
    let report = report_of("offset", "offset.pcap", &pcap(LINK_ETHERNET, &out));
    assert_eq!(
        skipped(&report, "malformed_headers"),
        6,
        "{}",
        report["input"]
    );
    assert_original_stalls(&report, "small data offsets");

    // Only malformed segments: nothing to analyse, and the error says what they were.
    assert_refused(
        "offset_only",
        "offset-only.pcap",
        &pcap(LINK_ETHERNET, &bad),
        &["no TCP segments", "6 malformed IP or TCP header"],
    );
}

/// A connection whose SYN carries 100 bytes (TCP Fast Open), then a 50-byte reply.
fn syn_with_payload_capture() -> Vec<u8> {
    let c = ([10, 0, 0, 1], 40_000);
    let s = ([10, 0, 0, 2], 80);
    let seg = |src, dst, seq, ack, flags, payload| Tcp {
        src,
        dst,
        seq,
        ack,
        flags,
        payload,
    };
    let (isn_c, isn_s) = (1_000u32, 5_000u32);
    let packets = [
        (0, seg(c, s, isn_c, 0, SYN, 100)),
        (100, seg(s, c, isn_s, isn_c + 101, SYN | ACK, 0)),
        (200, seg(c, s, isn_c + 101, isn_s + 1, ACK, 0)),
        (1_000, seg(s, c, isn_s + 1, isn_c + 101, PSH | ACK, 50)),
        (1_100, seg(c, s, isn_c + 101, isn_s + 51, ACK, 0)),
        (2_000, seg(c, s, isn_c + 101, isn_s + 51, FIN | ACK, 0)),
        (2_100, seg(s, c, isn_s + 51, isn_c + 102, FIN | ACK, 0)),
        (2_200, seg(c, s, isn_c + 102, isn_s + 52, ACK, 0)),
    ];
    let mut bytes = pcap_header(LINK_RAW);
    for (micros, p) in packets {
        let data = p.ipv4();
        let len = data.len() as u32;
        pcap_record(&mut bytes, 1_700_000_000_000_000 + micros, len, len, &data);
    }
    bytes
}

/// A SYN that carries data (TCP Fast Open) is analysed like any other connection: the
/// handshake is recognised, no stall, no retransmission.
#[test]
fn syn_with_payload() {
    let report = report_of("syn_data", "syn-data.pcap", &syn_with_payload_capture());
    let connection = &report["connections"][0];
    assert_eq!(report["summary"]["connections"].as_u64(), Some(1));
    assert_eq!(connection["handshake_seen"], true);
    assert_eq!(connection["client"], "10.0.0.1:40000");
    assert_eq!(connection["stall_count"].as_u64(), Some(0));
    assert_eq!(connection["bytes_server_to_client"].as_u64(), Some(50));
    assert_eq!(connection["retransmitted_segments"].as_u64(), Some(0));
}

/// Open bug (flow/connection.rs): a SYN's payload is placed at the SYN's own sequence number
/// instead of one after it, so one byte is not counted and the SYN-ACK's ACK of the
/// data is ignored as beyond anything sent.
#[test]
fn syn_payload_is_counted_in_full() {
    let report = report_of(
        "syn_data_bytes",
        "syn-data.pcap",
        &syn_with_payload_capture(),
    );
    let connection = &report["connections"][0];
    assert_eq!(connection["bytes_client_to_server"].as_u64(), Some(100));
}

// ---------------------------------------------------------------------------------------------
// Hostile traffic.
// ---------------------------------------------------------------------------------------------

/// Thousands of RSTs over thousands of 4-tuples, and a flood on one 4-tuple, around the
/// shipped connection: no stall is claimed for them, the shipped connection keeps its
/// verdict, and the analysis takes little time.
#[test]
fn rst_storm_claims_no_stall_and_stays_fast() {
    const TUPLES: u32 = 5_000;
    const FLOOD: u32 = 5_000;
    let records = original_records();
    let start = records[0].micros();
    let span = records[records.len() - 1].micros() - start;
    let mut storm: Vec<(u64, Vec<u8>)> = Vec::new();
    for i in 0..TUPLES {
        let src = (
            [10, 1, (i >> 8) as u8, i as u8],
            20_000 + (i % 30_000) as u16,
        );
        let dst = ([10, 2, 0, 1], 443);
        let at = start + u64::from(i) * span / u64::from(TUPLES);
        for (k, flags) in [RST, RST | ACK, RST].into_iter().enumerate() {
            let p = Tcp {
                src,
                dst,
                seq: i.wrapping_mul(7919).wrapping_add(k as u32 * 1000),
                ack: i,
                flags,
                payload: 0,
            };
            storm.push((at + k as u64, p.ethernet()));
        }
    }
    for i in 0..FLOOD {
        let p = Tcp {
            src: ([10, 3, 0, 1], 5555),
            dst: ([10, 3, 0, 2], 80),
            seq: i.wrapping_mul(2_654_435_761),
            ack: 0,
            flags: RST,
            payload: 0,
        };
        storm.push((start + u64::from(i) * span / u64::from(FLOOD), p.ethernet()));
    }
    let mut all: Vec<(u64, Vec<u8>)> = records
        .iter()
        .map(|r| (r.micros(), r.frame.clone()))
        .chain(storm)
        .collect();
    all.sort_by_key(|(t, _)| *t);
    let mut bytes = pcap_header(LINK_ETHERNET);
    for (t, frame) in &all {
        pcap_record(
            &mut bytes,
            *t,
            frame.len() as u32,
            frame.len() as u32,
            frame,
        );
    }
    let dir = TempDir::new("malformed", "rst_storm");
    let path = dir.write("storm.pcap", &bytes);
    let began = Instant::now();
    let out = run_within(
        &["analyze", "--json", path.to_str().unwrap()],
        Duration::from_secs(30),
    );
    let took = began.elapsed();
    let report = parse_report(&out, "rst storm");
    let total = all.len() as u64;
    assert_eq!(report["input"]["tcp_segments"].as_u64(), Some(total));
    assert_eq!(report["summary"]["stalls"].as_u64(), Some(STALLS));
    assert_eq!(
        report["summary"]["connections_with_stalls"].as_u64(),
        Some(1)
    );
    let connections = report["summary"]["connections"].as_u64().unwrap();
    assert!(
        connections > u64::from(TUPLES),
        "{connections} connections for {TUPLES} 4-tuples and a flood"
    );
    assert_original_stalls(&report, "rst storm");
    assert!(
        took < Duration::from_secs(20),
        "{total} packets took {took:?}"
    );
}

/// Sequence numbers that wrap past 2^32 in the middle of the exchange, in both
/// directions: the stalls are those of the original, at the same times.
#[test]
fn sequence_wraparound_keeps_the_stalls() {
    let records = original_records();
    let isn_client = records[0].field(4);
    assert!(records[0].sent_by_client() && records[0].flags() == SYN);
    let isn_server = records[1].field(4);
    // The client sends 120 bytes, the server echoes them: start just below 2^32.
    let shift_client = (u32::MAX - 40).wrapping_sub(isn_client);
    let shift_server = (u32::MAX - 70).wrapping_sub(isn_server);
    let mut crossed = [false, false];
    let shifted: Vec<Record> = records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let (own, peer) = if r.sent_by_client() {
                (shift_client, shift_server)
            } else {
                (shift_server, shift_client)
            };
            let seq = r.field(4).wrapping_add(own);
            r.set_field(4, seq);
            if r.flags() & ACK != 0 {
                r.set_field(8, r.field(8).wrapping_add(peer));
            }
            if r.payload_len() > 0 && seq < 1_000 {
                crossed[usize::from(!r.sent_by_client())] = true;
            }
            r
        })
        .collect();
    assert_eq!(crossed, [true, true], "both directions wrap");
    let report = report_of("wrap", "wrap.pcap", &pcap(LINK_ETHERNET, &shifted));
    let original = analyze_json(Path::new(ORIGINAL));
    for key in [
        "bytes_client_to_server",
        "bytes_server_to_client",
        "retransmitted_segments",
    ] {
        assert_eq!(
            report["connections"][0][key], original["connections"][0][key],
            "{key}"
        );
    }
    assert_original_stalls(&report, "wraparound");
}

/// Captures of the shipped exchange whose times go backwards.
fn out_of_order_cases() -> Vec<(&'static str, Vec<Record>)> {
    let records = original_records();
    let mut cases: Vec<(&str, Vec<Record>)> = Vec::new();

    let mut swapped = records.to_vec();
    for i in (5..records.len() - 1).step_by(9) {
        let (a, b) = (swapped[i].micros(), swapped[i + 1].micros());
        swapped[i].set_micros(b);
        swapped[i + 1].set_micros(a);
    }
    cases.push(("swapped neighbours", swapped));

    let mut jumps = records.to_vec();
    jumps[20].set_micros(records[20].micros() - 3_600_000_000);
    jumps[40].set_micros(records[40].micros() + 86_400_000_000);
    jumps[0].set_micros(records[0].micros() + 1_000_000);
    cases.push(("jumps", jumps));

    // Every pure ACK from the server stamped 1 s late: each comes after the client data
    // it released, which still echoes its TCP timestamp.
    let mut late_acks = records.to_vec();
    for r in late_acks.iter_mut() {
        if !r.sent_by_client() && r.payload_len() == 0 && r.flags() == ACK {
            r.set_micros(r.micros() + 1_000_000);
        }
    }
    cases.push(("late releasing ACKs", late_acks));

    let mut reversed = records.to_vec();
    let times: Vec<u64> = records.iter().map(Record::micros).collect();
    for (r, t) in reversed.iter_mut().zip(times.iter().rev()) {
        r.set_micros(*t);
    }
    cases.push(("reversed", reversed));
    cases
}

fn analyze_out_of_order(test: &str, open_bugs: &[&str]) {
    for (what, records) in out_of_order_cases() {
        for (name, bytes) in [
            ("order.pcap", pcap(LINK_ETHERNET, &records)),
            ("order.pcapng", pcapng(Endian::Little, &records)),
        ] {
            let dir = TempDir::new("malformed", test);
            let path = dir.write(name, &bytes);
            let out = run(&["analyze", "--json", path.to_str().unwrap()]);
            let what = format!("{what}, {name}");
            let report = parse_report_with_open_bugs(&out, &what, open_bugs);
            assert_eq!(
                report["input"]["tcp_segments"].as_u64(),
                Some(PACKETS),
                "{what}"
            );
            let out = run(&["analyze", "--stalls", path.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(0), "{what}: text report");
        }
    }
}

/// Packets whose time goes backwards: neighbours swapped, a packet an hour early, one a
/// day late, releasing ACKs stamped after the data they released, the whole capture in
/// reverse. No panic, and no negative time, duration or reaction in the report: a pure
/// ACK stamped after the data that ended a gap is never taken as the ACK that released it.
#[test]
fn timestamps_out_of_order() {
    analyze_out_of_order("order", &[]);
}

/// 200,000 short connections (handshake, request, reply, close), several hundred open
/// at once: the analysis completes and reports every one of them.
#[test]
fn two_hundred_thousand_connections() {
    const CONNECTIONS: u32 = 200_000;
    let server = ([10, 9, 0, 1], 6379);
    let mut bytes = pcap_header(LINK_RAW);
    bytes.reserve(CONNECTIONS as usize * 5 * 64);
    let base = 1_700_000_000_000_000u64;
    // Connection i starts at i * 20 us and lasts 10 ms: OPEN overlap at any time.
    let mut events: Vec<(u64, u32, u8)> = Vec::with_capacity(CONNECTIONS as usize * 5);
    for i in 0..CONNECTIONS {
        let t = base + u64::from(i) * 20;
        for (k, dt) in [0u64, 50, 100, 2_000, 10_000].into_iter().enumerate() {
            events.push((t + dt, i, k as u8));
        }
    }
    events.sort_unstable();
    for &(t, i, k) in &events {
        let client = (
            [10, 8, (i >> 16) as u8 | 0x80, (i >> 8) as u8],
            1024 + (i & 0xff) as u16 * 200,
        );
        let (isn_c, isn_s) = (i.wrapping_mul(40_503), i.wrapping_mul(2_654_435_761));
        let p = match k {
            0 => Tcp {
                src: client,
                dst: server,
                seq: isn_c,
                ack: 0,
                flags: SYN,
                payload: 0,
            },
            1 => Tcp {
                src: server,
                dst: client,
                seq: isn_s,
                ack: isn_c.wrapping_add(1),
                flags: SYN | ACK,
                payload: 0,
            },
            2 => Tcp {
                src: client,
                dst: server,
                seq: isn_c.wrapping_add(1),
                ack: isn_s.wrapping_add(1),
                flags: PSH | ACK | FIN,
                payload: 20,
            },
            3 => Tcp {
                src: server,
                dst: client,
                seq: isn_s.wrapping_add(1),
                ack: isn_c.wrapping_add(22),
                flags: PSH | ACK | FIN,
                payload: 30,
            },
            _ => Tcp {
                src: client,
                dst: server,
                seq: isn_c.wrapping_add(22),
                ack: isn_s.wrapping_add(32),
                flags: ACK,
                payload: 0,
            },
        };
        let data = p.ipv4();
        pcap_record(&mut bytes, t, data.len() as u32, data.len() as u32, &data);
    }
    let dir = TempDir::new("malformed", "many");
    let path = dir.write("many.pcap", &bytes);
    drop(bytes);
    let began = Instant::now();
    let out = run_within(
        &["analyze", path.to_str().unwrap()],
        Duration::from_secs(120),
    );
    let took = began.elapsed();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    let expected = format!("{CONNECTIONS} connections, 0 with stalls: 0 stalls, 0.000 s lost");
    assert!(
        stdout.lines().any(|l| l == expected),
        "no line {expected:?} in:\n{}",
        &stdout[..stdout.len().min(2000)]
    );
    assert!(
        stdout.contains(&format!(
            "{} packets, {} TCP segments",
            events.len(),
            events.len()
        )),
        "{}",
        &stdout[..stdout.len().min(2000)]
    );
    eprintln!(
        "{CONNECTIONS} connections, {} packets: {took:?}",
        events.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Inputs the fuzzers found.
// ---------------------------------------------------------------------------------------------

/// Every file in tests/data/regressions/ once crashed or hung tcpstall, or gave a wrong
/// report. Each name says what it must do now: `*.exit0` is analysed (a report with no
/// negative number), `*.exit2` is refused with one error line.
#[test]
fn fuzzer_regressions() {
    check_regressions(REGRESSIONS);
}

fn check_regressions(dir: &str) {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("regression directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let out = run_within(
            &["analyze", "--json", path.to_str().unwrap()],
            Duration::from_secs(10),
        );
        if name.ends_with(".exit0") {
            parse_report(&out, &name);
        } else if name.ends_with(".exit2") {
            check_refused(&out, &name, &[]);
        } else {
            panic!("{name}: a regression input is named *.exit0 or *.exit2");
        }
    }
}
