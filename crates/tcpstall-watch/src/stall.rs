//! Joins what the kernel reported into stalls: a Nagle hold on one socket, released by an
//! ACK that the peer's delayed-ACK timer sent. When the peer is on this host its timer is
//! seen firing; when it is remote, the ACK arriving at least `min_stall` later than a
//! round trip can only have been delayed, and the stall is marked as inferred.

use std::collections::VecDeque;
use std::net::SocketAddr;

use serde::Serialize;
use tcpstall_core::detect::StallClass;
use tcpstall_core::diagnosis::FixKind;

use crate::event::{DelayedAckFired, NagleHold, Process, WatchEvent};

/// How long a timer that fired is kept to be matched with the hold it released: far
/// above any delayed-ACK timeout (at most 500 ms, RFC 1122 4.2.3.2).
const TIMER_MEMORY_NS: u64 = 2_000_000_000;
/// At most this many fired timers are kept (memory stays bounded under any load).
const TIMER_MEMORY_LEN: usize = 4096;
/// A hold waits this long for a timer event that the ring buffer delivered late (the
/// timer fires on another CPU than the one that sees the ACK).
const LATE_TIMER_NS: u64 = 20_000_000;
/// The ACK leaves when the timer fires: it reaches a local holder within this.
const TIMER_TO_ACK_NS: u64 = 5_000_000;

/// How the delayed ACK is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Evidence {
    /// The peer is on this host and its delayed-ACK timer was seen firing.
    TimerSeen,
    /// The peer is remote: the ACK came later than a round trip by at least the threshold.
    Inferred,
}

/// The side that delayed its ACK.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Delayer {
    pub endpoint: SocketAddr,
    /// The process on this host that owns the peer socket, when known.
    pub process: Option<Process>,
    /// From the held send to the delayer's timer firing, when that was seen: the timer's
    /// length, as the peer is on this host (the data reached it at once).
    pub timer_ns: Option<u64>,
}

/// One stall, as it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stall {
    pub class: StallClass,
    pub holder: Process,
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

/// Turns the event stream into stalls.
pub struct StallAssembler {
    min_stall_ns: u64,
    owner_of: OwnerLookup,
    fired: VecDeque<DelayedAckFired>,
    waiting: VecDeque<NagleHold>,
    /// Holds that were too short, or released without a delayed ACK.
    pub short_holds: u64,
}

impl StallAssembler {
    /// `owner_of` names a delayer's process when its timer held a stall: at once when the
    /// hold's end arrives (the process may exit soon after), else when it is judged.
    pub fn new(min_stall_ns: u64, owner_of: OwnerLookup) -> StallAssembler {
        StallAssembler {
            min_stall_ns,
            owner_of,
            fired: VecDeque::new(),
            waiting: VecDeque::new(),
            short_holds: 0,
        }
    }

    pub fn push(&mut self, event: WatchEvent) {
        match event {
            WatchEvent::DelayedAckFired(fired) => {
                while self.fired.len() >= TIMER_MEMORY_LEN
                    || self
                        .fired
                        .front()
                        .is_some_and(|f| f.fired_ns + TIMER_MEMORY_NS < fired.fired_ns)
                {
                    self.fired.pop_front();
                }
                self.fired.push_back(fired);
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
                }
                self.waiting.push_back(hold);
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
        stalls
    }

    /// Every remaining hold, judged now (at the end of the watch).
    pub fn finish(&mut self) -> Vec<Stall> {
        self.ready(u64::MAX - LATE_TIMER_NS)
    }

    /// The peer's timer that fired during the hold, shortly before the ACK arrived (the
    /// peer's socket has the hold's endpoints swapped).
    fn releasing_timer(&self, hold: &NagleHold) -> Option<usize> {
        self.fired.iter().rposition(|f| {
            f.socket.local == hold.socket.remote
                && f.socket.remote == hold.socket.local
                && f.fired_ns >= hold.start_ns
                && f.fired_ns <= hold.released_ns
                && hold.released_ns - f.fired_ns <= TIMER_TO_ACK_NS
        })
    }

    /// The timer that released this hold, with its process named if it was not yet.
    fn named_releasing_timer(&mut self, hold: &NagleHold) -> Option<usize> {
        let i = self.releasing_timer(hold)?;
        let timer = &mut self.fired[i];
        if timer.owner.is_none() {
            timer.owner = (self.owner_of)(timer.socket_inode);
        }
        Some(i)
    }

    fn is_long_enough(&self, hold: &NagleHold) -> bool {
        hold.released_ns.saturating_sub(hold.start_ns) >= self.min_stall_ns
    }

    fn judge(&mut self, hold: NagleHold) -> Option<Stall> {
        if !self.is_long_enough(&hold) {
            return None;
        }
        let duration_ns = hold.released_ns - hold.start_ns;
        let timer = self.named_releasing_timer(&hold).map(|i| &self.fired[i]);
        let round_trip_ns = u64::from(hold.smoothed_rtt_us) * 1000;
        let (evidence, delayer) = match timer {
            Some(fired) => (
                Evidence::TimerSeen,
                Delayer {
                    endpoint: hold.socket.remote,
                    process: fired.owner.clone(),
                    timer_ns: Some(fired.fired_ns.saturating_sub(hold.start_ns)),
                },
            ),
            None if duration_ns >= round_trip_ns + self.min_stall_ns => (
                Evidence::Inferred,
                Delayer {
                    endpoint: hold.socket.remote,
                    process: None,
                    timer_ns: None,
                },
            ),
            None => return None,
        };
        Some(Stall {
            class: StallClass::NagleDelayedAck,
            holder: hold.holder,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Endpoints, decode, tests::record};

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
        )
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
        assert_eq!(s.holder.comm, "client");
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
    fn memory_stays_bounded() {
        let mut a = assembler();
        for i in 0..(3 * TIMER_MEMORY_LEN as u64) {
            a.push(fired(i));
            a.push(hold(i, i + 1));
        }
        assert!(a.fired.len() <= TIMER_MEMORY_LEN);
        assert!(a.waiting.len() <= TIMER_MEMORY_LEN);
    }
}
