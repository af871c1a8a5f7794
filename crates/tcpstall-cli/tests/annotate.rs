//! `tcpstall analyze --annotate OUT.pcapng`: the capture written again as pcapng with a
//! comment on the packets of each gap, every packet otherwise unchanged.
//!
//! The copy is read back with the project's own reader (always) and with Wireshark's
//! tshark when it is installed (CI installs it; without it those checks say they
//! skipped): the packets with a comment are exactly those the JSON report names, and
//! every packet's bytes, lengths and times are the input's.

use std::collections::BTreeMap;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tcpstall_core::capture::CaptureReader;

mod common;
use common::compress::gzip_stored;
use common::pcap::*;
use common::{TempDir, check_refused, parse_report, run, run_with_stdin, shipped, text};

/// Every packet as the project's reader sees it: number, time, link type, bytes, length
/// on the wire.
fn packets(path: &Path) -> Vec<(u64, i64, i32, Vec<u8>, u32)> {
    let bytes = fs::read(path).expect("read a capture");
    let mut all = Vec::new();
    CaptureReader::new(Cursor::new(bytes))
        .expect("a capture")
        .for_each_packet(|p| {
            all.push((p.number, p.time, p.link_type, p.data.to_vec(), p.wire_len));
        })
        .expect("read to the end");
    all
}

/// The comments the report's gaps call for: packet number -> the class of each comment.
fn expected_comments(report: &Value) -> BTreeMap<u64, Vec<String>> {
    let mut expected: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for connection in report["connections"].as_array().expect("connections") {
        for gap in connection["stalls"].as_array().expect("gaps") {
            let class = gap["class"].as_str().expect("a class").to_string();
            let evidence = &gap["evidence"];
            let number = |field: &str| evidence[field].as_u64();
            let after = number("data_after_packet").expect("the data ending the gap");
            let mut named = vec![after];
            if class == "nagle-delayed-ack" || class == "delayed-ack" {
                named.push(number("data_before_packet").expect("the data before"));
                named.push(number("ack_packet").expect("a stall's ACK"));
                let last = number("released_last_packet").expect("where the release ends");
                if last != after {
                    named.push(last);
                }
            }
            for packet in named {
                expected.entry(packet).or_default().push(class.clone());
            }
        }
    }
    expected
}

/// Runs `--json --annotate` on `input`; checks the copy with the project's reader and
/// returns the report and the copy's path.
fn annotate_and_check(dir: &TempDir, input: &Path, what: &str) -> (Value, PathBuf) {
    let out = dir.0.join(format!("{what}.pcapng"));
    let output = run(&[
        Path::new("analyze"),
        Path::new("--json"),
        Path::new("--annotate"),
        &out,
        input,
    ]);
    let report = parse_report(&output, what);
    let expected = expected_comments(&report);
    let stderr = text(&output.stderr);
    let wrote = format!(
        "tcpstall: wrote {} ({} packets, {} annotated)",
        out.display(),
        report["input"]["packets"],
        expected.len()
    );
    assert!(stderr.lines().any(|l| l == wrote), "{what}: {stderr}");
    assert_eq!(packets(&out), packets(input), "{what}: packets changed");
    (report, out)
}

/// The name of the packet-comment field this tshark filters on (`frame.comment`; should
/// a version not know it, `pkt_comment`, the name of the comments' protocol), or `None`
/// without tshark.
fn tshark_comment_field(capture: &Path) -> Option<&'static str> {
    let present = Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        return None;
    }
    // A filter on a field tshark does not know is an error.
    let field = ["frame.comment", "pkt_comment"].into_iter().find(|field| {
        Command::new("tshark")
            .arg("-r")
            .arg(capture)
            .args(["-c", "1", "-Y", field])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    Some(field.expect("tshark knows neither frame.comment nor pkt_comment"))
}

fn tshark(capture: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(capture)
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// tshark sees the comments on exactly the packets the report names, and the same
/// packets (bytes, lengths, times) in the copy as in the input.
fn check_with_tshark(report: &Value, input: &Path, copy: &Path, what: &str) {
    let Some(field) = tshark_comment_field(copy) else {
        common::skipped(format_args!(
            "{what}: tshark checks skipped: tshark is not installed (apt-get install tshark)"
        ));
        return;
    };
    let expected = expected_comments(report);
    let listed = tshark(
        copy,
        &[
            "-Y",
            field,
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            field,
        ],
    );
    let mut seen = BTreeMap::new();
    for line in listed.lines() {
        let (number, comments) = line.split_once('\t').expect("number and comments");
        seen.insert(number.parse::<u64>().expect("a frame number"), comments);
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{what}: the frames with a comment"
    );
    for (packet, classes) in &expected {
        let comments = seen[packet];
        assert_eq!(
            comments.matches("tcpstall: ").count(),
            classes.len(),
            "{what}: frame {packet}: {comments}"
        );
        assert!(comments.starts_with("tcpstall: "), "{comments}");
        for class in classes {
            assert!(comments.contains(class.as_str()), "{what}: {comments}");
        }
    }
    // The filter a Wireshark user types finds the Nagle stalls' packets.
    let nagle: Vec<u64> = tshark(
        copy,
        &[
            "-Y",
            &format!("{field} contains \"nagle\""),
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
    )
    .lines()
    .map(|l| l.parse().expect("a frame number"))
    .collect();
    let want: Vec<u64> = expected
        .iter()
        .filter(|(_, classes)| classes.iter().any(|c| c == "nagle-delayed-ack"))
        .map(|(packet, _)| *packet)
        .collect();
    assert_eq!(nagle, want, "{what}: frames of nagle-delayed-ack stalls");
    // Every packet: the same time, lengths and bytes.
    let fields = [
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "frame.time_epoch",
        "-e",
        "frame.len",
        "-e",
        "frame.cap_len",
        "-e",
        "frame.protocols",
    ];
    assert_eq!(tshark(copy, &fields), tshark(input, &fields), "{what}");
    assert_eq!(
        tshark(copy, &["-x"]),
        tshark(input, &["-x"]),
        "{what}: bytes"
    );
}

#[test]
fn seed002_copy_marks_the_nine_nagle_stalls_and_changes_no_packet() {
    let dir = TempDir::new("annotate", "seed002");
    let input = shipped("seed002-two-writes.pcap");
    let (report, copy) = annotate_and_check(&dir, &input, "seed002");
    let expected = expected_comments(&report);
    // 9 stalls, 3 packets each (each left alone: the release is the held segment).
    assert_eq!(expected.len(), 27, "{expected:?}");
    assert!(
        expected
            .values()
            .flatten()
            .all(|c| c == "nagle-delayed-ack")
    );
    check_with_tshark(&report, &input, &copy, "seed002");
}

#[test]
fn app_think_time_gaps_are_marked_where_they_end() {
    let dir = TempDir::new("annotate", "think");
    let input = shipped("server-sleep-40ms.pcap");
    let (report, copy) = annotate_and_check(&dir, &input, "server-sleep");
    let expected = expected_comments(&report);
    assert_eq!(expected.len(), 10, "{expected:?}");
    assert!(expected.values().flatten().all(|c| c == "app-think-time"));
    check_with_tshark(&report, &input, &copy, "server-sleep");
}

/// seed002 as gzip-compressed pcapng with nanosecond timestamps on interface 1 (a
/// second, unused interface first): the copy keeps the nanoseconds and the interface.
#[test]
fn compressed_nanosecond_pcapng_keeps_its_nanoseconds() {
    let dir = TempDir::new("annotate", "nanos");
    let endian = Endian::Little;
    let mut capture = ng_section_header(endian);
    capture.extend(ng_interface(endian, 101, None, Some("unused")));
    capture.extend(ng_interface(endian, 1, Some(9), Some("lo")));
    for (i, record) in original_records().iter().enumerate() {
        // An odd nanosecond on every packet, so microseconds would lose it.
        let nanos = record.nanos() + 1 + i as u64 * 2;
        capture.extend(ng_enhanced_packet(endian, 1, nanos, &record.frame));
    }
    let input = dir.write("nanos.pcapng.gz", &gzip_stored(&capture));
    let (report, copy) = annotate_and_check(&dir, &input, "nanos");
    assert_eq!(expected_comments(&report).len(), 27);
    // The copy holds one interface, in nanoseconds.
    let mut units = Vec::new();
    CaptureReader::new(Cursor::new(fs::read(&copy).unwrap()))
        .unwrap()
        .for_each_packet(|p| units.push((p.interface, p.time_units)))
        .unwrap();
    assert!(units.iter().all(|&u| u == (0, 1_000_000_000)), "{units:?}");
    // tshark reads the uncompressed input too.
    let plain = dir.write("plain.pcapng", &capture);
    check_with_tshark(&report, &plain, &copy, "nanos");
}

#[test]
fn standard_input_is_kept_and_annotated_like_the_file() {
    let dir = TempDir::new("annotate", "stdin");
    let input = shipped("seed002-two-writes.pcap");
    let out = dir.0.join("stdin.pcapng");
    let bytes = fs::read(&input).unwrap();
    let output = run_with_stdin(
        &[
            Path::new("analyze"),
            Path::new("--annotate"),
            &out,
            Path::new("-"),
        ],
        &bytes,
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("(57 packets, 27 annotated)"), "{stderr}");
    let from_file = dir.0.join("file.pcapng");
    let output = run(&[
        Path::new("analyze"),
        Path::new("--annotate"),
        &from_file,
        &input,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(fs::read(&out).unwrap(), fs::read(&from_file).unwrap());
}

#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_analysis() {
    let dir = TempDir::new("annotate", "refused");
    let input = shipped("seed002-two-writes.pcap");
    let analyze = Path::new("analyze");
    let flag = Path::new("--annotate");

    let output = run(&[analyze, flag, &dir.0, &input]);
    check_refused(&output, "a directory", &["is a directory"]);

    let nowhere = dir.0.join("missing").join("out.pcapng");
    let output = run(&[analyze, flag, &nowhere, &input]);
    check_refused(&output, "a missing directory", &["missing"]);
    assert!(!nowhere.exists());

    let output = run(&[analyze, flag, &dir.0.join("two.pcapng"), &input, &input]);
    check_refused(&output, "two captures", &["one file"]);
    assert!(
        !dir.0.join("two.pcapng").exists(),
        "a refused run leaves no file"
    );

    let copy = dir.write("input.pcap", &fs::read(&input).unwrap());
    let output = run(&[analyze, flag, &copy, &copy]);
    check_refused(&output, "the input itself", &["the capture being analysed"]);
    assert_eq!(fs::read(&copy).unwrap(), fs::read(&input).unwrap());

    // A device that cannot take the copy: an error, and the device is left alone.
    let full = Path::new("/dev/full");
    if full.exists() {
        let output = run(&[analyze, flag, full, &input]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("tcpstall: error: --annotate /dev/full: ")),
            "{stderr}"
        );
        assert!(full.exists(), "/dev/full was removed");
    }

    // An existing file is replaced by the copy.
    let existing = dir.write("existing.pcapng", b"an older file");
    let output = run(&[analyze, flag, &existing, &input]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(packets(&existing), packets(&input));

    // Not a capture: the analysis fails, and the file it would have written is not left.
    let junk = dir.write("junk.pcap", b"not a capture at all");
    let out = dir.0.join("junk.pcapng");
    let output = run(&[analyze, flag, &out, &junk]);
    check_refused(&output, "not a capture", &["not a capture"]);
    assert!(!out.exists(), "no copy of what could not be analysed");
}
