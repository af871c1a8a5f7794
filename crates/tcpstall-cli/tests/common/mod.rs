//! Helpers shared by the test files that write captures of their own and run the binary.
// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

pub mod compress;
pub mod pcap;
pub mod prometheus;
pub mod truth;
pub mod verdicts;
pub mod watch;

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// How long one run may take before the test calls it a hang.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// A capture shipped in `captures/`.
pub fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../captures")
        .join(name)
}

fn spawn<S: AsRef<OsStr>>(args: &[S], stdin: Stdio) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tcpstall")
}

/// Waits for `child`, and fails the test on a panic, a crash, or when it outlives
/// `limit`.
fn wait_within<S: AsRef<OsStr>>(mut child: Child, args: &[S], limit: Duration) -> Output {
    let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
    // Read the pipes on their own threads so a large report cannot block the child.
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
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for tcpstall") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tcpstall {args:?} still running after {limit:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let out = Output {
        status,
        stdout: out_reader.join().unwrap().expect("read stdout"),
        stderr: err_reader.join().unwrap().expect("read stderr"),
    };
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("panicked") && out.status.code().is_some(),
        "tcpstall {args:?} crashed ({:?}):\n{stderr}",
        out.status
    );
    out
}

/// Runs `tcpstall` with nothing on its standard input; fails the test on a panic, a
/// crash, or when it outlives `limit`.
pub fn run_within<S: AsRef<OsStr>>(args: &[S], limit: Duration) -> Output {
    wait_within(spawn(args, Stdio::null()), args, limit)
}

/// Runs `tcpstall` as [`run_within`] does, within 30 s.
pub fn run<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run_within(args, RUN_LIMIT)
}

/// Like [`run`], with `input` written to its standard input (from a thread of its own,
/// while the output is read).
pub fn run_with_stdin<S: AsRef<OsStr>>(args: &[S], input: &[u8]) -> Output {
    let mut child = spawn(args, Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Dropping stdin when done closes the pipe: the end of the input.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = wait_within(child, args, RUN_LIMIT);
    writer
        .join()
        .unwrap()
        .expect("write to tcpstall's standard input");
    out
}

/// `tcpstall analyze --json` on a file that must be analysed (exit status 0).
pub fn analyze_json(path: &Path) -> Value {
    let out = run(&["analyze", "--json", path.to_str().unwrap()]);
    parse_report(&out, &path.display().to_string())
}

/// A directory of its own for one test, removed when the test ends (passing or not).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `suite` names the test file, `test` the test.
    pub fn new(suite: &str, test: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "tcpstall-{suite}-{}-{test}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, bytes).expect("write a capture");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Says why a test skipped part of its work, straight to the terminal: the test harness
/// hides what a passing test prints with `println!` and `eprintln!`.
pub fn skipped(notice: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{notice}");
}

/// A program's output as text, whatever its bytes.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The input was refused: exit status 2, no output, and one `tcpstall: error:` line on
/// stderr that mentions every needle. Returns that line.
pub fn check_refused(out: &Output, what: &str, needles: &[&str]) -> String {
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: panic:\n{stderr}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: exit status; stdout:\n{}\nstderr:\n{stderr}",
        text(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line on stderr, got:\n{stderr}");
    assert!(
        lines[0].starts_with("tcpstall: error:"),
        "{what}: {}",
        lines[0]
    );
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "{what}: stderr does not mention {needle:?}: {}",
            lines[0]
        );
    }
    assert!(out.stdout.is_empty(), "{what}: stdout not empty");
    lines[0].to_string()
}

/// The JSON report of a run that must succeed (exit status 0, no panic), with no
/// negative number in it.
pub fn parse_report(out: &Output, what: &str) -> Value {
    parse_report_with_open_bugs(out, what, &[])
}

/// Like [`parse_report`], tolerating negative values in the fields of known open bugs.
pub fn parse_report_with_open_bugs(out: &Output, what: &str, open_bugs: &[&str]) -> Value {
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: panic:\n{stderr}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: exit status; stderr:\n{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: output is not JSON ({e}):\n{}", text(&out.stdout)));
    assert_no_negative_numbers(&report, what, "$", open_bugs);
    report
}

/// No time, duration or count in a report is ever negative (or not a number), except
/// in the fields named in `open_bugs` (known bugs, each with an ignored test).
pub fn assert_no_negative_numbers(value: &Value, what: &str, at: &str, open_bugs: &[&str]) {
    match value {
        Value::Number(n) => {
            let v = n.as_f64().unwrap();
            let excused = open_bugs.iter().any(|field| at.ends_with(field));
            assert!(
                v.is_finite() && (v >= 0.0 || excused),
                "{what}: {at} is {v}"
            );
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                assert_no_negative_numbers(item, what, &format!("{at}[{i}]"), open_bugs);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                assert_no_negative_numbers(item, what, &format!("{at}.{key}"), open_bugs);
            }
        }
        _ => {}
    }
}

/// Runs `check` up to three times; passes on the first success (timing under load).
pub fn with_retries(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let mut last = String::new();
    for attempt in 1..=3 {
        match check() {
            Ok(()) => return,
            Err(e) => {
                eprintln!("{what}: attempt {attempt} failed: {e}");
                last = e;
            }
        }
    }
    panic!("{what}: failed three times; last: {last}");
}

/// The effective capabilities of this process (`CapEff` in /proc/self/status), 0 when
/// unreadable.
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("CapEff:"))
                .and_then(|l| u64::from_str_radix(l[7..].trim(), 16).ok())
        })
        .unwrap_or(0)
}
