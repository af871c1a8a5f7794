//! `tcpstall analyze`: reads the captures into one analysis and writes its report, and
//! the HTML page, the graphs and the annotated copy when asked.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use tcpstall_core::analyze::{
    AnalyzeError, AnalyzeOptions, FileOptions, Filter, analyze, analyze_files,
};
use tcpstall_core::capture::{OnFileError, ProgressFn, annotate, expand_paths};
use tcpstall_core::detect::DetectConfig;
use tcpstall_core::report::{annotations, json, text};
use tcpstall_core::segment::NANOS_PER_MILLI;

use crate::Status;
use crate::outputs;

#[derive(Args)]
pub struct AnalyzeArgs {
    /// Capture files (pcap or pcapng, plain or gzip- or zstd-compressed) or directories
    /// of them, read as one capture merged in time order; or - for standard input.
    /// Packets two files hold alike (same time, same bytes) are read once; files that saw
    /// the same connections at different capture points are analysed one point at a time
    #[arg(required = true, value_name = "CAPTURE")]
    captures: Vec<PathBuf>,
    /// Stop at the first of several files that cannot be read (by default it is named
    /// in a warning and the other files are read)
    #[arg(long)]
    stop_on_file_error: bool,
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
    #[arg(long, value_name = "N", default_value_t = 20)]
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
}

/// The file `--annotate` writes, opened before the analysis so that a path that cannot
/// be written is said at once. An existing file is emptied only when the copy is
/// written; one this run created is removed if the run ends without the copy.
struct AnnotateOutput {
    path: PathBuf,
    file: File,
    existed: bool,
    written: bool,
}

impl Drop for AnnotateOutput {
    fn drop(&mut self) {
        if !self.written && !self.existed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl AnnotateOutput {
    fn open(path: &Path, captures: &[PathBuf]) -> Result<AnnotateOutput, String> {
        match captures {
            [one] if one.as_os_str() == "-" || !one.is_dir() => {}
            _ => {
                return Err(
                    "--annotate writes a copy of one capture: give it one file or - (merge several first, e.g. with mergecap)"
                        .into(),
                );
            }
        }
        // The path itself (not standard output, not a directory, not the input, not an
        // existing capture) was checked by `outputs::check` before this.
        let shown = path.display();
        let existed = path.exists();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("--annotate {shown}: {e}"))?;
        Ok(AnnotateOutput {
            path: path.to_path_buf(),
            file,
            existed,
            written: false,
        })
    }

    /// Reads `capture` again and writes it with the comments of `analysis`'s gaps.
    fn write(
        mut self,
        analysis: &tcpstall_core::analyze::Analysis,
        capture: &Path,
    ) -> Result<(), String> {
        let comments = annotations::packet_comments(analysis);
        let shown = self.path.display().to_string();
        let input = File::open(capture).map_err(|e| {
            format!(
                "--annotate {shown}: reading the capture again: {}: {e}",
                capture.display()
            )
        })?;
        // Only a regular file is emptied first; a device or a pipe is written as it is.
        if self.file.metadata().is_ok_and(|m| m.is_file()) {
            self.file
                .set_len(0)
                .map_err(|e| format!("--annotate {shown}: {e}"))?;
        }
        let len = input.metadata().map(|m| m.len()).unwrap_or(0);
        let input = tcpstall_report::progress::reader(input, len, "annotating");
        let out = io::BufWriter::with_capacity(1 << 20, &self.file);
        // On failure a file this run created goes again (see Drop); one that was there
        // before is never removed.
        let (summary, _) = annotate(input, out, &comments).map_err(|e| {
            let incomplete = if self.existed {
                "; what it holds is incomplete"
            } else {
                ""
            };
            format!("--annotate {shown}: {e}{incomplete}")
        })?;
        self.written = true;
        if summary.left_out > 0 {
            eprintln!(
                "tcpstall: warning: {}: {} packets on interfaces no description declared were left out; frame numbers after them differ from the report's",
                self.path.display(),
                summary.left_out
            );
        }
        if summary.unplaced > 0 {
            eprintln!(
                "tcpstall: warning: {}: {} comments name packets the capture no longer has (did it change?)",
                self.path.display(),
                summary.unplaced
            );
        }
        eprintln!(
            "tcpstall: wrote {} ({} packets, {} annotated)",
            self.path.display(),
            summary.packets,
            summary.annotated
        );
        Ok(())
    }
}

/// `--html`, `--graphs` and `--annotate`, checked before the analysis starts: none may
/// be a capture being analysed, another output or an existing capture, and each must be
/// writable, so that a long run does not end on a path it cannot write.
fn check_outputs(args: &AnalyzeArgs) -> Result<(), String> {
    let mut outs = Vec::new();
    if let Some(path) = &args.html {
        outs.push(outputs::Output::file("--html", path));
    }
    if let Some(dir) = &args.graphs {
        outs.push(outputs::Output::directory("--graphs", dir));
    }
    if let Some(path) = &args.annotate {
        outs.push(outputs::Output::file("--annotate", path));
    }
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

/// One line per output: the page, and the pictures in their directory.
fn say_written(
    written: &tcpstall_report::analysis::Written,
    html: Option<&Path>,
    graphs: Option<&Path>,
) {
    if let Some(path) = html {
        eprintln!("tcpstall: wrote {}", path.display());
    }
    if let Some(dir) = graphs {
        let pictures = written
            .files
            .iter()
            .filter(|f| f.parent() == Some(dir))
            .count();
        let n = written.connections_drawn;
        eprintln!(
            "tcpstall: wrote {pictures} pictures of {n} connection{} into {}",
            if n == 1 { "" } else { "s" },
            dir.display()
        );
    }
}

/// Ctrl-C in a terminal reaches every process of a pipeline: the capturing program then
/// flushes and exits, and its end of the pipe is the end of our input. So the first
/// Ctrl-C lets the analysis finish on what was captured; a second one stops at once.
fn finish_on_interrupt() {
    let interrupted = AtomicBool::new(false);
    let result = ctrlc::set_handler(move || {
        if interrupted.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("tcpstall: interrupted: analysing what was captured (Ctrl-C again to quit)");
    });
    if let Err(e) = result {
        eprintln!("tcpstall: warning: cannot handle Ctrl-C: {e}");
    }
}

/// Writes the text or JSON report to standard output as it is rendered (the JSON of a
/// huge capture is never held whole in memory).
fn write_report(analysis: &tcpstall_core::analyze::Analysis, args: &AnalyzeArgs) -> io::Result<()> {
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &json::build(analysis)).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
    } else {
        let text = text::render(
            analysis,
            text::TextOptions {
                stalls: args.stalls,
                all: args.all,
                top: (args.top > 0).then_some(args.top),
                explain: args.explain,
            },
        );
        out.write_all(text.as_bytes())?;
    }
    out.flush()
}

/// Several files, or directories of them, read as one capture under one progress bar.
fn analyze_several(
    args: &AnalyzeArgs,
    options: &AnalyzeOptions,
) -> Result<tcpstall_core::analyze::Analysis, AnalyzeError> {
    let paths = expand_paths(&args.captures)?;
    let total: u64 = paths
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
    };
    let result = analyze_files(&paths, options, &files);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

pub fn run(args: &AnalyzeArgs) -> Result<Status, String> {
    if !(args.min_gap.is_finite() && args.min_gap > 0.0 && args.min_gap <= 60_000.0) {
        return Err(format!(
            "--min-gap must be between 0 and 60000 ms, got {}",
            args.min_gap
        ));
    }
    check_outputs(args)?;
    let annotate_out = match &args.annotate {
        Some(path) => Some(AnnotateOutput::open(path, &args.captures)?),
        None => None,
    };
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
    let capture = match args.captures.as_slice() {
        [one] if one.as_os_str() != "-" && !one.is_dir() => Some(one.clone()),
        _ => None,
    };
    let mut spool = None;
    let (source, result) = if args.captures.len() == 1 && args.captures[0].as_os_str() == "-" {
        if io::stdin().is_terminal() {
            return Err(
                "standard input is a terminal: pipe a capture into it, e.g. tcpdump -w - | tcpstall analyze -"
                    .into(),
            );
        }
        finish_on_interrupt();
        if args.html.is_some() || args.graphs.is_some() || args.annotate.is_some() {
            // The graphs and the annotated copy read the capture twice: keep a copy of
            // standard input.
            let (tee, s) = tcpstall_report::spool::Spool::new()
                .and_then(|s| Ok((s.tee(io::stdin())?, s)))
                .map_err(|e| {
                    format!("cannot keep a copy of standard input to read it twice: {e}")
                })?;
            spool = Some(s);
            ("stdin".to_string(), analyze(tee, "stdin", &options))
        } else {
            ("stdin".to_string(), analyze(io::stdin(), "stdin", &options))
        }
    } else if args.captures.iter().any(|c| c.as_os_str() == "-") {
        return Err("standard input (-) cannot be read together with files".into());
    } else if let Some(path) = &capture {
        let source = path.display().to_string();
        let file = File::open(path).map_err(|e| format!("{source}: {e}"))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let result = analyze(
            tcpstall_report::progress::reader(file, len, "reading"),
            &source,
            &options,
        );
        (source, result)
    } else {
        (String::new(), analyze_several(args, &options))
    };
    let mut analysis = result.map_err(|e| {
        if source.is_empty() {
            e.to_string()
        } else {
            format!("{source}: {e}")
        }
    })?;
    // Warnings go to standard error, whatever the report is (the JSON holds them too);
    // a file that could not be read is among them.
    for warning in &analysis.input.warnings {
        eprintln!("tcpstall: warning: {warning}");
    }
    tcpstall_sim::infer::predict_worst(
        &mut analysis.connections,
        args.simulate_fixes,
        tcpstall_sim::infer::Limits::default(),
    );
    if let Err(e) = write_report(&analysis, args)
        && e.kind() != io::ErrorKind::BrokenPipe
    {
        return Err(format!("writing the report: {e}"));
    }
    if args.html.is_some() || args.graphs.is_some() {
        // Graphs of several files would need their merge read again: not drawn yet.
        let capture = match &spool {
            Some(s) => s.path().map(|p| p.to_path_buf()),
            None => capture.clone(),
        };
        let written = tcpstall_report::analysis::write_reports(
            &analysis,
            capture.as_deref(),
            args.html.as_deref(),
            args.graphs.as_deref(),
            &Default::default(),
        )
        .map_err(|e| e.to_string())?;
        say_written(&written, args.html.as_deref(), args.graphs.as_deref());
    }
    if let Some(out) = annotate_out {
        let capture = match &spool {
            Some(s) => s.path().map(|p| p.to_path_buf()),
            None => capture,
        };
        let Some(capture) = capture else {
            return Err(
                "--annotate: the copy of standard input could not be kept (is the disk full?)"
                    .into(),
            );
        };
        out.write(&analysis, &capture)?;
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
