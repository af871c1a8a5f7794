//! The figures the seeds' authors measured, from the scenario files of their real
//! settings (`scenarios/seed00*-*.toml`): each simulated figure within 15% of the
//! seed's, or, where the simulator cannot reproduce it, the difference stated.
//!
//! These are simulated figures: deterministic for a scenario, not timed on this machine.

use tcpstall_sim::report::request_response_bytes;
use tcpstall_sim::scenario::ScenarioFile;
use tcpstall_sim::summary::{Summary, summarize};
use tcpstall_sim::sweep::{SizeRow, SweepSpec, Variant, compare_fixes, compare_sizes, sweep};

mod common;
use common::scenario_file;

fn simulate(file: &ScenarioFile) -> Summary {
    let scenario = file.resolve().expect("valid scenario");
    let result = tcpstall_sim::run(&scenario, false);
    let (req, resp) = request_response_bytes(&scenario);
    summarize(&result, req, resp)
}

/// `simulated` is within `share` of `published`.
fn assert_near(what: &str, simulated: f64, published: f64, share: f64) {
    let off = simulated / published - 1.0;
    assert!(
        off.abs() <= share,
        "{what}: simulated {simulated:.3}, published {published}, {:+.1}%",
        off * 100.0
    );
}

fn variant<'a>(variants: &'a [Variant], name: &str) -> &'a Variant {
    variants
        .iter()
        .find(|v| v.name.starts_with(name))
        .unwrap_or_else(|| panic!("no variant {name}"))
}

/// Seed 000: 5.2 Mb/s at 99,912 bytes, 2.7 Mb/s at 99,913 and at 100,000.
#[test]
fn seed000_wifi_rig_gives_5_2_and_2_7_mbits_by_parity() {
    let file = scenario_file("seed000-wifi-rig.toml");
    let spec = SweepSpec::parse("block=99912,99913,100000").unwrap();
    let points = sweep(&file, &spec).unwrap();
    let mbits = |i: usize| points[i].summary.throughput_bps / 1e6;
    assert_near("99,912-byte blocks, Mb/s", mbits(0), 5.2, 0.15);
    assert_near("99,913-byte blocks, Mb/s", mbits(1), 2.7, 0.15);
    assert_near("100,000-byte blocks, Mb/s", mbits(2), 2.7, 0.15);
    assert_eq!(points[0].summary.stalled_transactions, 0);
    assert_eq!(points[1].summary.stalled_transactions, 20);
}

/// Seed 000's Windows figure, 3.5 Mb/s, is not reproduced: on the same link Windows
/// (MSS 1460: 68 full segments and 720 bytes) does not stall and runs at the link's
/// 5.2 Mb/s. The article gives no stall for Windows; its 3.5 Mb/s is its own WiFi stack's
/// speed, which the scenario's link, fitted to the Mac's blocks, does not model.
#[test]
fn seed000_windows_escapes_by_parity_but_its_3_5_mbits_is_not_reproduced() {
    let rig = scenario_file("seed000-wifi-rig.toml");
    let file = scenario_file("seed000-wifi-rig-windows.toml");
    assert_eq!(
        (file.link.bandwidth_bps, file.link.rtt_ms),
        (rig.link.bandwidth_bps, rig.link.rtt_ms),
        "the same link as the Mac's"
    );
    let s = simulate(&file);
    assert_eq!(s.client_mss, 1460);
    assert_eq!(s.stalled_transactions, 0);
    let mbits = s.throughput_bps / 1e6;
    // The stated difference: about 5.2 Mb/s simulated where the article measured 3.5.
    assert_near("Windows, Mb/s (the link's own rate)", mbits, 5.2, 0.05);
    assert!(mbits / 3.5 > 1.4, "Windows: {mbits:.2} Mb/s");
}

/// Seed 000's rhythm: data for the block, then nothing until the delayed ACK. The
/// article's worst case sends 200 ms and pauses 200 ms; here a block takes 154 ms and
/// the pause lasts until the ACK's second tick, 300 ms after the block began.
#[test]
fn seed000_wifi_rig_rhythm_sends_then_waits_for_the_tick() {
    let file = scenario_file("seed000-wifi-rig.toml");
    let s = simulate(&file);
    assert_near("a stalled block, ms", s.latency_p50 * 1e3, 300.0, 0.02);
    let mut clean = file.clone();
    clean.workload.request = vec![99_912];
    let sending = simulate(&clean).latency_p50 * 1e3;
    assert!((140.0..170.0).contains(&sending), "sending {sending} ms");
}

/// Seed 001: 1 MB/s as given, 20x with Nagle off on Windows, 0.2 s pauses.
#[test]
fn seed001_sftp_backup_runs_at_1_mbyte_and_20x_faster_without_nagle() {
    let file = scenario_file("seed001-sftp-backup.toml");
    let variants = compare_fixes(&file).unwrap();
    let given = variant(&variants, "as given");
    assert_near(
        "as given, MB/s",
        given.summary.throughput_bps / 8e6,
        1.0,
        0.15,
    );
    assert_near("as given, p50 s", given.summary.latency_p50, 0.2, 0.05);
    assert_eq!(given.summary.stalled_transactions, 300);
    let nodelay = variant(&variants, "TCP_NODELAY");
    assert_near("TCP_NODELAY speed-up", nodelay.speedup, 20.0, 0.15);
    assert_eq!(nodelay.summary.stalled_transactions, 0);
}

/// Seed 001: the 0.2 s pause sits between Windows' 96-byte and 656-byte messages.
#[test]
fn seed001_pause_holds_the_656_byte_message_behind_the_96() {
    let file = scenario_file("seed001-sftp-backup.toml");
    let scenario = file.resolve().unwrap();
    let result = tcpstall_sim::run(&scenario, false);
    let held: Vec<_> = result
        .stalls
        .iter()
        .filter(|s| s.holder == "client")
        .collect();
    assert_eq!(held.len(), 300);
    assert!(held.iter().all(|s| s.bytes == 656), "{:?}", held[0]);
    let mut delays: Vec<f64> = held.iter().map(|s| s.ack_delay).collect();
    delays.sort_by(f64::total_cmp);
    let median = delays[delays.len() / 2];
    assert!(
        (0.15..=0.2).contains(&median),
        "ACK delay median {median} s"
    );
}

fn rows_of<'a>(rows: &'a [SizeRow], kind: &str) -> Vec<&'a SizeRow> {
    rows.iter().filter(|r| r.kind == kind).collect()
}

/// Seed 003: SETs over 2 KB at a tenth of going direct; SETs under 2 KB and every GET
/// barely affected.
#[test]
fn seed003_proxy_load_writes_over_2k_fall_to_a_tenth() {
    let file = scenario_file("seed003-proxy-load.toml");
    assert!(file.workload.connections > 1);
    let rows = compare_sizes(&file).unwrap();
    let sets = rows_of(&rows, "set");
    assert!(sets.iter().any(|r| r.size > 2048) && sets.iter().any(|r| r.size <= 2048));
    for row in &sets {
        if row.size > 2048 {
            assert_eq!(row.writes.len(), 2, "{} bytes: {:?}", row.size, row.writes);
            assert_near(
                &format!("SET {} bytes, ratio", row.size),
                row.ratio,
                0.1,
                0.2,
            );
        } else {
            assert_near(
                &format!("SET {} bytes, ratio", row.size),
                row.ratio,
                1.0,
                0.2,
            );
        }
    }
    let gets = rows_of(&rows, "get");
    assert!(!gets.is_empty());
    for row in gets {
        assert_near(
            &format!("GET {} bytes, ratio", row.size),
            row.ratio,
            1.0,
            0.2,
        );
    }
}

/// Seed 003 on Ethernet instead of loopback: the split stalls only while the rest of the
/// request is under one MSS; from 2,872 bytes on a full segment follows the 1,424 and Linux
/// acknowledges at once, so the cost is one round trip, not the timer. This is why the
/// scenario puts the proxy beside Redis.
#[test]
fn seed003_on_ethernet_only_requests_up_to_2871_bytes_stall() {
    let mut file = scenario_file("seed003-proxy-load.toml");
    file.link.mtu = 1500;
    file.workload.kinds = vec!["set".into()];
    file.workload.request_sizes = vec![2500, 2871, 2872, 8192];
    file.workload.connections = 2;
    file.workload.transactions = 10;
    let rows = compare_sizes(&file).unwrap();
    let stalled: Vec<bool> = rows
        .iter()
        .map(|r| r.as_given.stalled_transactions > 0)
        .collect();
    assert_eq!(stalled, [true, true, false, false], "{rows:#?}");
}

/// Seed 004: 40 ms a request under `ab -k` (44 ms on this kernel's jiffies); headers only,
/// under 1 ms.
#[test]
fn seed004_ab_keepalive_takes_40_ms_and_headers_only_removes_it() {
    let s = simulate(&scenario_file("seed004-ab-keepalive.toml"));
    assert_near("ab -k, ms a request", s.latency_p50 * 1e3, 40.0, 0.15);
    assert_eq!(s.transactions, 500);
    assert!(s.stalled_transactions >= 480, "{}", s.stalled_transactions);
    let s = simulate(&scenario_file("seed004-ab-keepalive-headers-only.toml"));
    assert_eq!(s.stalled_transactions, 0);
    assert!(s.latency_p50 * 1e3 < 1.0, "{} ms", s.latency_p50 * 1e3);
}

/// Seed 004: write-read-write-read and write-write-write are fine, write-write-read is
/// the killer.
#[test]
fn seed004_only_write_write_read_stalls() {
    let base = scenario_file("seed004-ab-keepalive.toml");
    let mut one_write = base.clone();
    one_write.workload.response = vec![500];
    assert_eq!(simulate(&one_write).stalled_transactions, 0);
    let mut one_way = base.clone();
    one_way.workload.pattern = "stream".into();
    one_way.workload.request = vec![180, 320];
    one_way.workload.connections = 1;
    assert_eq!(simulate(&one_way).stalled_transactions, 0);
}

/// Seed 002 on Windows: over 200 ms a round trip.
#[test]
fn seed002_on_windows_takes_over_200_ms_a_round_trip() {
    let s = simulate(&scenario_file("seed002-windows.toml"));
    assert!(s.latency_p50 * 1e3 > 200.0, "{} ms", s.latency_p50 * 1e3);
    assert_eq!(s.stalled_transactions, s.transactions);
}
