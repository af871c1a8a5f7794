//! The HTML reports opened in a real headless browser (Debian's chromium): they render
//! with no console message, show the expected number of stall markers, and a screenshot
//! is taken (kept with TCPSTALL_KEEP_SCREENSHOTS=DIR; nothing is left in the temporary
//! directory). They need chromium: ignored by default, run by .ci/run.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The benchmark's capture generator, the same code as
/// `cargo run --release -p tcpstall-core --example synth_capture -- FILE 20M`.
#[allow(dead_code)]
#[path = "../../tcpstall-core/examples/synth_capture.rs"]
mod synth;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A directory of the test's own, removed when the test ends, passed or failed.
struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn test_dir(name: &str) -> TestDir {
    let dir = std::env::temp_dir().join(format!("tcpstall-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    TestDir(dir)
}

/// With TCPSTALL_KEEP_SCREENSHOTS=DIR, each screenshot is copied there to be looked at.
fn keep_screenshot(shot: &Path, page: &Path) {
    let Some(keep) = std::env::var_os("TCPSTALL_KEEP_SCREENSHOTS") else {
        return;
    };
    let name = page
        .file_stem()
        .map_or("page".into(), |s| s.to_string_lossy().into_owned());
    let kept = Path::new(&keep).join(format!("{name}.png"));
    match std::fs::copy(shot, &kept) {
        Ok(_) => eprintln!("screenshot: {}", kept.display()),
        Err(e) => eprintln!("screenshot not kept in {}: {e}", kept.display()),
    }
}

/// The browser to test with. The tests that need it are ignored by default (`cargo test`
/// lists them as ignored, with the reason); run with `--include-ignored` (as
/// .ci/run does, after installing chromium) a missing browser fails them.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("TCPSTALL_CHROMIUM") {
        return PathBuf::from(path);
    }
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .unwrap_or_else(|| {
        panic!(
            "no chromium at /usr/bin/chromium (apt-get install chromium, or set TCPSTALL_CHROMIUM)"
        )
    })
}

/// Runs a command, killing it after `limit`. Its output is read while it runs, so a
/// large dumped DOM cannot fill the pipe and stall it.
fn run_with_timeout(mut command: Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!(
                "chromium did not finish within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
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
    keep_screenshot(&shot, page);
    stdout
}

#[test]
#[ignore = "needs chromium (apt-get install chromium); .ci/run runs it"]
fn analyze_html_report_renders_with_nine_stall_markers() {
    let chromium = chromium();
    let root = workspace_root();
    let dir = test_dir("report-browser");
    let page = dir.join("report.html");
    analyze_html(&root, Path::new("captures/seed002-two-writes.pcap"), &page);
    let dom = check_in_browser(&chromium, &dir, &page, 9);
    assert!(dom.contains("write each request in one call"));
    // The representative stall's packet listing is open: data, the delayed ACK, data.
    assert!(dom.contains("the ACK that released the data"));
}

#[test]
#[ignore = "needs chromium (apt-get install chromium); .ci/run runs it"]
fn simulate_sweep_page_renders() {
    let chromium = chromium();
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

/// Every `href="#x"` in `html` and whether an element has `id="x"`.
fn dead_links(html: &str) -> Vec<String> {
    let ids: HashSet<&str> = html
        .split(r#" id=""#)
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    html.split(r##"href="#"##)
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|id| !ids.contains(id))
        .map(str::to_string)
        .collect()
}

fn analyze_html(root: &Path, capture: &Path, page: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .current_dir(root)
        .args(["analyze", "--html"])
        .arg(page)
        .arg(capture)
        .output()
        .expect("run tcpstall");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The dumped DOM of `page` in a 1280x800 window, opened at `fragment`.
fn dump_dom(chromium: &Path, dir: &Path, page: &Path, fragment: &str) -> String {
    let mut command = Command::new(chromium);
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,800",
        "--dump-dom",
    ]);
    command.arg(format!("--user-data-dir={}", dir.join("profile").display()));
    command.arg(format!("file://{}{fragment}", page.display()));
    let out = run_with_timeout(command, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn every_in_page_link_has_its_target() {
    let root = workspace_root();
    let dir = test_dir("report-links");
    for capture in [
        "seed002-two-writes",
        "seed002-nodelay",
        "seed002-one-write",
        "server-sleep-40ms",
    ] {
        let page = dir.join(format!("{capture}.html"));
        analyze_html(&root, &root.join(format!("captures/{capture}.pcap")), &page);
        let html = std::fs::read_to_string(&page).expect("page written");
        assert_eq!(dead_links(&html), Vec::<String>::new(), "{capture}");
    }
}

#[test]
#[ignore = "needs chromium (apt-get install chromium); .ci/run runs it"]
fn a_report_of_thousands_of_connections_opens_on_its_graphs_and_filters_its_table() {
    let chromium = chromium();
    let root = workspace_root();
    let dir = test_dir("report-scale");
    let capture = dir.join("synth.pcap");
    synth::generate(
        capture.to_str().expect("utf-8 path"),
        20 << 20,
        synth::DEFAULT_SEED,
    )
    .expect("synthetic capture");
    let page = dir.join("report.html");
    analyze_html(&root, &capture, &page);
    let html = std::fs::read_to_string(&page).expect("page written");
    let rows = html.matches("<tr><td class=\"num\" data-v=").count();
    assert!(rows > 4000, "one table row per connection: {rows}");
    assert_eq!(dead_links(&html), Vec::<String>::new());

    // (a) The first graph is within two screen heights of the top.
    let dom = dump_dom(&chromium, &dir, &page, "");
    assert_eq!(status_attr(&dom, "data-status").as_deref(), Some("ok"));
    assert_eq!(status_attr(&dom, "data-dead-links").as_deref(), Some("0"));
    let top: f64 = status_attr(&dom, "data-first-graph-top")
        .and_then(|v| v.parse().ok())
        .expect("the page measured its first graph");
    assert!(top < 1600.0, "first graph at y = {top}");
    assert_eq!(status_attr(&dom, "data-rows-shown"), Some(rows.to_string()));

    // (b) Text in the filter box narrows the rows: one server port.
    let dom = dump_dom(&chromium, &dir, &page, "#filter=:6379%20nagle");
    let shown: usize = status_attr(&dom, "data-rows-shown")
        .and_then(|v| v.parse().ok())
        .expect("rows shown");
    let table = &html[html.find(r#"id="conn-table""#).expect("the table")..];
    let table = &table[..table.find("</table>").expect("the table's end")];
    let expected = table
        .split("<tr>")
        .filter(|r| r.contains(":6379</td>") && r.contains("nagle-delayed-ack"))
        .count();
    assert!(shown > 0 && shown < rows, "{shown} of {rows} rows shown");
    assert_eq!(shown, expected);
    assert_eq!(dom.matches("<tr hidden=").count(), rows - shown);
}
