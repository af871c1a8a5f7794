//! `tcpstall simulate`: flags and files in, the simulator's renderers out.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use tcpstall_core::escape::escaped_path;

use clap::Args;

use crate::workload_args::WorkloadArgs;
use tcpstall_core::analyze::AnalyzeOptions;
use tcpstall_core::capture::PcapWriter;
use tcpstall_core::output::{self, OutputFile};
use tcpstall_sim::engine::capture_segments;
use tcpstall_sim::infer::{self, Inferred};
use tcpstall_sim::report;
use tcpstall_sim::scenario::{PATTERNS, ScenarioFile};
use tcpstall_sim::sweep::{PARAMETERS, SizeRow, SweepSpec, compare_fixes, compare_sizes, sweep};
use tcpstall_sim::truth::Label;
use tcpstall_sim::{accuracy, profile};

#[derive(Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Stack of the client: linux, windows, windows-xp, macos, macos-legacy, freebsd, aix [default: linux]
    #[arg(long, value_name = "STACK")]
    client: Option<String>,
    /// Stack of the server [default: linux]
    #[arg(long, value_name = "STACK")]
    server: Option<String>,
    /// MSS both sides announce (before the 12-byte timestamp option) [default: the MTU less 40]
    #[arg(long)]
    mss: Option<u32>,
    /// Both sides' delayed-ACK timer (or tick period), ms [default: each stack's]
    #[arg(long, value_name = "MS")]
    delack: Option<f64>,
    /// Round-trip time, ms [default: 0.05]
    #[arg(long, value_name = "MS")]
    rtt: Option<f64>,
    /// Link bandwidth, bits per second (suffixes k, M, G) [default: 1G]
    #[arg(long, value_name = "BPS")]
    bandwidth: Option<String>,
    /// Packet loss probability (0 to 1) [default: 0]
    #[arg(long)]
    loss: Option<f64>,
    /// Extra per-packet delay, uniform from 0 to this, ms [default: 0]
    #[arg(long, value_name = "MS")]
    jitter: Option<f64>,
    /// Seed of jitter, loss and timer phases; with --accuracy-matrix, every cell's [default: 1]
    #[arg(long)]
    seed: Option<u64>,
    /// Where packets are captured: client, server, tap (the middle) or tap:FRACTION [default: client]
    #[arg(long, value_name = "POINT")]
    capture_point: Option<String>,
    /// Write the packets seen at the capture point as pcap
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Write the ground truth (every Nagle hold and delayed ACK) as JSON
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Print the packets at the capture point, tcpdump-like, annotated
    #[arg(long)]
    timeline: bool,
    /// Vary one parameter: PARAM=FROM..TO[:STEP] or PARAM=A,B,C (--patterns lists them)
    #[arg(long, value_name = "SPEC")]
    sweep: Option<String>,
    /// Print the sweep as CSV
    #[arg(long)]
    csv: bool,
    /// Run the scenario with each fix and print the speed-ups side by side
    #[arg(long)]
    compare: bool,
    /// Analyze the simulated capture and score the detector against the ground truth
    #[arg(long)]
    check: bool,
    /// Score the detector over the whole matrix of stacks, patterns, RTTs and capture points
    #[arg(long)]
    accuracy_matrix: bool,
    /// Write a self-contained HTML page: a sweep's throughput chart, or a run's latency histogram
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Infer the scenario from a stalled connection of this capture (as `analyze` reports
    /// it) and run that; flags override its values
    #[arg(long, value_name = "CAPTURE", conflicts_with = "scenario")]
    from_capture: Option<PathBuf>,
    /// With --from-capture: the connection's number in the report (1 = the worst)
    #[arg(long, value_name = "N", default_value_t = 1, requires = "from_capture")]
    connection: usize,
    /// Print the scenario as a TOML file, to edit and run again, instead of running it
    #[arg(long)]
    print_scenario: bool,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    /// List the stack profiles with their values and sources
    #[arg(long)]
    profiles: bool,
    /// List the application patterns and sweep parameters
    #[arg(long)]
    patterns: bool,
}

type Fallible<T> = Result<T, String>;

fn parse_bandwidth(text: &str) -> Fallible<f64> {
    let t = text
        .trim()
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("bit");
    let (number, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    match number.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * scale),
        _ => Err(format!(
            "--bandwidth {text:?}: use a number of bits per second, e.g. 1G, 100M, 512k"
        )),
    }
}

/// The scenario of connection `number` of `capture`, as `analyze` numbers them.
fn scenario_from_capture(capture: &PathBuf, number: usize) -> Fallible<Inferred> {
    let source = capture.display().to_string();
    let input = File::open(capture).map_err(|e| format!("{source}: {e}"))?;
    let analysis = tcpstall_core::analyze::analyze(input, &source, &AnalyzeOptions::default())
        .map_err(|e| format!("{source}: {e}"))?;
    let count = analysis.connections.len();
    let c = number
        .checked_sub(1)
        .and_then(|i| analysis.connections.get(i))
        .ok_or_else(|| {
            format!("{source}: --connection {number}: the report lists connections 1 to {count}")
        })?;
    if c.directions.is_empty() {
        return Err(format!(
            "{source}: connection {number} ({} -> {}) has no stall to model",
            c.client, c.server
        ));
    }
    infer::scenario_from(
        c,
        infer::Limits {
            max_transactions: 100_000,
            max_bytes: 1 << 34,
        },
    )
    .ok_or_else(|| {
        format!(
            "{source}: connection {number} ({} -> {}): no scenario could be inferred (no data from the client)",
            c.client, c.server
        )
    })
}

fn build_file(args: &SimulateArgs) -> Fallible<ScenarioFile> {
    let mut file = match &args.from_capture {
        Some(capture) => args
            .workload
            .apply(scenario_from_capture(capture, args.connection)?.file),
        None => args.workload.scenario_file()?,
    };
    if let Some(stack) = &args.client {
        file.client.stack = stack.clone();
    }
    if let Some(stack) = &args.server {
        file.server.stack = stack.clone();
    }
    if let Some(mss) = args.mss {
        file.client.mss = Some(mss);
        file.server.mss = Some(mss);
    }
    if let Some(ms) = args.delack {
        file.client.delack_ms = Some(ms);
        file.server.delack_ms = Some(ms);
    }
    if let Some(rtt) = args.rtt {
        file.link.rtt_ms = rtt;
    }
    if let Some(bw) = &args.bandwidth {
        file.link.bandwidth_bps = parse_bandwidth(bw)?;
    }
    if let Some(loss) = args.loss {
        file.link.loss = loss;
    }
    if let Some(jitter) = args.jitter {
        file.link.jitter_ms = jitter;
    }
    if let Some(seed) = args.seed {
        file.link.seed = seed;
    }
    if let Some(point) = &args.capture_point {
        file.capture = Some(point.clone());
    }
    Ok(file)
}

fn to_json<T: serde::Serialize>(value: &T) -> Fallible<String> {
    serde_json::to_string_pretty(value)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| format!("cannot encode JSON: {e}"))
}

/// Writes `bytes` at `path` whole, or leaves what was there (`tcpstall_core::output`).
fn write_file(path: &Path, bytes: &[u8]) -> Fallible<()> {
    output::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("tcpstall: wrote {}", escaped_path(path));
    Ok(())
}

/// `--html`, `--pcap` and `--truth`, checked before anything runs: none may be the
/// scenario file or the capture of `--from-capture`, another output or an existing
/// capture, and each must be writable.
fn check_outputs(args: &SimulateArgs) -> Fallible<()> {
    use crate::outputs::{Input, Output, check};
    let outputs: Vec<Output> = [
        ("--html", &args.html),
        ("--pcap", &args.pcap),
        ("--truth", &args.truth),
    ]
    .into_iter()
    .filter_map(|(flag, path)| path.as_deref().map(|path| Output::file(flag, path)))
    .collect();
    let mut inputs = Vec::new();
    if let Some(path) = &args.workload.scenario {
        inputs.push(Input {
            what: "the scenario file",
            path,
        });
    }
    if let Some(path) = &args.from_capture {
        inputs.push(Input {
            what: "the capture of --from-capture",
            path,
        });
    }
    check(&outputs, &inputs)
}

/// Runs the subcommand; returns what to print on standard output.
pub fn run(args: &SimulateArgs) -> Fallible<String> {
    check_outputs(args)?;
    if args.profiles {
        return if args.json {
            to_json(&profile::all())
        } else {
            Ok(profiles_text())
        };
    }
    if args.patterns {
        return Ok(patterns_text());
    }
    if args.accuracy_matrix {
        return accuracy_matrix(args);
    }
    if args.print_scenario
        && let Some(capture) = &args.from_capture
    {
        let inferred = scenario_from_capture(capture, args.connection)?;
        let mut inferred_file = inferred.clone();
        inferred_file.file = build_file(args)?;
        return Ok(inferred_file.toml());
    }
    let file = build_file(args)?;
    if args.print_scenario {
        return file.to_toml().map_err(|e| e.to_string());
    }
    let scenario = file.resolve().map_err(|e| e.to_string())?;
    if scenario.connections > 1 && (args.check || args.truth.is_some()) {
        return Err(format!(
            "--check and --truth need one connection (the scenario runs {}): the capture holds the first connection only",
            scenario.connections
        ));
    }
    if let Some(spec) = &args.sweep {
        let spec = SweepSpec::parse(spec).map_err(|e| e.to_string())?;
        let points = sweep(&file, &spec).map_err(|e| e.to_string())?;
        if let Some(path) = &args.html {
            let description = report::describe(&scenario);
            let page = tcpstall_report::sim::sweep_page(&description, &spec.parameter, &points);
            write_file(path, page.as_bytes())?;
        }
        if args.json {
            return to_json(&serde_json::json!({
                "schema_version": report::SCHEMA_VERSION,
                "scenario": report::json_scenario(&scenario),
                "parameter": spec.parameter,
                "points": points,
            }));
        }
        return Ok(sweep_text(&spec.parameter, &points, args.csv));
    }
    if args.compare && !file.workload.request_sizes.is_empty() {
        let rows = compare_sizes(&file).map_err(|e| e.to_string())?;
        if args.json {
            return to_json(&serde_json::json!({
                "schema_version": report::SCHEMA_VERSION,
                "scenario": report::json_scenario(&scenario),
                "sizes": rows,
            }));
        }
        return Ok(sizes_text(&report::describe(&scenario), &rows));
    }
    if args.compare {
        let variants = compare_fixes(&file).map_err(|e| e.to_string())?;
        if args.json {
            return to_json(&serde_json::json!({
                "schema_version": report::SCHEMA_VERSION,
                "scenario": report::json_scenario(&scenario),
                "variants": variants,
            }));
        }
        let mut out = format!("scenario: {}\n\n", report::describe(&scenario));
        let _ = writeln!(
            out,
            "{:<32} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9}",
            "variant", "p50 ms", "mean ms", "tx/s", "MB/s", "stalled", "speed-up"
        );
        for v in &variants {
            let _ = writeln!(
                out,
                "{:<32} {:>12.3} {:>12.3} {:>10.1} {:>9} {:>9} {:>8.1}x",
                v.name,
                v.summary.latency_p50 * 1e3,
                v.summary.latency_mean * 1e3,
                v.summary.transactions_per_second,
                megabytes(v.summary.throughput_bps),
                v.summary.stalled_transactions,
                v.speedup
            );
        }
        return Ok(out);
    }

    let capture = args.pcap.is_some() || args.timeline || args.check;
    let result = tcpstall_sim::run(&scenario, capture);
    if let Some(path) = &args.html {
        let (request, response) = report::request_response_bytes(&scenario);
        let summary = tcpstall_sim::summary::summarize(&result, request, response);
        let page = tcpstall_report::sim::run_page(&report::describe(&scenario), &result, &summary);
        write_file(path, page.as_bytes())?;
    }
    if let Some(path) = &args.pcap {
        let shown = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut file = OutputFile::create(path).map_err(shown)?;
        let mut writer = PcapWriter::new(&mut file, 0).map_err(shown)?;
        for segment in capture_segments(&result, scenario.link.seed) {
            writer.write_segment(&segment).map_err(shown)?;
        }
        writer.flush().map_err(shown)?;
        drop(writer);
        file.commit().map_err(shown)?;
        eprintln!("tcpstall: wrote {}", escaped_path(path));
    }
    if let Some(path) = &args.truth {
        write_file(path, to_json(&report::truth(&result))?.as_bytes())?;
    }
    let check = args
        .check
        .then(|| accuracy::evaluate(&result, scenario.link.seed, &AnalyzeOptions::default()));
    if args.json {
        let mut value = serde_json::to_value(report::json_run(&scenario, &result))
            .map_err(|e| e.to_string())?;
        if let Some(check) = &check {
            value["check"] = serde_json::to_value(check).map_err(|e| e.to_string())?;
        }
        return to_json(&value);
    }
    let mut out = report::text(&scenario, &result);
    if let Some(check) = check {
        let _ = writeln!(
            out,
            "check:        analyzer on this capture: {} found, {} false, {} missed (precision {:.3}, recall {:.3})",
            check.true_positives,
            check.false_positives,
            check.false_negatives,
            check.precision(),
            check.recall()
        );
        for miss in &check.misses {
            let _ = writeln!(out, "              {miss}");
        }
    }
    if args.timeline {
        out.push('\n');
        out.push_str(&report::timeline(&result, 10_000));
    }
    Ok(out)
}

/// Payload bytes per second in MB (10^6), to three significant figures.
fn megabytes(bits_per_second: f64) -> String {
    let mb = bits_per_second / 8e6;
    let decimals = if mb >= 100.0 {
        0
    } else if mb >= 10.0 {
        1
    } else if mb >= 1.0 {
        2
    } else {
        3
    };
    format!("{mb:.decimals$}")
}

/// The request-size sweep: each kind and size as given and written in one call.
fn sizes_text(description: &str, rows: &[SizeRow]) -> String {
    let mut out = format!("scenario: {description}\n\n");
    let _ = writeln!(
        out,
        "{:<5} {:>8} {:<14} {:>10} {:>9} {:>8} {:>12} {:>12} {:>7}",
        "kind",
        "size",
        "writes",
        "p50 ms",
        "tx/s",
        "stalled",
        "1 write tx/s",
        "1 write MB/s",
        "ratio"
    );
    for row in rows {
        let writes = row
            .writes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("+");
        let _ = writeln!(
            out,
            "{:<5} {:>8} {:<14} {:>10.3} {:>9.1} {:>8} {:>12.1} {:>12} {:>7.3}",
            row.kind,
            row.size,
            writes,
            row.as_given.latency_p50 * 1e3,
            row.as_given.transactions_per_second,
            format!(
                "{}/{}",
                row.as_given.stalled_transactions, row.as_given.transactions
            ),
            row.one_write.transactions_per_second,
            megabytes(row.one_write.throughput_bps),
            row.ratio
        );
    }
    out.push_str(
        "\nratio: transactions per second as given over those with each request in one write\n",
    );
    out
}

fn sweep_text(parameter: &str, points: &[tcpstall_sim::sweep::SweepPoint], csv: bool) -> String {
    let mut out = String::new();
    if csv {
        let _ = writeln!(
            out,
            "{parameter},transactions,stalled,latency_mean_ms,latency_p50_ms,transactions_per_s,throughput_mbps"
        );
        for p in points {
            let s = &p.summary;
            let _ = writeln!(
                out,
                "{},{},{},{:.4},{:.4},{:.2},{:.3}",
                p.value,
                s.transactions,
                s.stalled_transactions,
                s.latency_mean * 1e3,
                s.latency_p50 * 1e3,
                s.transactions_per_second,
                s.throughput_bps / 1e6
            );
        }
        return out;
    }
    let _ = writeln!(
        out,
        "{:>10} {:>8} {:>12} {:>12} {:>12}  throughput",
        parameter, "stalled", "mean ms", "p50 ms", "Mbit/s"
    );
    let best = points
        .iter()
        .map(|p| p.summary.throughput_bps)
        .fold(0.0, f64::max);
    for p in points {
        let s = &p.summary;
        let bar = if best > 0.0 {
            (s.throughput_bps / best * 30.0).round() as usize
        } else {
            0
        };
        let _ = writeln!(
            out,
            "{:>10} {:>8} {:>12.3} {:>12.3} {:>12.3}  {}",
            p.value,
            format!("{}/{}", s.stalled_transactions, s.transactions),
            s.latency_mean * 1e3,
            s.latency_p50 * 1e3,
            s.throughput_bps / 1e6,
            "#".repeat(bar)
        );
    }
    out
}

fn profiles_text() -> String {
    let mut out = String::new();
    for p in profile::all() {
        let _ = writeln!(out, "{} ({})", p.name, p.description);
        let rows = [
            ("nagle", p.nagle.describe().to_string()),
            (
                "timestamps",
                if p.timestamps {
                    "on (MSS 1448 on Ethernet)"
                } else {
                    "off (MSS 1460 on Ethernet)"
                }
                .to_string(),
            ),
            ("ts_recent", p.ts_recent.describe().to_string()),
            ("ts_hz", format!("{} ticks a second", p.ts_hz)),
            ("initial_ttl", format!("{}", p.initial_ttl)),
            ("initial_window", format!("{} segments", p.initial_window)),
            ("delayed_ack", p.delayed_ack.describe()),
            (
                "ack_every_segments",
                format!("{} segments", p.ack_every_segments),
            ),
            ("quickack_segments", format!("{}", p.quickack_segments)),
            ("pingpong", format!("{}", p.pingpong)),
            ("min_rto", p.rto_rule.describe(p.min_rto)),
            (
                "cork_flush",
                p.cork_flush
                    .map_or("none".to_string(), |c| format!("{} ms", c / 1_000_000)),
            ),
            ("autocork", format!("{}", p.autocork)),
            (
                "window_rules",
                match p.window_rules {
                    tcpstall_sim::window::WindowRules::Linux => {
                        "Linux: whole segments only, probe0 RTO x 2^n to 120 s"
                    }
                    tcpstall_sim::window::WindowRules::Bsd => {
                        "BSD: half the largest window, persist 5 to 60 s"
                    }
                }
                .to_string(),
            ),
            ("ack_on_read", format!("{}", p.ack_on_read)),
        ];
        for (key, value) in rows {
            let source = p
                .sources
                .iter()
                .find(|(k, _)| *k == key)
                .map_or("", |(_, s)| s);
            let _ = writeln!(out, "  {key:<19} {value:<48} {source}");
        }
    }
    out
}

fn patterns_text() -> String {
    let mut out = String::from("patterns:\n");
    for (name, what) in PATTERNS {
        let _ = writeln!(out, "  {name:<16} {what}");
    }
    out.push_str("\nsweep parameters:\n");
    for (name, what) in PARAMETERS {
        let _ = writeln!(out, "  {name:<16} {what}");
    }
    out
}

fn accuracy_matrix(args: &SimulateArgs) -> Fallible<String> {
    let transactions = args.workload.transactions.unwrap_or(8);
    let cells = accuracy::matrix(transactions, &AnalyzeOptions::default(), args.seed);
    let mut total = accuracy::Accuracy::default();
    let mut families: Vec<(&str, usize, accuracy::Accuracy)> = accuracy::FAMILIES
        .iter()
        .map(|(name, _)| (*name, 0, accuracy::Accuracy::default()))
        .collect();
    for cell in &cells {
        total.add(&cell.accuracy);
        if let Some(family) = families.iter_mut().find(|f| f.0 == cell.family) {
            family.1 += 1;
            family.2.add(&cell.accuracy);
        }
    }
    let labels: Vec<&str> = Label::ALL.iter().map(|l| l.name()).collect();
    if args.json {
        let per_family: Vec<serde_json::Value> = families
            .iter()
            .map(|(name, runs, a)| {
                serde_json::json!({
                    "family": name,
                    "runs": runs,
                    "gaps": a.gaps,
                    "not_observable": a.not_observable,
                    "true_positives": a.true_positives,
                    "false_positives": a.false_positives,
                    "false_negatives": a.false_negatives,
                    "precision": a.precision(),
                    "recall": a.recall(),
                    "confusion": a.confusion,
                    "reasons": a.misses.iter().take(10).collect::<Vec<_>>(),
                })
            })
            .collect();
        return to_json(&serde_json::json!({
            "schema_version": report::SCHEMA_VERSION,
            "runs": cells.len(),
            "true_positives": total.true_positives,
            "false_positives": total.false_positives,
            "false_negatives": total.false_negatives,
            "precision": total.precision(),
            "recall": total.recall(),
            "labels": labels,
            "confusion": total.confusion,
            "families": per_family,
            "cells": cells,
        }));
    }
    let mut out = String::new();
    let _ = writeln!(out, "{} runs:", cells.len());
    for ((name, what), (_, runs, _)) in accuracy::FAMILIES.iter().zip(&families) {
        let what = if *name == "request-response" {
            format!("{what}, {transactions} transactions each")
        } else {
            what.to_string()
        };
        let _ = writeln!(out, "  {name:<20} {runs:>5}  {what}");
    }
    let _ = writeln!(
        out,
        "ground-truth stalls {}, found {}, false {}, missed {}",
        total.true_positives + total.false_negatives,
        total.true_positives,
        total.false_positives,
        total.false_negatives
    );
    let _ = writeln!(
        out,
        "precision {:.4}, recall {:.4}",
        total.precision(),
        total.recall()
    );
    let _ = writeln!(out, "{}", stacks_named_text(&cells));
    let _ = writeln!(
        out,
        "\n{} gaps ({} not observable in the capture); rows: truth, columns: detected",
        total.gaps, total.not_observable
    );
    out.push_str(&confusion_text(&total.confusion));
    let _ = writeln!(
        out,
        "\nper family: stalls in the truth, found, false (of them: where the truth rules a stall out), missed"
    );
    let _ = writeln!(
        out,
        "{:<20} {:>6} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7}",
        "family", "runs", "gaps", "stalls", "found", "false", "on none", "missed", "unobs."
    );
    for (name, runs, a) in &families {
        let _ = writeln!(
            out,
            "{:<20} {:>6} {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7}",
            name,
            runs,
            a.gaps,
            a.true_positives + a.false_negatives,
            a.true_positives,
            a.false_positives,
            a.stalls_where_none,
            a.false_negatives,
            a.not_observable
        );
    }
    for (name, _, a) in &families {
        if a.misses.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{name}: a sample of reasons");
        for (wanted, at_most) in [(true, 3), (false, 2)] {
            let reasons = cells
                .iter()
                .filter(|c| c.family == *name)
                .flat_map(|c| c.accuracy.misses.iter().map(move |m| (c, m)))
                .filter(|(_, m)| m.starts_with("false") == wanted)
                .take(at_most);
            for (cell, reason) in reasons {
                let _ = writeln!(
                    out,
                    "  {} -> {} {} RTT {} ms at {} ({}): {reason}",
                    cell.client, cell.server, cell.pattern, cell.rtt_ms, cell.capture, cell.variant
                );
            }
        }
    }
    Ok(out)
}

/// Per capture point: the share of stalled directions whose delayer's stack `analyze`
/// named right (counting the stacks it names: Linux, FreeBSD, Windows, a BSD tick).
fn stacks_named_text(cells: &[accuracy::MatrixCell]) -> String {
    let mut out = String::from("delayer's stack named right in stalled directions:");
    for capture in ["client", "server", "tap"] {
        let mut at = accuracy::Accuracy::default();
        for cell in cells.iter().filter(|c| c.capture == capture) {
            at.stacks_read += cell.accuracy.stacks_read;
            at.stacks_named_right += cell.accuracy.stacks_named_right;
            at.stacks_left_open += cell.accuracy.stacks_left_open;
        }
        out.push_str(&format!(
            " at {capture} {:.4} ({}/{}; left open {}, wrong {})",
            at.stacks_named(),
            at.stacks_named_right,
            at.stacks_read,
            at.stacks_left_open,
            at.stacks_named_wrong()
        ));
    }
    out
}

/// The confusion matrix as a table: rows the truth, columns the detector's answer.
fn confusion_text(confusion: &[[u64; Label::COUNT]; Label::COUNT]) -> String {
    let short = [
        "nagle-dack",
        "delayed-ack",
        "app-think",
        "rcv-window",
        "rto",
        "unexpl.",
        "no gap",
    ];
    let mut out = format!("{:<24}", "truth \\ detected");
    for name in short {
        let _ = write!(out, " {name:>11}");
    }
    out.push('\n');
    for label in Label::ALL {
        let _ = write!(out, "{:<24}", label.name());
        for cell in confusion[label.index()] {
            let _ = write!(out, " {cell:>11}");
        }
        out.push('\n');
    }
    out
}

/// Prints to standard output, ignoring a closed pipe.
pub fn print(text: &str) -> Fallible<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing the report: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcpstall_core::detect::StallClass;

    #[test]
    fn the_confusion_table_has_a_row_per_true_label_and_a_column_per_answer() {
        let mut confusion = [[0u64; Label::COUNT]; Label::COUNT];
        let nagle = Label::Class(StallClass::NagleDelayedAck);
        confusion[Label::NoGap.index()][nagle.index()] = 42;
        let text = confusion_text(&confusion);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 1 + Label::COUNT, "{text}");
        assert!(rows[0].contains("no gap"));
        let no_gap: Vec<&str> = rows[1 + Label::NoGap.index()].split_whitespace().collect();
        let mut expected = vec!["0"; Label::COUNT];
        expected[nagle.index()] = "42";
        assert_eq!(no_gap[0], "no-gap");
        assert_eq!(no_gap[1..], expected);
    }
}
