//! A real Prometheus server (Debian's `prometheus`; .ci/run installs it) for the tests
//! that scrape `tcpstall watch`: started on a free loopback port over a configuration
//! the test writes, asked through its HTTP API, killed with the test.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;
use super::watch::{free_port, http_get};

/// Kills (SIGKILL) and reaps a child this test started, whatever the test's outcome.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `probe` every 250 ms until it gives a value or `limit` passes.
pub fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(v) = probe() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// Fails the test when the `prometheus` binary is missing (the tests using it are
/// ignored by default; run with --include-ignored, a missing Prometheus fails them).
pub fn require_prometheus() {
    assert!(
        Command::new("prometheus").arg("--version").output().is_ok(),
        "`prometheus` not installed (apt-get install prometheus)"
    );
}

/// A running Prometheus server, its storage in the test's directory.
pub struct Prometheus {
    _server: Reaped,
    pub port: u16,
}

impl Prometheus {
    /// Starts Prometheus over `config` (prometheus.yml's text) and waits until it is ready.
    pub fn start(dir: &TempDir, config: &str) -> Prometheus {
        let port = free_port();
        let file = dir.write("prometheus.yml", config.as_bytes());
        let server = Reaped(
            Command::new("prometheus")
                .arg(format!("--config.file={}", file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.0.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start prometheus"),
        );
        wait_for(Duration::from_secs(30), || http_get(port, "/-/ready")).expect("prometheus ready");
        Prometheus {
            _server: server,
            port,
        }
    }

    /// An instant query's `data.result`, when Prometheus answers it with success.
    pub fn query(&self, expr: &str) -> Option<Vec<serde_json::Value>> {
        let body = http_get(
            self.port,
            &format!("/api/v1/query?query={}", url_encoded(expr)),
        )?;
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        if answer["status"] != "success" {
            return None;
        }
        answer["data"]["result"].as_array().cloned()
    }
}

/// `text` as a URL's query value: every byte but letters and digits percent-encoded.
pub fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
