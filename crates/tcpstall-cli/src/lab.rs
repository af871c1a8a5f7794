//! `tcpstall lab`: the simulator's scenarios on this machine's kernel, measured.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tcpstall_core::escape::escaped_path;

use clap::{Args, ValueEnum};

use crate::workload_args::WorkloadArgs;
use tcpstall_core::output::{self, OutputFile};
use tcpstall_core::report::text;
use tcpstall_lab::capture::Packet;
use tcpstall_lab::delayline::Variation;
use tcpstall_lab::net::Net;
use tcpstall_lab::privileges::Privileges;
use tcpstall_lab::{Lab, RunOptions, compare, netns, report, suites};
use tcpstall_report::compare::ComparisonRow;
use tcpstall_sim::scenario::{ScenarioFile, SocketOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Suite {
    /// Seed 002 ("hello " + "world\n" in two writes, then a read) and its fixes, side by side
    Seed002,
    /// Seed 000 (blocks and a one-byte reply): 99,912 / 99,913 / 100,000-byte blocks, in one write and in two
    Bulk,
    /// Every pattern with each option: closed loop (with --capture) and fidelity
    Matrix,
    /// Look-alikes of a stall: a slow reader, persist probes, a TCP_NODELAY sender on its
    /// own clock, pipelined two-response reads (with --capture: what the analyzer calls them)
    Lookalikes,
    /// Requested against measured round trips through the delay line (root)
    DelayAccuracy,
    /// Seeds 003 (a proxy's split requests) and 004 (HTTP headers and body) through the delay line at 20 and 100 ms RTT (root)
    Wan,
    /// Seeds 003 and 004 under their load tests: 8 connections at once, each as given and fixed
    Load,
    /// Seed 002's Java client and server and an HTTP keep-alive server (seed 004) over a
    /// LAN-like (1 ms) and a WAN-like (30 ms) path whose delay varies, captured at the
    /// client, the middle and the server: the analyzer against the programs' own timings
    /// (root, java)
    Varying,
}

#[derive(Args)]
pub struct LabArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// MSS both sides set with TCP_MAXSEG [default: the link MTU less 40]
    #[arg(long)]
    mss: Option<u32>,
    /// Round trip through the delay line between two namespaces, ms (root) [default: none,
    /// loopback]
    #[arg(long, value_name = "MS")]
    rtt: Option<f64>,
    /// Vary each packet's one-way delay by up to PERCENT more, as queues shared with
    /// cross traffic would (seeded, order kept); needs the delay line (--rtt, or a suite
    /// that uses it) [default: 0; the varying suite: 30 on its LAN path, 20 on its WAN]
    #[arg(long, value_name = "PERCENT")]
    delay_variation: Option<f64>,
    /// Seed of the cross traffic behind --delay-variation: the same seed, the same queues
    /// [default: 2]
    #[arg(long, value_name = "N")]
    delay_seed: Option<u64>,
    /// Capture the lab's packets (root), write them as pcap, and diagnose them (a suite
    /// writes one file per scenario beside FILE: FILE-1.pcap, FILE-2.pcap, ...; the varying
    /// suite one per run and capture point: FILE-1-client.pcap, FILE-1-middle.pcap, ...)
    #[arg(long, value_name = "FILE")]
    capture: Option<PathBuf>,
    /// Run the same scenario through the simulator's linux profile and compare
    #[arg(long)]
    compare_sim: bool,
    /// Run a published case instead of one scenario
    #[arg(long, value_name = "NAME")]
    suite: Option<Suite>,
    /// Fail a run that takes longer than this, seconds
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    time_limit: f64,
    /// Write the comparison table and latency distributions as a self-contained HTML page
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

type Fallible<T> = Result<T, String>;

fn build_file(args: &LabArgs) -> Fallible<ScenarioFile> {
    let mut file = args.workload.scenario_file()?;
    if let Some(mss) = args.mss {
        file.client.mss = Some(mss);
        file.server.mss = Some(mss);
    }
    if let Some(rtt) = args.rtt {
        file.link.rtt_ms = rtt;
        file.link.client_to_server_ms = None;
        file.link.server_to_client_ms = None;
    }
    if file.client.stack != "linux" || file.server.stack != "linux" {
        return Err(format!(
            "the lab runs this machine's kernel (Linux) on both sides; the scenario asks for {} -> {}",
            file.client.stack, file.server.stack
        ));
    }
    file.resolve().map_err(|e| e.to_string())?;
    Ok(file)
}

/// `--capture` and `--html`, checked before anything runs: neither may be the scenario
/// file, the other output or an existing capture, and each must be writable.
fn check_outputs(args: &LabArgs) -> Fallible<()> {
    use crate::outputs::{Input, Output, check};
    let mut outputs = Vec::new();
    if let Some(path) = &args.capture {
        outputs.push(Output::file("--capture", path));
    }
    if let Some(path) = &args.html {
        outputs.push(Output::file("--html", path));
    }
    let inputs: Vec<Input> = args
        .workload
        .scenario
        .iter()
        .map(|path| Input {
            what: "the scenario file",
            path,
        })
        .collect();
    check(&outputs, &inputs)
}

fn check_args(args: &LabArgs) -> Fallible<()> {
    check_outputs(args)?;
    if !(args.time_limit.is_finite() && args.time_limit > 0.0 && args.time_limit <= 86_400.0) {
        return Err(format!(
            "--time-limit must be between 0 and 86400 s, got {}",
            args.time_limit
        ));
    }
    if let Some(rtt) = args.rtt
        && !(rtt.is_finite() && (0.0..=1000.0).contains(&rtt))
    {
        return Err(format!("--rtt must be 0 to 1000 ms, got {rtt}"));
    }
    if let Some(v) = args.delay_variation {
        if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
            return Err(format!(
                "--delay-variation must be 0 to 100 percent, got {v}"
            ));
        }
        if args.rtt.is_none() && !uses_delay_line(args.suite) {
            return Err(
                "--delay-variation varies the delay line's delay: give --rtt, or a suite that uses the line"
                    .into(),
            );
        }
    }
    if args.delay_seed.is_some()
        && args.delay_variation.is_none()
        && args.suite != Some(Suite::Varying)
    {
        return Err("--delay-seed seeds --delay-variation, which is not given".into());
    }
    if let Some(n) = args.workload.transactions
        && !(1..=100_000).contains(&n)
    {
        return Err(format!(
            "--transactions must be 1 to 100000 in the lab, got {n}"
        ));
    }
    Ok(())
}

/// What the lab can do here, and the one line that says what it skips and why.
struct Plan {
    namespaces: bool,
    capture: bool,
    skipped: Option<String>,
}

/// Suites that run on the delay line.
fn uses_delay_line(suite: Option<Suite>) -> bool {
    matches!(
        suite,
        Some(Suite::DelayAccuracy | Suite::Wan | Suite::Bulk | Suite::Varying)
    )
}

fn plan(args: &LabArgs, privileges: &Privileges) -> Plan {
    let wants_delay = args.rtt.is_some()
        || matches!(
            args.suite,
            Some(Suite::DelayAccuracy | Suite::Wan | Suite::Varying)
        );
    // A suite's table counts the exchanges that waited for a delayed ACK from the
    // captures at both ends of the line, so it captures whenever it can.
    let truth_from_captures = matches!(
        args.suite,
        Some(
            Suite::Seed002
                | Suite::Bulk
                | Suite::Matrix
                | Suite::Lookalikes
                | Suite::Wan
                | Suite::Load
        )
    );
    let wants_capture = args.capture.is_some() || truth_from_captures;
    let namespaces = privileges.why_not_namespaces().is_none();
    let capture = wants_capture && privileges.why_not_capture().is_none();
    let mut skipped = Vec::new();
    if wants_delay && !namespaces {
        skipped.push("the delay line (two namespaces, veth, TUN)");
    }
    if wants_capture && !capture {
        skipped.push(if truth_from_captures {
            "the captures that show which exchanges waited for a delayed ACK (AF_PACKET)"
        } else {
            "--capture (AF_PACKET)"
        });
    }
    let skipped = (!skipped.is_empty()).then(|| {
        let why = privileges
            .why_not_capture()
            .unwrap_or_else(|| "needs root".into());
        format!(
            "tcpstall: skipped: {}: {why}; running on loopback only",
            skipped.join(" and ")
        )
    });
    Plan {
        namespaces,
        capture,
        skipped,
    }
}

fn one_way(rtt_ms: f64) -> Duration {
    Duration::from_secs_f64(rtt_ms.max(0.0) / 2e3)
}

/// Picks the network: the delay line when a round trip is asked for (or a suite needs
/// MTU-sized packets), a private loopback for captures, else plain loopback.
fn choose_net(args: &LabArgs, plan: &Plan, file: &ScenarioFile) -> Fallible<Net> {
    if plan.namespaces && (args.rtt.is_some() || uses_delay_line(args.suite)) {
        let rtt = args.rtt.unwrap_or(0.0);
        let cs = file
            .link
            .client_to_server_ms
            .map_or(one_way(rtt), |ms| one_way(ms * 2.0));
        let sc = file
            .link
            .server_to_client_ms
            .map_or(one_way(rtt), |ms| one_way(ms * 2.0));
        return Net::delay_line(cs, sc).map_err(|e| e.to_string());
    }
    if plan.capture {
        return Net::private_loopback().map_err(|e| e.to_string());
    }
    Ok(Net::loopback())
}

pub fn run(args: &LabArgs) -> Fallible<()> {
    check_args(args)?;
    let file = build_file(args)?;
    let privileges = Privileges::detect();
    let plan = plan(args, &privileges);
    if let Some(line) = &plan.skipped {
        eprintln!("{line}");
    }
    netns::remove_on_interrupt();
    let net = choose_net(args, &plan, &file)?;
    if let Some(percent) = args.delay_variation
        && args.suite != Some(Suite::Varying)
    {
        net.set_variation(Variation {
            fraction: percent / 100.0,
            seed: args.delay_seed.unwrap_or(suites::VARYING_SEED),
        })
        .map_err(|e| e.to_string())?;
    }
    let lab = Lab::new(net);
    let options = RunOptions {
        capture: plan.capture,
        time_limit: Duration::from_secs_f64(args.time_limit),
    };
    let out = match args.suite {
        Some(suite) => run_suite(&lab, suite, args, &options)?,
        None => run_one(&lab, &file, args, &options)?,
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("writing the report: {e}"))
        }
        _ => Ok(()),
    }
}

fn label(file: &ScenarioFile) -> String {
    let o = |s: &SocketOptions| {
        let set = s.names();
        if set.is_empty() {
            "no options".to_string()
        } else {
            set.join("+")
        }
    };
    format!(
        "{} x{} (client {}, server {})",
        file.workload.pattern,
        file.resolve().map_or(0, |s| s.transactions),
        o(&file.client.options),
        o(&file.server.options)
    )
}

fn run_one(
    lab: &Lab,
    file: &ScenarioFile,
    args: &LabArgs,
    options: &RunOptions,
) -> Fallible<String> {
    let scenario = file.resolve().map_err(|e| e.to_string())?;
    let run = lab.run(&scenario, options).map_err(|e| e.to_string())?;
    let mut out = report::run_text(&run, &label(file), &lab.net.describe());
    if let (Some(path), Some(packets)) = (&args.capture, &run.packets) {
        write_capture(path, packets)?;
        out.push_str(&format!(
            "capture:      {} ({} packets)\n",
            path.display(),
            packets.len()
        ));
    }
    if let Some(analysis) = &run.analysis {
        // The fixes' gains simulated as `analyze` simulates them, not the estimates.
        let mut analysis = analysis.clone();
        tcpstall_sim::infer::predict_worst(
            &mut analysis.connections,
            crate::analyze::SIMULATED_FIXES,
            tcpstall_sim::infer::Limits::default(),
        );
        out.push_str("\nthe analyzer on the lab's capture:\n");
        out.push_str(&text::render(
            &analysis,
            text::TextOptions {
                stalls: false,
                all: true,
                top: None,
                explain: false,
            },
        ));
    }
    let mut rows = vec![ComparisonRow {
        label: format!("lab: {}", label(file)),
        latencies: run
            .exchange
            .transactions
            .iter()
            .map(|t| t.latency.as_secs_f64())
            .collect(),
        extra: vec![format!(
            "{}/{}",
            run.summary.stalled, run.summary.transactions
        )],
    }];
    if args.compare_sim {
        let cmp =
            compare::compare_with_simulator(&run, file, &lab.net).map_err(|e| e.to_string())?;
        out.push('\n');
        out.push_str(&report::comparison_text(&cmp));
        rows.push(ComparisonRow {
            label: "simulator, linux profile".into(),
            latencies: cmp.pairs.iter().map(|p| p.sim_ms / 1e3).collect(),
            extra: vec![format!(
                "{}/{}",
                cmp.pairs.iter().filter(|p| p.sim_stalled).count(),
                cmp.pairs.len()
            )],
        });
    }
    write_html(args, &format!("lab: {}", label(file)), &rows)?;
    Ok(out)
}

/// Writes `packets` as pcap at `path`, whole or not at all (`tcpstall_core::output`).
fn write_capture(path: &Path, packets: &[Packet]) -> Fallible<()> {
    OutputFile::create(path)
        .and_then(|file| tcpstall_lab::capture::write_pcap(file, packets))
        .and_then(|file| file.commit())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `--capture FILE` with a suite: each scenario's capture beside FILE, numbered as the
/// rows are (`m.pcap` gives `m-1.pcap`, `m-2.pcap`, ...); one line per file written.
fn write_suite_captures(args: &LabArgs, rows: &[suites::Row]) -> Fallible<String> {
    let captures = rows.iter().enumerate().filter_map(|(i, row)| {
        let packets = row.run.packets.as_deref()?;
        Some(((i + 1).to_string(), packets, row.name.clone()))
    });
    write_captures_beside(args, captures)
}

/// `--capture FILE` with the varying suite: each run's capture at each point beside
/// FILE (`v.pcap` gives `v-1-client.pcap`, `v-1-middle.pcap`, ...); one line per file.
fn write_varying_captures(args: &LabArgs, rows: &[suites::VaryingRow]) -> Fallible<String> {
    let captures = rows.iter().enumerate().flat_map(|(i, row)| {
        row.run.captures.iter().map(move |(point, packets)| {
            (
                format!("{}-{}", i + 1, point.name()),
                packets.as_slice(),
                format!("{}, {} path", row.program.name(), row.path.name),
            )
        })
    });
    write_captures_beside(args, captures)
}

/// Writes each (suffix, packets, what) as `STEM-SUFFIX.pcap` beside `--capture FILE`,
/// with one line per file written; nothing without `--capture`.
fn write_captures_beside<'a>(
    args: &LabArgs,
    captures: impl Iterator<Item = (String, &'a [Packet], String)>,
) -> Fallible<String> {
    let Some(path) = &args.capture else {
        return Ok(String::new());
    };
    let stem = path
        .file_stem()
        .map_or("lab".into(), |s| s.to_string_lossy().into_owned());
    let mut out = String::new();
    for (suffix, packets, what) in captures {
        let file = path.with_file_name(format!("{stem}-{suffix}.pcap"));
        write_capture(&file, packets)?;
        out.push_str(&format!(
            "capture:      {} ({} packets): {what}\n",
            file.display(),
            packets.len()
        ));
    }
    Ok(out)
}

/// `--html`: the rows as a comparison table with their latency distributions.
fn write_html(args: &LabArgs, title: &str, rows: &[ComparisonRow]) -> Fallible<()> {
    let Some(path) = &args.html else {
        return Ok(());
    };
    // Latencies at or above 30 ms are drawn as stalls: under every delayed-ACK timer.
    let page = tcpstall_report::compare::comparison(title, &["stalled"], rows, Some(0.030)).page;
    output::write(path, page.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("tcpstall: wrote {}", escaped_path(path));
    Ok(())
}

/// Seed 003's figure from the load suite: requests per second through the proxy over
/// direct, for each size, as measured.
fn load_ratios(rows: &[suites::Row]) -> String {
    let rate = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map(|r| r.summary().transactions_per_second)
    };
    let mut out = String::from("\nthrough the proxy over direct, requests per second:\n");
    for size in [4096, 1024] {
        let (via, direct) = (
            format!("seed 003 SET {size} via proxy"),
            format!("seed 003 SET {size} direct"),
        );
        if let (Some(v), Some(d)) = (rate(&via), rate(&direct)) {
            out.push_str(&format!(
                "  SET {size}: lab {:.3}\n",
                v / d.max(f64::MIN_POSITIVE)
            ));
        }
    }
    out
}

/// Each suite row twice: the lab's latencies (with the exchanges that waited for a
/// delayed ACK by its captures, `-` without them) and the simulator's.
fn suite_rows(rows: &[suites::Row]) -> Vec<ComparisonRow> {
    let mut out = Vec::new();
    for row in rows {
        out.push(ComparisonRow {
            label: format!("{} (lab)", row.name),
            latencies: row.sim.pairs.iter().map(|p| p.lab_ms / 1e3).collect(),
            extra: vec![
                row.waited()
                    .map_or("-".into(), |w| format!("{}/{}", w.count(), w.held.len())),
            ],
        });
        out.push(ComparisonRow {
            label: format!("{} (simulator)", row.name),
            latencies: row.sim.pairs.iter().map(|p| p.sim_ms / 1e3).collect(),
            extra: vec![format!(
                "{}/{}",
                row.sim.pairs.iter().filter(|p| p.sim_stalled).count(),
                row.sim.pairs.len()
            )],
        });
    }
    out
}

fn run_suite(lab: &Lab, suite: Suite, args: &LabArgs, options: &RunOptions) -> Fallible<String> {
    let err = |e: tcpstall_lab::LabError| e.to_string();
    let path = lab.net.describe();
    Ok(match suite {
        Suite::Seed002 => {
            let n = args.workload.transactions.unwrap_or(20);
            let rows = suites::seed002(lab, n, options).map_err(err)?;
            write_html(args, "seed 002 on this kernel", &suite_rows(&rows))?;
            report::table_text(
                &format!("seed 002 on this kernel, {n} transactions each, {path}:"),
                &rows,
            ) + &write_suite_captures(args, &rows)?
        }
        Suite::Bulk => {
            let n = args.workload.transactions.unwrap_or(12);
            let rows = suites::bulk(lab, n, options).map_err(err)?;
            write_html(args, "seed 000 blocks on Linux", &suite_rows(&rows))?;
            report::table_text(
                &format!("seed 000 blocks on Linux, {n} blocks each, {path}:"),
                &rows,
            ) + &write_suite_captures(args, &rows)?
        }
        Suite::Matrix => {
            let n = args.workload.transactions.unwrap_or(30);
            let result = suites::matrix(lab, n, options).map_err(err)?;
            write_html(
                args,
                "scenario matrix on this kernel",
                &suite_rows(&result.rows),
            )?;
            report::matrix_text(&result) + &write_suite_captures(args, &result.rows)?
        }
        Suite::Lookalikes => {
            let n = args.workload.transactions.unwrap_or(20);
            let result = suites::lookalikes(lab, n, options).map_err(err)?;
            write_html(
                args,
                "look-alikes of a stall on this kernel",
                &suite_rows(&result.rows),
            )?;
            report::lookalike_text(&result) + &write_suite_captures(args, &result.rows)?
        }
        Suite::DelayAccuracy => {
            if lab.net.line.is_none() {
                return Err("--suite delay-accuracy needs the delay line (root)".into());
            }
            let n = args.workload.transactions.unwrap_or(50);
            let points = suites::delay_accuracy(lab, &suites::DELAY_POINTS_MS, n).map_err(err)?;
            report::delay_text(&points)
        }
        Suite::Load => {
            let n = args.workload.transactions.unwrap_or(20);
            let rows = suites::load(lab, n, options).map_err(err)?;
            write_html(args, "seeds 003 and 004 under load", &suite_rows(&rows))?;
            let mut out = report::table_text(
                &format!(
                    "seeds 003 and 004 under load, {} connections at once, {n} transactions each:",
                    suites::LOAD_CONNECTIONS
                ),
                &rows,
            );
            out.push_str(&load_ratios(&rows));
            out + &write_suite_captures(args, &rows)?
        }
        Suite::Varying => {
            if lab.net.line.is_none() {
                return Err("--suite varying needs the delay line (root)".into());
            }
            if let Some(why) = Privileges::detect().why_not_capture() {
                return Err(format!("--suite varying captures at three points: {why}"));
            }
            let n = args
                .workload
                .transactions
                .unwrap_or(suites::VARYING_ROUND_TRIPS);
            let java = tcpstall_lab::programs::Java::compile().map_err(err)?;
            let rows = suites::varying(
                lab,
                &java,
                n,
                args.delay_variation.map(|p| p / 100.0),
                args.delay_seed.unwrap_or(suites::VARYING_SEED),
                options.time_limit,
            )
            .map_err(err)?;
            let mut out = format!(
                "Java programs over varying delays, {n} round trips each, captured at the client, the middle and the server:\n\n"
            );
            out.push_str(&report::varying_text(&rows));
            out + &write_varying_captures(args, &rows)?
        }
        Suite::Wan => {
            if lab.net.line.is_none() {
                return Err("--suite wan needs the delay line (root)".into());
            }
            let n = args.workload.transactions.unwrap_or(20);
            let rows = suites::wan(lab, n, options).map_err(err)?;
            write_html(
                args,
                "seeds 003 and 004 through the delay line",
                &suite_rows(&rows),
            )?;
            let mut out = report::table_text(
                &format!("seeds 003 and 004 through the delay line, {n} transactions each:"),
                &rows,
            );
            for row in &rows {
                out.push_str(&format!("\n{}\n", row.name));
                out.push_str(&report::comparison_text(&row.sim));
            }
            out + &write_suite_captures(args, &rows)?
        }
    })
}
