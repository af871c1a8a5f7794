//! Renders stalls as they end (a text line or one JSON object per line) and the totals
//! per process and per connection printed when watching stops.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::event::{NagleHold, Process};
use crate::service::Service;
use crate::stall::{Evidence, Stall, TimerBasis};
use tcpstall_core::diagnosis::{TimerGuess, infer_timer};
use tcpstall_core::escape::escaped;

/// At most this many timers of a group are kept for its reading, the latest.
const TIMER_SAMPLES: usize = 1024;
/// At most this many connections are totalled one by one; the rest are counted together,
/// so memory stays bounded on a busy host.
pub const MAX_CONNECTIONS: usize = 10_000;

/// The kernel's monotonic clock (what bpf_ktime_get_ns reads) and its offset to the
/// wall clock, to print when a stall happened.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    wall_minus_monotonic_ns: i128,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            wall_minus_monotonic_ns: clock_ns(libc::CLOCK_REALTIME)
                - clock_ns(libc::CLOCK_MONOTONIC),
        }
    }

    pub fn monotonic_now_ns() -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC) as u64
    }

    /// Nanoseconds since the Unix epoch of a monotonic time.
    pub fn unix_ns(&self, monotonic_ns: u64) -> i128 {
        i128::from(monotonic_ns) + self.wall_minus_monotonic_ns
    }

    /// HH:MM:SS.mmm (UTC) of a monotonic time.
    pub fn time_of_day(&self, monotonic_ns: u64) -> String {
        let ms = (self.unix_ns(monotonic_ns) / 1_000_000).rem_euclid(86_400_000) as u64;
        format!(
            "{:02}:{:02}:{:02}.{:03}",
            ms / 3_600_000,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000
        )
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn process_name(p: &Process) -> String {
    format!("{}[{}]", escaped(&p.comm), p.pid)
}

/// ` (nginx.service)` after a process's name, when its service is known.
fn service_suffix(service: Option<&Service>) -> String {
    service.map_or(String::new(), |s| format!(" ({})", escaped(&s.name)))
}

/// A service in JSON: its name, kind and cgroup path.
fn service_json(service: Option<&Service>) -> Value {
    service.map_or(
        Value::Null,
        |s| json!({"name": s.name, "kind": s.kind, "cgroup": s.cgroup}),
    )
}

/// One line for a stall.
pub fn stall_line(stall: &Stall, clock: &Clock) -> String {
    let holder = match &stall.holder {
        Some(p) => format!(
            "{}{} {}",
            process_name(p),
            service_suffix(stall.holder_service.as_ref()),
            stall.local
        ),
        None => stall.local.to_string(),
    };
    let mut line = format!(
        "{} {:>7.1} ms {} holder {holder} -> {}, {} B held",
        clock.time_of_day(stall.start_ns + stall.duration_ns),
        ms(stall.duration_ns),
        stall.class.name(),
        stall.remote,
        stall.held_bytes,
    );
    let _ = write!(line, "; delayer {}", stall.delayer.endpoint);
    if let Some(p) = &stall.delayer.process {
        let _ = write!(
            line,
            " {}{}",
            process_name(p),
            service_suffix(stall.delayer.service.as_ref())
        );
    }
    match (stall.evidence, stall.delayer.timer_ns) {
        (Evidence::TimerSeen, Some(timer)) => {
            let _ = write!(
                line,
                ", its delayed-ACK timer fired after {:.1} ms",
                ms(timer)
            );
        }
        (Evidence::TimerSeen, None) => line.push_str(", its delayed-ACK timer fired"),
        (Evidence::Inferred, _) => match stall.delayer.timer_range {
            Some(range) => {
                let _ = write!(
                    line,
                    ", its delayed-ACK timer held the ACK about {:.1}-{:.1} ms (estimated: the hold less the round trip this host measured; remote)",
                    ms(range.low_ns),
                    ms(range.high_ns)
                );
            }
            None => line.push_str(", ACK late by more than a round trip (remote)"),
        },
        (Evidence::DelayerSide, timer) => {
            if let Some(timer) = timer {
                let _ = write!(
                    line,
                    ", its delayed-ACK timer sent the ACK {:.1} ms after the small segment",
                    ms(timer)
                );
            } else {
                line.push_str(", its delayed-ACK timer sent the ACK");
            }
            if let Some(after) = stall.delayer.answered_after_ns {
                let _ = write!(
                    line,
                    " and the held bytes came {:.3} ms later (seen by the delayer)",
                    ms(after)
                );
            }
        }
    }
    line.push_str("; fix: holder one-write or tcp-nodelay, or delayer ack-at-once");
    line
}

/// One JSON object for a stall.
pub fn stall_json(stall: &Stall, clock: &Clock) -> Value {
    let process = |p: &Process| json!({"pid": p.pid, "comm": p.comm});
    json!({
        "type": "stall",
        "time_unix_ns": clock.unix_ns(stall.start_ns + stall.duration_ns) as i64,
        "class": stall.class.name(),
        "duration_ms": ms(stall.duration_ns),
        "held_bytes": stall.held_bytes,
        "mss": stall.mss,
        "smoothed_rtt_ms": f64::from(stall.smoothed_rtt_us) / 1e3,
        "holder": {
            "role": "holder",
            "pid": stall.holder.as_ref().map(|p| p.pid),
            "comm": stall.holder.as_ref().map(|p| p.comm.as_str()),
            "service": service_json(stall.holder_service.as_ref()),
            "local": stall.local.to_string(),
            "remote": stall.remote.to_string(),
        },
        "delayer": {
            "role": "delayer",
            "endpoint": stall.delayer.endpoint.to_string(),
            "process": stall.delayer.process.as_ref().map(process),
            "service": service_json(stall.delayer.service.as_ref()),
            "timer_ms": stall.delayer.timer_ns.map(ms),
            "timer_basis": stall.delayer.timer_basis,
            "timer_estimate_ms": stall.delayer.timer_range.map(|r| json!({"low": ms(r.low_ns), "high": ms(r.high_ns)})),
            "answered_after_ms": stall.delayer.answered_after_ns.map(ms),
        },
        "evidence": stall.evidence,
        "fixes": stall.fixes().iter().map(|(role, fix)| json!({"role": role, "fix": fix.name()})).collect::<Vec<_>>(),
    })
}

/// The delayed-ACK timer a group of stalls shows, read as `analyze` reads one
/// (`tcpstall_core::diagnosis::infer_timer`, the stacks' timers from `stacks.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimerReading {
    pub median_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub guess: TimerGuess,
    /// Measured where the timer ran, or (no timer seen) estimated: each stall's hold
    /// less the least round trip, the timer plus that exchange's share of the path's
    /// variation.
    pub estimated: bool,
}

impl TimerReading {
    fn of(samples: &VecDeque<u64>, estimated: bool) -> Option<TimerReading> {
        if samples.is_empty() {
            return None;
        }
        let delays: Vec<i64> = samples
            .iter()
            .map(|&t| i64::try_from(t).unwrap_or(i64::MAX))
            .collect();
        let (median, min, max, guess) = infer_timer(&delays);
        Some(TimerReading {
            median_ns: median.max(0) as u64,
            min_ns: min.max(0) as u64,
            max_ns: max.max(0) as u64,
            guess,
            estimated,
        })
    }

    /// The stacks it points to: `Linux`, `Windows`; `?` for none known.
    pub fn stacks(&self) -> String {
        match self.guess.stacks() {
            [] => "?".into(),
            stacks => stacks.join("/"),
        }
    }

    fn json(&self) -> Value {
        json!({
            "median_ms": ms(self.median_ns),
            "min_ms": ms(self.min_ns),
            "max_ms": ms(self.max_ns),
            "basis": if self.estimated { "estimated" } else { "measured" },
            "timer": self.guess.name(),
            "stacks": self.guess.stacks(),
        })
    }
}

/// Totals of one group of stalls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub stalls: u64,
    pub stalled_ns: u64,
    pub longest_ns: u64,
    timer_ns_sum: u64,
    timer_count: u64,
    /// The latest timers measured where they ran, and the latest estimated ones.
    measured_timers: VecDeque<u64>,
    estimated_timers: VecDeque<u64>,
}

fn keep_latest(samples: &mut VecDeque<u64>, sample: u64) {
    if samples.len() >= TIMER_SAMPLES {
        samples.pop_front();
    }
    samples.push_back(sample);
}

impl Totals {
    fn add(&mut self, stall: &Stall) {
        self.stalls += 1;
        self.stalled_ns += stall.duration_ns;
        self.longest_ns = self.longest_ns.max(stall.duration_ns);
        if let Some(t) = stall.delayer.timer_ns {
            self.timer_ns_sum += t;
            self.timer_count += 1;
            keep_latest(&mut self.measured_timers, t);
        } else if let (Some(TimerBasis::Estimated), Some(range)) =
            (stall.delayer.timer_basis, stall.delayer.timer_range)
        {
            keep_latest(&mut self.estimated_timers, range.high_ns);
        }
    }

    /// The mean delayed-ACK timer measured, when any was.
    pub fn mean_timer_ns(&self) -> Option<u64> {
        (self.timer_count > 0).then(|| self.timer_ns_sum / self.timer_count)
    }

    /// The timer these stalls show: from the timers measured where they ran when any
    /// were, else from the estimates.
    pub fn timer(&self) -> Option<TimerReading> {
        TimerReading::of(&self.measured_timers, false)
            .or_else(|| TimerReading::of(&self.estimated_timers, true))
    }

    /// The timer in the text summary: `42.1 Linux`, `~61.0 Linux` (estimated), with
    /// `unit` after the figure.
    fn timer_text(&self, unit: &str) -> String {
        self.timer().map_or("-".to_string(), |t| {
            format!(
                "{}{:.1}{unit} {}",
                if t.estimated { "~" } else { "" },
                ms(t.median_ns),
                t.stacks()
            )
        })
    }

    fn json(&self) -> Value {
        json!({
            "stalls": self.stalls,
            "stalled_ms": ms(self.stalled_ns),
            "longest_ms": ms(self.longest_ns),
            "mean_timer_ms": self.mean_timer_ns().map(ms),
            "timer": self.timer().as_ref().map(TimerReading::json),
        })
    }
}

/// What a `--fix` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixOutcome {
    pub name: String,
    pub option: String,
    pub sockets: u64,
    pub refused: u64,
    /// The cgroup it was attached to, for a running service (`--cgroup`, `--unit`).
    pub cgroup: Option<String>,
    /// For a running service: the stalls watched before the fix was attached, and
    /// after (`None` when it never was: watching ended first).
    pub before: Option<FixPhase>,
    pub after: Option<FixPhase>,
}

/// Stalls in one phase of a fix tried on a running service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixPhase {
    pub stalls: u64,
    pub stalled_ns: u64,
    pub watched_ns: u64,
}

impl FixPhase {
    /// Stalls per second watched.
    pub fn rate(&self) -> f64 {
        if self.watched_ns == 0 {
            0.0
        } else {
            self.stalls as f64 / (self.watched_ns as f64 / 1e9)
        }
    }

    fn text(&self) -> String {
        format!(
            "{} stalls in {:.1} s ({:.2}/s, {:.1} ms stalled)",
            self.stalls,
            self.watched_ns as f64 / 1e9,
            self.rate(),
            ms(self.stalled_ns)
        )
    }

    fn json(&self) -> Value {
        json!({
            "stalls": self.stalls,
            "stalled_ms": ms(self.stalled_ns),
            "watched_s": self.watched_ns as f64 / 1e9,
            "stalls_per_s": self.rate(),
        })
    }
}

/// The small sends Nagle held (every hold, whether a delayed ACK made it a stall or not):
/// per process, and per socket up to [`MAX_CONNECTIONS`] sockets.
#[derive(Debug, Default)]
pub struct NagleHolds {
    pub total: u64,
    pub processes: BTreeMap<Process, u64>,
    /// (local, remote) of the holding socket: its process and count.
    pub sockets: BTreeMap<(SocketAddr, SocketAddr), (Process, u64)>,
    /// Holds on sockets past the bound.
    pub other_sockets: u64,
}

impl NagleHolds {
    pub fn add(&mut self, hold: &NagleHold) {
        self.total += 1;
        *self.processes.entry(hold.holder.clone()).or_default() += 1;
        let key = (hold.socket.local, hold.socket.remote);
        if self.sockets.len() < MAX_CONNECTIONS || self.sockets.contains_key(&key) {
            self.sockets
                .entry(key)
                .or_insert_with(|| (hold.holder.clone(), 0))
                .1 += 1;
        } else {
            self.other_sockets += 1;
        }
    }

    fn json(&self) -> Value {
        json!({
            "total": self.total,
            "processes": self.processes.iter().map(|(p, n)| json!({"pid": p.pid, "comm": p.comm, "holds": n})).collect::<Vec<_>>(),
            "sockets": self.sockets.iter().map(|((local, remote), (p, n))| json!({
                "pid": p.pid, "comm": p.comm, "local": local.to_string(), "remote": remote.to_string(), "holds": n,
            })).collect::<Vec<_>>(),
            "other_sockets": self.other_sockets,
        })
    }
}

/// Every stall seen, totalled.
#[derive(Debug, Default)]
pub struct Summary {
    pub total: Totals,
    /// Per process and role ("holder" or "delayer").
    pub processes: BTreeMap<(Process, &'static str), Totals>,
    /// Per service (by name) and role, for the processes whose service is known; at
    /// most [`MAX_CONNECTIONS`] services, the rest under "other".
    pub services: BTreeMap<(String, &'static str), Totals>,
    /// Per connection, from the holder's side, with the holder when known.
    pub connections: BTreeMap<(SocketAddr, SocketAddr), (Option<Process>, Totals)>,
    /// Stalls of connections past [`MAX_CONNECTIONS`].
    pub other_connections: Totals,
    /// Stalls by how they were seen (evidence).
    pub by_evidence: BTreeMap<&'static str, u64>,
    pub nagle_holds: NagleHolds,
    /// Stalls both ends showed, reported once from the holder's side.
    pub seen_from_both_sides: u64,
}

fn evidence_name(evidence: Evidence) -> &'static str {
    match evidence {
        Evidence::TimerSeen => "timer-seen",
        Evidence::Inferred => "inferred",
        Evidence::DelayerSide => "delayer-side",
    }
}

impl Summary {
    pub fn add(&mut self, stall: &Stall) {
        self.total.add(stall);
        *self
            .by_evidence
            .entry(evidence_name(stall.evidence))
            .or_default() += 1;
        if let Some(holder) = &stall.holder {
            self.processes
                .entry((holder.clone(), "holder"))
                .or_default()
                .add(stall);
        }
        if let Some(p) = &stall.delayer.process {
            self.processes
                .entry((p.clone(), "delayer"))
                .or_default()
                .add(stall);
        }
        for (service, role) in [
            (&stall.holder_service, "holder"),
            (&stall.delayer.service, "delayer"),
        ] {
            if let Some(service) = service {
                let mut key = (service.name.clone(), role);
                if !self.services.contains_key(&key) && self.services.len() >= MAX_CONNECTIONS {
                    key.0 = "other".into();
                }
                self.services.entry(key).or_default().add(stall);
            }
        }
        let key = (stall.local, stall.remote);
        if self.connections.len() < MAX_CONNECTIONS || self.connections.contains_key(&key) {
            self.connections
                .entry(key)
                .or_insert_with(|| (stall.holder.clone(), Totals::default()))
                .1
                .add(stall);
        } else {
            self.other_connections.add(stall);
        }
    }

    /// The end-of-watch report as text.
    pub fn text(
        &self,
        watched_ns: u64,
        short_holds: u64,
        lost_events: u64,
        fix: Option<&FixOutcome>,
    ) -> String {
        let mut out = format!(
            "tcpstall watch: {} stalls, {:.3} s stalled, in {:.1} s watched ({} Nagle holds, {} shorter ones not counted, {} events lost)\n",
            self.total.stalls,
            self.total.stalled_ns as f64 / 1e9,
            watched_ns as f64 / 1e9,
            self.nagle_holds.total,
            short_holds,
            lost_events,
        );
        if self.by_evidence.len() > 1 || self.by_evidence.contains_key("delayer-side") {
            let seen: Vec<String> = self
                .by_evidence
                .iter()
                .map(|(name, n)| format!("{n} {name}"))
                .collect();
            let _ = writeln!(out, "seen as: {}", seen.join(", "));
        }
        if let Some(fix) = fix {
            let _ = writeln!(
                out,
                "fix {}: {} set on {} sockets{}",
                fix.name,
                fix.option,
                fix.sockets,
                if fix.refused > 0 {
                    format!(" (refused on {})", fix.refused)
                } else {
                    String::new()
                }
            );
            if let Some(cgroup) = &fix.cgroup {
                let _ = writeln!(
                    out,
                    "  attached to {}, detached when watch ended",
                    escaped(cgroup)
                );
                if let Some(before) = &fix.before {
                    let _ = writeln!(out, "  before the fix: {}", before.text());
                }
                match &fix.after {
                    Some(after) => {
                        let _ = writeln!(
                            out,
                            "  with the fix:   {} (connections opened before it keep stalling)",
                            after.text()
                        );
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "  with the fix:   never attached, watching ended first"
                        );
                    }
                }
            }
        }
        if !self.nagle_holds.processes.is_empty() {
            let _ = writeln!(
                out,
                "\nNagle holds by process (Nagle on, a send waited for an ACK):"
            );
            for (process, holds) in &self.nagle_holds.processes {
                let _ = writeln!(
                    out,
                    "  {:>7}  {:<16} {:>7} holds",
                    process.pid,
                    escaped(&process.comm),
                    holds
                );
            }
        }
        if self.total.stalls == 0 {
            return out;
        }
        let _ = writeln!(out, "\nby process:");
        let _ = writeln!(
            out,
            "  {:>7}  {:<16} {:<8} {:>7} {:>11} {:>10}  timer ms (stack)",
            "pid", "comm", "role", "stalls", "stalled ms", "longest ms"
        );
        for ((process, role), t) in &self.processes {
            let _ = writeln!(
                out,
                "  {:>7}  {:<16} {:<8} {:>7} {:>11.1} {:>10.1}  {}",
                process.pid,
                escaped(&process.comm),
                role,
                t.stalls,
                ms(t.stalled_ns),
                ms(t.longest_ns),
                t.timer_text(""),
            );
        }
        if !self.services.is_empty() {
            let _ = writeln!(out, "\nby service (cgroup):");
            for ((service, role), t) in &self.services {
                let _ = writeln!(
                    out,
                    "  {:<40} {:<8} {:>7} stalls {:>11.1} ms stalled",
                    escaped(service),
                    role,
                    t.stalls,
                    ms(t.stalled_ns),
                );
            }
        }
        let _ = writeln!(out, "\nby connection (holder's side):");
        let mut connections: Vec<_> = self.connections.iter().collect();
        connections.sort_by_key(|c| std::cmp::Reverse(c.1.1.stalled_ns));
        for ((local, remote), (holder, t)) in connections {
            let _ = writeln!(
                out,
                "  {local} -> {remote}  holder {}  {} stalls, {:.1} ms stalled, delayer's timer {}",
                holder
                    .as_ref()
                    .map_or("not on this host".into(), process_name),
                t.stalls,
                ms(t.stalled_ns),
                t.timer_text(" ms"),
            );
        }
        if self.other_connections.stalls > 0 {
            let _ = writeln!(
                out,
                "  (more connections: {} stalls)",
                self.other_connections.stalls
            );
        }
        out
    }

    /// The end-of-watch report as one JSON object.
    pub fn json(
        &self,
        watched_ns: u64,
        short_holds: u64,
        lost_events: u64,
        fix: Option<&FixOutcome>,
    ) -> Value {
        json!({
            "type": "summary",
            "watched_s": watched_ns as f64 / 1e9,
            "total": self.total.json(),
            "short_holds": short_holds,
            "nagle_holds": self.nagle_holds.json(),
            "by_evidence": self.by_evidence,
            "seen_from_both_sides": self.seen_from_both_sides,
            "lost_events": lost_events,
            "fix": fix.map(|f| json!({
                "fix": f.name, "option": f.option, "sockets": f.sockets, "refused": f.refused,
                "cgroup": f.cgroup,
                "before": f.before.as_ref().map(FixPhase::json),
                "after": f.after.as_ref().map(FixPhase::json),
            })),
            "processes": self.processes.iter().map(|((p, role), t)| {
                let mut v = t.json();
                v["pid"] = json!(p.pid);
                v["comm"] = json!(p.comm);
                v["role"] = json!(role);
                v
            }).collect::<Vec<_>>(),
            "services": self.services.iter().map(|((name, role), t)| {
                let mut v = t.json();
                v["service"] = json!(name);
                v["role"] = json!(role);
                v
            }).collect::<Vec<_>>(),
            "connections": self.connections.iter().map(|((local, remote), (holder, t))| {
                let mut v = t.json();
                v["local"] = json!(local.to_string());
                v["remote"] = json!(remote.to_string());
                v["holder"] = holder.as_ref().map_or(Value::Null, |h| json!({"pid": h.pid, "comm": h.comm}));
                v
            }).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stall::Delayer;
    use tcpstall_core::detect::StallClass;

    pub(crate) fn stall(comm: &str, local_port: u16, duration_ms: u64) -> Stall {
        Stall {
            class: StallClass::NagleDelayedAck,
            holder: Some(Process {
                pid: 7,
                comm: comm.into(),
            }),
            holder_service: None,
            local: SocketAddr::from(([127, 0, 0, 1], local_port)),
            remote: SocketAddr::from(([127, 0, 0, 1], 8000)),
            held_bytes: 6,
            mss: 65483,
            start_ns: 1_000_000_000,
            duration_ns: duration_ms * 1_000_000,
            smoothed_rtt_us: 40,
            delayer: Delayer {
                endpoint: SocketAddr::from(([127, 0, 0, 1], 8000)),
                process: Some(Process {
                    pid: 8,
                    comm: "server".into(),
                }),
                timer_ns: Some(40_000_000),
                answered_after_ns: None,
                timer_basis: Some(TimerBasis::Fired),
                timer_range: None,
                service: None,
            },
            evidence: Evidence::TimerSeen,
        }
    }

    #[test]
    fn totals_per_process_role_and_connection() {
        let mut s = Summary::default();
        s.add(&stall("client", 40000, 41));
        s.add(&stall("client", 40000, 43));
        s.add(&stall("client", 40001, 45));
        assert_eq!(s.total.stalls, 3);
        assert_eq!(s.total.longest_ns, 45_000_000);
        let holder = &s.processes[&(
            Process {
                pid: 7,
                comm: "client".into(),
            },
            "holder",
        )];
        assert_eq!(holder.stalled_ns, 129_000_000);
        assert_eq!(holder.mean_timer_ns(), Some(40_000_000));
        assert_eq!(s.processes.len(), 2, "holder and delayer");
        assert_eq!(s.connections.len(), 2);
        let text = s.text(2_000_000_000, 1, 0, None);
        assert!(text.starts_with("tcpstall watch: 3 stalls, 0.129 s stalled"));
        assert!(!text.contains("seen as"), "one kind of evidence: {text}");
        assert!(text.contains("delayer"));
        let json = s.json(2_000_000_000, 1, 0, None);
        assert_eq!(json["total"]["stalls"], 3);
        assert_eq!(json["connections"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn names_chosen_by_a_local_user_cannot_forge_the_terminal() {
        let name = "\x1b[2J\x1b]0;pwn\x07";
        let mut st = stall(name, 40000, 41);
        st.holder_service = Some(Service::from_cgroup("/system.slice/a\nb.service"));
        let line = stall_line(&st, &Clock::new());
        assert!(
            line.contains("holder \\x1b[2J\\x1b]0;pwn\\x07[7]"),
            "{line}"
        );
        let mut s = Summary::default();
        s.add(&st);
        s.add(&stall("evil\n12:00:00.000    41.0 ms forged", 40001, 41));
        let text = s.text(2_000_000_000, 1, 0, None);
        for text in [line.as_str(), text.as_str()] {
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "a control character reached the text: {text:?}"
            );
        }
        assert!(
            !text.lines().any(|l| l.starts_with("12:00:00.000")),
            "{text}"
        );
        assert!(text.contains("evil\\x0a12:00"), "{text}");
    }

    #[test]
    fn stalls_named_by_service() {
        let mut st = stall("client", 40000, 41);
        st.holder_service = Some(Service::from_cgroup("/system.slice/web.service"));
        st.delayer.service = Some(Service::from_cgroup(
            "/system.slice/docker-4f9a2c1d7b3e8f60a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcdef01.scope",
        ));
        let clock = Clock::new();
        let line = stall_line(&st, &clock);
        assert!(
            line.contains("holder client[7] (web.service) 127.0.0.1:40000"),
            "{line}"
        );
        assert!(line.contains("server[8] (docker:4f9a2c1d7b3e)"), "{line}");
        let v = stall_json(&st, &clock);
        assert_eq!(v["holder"]["service"]["name"], "web.service");
        assert_eq!(v["holder"]["service"]["kind"], "systemd-unit");
        assert_eq!(
            v["holder"]["service"]["cgroup"],
            "/system.slice/web.service"
        );
        assert_eq!(v["delayer"]["service"]["kind"], "container");
        assert!(stall_json(&stall("c", 1, 41), &clock)["holder"]["service"].is_null());
        let mut s = Summary::default();
        s.add(&st);
        s.add(&st);
        assert_eq!(s.services[&("web.service".to_string(), "holder")].stalls, 2);
        assert_eq!(
            s.services[&("docker:4f9a2c1d7b3e".to_string(), "delayer")].stalls,
            2
        );
        assert!(s.text(1, 0, 0, None).contains("by service (cgroup):"));
        let json = s.json(1, 0, 0, None);
        assert_eq!(json["services"][0]["service"], "docker:4f9a2c1d7b3e");
        assert_eq!(json["services"][1]["stalls"], 2);
    }

    #[test]
    fn a_stall_as_a_line_and_as_json() {
        let clock = Clock::new();
        let s = stall("client", 40000, 41);
        let line = stall_line(&s, &clock);
        assert!(line.contains(
            "nagle-delayed-ack holder client[7] 127.0.0.1:40000 -> 127.0.0.1:8000, 6 B held"
        ));
        assert!(line.contains("timer fired after 40.0 ms"));
        let v = stall_json(&s, &clock);
        assert_eq!(v["class"], "nagle-delayed-ack");
        assert_eq!(v["holder"]["comm"], "client");
        assert_eq!(v["delayer"]["process"]["comm"], "server");
        assert_eq!(v["evidence"], "timer-seen");
        assert_eq!(v["fixes"][1]["fix"], "tcp-nodelay");
    }

    #[test]
    fn a_stall_seen_from_the_delayer_with_a_remote_holder() {
        let mut st = stall("x", 40000, 41);
        st.holder = None;
        st.evidence = Evidence::DelayerSide;
        st.delayer.answered_after_ns = Some(60_000);
        let clock = Clock::new();
        let line = stall_line(&st, &clock);
        assert!(
            line.contains("holder 127.0.0.1:40000 -> 127.0.0.1:8000"),
            "{line}"
        );
        assert!(
            line.contains("came 0.060 ms later (seen by the delayer)"),
            "{line}"
        );
        let v = stall_json(&st, &clock);
        assert_eq!(v["evidence"], "delayer-side");
        assert!(v["holder"]["pid"].is_null());
        assert_eq!(v["delayer"]["answered_after_ms"], 0.06);
        let mut s = Summary::default();
        s.add(&st);
        assert_eq!(s.processes.len(), 1, "the delayer only");
        let text = s.text(1, 0, 0, None);
        assert!(text.contains("seen as: 1 delayer-side"), "{text}");
        assert!(text.contains("holder not on this host"), "{text}");
        assert_eq!(s.json(1, 0, 0, None)["by_evidence"]["delayer-side"], 1);
    }

    #[test]
    fn a_remote_delayers_timer_is_an_estimate_said_as_one() {
        use crate::stall::TimerRange;
        let mut st = stall("client", 40000, 92);
        st.evidence = Evidence::Inferred;
        st.delayer.process = None;
        st.delayer.timer_ns = None;
        st.delayer.timer_basis = Some(TimerBasis::Estimated);
        st.delayer.timer_range = Some(TimerRange {
            low_ns: 36_000_000,
            high_ns: 47_100_000,
        });
        let clock = Clock::new();
        let line = stall_line(&st, &clock);
        assert!(
            line.contains("timer held the ACK about 36.0-47.1 ms (estimated: the hold less the round trip this host measured; remote)"),
            "{line}"
        );
        let v = stall_json(&st, &clock);
        assert!(v["delayer"]["timer_ms"].is_null());
        assert_eq!(v["delayer"]["timer_basis"], "estimated");
        assert_eq!(v["delayer"]["timer_estimate_ms"]["high"], 47.1);
        let mut s = Summary::default();
        for _ in 0..3 {
            s.add(&st);
        }
        let t = s.total.timer().unwrap();
        assert!(t.estimated);
        assert_eq!((t.median_ns, t.stacks().as_str()), (47_100_000, "Linux"));
        assert_eq!(s.total.mean_timer_ns(), None, "no timer measured");
        let text = s.text(1, 0, 0, None);
        assert!(text.contains("delayer's timer ~47.1 ms Linux"), "{text}");
        // A timer measured where it ran is read in its place.
        s.add(&stall("client", 40000, 92));
        let t = s.total.timer().unwrap();
        assert!(!t.estimated);
        assert_eq!(t.median_ns, 40_000_000);
        assert_eq!(s.json(1, 0, 0, None)["total"]["timer"]["basis"], "measured");
    }

    #[test]
    fn the_timer_read_names_the_stack_as_analyze_does() {
        let mut s = Summary::default();
        for timer_ms in [200, 201, 199] {
            let mut st = stall("client", 40000, 250);
            st.delayer.timer_ns = Some(timer_ms * 1_000_000);
            s.add(&st);
        }
        let delayer = &s.processes[&(
            Process {
                pid: 8,
                comm: "server".into(),
            },
            "delayer",
        )];
        assert_eq!(delayer.timer().unwrap().stacks(), "Windows");
        let json = s.json(1, 0, 0, None);
        assert_eq!(json["total"]["timer"]["timer"], "200ms");
        assert!(s.text(1, 0, 0, None).contains("200.0 Windows"));
    }

    #[test]
    fn nagle_holds_per_process_and_socket() {
        use crate::event::NagleHold;
        let hold = |pid: u32, port: u16| NagleHold::on_loopback(pid, "java", port, 100_000);
        let mut s = Summary::default();
        s.nagle_holds.add(&hold(5, 40000));
        s.nagle_holds.add(&hold(5, 40000));
        s.nagle_holds.add(&hold(5, 40001));
        s.nagle_holds.add(&hold(6, 40002));
        assert_eq!(s.nagle_holds.total, 4);
        assert_eq!(s.nagle_holds.sockets.len(), 3);
        let text = s.text(1, 4, 0, None);
        assert!(
            text.contains("(4 Nagle holds, 4 shorter ones not counted"),
            "{text}"
        );
        assert!(text.contains("java                   3 holds"), "{text}");
        let json = s.json(1, 4, 0, None);
        assert_eq!(json["nagle_holds"]["total"], 4);
        assert_eq!(json["nagle_holds"]["processes"][0]["holds"], 3);
        assert_eq!(json["nagle_holds"]["sockets"][0]["holds"], 2);
    }

    #[test]
    fn connections_beyond_the_bound_are_counted_together() {
        let mut s = Summary::default();
        for port in 0..(MAX_CONNECTIONS as u32 + 5) {
            let mut st = stall("c", 1, 10);
            st.local = SocketAddr::from(([10, 0, (port >> 8) as u8, port as u8], 1));
            s.add(&st);
        }
        assert_eq!(s.connections.len(), MAX_CONNECTIONS);
        assert_eq!(s.other_connections.stalls, 5);
    }
}
