//! `tcpstall watch` where stalls happen: real programs over the lab's delay line, whose
//! delay varies per packet, watched from the three places an agent stands: the whole
//! host, the holder alone (`watch -- HOLDER`) and the delayer alone (`watch -- DELAYER`),
//! all three over the same run.
//!
//! The programs: seed 002's Java client (two writes, then a read) and echo server, the
//! Java HTTP keep-alive server (headers, then body) fetched by curl over one connection
//! (when curl is installed), and the same client against an echo that answers each piece
//! at once (no delayed ACK anywhere): `echo_pair pieces`, in Rust, since a JVM that the
//! host pauses for longer than the timer does delay its ACK (an echo in Java on a host
//! under a load of 12 answered 80 ms late, its timer fired, and the stalls that followed
//! were real). An echo run counts only when its every round trip was fast. The paths: a
//! LAN (1 ms, up to 30% more), 20 ms varying by 0 to 8 ms, and 60 ms varying by 0 to
//! 40 ms.
//!
//! The truth is the programs' own timings. A round trip the client timed is slow or fast
//! by what is left of it once the time its packets spent on the path is taken away (each
//! packet's departure and arrival at the two ends of the line, from captures at both):
//! the time it waited at the ends. A delayed-ACK timer leaves at least 36 ms there
//! (Linux's 40 ms less a jiffy); a round trip nothing held, the programs' and kernels'
//! turnaround. Slow is more than three quarters of a 40 ms timer, fast less than
//! half; a run with a round trip in between, or slow without a delayed ACK on its
//! way, cannot be judged and is recorded again (a bounded number of times, saying so).
//! No wall-clock threshold: a busy host lengthens the path and the turnaround, and both
//! are measured in the same run. The delayer's true timer is its ACK's wait at its end:
//! from the segment's arrival on its interface to the pure ACK's departure.
//!
//! Must hold, from each position and on each path: as many stalls as slow round trips,
//! each in a slow round trip (the delayer alone is held to those whose answer the host
//! did not delay by more than half the turnaround its rule allows, column `lagged`
//! counting the others, whose stalls may be reported or not; a run where a position is
//! off by one event, which a busy host can make the kernel skip, is recorded again); the timer reported within 5 ms of the true one (median); no
//! stall for the echo. A failing run's watch output, program output and captures are kept
//! under `target/tmp/`, whose path the failure names.

mod common;

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;
use tcpstall_lab::capture::{Capture, Point, write_pcap};
use tcpstall_lab::delayline::Variation;
use tcpstall_lab::held;
use tcpstall_lab::net::Net;
use tcpstall_lab::netns::{Namespace, run_in};
use tcpstall_lab::programs::{Java, Program, parse_round_trips};

/// A path: its round trip and how much more each one-way delay may take.
#[derive(Clone, Copy)]
struct Profile {
    name: &'static str,
    rtt_ms: f64,
    variation: f64,
}

const PROFILES: [Profile; 3] = [
    Profile {
        name: "LAN 1 ms +0-30%",
        rtt_ms: 1.0,
        variation: 0.30,
    },
    Profile {
        name: "20 ms +0-8 ms",
        rtt_ms: 20.0,
        variation: 0.40,
    },
    Profile {
        name: "60 ms +0-40 ms",
        rtt_ms: 60.0,
        variation: 40.0 / 60.0,
    },
];

/// Round trips per run (as `lab --suite varying`).
const ROUND_TRIPS: u32 = 20;
/// Linux's shortest delayed-ACK timer (TCP_DELACK_MIN, include/net/tcp.h).
const DELACK_MIN_MS: f64 = 40.0;
/// Slow: the round trip waited at its ends for more than three quarters of that timer.
const SLOW_WAIT_MS: f64 = DELACK_MIN_MS * 0.75;
/// Fast: it waited less than half of it.
const FAST_WAIT_MS: f64 = DELACK_MIN_MS * 0.5;
/// The host's turnaround that `watch` allows the answer of a delayed ACK (G, in ms).
const HOST_TURNAROUND_MS: f64 = tcpstall_core::path::HOST_TURNAROUND as f64 / 1e6;
/// Runs of one case at most when a round trip falls between fast and slow.
const MAX_ATTEMPTS: u32 = 4;
/// The reported timer's median error that the watch must stay within.
const TIMER_TOLERANCE_MS: f64 = 5.0;
/// A JVM starting and a client making its round trips on a loaded host: far above.
const RUN_LIMIT: Duration = Duration::from_secs(180);
/// A watch stopping (its summary, its cgroup removed): far above.
const STOP_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    /// Seed 002's client (the holder) and echo server (the delayer).
    Seed002,
    /// The keep-alive server (the holder) and curl (the delayer).
    KeepAliveCurl,
    /// Seed 002's client and an echo answering each piece at once: no delayer.
    PieceEcho,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Seed002 => "seed 002 pair",
            Workload::KeepAliveCurl => "keep-alive + curl",
            Workload::PieceEcho => "piece echo",
        }
    }

    /// Whether the server is the holder (else the client is).
    fn server_holds(self) -> bool {
        self == Workload::KeepAliveCurl
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Position {
    Host,
    Holder,
    Delayer,
}

impl Position {
    fn name(self) -> &'static str {
        match self {
            Position::Host => "whole host",
            Position::Holder => "holder alone",
            Position::Delayer => "delayer alone",
        }
    }

    /// Its files' stem: `.jsonl` for watch's output (and the command's), `.stderr`.
    fn file(self) -> &'static str {
        match self {
            Position::Host => "watch-host",
            Position::Holder => "watch-holder",
            Position::Delayer => "watch-delayer",
        }
    }
}

fn is_root() -> bool {
    let caps = common::effective_capabilities();
    caps & (1 << 12) != 0
        && caps & (1 << 13) != 0
        && caps & (1 << 21) != 0
        && Path::new("/dev/net/tun").exists()
        && Command::new("ip").arg("-V").output().is_ok()
}

fn has(program: &str, version_flag: &str) -> bool {
    Command::new(program)
        .arg(version_flag)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A child process killed (SIGTERM, then SIGKILL) if it still runs when dropped, its
/// standard output read line by line on a thread of its own.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn spawn(
        namespace: Option<&Arc<Namespace>>,
        line: &[String],
        stderr: &Path,
    ) -> Result<Running, String> {
        let err = std::fs::File::create(stderr).map_err(|e| e.to_string())?;
        let mut child = run_in(namespace, || {
            Command::new(&line[0])
                .args(&line[1..])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::from(err))
                .spawn()
                .map_err(|e| tcpstall_lab::LabError::Failed(format!("{}: {e}", line[0])))
        })
        .map_err(|e| e.to_string())?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().take(1_000_000) {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Running {
            child,
            lines: rx,
            seen: Vec::new(),
        })
    }

    /// Waits for a line containing `needle`, keeping every line.
    fn wait_for(&mut self, needle: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        return Ok(());
                    }
                }
                Err(_) => return Err(format!("no line with {needle:?}: {:?}", self.seen)),
            }
        }
    }

    /// Waits for the process to end and its output to close; every line it printed.
    fn finish(
        mut self,
        deadline: Instant,
    ) -> Result<(std::process::ExitStatus, Vec<String>), String> {
        loop {
            match self.lines.recv_timeout(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10)),
            ) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    return Err(format!("did not finish in time: {:?}", self.seen));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Ok((status, std::mem::take(&mut self.seen)));
            }
            if Instant::now() >= deadline {
                return Err("did not exit in time".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn terminate(&self) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One round trip as the client timed it, and what the captures show of it.
#[derive(Clone, Debug)]
struct RoundTrip {
    start: i64,
    end: i64,
    timed_ms: f64,
    /// Its packets' time on the path, along the chain that led to its end.
    path_ms: f64,
    /// The delayer's longest wait before a pure ACK on that chain: its timer.
    ack_wait_ms: Option<f64>,
    /// That ACK's way to the holder and the answer's way back.
    answer: Option<held::Answer>,
}

impl RoundTrip {
    fn waited_ms(&self) -> f64 {
        self.timed_ms - self.path_ms
    }

    /// What the host added to the answer of its delayed ACK beyond the profile's path:
    /// the holder's turnaround and each crossing's time past the profile's longest
    /// one-way delay (a delay line starved of the CPU), in ms.
    fn host_lag_ms(&self, profile: Profile) -> Option<f64> {
        let a = self.answer?;
        let longest_one_way = profile.rtt_ms / 2.0 * (1.0 + profile.variation);
        Some(
            a.turnaround_ms
                + (a.ack_crossing_ms - longest_one_way).max(0.0)
                + (a.answer_crossing_ms - longest_one_way).max(0.0),
        )
    }

    /// Whether the delayer alone can be held to this round trip: `watch` takes the
    /// segment that answers a delayed ACK for a released one when it comes within
    /// RFC 6298's bound over the connection's round trips, SRTT + max(G, 4 RTTVAR), with
    /// the host's turnaround as G (docs/watch.md). A host that added more than half of G
    /// beyond the profile's path (the other half covers the smoothed round trip's own
    /// distance from the profile's longest) put the answer where the rule does not
    /// promise to find it.
    fn judged_from_the_delayer(&self, profile: Profile) -> bool {
        self.host_lag_ms(profile)
            .is_some_and(|lag| lag <= HOST_TURNAROUND_MS / 2.0)
    }

    fn truth(&self) -> Truth {
        let waited = self.waited_ms();
        if waited <= FAST_WAIT_MS {
            Truth::Fast
        } else if waited >= SLOW_WAIT_MS && self.ack_wait_ms.is_some_and(|w| w >= SLOW_WAIT_MS) {
            Truth::Slow
        } else {
            Truth::Unclear
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Truth {
    Fast,
    Slow,
    Unclear,
}

/// A stall watch reported, as the test reads it.
#[derive(Clone, Debug)]
struct Reported {
    end: i64,
    evidence: String,
    timer_ms: Option<f64>,
    estimate: Option<(f64, f64)>,
}

fn stalls_in(lines: &[String], client_port: u16, server_port: u16) -> Vec<Reported> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "stall")
        .filter(|v| {
            let ports: Vec<u16> = [&v["holder"]["local"], &v["holder"]["remote"]]
                .iter()
                .filter_map(|e| e.as_str()?.rsplit(':').next()?.parse().ok())
                .collect();
            ports.contains(&client_port) && ports.contains(&server_port)
        })
        .map(|v| Reported {
            end: v["time_unix_ns"].as_i64().unwrap_or(0),
            evidence: v["evidence"].as_str().unwrap_or("").to_string(),
            timer_ms: v["delayer"]["timer_ms"].as_f64(),
            estimate: v["delayer"]["timer_estimate_ms"]
                .as_object()
                .and_then(|o| Some((o.get("low")?.as_f64()?, o.get("high")?.as_f64()?))),
        })
        .collect()
}

/// One position's result over one run.
#[derive(Default, Clone)]
struct Judged {
    /// Slow round trips this position is held to.
    slow: usize,
    /// Slow round trips it is not held to (the delayer alone, on a host that lagged),
    /// and the stalls it reported in them.
    excused: usize,
    found_excused: usize,
    reported: usize,
    /// Stalls in slow round trips that gave no timer, measured or estimated.
    untimed: usize,
    /// Stalls outside slow round trips, or a second one in the same round trip.
    extra: usize,
    missed: usize,
    timer_errors: Vec<f64>,
    midpoint_errors: Vec<f64>,
    evidence: Vec<String>,
}

impl Judged {
    fn median_error(&self) -> Option<f64> {
        median(&self.timer_errors)
    }

    fn exact(&self) -> bool {
        self.extra == 0
            && self.missed == 0
            && self.reported - self.found_excused == self.slow
            && self.untimed == 0
    }
}

fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// Slack when placing a stall's end in a round trip: the watch converts its kernel clock
/// to the wall clock once.
const PLACE_SLACK_NS: i64 = 2_000_000;

fn judge(
    round_trips: &[RoundTrip],
    stalls: &[Reported],
    held_to: impl Fn(&RoundTrip) -> bool,
) -> Judged {
    let slow = |r: &&RoundTrip| r.truth() == Truth::Slow;
    let mut j = Judged {
        slow: round_trips
            .iter()
            .filter(slow)
            .filter(|r| held_to(r))
            .count(),
        excused: round_trips
            .iter()
            .filter(slow)
            .filter(|r| !held_to(r))
            .count(),
        reported: stalls.len(),
        ..Judged::default()
    };
    let mut per_trip = vec![0usize; round_trips.len()];
    for s in stalls {
        j.evidence.push(s.evidence.clone());
        let Some(i) = round_trips
            .iter()
            .position(|r| s.end >= r.start - PLACE_SLACK_NS && s.end <= r.end + PLACE_SLACK_NS)
        else {
            j.extra += 1;
            continue;
        };
        per_trip[i] += 1;
        let r = &round_trips[i];
        if r.truth() != Truth::Slow || per_trip[i] > 1 {
            j.extra += 1;
            continue;
        }
        if !held_to(r) {
            j.found_excused += 1;
        }
        let Some(truth) = r.ack_wait_ms else { continue };
        if let Some(t) = s.timer_ms {
            j.timer_errors.push((t - truth).abs());
        } else if let Some((low, high)) = s.estimate {
            // The docs promise a range holding the timer: the distance outside it.
            j.timer_errors
                .push((low - truth).max(truth - high).max(0.0));
            j.midpoint_errors.push(((low + high) / 2.0 - truth).abs());
        } else {
            j.untimed += 1;
        }
    }
    for (i, r) in round_trips.iter().enumerate() {
        if r.truth() == Truth::Slow && per_trip[i] == 0 && held_to(r) {
            j.missed += 1;
        }
    }
    j
}

/// What one run gave: the truth and each position's stalls.
struct Run {
    round_trips: Vec<RoundTrip>,
    judged: Vec<(Position, Judged)>,
    notes: String,
}

struct Lab {
    net: Net,
    java: Java,
    tcpstall: String,
    echo_pair: PathBuf,
}

/// Runs one workload once over the path as set, with the three watches, keeping every
/// output in `dir`.
fn run_once(lab: &Lab, profile: Profile, workload: Workload, dir: &Path) -> Result<Run, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let port = common::watch::free_port();
    let server_ip = lab.net.server_ip;
    let watch_prefix = || -> Vec<String> {
        vec![
            lab.tcpstall.clone(),
            "watch".into(),
            "--json".into(),
            "--".into(),
        ]
    };
    let server_line = match workload {
        Workload::Seed002 => lab
            .java
            .command_line(&Program::Seed002.server_args(server_ip, port, 1)),
        Workload::KeepAliveCurl => lab
            .java
            .command_line(&Program::KeepAlive.server_args(server_ip, port, 1)),
        Workload::PieceEcho => vec![
            lab.echo_pair.display().to_string(),
            "pieces".into(),
            "0".into(),
            port.to_string(),
            server_ip.to_string(),
        ],
    };
    let client_line = match workload {
        Workload::Seed002 | Workload::PieceEcho => lab
            .java
            .command_line(&Program::Seed002.client_args(server_ip, port, ROUND_TRIPS)),
        Workload::KeepAliveCurl => {
            let mut line: Vec<String> = [
                "curl",
                "-s",
                "-w",
                "RTT:%{time_total} pre:%{time_pretransfer}\\n",
            ]
            .map(String::from)
            .to_vec();
            for _ in 0..ROUND_TRIPS {
                line.extend(["-o".into(), "/dev/null".into()]);
                line.push(format!("http://{server_ip}:{port}/"));
            }
            line
        }
    };
    let (server_position, client_position) = if workload.server_holds() {
        (Position::Holder, Position::Delayer)
    } else {
        (Position::Delayer, Position::Holder)
    };
    let deadline = Instant::now() + RUN_LIMIT;

    // The whole host, attached once its metrics answer.
    let metrics = common::watch::free_port();
    let host_line: Vec<String> = [
        lab.tcpstall.as_str(),
        "watch",
        "--json",
        "--port",
        &port.to_string(),
        "--prometheus",
        &metrics.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let host = Running::spawn(None, &host_line, &dir.join("watch-host.stderr"))?;
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", metrics)).is_ok() {
            break;
        }
        if Instant::now() > deadline {
            return Err("the whole-host watch did not start".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let client_capture =
        Capture::start_at(lab.net.client_ns.clone(), Point::Client).map_err(|e| e.to_string())?;
    let server_capture =
        Capture::start_at(lab.net.server_ns.clone(), Point::Server).map_err(|e| e.to_string())?;

    let mut server_cmd = watch_prefix();
    server_cmd.extend(server_line);
    let mut server = Running::spawn(
        lab.net.server_ns.as_ref(),
        &server_cmd,
        &dir.join(format!("{}.stderr", server_position.file())),
    )?;
    let ready = match workload {
        Workload::PieceEcho => "listening",
        _ => "startup",
    };
    server.wait_for(ready, RUN_LIMIT)?;
    let mut client_cmd = watch_prefix();
    client_cmd.extend(client_line);
    let client = Running::spawn(
        lab.net.client_ns.as_ref(),
        &client_cmd,
        &dir.join(format!("{}.stderr", client_position.file())),
    )?;
    let (client_status, client_out) = client.finish(deadline)?;
    let (server_status, server_out) = server.finish(deadline)?;
    // The last timers and segments, and a late ring-buffer record, reach the host's watch.
    std::thread::sleep(Duration::from_millis(500));
    host.terminate();
    let (_, host_out) = host.finish(Instant::now() + STOP_LIMIT)?;
    let client_packets = client_capture.finish().map_err(|e| e.to_string())?;
    let server_packets = server_capture.finish().map_err(|e| e.to_string())?;

    let outputs = [
        (Position::Host, host_out),
        (client_position, client_out),
        (server_position, server_out),
    ];
    for (position, lines) in &outputs {
        std::fs::write(
            dir.join(format!("{}.jsonl", position.file())),
            lines.join("\n") + "\n",
        )
        .map_err(|e| e.to_string())?;
    }
    for (name, packets) in [
        ("client.pcap", &client_packets),
        ("server.pcap", &server_packets),
    ] {
        let file = std::fs::File::create(dir.join(name)).map_err(|e| e.to_string())?;
        write_pcap(std::io::BufWriter::new(file), packets).map_err(|e| e.to_string())?;
    }
    if !client_status.success() || !server_status.success() {
        return Err(format!(
            "a program failed: client {client_status}, server {server_status}"
        ));
    }

    // The truth: the client's timings, placed and split with the captures.
    let (client, server) = held::client_of(&client_packets, Some(port))
        .ok_or("no SYN of the client in the client's capture")?;
    let client_port = client.1;
    let client_seen = held::connection(&client_packets, client, server);
    let server_seen = held::connection(&server_packets, client, server);
    let crossings = held::crossings(&client_seen, &server_seen);
    let program_lines = &outputs[1].1;
    let windows: Vec<(i64, f64)> = match workload {
        Workload::KeepAliveCurl => {
            let requests: Vec<i64> = client_seen
                .iter()
                .filter(|s| s.outbound && s.payload > 0)
                .map(|s| s.time)
                .collect();
            let timed: Vec<f64> = program_lines
                .iter()
                .filter_map(|l| {
                    let rest = l.strip_prefix("RTT:")?;
                    let (total, pre) = rest.split_once(" pre:")?;
                    Some((total.parse::<f64>().ok()? - pre.parse::<f64>().ok()?) * 1e3)
                })
                .collect();
            if timed.len() != requests.len() {
                return Err(format!(
                    "curl timed {} transfers, the capture has {} requests",
                    timed.len(),
                    requests.len()
                ));
            }
            requests.into_iter().zip(timed).collect()
        }
        _ => {
            let lines: Vec<String> = program_lines
                .iter()
                .filter(|l| l.starts_with("RTT:"))
                .cloned()
                .collect();
            parse_round_trips(&lines)
                .map_err(|e| e.to_string())?
                .iter()
                .map(|m| (m.start, m.latency.as_secs_f64() * 1e3))
                .collect()
        }
    };
    if windows.len() != ROUND_TRIPS as usize {
        return Err(format!(
            "the client timed {} round trips of {ROUND_TRIPS}",
            windows.len()
        ));
    }
    let mut round_trips = Vec::new();
    for (i, &(start, timed_ms)) in windows.iter().enumerate() {
        let end = start + (timed_ms * 1e6) as i64;
        // Its last arrival is the last before the next round trip begins: curl's timing,
        // placed by its request's departure, can end a fraction of a millisecond early.
        let next = windows.get(i + 1).map_or(i64::MAX, |w| w.0);
        let held::Chain {
            path_ms,
            ack_wait_ms,
            answer,
        } = held::chain(&crossings, start, next)
            .ok_or_else(|| format!("no packets of the round trip starting at {start}"))?;
        round_trips.push(RoundTrip {
            start,
            end,
            timed_ms,
            path_ms,
            ack_wait_ms,
            answer,
        });
    }
    let mut notes = String::new();
    for (i, r) in round_trips.iter().enumerate() {
        let _ = writeln!(
            notes,
            "{i:2} timed {:8.3} ms, path {:8.3}, waited {:8.3}, delayer's ACK wait {:>8}, host lag on its answer {:>8}, {:?}",
            r.timed_ms,
            r.path_ms,
            r.waited_ms(),
            r.ack_wait_ms.map_or("-".into(), |w| format!("{w:.3}")),
            r.host_lag_ms(profile)
                .map_or("-".into(), |w| format!("{w:.3}")),
            r.truth()
        );
    }
    let judged = outputs
        .iter()
        .map(|(position, lines)| {
            (
                *position,
                judge(&round_trips, &stalls_in(lines, client_port, port), |r| {
                    *position != Position::Delayer || r.judged_from_the_delayer(profile)
                }),
            )
        })
        .collect();
    std::fs::write(dir.join("truth.txt"), &notes).map_err(|e| e.to_string())?;
    Ok(Run {
        round_trips,
        judged,
        notes,
    })
}

#[test]
#[ignore = "needs root, network namespaces, BTF, a JDK"]
fn every_stall_from_every_position_on_varying_paths() {
    if !is_root() {
        common::skipped(format_args!(
            "skipped: needs root (namespaces, veth, TUN, AF_PACKET)"
        ));
        return;
    }
    if common::watch::can_watch("watch over the delay line").is_none() {
        return;
    }
    if !has("java", "-version") || !has("javac", "-version") {
        common::skipped(format_args!(
            "skipped: runs Java programs: no java/javac (apt-get install default-jdk-headless)"
        ));
        return;
    }
    let mut workloads = vec![Workload::Seed002];
    if has("curl", "--version") {
        workloads.push(Workload::KeepAliveCurl);
    } else {
        common::skipped(format_args!(
            "skipped the keep-alive server with curl: no curl (apt-get install curl)"
        ));
    }
    workloads.push(Workload::PieceEcho);

    let java = Java::compile().expect("compile the lab's Java programs");
    let first = PROFILES[0];
    let one_way = Duration::from_secs_f64(first.rtt_ms / 2e3);
    let net = Net::delay_line(one_way, one_way).expect("the lab's delay line");
    let lab = Lab {
        net,
        java,
        tcpstall: env!("CARGO_BIN_EXE_tcpstall").to_string(),
        echo_pair: common::watch::echo_pair(),
    };
    let keep = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("watch-paths-{}", std::process::id()));

    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<16} {:<18} {:<14} {:>8} {:>8} {:>6} {:>6} {:>6} {:>10}  evidence",
        "profile",
        "programs",
        "position",
        "measured",
        "reported",
        "extra",
        "missed",
        "lagged",
        "timer err"
    );
    let mut failures = Vec::new();
    for profile in PROFILES {
        let one_way = Duration::from_secs_f64(profile.rtt_ms / 2e3);
        lab.net
            .set_delays(one_way, one_way)
            .expect("set the delays");
        for &workload in &workloads {
            let case = format!("{} / {}", profile.name, workload.name());
            let mut attempt = 0;
            let run = loop {
                attempt += 1;
                lab.net
                    .set_variation(Variation {
                        fraction: profile.variation,
                        seed: u64::from(attempt) + 1,
                    })
                    .expect("set the variation");
                let dir = keep.join(format!(
                    "{}-{}-{attempt}",
                    profile.rtt_ms,
                    workload.name().replace([' ', '+'], "")
                ));
                match run_once(&lab, profile, workload, &dir) {
                    Ok(run) => {
                        let unclear = run
                            .round_trips
                            .iter()
                            .filter(|r| r.truth() == Truth::Unclear)
                            .count();
                        let echo_slow = workload == Workload::PieceEcho
                            && run.round_trips.iter().any(|r| r.truth() != Truth::Fast);
                        // Every slow round trip past what the delayer alone is held to.
                        let delayer_unjudged = run
                            .judged
                            .iter()
                            .any(|(p, j)| *p == Position::Delayer && j.slow == 0 && j.excused > 0);
                        // A position off by one event: on a busy host the kernel may not
                        // run a program of the watch for one event (docs/watch.md, limits).
                        let one_event_lost = run.judged.iter().any(|(_, j)| {
                            !j.exact() && j.extra <= 1 && j.missed <= 1 && j.untimed == 0
                        });
                        if (unclear == 0 && !echo_slow && !delayer_unjudged && !one_event_lost)
                            || attempt >= MAX_ATTEMPTS
                        {
                            break Ok((run, dir));
                        }
                        common::skipped(format_args!(
                            "{case}: run {attempt} recorded again: {unclear} round trips between fast and slow{}{} (kept in {})\n{}",
                            if echo_slow { ", or the echo slow" } else { "" },
                            if delayer_unjudged {
                                ", or the host lagged on every answer the delayer alone would judge"
                            } else if one_event_lost {
                                ", or a position was off by one event"
                            } else {
                                ""
                            },
                            dir.display(),
                            run.notes
                        ));
                    }
                    Err(e) if attempt >= MAX_ATTEMPTS => break Err((e, dir)),
                    Err(e) => common::skipped(format_args!(
                        "{case}: run {attempt} failed, recorded again: {e} (kept in {})",
                        dir.display()
                    )),
                }
            };
            let (run, dir) = match run {
                Ok(r) => r,
                Err((e, dir)) => {
                    failures.push(format!("{case}: {e} (kept in {})", dir.display()));
                    continue;
                }
            };
            let failures_before = failures.len();
            let unclear = run
                .round_trips
                .iter()
                .filter(|r| r.truth() == Truth::Unclear)
                .count();
            if unclear > 0 {
                failures.push(format!(
                    "{case}: {unclear} round trips between fast and slow in {MAX_ATTEMPTS} runs: a host too loaded to judge (kept in {})\n{}",
                    dir.display(),
                    run.notes
                ));
            }
            let slow = run
                .round_trips
                .iter()
                .filter(|r| r.truth() == Truth::Slow)
                .count();
            if workload == Workload::PieceEcho && slow > 0 {
                failures.push(format!(
                    "{case}: the echo's own timings show {slow} slow round trips (kept in {})",
                    dir.display()
                ));
            }
            if workload != Workload::PieceEcho && slow == 0 {
                failures.push(format!(
                    "{case}: no slow round trip: nothing tested (kept in {})",
                    dir.display()
                ));
            }
            for (position, j) in &run.judged {
                let error = j.median_error();
                let mut evidence: Vec<&str> = j.evidence.iter().map(String::as_str).collect();
                evidence.sort_unstable();
                evidence.dedup();
                let _ = writeln!(
                    table,
                    "{:<16} {:<18} {:<14} {:>8} {:>8} {:>6} {:>6} {:>6} {:>10}  {}{}",
                    profile.name,
                    workload.name(),
                    position.name(),
                    j.slow,
                    j.reported,
                    j.extra,
                    j.missed,
                    j.excused,
                    error.map_or("-".into(), |e| format!("{e:.2} ms")),
                    evidence.join(","),
                    median(&j.midpoint_errors)
                        .map_or(String::new(), |m| format!(" (range midpoint {m:.2} ms)")),
                );
                if !j.exact() {
                    failures.push(format!(
                        "{case}, {}: {} stalls reported for {} slow round trips ({} extra, {} missed, {} without a timer; {} more slow, {} of them reported, on a host that lagged past the rule) (kept in {})",
                        position.name(),
                        j.reported,
                        j.slow,
                        j.extra,
                        j.missed,
                        j.untimed,
                        j.excused,
                        j.found_excused,
                        dir.display()
                    ));
                }
                if error.is_some_and(|e| e > TIMER_TOLERANCE_MS) {
                    failures.push(format!(
                        "{case}, {}: the timer reported is {:.2} ms from the delayer's (median) (kept in {})",
                        position.name(),
                        error.unwrap_or(0.0),
                        dir.display()
                    ));
                }
            }
            if failures.len() == failures_before {
                // Judged and right: only the runs recorded again stay, for a look.
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    common::skipped(format_args!("{table}"));
    if failures.is_empty() {
        // Removed when empty: the runs recorded again are kept.
        let _ = std::fs::remove_dir(&keep);
    } else {
        let _ = std::fs::write(keep.join("table.txt"), &table);
        panic!(
            "watch over the varying paths (everything kept in {}):\n{}\n\n{table}",
            keep.display(),
            failures.join("\n")
        );
    }
}
