//! Stack profiles: the values of the rules that decide when a TCP stack sends and when
//! it acknowledges. Each value names its source and how sure we are of it; the table in
//! `docs/stack-profiles.md` is rendered from the same data (`tcpstall simulate --profiles`).

use serde::Serialize;

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};
use tcpstall_core::stacks;

use crate::window::WindowRules;

fn ms(n: Nanos) -> String {
    let text = format!("{:.1}", n as f64 / MS as f64);
    text.trim_end_matches(".0").to_string()
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// How a stack holds sub-MSS segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NagleMode {
    /// RFC 896 / RFC 1122 4.2.3.4: no sub-MSS segment while any data is unacknowledged.
    Classic,
    /// Minshall's variant: no sub-MSS segment while a sub-MSS segment is unacknowledged.
    Minshall,
    /// TCP_NODELAY.
    Off,
}

/// When a receiver that did not acknowledge at once finally does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum DelayedAckTimer {
    /// A timer per connection, armed at the first unacknowledged segment.
    PerConnection { delay: Nanos },
    /// One global tick for all connections (BSD fast timeout): pending ACKs go out at the
    /// next tick, so the delay is anywhere from 0 to the period.
    GlobalTick {
        period: Nanos,
        /// The pending ACK goes on this tick after the data (1: the next one).
        #[serde(skip_serializing_if = "is_one")]
        ticks: u32,
    },
    /// Linux: `ato`, at least TCP_DELACK_MIN (40 ms) and at most TCP_DELACK_MAX (200 ms),
    /// counted in jiffies and fired one jiffy late by the timer wheel's rounding.
    LinuxAto {
        min: Nanos,
        max: Nanos,
        jiffy: Nanos,
    },
}

/// When an arriving segment's TSval becomes TS.Recent, the value the next segments echo
/// in TSecr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TsRecentRule {
    /// RFC 1323 4.3: only a segment that covers Last.ACK.sent (SEG.SEQ <= Last.ACK.sent <
    /// SEG.SEQ + SEG.LEN), so never a pure ACK: 4.4BSD-Lite2 tcp_input.c and the
    /// embedded stacks derived from it.
    Rfc1323,
    /// RFC 7323 4.3: any segment with SEG.SEQ <= Last.ACK.sent (Linux
    /// tcp_replace_ts_recent: !after(seq, rcv_wup); FreeBSD tcp_input.c): a host that owes
    /// an ACK for data keeps echoing the TSval of the first segment it owes it for.
    Rfc7323,
}

impl TsRecentRule {
    pub fn describe(self) -> &'static str {
        match self {
            TsRecentRule::Rfc1323 => "RFC 1323: a segment covering Last.ACK.sent",
            TsRecentRule::Rfc7323 => "RFC 7323: SEG.SEQ <= Last.ACK.sent",
        }
    }

    /// Whether a segment of `len` bytes (SYN and FIN counted) at `seq` updates TS.Recent
    /// when this side last acknowledged up to `last_ack_sent`.
    pub fn updates(self, seq: u64, len: u64, last_ack_sent: u64) -> bool {
        match self {
            TsRecentRule::Rfc1323 => seq <= last_ack_sent && last_ack_sent < seq + len,
            TsRecentRule::Rfc7323 => seq <= last_ack_sent,
        }
    }
}

/// How slow start grows the congestion window on an ACK of new data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlowStart {
    /// By the bytes acknowledged (RFC 3465 appropriate byte counting, RFC 5681 3.1).
    ByteCounting,
    /// By one MSS per ACK, however little it acknowledges (RFC 2581 read as a rule).
    PerAck,
}

/// How the retransmission timeout follows the round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RtoRule {
    /// RFC 6298: SRTT + 4 RTTVAR, at least the minimum.
    Rfc6298,
    /// Linux __tcp_set_rto: SRTT + RTTVAR, where RTTVAR is at least the minimum, so the
    /// RTO is at least one round trip plus the minimum.
    LinuxVarianceFloor,
    /// FreeBSD: RFC 6298 at least the minimum (rexmit_min), plus rexmit_slop.
    FreeBsdSlop { slop: Nanos },
}

impl NagleMode {
    pub fn describe(self) -> &'static str {
        match self {
            NagleMode::Classic => "classic (RFC 896)",
            NagleMode::Minshall => "Minshall's variant",
            NagleMode::Off => "off",
        }
    }
}

impl DelayedAckTimer {
    pub fn describe(&self) -> String {
        match *self {
            DelayedAckTimer::PerConnection { delay } => {
                format!("{} ms timer per connection", ms(delay))
            }
            DelayedAckTimer::GlobalTick { period, ticks: 1 } => {
                format!("global {} ms tick (0 to {} ms)", ms(period), ms(period))
            }
            DelayedAckTimer::GlobalTick { period, ticks } => format!(
                "global {} ms tick, ACK on the tick {ticks} after the data ({} to {} ms)",
                ms(period),
                ms(period * Nanos::from(ticks - 1)),
                ms(period * Nanos::from(ticks))
            ),
            DelayedAckTimer::LinuxAto { min, max, jiffy } => format!(
                "ato {} to {} ms, on {} ms jiffies, fired one jiffy late",
                ms(min),
                ms(max),
                ms(jiffy)
            ),
        }
    }
}

impl RtoRule {
    pub fn describe(&self, min_rto: Nanos) -> String {
        match *self {
            RtoRule::Rfc6298 => format!("SRTT + 4 RTTVAR, at least {} ms", ms(min_rto)),
            RtoRule::LinuxVarianceFloor => format!("SRTT + max(RTTVAR, {} ms)", ms(min_rto)),
            RtoRule::FreeBsdSlop { slop } => {
                format!("max(SRTT + 4 RTTVAR, {} ms) + {} ms", ms(min_rto), ms(slop))
            }
        }
    }
}

/// One stack's values.
#[derive(Clone, Debug, Serialize)]
pub struct StackProfile {
    pub name: &'static str,
    pub description: &'static str,
    pub nagle: NagleMode,
    /// TCP timestamps on by default (they take 12 option bytes from every segment).
    pub timestamps: bool,
    /// Which arriving segments set TS.Recent (what TSecr echoes).
    pub ts_recent: TsRecentRule,
    /// Ticks per second of the TSval clock (RFC 7323 5.4: 1 ms to 1 s a tick).
    pub ts_hz: f64,
    /// The TTL (IPv4) or hop limit (IPv6) its packets leave with.
    pub initial_ttl: u8,
    /// Initial congestion window, segments.
    pub initial_window: u32,
    pub delayed_ack: DelayedAckTimer,
    /// ACK at once when this many full-sized segments are unacknowledged.
    pub ack_every_segments: u32,
    /// Linux quick-ack mode at connection start and after idle.
    pub quickack_segments: u32,
    /// Linux ping-pong (interactive) mode: delayed ACKs when the socket replies soon
    /// after receiving.
    pub pingpong: bool,
    /// Minimum retransmission timeout, applied as `rto_rule` says.
    pub min_rto: Nanos,
    pub rto_rule: RtoRule,
    /// Corked data (TCP_CORK, MSG_MORE) is sent after this long regardless.
    pub cork_flush: Option<Nanos>,
    /// Linux autocorking: a sub-MSS write waits while this socket's previous data is
    /// still in the host's queues, so back-to-back small writes leave together.
    pub autocork: bool,
    /// How the receive window is offered and updated, how a sender uses a small window, and
    /// how its persist timer backs off.
    pub window_rules: WindowRules,
    /// Linux `__tcp_cleanup_rbuf`: a pending delayed ACK goes when the application reads
    /// small pushed segments and empties the queue, outside ping-pong mode.
    pub ack_on_read: bool,
    /// Only full-sized segments count towards `ack_every_segments` (RFC 1122 4.2.3.2
    /// read literally: "in a stream of full-sized segments").
    pub ack_full_segments_only: bool,
    /// A one-byte segment is acknowledged at once, taken for a window probe.
    pub ack_one_byte_at_once: bool,
    /// How slow start grows the congestion window.
    pub slow_start: SlowStart,
    /// Where each value comes from, and how sure we are of it.
    pub sources: &'static [(&'static str, &'static str)],
}

const MS: Nanos = NANOS_PER_MILLI;

/// All profiles, in the order the documentation lists them.
pub fn all() -> Vec<StackProfile> {
    vec![
        linux(),
        windows(),
        windows_xp(),
        macos(),
        macos_legacy(),
        freebsd(),
        aix(),
    ]
}

/// Models of other simulators, to run their tests: not real stacks, so outside the
/// matrices and tables that [`all`] feeds.
pub fn peers() -> Vec<StackProfile> {
    vec![inet()]
}

pub fn by_name(name: &str) -> Option<StackProfile> {
    all().into_iter().chain(peers()).find(|p| p.name == name)
}

/// Every name a scenario may give, the peers' models last.
pub fn all_names() -> Vec<&'static str> {
    all().iter().chain(peers().iter()).map(|p| p.name).collect()
}

pub fn names() -> Vec<&'static str> {
    all().iter().map(|p| p.name).collect()
}

pub fn linux() -> StackProfile {
    StackProfile {
        name: "linux",
        description: "Linux 4.x to 6.x defaults",
        nagle: NagleMode::Minshall,
        timestamps: true,
        ts_recent: TsRecentRule::Rfc7323,
        ts_hz: 1000.0,
        initial_ttl: 64,
        initial_window: 10,
        delayed_ack: DelayedAckTimer::LinuxAto {
            min: stacks::LINUX_DELACK_MIN,
            max: stacks::LINUX_DELACK_MAX,
            jiffy: stacks::LINUX_JIFFY,
        },
        ack_every_segments: 2,
        quickack_segments: 16,
        pingpong: true,
        min_rto: 200 * MS,
        rto_rule: RtoRule::LinuxVarianceFloor,
        cork_flush: Some(200 * MS),
        autocork: true,
        window_rules: WindowRules::Linux,
        ack_on_read: true,
        ack_full_segments_only: false,
        ack_one_byte_at_once: false,
        slow_start: SlowStart::ByteCounting,
        sources: &[
            (
                "initial_ttl",
                "net.ipv4.ip_default_ttl 64 (confirmed, ip-sysctl)",
            ),
            (
                "nagle",
                "tcp_output.c tcp_nagle_check / tcp_minshall_check (confirmed)",
            ),
            (
                "timestamps",
                "net.ipv4.tcp_timestamps=1 default (confirmed)",
            ),
            (
                "ts_recent",
                "tcp_replace_ts_recent: !after(seq, tp->rcv_wup), RFC 7323 (confirmed)",
            ),
            (
                "ts_hz",
                "TCP_TS_HZ 1000: a 1 ms TSval clock since 4.13 (confirmed)",
            ),
            ("initial_window", "TCP_INIT_CWND 10, RFC 6928 (confirmed)"),
            (
                "delayed_ack",
                "TCP_DELACK_MIN HZ/25, TCP_DELACK_MAX HZ/5; HZ=250 here; timer wheel rounds expiry up one jiffy (confirmed: 40-44 ms measured on this kernel)",
            ),
            (
                "ack_every_segments",
                "__tcp_ack_snd_check: more than one rcv_mss unacknowledged (confirmed)",
            ),
            ("quickack_segments", "TCP_MAX_QUICKACKS 16 (confirmed)"),
            (
                "pingpong",
                "inet_csk_inc_pingpong_cnt in tcp_event_data_sent; left when the delayed-ACK timer fires (confirmed; threshold 1 as measured)",
            ),
            (
                "min_rto",
                "TCP_RTO_MIN 200 ms, a floor on the variance term (tcp_rtt_estimator, confirmed)",
            ),
            (
                "cork_flush",
                "TCP_CORK man page: 200 ms ceiling (confirmed)",
            ),
            (
                "window_rules",
                "__tcp_select_window, __tcp_cleanup_rbuf, tcp_snd_wnd_test, tcp_probe0_when (confirmed in tcp_output.c, tcp.c, tcp_timer.c)",
            ),
            (
                "ack_on_read",
                "__tcp_cleanup_rbuf: ICSK_ACK_PUSHED outside ping-pong, or ICSK_ACK_PUSHED2, with the queue empty (confirmed)",
            ),
        ],
    }
}

/// Where the values Windows XP shares with Windows 10 and later come from.
const WINDOWS_TTL_SOURCE: (&str, &str) = (
    "initial_ttl",
    "DefaultTTL 128 (confirmed, Tcpip Parameters)",
);
const WINDOWS_NAGLE_SOURCE: (&str, &str) = (
    "nagle",
    "classic Nagle, TCP_NODELAY to disable (confirmed, seed 001)",
);
const WINDOWS_TIMESTAMPS_SOURCE: (&str, &str) = (
    "timestamps",
    "Tcp1323Opts: timestamps off by default (confirmed)",
);
const WINDOWS_ACK_EVERY_SOURCE: (&str, &str) =
    ("ack_every_segments", "TcpAckFrequency=2 (confirmed)");
const WINDOWS_WINDOW_RULES_SOURCE: (&str, &str) = (
    "window_rules",
    "RFC 1122 receiver and sender SWS avoidance, BSD-like persist bounds (unconfirmed)",
);

pub fn windows() -> StackProfile {
    StackProfile {
        name: "windows",
        description: "Windows 10/11 and Server defaults",
        nagle: NagleMode::Classic,
        timestamps: false,
        ts_recent: TsRecentRule::Rfc7323,
        ts_hz: 1000.0,
        initial_ttl: 128,
        initial_window: 10,
        delayed_ack: DelayedAckTimer::PerConnection {
            delay: stacks::WINDOWS_DELACK,
        },
        ack_every_segments: 2,
        quickack_segments: 0,
        pingpong: false,
        min_rto: 300 * MS,
        rto_rule: RtoRule::Rfc6298,
        cork_flush: None,
        autocork: false,
        window_rules: WindowRules::Bsd,
        ack_on_read: false,
        ack_full_segments_only: false,
        ack_one_byte_at_once: false,
        slow_start: SlowStart::ByteCounting,
        sources: &[
            WINDOWS_TTL_SOURCE,
            WINDOWS_NAGLE_SOURCE,
            WINDOWS_TIMESTAMPS_SOURCE,
            (
                "initial_window",
                "IW10 since Windows Server 2012 R2 / 8.1 (likely)",
            ),
            (
                "delayed_ack",
                "TcpDelAckTicks=2 x 100 ms (confirmed, seeds 001, 002)",
            ),
            WINDOWS_ACK_EVERY_SOURCE,
            ("min_rto", "300 ms minimum RTO (likely)"),
            WINDOWS_WINDOW_RULES_SOURCE,
        ],
    }
}

/// Windows XP and Server 2003: Windows' rules, but the delayed-ACK timer counts ticks of
/// a 100 ms clock.
pub fn windows_xp() -> StackProfile {
    StackProfile {
        name: "windows-xp",
        description: "Windows XP and Server 2003",
        initial_window: 2,
        delayed_ack: DelayedAckTimer::GlobalTick {
            period: stacks::WINDOWS_XP_TICK,
            ticks: stacks::WINDOWS_XP_DELACK_TICKS,
        },
        sources: &[
            WINDOWS_TTL_SOURCE,
            WINDOWS_NAGLE_SOURCE,
            WINDOWS_TIMESTAMPS_SOURCE,
            ("initial_window", "2 segments, RFC 2581 (likely)"),
            (
                "delayed_ack",
                "TcpDelAckTicks=2 of 100-millisecond intervals, KB 328890: the second tick of a 100 ms clock, 100 to 200 ms (confirmed: 110 to 196 ms in public captures of XP and Server 2003 hosts)",
            ),
            WINDOWS_ACK_EVERY_SOURCE,
            ("min_rto", "as Windows 10 (unconfirmed)"),
            WINDOWS_WINDOW_RULES_SOURCE,
        ],
        ..windows()
    }
}

pub fn macos() -> StackProfile {
    StackProfile {
        name: "macos",
        description: "macOS 10.5 and later",
        nagle: NagleMode::Minshall,
        ..macos_legacy()
    }
}

pub fn macos_legacy() -> StackProfile {
    StackProfile {
        name: "macos-legacy",
        description: "Mac OS X before 10.5",
        nagle: NagleMode::Classic,
        timestamps: true,
        ts_recent: TsRecentRule::Rfc7323,
        ts_hz: 1000.0,
        initial_ttl: 64,
        initial_window: 4,
        delayed_ack: DelayedAckTimer::GlobalTick {
            period: stacks::BSD_FAST_TICK,
            ticks: 1,
        },
        ack_every_segments: 2,
        quickack_segments: 0,
        pingpong: false,
        min_rto: 1000 * MS,
        rto_rule: RtoRule::Rfc6298,
        cork_flush: None,
        autocork: false,
        window_rules: WindowRules::Bsd,
        ack_on_read: false,
        ack_full_segments_only: false,
        ack_one_byte_at_once: false,
        slow_start: SlowStart::ByteCounting,
        sources: &[
            ("initial_ttl", "IPDEFTTL 64, net.inet.ip.ttl (confirmed)"),
            (
                "nagle",
                "classic before 10.5, Minshall's variant from 10.5 (confirmed, seed 000)",
            ),
            (
                "timestamps",
                "on: MSS 1448 on Ethernet (confirmed, seed 000)",
            ),
            (
                "ts_recent",
                "RFC 7323's rule, as the FreeBSD tcp_input.c XNU derives from (unconfirmed)",
            ),
            ("ts_hz", "tcp_now counted in milliseconds (unconfirmed)"),
            (
                "initial_window",
                "RFC 3390 window of 4 segments (unconfirmed)",
            ),
            (
                "delayed_ack",
                "BSD fast timeout, 200 ms period as in seed 000's 201 ms blocks (unconfirmed: the tick period)",
            ),
            (
                "ack_every_segments",
                "every second full segment (confirmed, seed 000)",
            ),
            ("min_rto", "BSD 1 s minimum RTO (unconfirmed)"),
            (
                "window_rules",
                "BSD tcp_output SWS rules, tcp_setpersist 5 to 60 s (likely: FreeBSD source, not XNU)",
            ),
        ],
    }
}

pub fn freebsd() -> StackProfile {
    StackProfile {
        name: "freebsd",
        description: "FreeBSD 12 and later",
        nagle: NagleMode::Classic,
        timestamps: true,
        ts_recent: TsRecentRule::Rfc7323,
        ts_hz: 1000.0,
        initial_ttl: 64,
        initial_window: 10,
        delayed_ack: DelayedAckTimer::PerConnection {
            delay: stacks::FREEBSD_DELACKTIME,
        },
        ack_every_segments: 2,
        quickack_segments: 0,
        pingpong: false,
        min_rto: 30 * MS,
        rto_rule: RtoRule::FreeBsdSlop { slop: 200 * MS },
        cork_flush: None,
        autocork: false,
        window_rules: WindowRules::Bsd,
        ack_on_read: false,
        ack_full_segments_only: false,
        ack_one_byte_at_once: false,
        slow_start: SlowStart::ByteCounting,
        sources: &[
            ("initial_ttl", "IPDEFTTL 64, net.inet.ip.ttl (confirmed)"),
            ("nagle", "tcp_output.c: classic Nagle (likely)"),
            ("timestamps", "net.inet.tcp.rfc1323=1 (confirmed)"),
            (
                "ts_recent",
                "tcp_input.c: SEQ_LEQ(th_seq, last_ack_sent), RFC 7323's relaxed rule (likely)",
            ),
            ("ts_hz", "tcp_ts_getticks: milliseconds (likely)"),
            (
                "initial_window",
                "net.inet.tcp.initcwnd_segments=10 (confirmed)",
            ),
            (
                "delayed_ack",
                "net.inet.tcp.delacktime=100 ms, per connection (confirmed)",
            ),
            (
                "ack_every_segments",
                "every second full segment (confirmed)",
            ),
            (
                "min_rto",
                "net.inet.tcp.rexmit_min=30 ms plus rexmit_slop=200 ms (confirmed)",
            ),
            (
                "window_rules",
                "tcp_output.c SWS rules and window updates, tcp_setpersist TCPTV_PERSMIN 5 s, TCPTV_PERSMAX 60 s (confirmed)",
            ),
        ],
    }
}

pub fn aix() -> StackProfile {
    StackProfile {
        name: "aix",
        description: "IBM AIX 7",
        nagle: NagleMode::Classic,
        timestamps: false,
        ts_recent: TsRecentRule::Rfc7323,
        ts_hz: 1000.0,
        initial_ttl: 64,
        initial_window: 4,
        delayed_ack: DelayedAckTimer::GlobalTick {
            period: stacks::BSD_FAST_TICK,
            ticks: 1,
        },
        ack_every_segments: 2,
        quickack_segments: 0,
        pingpong: false,
        min_rto: 1000 * MS,
        rto_rule: RtoRule::Rfc6298,
        cork_flush: None,
        autocork: false,
        window_rules: WindowRules::Bsd,
        ack_on_read: false,
        ack_full_segments_only: false,
        ack_one_byte_at_once: false,
        slow_start: SlowStart::ByteCounting,
        sources: &[
            ("initial_ttl", "64, the BSD default (likely)"),
            ("nagle", "classic Nagle (likely)"),
            ("timestamps", "rfc1323=0 by default (likely)"),
            ("initial_window", "4 segments (unconfirmed)"),
            (
                "delayed_ack",
                "BSD-style 200 ms fast timeout (seed 001 saw 0.2 s; the global tick is unconfirmed)",
            ),
            ("ack_every_segments", "every second full segment (likely)"),
            ("min_rto", "1 s minimum RTO (unconfirmed)"),
            (
                "window_rules",
                "BSD-derived SWS rules and persist bounds (unconfirmed)",
            ),
        ],
    }
}

/// The TCP model of the INET framework (OMNeT++) as its Nagle and delayed-ACK module tests
/// configure it (`tests/module/lib/defaults.ini`: TcpReno, MSS 1024, delayed ACKs on), so
/// that those tests' traces can be reproduced here.
pub fn inet() -> StackProfile {
    StackProfile {
        name: "inet",
        description: "INET framework TcpReno, as its module tests run it",
        nagle: NagleMode::Classic,
        timestamps: false,
        ts_recent: TsRecentRule::Rfc7323,
        ts_hz: 1000.0,
        initial_ttl: 32,
        initial_window: 1,
        delayed_ack: DelayedAckTimer::PerConnection { delay: 200 * MS },
        ack_every_segments: 2,
        quickack_segments: 0,
        pingpong: false,
        min_rto: 1000 * MS,
        rto_rule: RtoRule::Rfc6298,
        cork_flush: None,
        autocork: false,
        window_rules: WindowRules::Bsd,
        ack_on_read: false,
        ack_full_segments_only: true,
        ack_one_byte_at_once: true,
        slow_start: SlowStart::PerAck,
        sources: &[
            ("initial_ttl", "Ipv4 timeToLive 32 (likely)"),
            (
                "nagle",
                "TcpConnection::sendData: no sub-MSS segment while snd_una != snd_max (confirmed)",
            ),
            (
                "initial_window",
                "TcpBaseAlg::established: one MSS unless increasedIWEnabled (confirmed)",
            ),
            (
                "delayed_ack",
                "TcpBaseAlg::receiveSeqChanged: a 200 ms timer, not re-armed while scheduled (confirmed)",
            ),
            (
                "ack_every_segments",
                "full_sized_segment_counter >= 2: only full-sized segments count (confirmed)",
            ),
            (
                "ack_one_byte_at_once",
                "TcpConnection::processSegment1stThru8th: a one-byte segment is taken for a persist probe (confirmed)",
            ),
            (
                "slow_start",
                "TcpReno::receivedDataAck: cwnd += SMSS per ACK of new data (confirmed)",
            ),
        ],
    }
}
