//! Per connection: what its gaps were, how much time its stalls cost, which side held
//! them and which application pattern they point to, in each direction that stalled.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::fixes::{InferredScenario, rank_fixes};
use super::timer::{DelayedAckProfile, TimerShows, left_on_a_tick, read_timer_on};
use super::{DirectionDiagnosis, Fix, Role};
use crate::detect::{Confidence, Pattern, StallClass, StallEvent};
use crate::flow::{Connection, MssSource};
use crate::path::PathSide;
use crate::segment::Nanos;
use crate::side::{PerSide, Side};
use crate::stacks;

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
    side_roles: PerSide<Role>,
    pub endpoints: PerSide<SocketAddr>,
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
    /// directions); those the simulation showed no help for, of every direction, after
    /// all the others.
    pub fn fixes(&self) -> impl Iterator<Item = &Fix> {
        let stalled_as_given = self.inferred.as_ref().map(|i| i.simulated_stalled_share);
        let no_help = move |f: &&Fix| stalled_as_given.is_some_and(|s| f.simulated_as_no_help(s));
        let all = || self.directions.iter().flat_map(|d| d.fixes.iter());
        all()
            .filter(move |f| !no_help(f))
            .chain(all().filter(no_help))
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

    pub fn role_of_side(&self, side: Side) -> Role {
        self.side_roles[side]
    }

    pub fn endpoint_of_side(&self, side: Side) -> SocketAddr {
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
    let server_side = client_side.other();
    let mut side_roles = PerSide::new(Role::Client, Role::Client);
    side_roles[server_side] = Role::Server;
    let tcp_stalls: Vec<&StallEvent> = events.iter().filter(|e| e.class.is_tcp_stall()).collect();
    let unlisted = connection.unlisted;
    let unlisted_stalls: Vec<(u64, Nanos)> = StallClass::ALL
        .into_iter()
        .filter(|c| c.is_tcp_stall())
        .map(|c| unlisted[c.index()])
        .collect();
    let unlisted_time: Nanos = unlisted_stalls.iter().map(|(_, t)| *t).sum();
    let time_lost = time_covered(&tcp_stalls) + unlisted_time;
    let stall_count = tcp_stalls.len()
        + unlisted_stalls
            .iter()
            .map(|(n, _)| *n as usize)
            .sum::<usize>();

    let mut directions: Vec<DirectionDiagnosis> = Side::BOTH
        .into_iter()
        .filter_map(|holder| {
            let held: Vec<&StallEvent> = tcp_stalls
                .iter()
                .copied()
                .filter(|e| e.holder == Some(holder))
                .collect();
            let delayer = &connection.dirs[holder.other()];
            direction_diagnosis(
                &held,
                holder,
                side_roles,
                connection.endpoints,
                delayer.path(),
                stacks::initial_ttl(delayer.highest_ttl),
            )
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
        first.time_lost += unlisted_time;
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
        retransmitted_segments: u64::from(connection.dirs[Side::First].retransmitted_segments)
            + u64::from(connection.dirs[Side::Second].retransmitted_segments),
        client_mss: connection.send_mss(client_side),
        server_mss: connection.send_mss(server_side),
        client_path_rtt: connection.dirs[client_side].path_rtt(),
        server_path_rtt: connection.dirs[server_side].path_rtt(),
        client_messages: connection.dirs[client_side].messages,
        server_messages: connection.dirs[server_side].messages,
        timestamps: connection.dirs[Side::First].timestamps_seen
            && connection.dirs[Side::Second].timestamps_seen,
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

/// A tick's ACKs leave within this of its beat at the delayer (a timer interrupt's
/// lateness, the host's turnaround).
const TICK_TIMING: Nanos = 2 * crate::segment::NANOS_PER_MILLI;
/// Beyond this much spread on the way back, a spacing falls near a whole number of 200 ms
/// ticks by chance too often (one in ten) for three of them to show a tick.
const TICK_TOLERANCE_CEILING: Nanos = 10 * crate::segment::NANOS_PER_MILLI;

/// The time the stalls cover: where both ends were held at once, their stalls overlap,
/// and the connection lost that time once.
fn time_covered(stalls: &[&StallEvent]) -> Nanos {
    let mut spans: Vec<(Nanos, Nanos)> = stalls.iter().map(|e| (e.start, e.end)).collect();
    spans.sort_unstable();
    let mut reached = Nanos::MIN;
    let mut covered = 0;
    for (start, end) in spans {
        let start = start.max(reached);
        covered += (end - start).max(0);
        reached = reached.max(end);
    }
    covered
}

/// What the stalls `holder` held show: its delayer's timer, its pattern, whether its
/// Nagle is classic. None when it held none.
fn direction_diagnosis(
    held: &[&StallEvent],
    holder: Side,
    side_roles: PerSide<Role>,
    endpoints: PerSide<SocketAddr>,
    delayer_path: PathSide,
    delayer_ttl: Option<u8>,
) -> Option<DirectionDiagnosis> {
    if held.is_empty() {
        return None;
    }
    let delayer = holder.other();
    let delays: Vec<Nanos> = held.iter().filter_map(|e| e.ack_delay).collect();
    // The hold at the delayer: the ACK's round trip less the way to the delayer and back,
    // no less than the least the whole connection measured, no more than that plus the
    // spread its round trips showed (a queue moves both legs): of the path alone, or of
    // the replies (where the delayer's every pure ACK is held, only they show it).
    let spread = delayer_path.measured_spread.max(delayer_path.reply_spread);
    let ranges: Vec<(Nanos, Nanos)> = held
        .iter()
        .filter_map(|e| {
            let delay = e.ack_delay?;
            Some(match (e.ack_round_trip, delayer_path.least) {
                (Some(round_trip), least) if least > 0 => {
                    let most = (round_trip - least).max(delay);
                    ((most - spread).clamp(0, delay), most)
                }
                _ => (delay, delay),
            })
        })
        .collect();
    let delayed_ack = (!delays.is_empty()).then(|| {
        // The ACKs' times at the capture point move with the way back from the delayer:
        // by its spread. A tick holds pure ACKs for any time within its period, so the
        // path-alone samples of a tick's host spread as far as it held the shortest; its
        // replies, which no timer held, then bound the path's spread closer.
        let ack_times: Vec<Nanos> = held.iter().filter_map(|e| e.ack_time).collect();
        let way_back_spread = if delayer_path.replies_seen {
            delayer_path.measured_spread.min(delayer_path.reply_spread)
        } else {
            spread
        };
        let tolerance = TICK_TIMING + way_back_spread;
        let on_tick = tolerance <= TICK_TOLERANCE_CEILING && left_on_a_tick(&ack_times, tolerance);
        let shows = TimerShows {
            on_tick,
            first_data_held: held.iter().any(|e| e.ack_of_first_data),
            initial_ttl: delayer_ttl,
        };
        DelayedAckProfile {
            role: side_roles[delayer],
            endpoint: endpoints[delayer],
            samples: delays.len(),
            reading: read_timer_on(&delays, &ranges, shows),
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
