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
