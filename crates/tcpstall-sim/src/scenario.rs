//! What to simulate: two stacks, their socket options, the link between them, the
//! application pattern, and where to capture. Readable from a small TOML file
//! (`docs/scenario-format.md`) or built from command-line flags.

use serde::{Deserialize, Serialize};

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};

pub use crate::resolve::{Reader, ReaderConfig, ScenarioError, Side, SideConfig, SocketOptions};
use crate::resolve::{millis_to_nanos, resolve_script, resolve_side, split_request};

/// The path between the two endpoints.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// Bits per second.
    pub bandwidth_bps: f64,
    /// Round trip, milliseconds, split evenly unless the one-way delays are given.
    pub rtt_ms: f64,
    pub client_to_server_ms: Option<f64>,
    pub server_to_client_ms: Option<f64>,
    /// Uniform extra delay per packet, 0 to this many milliseconds (order is kept).
    pub jitter_ms: f64,
    /// A varying one-way delay, as a fraction of it: each packet's delay follows a
    /// bounded random walk between the one-way delay and that times `1 + delay_variation`
    /// (a queue filling and draining; 0.1 to 0.3 is typical of a WAN path), in order,
    /// drawn from the seed. 0: a fixed delay.
    pub delay_variation: f64,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Seed of jitter, loss and tick phases: a run is a function of the scenario.
    pub seed: u64,
    /// Link MTU: the MSS is this less 40 bytes of IPv4 and TCP headers.
    pub mtu: u32,
    /// A bottleneck of this many bits per second between the capture point and the far
    /// endpoint, in both directions, with a FIFO queue: a queue that grows delays the
    /// ACKs queued behind data. None: no bottleneck beyond `bandwidth_bps`.
    pub bottleneck_bps: Option<f64>,
    /// Packets the bottleneck queue holds before it drops (tail drop).
    pub bottleneck_queue_packets: u32,
    /// The path beyond the capture point stops forwarding at this many milliseconds from
    /// the start, in both directions, for `outage_ms` (a wireless link retrying, a route
    /// being repaired, a paused virtual switch): packets reaching it meanwhile wait and go
    /// on in order when it resumes, and nothing is lost. None: no outage.
    pub outage_at_ms: Option<f64>,
    pub outage_ms: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            bandwidth_bps: 1e9,
            rtt_ms: 0.05,
            client_to_server_ms: None,
            server_to_client_ms: None,
            jitter_ms: 0.0,
            delay_variation: 0.0,
            loss: 0.0,
            seed: 1,
            mtu: 1500,
            bottleneck_bps: None,
            bottleneck_queue_packets: 1000,
            outage_at_ms: None,
            outage_ms: 0.0,
        }
    }
}

/// The application on both ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    /// A named pattern (see [`PATTERNS`]) or "custom" with `request` and `response`.
    pub pattern: String,
    /// Bytes of each write of a request (client) and a response (server).
    pub request: Vec<u32>,
    pub response: Vec<u32>,
    /// Requests kept in flight (2 = double buffering).
    pub depth: u32,
    pub transactions: u32,
    /// Time the server takes before answering, and the client before its next request.
    pub server_think_ms: f64,
    pub client_think_ms: f64,
    /// Time between the writes of one message (0: back to back).
    pub write_gap_ms: f64,
    /// For `periodic`: the client writes a request every this many milliseconds, on its
    /// own clock, whether or not earlier ones were acknowledged or answered.
    pub period_ms: f64,
    /// Connections running the workload at once over the one link (a load test's
    /// clients).
    pub connections: u32,
    /// For `--compare`: the request sizes to run, each as `request` (a size sweep).
    pub request_sizes: Vec<u32>,
    /// For `--compare` with `request_sizes`: "set" (the request carries the size, the
    /// reply is 5 bytes) and "get" (a 36-byte request, the reply carries the size); Redis.
    pub kinds: Vec<String>,
    /// A proxy between client and server writes each request larger than this in two
    /// calls: `split_first` bytes, then the rest (seed 003). None: requests as written.
    pub split_over: Option<u32>,
    pub split_first: u32,
    /// For `script`: the client's writes, each `[milliseconds from the start, bytes]`.
    pub client_script: Vec<(f64, u32)>,
    /// For `script`: the server's writes, the same way.
    pub server_script: Vec<(f64, u32)>,
    /// For `script`: which of the client's writes (numbered from 0) are sent with MSG_OOB,
    /// as urgent data (RFC 9293 3.8.5; a Telnet Synch, RFC 854).
    pub client_urgent: Vec<usize>,
    /// For `script`: the same for the server's writes.
    pub server_urgent: Vec<usize>,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            pattern: "two-writes".into(),
            request: Vec::new(),
            response: Vec::new(),
            depth: 1,
            transactions: 10,
            server_think_ms: 0.0,
            client_think_ms: 0.0,
            write_gap_ms: 0.0,
            period_ms: 0.0,
            connections: 1,
            request_sizes: Vec::new(),
            kinds: Vec::new(),
            split_over: None,
            split_first: 1424,
            client_script: Vec::new(),
            server_script: Vec::new(),
            client_urgent: Vec::new(),
            server_urgent: Vec::new(),
        }
    }
}

/// Where the capture is taken.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapturePoint {
    Client,
    Server,
    /// A tap at this fraction of the path from the client (0.0) to the server (1.0).
    Tap(f64),
}

impl CapturePoint {
    pub fn fraction(self) -> f64 {
        match self {
            CapturePoint::Client => 0.0,
            CapturePoint::Server => 1.0,
            CapturePoint::Tap(f) => f.clamp(0.0, 1.0),
        }
    }

    pub fn parse(text: &str) -> Result<CapturePoint, ScenarioError> {
        match text {
            "client" | "sender" => Ok(CapturePoint::Client),
            "server" | "receiver" => Ok(CapturePoint::Server),
            "tap" | "middle" => Ok(CapturePoint::Tap(0.5)),
            other => {
                let fraction = other.strip_prefix("tap:").unwrap_or(other);
                match fraction.parse::<f64>() {
                    Ok(f) if (0.0..=1.0).contains(&f) => Ok(CapturePoint::Tap(f)),
                    _ => Err(ScenarioError::Invalid(format!(
                        "capture point {other:?}: use client, server, tap or tap:FRACTION (0 to 1)"
                    ))),
                }
            }
        }
    }
}

/// A whole scenario file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScenarioFile {
    pub client: SideConfig,
    pub server: SideConfig,
    pub link: LinkConfig,
    pub workload: WorkloadConfig,
    pub capture: Option<String>,
    /// The capture point's host merges segments as segmentation offload does (TSO for
    /// what it sends, GRO for what it receives): records larger than the MSS.
    pub capture_offload: bool,
    /// Share of the packets the capture point misses (they still cross the link).
    pub capture_miss: f64,
    /// The step of the capture's clock, in microseconds (0: exact): every record's time
    /// is cut down to a multiple of it, as a coarse clock stamps packets.
    pub capture_clock_us: f64,
}

/// The named application patterns, with their defaults.
pub const PATTERNS: &[(&str, &str)] = &[
    (
        "two-writes",
        "request written in two calls (\"hello \" + \"world\\n\"), then a read; seed 002",
    ),
    ("one-write", "the same request in one call"),
    ("writev", "the same request gathered into one writev call"),
    (
        "pipeline",
        "two-writes requests, `depth` of them in flight (2 = double buffering, seed 000)",
    ),
    (
        "bulk",
        "a 100,000-byte block in one call, then a one-byte application reply; seed 000",
    ),
    (
        "sftp",
        "SFTP-like writes of 96 then 656 bytes, then a status reply; seed 001",
    ),
    (
        "proxy-split",
        "a 2,600-byte request split by a proxy into 1,424 + 1,176 bytes; seed 003",
    ),
    (
        "http-keepalive",
        "GET in one call; the server writes headers then body; seed 004",
    ),
    (
        "interactive",
        "one-byte keystrokes every 150 ms, each echoed; no request waits on another",
    ),
    (
        "periodic",
        "54-byte messages every `period_ms` (20 ms) on the client's own clock, no reply; a meter streaming readings",
    ),
    (
        "stream",
        "one-way: the client writes `request` (64 KiB) over and over, no reply; with a slow reader the window closes",
    ),
    (
        "two-way",
        "both ends talk at once (SSH, a VPN over TCP): each writes a 16 + 48-byte message, and its next after reading the other's",
    ),
    ("custom", "`request` and `response` write sizes as given"),
    (
        "script",
        "writes of given sizes at given times (`client_script`, `server_script`), nothing waits for a reply",
    ),
];

/// A resolved scenario, ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub client: Side,
    pub server: Side,
    pub link: LinkConfig,
    pub pattern: String,
    pub request: Vec<u32>,
    pub response: Vec<u32>,
    pub depth: u32,
    pub transactions: u32,
    pub server_think: Nanos,
    pub client_think: Nanos,
    pub write_gap: Nanos,
    /// For `periodic`: the client's write period.
    pub period: Nanos,
    /// Connections running at once over the link.
    pub connections: u32,
    /// For `script`: each side's writes, when and how many bytes, in time order.
    pub client_script: Vec<(Nanos, u32)>,
    pub server_script: Vec<(Nanos, u32)>,
    /// For `script`: the writes of each script sent as urgent data, by their number.
    pub client_urgent: Vec<usize>,
    pub server_urgent: Vec<usize>,
    pub capture: CapturePoint,
    pub capture_offload: bool,
    pub capture_miss: f64,
    pub capture_clock: Nanos,
}

impl ScenarioFile {
    pub fn from_toml(text: &str) -> Result<ScenarioFile, ScenarioError> {
        toml::from_str(text).map_err(|e| ScenarioError::Parse(e.message().to_string()))
    }

    /// The file as TOML, readable by [`ScenarioFile::from_toml`].
    pub fn to_toml(&self) -> Result<String, ScenarioError> {
        toml::to_string(self).map_err(|e| ScenarioError::Invalid(format!("cannot write TOML: {e}")))
    }

    /// Applies the pattern's defaults and the overrides, and checks every value.
    pub fn resolve(&self) -> Result<Scenario, ScenarioError> {
        let link = self.link.clone();
        if !(link.bandwidth_bps > 0.0 && link.bandwidth_bps.is_finite()) {
            return Err(ScenarioError::Invalid(
                "link bandwidth must be positive".into(),
            ));
        }
        for (what, v) in [
            ("rtt_ms", Some(link.rtt_ms)),
            ("client_to_server_ms", link.client_to_server_ms),
            ("server_to_client_ms", link.server_to_client_ms),
            ("jitter_ms", Some(link.jitter_ms)),
            ("outage_at_ms", link.outage_at_ms),
            ("outage_ms", Some(link.outage_ms)),
        ] {
            if let Some(v) = v
                && !(0.0..600_000.0).contains(&v)
            {
                return Err(ScenarioError::Invalid(format!(
                    "link {what} must be between 0 and 600000, got {v}"
                )));
            }
        }
        if !(0.0..=4.0).contains(&link.delay_variation) {
            return Err(ScenarioError::Invalid(format!(
                "link delay_variation must be between 0 and 4 (a fraction of the delay), got {}",
                link.delay_variation
            )));
        }
        if !(0.0..1.0).contains(&link.loss) {
            return Err(ScenarioError::Invalid(format!(
                "link loss must be in [0, 1), got {}",
                link.loss
            )));
        }
        if !(576..=65_535).contains(&link.mtu) {
            return Err(ScenarioError::Invalid(format!(
                "link mtu must be 576 to 65535, got {}",
                link.mtu
            )));
        }
        let w = &self.workload;
        let (mut request, mut response, mut depth, mut transactions) = match w.pattern.as_str() {
            "two-writes" => (vec![6, 6], vec![12], 1, 10),
            "one-write" | "writev" => (vec![12], vec![12], 1, 10),
            "pipeline" => (vec![6, 6], vec![12], 2, 10),
            "bulk" => (vec![100_000], vec![1], 1, 20),
            "sftp" => (vec![96, 656], vec![28], 1, 20),
            "proxy-split" => (vec![1424, 1176], vec![5], 1, 20),
            "http-keepalive" => (vec![90], vec![180, 320], 1, 20),
            "interactive" => (vec![1], vec![1], 1, 20),
            "periodic" => (vec![54], vec![1], 1, 50),
            "two-way" => (vec![16, 48], vec![16, 48], 1, 10),
            "stream" => (vec![65_536], vec![1], 1, 16),
            "custom" => (Vec::new(), Vec::new(), 1, 10),
            "script" => {
                let sizes = |script: &[(f64, u32)]| script.iter().map(|&(_, b)| b).collect();
                let client: Vec<u32> = sizes(&w.client_script);
                if client.is_empty() {
                    return Err(ScenarioError::Invalid(
                        "the script pattern needs a `client_script` of [ms, bytes] writes".into(),
                    ));
                }
                let server: Vec<u32> = sizes(&w.server_script);
                let count = client.len() as u32;
                (
                    client,
                    if server.is_empty() { vec![1] } else { server },
                    1,
                    count,
                )
            }
            other => {
                let names: Vec<&str> = PATTERNS.iter().map(|(n, _)| *n).collect();
                return Err(ScenarioError::UnknownPattern(
                    other.to_string(),
                    names.join(", "),
                ));
            }
        };
        if !w.request.is_empty() {
            request = w.request.clone();
        }
        if !w.response.is_empty() {
            response = w.response.clone();
        }
        if w.depth != 1 {
            depth = w.depth;
        }
        if w.transactions != WorkloadConfig::default().transactions && w.pattern != "script" {
            transactions = w.transactions;
        }
        if let Some(over) = w.split_over {
            request = split_request(&request, over, w.split_first)?;
        }
        if request.is_empty() || response.is_empty() {
            return Err(ScenarioError::Invalid(
                "a custom pattern needs `request` and `response` write sizes".into(),
            ));
        }
        if request
            .iter()
            .chain(&response)
            .any(|&b| b == 0 || b > 1 << 30)
        {
            return Err(ScenarioError::Invalid(
                "write sizes must be 1 byte to 1 GiB".into(),
            ));
        }
        if w.pattern != "script" && (request.len() > 64 || response.len() > 64) {
            return Err(ScenarioError::Invalid(
                "at most 64 writes per message".into(),
            ));
        }
        if !(1..=64).contains(&depth) {
            return Err(ScenarioError::Invalid(format!(
                "depth must be 1 to 64, got {depth}"
            )));
        }
        if !(1..=1_000_000).contains(&transactions) {
            return Err(ScenarioError::Invalid(format!(
                "transactions must be 1 to 1000000, got {transactions}"
            )));
        }
        let mut client_think = millis_to_nanos(w.client_think_ms.max(0.0));
        if w.pattern == "interactive" && w.client_think_ms == 0.0 {
            client_think = 150 * NANOS_PER_MILLI;
        }
        let capture = match &self.capture {
            Some(text) => CapturePoint::parse(text)?,
            None => CapturePoint::Client,
        };
        if !(0.0..1.0).contains(&self.capture_miss) {
            return Err(ScenarioError::Invalid(format!(
                "capture_miss must be in [0, 1), got {}",
                self.capture_miss
            )));
        }
        if !(0.0..=1e6).contains(&self.capture_clock_us) {
            return Err(ScenarioError::Invalid(format!(
                "capture_clock_us must be in [0, 1000000], got {}",
                self.capture_clock_us
            )));
        }
        if let Some(bps) = link.bottleneck_bps
            && !(bps > 0.0 && bps.is_finite())
        {
            return Err(ScenarioError::Invalid(
                "link bottleneck_bps must be positive".into(),
            ));
        }
        if !(1..=1_000_000).contains(&link.bottleneck_queue_packets) {
            return Err(ScenarioError::Invalid(format!(
                "link bottleneck_queue_packets must be 1 to 1000000, got {}",
                link.bottleneck_queue_packets
            )));
        }
        let mut period = millis_to_nanos(w.period_ms);
        if !(0.0..=600_000.0).contains(&w.period_ms) {
            return Err(ScenarioError::Invalid(format!(
                "period_ms must be between 0 and 600000, got {}",
                w.period_ms
            )));
        }
        if w.pattern == "periodic" && period == 0 {
            period = 20 * NANOS_PER_MILLI;
        }
        let client_script = resolve_script("client_script", &w.client_script)?;
        let server_script = resolve_script("server_script", &w.server_script)?;
        if w.pattern != "script" && !(client_script.is_empty() && server_script.is_empty()) {
            return Err(ScenarioError::Invalid(
                "client_script and server_script need pattern = \"script\"".into(),
            ));
        }
        for (what, urgent, script) in [
            ("client_urgent", &w.client_urgent, &client_script),
            ("server_urgent", &w.server_urgent, &server_script),
        ] {
            if let Some(&n) = urgent.iter().find(|&&n| n >= script.len()) {
                return Err(ScenarioError::Invalid(format!(
                    "{what}: write {n} is not in the script (it has {} writes, numbered from 0)",
                    script.len()
                )));
            }
        }
        if !(1..=10_000).contains(&w.connections) {
            return Err(ScenarioError::Invalid(format!(
                "connections must be 1 to 10000, got {}",
                w.connections
            )));
        }
        if let Some(&size) = w.request_sizes.iter().find(|&&b| b == 0 || b > 1 << 30) {
            return Err(ScenarioError::Invalid(format!(
                "request_sizes must be 1 byte to 1 GiB, got {size}"
            )));
        }
        if let Some(kind) = w
            .kinds
            .iter()
            .find(|k| !matches!(k.as_str(), "set" | "get"))
        {
            return Err(ScenarioError::Invalid(format!(
                "kinds: {kind:?} is not one of set, get"
            )));
        }
        Ok(Scenario {
            connections: w.connections,
            client_script,
            server_script,
            client_urgent: w.client_urgent.clone(),
            server_urgent: w.server_urgent.clone(),
            client: resolve_side(&self.client, link.mtu)?,
            server: resolve_side(&self.server, link.mtu)?,
            link,
            pattern: w.pattern.clone(),
            request,
            response,
            depth,
            transactions,
            server_think: millis_to_nanos(w.server_think_ms.max(0.0)),
            client_think,
            write_gap: millis_to_nanos(w.write_gap_ms.clamp(0.0, 60_000.0)),
            period,
            capture,
            capture_offload: self.capture_offload,
            capture_miss: self.capture_miss,
            capture_clock: (self.capture_clock_us * 1e3).round() as Nanos,
        })
    }
}
