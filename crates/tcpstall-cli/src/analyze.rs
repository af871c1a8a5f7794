//! `tcpstall analyze`: the captures read into one analysis, then handed to every output
//! asked for ([`sink`](crate::sink)): the report on standard output, the graphs, the
//! annotated copy.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use tcpstall_core::analyze::{
    Analysis, AnalyzeError, AnalyzeOptions, FileOptions, Filter, analyze, analyze_files,
};
use tcpstall_core::capture::{OnFileError, ProgressFn, expand_paths};
use tcpstall_core::detect::DetectConfig;
use tcpstall_core::escape::escaped;
use tcpstall_core::report::text::TextOptions;
use tcpstall_core::segment::NANOS_PER_MILLI;
use tcpstall_report::spool::Spool;

use crate::Status;
use crate::outputs;
use crate::sink::{Annotate, Graphs, Json, Sink, Text};

/// Stalled connections whose fixes are simulated by default, in `analyze` and wherever
/// else a capture is analysed for a person (the lab's own capture): one prediction of
/// each fix's gain everywhere.
pub const SIMULATED_FIXES: usize = 20;

#[derive(Args)]
pub struct AnalyzeArgs {
    /// Capture files (pcap or pcapng, plain or gzip- or zstd-compressed) or directories
    /// of them (the files that start as a capture does), read as one capture merged in
    /// time order; or - for standard input.
    /// Packets two files hold alike (same time, same bytes) are read once; files that saw
    /// the same connections at different capture points are analysed one point at a time
    #[arg(required = true, value_name = "CAPTURE")]
    captures: Vec<PathBuf>,
    /// Stop at the first of several files that cannot be read (by default it is named
    /// in a warning and the other files are read)
    #[arg(long)]
    stop_on_file_error: bool,
    /// Read several files as one capture even when they are not one trace (files that
    /// share no host address and whose packets are more than a day apart are refused)
    #[arg(long)]
    join: bool,
    /// Print the JSON report (schema version 3, see docs/json-schema.md)
    #[arg(long)]
    json: bool,
    /// List every gap of every connection shown, with its packet numbers
    #[arg(long)]
    stalls: bool,
    /// Show the scenario inferred from each stalled connection (stacks, round trip, MSS,
    /// writes, think time, depth, transactions) and its simulated time with each fix
    #[arg(long)]
    explain: bool,
    /// Simulate the fixes of the N worst stalled connections on their inferred scenarios
    /// (the others keep an estimate); 0: none
    #[arg(long, value_name = "N", default_value_t = SIMULATED_FIXES)]
    simulate_fixes: usize,
    /// Also show connections without any gap
    #[arg(long)]
    all: bool,
    /// Show the N most severe connections in detail; 0 shows every one (the totals
    /// always cover all of them)
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,
    /// Keep only connections with this endpoint address (repeatable)
    #[arg(long, value_name = "IP")]
    host: Vec<IpAddr>,
    /// Keep only connections with this endpoint port (repeatable)
    #[arg(long, value_name = "PORT")]
    port: Vec<u16>,
    /// Smallest pause worth examining, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    min_gap: f64,
    /// Exit with status 1 when a nagle-delayed-ack or delayed-ack stall is found
    #[arg(long)]
    fail_on_stall: bool,
    /// Also write a self-contained HTML report with graphs (reads the capture twice)
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write each stalled connection's graphs as SVG and PNG into this directory
    #[arg(long, value_name = "DIR")]
    graphs: Option<PathBuf>,
    /// Also write the capture again as pcapng, every packet unchanged, with a comment on
    /// the packets of each stall and gap (Wireshark: frame.comment contains "tcpstall");
    /// takes one capture file, or - (reads the capture twice)
    #[arg(long, value_name = "OUT.pcapng")]
    annotate: Option<PathBuf>,
    /// How far a gzip- or zstd-compressed capture may expand: RATIO decompressed bytes
    /// per compressed byte, beyond the first 64 MiB (a stream that expands further is
    /// refused as a decompression bomb); `unlimited` lifts the limit
    #[arg(long, value_name = "RATIO", default_value = "1000", value_parser = max_expansion)]
    max_expansion: MaxExpansion,
}

/// `--max-expansion`: a ratio, or none.
#[derive(Clone, Copy, Debug)]
struct MaxExpansion(Option<u64>);

fn max_expansion(text: &str) -> Result<MaxExpansion, String> {
    if text == "unlimited" {
        return Ok(MaxExpansion(None));
    }
    match text.parse::<u64>() {
        Ok(ratio) if ratio >= 1 => Ok(MaxExpansion(Some(ratio))),
        _ => Err(format!(
            "expected a whole number of at least 1, or `unlimited`, got `{text}`"
        )),
    }
}

/// Every output this run writes, in the order it writes them: the report on standard
/// output first, then the files. Each output is listed here, when its option is given.
fn sinks(args: &AnalyzeArgs) -> Vec<Box<dyn Sink>> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if args.json {
        sinks.push(Box::new(Json));
    } else {
        sinks.push(Box::new(Text(TextOptions {
            stalls: args.stalls,
            all: args.all,
            top: (args.top > 0).then_some(args.top),
            explain: args.explain,
        })));
    }
    if args.html.is_some() || args.graphs.is_some() {
        sinks.push(Box::new(Graphs {
            html: args.html.clone(),
            dir: args.graphs.clone(),
        }));
    }
    if let Some(path) = &args.annotate {
        sinks.push(Box::new(Annotate::new(path)));
    }
    sinks
}

pub fn run(args: &AnalyzeArgs) -> Result<Status, String> {
    if !(args.min_gap.is_finite() && args.min_gap > 0.0 && args.min_gap <= 60_000.0) {
        return Err(format!(
            "--min-gap must be between 0 and 60000 ms, got {}",
            args.min_gap
        ));
    }
    // Every read of the captures in this run, the second pass's included.
    tcpstall_core::capture::set_max_expansion(args.max_expansion.0);
    let mut sinks = sinks(args);
    check_outputs(args, &sinks)?;
    for sink in &mut sinks {
        sink.open(&args.captures)?;
    }
    let options = AnalyzeOptions {
        detect: DetectConfig {
            min_gap: (args.min_gap * NANOS_PER_MILLI as f64) as i64,
            ..DetectConfig::default()
        },
        filter: Filter {
            hosts: args.host.clone(),
            ports: args.port.clone(),
        },
    };
    let read_again = sinks.iter().any(|s| s.reads_capture());
    let (mut analysis, capture) = read(args, &options, read_again)?;
    // Warnings go to standard error, whatever the report is (the JSON holds them too);
    // a file that could not be read is among them.
    for warning in &analysis.input.warnings {
        eprintln!("tcpstall: warning: {}", escaped(warning));
    }
    tcpstall_sim::infer::predict_worst(
        &mut analysis.connections,
        args.simulate_fixes,
        tcpstall_sim::infer::Limits::default(),
    );
    for sink in sinks {
        sink.write(&analysis, capture.path())?;
    }
    let stalled = analysis.connections.iter().any(|c| c.stall_count > 0);
    // The process ends here: its memory goes with it, without freeing tens of thousands
    // of diagnoses one by one first.
    std::mem::forget(analysis);
    Ok(if args.fail_on_stall && stalled {
        Status::StallsFound
    } else {
        Status::Success
    })
}

/// Every output's path, checked before the analysis starts: none may be a capture being
/// analysed, another output or an existing capture, and each must be writable, so that
/// a long run does not end on a path it cannot write.
fn check_outputs(args: &AnalyzeArgs, sinks: &[Box<dyn Sink>]) -> Result<(), String> {
    let outs: Vec<outputs::Output> = sinks.iter().flat_map(|s| s.paths()).collect();
    let what = if args.captures.len() == 1 {
        "the capture being analysed"
    } else {
        "one of the captures being analysed"
    };
    let inputs: Vec<outputs::Input> = args
        .captures
        .iter()
        .map(|path| outputs::Input { what, path })
        .collect();
    outputs::check(&outs, &inputs)
}

/// The capture as one file, for the outputs that read it again.
enum Capture {
    /// The one file given.
    File(PathBuf),
    /// The copy of standard input, kept as it was read.
    Stdin(Spool),
    /// Several files, or standard input that no output reads again.
    None,
}

impl Capture {
    fn path(&self) -> Option<&Path> {
        match self {
            Capture::File(path) => Some(path),
            Capture::Stdin(spool) => spool.path(),
            Capture::None => None,
        }
    }
}

/// Reads the captures into one analysis: standard input (copied to a file as it is read
/// when `keep_stdin`), one file, or several files merged in time order.
fn read(
    args: &AnalyzeArgs,
    options: &AnalyzeOptions,
    keep_stdin: bool,
) -> Result<(Analysis, Capture), String> {
    match args.captures.as_slice() {
        [one] if one.as_os_str() == "-" => {
            if io::stdin().is_terminal() {
                return Err(
                    "standard input is a terminal: pipe a capture into it, e.g. tcpdump -w - | tcpstall analyze -"
                        .into(),
                );
            }
            finish_on_interrupt();
            let named = |e: AnalyzeError| format!("stdin: {e}");
            if !keep_stdin {
                let analysis = analyze(io::stdin(), "stdin", options).map_err(named)?;
                return Ok((analysis, Capture::None));
            }
            // The graphs and the annotated copy read the capture twice: keep a copy of
            // standard input.
            let (tee, spool) = Spool::new()
                .and_then(|s| Ok((s.tee(io::stdin())?, s)))
                .map_err(|e| {
                    format!("cannot keep a copy of standard input to read it twice: {e}")
                })?;
            let analysis = analyze(tee, "stdin", options).map_err(named)?;
            Ok((analysis, Capture::Stdin(spool)))
        }
        captures if captures.iter().any(|c| c.as_os_str() == "-") => {
            Err("standard input (-) cannot be read together with files".into())
        }
        [one] if !one.is_dir() => {
            let source = one.display().to_string();
            let file = File::open(one).map_err(|e| format!("{source}: {e}"))?;
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let analysis = analyze(
                tcpstall_report::progress::reader(file, len, "reading"),
                &source,
                options,
            )
            .map_err(|e| format!("{source}: {e}"))?;
            Ok((analysis, Capture::File(one.clone())))
        }
        _ => {
            let analysis = analyze_several(args, options).map_err(|e| e.to_string())?;
            Ok((analysis, Capture::None))
        }
    }
}

/// Several files, or directories of them, read as one capture under one progress bar.
fn analyze_several(args: &AnalyzeArgs, options: &AnalyzeOptions) -> Result<Analysis, AnalyzeError> {
    let total: u64 = expand_paths(&args.captures)?
        .files
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let bar = tcpstall_report::progress::shared(total, "reading");
    let progress: Option<ProgressFn> = bar.clone().map(|bar| {
        let advance: ProgressFn = Arc::new(move |n| bar.inc(n));
        advance
    });
    let files = FileOptions {
        on_error: if args.stop_on_file_error {
            OnFileError::Stop
        } else {
            OnFileError::Continue
        },
        progress,
        join: args.join,
    };
    let result = analyze_files(&args.captures, options, &files);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

/// Ctrl-C in a terminal reaches every process of a pipeline: the capturing program then
/// flushes and exits, and its end of the pipe is the end of our input. So the first
/// Ctrl-C lets the analysis finish on what was captured; a second one stops at once.
fn finish_on_interrupt() {
    let interrupted = AtomicBool::new(false);
    let result = ctrlc::set_handler(move || {
        if interrupted.swap(true, Ordering::SeqCst) {
            tcpstall_core::output::remove_unfinished();
            std::process::exit(130);
        }
        eprintln!("tcpstall: interrupted: analysing what was captured (Ctrl-C again to quit)");
    });
    if let Err(e) = result {
        eprintln!("tcpstall: warning: cannot handle Ctrl-C: {e}");
    }
}
