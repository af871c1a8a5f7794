//! The command line itself: usage errors in one line, shell completions and manual pages
//! generated from the same definition as the flags.

mod common;

use common::{TempDir, run};

#[test]
fn usage_errors_are_one_line_and_exit_2() {
    for args in [
        &["analyze"][..],
        &["analyze", "--no-such-flag", "x.pcap"],
        &["analyze", "--top", "many", "x.pcap"],
        &["simulate", "--rtt"],
        &["lab", "--suite", "nope"],
        &["no-such-command"],
        &["completions", "tcsh"],
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("tcpstall: error: "), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // Help and version are answers, not errors.
    for args in [&["--help"][..], &["analyze", "--help"], &["--version"]] {
        let out = run(args);
        assert!(out.status.success(), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn completions_know_every_command_and_flag() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        // Fish names long flags without their dashes (-l annotate).
        for word in ["analyze", "simulate", "lab", "annotate", "fail-on-stall"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
}

#[test]
fn manual_pages_cover_every_command() {
    let out = run(&["man"]);
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH tcpstall 1"), "{page}");
    assert!(page.contains("analyze"), "{page}");

    let dir = TempDir::new("cli_usage", "man");
    let out = run(&["man", "--dir", dir.0.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "tcpstall.1",
        "tcpstall-analyze.1",
        "tcpstall-simulate.1",
        "tcpstall-lab.1",
    ] {
        let text = std::fs::read_to_string(dir.0.join(name)).unwrap_or_default();
        assert!(text.contains(".TH"), "{name}: {text}");
    }
    let analyze = std::fs::read_to_string(dir.0.join("tcpstall-analyze.1")).unwrap();
    assert!(analyze.contains("fail\\-on\\-stall"), "{analyze}");

    let missing = dir.0.join("no-such-dir");
    let out = run(&["man", "--dir", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
}

#[test]
fn output_paths_are_checked_before_the_work_starts() {
    let dir = TempDir::new("cli_usage", "outputs");
    let capture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../captures/seed002-two-writes.pcap"
    );
    let missing = dir.0.join("no-such-dir").join("out");
    let missing = missing.to_str().unwrap();
    let here = dir.0.to_str().unwrap();
    for args in [
        vec!["analyze", "--html", missing, capture],
        vec!["analyze", "--html", here, capture],
        vec!["analyze", "--graphs", capture, capture],
        vec!["simulate", "--pcap", missing],
        vec!["simulate", "--truth", here],
        vec!["lab", "--capture", missing],
        vec!["lab", "--html", here],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("tcpstall: error: --"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    // A checked path is not left behind, and each output written is named.
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
    let page = dir.0.join("r.html");
    let graphs = dir.0.join("graphs");
    let out = run(&[
        "analyze",
        "--html",
        page.to_str().unwrap(),
        "--graphs",
        graphs.to_str().unwrap(),
        capture,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("tcpstall: wrote {}", page.display())),
        "{err}"
    );
    assert!(err.contains("pictures of 1 connection into"), "{err}");
}
