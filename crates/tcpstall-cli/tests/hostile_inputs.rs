//! Hostile inputs: `scripts/hostile-corpus.py` writes a corpus of crafted captures (cuts
//! at every header boundary, absurd lengths, bad pcapng blocks, section loops, deep
//! encapsulation, hostile fragments, gzip and zstd bombs, timestamps years apart, a
//! million connections), and `tcpstall analyze`, text and `--json`, runs on each within
//! a bound on its CPU time and its memory.
//!
//! Whatever the file: exit status 0 or 2, never a panic or a signal; exit 2 is exactly
//! one `tcpstall: error:` line and nothing on standard output; exit 0 with `--json` is
//! one JSON report. The bounds are resource limits, not wall-clock times: a busy machine
//! slows a run down but does not add CPU seconds to it.

use std::fs;
use std::io::{Read, Write as _};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{BIN, TempDir, skipped, text};

/// CPU seconds one run may use (all its threads), in a debug build.
const CPU_SECONDS: u64 = 20;
/// Peak resident memory one run may reach.
const MAX_RSS_BYTES: u64 = 1 << 30;
/// Address space one run may reserve: a stop for a runaway allocation, above the
/// resident bound (threads' stacks and the allocator's arenas are reserved, not used).
const ADDRESS_SPACE_BYTES: u64 = 4 << 30;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/hostile-corpus.py")
}

/// How one bounded run ended.
struct Run {
    /// The exit status, or the signal that ended it.
    exit: Result<i32, i32>,
    stdout: Vec<u8>,
    stderr: String,
    cpu_seconds: f64,
    max_rss_bytes: u64,
}

/// Runs `tcpstall` with `args` under RLIMIT_CPU and RLIMIT_AS, and takes its resource
/// usage from wait4.
#[allow(
    clippy::zombie_processes,
    reason = "wait4 reaps the child, with its usage"
)]
fn run_bounded(args: &[&str]) -> Run {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (setrlimit) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let cpu = libc::rlimit {
                rlim_cur: CPU_SECONDS,
                rlim_max: CPU_SECONDS + 1,
            };
            let address_space = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_BYTES,
                rlim_max: ADDRESS_SPACE_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_CPU, &cpu) != 0
                || libc::setrlimit(libc::RLIMIT_AS, &address_space) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("run tcpstall");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).map(|_| buf)
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it in for this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    loop {
        // SAFETY: status and usage are valid for writing; the child is ours, unreaped.
        let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if got == pid {
            break;
        }
        let error = std::io::Error::last_os_error();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::Interrupted,
            "wait4: {error}"
        );
    }
    let exit = if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(libc::WTERMSIG(status))
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Run {
        exit,
        stdout: out_reader.join().unwrap().expect("read stdout"),
        stderr: text(&err_reader.join().unwrap().expect("read stderr")),
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        // Linux gives ru_maxrss in kilobytes.
        max_rss_bytes: usage.ru_maxrss as u64 * 1024,
    }
}

/// What is wrong with one run, if anything.
fn check(run: &Run, json: bool) -> Option<String> {
    let code = match run.exit {
        Ok(code) => code,
        Err(signal) if signal == libc::SIGXCPU || signal == libc::SIGKILL => {
            return Some(format!(
                "killed by signal {signal} after {:.1} CPU seconds: over the {CPU_SECONDS} s bound",
                run.cpu_seconds
            ));
        }
        Err(signal) => return Some(format!("killed by signal {signal}")),
    };
    if run.stderr.contains("panicked") {
        return Some(format!("panicked:\n{}", run.stderr));
    }
    if run.max_rss_bytes > MAX_RSS_BYTES {
        return Some(format!(
            "peak memory {} MB, over the {} MB bound",
            run.max_rss_bytes >> 20,
            MAX_RSS_BYTES >> 20
        ));
    }
    match code {
        0 => {
            if json && serde_json::from_slice::<serde_json::Value>(&run.stdout).is_err() {
                return Some("exit 0, but standard output is not one JSON report".into());
            }
            None
        }
        2 => {
            let lines: Vec<&str> = run.stderr.lines().collect();
            if lines.len() != 1 || !lines[0].starts_with("tcpstall: error:") {
                return Some(format!(
                    "exit 2 without exactly one error line:\n{}",
                    run.stderr
                ));
            }
            if !run.stdout.is_empty() {
                return Some("exit 2, but something on standard output".into());
            }
            None
        }
        code => Some(format!("exit status {code}:\n{}", run.stderr)),
    }
}

#[test]
fn hostile_corpus_is_analysed_or_refused_within_bounds() {
    let dir = TempDir::new("hostile", "corpus");
    let generated = match Command::new("python3")
        .arg(script())
        .arg(&dir.0)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            skipped(format_args!(
                "skipped: the hostile corpus needs python3 ({e}); apt-get install python3"
            ));
            return;
        }
    };
    assert!(
        generated.status.success(),
        "hostile-corpus.py failed:\n{}",
        text(&generated.stderr)
    );
    let mut files: Vec<PathBuf> = fs::read_dir(&dir.0)
        .expect("the corpus")
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    files.sort();
    assert!(files.len() > 150, "the corpus has {} files", files.len());
    let mut failures = Vec::new();
    let mut refused = 0;
    let mut most_cpu = (0.0, String::new());
    let mut most_memory = (0, String::new());
    for file in &files {
        let path = file.to_str().expect("a UTF-8 path");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for json in [false, true] {
            let args: &[&str] = if json {
                &["analyze", "--json", path]
            } else {
                &["analyze", path]
            };
            let run = run_bounded(args);
            if let Some(problem) = check(&run, json) {
                failures.push(format!("{name} ({}): {problem}", args.join(" ")));
            }
            refused += usize::from(run.exit == Ok(2) && json);
            if run.cpu_seconds > most_cpu.0 {
                most_cpu = (run.cpu_seconds, name.clone());
            }
            if run.max_rss_bytes > most_memory.0 {
                most_memory = (run.max_rss_bytes, name.clone());
            }
        }
    }
    // Straight to the terminal: the harness hides what a passing test prints.
    let _ = writeln!(
        std::io::stderr(),
        "hostile corpus: {} files, {refused} refused (exit 2); most CPU {:.1} s ({}), most memory {} MB ({})",
        files.len(),
        most_cpu.0,
        most_cpu.1,
        most_memory.0 >> 20,
        most_memory.1
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
