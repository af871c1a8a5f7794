//! The `tcpstall` command: wires the core library's sources, detector and renderers.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

mod lab;
mod outputs;
mod shell;
mod simulate;
mod watch;
mod workload_args;

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::sync::Arc;

use tcpstall_core::analyze::{
    AnalyzeError, AnalyzeOptions, FileOptions, Filter, analyze, analyze_files,
};
use tcpstall_core::capture::{OnFileError, ProgressFn, annotate, expand_paths};
use tcpstall_core::detect::DetectConfig;
use tcpstall_core::report::{annotations, json, text};
use tcpstall_core::segment::NANOS_PER_MILLI;

/// Exit status when `--fail-on-stall` is given and a stall was found.
const EXIT_STALLS_FOUND: u8 = 1;
/// Exit status for unusable input or a usage error (clap also uses 2).
const EXIT_ERROR: u8 = 2;

#[derive(Parser)]
#[command(
    name = "tcpstall",
    version,
    about = "Find, explain and fix TCP stalls caused by Nagle's algorithm meeting delayed ACKs",
    long_about = "Find, explain and fix TCP stalls caused by Nagle's algorithm meeting delayed ACKs: \
the 40 ms (Linux) or 200 ms (Windows, AIX, BSD) pauses that make request/response programs \
far slower than their network. Names with \"seed\" (seed002, ...) are the published cases \
the tool reproduces, numbered 000 to 004 (see docs/seeds.md)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read pcap or pcapng captures and report every stall, its cause and its fix
    #[command(after_help = "\
EXIT STATUS:
  0  the analysis ran (stalls or not, unless --fail-on-stall)
  1  --fail-on-stall was given and a nagle-delayed-ack or delayed-ack stall was found
  2  the input could not be analysed (not a capture, truncated header, no TCP, ...) or bad usage

EXAMPLES:
  tcpstall analyze captures/seed002-two-writes.pcap
  tcpstall analyze --stalls --port 6379 proxy.pcapng.gz
  tcpstall analyze --annotate marked.pcapng capture.pcap   # then in Wireshark: frame.comment contains \"tcpstall\"
  tcpstall analyze ring/                            # every file of a tcpdump -C/-G/-W ring, in time order
  tcpstall analyze client.pcap server.pcap          # one path seen at two points: each analysed
  tcpdump -i eth0 -w - 'tcp port 8080' | tcpstall analyze -
  tcpstall analyze --json capture.pcap | jq '.connections[].stalls[] | select(.class == \"nagle-delayed-ack\")'")]
    Analyze(AnalyzeArgs),
    /// Simulate two TCP stacks packet by packet: latency, stalls, pcap and ground truth
    #[command(after_help = "\
EXIT STATUS:
  0  the simulation ran
  2  bad scenario or usage, or an output file could not be written

EXAMPLES:
  tcpstall simulate --client linux --server linux --pattern two-writes
  tcpstall simulate --client macos-legacy --server macos-legacy --pattern bulk --sweep block=99000..101000
  tcpstall simulate --client windows --server aix --pattern sftp --compare
  tcpstall simulate --pattern proxy-split --rtt 20 --capture-point tap --pcap proxy.pcap --truth proxy.json
  tcpstall simulate scenario.toml --timeline")]
    Simulate(Box<simulate::SimulateArgs>),
    /// Run a scenario with real sockets on this kernel: measure, capture, compare with the simulator
    #[command(after_help = "\
EXIT STATUS:
  0  the lab ran
  2  bad scenario or usage, or the run failed (one line says why)

EXAMPLES:
  tcpstall lab --suite seed002                     # two writes then a read (seed 002), and its fixes
  tcpstall lab --pattern two-writes --compare-sim
  tcpstall lab --pattern two-writes --capture lab.pcap    # root: capture and diagnose
  tcpstall lab --pattern proxy-split --rtt 20 --compare-sim   # root: delay line
  tcpstall lab --suite matrix --capture matrix.pcap       # closed loop and fidelity")]
    Lab(Box<lab::LabArgs>),
    /// Watch this host live (eBPF): each stall as it ends, per process and socket; run a
    /// command under watch and try a fix on it; export Prometheus metrics (root)
    #[command(after_help = "\
Needs root (or CAP_BPF and CAP_PERFMON), a kernel with BTF and Linux 6.3 or later
(the sock:sock_send_length tracepoint); a command needs cgroup v2. Where these are
missing it says so in one line: capture with tcpdump and use `tcpstall analyze`.
Stalls are printed on standard output as they end; the summary follows on standard
error (as `perf stat` does), or on standard output as the last object with --json.
SIGTERM, SIGINT and SIGHUP end watching with the summary; with -- CMD they are passed
to the command, which has 5 s to exit before it and what it started are killed, and its
cgroup is removed. A closed standard output (`| head`) ends watching too.

EXIT STATUS:
  0  watching ended (Ctrl-C, SIGTERM, --duration, or standard output closed)
  N  with -- CMD: the command's exit status (128+signal when killed)
  2  watch cannot run here, or bad usage
  127  with -- CMD: the command could not be started

EXAMPLES:
  tcpstall watch                                   # every process, until Ctrl-C
  tcpstall watch --comm nginx --duration 60 --json
  tcpstall watch -- ./client --server db:5432      # only this command and its children
  tcpstall watch --fix nodelay -- ./client         # TCP_NODELAY on its sockets: does it help?
  tcpstall watch --fix delack-max=8 -- ./server    # the delayed-ACK timer at most 8 ms
  tcpstall watch --prometheus 9464                 # http://127.0.0.1:9464/metrics")]
    Watch(Box<watch::WatchArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(after_help = "\
EXAMPLES:
  tcpstall completions bash > /etc/bash_completion.d/tcpstall
  tcpstall completions zsh > \"${fpath[1]}/_tcpstall\"
  tcpstall completions fish > ~/.config/fish/completions/tcpstall.fish")]
    Completions(shell::CompletionsArgs),
    /// Print the manual page (roff), or write one page per command into a directory
    #[command(after_help = "\
EXAMPLES:
  tcpstall man | man -l -
  tcpstall man --dir /usr/local/share/man/man1")]
    Man(shell::ManArgs),
}

#[derive(Args)]
struct AnalyzeArgs {
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match cli.command {
        Command::Completions(args) => report(shell::completions(&args, Cli::command())),
        Command::Man(args) => report(shell::man(&args, Cli::command())),
        Command::Analyze(args) => run_analyze(args),
        Command::Lab(args) => match lab::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tcpstall: error: {e}");
                ExitCode::from(EXIT_ERROR)
            }
        },
        Command::Watch(args) => watch::run(&args),
        Command::Simulate(args) => match simulate::run(&args).and_then(|out| simulate::print(&out))
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tcpstall: error: {e}");
                ExitCode::from(EXIT_ERROR)
            }
        },
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

/// Help and version go to standard output as clap prints them; a usage error is one
/// line, `tcpstall: error: ...` with what to try, and exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(EXIT_ERROR)
        } else {
            ExitCode::SUCCESS
        };
    }
    let rendered = e.render().to_string();
    // The message, without clap's usage and hint paragraphs, on one line.
    let message = rendered
        .split("\n\n")
        .next()
        .unwrap_or("bad usage")
        .trim_start_matches("error: ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("tcpstall: error: {message} (tcpstall --help for usage)");
    ExitCode::from(EXIT_ERROR)
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpstall: error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
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

fn run_analyze(args: AnalyzeArgs) -> ExitCode {
    if !(args.min_gap.is_finite() && args.min_gap > 0.0 && args.min_gap <= 60_000.0) {
        eprintln!(
            "tcpstall: error: --min-gap must be between 0 and 60000 ms, got {}",
            args.min_gap
        );
        return ExitCode::from(EXIT_ERROR);
    }
    if let Err(e) = check_outputs(&args) {
        eprintln!("tcpstall: error: {e}");
        return ExitCode::from(EXIT_ERROR);
    }
    let annotate_out = match &args.annotate {
        Some(path) => match AnnotateOutput::open(path, &args.captures) {
            Ok(out) => Some(out),
            Err(e) => {
                eprintln!("tcpstall: error: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        },
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
            eprintln!(
                "tcpstall: error: standard input is a terminal: pipe a capture into it, e.g. tcpdump -w - | tcpstall analyze -"
            );
            return ExitCode::from(EXIT_ERROR);
        }
        finish_on_interrupt();
        if args.html.is_some() || args.graphs.is_some() || args.annotate.is_some() {
            // The graphs and the annotated copy read the capture twice: keep a copy of
            // standard input.
            match tcpstall_report::spool::Spool::new().and_then(|s| Ok((s.tee(io::stdin())?, s))) {
                Ok((tee, s)) => {
                    spool = Some(s);
                    ("stdin".to_string(), analyze(tee, "stdin", &options))
                }
                Err(e) => {
                    eprintln!(
                        "tcpstall: error: cannot keep a copy of standard input to read it twice: {e}"
                    );
                    return ExitCode::from(EXIT_ERROR);
                }
            }
        } else {
            ("stdin".to_string(), analyze(io::stdin(), "stdin", &options))
        }
    } else if args.captures.iter().any(|c| c.as_os_str() == "-") {
        eprintln!("tcpstall: error: standard input (-) cannot be read together with files");
        return ExitCode::from(EXIT_ERROR);
    } else if let Some(path) = &capture {
        let source = path.display().to_string();
        match File::open(path) {
            Ok(file) => {
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                let result = analyze(
                    tcpstall_report::progress::reader(file, len, "reading"),
                    &source,
                    &options,
                );
                (source, result)
            }
            Err(e) => {
                eprintln!("tcpstall: error: {source}: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    } else {
        (String::new(), analyze_several(&args, &options))
    };
    let mut analysis = match result {
        Ok(analysis) => analysis,
        Err(e) if source.is_empty() => {
            eprintln!("tcpstall: error: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
        Err(e) => {
            eprintln!("tcpstall: error: {source}: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
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
    if let Err(e) = write_report(&analysis, &args)
        && e.kind() != io::ErrorKind::BrokenPipe
    {
        eprintln!("tcpstall: error: writing the report: {e}");
        return ExitCode::from(EXIT_ERROR);
    }
    if args.html.is_some() || args.graphs.is_some() {
        // Graphs of several files would need their merge read again: not drawn yet.
        let capture = match &spool {
            Some(s) => s.path().map(|p| p.to_path_buf()),
            None => capture.clone(),
        };
        match tcpstall_report::analysis::write_reports(
            &analysis,
            capture.as_deref(),
            args.html.as_deref(),
            args.graphs.as_deref(),
            &Default::default(),
        ) {
            Ok(written) => say_written(&written, args.html.as_deref(), args.graphs.as_deref()),
            Err(e) => {
                eprintln!("tcpstall: error: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    }
    if let Some(out) = annotate_out {
        let capture = match &spool {
            Some(s) => s.path().map(|p| p.to_path_buf()),
            None => capture,
        };
        let Some(capture) = capture else {
            eprintln!(
                "tcpstall: error: --annotate: the copy of standard input could not be kept (is the disk full?)"
            );
            return ExitCode::from(EXIT_ERROR);
        };
        if let Err(e) = out.write(&analysis, &capture) {
            eprintln!("tcpstall: error: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    }
    let stalled = analysis.connections.iter().any(|c| c.stall_count > 0);
    // The process ends here: its memory goes with it, without freeing tens of thousands
    // of diagnoses one by one first.
    std::mem::forget(analysis);
    if args.fail_on_stall && stalled {
        ExitCode::from(EXIT_STALLS_FOUND)
    } else {
        ExitCode::SUCCESS
    }
}
