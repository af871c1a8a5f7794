//! deploy/grafana/tcpstall.json: every panel's query, run against a real Prometheus that
//! scraped a real `tcpstall watch` over a stalling workload, returns data, so that no
//! panel is left empty by a typo or a renamed metric; and the recording rules of
//! deploy/prometheus/, loaded into the same Prometheus, return data from the real
//! metrics. Without Prometheus and root the dashboard's queries are still read and
//! their variables checked.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::TempDir;
use common::prometheus::{Prometheus, Reaped, require_prometheus, wait_for};
use common::truth::LOOPBACK;
use common::watch::{can_watch, echo_pair, free_port, http_get, round_trips_ms};
use serde_json::Value;

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/grafana/tcpstall.json"
);
const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/prometheus/tcpstall.rules.yml"
);

/// Metrics the dashboard shows that `watch` does not serve yet: a query on one of them
/// may come back empty. Empty now that watch serves them all.
const METRICS_NOT_SERVED_YET: &[&str] = &[];

/// Grafana's own variables, as the test's Prometheus can answer them: a rate's window of
/// several 1 s scrapes, and a range longer than the run.
const GRAFANA_VARIABLES: [(&str, &str); 2] = [("$__rate_interval", "30s"), ("$__range", "5m")];

fn dashboard() -> Value {
    let text = std::fs::read_to_string(DASHBOARD).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Every panel's queries, as (panel title, expr) with the variables replaced: the
/// dashboard's own by `.*` (all values), Grafana's by [`GRAFANA_VARIABLES`].
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut variables: Vec<String> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|v| v["type"] != "datasource")
        .map(|v| v["name"].as_str().expect("a variable's name").to_string())
        .collect();
    // $instance before $in, were there one.
    variables.sort_by_key(|name| std::cmp::Reverse(name.len()));
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"]
            .as_str()
            .expect("a panel's title")
            .to_string();
        let targets = panel["targets"].as_array().expect("a panel's targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let mut expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: a target without expr"))
                .to_string();
            for (name, value) in GRAFANA_VARIABLES {
                expr = expr.replace(name, value);
            }
            for name in &variables {
                expr = expr
                    .replace(&format!("${{{name}}}"), ".*")
                    .replace(&format!("${name}"), ".*");
            }
            assert!(
                !expr.contains('$'),
                "{title}: an unknown variable in {expr}"
            );
            queries.push((title.clone(), expr));
        }
    }
    queries
}

#[test]
fn every_panel_queries_prometheus_with_known_variables() {
    let dashboard = dashboard();
    let queries = queries(&dashboard);
    assert!(queries.len() >= 12, "{queries:?}");
    for (title, expr) in &queries {
        assert!(
            expr.contains("tcpstall_") || expr.contains("up{"),
            "{title}: {expr}"
        );
    }
    // Every panel reads the data source the dashboard asks for on import.
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        }
    }
    let mut ids: Vec<u64> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .map(|p| p["id"].as_u64().expect("a panel's id"))
        .collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "panel ids repeat");
}

/// The stalling workload: echo_pair's client writes each request in two writes, which
/// Nagle holds until the server's delayed ACK; both ends are watched (holder and
/// delayer). Returns its count of slow round trips, judged by their own timing.
fn stalling_workload(port: u16) -> usize {
    let out = Command::new(echo_pair())
        .args(["two-writes", "40", &port.to_string()])
        .output()
        .expect("run echo_pair");
    LOOPBACK.judge(&round_trips_ms(&out.stdout)).slow
}

#[test]
#[ignore = "needs prometheus (apt-get install prometheus), root and BTF; .ci/run runs it"]
fn every_panel_returns_data_from_a_real_prometheus() {
    let Some(()) = can_watch("the dashboard's queries on a real Prometheus") else {
        return;
    };
    require_prometheus();
    let queries = queries(&dashboard());
    let dir = TempDir::new("grafana_dashboard", "panels");
    let (metrics_port, echo_port) = (free_port(), free_port());

    let _watch = Reaped(
        Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--duration", "120"])
            .args(["--port", &echo_port.to_string()])
            .args(["--prometheus", &metrics_port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start tcpstall watch"),
    );
    wait_for(Duration::from_secs(10), || {
        http_get(metrics_port, "/metrics")
    })
    .expect("watch serves /metrics");
    let prometheus = Prometheus::start(
        &dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['{RULES}']\nscrape_configs:\n  - job_name: tcpstall\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    );

    // Twice, as a stalling program goes on stalling: a counter's first scrape is where
    // its series begins, and only what it counts after that is an increase.
    let slow = stalling_workload(echo_port);
    assert!(
        slow >= 30,
        "the workload did not stall: {slow} slow round trips"
    );
    wait_for(Duration::from_secs(30), || {
        prometheus
            .query("tcpstall_stalled_seconds_total")
            .filter(|r| r.len() >= 2)
    })
    .expect("Prometheus scraped the holder's and the delayer's stalls");
    let slow = stalling_workload(echo_port);
    assert!(
        slow >= 30,
        "the workload did not stall again: {slow} slow round trips"
    );

    // A request that is not HTTP: tcpstall_scrape_errors_total has a series (one per
    // reason seen) for the scrape errors panel.
    {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", metrics_port))
            .expect("connect to watch's metrics port");
        conn.write_all(b"\x16\x03\x01 not http\r\n\r\n")
            .expect("send a request that is not HTTP");
        let mut answer = Vec::new();
        let _ = conn.read_to_end(&mut answer);
        assert!(
            String::from_utf8_lossy(&answer).contains(" 400 "),
            "not answered 400"
        );
    }

    // Each query, until it returns data (a rate needs two scrapes after the series
    // appeared): those on metrics watch does not serve yet may stay empty.
    let mut empty = Vec::new();
    for (title, expr) in &queries {
        let served = !METRICS_NOT_SERVED_YET.iter().any(|m| expr.contains(m));
        let limit = Duration::from_secs(if served { 30 } else { 3 });
        let data = wait_for(limit, || prometheus.query(expr).filter(|r| !r.is_empty()));
        match (data, served) {
            (Some(_), true) => {}
            (Some(_), false) => common::skipped(format_args!(
                "{title}: {expr} returns data: its metric can leave METRICS_NOT_SERVED_YET"
            )),
            (None, true) => empty.push(format!("{title}: {expr}")),
            (None, false) => common::skipped(format_args!(
                "{title}: {expr} is empty, as its metric is not served yet"
            )),
        }
    }
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );

    // The recording rules, evaluated by the same Prometheus over the real metrics.
    for (record, role) in [
        ("instance_service_role:tcpstall_stalls:rate5m", "holder"),
        (
            "instance_service_role:tcpstall_stalled_seconds:rate5m",
            "delayer",
        ),
        (
            "instance_service_role:tcpstall_stall_duration_seconds:mean5m",
            "holder",
        ),
        ("service_role:tcpstall_stalled_seconds:rate5m", "holder"),
    ] {
        let expr = format!("{record}{{role=\"{role}\"}} > 0");
        let data = wait_for(Duration::from_secs(30), || {
            prometheus.query(&expr).filter(|r| !r.is_empty())
        });
        assert!(data.is_some(), "the recording rule gives nothing: {expr}");
    }
}
