//! A real Prometheus server (Debian's `prometheus` package; .ci/run installs it) scrapes
//! `tcpstall watch --prometheus` while a two-writes workload stalls, and its HTTP API
//! must return the stall counter (each stall once, though both ends are watched, each
//! labelled with its service) and the Nagle holds counter: over HTTP, and over HTTPS
//! with basic authentication from `--web.config.file`, as Prometheus scrapes
//! node_exporter. Ignored by default (it needs the `prometheus` binary and root); .ci/run
//! runs it, and without root or BTF it then says what it skipped.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::TempDir;
use common::prometheus::{Reaped, wait_for};
use common::truth::{Failed, LOOPBACK, record_until_clear};
use common::watch::{can_watch, echo_pair, free_port, http_get, round_trips_ms};

#[test]
#[ignore = "needs prometheus (apt-get install prometheus) and root; .ci/run runs it"]
fn prometheus_scrapes_the_stall_counter() {
    let Some(()) = can_watch("the Prometheus integration test") else {
        return;
    };
    let dir = TempDir::new("watch_prometheus", "scrape");
    record_until_clear("Prometheus scraping watch", |last| {
        scrape_the_stall_counter(&dir, &[], "", last)
    });
}

#[test]
#[ignore = "needs prometheus (apt-get install prometheus) and root; .ci/run runs it"]
fn prometheus_scrapes_over_https_with_basic_auth() {
    let Some(()) = can_watch("the Prometheus HTTPS test") else {
        return;
    };
    let dir = TempDir::new("watch_prometheus", "https");
    write_certificates(&dir.0);
    let hash = bcrypt::hash("scrape-secret", 4).expect("bcrypt");
    // node_exporter's web config file, and the scrape_config that goes with it.
    let web_config = dir.write(
        "web.yml",
        format!(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: '{hash}'\n"
        )
        .as_bytes(),
    );
    let scrape_config = format!(
        "    scheme: https\n    tls_config:\n      ca_file: {}\n    basic_auth:\n      username: prometheus\n      password: scrape-secret\n",
        dir.0.join("ca.pem").display()
    );
    let watch_args = ["--web.config.file".into(), web_config.display().to_string()];
    record_until_clear("Prometheus scraping watch over HTTPS", |last| {
        scrape_the_stall_counter(&dir, &watch_args, &scrape_config, last)
    });
}

/// A throwaway CA (ca.pem) and a certificate for 127.0.0.1 signed by it (cert.pem,
/// key.pem).
fn write_certificates(dir: &std::path::Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("a key")).expect("CA");
    let key = KeyPair::generate().expect("a key");
    let certificate = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("certificate parameters")
        .signed_by(&key, &ca)
        .expect("certificate");
    for (name, text) in [
        ("ca.pem", ca.pem()),
        ("cert.pem", certificate.pem()),
        ("key.pem", key.serialize_pem()),
    ] {
        std::fs::write(dir.join(name), text).expect("write a certificate");
    }
}

/// Runs watch (with `watch_args`) and Prometheus scraping it (the scrape config's
/// `scrape_config` lines added to its job), a stalling workload, and checks what
/// Prometheus recorded. On a busy host the kernel may not run one of watch's programs
/// for one event (docs/watch.md, limits): a run one stall or one hold short is recorded
/// again, but for the `last`.
fn scrape_the_stall_counter(
    dir: &TempDir,
    watch_args: &[String],
    scrape_config: &str,
    last: bool,
) -> Result<(), Failed> {
    // Ignored by default; run with --include-ignored, a missing Prometheus fails it.
    assert!(
        Command::new("prometheus").arg("--version").output().is_ok(),
        "`prometheus` not installed (apt-get install prometheus)"
    );
    let (metrics_port, prometheus_port, echo_port) = (free_port(), free_port(), free_port());

    // watch, filtered on the workload's port, serving metrics.
    let watch = Reaped(
        Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--json", "--duration", "60"])
            .args(["--port", &echo_port.to_string()])
            .args(["--prometheus", &metrics_port.to_string()])
            .args(watch_args)
            .stdout(Stdio::null())
            .spawn()
            .expect("start tcpstall watch"),
    );
    // Listening once the programs are attached; not a measure: a busy host loads the
    // programs slowly.
    wait_for(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", metrics_port)).ok()
    })
    .expect("watch listens for scrapes");

    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tcpstall\n{scrape_config}    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .expect("write prometheus.yml");
    let _prometheus = Reaped(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            // A store of its own for each run: a run recorded again must not read the
            // series of the one before.
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join(format!("data-{metrics_port}")).display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    wait_for(Duration::from_secs(30), || {
        http_get(prometheus_port, "/-/ready")
    })
    .expect("prometheus ready");

    // The stalling workload: the program's own count of slow round trips.
    let out = Command::new(echo_pair())
        .args(["two-writes", "40", &echo_port.to_string()])
        .output()
        .expect("run echo_pair");
    let round_trips = round_trips_ms(&out.stdout);
    // Judged in this run, but for the first round trip, which no delayed ACK holds.
    let truth = LOOPBACK.judge_except(&round_trips, |i| i == 0);
    assert!(
        truth.slow + truth.between.len() >= 30,
        "the workload did not stall: {out:?}"
    );
    let (slow, between) = (truth.slow as f64, truth.between.len() as f64);

    // Prometheus's own answer, once it has scraped the counter after the workload.
    let query = "/api/v1/query?query=sum(tcpstall_stalls_total%7Brole%3D%22holder%22%2Ccomm%3D%22echo_pair%22%7D)";
    let mut last_value = None;
    let counted = wait_for(Duration::from_secs(30), || {
        let body = http_get(prometheus_port, query)?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let value: f64 = v["data"]["result"][0]["value"][1].as_str()?.parse().ok()?;
        last_value = Some(value);
        // One stall in each slow round trip, none in a fast one.
        (slow..=slow + between).contains(&value).then_some(value)
    });
    if counted.is_none() {
        let why = format!(
            "Prometheus's tcpstall_stalls_total: {last_value:?}, the program's slow round trips: {}",
            truth.expected()
        );
        return Err(one_short(last_value, &truth, last, why));
    }
    // Every one of those stalls carries its holder's service (its cgroup: this test's,
    // which the workload inherits) as a label.
    let service_query = "/api/v1/query?query=sum(tcpstall_stalls_total%7Brole%3D%22holder%22%2Ccomm%3D%22echo_pair%22%2Cservice%3D~%22.%2B%22%7D)";
    let with_service = http_get(prometheus_port, service_query)
        .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|v| {
            v["data"]["result"][0]["value"][1]
                .as_str()?
                .parse::<f64>()
                .ok()
        });
    assert_eq!(
        with_service, counted,
        "stalls with a service label, of those counted"
    );
    // The stalled-seconds counter and the histogram came through the same scrape.
    let seconds = http_get(
        prometheus_port,
        "/api/v1/query?query=sum(tcpstall_stalled_seconds_total%7Brole%3D%22holder%22%7D)",
    )
    .expect("query stalled seconds");
    assert!(seconds.contains("\"status\":\"success\""), "{seconds}");
    // Each stall began with a Nagle hold of the client: the holds counter has them all.
    let holds_query =
        "/api/v1/query?query=sum(tcpstall_nagle_holds_total%7Bcomm%3D%22echo_pair%22%7D)";
    let mut last_holds = None;
    let holds = wait_for(Duration::from_secs(30), || {
        let body = http_get(prometheus_port, holds_query)?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let value: f64 = v["data"]["result"][0]["value"][1].as_str()?.parse().ok()?;
        last_holds = Some(value);
        (value >= slow).then_some(value)
    });
    if holds.is_none() {
        let why = format!(
            "Prometheus's tcpstall_nagle_holds_total: {last_holds:?}, the program's slow round trips: {slow}"
        );
        return Err(one_short(last_holds, &truth, last, why));
    }
    drop(watch);
    Ok(())
}

/// A count one short of the slow round trips, where none fell in the band and this is not
/// the last run, is one kernel event lost (recorded again); any other miss is wrong.
fn one_short(value: Option<f64>, truth: &common::truth::Truth, last: bool, why: String) -> Failed {
    if value.is_some_and(|v| v.fract() == 0.0 && truth.one_short(v as usize, last)) {
        Failed::Unclear(format!("one event lost: {why}"))
    } else {
        Failed::Wrong(why)
    }
}
