//! Outputs never replace inputs: every output option of `analyze`, `simulate` and `lab`
//! refuses, before any work, a path that is one of the run's inputs, a path given to two
//! outputs, and an existing capture; the file named is left byte for byte as it was, and
//! one `tcpstall: error:` line says why. An older output that is not a capture may still
//! be replaced.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{BIN, TempDir, check_refused, run, shipped, text};

/// A directory holding copies of the three seed 002 captures, as `cp captures/seed002-*
/// ring/` makes it; returns the copies in the order a shell glob lists them.
fn ring(dir: &TempDir) -> Vec<PathBuf> {
    let ring = dir.0.join("ring");
    fs::create_dir_all(&ring).unwrap();
    let mut files = Vec::new();
    for name in [
        "seed002-nodelay.pcap",
        "seed002-one-write.pcap",
        "seed002-two-writes.pcap",
    ] {
        let copy = ring.join(name);
        fs::copy(shipped(name), &copy).unwrap();
        files.push(copy);
    }
    files
}

/// Runs `args`, checks the refusal and that each of `kept` has the bytes it had before.
fn refused(what: &str, args: &[&dyn AsRef<std::ffi::OsStr>], kept: &[&Path], needles: &[&str]) {
    let before: Vec<Vec<u8>> = kept.iter().map(|p| fs::read(p).unwrap()).collect();
    let out = run(args);
    check_refused(&out, what, needles);
    for (path, bytes) in kept.iter().zip(&before) {
        assert_eq!(
            &fs::read(path).unwrap(),
            bytes,
            "{what}: {} changed",
            path.display()
        );
    }
}

const SCENARIO: &str = "[workload]\npattern = \"two-writes\"\n";

#[test]
fn analyze_html_never_replaces_a_capture() {
    let dir = TempDir::new("output_paths", "analyze_html");
    let files = ring(&dir);
    // tcpstall analyze --html ring/*.pcap: the first capture is the page's path.
    refused(
        "--html ring/*.pcap",
        &[&"analyze", &"--html", &files[0], &files[1], &files[2]],
        &[&files[0]],
        &["--html", "seed002-nodelay.pcap", "existing pcap capture"],
    );
    refused(
        "--html X X",
        &[&"analyze", &"--html", &files[0], &files[0]],
        &[&files[0]],
        &["--html", "the capture being analysed"],
    );
    // The same file by another name (a hard link) is the same input.
    let link = dir.0.join("link.pcap");
    fs::hard_link(&files[1], &link).unwrap();
    refused(
        "--html a hard link of the input",
        &[&"analyze", &"--html", &link, &files[1]],
        &[&files[1]],
        &["--html", "the capture being analysed"],
    );
    // A gzip-compressed capture is a capture too.
    let gz = dir.write(
        "old.pcap.gz",
        &common::compress::gzip_stored(&fs::read(&files[2]).unwrap()),
    );
    refused(
        "--html an existing gzip capture",
        &[&"analyze", &"--html", &gz, &files[2]],
        &[&gz],
        &["--html", "gzip"],
    );
}

#[test]
fn analyze_html_may_replace_an_older_report() {
    let dir = TempDir::new("output_paths", "older_report");
    let files = ring(&dir);
    let html = dir.write("report.html", b"<!doctype html><p>an older report");
    let out = run(&[Path::new("analyze"), Path::new("--html"), &html, &files[2]]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = fs::read_to_string(&html).unwrap();
    assert!(!page.contains("an older report"));
    assert!(page.contains("<svg") || page.contains("<html"), "no page");
}

#[test]
fn analyze_html_from_standard_input_is_not_that_file() {
    let dir = TempDir::new("output_paths", "stdin");
    let files = ring(&dir);
    let before = fs::read(&files[2]).unwrap();
    let out = Command::new(BIN)
        .arg("analyze")
        .arg("--html")
        .arg(&files[2])
        .arg("-")
        .stdin(fs::File::open(&files[2]).unwrap())
        .output()
        .expect("run tcpstall");
    check_refused(&out, "--html X - < X", &["the capture being analysed"]);
    assert_eq!(fs::read(&files[2]).unwrap(), before);
}

#[test]
fn analyze_graphs_refuses_the_input_directory_and_another_outputs_path() {
    let dir = TempDir::new("output_paths", "graphs");
    let files = ring(&dir);
    let ring_dir = files[0].parent().unwrap().to_path_buf();
    refused(
        "--graphs ring ring",
        &[&"analyze", &"--graphs", &ring_dir, &ring_dir],
        &[&files[0], &files[1], &files[2]],
        &[
            "--graphs",
            "the capture being analysed",
            "another directory",
        ],
    );
    let both = dir.0.join("out");
    refused(
        "--html out --graphs out",
        &[&"analyze", &"--html", &both, &"--graphs", &both, &files[2]],
        &[&files[2]],
        &["--graphs", "also given to --html"],
    );
    assert!(!both.exists(), "a refused run leaves no file");
}

#[test]
fn analyze_annotate_refuses_the_input_an_existing_capture_and_a_shared_path() {
    let dir = TempDir::new("output_paths", "annotate");
    let files = ring(&dir);
    refused(
        "--annotate X X",
        &[&"analyze", &"--annotate", &files[2], &files[2]],
        &[&files[2]],
        &["--annotate", "the capture being analysed"],
    );
    refused(
        "--annotate over another capture",
        &[&"analyze", &"--annotate", &files[0], &files[2]],
        &[&files[0], &files[2]],
        &["--annotate", "existing pcap capture"],
    );
    let out = dir.0.join("marked.pcapng");
    refused(
        "--annotate and --html on one path",
        &[&"analyze", &"--html", &out, &"--annotate", &out, &files[2]],
        &[&files[2]],
        &["--annotate", "also given to --html"],
    );
    assert!(!out.exists(), "a refused run leaves no file");
}

#[test]
fn simulate_pcap_refuses_an_existing_capture_and_a_shared_path() {
    let dir = TempDir::new("output_paths", "simulate_pcap");
    let files = ring(&dir);
    refused(
        "simulate --pcap over a capture",
        &[&"simulate", &"--pcap", &files[0]],
        &[&files[0]],
        &["--pcap", "existing pcap capture"],
    );
    let same = dir.0.join("same.out");
    refused(
        "simulate --pcap X --truth X",
        &[&"simulate", &"--pcap", &same, &"--truth", &same],
        &[],
        &["--truth", "also given to --pcap"],
    );
    assert!(!same.exists(), "a refused run leaves no file");
    let scenario = dir.write("scenario.toml", SCENARIO.as_bytes());
    refused(
        "simulate S --pcap S",
        &[&"simulate", &scenario, &"--pcap", &scenario],
        &[&scenario],
        &["--pcap", "the scenario file"],
    );
}

#[test]
fn simulate_truth_refuses_the_inputs_and_an_existing_capture() {
    let dir = TempDir::new("output_paths", "simulate_truth");
    let files = ring(&dir);
    refused(
        "simulate --from-capture C --truth C",
        &[
            &"simulate",
            &"--from-capture",
            &files[2],
            &"--truth",
            &files[2],
        ],
        &[&files[2]],
        &["--truth", "the capture of --from-capture"],
    );
    let scenario = dir.write("scenario.toml", SCENARIO.as_bytes());
    refused(
        "simulate S --truth S",
        &[&"simulate", &scenario, &"--truth", &scenario],
        &[&scenario],
        &["--truth", "the scenario file"],
    );
    refused(
        "simulate --truth over a capture",
        &[&"simulate", &"--truth", &files[1]],
        &[&files[1]],
        &["--truth", "existing pcap capture"],
    );
    // An older ground truth is replaced.
    let truth = dir.write("truth.json", b"{\"an_older_truth\": true}");
    let out = run(&[Path::new("simulate"), Path::new("--truth"), &truth]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !fs::read_to_string(&truth)
            .unwrap()
            .contains("an_older_truth")
    );
}

#[test]
fn simulate_html_refuses_the_inputs_and_an_existing_capture() {
    let dir = TempDir::new("output_paths", "simulate_html");
    let files = ring(&dir);
    refused(
        "simulate --html over a capture",
        &[&"simulate", &"--html", &files[0]],
        &[&files[0]],
        &["--html", "existing pcap capture"],
    );
    refused(
        "simulate --from-capture C --html C",
        &[
            &"simulate",
            &"--from-capture",
            &files[2],
            &"--html",
            &files[2],
        ],
        &[&files[2]],
        &["--html", "the capture of --from-capture"],
    );
    let page = dir.0.join("page.html");
    refused(
        "simulate --html X --pcap X",
        &[&"simulate", &"--html", &page, &"--pcap", &page],
        &[],
        &["--pcap", "also given to --html"],
    );
}

#[test]
fn lab_capture_refuses_an_existing_capture_the_scenario_and_a_shared_path() {
    let dir = TempDir::new("output_paths", "lab_capture");
    let files = ring(&dir);
    refused(
        "lab --capture over a capture",
        &[&"lab", &"--capture", &files[0]],
        &[&files[0]],
        &["--capture", "existing pcap capture"],
    );
    let scenario = dir.write("scenario.toml", SCENARIO.as_bytes());
    refused(
        "lab S --capture S",
        &[&"lab", &scenario, &"--capture", &scenario],
        &[&scenario],
        &["--capture", "the scenario file"],
    );
    let same = dir.0.join("lab.out");
    refused(
        "lab --capture X --html X",
        &[&"lab", &"--capture", &same, &"--html", &same],
        &[],
        &["--html", "also given to --capture"],
    );
    assert!(!same.exists(), "a refused run leaves no file");
}

#[test]
fn lab_html_refuses_the_scenario_and_an_existing_capture() {
    let dir = TempDir::new("output_paths", "lab_html");
    let files = ring(&dir);
    refused(
        "lab --html over a capture",
        &[&"lab", &"--html", &files[1]],
        &[&files[1]],
        &["--html", "existing pcap capture"],
    );
    let scenario = dir.write("scenario.toml", SCENARIO.as_bytes());
    refused(
        "lab S --html S",
        &[&"lab", &scenario, &"--html", &scenario],
        &[&scenario],
        &["--html", "the scenario file"],
    );
}
