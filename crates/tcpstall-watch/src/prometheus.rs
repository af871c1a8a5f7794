//! The metrics: their counters and the Prometheus text exposition format (version
//! 0.0.4) of `GET /metrics`, every name starting with `tcpstall_`. The HTTP endpoint
//! serving them is [`crate::endpoint`].
//!
//! Labels are `comm`, `local_port`, `role` (holder or delayer) and, when the process's
//! cgroup names it, `service` (a systemd unit or `RUNTIME:ID12` for a container, see
//! [`crate::service`]); the Nagle holds, always the holder's, have `comm` and
//! `local_port`. Their cardinality is bounded twice:
//! a local port in the kernel's ephemeral range (net.ipv4.ip_local_port_range) is
//! labelled `ephemeral`, since a client's port changes with every connection; and past
//! `max_series` label sets (for the stalls, and again for the holds), new ones are
//! counted under `comm="other", local_port="other"` (and `service="other"`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::event::NagleHold;
use crate::service::Service;
use crate::stall::Stall;
use crate::summary::FixPhase;

/// Upper bounds of the stall-duration histogram, seconds: around the delayed-ACK timers
/// of Linux (40 ms), FreeBSD (100 ms) and Windows (200 ms).
pub const DURATION_BUCKETS: [f64; 10] = [0.005, 0.01, 0.02, 0.04, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0];
/// Default bound on label sets.
pub const DEFAULT_MAX_SERIES: usize = 500;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Labels {
    /// The process's service (systemd unit or container, see [`crate::service`]);
    /// empty when unknown.
    service: String,
    comm: String,
    local_port: String,
    role: &'static str,
}

#[derive(Clone, Debug, Default)]
struct Series {
    stalls: u64,
    stalled_ns: u64,
    buckets: [u64; DURATION_BUCKETS.len()],
}

/// The counters behind the endpoint.
#[derive(Debug)]
pub struct Metrics {
    series: BTreeMap<Labels, Series>,
    /// Nagle holds by (comm, local port).
    holds: BTreeMap<(String, String), u64>,
    max_series: usize,
    ephemeral_from: u16,
    events_lost: u64,
    fix: Option<FixState>,
    /// eBPF programs attached now (the watch programs, and the sockops fix).
    programs_attached: usize,
    scrape_errors: Arc<ScrapeErrors>,
}

/// Why a connection to the endpoint was not served, counted as
/// `tcpstall_scrape_errors_total{reason}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScrapeError {
    /// accept(2) failed: the process's open files (EMFILE).
    AcceptEmfile,
    /// accept(2) failed: the system's open files (ENFILE).
    AcceptEnfile,
    /// accept(2) failed: socket buffers or memory (ENOBUFS, ENOMEM).
    AcceptNoMemory,
    /// accept(2) failed otherwise (a connection reset before it was accepted, ...).
    AcceptOther,
    /// A connection past the cap, closed at once.
    TooManyConnections,
    /// A request head, or a TLS handshake, not received in time; a response not taken
    /// in time.
    Timeout,
    /// A request head larger than the endpoint reads (answered 431).
    HeaderTooLarge,
    /// A request that is not HTTP/1 (answered 400).
    BadRequest,
    /// A TLS handshake that failed.
    TlsHandshake,
    /// A request without the right basic-auth credentials (answered 401).
    Unauthorized,
}

impl ScrapeError {
    /// The `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            ScrapeError::AcceptEmfile => "accept_emfile",
            ScrapeError::AcceptEnfile => "accept_enfile",
            ScrapeError::AcceptNoMemory => "accept_nomem",
            ScrapeError::AcceptOther => "accept_other",
            ScrapeError::TooManyConnections => "too_many_connections",
            ScrapeError::Timeout => "timeout",
            ScrapeError::HeaderTooLarge => "header_too_large",
            ScrapeError::BadRequest => "bad_request",
            ScrapeError::TlsHandshake => "tls_handshake",
            ScrapeError::Unauthorized => "unauthorized",
        }
    }
}

/// The endpoint's errors by reason, counted from its own thread.
#[derive(Debug, Default)]
pub struct ScrapeErrors {
    counts: Mutex<BTreeMap<ScrapeError, u64>>,
}

impl ScrapeErrors {
    pub fn count(&self, error: ScrapeError) {
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry(error).or_default() += 1;
        }
    }

    /// How many of `error` were counted.
    pub fn get(&self, error: ScrapeError) -> u64 {
        self.counts
            .lock()
            .map_or(0, |c| c.get(&error).copied().unwrap_or(0))
    }
}

/// A fix tried on a running service: its stalls before and after it was attached.
#[derive(Clone, Debug)]
struct FixState {
    name: String,
    before: FixPhase,
    after: Option<FixPhase>,
    sockets: u64,
}

/// The first port of the ephemeral range (net.ipv4.ip_local_port_range), or Linux's
/// default 32768.
pub fn ephemeral_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

impl Metrics {
    pub fn new(max_series: usize, ephemeral_from: u16) -> Metrics {
        Metrics {
            series: BTreeMap::new(),
            holds: BTreeMap::new(),
            max_series: max_series.max(1),
            ephemeral_from,
            events_lost: 0,
            fix: None,
            programs_attached: 0,
            scrape_errors: Arc::default(),
        }
    }

    /// The endpoint's error counters, shared with it.
    pub fn scrape_errors(&self) -> Arc<ScrapeErrors> {
        Arc::clone(&self.scrape_errors)
    }

    pub fn set_programs_attached(&mut self, programs: usize) {
        self.programs_attached = programs;
    }

    fn port_label(&self, port: u16) -> String {
        if port >= self.ephemeral_from {
            "ephemeral".into()
        } else {
            port.to_string()
        }
    }

    fn series_for(&mut self, labels: Labels) -> &mut Series {
        let labels = if self.series.contains_key(&labels) || self.series.len() < self.max_series {
            labels
        } else {
            Labels {
                service: "other".into(),
                comm: "other".into(),
                local_port: "other".into(),
                role: labels.role,
            }
        };
        self.series.entry(labels).or_default()
    }

    /// Counts a stall for its holder and, when its process is known, its delayer.
    pub fn record(&mut self, stall: &Stall) {
        let seconds = stall.duration_ns as f64 / 1e9;
        let mut sides = Vec::with_capacity(2);
        if let Some(p) = &stall.holder {
            sides.push(Labels {
                service: service_label(stall.holder_service.as_ref()),
                comm: p.comm.clone(),
                local_port: self.port_label(stall.local.port()),
                role: "holder",
            });
        }
        if let Some(p) = &stall.delayer.process {
            sides.push(Labels {
                service: service_label(stall.delayer.service.as_ref()),
                comm: p.comm.clone(),
                local_port: self.port_label(stall.delayer.endpoint.port()),
                role: "delayer",
            });
        }
        for labels in sides {
            let series = self.series_for(labels);
            series.stalls += 1;
            series.stalled_ns += stall.duration_ns;
            for (bucket, bound) in series.buckets.iter_mut().zip(DURATION_BUCKETS) {
                if seconds <= bound {
                    *bucket += 1;
                }
            }
        }
    }

    /// Counts a small send Nagle held, for its process and local port.
    pub fn record_nagle_hold(&mut self, hold: &NagleHold) {
        let mut key = (
            hold.holder.comm.clone(),
            self.port_label(hold.socket.local.port()),
        );
        if !self.holds.contains_key(&key) && self.holds.len() >= self.max_series {
            key = ("other".into(), "other".into());
        }
        *self.holds.entry(key).or_default() += 1;
    }

    pub fn set_events_lost(&mut self, lost: u64) {
        self.events_lost = lost;
    }

    /// The phases of a fix tried on a running service, as they stand (`after` is
    /// `None` until the fix is attached).
    pub fn set_fix(&mut self, name: &str, before: FixPhase, after: Option<FixPhase>, sockets: u64) {
        self.fix = Some(FixState {
            name: name.to_string(),
            before,
            after,
            sockets,
        });
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // An empty label is no label to Prometheus: `service` is left out when unknown.
        let label_text = |l: &Labels| {
            let mut text = format!(
                "comm=\"{}\",local_port=\"{}\",role=\"{}\"",
                escape(&l.comm),
                escape(&l.local_port),
                l.role
            );
            if !l.service.is_empty() {
                let _ = write!(text, ",service=\"{}\"", escape(&l.service));
            }
            text
        };
        out.push_str("# HELP tcpstall_stalls_total Stalls that ended: Nagle held data until a delayed ACK released it.\n");
        out.push_str("# TYPE tcpstall_stalls_total counter\n");
        for (l, s) in &self.series {
            let _ = writeln!(
                out,
                "tcpstall_stalls_total{{{}}} {}",
                label_text(l),
                s.stalls
            );
        }
        out.push_str("# HELP tcpstall_stalled_seconds_total Time spent in those stalls.\n");
        out.push_str("# TYPE tcpstall_stalled_seconds_total counter\n");
        for (l, s) in &self.series {
            let _ = writeln!(
                out,
                "tcpstall_stalled_seconds_total{{{}}} {}",
                label_text(l),
                s.stalled_ns as f64 / 1e9
            );
        }
        out.push_str("# HELP tcpstall_stall_duration_seconds How long each stall lasted.\n");
        out.push_str("# TYPE tcpstall_stall_duration_seconds histogram\n");
        for (l, s) in &self.series {
            let labels = label_text(l);
            for (count, bound) in s.buckets.iter().zip(DURATION_BUCKETS) {
                let _ = writeln!(
                    out,
                    "tcpstall_stall_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "tcpstall_stall_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                s.stalls
            );
            let _ = writeln!(
                out,
                "tcpstall_stall_duration_seconds_sum{{{labels}}} {}",
                s.stalled_ns as f64 / 1e9
            );
            let _ = writeln!(
                out,
                "tcpstall_stall_duration_seconds_count{{{labels}}} {}",
                s.stalls
            );
        }
        out.push_str("# HELP tcpstall_nagle_holds_total Small sends Nagle held until an ACK came (Nagle on), stalls or not.\n");
        out.push_str("# TYPE tcpstall_nagle_holds_total counter\n");
        for ((comm, port), n) in &self.holds {
            let _ = writeln!(
                out,
                "tcpstall_nagle_holds_total{{comm=\"{}\",local_port=\"{}\"}} {n}",
                escape(comm),
                escape(port)
            );
        }
        out.push_str("# HELP tcpstall_events_lost_total Kernel events dropped because the ring buffer was full.\n");
        out.push_str("# TYPE tcpstall_events_lost_total counter\n");
        let _ = writeln!(out, "tcpstall_events_lost_total {}", self.events_lost);
        out.push_str("# HELP tcpstall_build_info The tcpstall version serving these metrics.\n");
        out.push_str("# TYPE tcpstall_build_info gauge\n");
        let _ = writeln!(
            out,
            "tcpstall_build_info{{version=\"{}\"}} 1",
            escape(env!("CARGO_PKG_VERSION"))
        );
        out.push_str("# HELP tcpstall_programs_attached eBPF programs attached now.\n");
        out.push_str("# TYPE tcpstall_programs_attached gauge\n");
        let _ = writeln!(out, "tcpstall_programs_attached {}", self.programs_attached);
        out.push_str("# HELP tcpstall_scrape_errors_total Connections to this endpoint not served, by reason.\n");
        out.push_str("# TYPE tcpstall_scrape_errors_total counter\n");
        if let Ok(counts) = self.scrape_errors.counts.lock() {
            for (error, n) in counts.iter() {
                let _ = writeln!(
                    out,
                    "tcpstall_scrape_errors_total{{reason=\"{}\"}} {n}",
                    error.reason()
                );
            }
        }
        if let Some(fix) = &self.fix {
            let name = escape(&fix.name);
            let phases: Vec<(&str, &FixPhase)> = std::iter::once(("before", &fix.before))
                .chain(fix.after.as_ref().map(|a| ("after", a)))
                .collect();
            out.push_str("# HELP tcpstall_fix_attached Whether --fix is attached to the watched service's cgroup.\n");
            out.push_str("# TYPE tcpstall_fix_attached gauge\n");
            let _ = writeln!(
                out,
                "tcpstall_fix_attached{{fix=\"{name}\"}} {}",
                u8::from(fix.after.is_some())
            );
            out.push_str("# HELP tcpstall_fix_stalls_total Stalls of the watched service before the fix was attached, and after.\n");
            out.push_str("# TYPE tcpstall_fix_stalls_total counter\n");
            for (phase, p) in &phases {
                let _ = writeln!(
                    out,
                    "tcpstall_fix_stalls_total{{fix=\"{name}\",phase=\"{phase}\"}} {}",
                    p.stalls
                );
            }
            out.push_str("# HELP tcpstall_fix_watched_seconds How long each phase has been watched: the stall rate is tcpstall_fix_stalls_total over this.\n");
            out.push_str("# TYPE tcpstall_fix_watched_seconds gauge\n");
            for (phase, p) in &phases {
                let _ = writeln!(
                    out,
                    "tcpstall_fix_watched_seconds{{fix=\"{name}\",phase=\"{phase}\"}} {}",
                    p.watched_ns as f64 / 1e9
                );
            }
            out.push_str(
                "# HELP tcpstall_fix_sockets_total Connections the fix's option was set on.\n",
            );
            out.push_str("# TYPE tcpstall_fix_sockets_total counter\n");
            let _ = writeln!(
                out,
                "tcpstall_fix_sockets_total{{fix=\"{name}\"}} {}",
                fix.sockets
            );
        }
        out
    }
}

fn service_label(service: Option<&Service>) -> String {
    service.map_or(String::new(), |s| s.name.clone())
}

/// A label value as the exposition format quotes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::tests::stall;

    #[test]
    fn counts_holder_and_delayer_with_bounded_ports() {
        let mut m = Metrics::new(DEFAULT_MAX_SERIES, 32768);
        m.record(&stall("client", 40000, 41));
        m.record(&stall("client", 40001, 43));
        let text = m.render();
        assert!(text.contains(
            "tcpstall_stalls_total{comm=\"client\",local_port=\"ephemeral\",role=\"holder\"} 2"
        ));
        assert!(text.contains(
            "tcpstall_stalls_total{comm=\"server\",local_port=\"8000\",role=\"delayer\"} 2"
        ));
        assert!(text.contains("tcpstall_stalled_seconds_total{comm=\"client\",local_port=\"ephemeral\",role=\"holder\"} 0.084"));
        assert!(text.contains("tcpstall_stall_duration_seconds_bucket{comm=\"client\",local_port=\"ephemeral\",role=\"holder\",le=\"0.04\"} 0"));
        assert!(text.contains("tcpstall_stall_duration_seconds_bucket{comm=\"client\",local_port=\"ephemeral\",role=\"holder\",le=\"0.05\"} 2"));
        assert!(text.contains("tcpstall_stall_duration_seconds_count{comm=\"client\",local_port=\"ephemeral\",role=\"holder\"} 2"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("tcpstall_"), "{line}");
        }
    }

    #[test]
    fn label_sets_past_the_bound_become_other() {
        let mut m = Metrics::new(3, 32768);
        for i in 0..10 {
            let mut s = stall(&format!("c{i}"), 1000 + i, 40);
            s.delayer.process = None;
            m.record(&s);
        }
        assert_eq!(m.series.len(), 4);
        assert!(m.render().contains(
            "tcpstall_stalls_total{comm=\"other\",local_port=\"other\",role=\"holder\",service=\"other\"} 7"
        ));
    }

    #[test]
    fn nagle_holds_by_program_with_bounded_labels() {
        let hold = |comm: &str, port: u16| NagleHold::on_loopback(1, comm, port, 1);
        let mut m = Metrics::new(2, 32768);
        m.record_nagle_hold(&hold("java", 40000));
        m.record_nagle_hold(&hold("java", 40001));
        m.record_nagle_hold(&hold("redis", 6379));
        m.record_nagle_hold(&hold("a", 1));
        m.record_nagle_hold(&hold("b", 2));
        let text = m.render();
        assert!(text.contains("# TYPE tcpstall_nagle_holds_total counter"));
        assert!(
            text.contains("tcpstall_nagle_holds_total{comm=\"java\",local_port=\"ephemeral\"} 2"),
            "{text}"
        );
        assert!(text.contains("tcpstall_nagle_holds_total{comm=\"redis\",local_port=\"6379\"} 1"));
        assert!(text.contains("tcpstall_nagle_holds_total{comm=\"other\",local_port=\"other\"} 2"));
    }

    #[test]
    fn a_stall_without_a_known_holder_counts_for_its_delayer() {
        let mut m = Metrics::new(10, 32768);
        let mut s = stall("client", 40000, 41);
        s.holder = None;
        m.record(&s);
        let text = m.render();
        assert!(!text.contains("role=\"holder\""));
        assert!(text.contains(
            "tcpstall_stalls_total{comm=\"server\",local_port=\"8000\",role=\"delayer\"} 1"
        ));
    }

    #[test]
    fn the_service_is_a_label_bounded_with_the_others() {
        let mut m = Metrics::new(2, 32768);
        for unit in ["a.service", "b.service", "c.service"] {
            let mut s = stall("client", 40000, 41);
            s.holder_service = Some(Service::from_cgroup(&format!("/system.slice/{unit}")));
            s.delayer.process = None;
            m.record(&s);
        }
        let text = m.render();
        assert!(text.contains(
            "tcpstall_stalls_total{comm=\"client\",local_port=\"ephemeral\",role=\"holder\",service=\"a.service\"} 1"
        ), "{text}");
        assert!(text.contains("service=\"b.service\"} 1"));
        assert!(!text.contains("c.service"));
        assert!(text.contains(
            "tcpstall_stalls_total{comm=\"other\",local_port=\"other\",role=\"holder\",service=\"other\"} 1"
        ));
    }

    #[test]
    fn a_fix_on_a_service_shows_both_phases() {
        let mut m = Metrics::new(10, 32768);
        let before = FixPhase {
            stalls: 50,
            stalled_ns: 2_000_000_000,
            watched_ns: 10_000_000_000,
        };
        m.set_fix("nodelay", before, None, 0);
        let text = m.render();
        assert!(text.contains("tcpstall_fix_attached{fix=\"nodelay\"} 0"));
        assert!(text.contains("tcpstall_fix_stalls_total{fix=\"nodelay\",phase=\"before\"} 50"));
        assert!(!text.contains("phase=\"after\""));
        m.set_fix(
            "nodelay",
            before,
            Some(FixPhase {
                watched_ns: 5_000_000_000,
                ..FixPhase::default()
            }),
            3,
        );
        let text = m.render();
        assert!(text.contains("tcpstall_fix_attached{fix=\"nodelay\"} 1"));
        assert!(text.contains("tcpstall_fix_stalls_total{fix=\"nodelay\",phase=\"after\"} 0"));
        assert!(text.contains("tcpstall_fix_watched_seconds{fix=\"nodelay\",phase=\"after\"} 5"));
        assert!(text.contains("tcpstall_fix_sockets_total{fix=\"nodelay\"} 3"));
    }

    #[test]
    fn health_series_are_always_there() {
        let mut m = Metrics::new(10, 32768);
        let text = m.render();
        assert!(text.contains("tcpstall_events_lost_total 0\n"));
        assert!(text.contains(&format!(
            "tcpstall_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(text.contains("tcpstall_programs_attached 0\n"));
        assert!(text.contains("# TYPE tcpstall_scrape_errors_total counter\n"));
        assert!(!text.contains("tcpstall_scrape_errors_total{"));
        m.set_programs_attached(5);
        let errors = m.scrape_errors();
        errors.count(ScrapeError::TooManyConnections);
        errors.count(ScrapeError::TooManyConnections);
        errors.count(ScrapeError::AcceptEmfile);
        let text = m.render();
        assert!(text.contains("tcpstall_programs_attached 5\n"));
        assert!(text.contains("tcpstall_scrape_errors_total{reason=\"too_many_connections\"} 2\n"));
        assert!(text.contains("tcpstall_scrape_errors_total{reason=\"accept_emfile\"} 1\n"));
        assert!(!text.contains("reason=\"timeout\""));
    }

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
