//! From a scenario file's parts to what the simulator runs, each checked on the way: a
//! side's stack with its overrides and reader, a send script, a proxy's split of the
//! requests. A bad value is a [`ScenarioError`] naming the key, never a panic. A side's
//! settings live here, as written ([`SideConfig`]) and resolved ([`Side`]); the scenario
//! file re-exports them.

use serde::{Deserialize, Serialize};

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};

use crate::profile::{self, StackProfile};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("unknown stack {0:?}; one of: {1}")]
    UnknownStack(String, String),
    #[error("unknown pattern {0:?}; one of: {1}")]
    UnknownPattern(String, String),
    #[error("{0}")]
    Invalid(String),
    #[error("scenario file: {0}")]
    Parse(String),
}

/// Socket options one side sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SocketOptions {
    /// TCP_NODELAY: Nagle off.
    pub nodelay: bool,
    /// TCP_CORK set before each message's writes and cleared after the last.
    pub cork: bool,
    /// MSG_MORE on every write of a message but its last.
    pub msg_more: bool,
    /// TCP_QUICKACK set again after every read: no delayed ACKs.
    pub quickack: bool,
}

impl SocketOptions {
    /// The options set, by their socket-API names.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.nodelay, "TCP_NODELAY"),
            (self.cork, "TCP_CORK"),
            (self.msg_more, "MSG_MORE"),
            (self.quickack, "TCP_QUICKACK"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect()
    }
}

/// One side of the connection.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SideConfig {
    pub stack: String,
    #[serde(flatten)]
    pub options: SocketOptions,
    /// Override the MSS this side announces (the other side's send size, before timestamps).
    pub mss: Option<u32>,
    /// Override the delayed-ACK timer, milliseconds (a per-connection timer, or the tick period).
    pub delack_ms: Option<f64>,
    /// For a stack whose delayed ACKs go on a global tick: on the tick this many after
    /// the data (1, the next: a delay of 0 to one period; 2: one to two periods).
    pub delack_ticks: Option<u32>,
    /// Override the Nagle variant: "classic", "minshall", "off".
    pub nagle: Option<String>,
    /// Override which arriving segments set TS.Recent (what TSecr echoes): "rfc1323"
    /// (only a segment covering the last ACK sent, never a pure ACK) or "rfc7323" (any
    /// segment at or below it).
    pub ts_recent: Option<String>,
    /// Override the TSval clock's ticks per second (1 to 1000, RFC 7323 5.4).
    pub ts_hz: Option<f64>,
    /// Override whether this side offers TCP timestamps in its SYN (Linux
    /// net.ipv4.tcp_timestamps, Windows Tcp1323Opts, FreeBSD net.inet.tcp.rfc1323); they
    /// are used when both sides offer them (RFC 7323 3.2).
    pub timestamps: Option<bool>,
    /// SO_SNDBUF: bytes written and not yet acknowledged the socket holds; a write
    /// beyond it blocks until ACKs free room. None: large enough never to limit.
    pub sndbuf: Option<u32>,
    /// How this side's application reads what arrives.
    #[serde(flatten)]
    pub reader: ReaderConfig,
}

impl Default for SideConfig {
    fn default() -> Self {
        SideConfig {
            stack: "linux".into(),
            options: SocketOptions::default(),
            mss: None,
            delack_ms: None,
            delack_ticks: None,
            nagle: None,
            ts_recent: None,
            ts_hz: None,
            timestamps: None,
            sndbuf: None,
            reader: ReaderConfig::default(),
        }
    }
}

/// How an application reads: by default at once and everything, so the receive window
/// never closes. A slow or small reader lets the window close (the look-alikes of a
/// delayed ACK: zero window, persist probes, window updates when it reads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReaderConfig {
    /// SO_RCVBUF: the receive buffer, bytes; the window advertised is what is free in it.
    /// None: large enough never to limit.
    pub rcvbuf: Option<u32>,
    /// The application reads at most this many bytes per call. None: all that is there.
    pub read_bytes: Option<u32>,
    /// At most one read per this many milliseconds (a slow consumer). 0: no limit.
    pub read_interval_ms: f64,
    /// The application wakes this long after data arrives and reads all that is there
    /// then (scheduling latency): responses that arrive close together are read in one
    /// call. 0: it reads each arrival at once.
    pub read_delay_ms: f64,
    /// The application reads this many bytes in all and then no more (a consumer that
    /// hangs): the window closes for good. None: it reads to the end.
    pub stop_after_bytes: Option<u64>,
}

/// One resolved side: its profile with overrides applied, and its options.
#[derive(Clone, Debug)]
pub struct Side {
    pub profile: StackProfile,
    pub options: SocketOptions,
    /// The MSS option this side announces.
    pub announced_mss: u32,
    pub reader: Reader,
    /// SO_SNDBUF, bytes; None: no limit.
    pub sndbuf: Option<u32>,
}

/// A resolved [`ReaderConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reader {
    pub rcvbuf: Option<u32>,
    pub read_bytes: Option<u32>,
    pub read_interval: Nanos,
    pub read_delay: Nanos,
    pub stop_after_bytes: Option<u64>,
}

impl Reader {
    /// Reads everything at once into an unlimited buffer: the window never closes.
    pub fn is_eager(&self) -> bool {
        *self
            == Reader {
                rcvbuf: None,
                read_bytes: None,
                read_interval: 0,
                read_delay: 0,
                stop_after_bytes: None,
            }
    }
}

pub(crate) fn millis_to_nanos(ms: f64) -> Nanos {
    (ms * NANOS_PER_MILLI as f64).round() as Nanos
}

/// A proxy that writes a request of more than `over` bytes in two calls: `first` bytes,
/// then the rest. Requests already in several writes are joined first (the proxy reads
/// the whole request before it forwards it).
pub(crate) fn split_request(
    request: &[u32],
    over: u32,
    first: u32,
) -> Result<Vec<u32>, ScenarioError> {
    if first == 0 || first >= over {
        return Err(ScenarioError::Invalid(format!(
            "split_first must be 1 to split_over - 1, got {first} with split_over {over}"
        )));
    }
    let total: u64 = request.iter().map(|&b| u64::from(b)).sum();
    let total = u32::try_from(total)
        .ok()
        .filter(|&t| t <= 1 << 30)
        .ok_or_else(|| ScenarioError::Invalid("write sizes must be 1 byte to 1 GiB".into()))?;
    Ok(if total > over {
        vec![first, total - first]
    } else {
        vec![total]
    })
}

/// A send script: times from 0 to 600 s in order, writes of 1 byte to 1 GiB.
pub(crate) fn resolve_script(
    what: &str,
    script: &[(f64, u32)],
) -> Result<Vec<(Nanos, u32)>, ScenarioError> {
    if script.len() > 100_000 {
        return Err(ScenarioError::Invalid(format!(
            "{what}: at most 100000 writes, got {}",
            script.len()
        )));
    }
    let mut last = 0.0;
    let mut out = Vec::with_capacity(script.len());
    for &(ms, bytes) in script {
        if !(0.0..=600_000.0).contains(&ms) || ms < last {
            return Err(ScenarioError::Invalid(format!(
                "{what}: times must rise from 0 to 600000 ms, got {ms} after {last}"
            )));
        }
        if bytes == 0 || bytes > 1 << 30 {
            return Err(ScenarioError::Invalid(format!(
                "{what}: write sizes must be 1 byte to 1 GiB, got {bytes}"
            )));
        }
        last = ms;
        out.push((millis_to_nanos(ms), bytes));
    }
    Ok(out)
}

pub(crate) fn resolve_side(config: &SideConfig, mtu: u32) -> Result<Side, ScenarioError> {
    let mut profile = profile::by_name(&config.stack).ok_or_else(|| {
        ScenarioError::UnknownStack(config.stack.clone(), profile::all_names().join(", "))
    })?;
    if let Some(ms) = config.delack_ms {
        if !(ms > 0.0 && ms <= 500.0) {
            return Err(ScenarioError::Invalid(format!(
                "delack_ms must be above 0 and at most 500 (RFC 1122 4.2.3.2), got {ms}"
            )));
        }
        let delay = millis_to_nanos(ms);
        profile.delayed_ack = match profile.delayed_ack {
            crate::profile::DelayedAckTimer::GlobalTick { ticks, .. } => {
                crate::profile::DelayedAckTimer::GlobalTick {
                    period: delay,
                    ticks,
                }
            }
            crate::profile::DelayedAckTimer::LinuxAto { max, jiffy, .. } => {
                crate::profile::DelayedAckTimer::LinuxAto {
                    min: delay,
                    max: max.max(delay),
                    jiffy,
                }
            }
            crate::profile::DelayedAckTimer::PerConnection { .. } => {
                crate::profile::DelayedAckTimer::PerConnection { delay }
            }
        };
    }
    if let Some(n) = config.delack_ticks {
        let crate::profile::DelayedAckTimer::GlobalTick { period, .. } = profile.delayed_ack else {
            return Err(ScenarioError::Invalid(format!(
                "delack_ticks needs a stack whose delayed ACKs go on a global tick, not {}",
                profile.name
            )));
        };
        // RFC 1122 4.2.3.2: the delay must be less than 0.5 seconds.
        if n == 0 || period * Nanos::from(n) >= 500 * NANOS_PER_MILLI {
            return Err(ScenarioError::Invalid(format!(
                "delack_ticks must be 1 or more and keep the delay under 500 ms, got {n}"
            )));
        }
        profile.delayed_ack = crate::profile::DelayedAckTimer::GlobalTick { period, ticks: n };
    }
    if let Some(nagle) = &config.nagle {
        profile.nagle = match nagle.as_str() {
            "classic" => crate::profile::NagleMode::Classic,
            "minshall" => crate::profile::NagleMode::Minshall,
            "off" => crate::profile::NagleMode::Off,
            other => {
                return Err(ScenarioError::Invalid(format!(
                    "nagle {other:?}: use classic, minshall or off"
                )));
            }
        };
    }
    if let Some(rule) = &config.ts_recent {
        profile.ts_recent = match rule.as_str() {
            "rfc1323" => crate::profile::TsRecentRule::Rfc1323,
            "rfc7323" => crate::profile::TsRecentRule::Rfc7323,
            other => {
                return Err(ScenarioError::Invalid(format!(
                    "ts_recent {other:?}: use rfc1323 or rfc7323"
                )));
            }
        };
    }
    if let Some(hz) = config.ts_hz {
        // RFC 7323 5.4: a tick of 1 ms to 1 s.
        if !(1.0..=1000.0).contains(&hz) {
            return Err(ScenarioError::Invalid(format!(
                "ts_hz must be 1 to 1000 ticks a second (RFC 7323 5.4), got {hz}"
            )));
        }
        profile.ts_hz = hz;
    }
    if let Some(timestamps) = config.timestamps {
        profile.timestamps = timestamps;
    }
    let announced_mss = config.mss.unwrap_or(mtu - 40);
    if !(88..=65_495).contains(&announced_mss) {
        return Err(ScenarioError::Invalid(format!(
            "mss must be 88 to 65495, got {announced_mss}"
        )));
    }
    if let Some(bytes) = config.sndbuf
        && !(256..=1 << 30).contains(&bytes)
    {
        return Err(ScenarioError::Invalid(format!(
            "sndbuf must be 256 bytes to 1 GiB, got {bytes}"
        )));
    }
    Ok(Side {
        profile,
        options: config.options,
        announced_mss,
        reader: resolve_reader(&config.reader)?,
        sndbuf: config.sndbuf,
    })
}

fn resolve_reader(config: &ReaderConfig) -> Result<Reader, ScenarioError> {
    if let Some(bytes) = config.rcvbuf
        && !(256..=1 << 30).contains(&bytes)
    {
        return Err(ScenarioError::Invalid(format!(
            "rcvbuf must be 256 bytes to 1 GiB, got {bytes}"
        )));
    }
    if let Some(bytes) = config.read_bytes
        && !(1..=1 << 30).contains(&bytes)
    {
        return Err(ScenarioError::Invalid(format!(
            "read_bytes must be 1 byte to 1 GiB, got {bytes}"
        )));
    }
    for (what, ms) in [
        ("read_interval_ms", config.read_interval_ms),
        ("read_delay_ms", config.read_delay_ms),
    ] {
        if !(0.0..=60_000.0).contains(&ms) {
            return Err(ScenarioError::Invalid(format!(
                "{what} must be between 0 and 60000, got {ms}"
            )));
        }
    }
    Ok(Reader {
        rcvbuf: config.rcvbuf,
        read_bytes: config.read_bytes,
        read_interval: millis_to_nanos(config.read_interval_ms),
        read_delay: millis_to_nanos(config.read_delay_ms),
        stop_after_bytes: config.stop_after_bytes,
    })
}
