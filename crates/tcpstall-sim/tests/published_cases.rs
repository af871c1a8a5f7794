//! Every published case of the seeds, reproduced by the simulator, and the detector held
//! to the simulator's ground truth.

use tcpstall_core::analyze::AnalyzeOptions;
use tcpstall_sim::accuracy::{Accuracy, cells, evaluate, run_cell};
use tcpstall_sim::report::request_response_bytes;
use tcpstall_sim::scenario::ScenarioFile;
use tcpstall_sim::summary::{Summary, summarize};
use tcpstall_sim::sweep::{SweepSpec, compare_fixes, sweep};

mod common;
use common::scenario;

fn simulate(file: &ScenarioFile) -> (Summary, tcpstall_sim::RunResult) {
    let scenario = file.resolve().expect("valid scenario");
    let result = tcpstall_sim::run(&scenario, true);
    let (req, resp) = request_response_bytes(&scenario);
    (summarize(&result, req, resp), result)
}

fn ms(seconds: f64) -> f64 {
    seconds * 1e3
}

/// Seed 000: 100,000 bytes at MSS 1448 are 69 full segments and 88 bytes; the odd
/// segment's ACK waits for the 200 ms timer and classic Nagle holds the tail.
#[test]
fn seed000_block_of_100000_bytes_takes_about_201_ms_with_classic_nagle() {
    let (s, _) = simulate(&scenario("macos-legacy", "macos-legacy", "bulk"));
    assert_eq!(s.client_mss, 1448);
    assert!(
        (190.0..=210.0).contains(&ms(s.latency_p50)),
        "p50 {} ms",
        ms(s.latency_p50)
    );
    assert_eq!(s.nagle_delayed_ack_stalls, 20);
}

#[test]
fn seed000_99912_bytes_do_not_stall_and_99913_do() {
    let mut file = scenario("macos-legacy", "macos-legacy", "bulk");
    file.workload.request = vec![99_912];
    let (s, _) = simulate(&file);
    assert!(
        ms(s.latency_p50) < 2.0,
        "99,912 bytes: p50 {} ms",
        ms(s.latency_p50)
    );
    assert_eq!(s.stalled_transactions, 0);
    file.workload.request = vec![99_913];
    let (s, _) = simulate(&file);
    assert!(
        ms(s.latency_p50) > 150.0,
        "99,913 bytes: p50 {} ms",
        ms(s.latency_p50)
    );
}

#[test]
fn seed000_windows_mss_1460_escapes_by_parity_and_minshall_removes_the_case() {
    let (s, _) = simulate(&scenario("windows", "windows", "bulk"));
    assert_eq!(s.client_mss, 1460);
    assert_eq!(s.stalled_transactions, 0);
    assert!(ms(s.latency_p50) < 2.0);
    let (s, _) = simulate(&scenario("macos", "macos", "bulk"));
    assert_eq!(s.stalled_transactions, 0);
    assert!(ms(s.latency_p50) < 2.0);
}

/// The sawtooth: across 99,000..101,000 bytes a block stalls exactly when it is an odd
/// number of full segments plus a partial tail.
#[test]
fn seed000_sweep_shows_the_parity_sawtooth() {
    let mut file = scenario("macos-legacy", "macos-legacy", "bulk");
    file.workload.transactions = 4;
    let spec = SweepSpec::parse("block=99000..101000").unwrap();
    let points = sweep(&file, &spec).unwrap();
    assert_eq!(points.len(), 2001);
    for p in &points {
        let bytes = p.value as u32;
        let expected = (bytes / 1448) % 2 == 1 && !bytes.is_multiple_of(1448);
        let stalled = p.summary.stalled_transactions > 0;
        assert_eq!(stalled, expected, "{bytes} bytes: stalled {stalled}");
    }
}

/// Seed 002: "hello " + "world\n", then a read, Linux at both ends: the first round trip
/// is fast (quick-ack mode), the next ones take about 40 ms.
#[test]
fn seed002_two_writes_then_read_on_linux() {
    let (s, result) = simulate(&scenario("linux", "linux", "two-writes"));
    let latencies: Vec<f64> = result.transactions.iter().map(|t| ms(t.latency)).collect();
    assert!(latencies[0] < 1.0, "first round trip {} ms", latencies[0]);
    for l in &latencies[1..] {
        assert!((38.0..=46.0).contains(l), "round trip {l} ms");
    }
    assert_eq!(s.nagle_delayed_ack_stalls, 9);
    assert!(
        result
            .stalls
            .iter()
            .all(|t| t.holder == "client" && t.delayer == "server")
    );
}

#[test]
fn seed002_fixes_are_well_under_a_millisecond() {
    let mut variants = Vec::new();
    variants.push(scenario("linux", "linux", "one-write"));
    variants.push(scenario("linux", "linux", "writev"));
    let mut nodelay = scenario("linux", "linux", "two-writes");
    nodelay.client.options.nodelay = true;
    variants.push(nodelay);
    let mut quickack = scenario("linux", "linux", "two-writes");
    quickack.server.options.quickack = true;
    variants.push(quickack);
    for file in variants {
        let (s, _) = simulate(&file);
        assert!(
            ms(s.latency_max) < 1.0,
            "{file:?}: max {} ms",
            ms(s.latency_max)
        );
        assert_eq!(s.stalled_transactions, 0);
    }
}

/// Seed 001: a Windows sender writes 96 then 656 bytes to AIX; 0.2 s gaps; Nagle off on
/// Windows is far faster.
#[test]
fn seed001_windows_to_aix_sftp_has_200ms_gaps_and_nodelay_speeds_it_up() {
    let (s, result) = simulate(&scenario("windows", "aix", "sftp"));
    assert_eq!(s.client_mss, 1460);
    assert!(
        (150.0..=210.0).contains(&ms(s.latency_p50)),
        "p50 {} ms",
        ms(s.latency_p50)
    );
    assert!(
        result
            .stalls
            .iter()
            .all(|t| t.holder == "client" && t.bytes == 656)
    );
    let variants = compare_fixes(&scenario("windows", "aix", "sftp")).unwrap();
    let nodelay = variants
        .iter()
        .find(|v| v.name.starts_with("TCP_NODELAY"))
        .unwrap();
    assert!(nodelay.speedup > 20.0, "Nagle off: {}x", nodelay.speedup);
    assert_eq!(nodelay.summary.stalled_transactions, 0);
}

/// Seeds 003 and 004 on Linux: about 40 ms per request, a fraction of the fixed
/// variant's throughput.
#[test]
fn seed003_proxy_split_and_seed004_http_keepalive_on_linux() {
    for (pattern, holder) in [("proxy-split", "client"), ("http-keepalive", "server")] {
        let file = scenario("linux", "linux", pattern);
        let (s, result) = simulate(&file);
        assert!(
            (38.0..=46.0).contains(&ms(s.latency_p50)),
            "{pattern}: p50 {} ms",
            ms(s.latency_p50)
        );
        assert!(
            result.stalls.iter().all(|t| t.holder == holder),
            "{pattern}"
        );
        let variants = compare_fixes(&file).unwrap();
        let one_write = variants
            .iter()
            .find(|v| v.name == "one write per message")
            .unwrap();
        assert!(
            one_write.speedup > 10.0,
            "{pattern}: fixed variant only {}x",
            one_write.speedup
        );
    }
}

#[test]
fn cork_and_msg_more_flush_at_the_end_of_the_message() {
    for cork in [true, false] {
        let mut file = scenario("linux", "linux", "two-writes");
        file.client.options.cork = cork;
        file.client.options.msg_more = !cork;
        let (s, _) = simulate(&file);
        assert!(
            ms(s.latency_max) < 1.0,
            "cork {cork}: max {} ms",
            ms(s.latency_max)
        );
    }
}

#[test]
fn runs_are_deterministic_for_a_seed() {
    let mut file = scenario("linux", "aix", "sftp");
    file.link.jitter_ms = 2.0;
    file.link.loss = 0.05;
    file.link.rtt_ms = 10.0;
    let (a, ra) = simulate(&file);
    let (b, rb) = simulate(&file);
    assert_eq!(a.latency_mean, b.latency_mean);
    assert_eq!(ra.captured.len(), rb.captured.len());
    file.link.seed = 2;
    let (c, _) = simulate(&file);
    assert_ne!(a.latency_mean, c.latency_mean);
}

#[test]
fn lossy_links_still_complete_through_retransmissions() {
    let mut file = scenario("linux", "linux", "bulk");
    file.link.loss = 0.02;
    file.link.rtt_ms = 5.0;
    let (s, result) = simulate(&file);
    assert!(s.completed, "{s:?}");
    assert!(result.captured.iter().any(|c| c.segment.retransmission));
}

/// The detector on the simulator's own captures: every ground-truth stall found with
/// the right class and holder, and nothing else, over every stack pair, pattern, round
/// trip (0.05, 1, 20, 100 ms) and capture point (client, server, tap).
#[test]
fn detection_accuracy_over_the_matrix() {
    let options = AnalyzeOptions::default();
    let cells: Vec<_> = cells(6)
        .iter()
        .filter(|spec| spec.family == "request-response")
        .filter_map(|spec| run_cell(spec, &options))
        .collect();
    let mut total = Accuracy::default();
    for cell in &cells {
        total.add(&cell.accuracy);
    }
    println!(
        "{} runs, {} stalls: precision {:.4}, recall {:.4}",
        cells.len(),
        total.true_positives + total.false_negatives,
        total.precision(),
        total.recall()
    );
    assert!(total.true_positives > 5000);
    assert_eq!(total.precision(), 1.0, "{:#?}", total.misses);
    assert_eq!(total.recall(), 1.0, "{:#?}", total.misses);
}

#[test]
fn a_single_check_names_every_miss() {
    let file = scenario("linux", "linux", "two-writes");
    let scenario = file.resolve().unwrap();
    let result = tcpstall_sim::run(&scenario, true);
    let check = evaluate(&result, 1, &AnalyzeOptions::default());
    assert_eq!(
        (
            check.true_positives,
            check.false_positives,
            check.false_negatives
        ),
        (9, 0, 0)
    );
}

/// The scenario files shipped in `scenarios/` parse and run: the seeds stall as their
/// comments say; the look-alikes complete and their truth names every gap; the peer's
/// tests (`inet-*`) hold and release data as the peer's trace does.
#[test]
fn shipped_scenario_files_reproduce_their_seeds_and_look_alikes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let (mut seeds, mut lookalikes, mut peers) = (0, 0, 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let file =
            ScenarioFile::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (s, result) = simulate(&file);
        assert!(s.completed, "{}", path.display());
        if name.starts_with("lookalike-") {
            assert!(!result.gaps.is_empty(), "{name}: no gap");
            lookalikes += 1;
            continue;
        }
        if [
            "seed004-ab-keepalive-headers-only.toml",
            "seed000-wifi-rig-windows.toml",
        ]
        .contains(&name.as_str())
        {
            // The variants their seeds report free of the stall.
            assert_eq!(s.stalled_transactions, 0, "{name}");
            seeds += 1;
            continue;
        }
        if name.starts_with("inet-") {
            assert!(!result.holds.is_empty(), "{name}: nothing held");
            peers += 1;
            continue;
        }
        assert!(
            // Each connection's first transaction may be fast (quick-ack mode).
            s.stalled_transactions + file.workload.connections as usize >= s.transactions,
            "{}: {} of {} stalled",
            path.display(),
            s.stalled_transactions,
            s.transactions
        );
        seeds += 1;
    }
    assert_eq!((seeds, lookalikes, peers), (12, 6, 1));
}

#[test]
fn scenario_files_with_unknown_keys_or_values_are_refused() {
    for (text, needle) in [
        (
            "[client]\nstack = \"linux\"\nnodelayy = true\n",
            "unknown field",
        ),
        ("[workload]\npattern = \"two-writes\"\ndepth = 0\n", "depth"),
        ("[link]\nloss = 1.5\n", "loss"),
        ("[client]\ndelack_ms = 900\n", "500"),
        ("capture = \"tap:1.5\"\n", "capture point"),
        ("[workload]\npattern = \"custom\"\n", "custom"),
    ] {
        let err = ScenarioFile::from_toml(text)
            .and_then(|f| f.resolve())
            .expect_err(text)
            .to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

/// Linux autocorking: a block written as two back-to-back writes leaves as one stream
/// (69 full segments and an 88-byte tail: Minshall's variant sends the tail at once);
/// written 5 ms apart, the first write's tail leaves alone and the second waits for its
/// delayed ACK.
#[test]
fn linux_autocork_joins_back_to_back_writes_of_a_block() {
    let mut file = scenario("linux", "linux", "custom");
    file.workload.request = vec![99_900, 100];
    file.workload.response = vec![1];
    file.workload.transactions = 6;
    file.link.rtt_ms = 1.0;
    let (s, _) = simulate(&file);
    assert_eq!(s.stalled_transactions, 0, "back to back: {s:?}");
    file.workload.write_gap_ms = 5.0;
    let (s, result) = simulate(&file);
    assert!(s.stalled_transactions >= 5, "5 ms apart: {s:?}");
    assert!(result.stalls.iter().all(|t| t.bytes == 100));
}
