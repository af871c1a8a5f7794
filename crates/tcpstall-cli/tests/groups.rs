//! Many connections stalling the same way (one server port, the same holder, the same
//! fix): the text and the HTML lead with that group, not with one connection.

use std::path::PathBuf;

mod common;
use common::pcap::*;
use common::{TempDir, run, text};

/// The shipped seed 002 capture (one connection to port 8000 that stalls), its
/// connection repeated from `copies` client ports, all in one file.
fn copies_of_seed002(dir: &TempDir, copies: u16) -> PathBuf {
    let mut records: Vec<Record> = Vec::new();
    for copy in 0..copies {
        for r in original_records() {
            let mut r = r.clone();
            let at = r.tcp_at() + if r.sent_by_client() { 0 } else { 2 };
            let port = u16::from_be_bytes([r.frame[at], r.frame[at + 1]]) + 1 + copy;
            r.frame[at..at + 2].copy_from_slice(&port.to_be_bytes());
            records.push(r);
        }
    }
    records.sort_by_key(|r| (r.sec, r.usec));
    dir.write(
        &format!("copies-{copies}.pcap"),
        &pcap(LINK_ETHERNET, &records),
    )
}

#[test]
fn many_connections_stalling_alike_lead_the_report() {
    let dir = TempDir::new("groups", "alike");
    let path = copies_of_seed002(&dir, 6);
    let html = dir.0.join("report.html");
    let out = run(&[
        "analyze",
        "--html",
        &html.display().to_string(),
        &path.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lead = stdout
        .lines()
        .position(|l| {
            l.starts_with("6 connections to port 8000 stall the same way, held by the client")
        })
        .unwrap_or_else(|| panic!("no group line:\n{stdout}"));
    let table = stdout
        .lines()
        .position(|l| l.starts_with("worst"))
        .expect("the table of the worst connections");
    assert!(lead < table, "the group comes after the table:\n{stdout}");
    assert!(
        stdout.lines().nth(lead).is_some_and(
            |l| l.contains("first fix of each, on the client: write each request in one call")
        ),
        "{stdout}"
    );
    let page = std::fs::read_to_string(&html).expect("the HTML report");
    let group = page.find(r#"<p class="group"><b>6 connections to port 8000"#);
    let first = page.find(r#"id="conn-1""#);
    assert!(
        group.is_some() && (first.is_none() || group < first),
        "the page does not lead with the group"
    );
}

#[test]
fn a_few_connections_alike_are_not_a_group() {
    let dir = TempDir::new("groups", "few");
    let path = copies_of_seed002(&dir, 3);
    let out = run(&["analyze", &path.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("3 connections, 3 with stalls"), "{stdout}");
    assert!(!stdout.contains("stall the same way"), "{stdout}");
}

/// More connections than the analysis lists (20,000): the text, the JSON and the HTML
/// report all give both numbers, and the HTML's totals are those of every connection.
#[test]
fn every_output_says_how_many_of_how_many_connections_it_lists() {
    const CONNECTIONS: u32 = 20_005;
    let dir = TempDir::new("groups", "unlisted");
    // The seed 002 client's SYN, from as many client addresses: one connection each.
    let syn = original_records()
        .iter()
        .find(|r| r.flags() & 0x02 != 0 && r.sent_by_client())
        .unwrap();
    let records: Vec<Record> = (0..CONNECTIONS)
        .map(|n| {
            let mut r = syn.clone();
            let ip = r.tcp_at() - 20;
            r.frame[ip + 12..ip + 16].copy_from_slice(&(0x0a00_0000 | n).to_be_bytes());
            // The IPv4 checksum is not checked; the port stays.
            r.set_micros(r.micros() + u64::from(n));
            r
        })
        .collect();
    let path = dir.write("many.pcap", &pcap(LINK_ETHERNET, &records));
    let html = dir.0.join("report.html");
    let out = run(&[
        "analyze",
        "--all",
        "--html",
        &html.display().to_string(),
        &path.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(
        report.contains("5 less severe connections not listed"),
        "{report:.600}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<b>20005 connections"), "the header's count");
    assert!(
        page.contains("the 20000 worst of 20005 listed"),
        "the table's heading"
    );
    let json = run(&["analyze", "--json", &path.display().to_string()]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        v["summary"]["connections_not_listed"], 5,
        "{}",
        v["summary"]
    );
}
