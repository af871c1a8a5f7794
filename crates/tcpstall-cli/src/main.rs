//! The `tcpstall` command: the top of its command line, and each subcommand handed to
//! its module (`analyze.rs`, `simulate.rs`, `lab.rs`, `watch.rs`, `shell.rs`); their
//! results become exit statuses here.

use std::process::ExitCode;

mod analyze;
mod lab;
mod outputs;
mod shell;
mod simulate;
mod sink;
mod watch;
mod workload_args;

use clap::{CommandFactory, Parser, Subcommand};
use tcpstall_core::escape::escaped;

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
    Analyze(analyze::AnalyzeArgs),
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
  1  the --prometheus endpoint stopped serving (its socket cannot accept any more)
  N  with -- CMD: the command's exit status (128+signal when killed)
  2  watch cannot run here, or bad usage
  127  with -- CMD: the command could not be started

EXAMPLES:
  tcpstall watch                                   # every process, until Ctrl-C
  tcpstall watch --comm nginx --duration 60 --json
  tcpstall watch -- ./client --server db:5432      # only this command and its children
  tcpstall watch --fix nodelay -- ./client         # TCP_NODELAY on its sockets: does it help?
  tcpstall watch --fix delack-max=8 -- ./server    # the delayed-ACK timer at most 8 ms
  tcpstall watch --prometheus 9464                 # http://127.0.0.1:9464/metrics
  tcpstall watch --prometheus 0.0.0.0:9464 --web.config.file web.yml  # https, basic auth")]
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

/// How a command that ran to its end asks to exit; a failure is an `Err` with the line
/// that says why.
enum Status {
    Success,
    /// `--fail-on-stall` was given and a stall was found.
    StallsFound,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let success = |()| Status::Success;
    let result = match cli.command {
        Command::Completions(args) => shell::completions(&args, Cli::command()).map(success),
        Command::Man(args) => shell::man(&args, Cli::command()).map(success),
        Command::Analyze(args) => analyze::run(&args),
        Command::Lab(args) => lab::run(&args).map(success),
        Command::Simulate(args) => simulate::run(&args)
            .and_then(|out| simulate::print(&out))
            .map(success),
        // With -- CMD, watch exits with the command's status.
        Command::Watch(args) => return watch::run(&args),
    };
    match result {
        Ok(Status::Success) => ExitCode::SUCCESS,
        Ok(Status::StallsFound) => ExitCode::from(EXIT_STALLS_FOUND),
        Err(e) => {
            eprintln!("tcpstall: error: {}", escaped(&e.to_string()));
            ExitCode::from(EXIT_ERROR)
        }
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
    eprintln!(
        "tcpstall: error: {} (tcpstall --help for usage)",
        escaped(&message)
    );
    ExitCode::from(EXIT_ERROR)
}
