//! Joins what the kernel reported into stalls: a Nagle hold on one socket, released by an
//! ACK that the peer's delayed-ACK timer sent. When the peer is on this host its timer is
//! seen firing, and timed where it ran. When it is remote, the stall is inferred only
//! when something says a timer held the ACK: a pure ACK (a timer sends nothing else),
//! after the peer's quick-ACK start, later than the round trips the holder's kernel
//! measured allow; its timer is then the hold less that round trip, a range.
//!
//! When the holder is not watched (another host, or a process outside the command or the
//! filters), the stall is seen from the delayer's side: its timer fired after a small
//! segment while it had nothing to send, and the peer's next small segment, continuing
//! the stream, came within the round trips the delayer's kernel measured of that ACK,
//! as a Nagle sender's released bytes do. A stall that both sides showed is reported
//! once, from the holder's side.

use std::collections::VecDeque;
use std::net::SocketAddr;

use serde::Serialize;
use tcpstall_core::detect::StallClass;
use tcpstall_core::diagnosis::FixKind;

use crate::event::{DelayedAckAnswered, DelayedAckFired, NagleHold, Process, WatchEvent};
use crate::service::Service;

/// How long a timer that fired is kept to be matched with the hold it released: far
/// above any delayed-ACK timeout (at most 500 ms, RFC 1122 4.2.3.2).
const TIMER_MEMORY_NS: u64 = 2_000_000_000;
/// At most this many fired timers are kept (memory stays bounded under any load).
const TIMER_MEMORY_LEN: usize = 4096;
/// A hold waits this long for a timer event that the ring buffer delivered late (the
/// timer fires on another CPU than the one that sees the ACK).
const LATE_TIMER_NS: u64 = 20_000_000;
/// The ACK leaves when the timer fires: it reaches a local holder within this, plus the
/// holder's smoothed round trip when the peer is on this host behind a path of its own
/// (another network namespace with a delay).
const TIMER_TO_ACK_NS: u64 = 5_000_000;
/// How much later than the round trip a host may send what an ACK released: the
/// analyzer's allowance for the same link of its evidence, measured in the lab. It is the
/// clock granularity G of the round-trip bound below.
pub const HOST_TURNAROUND_NS: u64 = tcpstall_core::path::HOST_TURNAROUND as u64;
/// RFC 6298 (2.3): RTO = SRTT + max(G, K * RTTVAR), K = 4: a round trip beyond it is
/// what a sender takes for a lost segment.
const RTTVAR_FACTOR: u64 = 4;
/// A Linux receiver ACKs at once (quick-ACK mode) the first data it gets, and up to 16
/// segments (TCP_MAX_QUICKACKS, include/net/tcp.h) until it answers with data of its own
/// (ping-pong mode, tcp_event_data_sent): such ACKs were not delayed.
const QUICKACK_SEGMENTS: u32 = 16;
/// The shortest delayed-ACK timer of the known stacks, less a jiffy (stacks.rs).
const SHORTEST_TIMER_NS: u64 = tcpstall_core::stacks::SHORTEST_TIMER as u64;

/// A connection's round trips as its kernel measured them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundTrips {
    pub smoothed_us: u32,
    /// RFC 6298's RTTVAR (the kernel's `mdev_us / 4`).
    pub variation_us: u32,
    /// The windowed least (`tcp_min_rtt`; `u32::MAX` or 0 before any sample).
    pub least_us: u32,
}

impl RoundTrips {
    /// The least round trip, or the smoothed one when no least is known.
    pub fn least_ns(self) -> u64 {
        let least = if self.least_us == 0 || self.least_us == u32::MAX {
            self.smoothed_us
        } else {
            self.least_us
        };
        u64::from(least) * 1000
    }

    /// The longest round trip the distribution allows: RFC 6298's bound,
    /// SRTT + max(G, 4 RTTVAR), with the host's turnaround as G.
    pub fn longest_ns(self) -> u64 {
        u64::from(self.smoothed_us) * 1000
            + (RTTVAR_FACTOR * u64::from(self.variation_us) * 1000).max(HOST_TURNAROUND_NS)
    }
}

impl RoundTrips {
    /// The latest the answer to an ACK may come (an ACK and the segment it frees make one
    /// round trip): RFC 6298's bound, SRTT + max(G, K RTTVAR) with K = 4, with the
    /// variation read as the larger of the kernel's mean deviation and the spread of the
    /// round trips below the smoothed one (smoothed less least). A queue that waits a few
    /// milliseconds now and then keeps the mean deviation small and the least far below
    /// the smoothed one, and its rarer longer waits reach as far above it.
    pub fn answer_ns(self) -> u64 {
        let smoothed = u64::from(self.smoothed_us) * 1000;
        let spread = smoothed.saturating_sub(self.least_ns());
        let variation = (u64::from(self.variation_us) * 1000).max(spread);
        smoothed + (RTTVAR_FACTOR * variation).max(HOST_TURNAROUND_NS)
    }
}

/// How the delayer's timer was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimerBasis {
    /// Seen firing on this host, timed on the delayer's socket from the last segment's
    /// arrival.
    Fired,
    /// Seen from the delayer's side: from the small segment to the ACK, by its socket's
    /// clock.
    DelayerClock,
    /// Not seen (a remote delayer): the hold less the round trip the holder's kernel
    /// measured, a range.
    Estimated,
}

/// A timer known only as a range: the hold less the longest and the least round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TimerRange {
    pub low_ns: u64,
    pub high_ns: u64,
}

/// How the delayed ACK is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// The peer is on this host and its delayed-ACK timer was seen firing.
    TimerSeen,
    /// The peer is remote: a pure ACK, after the peer's quick-ACK start, later than the
    /// round trips the holder's kernel measured allow.
    Inferred,
    /// Seen from the delayer on this host, the holder unwatched: its timer sent the ACK
    /// after a small segment, and the peer's next small segment answered it within the
    /// connection's round trip.
    DelayerSide,
}

/// The side that delayed its ACK.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Delayer {
    pub endpoint: SocketAddr,
    /// The process on this host that owns the peer socket, when known.
    pub process: Option<Process>,
    /// The delayer's timer, measured where it runs: when its firing was seen, from the
    /// last segment's arrival on its socket to the fire; seen from the delayer's side,
    /// from the last segment before the timer to its ACK, by the socket's own clock.
    /// `None` for a remote delayer (see `timer_range`).
    pub timer_ns: Option<u64>,
    /// Seen from the delayer's side: from its ACK to the holder's released segment.
    pub answered_after_ns: Option<u64>,
    /// How `timer_ns` was measured, or that it is estimated (`timer_range`), when known.
    pub timer_basis: Option<TimerBasis>,
    /// A remote delayer's timer: the hold less the holder's round trip.
    pub timer_range: Option<TimerRange>,
    /// The delayer process's service (its cgroup), named when the stall is published.
    pub service: Option<Service>,
}

/// One stall, as it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stall {
    pub class: StallClass,
    /// The holding process, when it is on this host and known.
    pub holder: Option<Process>,
    /// The holder's service (its cgroup), named when the stall is published.
    pub holder_service: Option<Service>,
    /// The holder's socket: `local` is the holder's end.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub held_bytes: u32,
    pub mss: u32,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub smoothed_rtt_us: u32,
    pub delayer: Delayer,
    pub evidence: Evidence,
}

impl Stall {
    /// The fixes, as the analyzer ranks them for write-write-read: on the holder, one
    /// write per message or TCP_NODELAY; on the delayer, ACKs at once.
    pub fn fixes(&self) -> [(&'static str, FixKind); 3] {
        [
            ("holder", FixKind::OneWrite),
            ("holder", FixKind::NoDelay),
            ("delayer", FixKind::AckAtOnce),
        ]
    }
}

/// Names the process holding a socket, from the socket's inode.
pub type OwnerLookup = Box<dyn FnMut(u64) -> Option<Process>>;
/// Names the process on this host holding the socket with these (local, remote)
/// endpoints, if any.
pub type PeerLookup = Box<dyn FnMut(SocketAddr, SocketAddr) -> Option<Process>>;

/// A timer that fired, and whether a hold it released has claimed it.
struct Fired {
    timer: DelayedAckFired,
    claimed: bool,
}

/// A delayer-side record waiting to be judged, with its processes named on arrival.
struct Answered {
    record: DelayedAckAnswered,
    delayer: Option<Process>,
    holder: Option<Process>,
}

/// Turns the event stream into stalls.
pub struct StallAssembler {
    min_stall_ns: u64,
    owner_of: OwnerLookup,
    peer_of: PeerLookup,
    fired: VecDeque<Fired>,
    waiting: VecDeque<NagleHold>,
    answered: VecDeque<Answered>,
    /// Holds that were too short, or released without a delayed ACK.
    pub short_holds: u64,
    /// Delayer-side records of stalls the holder's side reported.
    pub seen_from_both_sides: u64,
}

impl StallAssembler {
    /// `owner_of` names a delayer's process when its timer held a stall: at once when the
    /// hold's end arrives (the process may exit soon after), else when it is judged.
    /// `peer_of` names a holder on this host that its own side did not show.
    pub fn new(min_stall_ns: u64, owner_of: OwnerLookup, peer_of: PeerLookup) -> StallAssembler {
        StallAssembler {
            min_stall_ns,
            owner_of,
            peer_of,
            fired: VecDeque::new(),
            waiting: VecDeque::new(),
            answered: VecDeque::new(),
            short_holds: 0,
            seen_from_both_sides: 0,
        }
    }

    pub fn push(&mut self, event: WatchEvent) {
        match event {
            WatchEvent::DelayedAckFired(fired) => {
                while self.fired.len() >= TIMER_MEMORY_LEN
                    || self
                        .fired
                        .front()
                        .is_some_and(|f| f.timer.fired_ns + TIMER_MEMORY_NS < fired.fired_ns)
                {
                    self.fired.pop_front();
                }
                self.fired.push_back(Fired {
                    timer: fired,
                    claimed: false,
                });
            }
            WatchEvent::NagleHold(hold) => {
                if self.waiting.len() >= TIMER_MEMORY_LEN {
                    // Memory stays bounded: the oldest is judged without waiting longer.
                    if let Some(oldest) = self.waiting.pop_front() {
                        self.short_holds += 1;
                        drop(oldest);
                    }
                }
                if self.is_long_enough(&hold) {
                    self.named_releasing_timer(&hold);
                } else {
                    self.releasing_timer(&hold);
                }
                self.waiting.push_back(hold);
            }
            WatchEvent::DelayedAckAnswered(record) => {
                if self.answered.len() >= TIMER_MEMORY_LEN {
                    self.answered.pop_front();
                }
                // Named now, as either process may exit soon after; not when the holder's
                // side already has it, nor when it cannot be a stall.
                let (mut delayer, mut holder) = (None, None);
                if !self.claimed(&record) && self.delayer_side_stall(&record).is_some() {
                    delayer = (self.owner_of)(record.socket_inode);
                    holder = (self.peer_of)(record.socket.remote, record.socket.local);
                }
                self.answered.push_back(Answered {
                    record,
                    delayer,
                    holder,
                });
            }
        }
    }

    /// Stalls whose holds ended before `now_ns - LATE_TIMER_NS`, in the order they ended.
    pub fn ready(&mut self, now_ns: u64) -> Vec<Stall> {
        let mut stalls = Vec::new();
        while let Some(hold) = self.waiting.front() {
            if hold.released_ns + LATE_TIMER_NS > now_ns {
                break;
            }
            let hold = self.waiting.pop_front().expect("front");
            match self.judge(hold) {
                Some(stall) => stalls.push(stall),
                None => self.short_holds += 1,
            }
        }
        // After the holds that ended before them, which claim the timers they saw.
        while let Some(answered) = self.answered.front() {
            if answered.record.answered_ns + LATE_TIMER_NS > now_ns {
                break;
            }
            let answered = self.answered.pop_front().expect("front");
            if self.claimed(&answered.record) {
                self.seen_from_both_sides += 1;
                continue;
            }
            if let Some(stall) = self.judge_answered(answered) {
                stalls.push(stall);
            }
        }
        stalls
    }

    /// Every remaining hold, judged now (at the end of the watch).
    pub fn finish(&mut self) -> Vec<Stall> {
        self.ready(u64::MAX - LATE_TIMER_NS)
    }

    /// The peer's timer that fired during the hold, shortly before the ACK arrived (the
    /// peer's socket has the hold's endpoints swapped), marked as claimed by the hold.
    /// Timers are searched from the newest back to those older than the hold. A timer
    /// that fired while a process held the peer's socket sent its ACK only when the
    /// process let go (tcp_delack_timer defers to release_sock), any time later.
    fn releasing_timer(&mut self, hold: &NagleHold) -> Option<usize> {
        let i = self
            .fired
            .iter()
            .rev()
            .take_while(|f| f.timer.fired_ns + LATE_TIMER_NS >= hold.start_ns)
            .position(|f| {
                let f = &f.timer;
                f.socket.local == hold.socket.remote
                    && f.socket.remote == hold.socket.local
                    && f.fired_ns >= hold.start_ns
                    && f.fired_ns <= hold.released_ns
                    && (f.deferred
                        || hold.released_ns - f.fired_ns
                            <= TIMER_TO_ACK_NS + u64::from(hold.smoothed_rtt_us) * 1000)
            })
            .map(|from_back| self.fired.len() - 1 - from_back)?;
        self.fired[i].claimed = true;
        Some(i)
    }

    /// The timer that released this hold, with its process named if it was not yet.
    fn named_releasing_timer(&mut self, hold: &NagleHold) -> Option<usize> {
        let i = self.releasing_timer(hold)?;
        let timer = &mut self.fired[i].timer;
        if timer.owner.is_none() {
            timer.owner = (self.owner_of)(timer.socket_inode);
        }
        Some(i)
    }

    /// Whether a hold released by this delayer-side record's timer was seen.
    fn claimed(&self, record: &DelayedAckAnswered) -> bool {
        self.fired.iter().rev().any(|f| {
            f.claimed && f.timer.fired_ns == record.fired_ns && f.timer.socket == record.socket
        })
    }

    /// The rule of the delayer's side. The kernel has checked what marks the answer: the
    /// peer's next data segment starts at the sequence the ACK acknowledged, is smaller
    /// than a full segment, and the delayer sent nothing in between. Here: it came within
    /// the round trips the delayer's kernel measured of the ACK leaving
    /// ([`RoundTrips::answer_ns`]: an ACK and the segment it frees make one round trip),
    /// and the stall, from the segment the ACK waited for to the released one, lasted
    /// `min_stall` or more. Returns (answered after the ACK, duration).
    fn delayer_side_stall(&self, record: &DelayedAckAnswered) -> Option<(u64, u64)> {
        let answered_after = record.answered_ns.checked_sub(record.fired_ns)?;
        let round_trips = RoundTrips {
            smoothed_us: record.smoothed_rtt_us,
            variation_us: record.rtt_var_us,
            least_us: record.min_rtt_us,
        };
        if answered_after > round_trips.answer_ns() {
            return None;
        }
        let duration = record.timer_ns.unwrap_or(0) + answered_after;
        (duration >= self.min_stall_ns).then_some((answered_after, duration))
    }

    fn judge_answered(&mut self, answered: Answered) -> Option<Stall> {
        let Answered {
            record,
            delayer,
            holder,
        } = answered;
        let (answered_after, duration_ns) = self.delayer_side_stall(&record)?;
        Some(Stall {
            class: StallClass::NagleDelayedAck,
            holder,
            holder_service: None,
            local: record.socket.remote,
            remote: record.socket.local,
            held_bytes: record.released_bytes,
            mss: record.mss,
            start_ns: record.answered_ns - duration_ns,
            duration_ns,
            smoothed_rtt_us: record.smoothed_rtt_us,
            delayer: Delayer {
                endpoint: record.socket.local,
                process: delayer,
                timer_ns: record.timer_ns,
                answered_after_ns: Some(answered_after),
                timer_basis: record.timer_ns.map(|_| TimerBasis::DelayerClock),
                timer_range: None,
                service: None,
            },
            evidence: Evidence::DelayerSide,
        })
    }

    fn is_long_enough(&self, hold: &NagleHold) -> bool {
        hold.released_ns.saturating_sub(hold.start_ns) >= self.min_stall_ns
    }

    fn judge(&mut self, hold: NagleHold) -> Option<Stall> {
        if !self.is_long_enough(&hold) {
            // A timer event delivered after the hold is claimed all the same.
            self.releasing_timer(&hold);
            return None;
        }
        let duration_ns = hold.released_ns - hold.start_ns;
        let timer = self
            .named_releasing_timer(&hold)
            .map(|i| &self.fired[i].timer);
        let (evidence, delayer) = match timer {
            Some(fired) => (
                Evidence::TimerSeen,
                Delayer {
                    endpoint: hold.socket.remote,
                    process: fired.owner.clone(),
                    // As it ran on the delayer's socket; else from the held send, which
                    // is the timer only when the data reached the peer at once.
                    timer_ns: Some(
                        fired
                            .timer_ns
                            .unwrap_or(fired.fired_ns.saturating_sub(hold.start_ns)),
                    ),
                    answered_after_ns: None,
                    timer_basis: Some(TimerBasis::Fired),
                    timer_range: None,
                    service: None,
                },
            ),
            None => (
                Evidence::Inferred,
                Delayer {
                    endpoint: hold.socket.remote,
                    process: None,
                    timer_ns: None,
                    answered_after_ns: None,
                    timer_basis: Some(TimerBasis::Estimated),
                    timer_range: Some(remote_timer(&hold)?),
                    service: None,
                },
            ),
        };
        Some(Stall {
            class: StallClass::NagleDelayedAck,
            holder: Some(hold.holder),
            holder_service: None,
            local: hold.socket.local,
            remote: hold.socket.remote,
            held_bytes: hold.held_bytes,
            mss: hold.mss,
            start_ns: hold.start_ns,
            duration_ns,
            smoothed_rtt_us: hold.smoothed_rtt_us,
            delayer,
            evidence,
        })
    }
}

/// The holder's round trips as its kernel measured them before the releasing ACK.
fn holder_round_trips(hold: &NagleHold) -> RoundTrips {
    RoundTrips {
        smoothed_us: hold.smoothed_rtt_us,
        variation_us: hold.rtt_var_us,
        least_us: hold.min_rtt_us,
    }
}

/// Whether a Linux peer still ACKs this connection's data at once: it has had no more
/// than its first data segment, or it has not answered with data of its own and had no
/// more than its quick ACKs' worth (tcp_event_data_recv, tcp_incr_quickack).
fn peer_quick_acking(hold: &NagleHold) -> bool {
    hold.data_segments_out <= 1
        || (hold.data_segments_in == 0 && hold.data_segments_out <= QUICKACK_SEGMENTS)
}

/// A remote peer's timer held the ACK that released this hold, and how long it ran; or
/// `None` when nothing says a timer held it. It did when the ACK carried no data (a
/// delayed-ACK timer sends a pure ACK: tcp_delack_timer_handler -> tcp_send_ack; an ACK
/// riding on the peer's answer waited for the answer), the peer was past its quick-ACK
/// start, and the hold outlasted the round trips the holder's kernel measured: beyond
/// RFC 6298's bound, or beyond the least round trip by the shortest known timer (the
/// kernel counts the delayed ACKs among its samples, so on a connection that stalls at
/// every exchange the bound widens and only the least round trip stays put). The timer
/// is the hold less the round trip: the least and the longest give its range.
fn remote_timer(hold: &NagleHold) -> Option<TimerRange> {
    if hold.ack_payload > 0 || peer_quick_acking(hold) {
        return None;
    }
    let duration = hold.released_ns.saturating_sub(hold.start_ns);
    let round_trips = holder_round_trips(hold);
    let beyond_the_bound = duration > round_trips.longest_ns();
    let beyond_the_least_by_a_timer = duration >= round_trips.least_ns() + SHORTEST_TIMER_NS;
    (beyond_the_bound || beyond_the_least_by_a_timer).then(|| TimerRange {
        low_ns: duration.saturating_sub(round_trips.longest_ns()),
        high_ns: duration.saturating_sub(round_trips.least_ns()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{
        Endpoints, decode,
        tests::{answered_record, record},
    };

    const MS: u64 = 1_000_000;

    /// Socket inodes as the test records carry them: the pid times 1000.
    fn assembler() -> StallAssembler {
        StallAssembler::new(
            2 * MS,
            Box::new(|inode| {
                (inode == 11_000).then(|| Process {
                    pid: 11,
                    comm: "server".into(),
                })
            }),
            Box::new(|local, remote| {
                (local.port() == 40000 && remote.port() == 8000).then(|| Process {
                    pid: 10,
                    comm: "client".into(),
                })
            }),
        )
    }

    /// The server's side: its timer fired at `fired` after a segment `timer` earlier, and
    /// the client's next segment came at `answered`.
    fn answered(fired: u64, answered: u64, timer: u64) -> WatchEvent {
        decode(&answered_record(
            fired,
            answered,
            timer,
            ([127, 0, 0, 1], 8000),
            ([127, 0, 0, 1], 40000),
        ))
        .unwrap()
    }

    fn hold(start: u64, end: u64) -> WatchEvent {
        decode(&record(
            1,
            10,
            start,
            end,
            6,
            ([127, 0, 0, 1], 40000),
            ([127, 0, 0, 1], 8000),
            "client",
        ))
        .unwrap()
    }

    fn fired(at: u64) -> WatchEvent {
        decode(&record(
            2,
            11,
            0,
            at,
            0,
            ([127, 0, 0, 1], 8000),
            ([127, 0, 0, 1], 40000),
            "server",
        ))
        .unwrap()
    }

    #[test]
    fn a_hold_released_by_the_peers_timer_is_a_stall() {
        let mut a = assembler();
        a.push(fired(140 * MS));
        a.push(hold(100 * MS, 140 * MS + 50_000));
        assert!(a.ready(150 * MS).is_empty(), "waits for a late timer event");
        let stalls = a.ready(170 * MS);
        assert_eq!(stalls.len(), 1);
        let s = &stalls[0];
        assert_eq!(s.evidence, Evidence::TimerSeen);
        assert_eq!(s.holder.as_ref().unwrap().comm, "client");
        assert_eq!(s.delayer.process.as_ref().unwrap().comm, "server");
        assert_eq!(s.delayer.process.as_ref().unwrap().pid, 11);
        assert_eq!(s.delayer.timer_ns, Some(40 * MS));
        assert_eq!(s.class.name(), "nagle-delayed-ack");
    }

    #[test]
    fn a_timer_event_delivered_after_the_hold_still_matches() {
        let mut a = assembler();
        a.push(hold(0, 41 * MS));
        a.push(fired(41 * MS - 10_000));
        assert_eq!(a.finish()[0].evidence, Evidence::TimerSeen);
    }

    #[test]
    fn a_timer_deferred_by_a_process_holding_the_socket_releases_later() {
        // The timer fired 40 ms into the hold while the server's process held its
        // socket; the ACK left when it let go, 30 ms later.
        let deferred = |deferred: bool| {
            let WatchEvent::DelayedAckFired(mut timer) = fired(40 * MS) else {
                unreachable!()
            };
            timer.deferred = deferred;
            let mut a = assembler();
            a.push(WatchEvent::DelayedAckFired(timer));
            a.push(hold(0, 70 * MS));
            a.finish()[0].evidence
        };
        assert_eq!(deferred(true), Evidence::TimerSeen);
        assert_eq!(deferred(false), Evidence::Inferred);
    }

    #[test]
    fn the_delayer_is_named_when_the_hold_ends_not_only_when_judged() {
        // The lookup answers once: the delayer's process exits right after the stall.
        let mut answered = false;
        let mut a = StallAssembler::new(
            2 * MS,
            Box::new(move |_| {
                let first = !answered;
                answered = true;
                first.then(|| Process {
                    pid: 11,
                    comm: "server".into(),
                })
            }),
            Box::new(|_, _| None),
        );
        a.push(fired(40 * MS));
        a.push(hold(0, 40 * MS + 10_000));
        let stalls = a.finish();
        assert_eq!(stalls[0].delayer.process.as_ref().unwrap().pid, 11);
    }

    #[test]
    fn a_short_hold_is_no_stall() {
        let mut a = assembler();
        a.push(hold(0, MS));
        assert!(a.finish().is_empty());
        assert_eq!(a.short_holds, 1);
    }

    #[test]
    fn a_remote_peer_is_inferred_from_the_round_trip() {
        let mut a = assembler();
        // smoothed RTT in the record: 50 us
        a.push(hold(0, 40 * MS));
        let stalls = a.finish();
        assert_eq!(stalls[0].evidence, Evidence::Inferred);
        assert_eq!(stalls[0].delayer.process, None);
    }

    #[test]
    fn a_timer_of_another_connection_does_not_match() {
        let mut a = assembler();
        let WatchEvent::DelayedAckFired(mut other) = fired(40 * MS) else {
            unreachable!()
        };
        other.socket = Endpoints {
            local: "127.0.0.1:9000".parse().unwrap(),
            remote: "127.0.0.1:40000".parse().unwrap(),
        };
        a.push(WatchEvent::DelayedAckFired(other));
        a.push(hold(0, 40 * MS + 10_000));
        assert_eq!(a.finish()[0].evidence, Evidence::Inferred);
    }

    #[test]
    fn the_delayers_side_alone_is_a_stall_naming_both_ends() {
        let mut a = assembler();
        a.push(fired(140 * MS));
        // Answered 40 us after the ACK: within 30 us + 10 us + the turnaround.
        a.push(answered(140 * MS, 140 * MS + 40_000, 40 * MS));
        assert!(a.ready(150 * MS).is_empty(), "waits for a late hold event");
        let stalls = a.ready(170 * MS);
        assert_eq!(stalls.len(), 1);
        let s = &stalls[0];
        assert_eq!(s.evidence, Evidence::DelayerSide);
        assert_eq!(s.duration_ns, 40 * MS + 40_000);
        assert_eq!(s.start_ns, 100 * MS);
        assert_eq!(s.local, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(s.holder.as_ref().unwrap().pid, 10);
        assert_eq!(s.delayer.endpoint, "127.0.0.1:8000".parse().unwrap());
        assert_eq!(s.delayer.process.as_ref().unwrap().pid, 11);
        assert_eq!(s.delayer.timer_ns, Some(40 * MS));
        assert_eq!(s.delayer.answered_after_ns, Some(40_000));
    }

    #[test]
    fn an_answer_later_than_the_round_trip_is_no_stall() {
        let mut a = assembler();
        // 0.1 ms beyond the bound: a 50 us smoothed round trip and a host's turnaround
        // (more than 4 x 10 us of RTTVAR) after the ACK.
        let late = 140 * MS + 50_000 + HOST_TURNAROUND_NS + 100_000;
        a.push(answered(140 * MS, late, 40 * MS));
        assert!(a.finish().is_empty());
    }

    #[test]
    fn a_stall_both_sides_saw_is_reported_once_from_the_holder() {
        let mut a = assembler();
        a.push(fired(140 * MS));
        a.push(hold(100 * MS, 140 * MS + 20_000));
        a.push(answered(140 * MS, 140 * MS + 40_000, 40 * MS));
        let stalls = a.finish();
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].evidence, Evidence::TimerSeen);
        assert_eq!(a.seen_from_both_sides, 1);
    }

    #[test]
    fn both_ends_on_this_host_behind_a_delay_are_one_stall() {
        let mut a = assembler();
        // A 20 ms round trip between two network namespaces: the ACK reaches the holder
        // 10 ms after the timer fired, the released bytes the delayer 10 ms later.
        let WatchEvent::NagleHold(mut slow) = hold(100 * MS, 150 * MS) else {
            unreachable!()
        };
        slow.smoothed_rtt_us = 20_000;
        a.push(fired(140 * MS));
        a.push(WatchEvent::NagleHold(slow));
        let WatchEvent::DelayedAckAnswered(mut answer) = answered(140 * MS, 160 * MS, 30 * MS)
        else {
            unreachable!()
        };
        answer.min_rtt_us = 20_000;
        a.push(WatchEvent::DelayedAckAnswered(answer));
        let stalls = a.finish();
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].evidence, Evidence::TimerSeen);
        assert_eq!(a.seen_from_both_sides, 1);
    }

    #[test]
    fn a_short_hold_released_by_the_timer_claims_it_too() {
        let mut a = assembler();
        // The holder wrote 1 ms before the timer fired: its wait, not the delayer's
        // 40 ms, is what it lost, and the delayer's side does not report it again.
        a.push(hold(139 * MS + 500_000, 140 * MS + 20_000));
        a.push(fired(140 * MS));
        a.push(answered(140 * MS, 140 * MS + 40_000, 40 * MS));
        assert!(a.finish().is_empty());
        assert_eq!(a.seen_from_both_sides, 1);
    }

    /// A hold on a path with these round trips (ms): smoothed, RTTVAR, least.
    fn hold_on_path(start: u64, end: u64, smoothed: f64, variation: f64, least: f64) -> NagleHold {
        let WatchEvent::NagleHold(mut h) = hold(start, end) else {
            unreachable!()
        };
        h.smoothed_rtt_us = (smoothed * 1e3) as u32;
        h.rtt_var_us = (variation * 1e3) as u32;
        h.min_rtt_us = (least * 1e3) as u32;
        h
    }

    fn answered_on_path(
        fired: u64,
        answered_at: u64,
        smoothed: f64,
        variation: f64,
        least: f64,
    ) -> WatchEvent {
        let WatchEvent::DelayedAckAnswered(mut a) = answered(fired, answered_at, 42 * MS) else {
            unreachable!()
        };
        a.smoothed_rtt_us = (smoothed * 1e3) as u32;
        a.rtt_var_us = (variation * 1e3) as u32;
        a.min_rtt_us = (least * 1e3) as u32;
        WatchEvent::DelayedAckAnswered(a)
    }

    #[test]
    fn on_a_jittery_path_the_delayers_side_allows_the_measured_round_trips() {
        // A 20 ms path whose queues add up to 8 ms each way, seen by the delayer: least
        // round trip 44.9 ms, smoothed 48 ms, mdev 8 ms (RTTVAR 2 ms). The released
        // segment came 52.5 ms after the ACK: within 48 + 4 x 2 ms, past 44.9 + 2 + 4.5.
        let mut a = assembler();
        a.push(answered_on_path(140 * MS, 192_500_000, 48.0, 2.0, 44.9));
        let stalls = a.finish();
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].evidence, Evidence::DelayerSide);
        assert_eq!(stalls[0].delayer.timer_ns, Some(42 * MS));
        assert_eq!(
            stalls[0].delayer.timer_basis,
            Some(TimerBasis::DelayerClock)
        );
        assert_eq!(stalls[0].duration_ns, 42 * MS + 52_500_000);
        assert_eq!(stalls[0].holder.as_ref().unwrap().comm, "client");
        // Past the bound (48 + 4 x 3.1 ms, the spread below the smoothed round trip
        // being larger than RTTVAR), the next segment is not the released one.
        let mut a = assembler();
        a.push(answered_on_path(140 * MS, 201_000_000, 48.0, 2.0, 44.9));
        assert!(a.finish().is_empty());
    }

    #[test]
    fn an_answer_in_the_paths_spread_above_the_smoothed_round_trip_is_a_stall() {
        // The lab's 20 ms path with queues adding up to 8 ms, seen by the seed 002 echo
        // server: least round trip 20.9 ms, smoothed 23.0, its answers 21 to 25 ms after
        // its ACKs (RTTVAR 1 ms). One came 27.8 ms after, and with curl as the delayer
        // one 29 ms after: past 23.0 + 4.5, within RFC 6298's four variations, the
        // variation read as the spread below the smoothed round trip (23.0 + 4 x 2.1).
        let mut a = assembler();
        a.push(answered_on_path(140 * MS, 167_800_000, 23.0, 1.0, 20.9));
        assert_eq!(a.finish().len(), 1);
        a.push(answered_on_path(140 * MS, 169_000_000, 23.0, 1.0, 20.9));
        assert_eq!(a.finish().len(), 1);
        // Beyond that, it is no answer.
        a.push(answered_on_path(140 * MS, 172_000_000, 23.0, 1.0, 20.9));
        assert!(a.finish().is_empty());
    }

    #[test]
    fn a_remote_timer_is_the_hold_less_the_round_trip_as_a_range() {
        let mut a = assembler();
        // Least 44.9 ms, smoothed 48, RTTVAR 2: a 92 ms hold released by a pure ACK.
        a.push(WatchEvent::NagleHold(hold_on_path(
            0,
            92 * MS,
            48.0,
            2.0,
            44.9,
        )));
        let stalls = a.finish();
        assert_eq!(stalls.len(), 1);
        let d = &stalls[0].delayer;
        assert_eq!(stalls[0].evidence, Evidence::Inferred);
        assert_eq!(d.timer_ns, None, "not seen, so not reported as seen");
        assert_eq!(d.timer_basis, Some(TimerBasis::Estimated));
        let range = d.timer_range.unwrap();
        assert_eq!(range.low_ns, 92 * MS - 56 * MS);
        assert_eq!(range.high_ns, 92 * MS - 44_900_000);
    }

    #[test]
    fn delayed_acks_counted_among_the_round_trips_do_not_hide_the_stall() {
        // Every exchange stalls: the kernel's smoothed round trip (64 ms) and RTTVAR
        // (15 ms) carry the delayed ACKs, its least (44.9 ms) does not. The hold, 44.9 +
        // 41 ms, is within the widened bound but a whole timer beyond the least.
        let mut a = assembler();
        a.push(WatchEvent::NagleHold(hold_on_path(
            0, 85_900_000, 64.0, 15.0, 44.9,
        )));
        assert_eq!(a.finish()[0].evidence, Evidence::Inferred);
    }

    #[test]
    fn an_echo_answering_each_piece_at_once_is_no_stall() {
        // The same path: the echo of the first piece released the second 52.5 ms after
        // it was held, the ACK riding on the echo's data.
        let mut a = assembler();
        let mut echoed = hold_on_path(0, 52_500_000, 48.0, 2.0, 44.9);
        echoed.ack_payload = 6;
        a.push(WatchEvent::NagleHold(echoed.clone()));
        // The echo's data after a pure ACK the read sent (tcp_cleanup_rbuf), as
        // prompt: within the round trips measured, not a timer beyond the least.
        echoed.ack_payload = 0;
        a.push(WatchEvent::NagleHold(echoed.clone()));
        // A hold as long as a timer and the slowest round trip, but released by data.
        echoed.released_ns = 130 * MS;
        echoed.ack_payload = 6;
        a.push(WatchEvent::NagleHold(echoed));
        assert!(a.finish().is_empty());
        assert_eq!(a.short_holds, 3);
    }

    #[test]
    fn a_peer_still_quick_acking_does_not_delay() {
        // The connection's first exchange: the holder sent one data segment, the peer
        // none. The jitter stretched the round trip past the measured ones.
        let mut first = hold_on_path(0, 90 * MS, 44.9, 22.0, 44.9);
        first.data_segments_out = 1;
        first.data_segments_in = 0;
        let mut a = assembler();
        a.push(WatchEvent::NagleHold(first.clone()));
        assert!(a.finish().is_empty());
        // A peer that never answers quick-ACKs no more than 16 segments.
        first.data_segments_out = 17;
        a.push(WatchEvent::NagleHold(first.clone()));
        assert_eq!(a.finish().len(), 1);
        // Once it answered, it delays from its second segment on.
        first.data_segments_out = 3;
        first.data_segments_in = 1;
        a.push(WatchEvent::NagleHold(first));
        assert_eq!(a.finish()[0].evidence, Evidence::Inferred);
    }

    #[test]
    fn a_timer_seen_behind_a_delay_is_timed_where_it_ran() {
        // The delayer in another namespace 10 ms away: its 41 ms timer, from the small
        // segment's arrival, fired 51 ms after the held send.
        let mut a = assembler();
        let WatchEvent::DelayedAckFired(mut timer) = fired(151 * MS) else {
            unreachable!()
        };
        timer.timer_ns = Some(41 * MS);
        a.push(WatchEvent::DelayedAckFired(timer));
        a.push(WatchEvent::NagleHold(hold_on_path(
            100 * MS,
            161 * MS,
            20.0,
            1.0,
            20.0,
        )));
        let stalls = a.finish();
        assert_eq!(stalls[0].evidence, Evidence::TimerSeen);
        assert_eq!(stalls[0].delayer.timer_ns, Some(41 * MS));
        assert_eq!(stalls[0].delayer.timer_basis, Some(TimerBasis::Fired));
    }

    #[test]
    fn memory_stays_bounded() {
        let mut a = assembler();
        for i in 0..(3 * TIMER_MEMORY_LEN as u64) {
            a.push(fired(i));
            a.push(hold(i, i + 1));
        }
        for i in 0..(3 * TIMER_MEMORY_LEN as u64) {
            a.push(answered(i, i + 1, 0));
        }
        assert!(a.fired.len() <= TIMER_MEMORY_LEN);
        assert!(a.waiting.len() <= TIMER_MEMORY_LEN);
        assert!(a.answered.len() <= TIMER_MEMORY_LEN);
    }
}
