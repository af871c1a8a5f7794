//! Several capture files read as one: a ring of files (the connection runs across them),
//! a directory, two capture points interleaved in time, compressed members, and files
//! that cannot be read (named, the others read; or the run stops).

use std::path::PathBuf;

mod common;
use common::compress::gzip_stored;
use common::pcap::*;
use common::verdicts::*;
use common::{TempDir, check_refused, parse_report, run, text};

/// The shipped records as classic pcap files, one per group of `groups`.
fn pcap_files(groups: &[Vec<Record>]) -> Vec<Vec<u8>> {
    groups
        .iter()
        .map(|records| pcap(LINK_ETHERNET, records))
        .collect()
}

/// The shipped records cut into `n` consecutive runs: a ring of `n` files.
fn ring(n: usize) -> Vec<Vec<Record>> {
    let records = original_records();
    let per_file = records.len().div_ceil(n);
    records.chunks(per_file).map(|c| c.to_vec()).collect()
}

fn write_all(dir: &TempDir, names: &[&str], files: &[Vec<u8>]) -> Vec<PathBuf> {
    names
        .iter()
        .zip(files)
        .map(|(name, bytes)| dir.write(name, bytes))
        .collect()
}

fn analyze_paths(paths: &[PathBuf], extra: &[&str]) -> std::process::Output {
    let mut args = vec!["analyze", "--json"];
    args.extend(extra);
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    run(&args)
}

#[test]
fn a_ring_of_three_files_named_out_of_order_is_one_connection() {
    let dir = TempDir::new("many-files", "ring");
    let files = pcap_files(&ring(3));
    let mut paths = write_all(&dir, &["t.pcap", "t.pcap1", "t.pcap2"], &files);
    // Named last first: the files are put in time order all the same.
    paths.reverse();
    let out = analyze_paths(&paths, &[]);
    let report = parse_report(&out, "ring");
    assert_same_verdicts(&report, "ring", "pcap", Family::V4);
    assert_eq!(report["input"]["files"].as_array().map(Vec::len), Some(3));
    assert!(
        report["input"]["source"]
            .as_str()
            .unwrap()
            .starts_with("3 files")
    );
}

#[test]
fn a_directory_of_compressed_ring_files() {
    let dir = TempDir::new("many-files", "directory");
    let ring_dir = dir.0.join("ring");
    std::fs::create_dir(&ring_dir).unwrap();
    for (i, bytes) in pcap_files(&ring(4)).iter().enumerate() {
        let name = format!("trace{}.pcap.gz", i + 8); // trace8 .. trace11
        std::fs::write(ring_dir.join(name), gzip_stored(bytes)).unwrap();
    }
    std::fs::write(ring_dir.join(".hidden"), b"not read").unwrap();
    let out = analyze_paths(&[ring_dir], &[]);
    let report = parse_report(&out, "directory");
    assert_same_verdicts(&report, "directory", "pcap", Family::V4);
    assert_eq!(report["input"]["compression"], "gzip");
    let files: Vec<String> = report["input"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f["path"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        files,
        [
            "trace8.pcap.gz",
            "trace9.pcap.gz",
            "trace10.pcap.gz",
            "trace11.pcap.gz"
        ]
    );
}

#[test]
fn two_capture_points_interleaved_in_time() {
    // Each direction captured on its own (as on two interfaces): the merge interleaves
    // them packet by packet.
    let (client, server): (Vec<Record>, Vec<Record>) = original_records()
        .iter()
        .cloned()
        .partition(|r| r.sent_by_client());
    let dir = TempDir::new("many-files", "interleaved");
    let paths = write_all(
        &dir,
        &["server.pcap", "client.pcap"],
        &pcap_files(&[server, client]),
    );
    let out = analyze_paths(&paths, &[]);
    let report = parse_report(&out, "interleaved");
    assert_same_verdicts(&report, "interleaved", "pcap", Family::V4);
}

#[test]
fn pcap_and_pcapng_files_together() {
    let parts = ring(2);
    let pcapng = pcapng(Endian::Big, &parts[1]);
    let dir = TempDir::new("many-files", "mixed");
    let first = pcap_files(&parts[..1]).remove(0);
    let paths = write_all(&dir, &["a.pcap", "b.pcapng"], &[first, pcapng]);
    let out = analyze_paths(&paths, &[]);
    let report = parse_report(&out, "mixed");
    // Two formats: the input's is none of them; each file says its own.
    assert!(report["input"]["format"].is_null());
    let formats: Vec<&str> = report["input"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["format"].as_str().unwrap())
        .collect();
    assert_eq!(formats, ["pcap", "pcapng"]);
    assert_eq!(
        report["connections"][0]["stalls"].as_array().unwrap().len(),
        STALLS
    );
}

#[test]
fn a_file_that_cannot_be_read_is_named_and_the_others_are_read() {
    let dir = TempDir::new("many-files", "bad_file");
    let mut files = pcap_files(&ring(2));
    files.push(b"this is not a capture\n".to_vec());
    // A capture that breaks after its first packets: a record claiming 4 GiB.
    let mut broken = pcap_files(&[original_records()[..3].to_vec()]).remove(0);
    broken.extend(u32::MAX.to_le_bytes().repeat(4));
    broken.extend([0u8; 32]);
    files.push(broken);
    let paths = write_all(
        &dir,
        &["a.pcap", "b.pcap", "notes.txt", "broken.pcap"],
        &files,
    );
    let out = analyze_paths(&paths, &[]);
    let report = parse_report(&out, "bad file");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("notes.txt") && stderr.contains("not a capture"),
        "{stderr}"
    );
    assert!(
        stderr.contains("broken.pcap") && stderr.contains("4294967"),
        "{stderr}"
    );
    let warnings = report["input"]["warnings"].to_string();
    assert!(warnings.contains("notes.txt"), "{warnings}");
    assert!(warnings.contains("broken.pcap"), "{warnings}");
    let files = report["input"]["files"].as_array().unwrap();
    assert!(
        files[2]["error"]
            .as_str()
            .unwrap()
            .contains("not a capture")
    );
    // The broken file's three good packets were read too (duplicates of the others').
    assert_eq!(files[3]["packets"].as_u64(), Some(3));
    let stalls = report["connections"][0]["stalls"].as_array().unwrap();
    assert_eq!(stalls.len(), STALLS);
}

#[test]
fn stop_on_file_error_ends_the_run_naming_the_file() {
    let dir = TempDir::new("many-files", "stop");
    let mut files = pcap_files(&ring(2));
    files.push(b"this is not a capture\n".to_vec());
    let paths = write_all(&dir, &["a.pcap", "b.pcap", "notes.txt"], &files);
    let out = analyze_paths(&paths, &["--stop-on-file-error"]);
    check_refused(&out, "stop", &["notes.txt", "not a capture"]);
}

#[test]
fn no_readable_file_at_all_is_an_error() {
    let dir = TempDir::new("many-files", "none");
    let paths = write_all(
        &dir,
        &["x.txt", "y.txt"],
        &[b"xx\n\n".to_vec(), b"".to_vec()],
    );
    let out = analyze_paths(&paths, &[]);
    check_refused(&out, "none", &["no file could be read", "x.txt", "y.txt"]);
}

#[test]
fn standard_input_does_not_mix_with_files() {
    let out = run(&["analyze", "-", ORIGINAL]);
    check_refused(&out, "stdin and a file", &["standard input"]);
}

/// `tcpstall simulate` of seed 002 (two writes then a read, 20 ms round trip) captured
/// at `point`, written to `path`.
fn simulated_at(point: &str, path: &std::path::Path) {
    let path = path.display().to_string();
    let out = run(&[
        "simulate",
        "--pattern",
        "two-writes",
        "--rtt",
        "20",
        "--capture-point",
        point,
        "--pcap",
        &path,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// The stall count and the class of every stall of each connection in a report.
fn stalls_by_connection(report: &serde_json::Value) -> Vec<(Option<String>, u64, Vec<String>)> {
    report["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .map(|c| {
            let classes = c["stalls"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(|e| e["class"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            (
                c["capture_point"].as_str().map(str::to_string),
                c["stall_count"].as_u64().unwrap_or(0),
                classes,
            )
        })
        .collect()
}

#[test]
fn one_connection_at_two_capture_points_is_analysed_at_each() {
    let dir = TempDir::new("many-files", "two-points");
    let client = dir.0.join("c.pcap");
    let server = dir.0.join("s.pcap");
    simulated_at("client", &client);
    simulated_at("server", &server);
    let alone = parse_report(
        &analyze_paths(std::slice::from_ref(&client), &[]),
        "client alone",
    );
    let [(None, nine, _)] = stalls_by_connection(&alone)[..] else {
        panic!("one connection at the client: {alone}");
    };
    assert!(nine > 0, "the client's capture shows no stall");

    let out = analyze_paths(&[client.clone(), server.clone()], &[]);
    let report = parse_report(&out, "two capture points");
    assert_eq!(
        report["input"]["capture_points"],
        serde_json::json!([client.display().to_string(), server.display().to_string()])
    );
    let connections = stalls_by_connection(&report);
    assert_eq!(connections.len(), 2, "{connections:?}");
    for (point, stalls, classes) in &connections {
        assert!(point.is_some(), "a connection without its capture point");
        assert_eq!(*stalls, nine, "{point:?}: {classes:?}");
        assert!(
            !classes.is_empty() && classes.iter().all(|c| c == "nagle-delayed-ack"),
            "{point:?}: {classes:?}"
        );
    }
    // The text names each point, and says why there are two connections.
    let out = run(&[
        "analyze",
        &client.display().to_string(),
        &server.display().to_string(),
    ]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("2 capture points"), "{stdout}");
    assert!(stdout.contains("seen at:    "), "{stdout}");
    assert!(!stdout.contains("retransmission"), "{stdout}");
    // The time lost is given at each point, never added up over the two.
    assert!(
        stdout.contains("at each capture point (not added up):"),
        "{stdout}"
    );
    let per_point = report["summary"]["by_capture_point"].as_array().unwrap();
    assert_eq!(per_point.len(), 2, "{}", report["summary"]);
    let span = report["input"]["duration"].as_f64().unwrap();
    for point in per_point {
        assert_eq!(point["stalls"], nine, "{point}");
        let lost = point["time_lost"].as_f64().unwrap();
        assert!(
            lost > 0.0 && lost <= span,
            "{lost} s lost in {span} s: {point}"
        );
        let line = format!(
            "  {}: 1 connection, 1 with stalls: {nine} stalls, {lost:.3} s lost",
            point["capture_point"].as_str().unwrap()
        );
        assert!(stdout.contains(&line), "no line {line:?}:\n{stdout}");
    }
}

#[test]
fn one_file_given_twice_is_read_once() {
    let dir = TempDir::new("many-files", "twice");
    let client = dir.0.join("c.pcap");
    simulated_at("client", &client);
    let once = parse_report(&analyze_paths(std::slice::from_ref(&client), &[]), "once");
    let twice = parse_report(
        &analyze_paths(&[client.clone(), client.clone()], &[]),
        "twice",
    );
    assert_eq!(stalls_by_connection(&twice), stalls_by_connection(&once));
    assert_eq!(
        twice["input"]["file_duplicates"].as_u64(),
        once["input"]["packets"].as_u64()
    );
    assert!(twice["input"].get("capture_points").is_none());
    assert_eq!(
        twice["summary"]["gaps_by_class"],
        once["summary"]["gaps_by_class"]
    );
}

/// The shipped records `years` later, and with `first_octet` as the first octet of
/// both IPv4 addresses (127) when given: other hosts. The analyzer reads no checksum.
fn moved(years: u32, first_octet: Option<u8>) -> Vec<Record> {
    const IP_AT: usize = 14;
    original_records()
        .iter()
        .cloned()
        .map(|mut r| {
            r.sec += years * 365 * 86_400;
            if let Some(octet) = first_octet {
                assert_eq!(ether_type(&r.frame), 0x0800, "an IPv4 frame");
                r.frame[IP_AT + 12] = octet;
                r.frame[IP_AT + 16] = octet;
            }
            r
        })
        .collect()
}

#[test]
fn a_directory_reads_its_captures_by_their_first_bytes_and_skips_the_rest() {
    let dir = TempDir::new("many-files", "by-magic");
    // A ring named as no capture is, and two files that are not captures at all.
    for (i, bytes) in pcap_files(&ring(3)).iter().enumerate() {
        dir.write(&format!("part-{i}.bin"), bytes);
    }
    dir.write("notes.txt", b"captured on eth0\n");
    dir.write("run.pcap", b"#!/bin/sh\ntcpdump -w run.pcap\n");
    let out = analyze_paths(std::slice::from_ref(&dir.0), &[]);
    let report = parse_report(&out, "by magic");
    assert_eq!(
        report["connections"][0]["stalls"].as_array().map(Vec::len),
        Some(STALLS)
    );
    assert_eq!(report["input"]["files"].as_array().map(Vec::len), Some(3));
    let stderr = text(&out.stderr);
    let skipped: Vec<&str> = stderr.lines().filter(|l| l.contains("not read")).collect();
    assert_eq!(
        skipped.len(),
        1,
        "one warning for the skipped files:\n{stderr}"
    );
    assert!(skipped[0].contains("2 files"), "{}", skipped[0]);
    assert!(!stderr.contains("not a capture"), "{stderr}");
}

#[test]
fn a_directory_of_no_capture_at_all_is_refused() {
    let dir = TempDir::new("many-files", "no-capture");
    dir.write("a.pcap", b"not one\n");
    dir.write("b.txt", b"nor this\n");
    let out = analyze_paths(std::slice::from_ref(&dir.0), &[]);
    check_refused(&out, "no capture", &["none of whose 2 files"]);
}

#[test]
fn captures_of_other_hosts_years_apart_are_refused_unless_joined() {
    let dir = TempDir::new("many-files", "not-one-trace");
    let files = [
        pcap(LINK_ETHERNET, original_records()),
        pcap(LINK_ETHERNET, &moved(3, Some(198))),
    ];
    let paths = write_all(&dir, &["old.pcap", "new.pcap"], &files);
    for given in [paths.clone(), vec![dir.0.clone()]] {
        let out = analyze_paths(&given, &[]);
        check_refused(
            &out,
            "not one trace",
            &["old.pcap and", "new.pcap", "3.0 years apart", "--join"],
        );
    }
    let out = analyze_paths(std::slice::from_ref(&dir.0), &["--join"]);
    let report = parse_report(&out, "joined");
    let connections = report["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 2, "{}", report["summary"]);
    for connection in connections {
        assert_eq!(connection["stalls"].as_array().unwrap().len(), STALLS);
    }
}

#[test]
fn captures_of_the_same_hosts_years_apart_are_one_trace() {
    // The same two hosts captured again later (another file of one ring, or the same
    // service a long time after): joined without being asked.
    // (The shipped capture is on loopback, which every machine has: no host in common.)
    let dir = TempDir::new("many-files", "same-hosts");
    let files = [
        pcap(LINK_ETHERNET, &moved(0, Some(10))),
        pcap(LINK_ETHERNET, &moved(3, Some(10))),
    ];
    let paths = write_all(&dir, &["old.pcap", "new.pcap"], &files);
    let report = parse_report(&analyze_paths(&paths, &[]), "same hosts");
    assert_eq!(report["connections"].as_array().map(Vec::len), Some(2));
}
