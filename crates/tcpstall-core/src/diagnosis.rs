//! From a tracked connection and its classified gaps to a verdict a person can act on:
//! how much time the stalls cost, whose timer held the ACKs and what stack that points
//! to, which application pattern caused them, and the fixes ranked with their gain.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::detect::{Confidence, Pattern, StallClass, StallEvent};
use crate::flow::{Connection, MssSource};
use crate::segment::{NANOS_PER_MILLI, Nanos};
use crate::stacks;

/// The two roles of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Client,
    Server,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// What tcpstall concludes about one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    NagleDelayedAckStalls,
    DelayedAckStalls,
    ReceiverWindowLimited,
    RetransmissionTimeouts,
    UnexplainedGaps,
    AppThinkTimeOnly,
    NoStall,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::NagleDelayedAckStalls => "nagle-delayed-ack-stalls",
            Verdict::DelayedAckStalls => "delayed-ack-stalls",
            Verdict::ReceiverWindowLimited => "receiver-window-limited",
            Verdict::RetransmissionTimeouts => "retransmission-timeouts",
            Verdict::UnexplainedGaps => "unexplained-gaps",
            Verdict::AppThinkTimeOnly => "application-think-time-only",
            Verdict::NoStall => "no-stall",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Verdict::NagleDelayedAckStalls => "stalls: Nagle's algorithm waited for delayed ACKs",
            Verdict::DelayedAckStalls => "stalls: the sender waited for delayed ACKs",
            Verdict::ReceiverWindowLimited => "the receiver's window held the sender",
            Verdict::RetransmissionTimeouts => "retransmission timeouts (loss)",
            Verdict::UnexplainedGaps => "gaps tcpstall cannot explain",
            Verdict::AppThinkTimeOnly => "no TCP stall: pauses are the applications' own",
            Verdict::NoStall => "no stall",
        }
    }
}

/// The delayed-ACK timer a receiver showed, and the stacks that use it.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayedAckProfile {
    pub role: Role,
    pub endpoint: SocketAddr,
    pub samples: usize,
    pub median: Nanos,
    pub min: Nanos,
    pub max: Nanos,
    pub timer: TimerGuess,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerGuess {
    /// 40 ms: Linux's TCP_DELACK_MIN, fired on jiffies.
    Linux40,
    /// 100 ms: FreeBSD's default `net.inet.tcp.delacktime`.
    FreeBsd100,
    /// 200 ms per connection: Windows (TcpDelAckTicks = 2), AIX.
    Fixed200,
    /// 0 to 200 ms: a global 200 ms tick as in classic BSD (delay depends on phase).
    PhasedTick200,
    /// None of the known defaults.
    Other,
}

impl TimerGuess {
    pub fn name(self) -> &'static str {
        match self {
            TimerGuess::Linux40 => "40ms",
            TimerGuess::FreeBsd100 => "100ms",
            TimerGuess::Fixed200 => "200ms",
            TimerGuess::PhasedTick200 => "0-200ms-tick",
            TimerGuess::Other => "other",
        }
    }

    pub fn stacks(self) -> &'static [&'static str] {
        match self {
            TimerGuess::Linux40 => &["Linux"],
            TimerGuess::FreeBsd100 => &["FreeBSD"],
            TimerGuess::Fixed200 => &["Windows", "AIX"],
            TimerGuess::PhasedTick200 => &["classic BSD", "AIX", "macOS before 10.5"],
            TimerGuess::Other => &[],
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            TimerGuess::Linux40 => "Linux (TCP_DELACK_MIN 40 ms)",
            TimerGuess::FreeBsd100 => "FreeBSD (delacktime 100 ms)",
            TimerGuess::Fixed200 => "Windows or AIX (200 ms timer)",
            TimerGuess::PhasedTick200 => "a classic BSD 200 ms tick (delay depends on its phase)",
            TimerGuess::Other => "no known stack default",
        }
    }
}

/// Reads the timer off the observed ACK delays. Linux fires its 40 ms timer on jiffies,
/// so 40 to 48 ms is seen; a tick-based stack spreads delays over its whole period.
pub fn infer_timer(delays: &[Nanos]) -> (Nanos, Nanos, Nanos, TimerGuess) {
    let mut sorted = delays.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    const MS: Nanos = NANOS_PER_MILLI;
    // Whole milliseconds of the median from `below` under a stack's timer to `above` over
    // it (the timer wheel and the path add to a timer; a capture's clock may subtract).
    let near = |timer: Nanos, below: Nanos, above: Nanos| {
        (timer - below..timer + above + MS).contains(&(median - median % MS))
    };
    let spread = (max - min) / MS;
    let guess = if near(stacks::LINUX_DELACK_MIN, 10 * MS, 30 * MS) && spread <= 40 {
        TimerGuess::Linux40
    } else if near(stacks::FREEBSD_DELACKTIME, 15 * MS, 25 * MS) && spread <= 40 {
        TimerGuess::FreeBsd100
    } else if near(stacks::WINDOWS_DELACK, 40 * MS, 40 * MS) && spread <= 60 {
        TimerGuess::Fixed200
    } else if sorted.len() >= 3 && max / MS <= (stacks::BSD_FAST_TICK + 40 * MS) / MS && spread > 60
    {
        TimerGuess::PhasedTick200
    } else {
        TimerGuess::Other
    };
    (median, min, max, guess)
}

/// Which change a fix makes, so that a simulation of the connection can apply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FixKind {
    /// Each message written in one call.
    OneWrite,
    /// Two requests in flight (pipelining, double buffering).
    TwoInFlight,
    /// TCP_NODELAY on the holder.
    NoDelay,
    /// One write per block and TCP_NODELAY on the holder.
    OneWriteNoDelay,
    /// A stack with Minshall's Nagle variant on the holder.
    Minshall,
    /// No delayed ACKs on the delayer (TCP_QUICKACK after every read, a route's
    /// quickack, TcpAckFrequency=1).
    AckAtOnce,
    /// More data in flight: no simulated counterpart.
    MoreInFlight,
}

impl FixKind {
    /// A short name for reports that list fixes without their full text (`watch`).
    pub fn name(self) -> &'static str {
        match self {
            FixKind::OneWrite => "one-write",
            FixKind::TwoInFlight => "two-in-flight",
            FixKind::NoDelay => "tcp-nodelay",
            FixKind::OneWriteNoDelay => "one-write-tcp-nodelay",
            FixKind::Minshall => "minshall-nagle",
            FixKind::AckAtOnce => "ack-at-once",
            FixKind::MoreInFlight => "more-in-flight",
        }
    }
}

/// What a simulation of the connection's inferred scenario gives with a fix applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// The connection's duration with the fix: its duration over the simulated speed-up.
    pub time: Nanos,
    /// Transactions per second with the fix over those of the scenario as inferred.
    pub speedup: f64,
    /// Share of the simulated transactions that still stall with the fix.
    pub stalled_share: f64,
}

/// One change that removes the stalls, with what it would save.
#[derive(Clone, Debug, PartialEq)]
pub struct Fix {
    pub role: Role,
    pub endpoint: SocketAddr,
    pub action: FixAction,
    pub note: &'static str,
    pub kind: FixKind,
    /// Time the connection would not have lost: the simulated saving when `predicted`
    /// is set, otherwise an estimate (every stall, or every ACK delay, removed); never
    /// more than the time the connection lost to its stalls.
    pub saves: Nanos,
    /// The simulated outcome, when the connection's scenario was inferred and run.
    pub predicted: Option<Prediction>,
}

/// What a fix asks to change: constant text, or a route to the peer on which the
/// receiver ACKs at once (its text names the peer, and is written only when shown).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FixAction {
    Text(&'static str),
    /// `local`: the peer is an address of the receiver's own host (loopback, or both
    /// ends on one address), reached through the `local` routing table.
    RouteQuickack {
        peer: IpAddr,
        local: bool,
    },
}

impl FixAction {
    /// The route fix for a receiver at `receiver` whose peer is `peer`.
    pub fn route_quickack(peer: IpAddr, receiver: IpAddr) -> FixAction {
        FixAction::RouteQuickack {
            peer,
            local: peer.is_loopback() || peer == receiver,
        }
    }

    /// The shell command that makes the change, for the fixes that are one.
    ///
    /// A peer on another host gets a host route of its own in the main table, through
    /// the gateway and device `ip route get` finds for it (none for a directly connected
    /// peer), with `quickack 1`. A peer on the receiver's own host is reached through
    /// the `local` table, which `ip rule` looks up before `main` (priority 0 against
    /// 32766): a route added to `main` is never used for it, so its own local route is
    /// replaced by the same route with `quickack 1`.
    pub fn command(&self) -> Option<String> {
        match *self {
            FixAction::Text(_) => None,
            FixAction::RouteQuickack {
                peer: IpAddr::V4(peer),
                local: true,
            } => Some(format!(
                "ip route replace $(ip route show table local {peer}) table local quickack 1"
            )),
            // IPv6 replaces a route only of the same metric, and one given as 0 (the
            // kernel's own local routes) is taken as 1024: the route is made again.
            FixAction::RouteQuickack {
                peer: IpAddr::V6(peer),
                local: true,
            } => Some(format!(
                "dev=$(ip -6 route show table local {peer} | grep -o 'dev [^ ]*') && ip -6 route del local {peer} table local && ip -6 route add local {peer} $dev table local quickack 1"
            )),
            FixAction::RouteQuickack { peer, local: false } => Some(format!(
                "ip {family}route add {peer}/{bits} $(ip {family}route get {peer} | sed -En '1s/^[^ ]+ (from [^ ]+ )?((via [^ ]+ )?dev [^ ]+).*/\\2/p') quickack 1",
                family = if peer.is_ipv4() { "" } else { "-6 " },
                bits = if peer.is_ipv4() { 32 } else { 128 },
            )),
        }
    }
}

impl fmt::Display for FixAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FixAction::Text(text) => f.write_str(text),
            FixAction::RouteQuickack { peer, .. } => write!(
                f,
                "route to {peer} with quickack 1: {}",
                self.command().unwrap_or_default()
            ),
        }
    }
}

impl Fix {
    /// Records a simulated outcome: `saves` becomes the simulated saving, at most `lost`
    /// (the time the connection lost to its stalls: a fix cannot give back more than
    /// was lost). When the simulation promised more, its time and speed-up are those of
    /// the saving kept.
    pub fn set_prediction(
        &mut self,
        duration: Nanos,
        speedup: f64,
        stalled_share: f64,
        lost: Nanos,
    ) {
        let duration = duration.max(0);
        let mut speedup = if speedup.is_finite() && speedup > 0.0 {
            speedup
        } else {
            1.0
        };
        let mut time = (duration as f64 / speedup).round() as Nanos;
        let lost = lost.clamp(0, duration);
        if duration - time > lost {
            time = duration - lost;
            speedup = if time > 0 {
                duration as f64 / time as f64
            } else {
                1.0
            };
        }
        self.saves = (duration - time).max(0);
        self.predicted = Some(Prediction {
            time,
            speedup,
            stalled_share,
        });
    }
}

/// One value of an inferred scenario, and where in the capture it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredValue {
    /// The scenario key (`client.stack`, `link.rtt_ms`, `workload.request`, ...).
    pub key: String,
    /// Its value, as JSON.
    pub value: serde_json::Value,
    /// Where it comes from.
    pub source: String,
}

/// The scenario a stalled direction points to (inferred by the simulator crate), and
/// how the simulation of it compares with the capture.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredScenario {
    /// The side that held the data in the direction modelled.
    pub holder: Role,
    pub values: Vec<InferredValue>,
    /// The scenario file, to edit and run again with `tcpstall simulate`.
    pub toml: String,
    /// Transactions simulated (at most a bound, whatever the capture holds).
    pub transactions_simulated: u32,
    /// The scenario as inferred: mean time per transaction and share stalled.
    pub simulated_transaction_time: Nanos,
    pub simulated_stalled_share: f64,
    /// The simulation stalled as the capture did; when not, the fixes keep their
    /// estimates.
    pub reproduced: bool,
    /// Every variant run: its name, time per transaction, speed-up and share stalled.
    pub variants: Vec<(String, Nanos, f64, f64)>,
}

/// The stalls one side held, and what they point to: who delayed the ACKs and with
/// which timer, the application pattern, and the fixes. A connection can stall both ways
/// (a request held by the client, its reply by the server), each with its own story.
#[derive(Clone, Debug)]
pub struct DirectionDiagnosis {
    /// The side that held the data, and the one whose ACKs it waited for.
    pub holder: Role,
    pub holder_endpoint: SocketAddr,
    pub delayer: Role,
    pub delayer_endpoint: SocketAddr,
    /// Its stalls: how many, how long in all, and the ACK delays behind them.
    pub stall_count: usize,
    pub time_lost: Nanos,
    pub ack_delay_time: Nanos,
    /// How many of them Nagle held.
    pub nagle_stalls: usize,
    pub delayed_ack: Option<DelayedAckProfile>,
    pub pattern: Option<Pattern>,
    /// The holder's Nagle held data behind full-sized segments only: classic Nagle,
    /// which Minshall's variant would not do.
    pub classic_nagle_evidence: bool,
    pub fixes: Vec<Fix>,
}

/// Everything concluded about one connection.
#[derive(Clone, Debug)]
pub struct ConnectionDiagnosis {
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub handshake_seen: bool,
    pub first_time: Nanos,
    pub last_time: Nanos,
    pub first_packet: u64,
    pub packets: u64,
    pub duplicates: u64,
    pub bytes_client_to_server: u64,
    pub bytes_server_to_client: u64,
    pub retransmitted_segments: u64,
    /// (MSS, where it comes from) for data sent by the client and by the server.
    pub client_mss: (u32, MssSource),
    pub server_mss: (u32, MssSource),
    /// Round trip from the capture point to each endpoint and back.
    pub client_path_rtt: Option<Nanos>,
    pub server_path_rtt: Option<Nanos>,
    /// Messages each side sent: runs of its data between two of the other side's.
    pub client_messages: u32,
    pub server_messages: u32,
    /// Both sides sent TCP timestamps.
    pub timestamps: bool,
    /// The scenario inferred from the worst direction and its simulation, when the
    /// caller ran one (`tcpstall analyze` does, for the worst stalled connections).
    pub inferred: Option<InferredScenario>,
    /// Every classified gap, in time order (up to each class's listing limit).
    pub events: Vec<StallEvent>,
    /// Gaps beyond the listing limits: (count, total duration) by class index.
    pub unlisted: [(u64, Nanos); StallClass::COUNT],
    /// Which role each event side is.
    side_roles: [Role; 2],
    pub endpoints: [SocketAddr; 2],
    pub verdict: Verdict,
    pub stall_count: usize,
    pub time_lost: Nanos,
    /// Each direction that stalled, the one that lost the most time first.
    pub directions: Vec<DirectionDiagnosis>,
    /// The first direction's, for a reader that wants one answer.
    pub delayed_ack: Option<DelayedAckProfile>,
    pub pattern: Option<Pattern>,
    pub holder: Option<Role>,
    pub delayer: Option<Role>,
    pub classic_nagle_evidence: bool,
    /// The capture point (its file or files) the connection was seen at, when several
    /// files saw the same traffic at different points and each was analysed on its own.
    pub capture_point: Option<std::sync::Arc<str>>,
}

impl ConnectionDiagnosis {
    /// Every direction's fixes, the first direction's first (kept once, in the
    /// directions).
    pub fn fixes(&self) -> impl Iterator<Item = &Fix> {
        self.directions.iter().flat_map(|d| d.fixes.iter())
    }

    pub fn duration(&self) -> Nanos {
        self.last_time - self.first_time
    }

    pub fn time_lost_share(&self) -> f64 {
        if self.duration() <= 0 {
            0.0
        } else {
            self.time_lost as f64 / self.duration() as f64
        }
    }

    pub fn role_of_side(&self, side: usize) -> Role {
        self.side_roles[side]
    }

    pub fn endpoint_of_side(&self, side: usize) -> SocketAddr {
        self.endpoints[side]
    }

    /// Where the capture point sits: 0 at the client, 1 at the server.
    pub fn capture_position(&self) -> Option<f64> {
        let (c, s) = (self.client_path_rtt?, self.server_path_rtt?);
        if c + s == 0 {
            return None;
        }
        Some(c as f64 / (c + s) as f64)
    }

    pub fn class_counts(&self) -> BTreeMap<StallClass, (usize, Nanos)> {
        let mut counts = BTreeMap::new();
        for event in &self.events {
            let entry = counts.entry(event.class).or_insert((0, 0));
            entry.0 += 1;
            entry.1 += event.duration();
        }
        for class in StallClass::ALL {
            let (count, total) = self.unlisted[class.index()];
            if count > 0 {
                let entry = counts.entry(class).or_insert((0, 0));
                entry.0 += count as usize;
                entry.1 += total;
            }
        }
        counts
    }

    /// The listed TCP stalls by how firmly the capture supports them, firmest first.
    pub fn confidence_counts(&self) -> Vec<(Confidence, usize)> {
        [Confidence::High, Confidence::Medium]
            .into_iter()
            .map(|level| {
                let n = self
                    .events
                    .iter()
                    .filter(|e| e.class.is_tcp_stall() && e.evidence.confidence == level)
                    .count();
                (level, n)
            })
            .collect()
    }

    /// Gaps of any class, listed or not.
    pub fn gap_count(&self) -> usize {
        self.events.len()
            + self
                .unlisted
                .iter()
                .map(|(n, _)| *n as usize)
                .sum::<usize>()
    }
}

/// Concludes on one tracked connection.
pub fn diagnose(connection: &mut Connection) -> ConnectionDiagnosis {
    let events = std::mem::take(&mut connection.events);
    let client_side = connection.client_side();
    let server_side = 1 - client_side;
    let mut side_roles = [Role::Client; 2];
    side_roles[server_side] = Role::Server;
    let tcp_stalls: Vec<&StallEvent> = events.iter().filter(|e| e.class.is_tcp_stall()).collect();
    let unlisted = connection.unlisted;
    let unlisted_stalls: Vec<(u64, Nanos)> = StallClass::ALL
        .into_iter()
        .filter(|c| c.is_tcp_stall())
        .map(|c| unlisted[c.index()])
        .collect();
    let time_lost: Nanos = tcp_stalls.iter().map(|e| e.duration()).sum::<Nanos>()
        + unlisted_stalls.iter().map(|(_, t)| *t).sum::<Nanos>();
    let stall_count = tcp_stalls.len()
        + unlisted_stalls
            .iter()
            .map(|(n, _)| *n as usize)
            .sum::<usize>();

    let mut directions: Vec<DirectionDiagnosis> = [0, 1]
        .into_iter()
        .filter_map(|holder| {
            let held: Vec<&StallEvent> = tcp_stalls
                .iter()
                .copied()
                .filter(|e| e.holder.map(usize::from) == Some(holder))
                .collect();
            direction_diagnosis(&held, holder, side_roles, connection.endpoints)
        })
        .collect();
    directions.sort_by_key(|d| std::cmp::Reverse(d.time_lost));
    // Kept until the report: without the room collecting left.
    directions.shrink_to_fit();
    if let Some(first) = directions.first_mut() {
        // Stalls beyond the listing limits are only counted: they go to the direction
        // that lost the most.
        let listed: usize = tcp_stalls.len();
        first.stall_count += stall_count - listed;
        first.time_lost += time_lost - tcp_stalls.iter().map(|e| e.duration()).sum::<Nanos>();
    }
    for direction in &mut directions {
        direction.fixes = rank_fixes(direction);
    }
    let primary = directions.first();
    let delayed_ack = primary.and_then(|d| d.delayed_ack.clone());
    let pattern = primary.and_then(|d| d.pattern);
    let classic_nagle_evidence = primary.is_some_and(|d| d.classic_nagle_evidence);
    let holder = primary.map(|d| d.holder);
    let delayer = primary.map(|d| d.delayer);

    let has = |class: StallClass| {
        events.iter().any(|e| e.class == class) || unlisted[class.index()].0 > 0
    };
    let verdict = if has(StallClass::NagleDelayedAck) {
        Verdict::NagleDelayedAckStalls
    } else if has(StallClass::DelayedAck) {
        Verdict::DelayedAckStalls
    } else if has(StallClass::ReceiverWindow) {
        Verdict::ReceiverWindowLimited
    } else if has(StallClass::RetransmissionTimeout) {
        Verdict::RetransmissionTimeouts
    } else if has(StallClass::Unexplained) {
        Verdict::UnexplainedGaps
    } else if has(StallClass::AppThinkTime) {
        Verdict::AppThinkTimeOnly
    } else {
        Verdict::NoStall
    };

    let mut diagnosis = ConnectionDiagnosis {
        client: connection.endpoints[client_side],
        server: connection.endpoints[server_side],
        handshake_seen: connection.handshake_seen(),
        first_time: connection.first_time,
        last_time: connection.last_time,
        first_packet: connection.first_packet,
        packets: connection.packets,
        duplicates: connection.duplicates,
        bytes_client_to_server: connection.dirs[client_side].data_bytes,
        bytes_server_to_client: connection.dirs[server_side].data_bytes,
        retransmitted_segments: connection.dirs[0].retransmitted_segments
            + connection.dirs[1].retransmitted_segments,
        client_mss: connection.send_mss(client_side),
        server_mss: connection.send_mss(server_side),
        client_path_rtt: connection.dirs[client_side].path_rtt(),
        server_path_rtt: connection.dirs[server_side].path_rtt(),
        client_messages: connection.dirs[client_side].messages,
        server_messages: connection.dirs[server_side].messages,
        timestamps: connection.dirs[0].timestamps_seen && connection.dirs[1].timestamps_seen,
        inferred: None,
        events: Vec::new(),
        unlisted,
        side_roles,
        endpoints: connection.endpoints,
        verdict,
        stall_count,
        time_lost,
        directions,
        delayed_ack,
        pattern,
        holder,
        delayer,
        classic_nagle_evidence,
        capture_point: None,
    };
    drop(tcp_stalls);
    diagnosis.events = events;
    diagnosis
}

/// What the stalls `holder` held show: its delayer's timer, its pattern, whether its
/// Nagle is classic. None when it held none.
fn direction_diagnosis(
    held: &[&StallEvent],
    holder: usize,
    side_roles: [Role; 2],
    endpoints: [SocketAddr; 2],
) -> Option<DirectionDiagnosis> {
    if held.is_empty() {
        return None;
    }
    let delayer = 1 - holder;
    let delays: Vec<Nanos> = held.iter().filter_map(|e| e.ack_delay).collect();
    let delayed_ack = (!delays.is_empty()).then(|| {
        let (median, min, max, timer) = infer_timer(&delays);
        DelayedAckProfile {
            role: side_roles[delayer],
            endpoint: endpoints[delayer],
            samples: delays.len(),
            median,
            min,
            max,
            timer,
        }
    });
    let nagle: Vec<&StallEvent> = held
        .iter()
        .copied()
        .filter(|e| e.class == StallClass::NagleDelayedAck)
        .collect();
    Some(DirectionDiagnosis {
        holder: side_roles[holder],
        holder_endpoint: endpoints[holder],
        delayer: side_roles[delayer],
        delayer_endpoint: endpoints[delayer],
        stall_count: held.len(),
        time_lost: held.iter().map(|e| e.duration()).sum(),
        ack_delay_time: delays.iter().sum(),
        nagle_stalls: nagle.len(),
        delayed_ack,
        pattern: most_common_pattern(&nagle),
        classic_nagle_evidence: nagle.iter().any(|e| !e.evidence.outstanding_small_segment),
        fixes: Vec::new(),
    })
}

fn most_common_pattern(events: &[&StallEvent]) -> Option<Pattern> {
    let mut counts: Vec<(Pattern, usize)> = Vec::new();
    for pattern in events.iter().filter_map(|e| e.pattern) {
        match counts.iter_mut().find(|(p, _)| p.name() == pattern.name()) {
            Some(entry) => entry.1 += 1,
            None => counts.push((pattern, 1)),
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(p, _)| p)
}

/// The fixes, best first, as docs/architecture.md ("The fixes, ranked") ranks them:
/// change how the application writes, then keep more than one request in flight, then
/// TCP_NODELAY on the sender, then immediate ACKs on the receiver.
fn rank_fixes(d: &DirectionDiagnosis) -> Vec<Fix> {
    let mut fixes = Vec::new();
    let holder_fix = |kind: FixKind, action: &'static str, note: &'static str| {
        Some(Fix {
            role: d.holder,
            endpoint: d.holder_endpoint,
            action: FixAction::Text(action),
            note,
            kind,
            saves: d.time_lost,
            predicted: None,
        })
    };
    let quickack = {
        let (action, note) = match d.delayed_ack.as_ref().map(|p| p.timer) {
            Some(TimerGuess::Fixed200) => (
                "acknowledge at once: TcpAckFrequency=1 (Windows) or tcp_nodelayack=1 (AIX)",
                "host-wide; more ACK packets",
            ),
            Some(TimerGuess::Linux40) => (
                "set TCP_QUICKACK again after every read",
                "Linux clears it after use; more ACK packets",
            ),
            _ => (
                "turn delayed ACKs off for this socket (TCP_QUICKACK on Linux)",
                "more ACK packets",
            ),
        };
        Some(Fix {
            role: d.delayer,
            endpoint: d.delayer_endpoint,
            action: FixAction::Text(action),
            note,
            kind: FixKind::AckAtOnce,
            // The ACK delays behind the stalls, but never more than the stalls took.
            saves: d.ack_delay_time.min(d.time_lost),
            predicted: None,
        })
    };
    // Linux 3.11+: RTAX_QUICKACK, a per-route metric that keeps the receiver out of
    // delayed-ACK mode for every connection on that route (tcp_in_quickack_mode).
    let route_quickack = matches!(
        d.delayed_ack.as_ref().map(|p| p.timer),
        Some(TimerGuess::Linux40)
    )
    .then(|| Fix {
        role: d.delayer,
        endpoint: d.delayer_endpoint,
        action: FixAction::route_quickack(d.holder_endpoint.ip(), d.delayer_endpoint.ip()),
        note: "root, no code change; every connection to that host ACKs at once; more ACK packets",
        kind: FixKind::AckAtOnce,
        saves: d.ack_delay_time.min(d.time_lost),
        predicted: None,
    });
    if d.nagle_stalls > 0 {
        {
            match d.pattern {
                Some(Pattern::BulkOddTail { .. }) => {
                    fixes.extend(holder_fix(
                        FixKind::TwoInFlight,
                        "send the next block before waiting for the reply (double buffering)",
                        "keeps data behind the last segment, so the ACK is never waited for",
                    ));
                    fixes.extend(holder_fix(
                        FixKind::OneWriteNoDelay,
                        "write each block in one call and set TCP_NODELAY",
                        "the sub-MSS tail leaves at once",
                    ));
                    if d.classic_nagle_evidence {
                        fixes.extend(holder_fix(
                        FixKind::Minshall,
                            "use a stack with Minshall's Nagle variant (Linux, macOS 10.5 and later)",
                            "a tail behind full-sized segments is then not held",
                        ));
                    }
                }
                _ => {
                    fixes.extend(holder_fix(
                        FixKind::OneWrite,
                        "write each request in one call (one buffer, or writev/sendmsg)",
                        "nothing is left for Nagle to hold",
                    ));
                    fixes.extend(holder_fix(
                        FixKind::TwoInFlight,
                        "keep two requests in flight (pipelining, double buffering)",
                        "the next request follows the one waiting for its ACK; with requests still written in pieces some stalls remain",
                    ));
                    fixes.extend(holder_fix(
                        FixKind::NoDelay,
                        "set TCP_NODELAY",
                        "every small write leaves at once; more small packets; on Linux, try it on the unchanged program first: tcpstall watch --fix nodelay -- PROGRAM",
                    ));
                }
            }
            fixes.extend(quickack);
            fixes.extend(route_quickack);
        }
    } else {
        fixes.extend(quickack);
        fixes.extend(route_quickack);
        fixes.extend(holder_fix(
            FixKind::MoreInFlight,
            "keep more data in flight (larger writes, or the next request before the reply)",
            "ACKs then come for every second segment, with no timer",
        ));
    }
    // Kept until the report: without the room their growth left.
    fixes.shrink_to_fit();
    fixes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[i64]) -> Vec<Nanos> {
        values.iter().map(|v| v * NANOS_PER_MILLI).collect()
    }

    #[test]
    fn linux_jiffy_rounded_40ms_timer() {
        assert_eq!(
            infer_timer(&ms(&[40, 44, 44, 43, 44])).3,
            TimerGuess::Linux40
        );
    }

    #[test]
    fn fixed_200ms_timer() {
        assert_eq!(infer_timer(&ms(&[200, 201, 199])).3, TimerGuess::Fixed200);
    }

    #[test]
    fn delays_spread_over_a_200ms_tick() {
        assert_eq!(
            infer_timer(&ms(&[12, 150, 77, 190, 40])).3,
            TimerGuess::PhasedTick200
        );
    }

    fn route_fix() -> Fix {
        Fix {
            role: Role::Server,
            endpoint: "127.0.0.1:6379".parse().expect("address"),
            action: FixAction::Text("set TCP_QUICKACK again after every read"),
            note: "",
            kind: FixKind::AckAtOnce,
            saves: 0,
            predicted: None,
        }
    }

    #[test]
    fn a_simulated_saving_is_at_most_the_time_lost() {
        let mut fix = route_fix();
        // The simulation says 157x faster on a 1 s connection that lost 88 ms.
        fix.set_prediction(1_000 * NANOS_PER_MILLI, 157.0, 0.0, 88 * NANOS_PER_MILLI);
        assert_eq!(fix.saves, 88 * NANOS_PER_MILLI);
        let p = fix.predicted.expect("prediction");
        assert_eq!(p.time, 912 * NANOS_PER_MILLI);
        assert!((p.speedup - 1000.0 / 912.0).abs() < 1e-9, "{}", p.speedup);
        // A saving within the time lost is the simulation's own.
        let mut fix = route_fix();
        fix.set_prediction(1_000 * NANOS_PER_MILLI, 2.0, 0.0, 800 * NANOS_PER_MILLI);
        assert_eq!(fix.saves, 500 * NANOS_PER_MILLI);
        assert_eq!(fix.predicted.map(|p| p.speedup), Some(2.0));
    }

    #[test]
    fn a_peer_on_the_same_host_gets_its_local_route_changed() {
        let ip = |s: &str| -> IpAddr { s.parse().expect("address") };
        let loopback = FixAction::route_quickack(ip("127.0.0.1"), ip("127.0.0.1"));
        assert_eq!(
            loopback.command().as_deref(),
            Some("ip route replace $(ip route show table local 127.0.0.1) table local quickack 1")
        );
        let same = FixAction::route_quickack(ip("10.1.2.3"), ip("10.1.2.3"));
        assert!(same.command().is_some_and(|c| c.contains("table local")));
        let v6 = FixAction::route_quickack(ip("::1"), ip("::1"));
        assert!(
            v6.command()
                .is_some_and(|c| c.starts_with("dev=$(ip -6 route show table local ::1"))
        );
        let remote = FixAction::route_quickack(ip("10.1.2.4"), ip("10.1.2.3"));
        let command = remote.command().expect("a command");
        assert!(
            command.starts_with("ip route add 10.1.2.4/32 $(ip route get 10.1.2.4 |"),
            "{command}"
        );
        assert!(!command.contains("table local") && !command.contains("GATEWAY"));
        assert_eq!(FixAction::Text("x").command(), None);
    }

    #[test]
    fn freebsd_and_unknown_timers() {
        assert_eq!(infer_timer(&ms(&[100, 101])).3, TimerGuess::FreeBsd100);
        assert_eq!(infer_timer(&ms(&[480])).3, TimerGuess::Other);
    }
}
