//! Helpers shared by the test files that write captures of their own and run the binary.
// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

pub mod pcap;

use std::fs;
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};

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
