//! The HTML reports opened in a real headless browser (Debian's chromium): they render
//! with no console message, show the expected number of stall markers, and a screenshot
//! is saved. Without chromium the tests say why they skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpstall-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TCPSTALL_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Runs a command, killing it after `limit`.
fn run_with_timeout(mut command: Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "chromium did not finish within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn browser(chromium: &Path, profile: &Path, extra: &[String], page: &Path) -> Output {
    let mut command = Command::new(chromium);
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    command.args(extra);
    command.arg(format!("file://{}", page.display()));
    run_with_timeout(command, Duration::from_secs(120))
}

/// The value of `attr` on the element with id `render-status` in a dumped DOM.
fn status_attr(dom: &str, attr: &str) -> Option<String> {
    let start = dom.find(r#"id="render-status""#)?;
    let tag_start = dom[..start].rfind('<')?;
    let tag_end = start + dom[start..].find('>')?;
    let tag = &dom[tag_start..tag_end];
    let key = format!(r#"{attr}=""#);
    let at = tag.find(&key)? + key.len();
    Some(tag[at..at + tag[at..].find('"')?].to_string())
}

/// Opens `page`, checks the status the page script wrote and the console, and saves a
/// screenshot; returns the dumped DOM.
fn check_in_browser(chromium: &Path, dir: &Path, page: &Path, expected_markers: usize) -> String {
    let profile = dir.join("profile");
    let dom = browser(chromium, &profile, &["--dump-dom".to_string()], page);
    let stdout = String::from_utf8_lossy(&dom.stdout).to_string();
    let stderr = String::from_utf8_lossy(&dom.stderr).to_string();
    assert!(dom.status.success(), "chromium failed: {stderr}");
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert_eq!(
        status_attr(&stdout, "data-status").as_deref(),
        Some("ok"),
        "page status; DOM status element: {:?}",
        stdout
            .find("render-status")
            .map(|i| &stdout[i..(i + 400).min(stdout.len())])
    );
    let markers = status_attr(&stdout, "data-stall-markers").expect("marker count");
    assert_eq!(
        markers,
        expected_markers.to_string(),
        "stall markers counted by the page"
    );
    assert_eq!(
        stdout.matches(r#"class="stall-marker""#).count(),
        expected_markers,
        "stall markers in the DOM"
    );

    let shot = dir.join("screenshot.png");
    let out = browser(
        chromium,
        &profile,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,2400".to_string(),
            "--hide-scrollbars".to_string(),
        ],
        page,
    );
    assert!(
        out.status.success(),
        "screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert_eq!(&png[1..4], b"PNG");
    assert!(
        png.len() > 20_000,
        "the screenshot shows something ({} bytes)",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
    stdout
}

#[test]
fn analyze_html_report_renders_with_nine_stall_markers() {
    let Some(chromium) = chromium() else {
        eprintln!(
            "skipped: no chromium at /usr/bin/chromium (apt-get install chromium, or set TCPSTALL_CHROMIUM)"
        );
        return;
    };
    let root = workspace_root();
    let dir = test_dir("report-browser");
    let page = dir.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .current_dir(&root)
        .args(["analyze", "--html"])
        .arg(&page)
        .arg("captures/seed002-two-writes.pcap")
        .output()
        .expect("run tcpstall");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = check_in_browser(&chromium, &dir, &page, 9);
    assert!(dom.contains("write each request in one call"));
    // The representative stall's packet listing is open: data, the delayed ACK, data.
    assert!(dom.contains("the ACK that released the data"));
}

#[test]
fn simulate_sweep_page_renders() {
    let Some(chromium) = chromium() else {
        eprintln!("skipped: no chromium at /usr/bin/chromium (apt-get install chromium)");
        return;
    };
    let dir = test_dir("sweep-browser");
    let page = dir.join("sweep.html");
    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args([
            "simulate",
            "--client",
            "macos-legacy",
            "--server",
            "macos-legacy",
            "--pattern",
            "bulk",
            "--sweep",
            "block=99900..99930",
            "--html",
        ])
        .arg(&page)
        .output()
        .expect("run tcpstall");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = check_in_browser(&chromium, &dir, &page, 0);
    assert_eq!(dom.matches(r#"class="sweep-point""#).count(), 31);
}
