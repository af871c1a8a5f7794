//! Names chosen by someone else never reach the terminal raw: a capture named with an
//! escape sequence or a newline (a file planted in a shared directory), in the report,
//! its warnings and its errors, is shown escaped (`\x1b`, `\x0a`).

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;

mod common;
use common::{TempDir, run, shipped, text};

/// A name that clears the screen, sets the window's title and starts a forged line.
const HOSTILE: &[u8] = b"cap\x1b[2J\x1b]0;pwn\x07\n12:00:00.000 forged\xff.pcap";

/// No control character but the line ends, in either stream.
fn assert_no_controls(bytes: &[u8], what: &str) {
    let shown = text(bytes);
    assert!(
        !bytes.iter().any(|&b| (b < 0x20 && b != b'\n') || b == 0x7f),
        "{what} carries a control character: {shown:?}"
    );
    assert!(
        !shown.lines().any(|l| l.starts_with("12:00:00.000")),
        "{what} has a forged line: {shown:?}"
    );
}

#[test]
fn a_capture_named_with_escape_sequences_is_shown_escaped() {
    let dir = TempDir::new("terminal_text", "named");
    let path = dir.0.join(OsStr::from_bytes(HOSTILE));
    fs::copy(shipped("seed002-two-writes.pcap"), &path).unwrap();
    // Cut the last record short: a warning that names the file.
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let out = run(&[OsStr::new("analyze"), path.as_os_str()]);
    assert_no_controls(&out.stdout, "the report");
    assert_no_controls(&out.stderr, "the warnings");
    let report = text(&out.stdout);
    assert!(
        report.contains("cap\\x1b[2J\\x1b]0;pwn\\x07\\x0a12:00:00.000 forged"),
        "{report}"
    );
    assert!(
        text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_error_naming_such_a_file_is_one_escaped_line() {
    let dir = TempDir::new("terminal_text", "missing");
    let path = dir.0.join(OsStr::from_bytes(HOSTILE));
    let out = run(&[OsStr::new("analyze"), path.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_no_controls(&out.stderr, "the error");
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
}

/// A process a local user named: the echo_pair workload run from a file whose name
/// (and so the process's comm) clears the screen, sets the title and breaks the line.
#[test]
#[ignore = "needs root and a kernel with BTF (watch)"]
fn a_process_named_with_escape_sequences_is_shown_escaped_by_watch() {
    use common::watch::{can_watch, echo_pair, free_port};
    let Some(()) = can_watch("watch on a process with a hostile name") else {
        return;
    };
    let dir = TempDir::new("terminal_text", "comm");
    // 15 bytes at most: the kernel keeps that much of the name as comm.
    let name: &[u8] = b"\x1b[2J\x1b]0;pw\x07\nX";
    let program = dir.0.join(OsStr::from_bytes(name));
    fs::copy(echo_pair(), &program).unwrap();
    common::with_retries("a hostile process name under watch", || {
        let port = free_port().to_string();
        let out = run(&[
            OsStr::new("watch"),
            OsStr::new("--"),
            program.as_os_str(),
            OsStr::new("two-writes"),
            OsStr::new("5"),
            OsStr::new(&port),
        ]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if !out.status.success() {
            return Err(format!("watch failed: {stderr}"));
        }
        assert_no_controls(&out.stdout, "watch's standard output");
        assert_no_controls(&out.stderr, "watch's report");
        if !stderr.contains("\\x1b[2J\\x1b]0;pw\\x07\\x0aX[") {
            return Err(format!(
                "the holder is not named, escaped:\n{stdout}\n{stderr}"
            ));
        }
        Ok(())
    });
}
