//! What a side's pure ACKs show about the path and about the side itself: the round trips
//! of ACKs no timer held (the path, its queue included), whether it acknowledges every
//! segment, how long large segments take (as ACKs sent at once by rule measured them),
//! and the pace at which the path delivers queued segments. The detector judges a
//! candidate delayed ACK against these. Updated on every ACK, so kept in 104 bytes.

use crate::detect::PeerSegment;
use crate::detect::ack_timer::{SHORTEST_TIMER, covers_two_full_segments};
use crate::path::HOST_TURNAROUND;
use crate::segment::Nanos;

/// Data segments captured this close together were sent in one flight: a prompt ACK for
/// one of them measures the path (and its queue) the others met too.
pub const SAME_FLIGHT: Nanos = 2_000_000;

/// A prompt ACK for data sent this shortly before (Linux's shortest delayed-ACK timer,
/// TCP_DELACK_MIN) measures the queue the next data met.
const PREVIOUS_FLIGHT: Nanos = crate::stacks::LINUX_DELACK_MIN;

/// From this size a segment's round trip is read apart from a bare segment's: on a narrow
/// link it takes the segment's own serialization longer.
const LARGE_SEGMENT: u32 = 1024;

/// One pure ACK: when the newest data it acknowledged was seen, when it was.
#[derive(Clone, Copy, Debug, Default)]
struct AckRecord {
    data_time: Nanos,
    time: Nanos,
    flags: u8,
}

impl AckRecord {
    const SEEN: u8 = 1;
    /// Sooner than any per-connection delayed-ACK timer beyond the path's queue.
    const PROMPT: u8 = 2;
    /// It acknowledged exactly one full segment.
    const SINGLE_FULL: u8 = 4;
    /// It came as soon after the previous ACK as the path delivers the segments it
    /// acknowledged, which were already in flight when that ACK came.
    const PACED: u8 = 8;
    /// It acknowledged two full segments or more: sent as the second arrived (RFC 1122
    /// 4.2.3.2), not on a timer.
    const COVERS_TWO: u8 = 16;

    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn round_trip(&self) -> Nanos {
        self.time - self.data_time
    }

    /// Whether this record is the ACK `ack` itself.
    fn is(&self, ack: &PeerSegment) -> bool {
        self.has(Self::SEEN) && self.time == ack.time
    }
}

/// A pure ACK of new data, as [`AckHistory::observe`] takes it.
#[derive(Clone, Copy, Debug)]
pub struct PureAck {
    pub time: Nanos,
    /// When the newest data it acknowledged was seen, and that segment's payload.
    pub data_time: Nanos,
    pub data_len: u32,
    pub newly_acked: u64,
    /// In-flight segments it acknowledged, and whether the newest was full-sized.
    pub segments: u32,
    pub newest_full: bool,
}

/// Per side: its recent pure ACKs.
#[derive(Clone, Copy, Debug, Default)]
pub struct AckHistory {
    /// The latest two.
    recent: [AckRecord; 2],
    /// The latest that acknowledged more than one and a half full segments: RFC 1122
    /// 4.2.3.2 receivers send those at once.
    covering: AckRecord,
    /// The least round trip of an ACK for more than one and a half full segments whose
    /// newest segment was large (0: none yet).
    large_round_trip: Nanos,
    /// The round trip of its latest reply: a data segment acknowledging new data, which
    /// bounds the path's round trip from above (0: none yet).
    last_reply_round_trip: Nanos,
    /// When that reply was seen.
    last_reply_time: Nanos,
    /// How long the path took to deliver one queued segment, as the latest prompt ACK for
    /// segments already in flight measured it (0: none yet), and the least it took.
    delivery_per_segment: Nanos,
    least_delivery_per_segment: Nanos,
}

impl AckHistory {
    /// Notes a pure ACK of the other side's data; `full_size` is that side's full segment
    /// size and `path` the least round trip so far.
    // Inlined into its one caller: a call passing the ACK through memory cost more.
    #[inline(always)]
    pub fn observe(&mut self, ack: PureAck, full_size: u32, path: Nanos) {
        let round_trip = ack.time - ack.data_time;
        // Its queue as the last prompt ACK measured it, or the path's minimum.
        let queue = Some(self.recent[0])
            .filter(|r| r.has(AckRecord::PROMPT))
            .filter(|r| ack.data_time - r.data_time <= PREVIOUS_FLIGHT)
            .map_or(path, |r| r.round_trip());
        let mut flags = AckRecord::SEEN;
        if round_trip - queue < SHORTEST_TIMER {
            flags |= AckRecord::PROMPT;
        }
        if ack.segments == 1 && ack.newest_full {
            flags |= AckRecord::SINGLE_FULL;
        }
        // Data queued on the path (sent before the previous ACK came) reaches the receiver
        // one segment's delivery time after another, and its ACKs follow at that pace (the
        // ACK clock: Jacobson, "Congestion Avoidance and Control", 1988, section 2). An ACK
        // that came no later than its segments' delivery after the previous one was not
        // held by a timer, however late its round trip.
        let previous = self.recent[0];
        let interval = ack.time - previous.time;
        let queued = previous.has(AckRecord::SEEN)
            && previous.data_time < ack.data_time
            && ack.data_time < previous.time
            && ack.segments > 0;
        if queued
            && self.delivery_per_segment > 0
            && interval <= self.delivery_per_segment * Nanos::from(ack.segments) + HOST_TURNAROUND
        {
            flags |= AckRecord::PACED;
        }
        // RFC 1122 4.2.3.2: an ACK for two full segments is sent at once, so its spacing
        // from the previous ACK, where that one too left as data arrived (not on a timer,
        // which fires between arrivals), is the path's delivery of them.
        let covers_two = covers_two_full_segments(ack.newly_acked, full_size);
        if covers_two {
            flags |= AckRecord::COVERS_TWO;
        }
        let previous_on_arrival =
            previous.has(AckRecord::PROMPT) || previous.has(AckRecord::COVERS_TWO);
        if queued && covers_two && previous_on_arrival {
            self.delivery_per_segment = (interval / Nanos::from(ack.segments)).max(1);
            if self.least_delivery_per_segment == 0
                || self.delivery_per_segment < self.least_delivery_per_segment
            {
                self.least_delivery_per_segment = self.delivery_per_segment;
            }
        }
        let record = AckRecord {
            data_time: ack.data_time,
            time: ack.time,
            flags,
        };
        self.recent = [record, previous];
        // How long large data takes, a narrow link's serialization included, is read only
        // from ACKs no timer held: those for two full segments (RFC 1122 4.2.3.2). An ACK
        // for one segment may have waited for a tick of any length (the BSD fast timer
        // fires 0 to 200 ms after the data), and a reply holds the application's time.
        if covers_two {
            self.covering = record;
            if ack.data_len >= LARGE_SEGMENT
                && (self.large_round_trip == 0 || round_trip < self.large_round_trip)
            {
                self.large_round_trip = round_trip.max(1);
            }
        }
    }

    /// What the path (queue included) took for data of the same flight as the data
    /// `ack` acknowledged, as this side's other ACKs measured it: its last ACK for more
    /// than a full segment of that flight, or its previous prompt ACK for data sent just
    /// before. That ACK measured no queue when a reply of this side came after it more
    /// than `slack` sooner: a reply bounds the path from above (RFC 9293 3.4), so the
    /// ACK waited at this side, for a timer shorter than the known stacks' (a Windows
    /// server's 12 to 25 ms against its replies' 1.5 ms, suricata-verify's
    /// smb-eicar-ph), and the next late ACK read against it would read prompt.
    pub fn path_reference_for(&self, ack: &PeerSegment, slack: Nanos) -> Option<Nanos> {
        let acked = ack.acked_data_time?;
        let covering = Some(self.covering)
            .filter(|r| r.has(AckRecord::SEEN) && !r.is(ack))
            .filter(|r| (acked - r.data_time).abs() <= SAME_FLIGHT)
            .map(|r| r.round_trip());
        let previous = self
            .recent
            .iter()
            .find(|r| r.has(AckRecord::SEEN) && !r.is(ack))
            .filter(|r| r.has(AckRecord::PROMPT))
            .filter(|r| (0..=PREVIOUS_FLIGHT).contains(&(acked - r.data_time)))
            .filter(|r| {
                self.last_reply_time <= r.time
                    || r.round_trip() - self.last_reply_round_trip < slack
            })
            .map(|r| r.round_trip());
        covering.max(previous)
    }

    /// The round trip of this side's pure ACK before `ack`, for earlier data: what the
    /// path took a moment before it.
    pub fn round_trip_before(&self, ack: &PeerSegment) -> Option<Nanos> {
        let acked = ack.acked_data_time?;
        self.recent
            .iter()
            .find(|r| r.has(AckRecord::SEEN) && !r.is(ack) && r.data_time < acked)
            .map(AckRecord::round_trip)
    }

    /// RFC 1122 4.2.3.2 receivers acknowledge every second full segment: one that
    /// acknowledged, alone, a full segment sent shortly before the one `ack` alone
    /// acknowledges, and did so less than any delayed-ACK timer before, did not wait
    /// for a second segment. It acknowledges every segment (Linux's quick-ack mode), so
    /// `ack` was not held either.
    pub fn acks_every_segment(&self, ack: &PeerSegment) -> bool {
        let [latest, previous] = self.recent;
        latest.is(ack)
            && latest.has(AckRecord::SINGLE_FULL)
            && previous.has(AckRecord::SINGLE_FULL)
            && (latest.data_time - previous.data_time).abs() < SHORTEST_TIMER
            && latest.time - previous.time < SHORTEST_TIMER
    }

    /// Whether `ack` came at the pace the path delivers queued segments (see
    /// [`AckHistory::observe`]): paced by the path, not held.
    pub fn paced_by_delivery(&self, ack: &PeerSegment) -> bool {
        self.recent[0].is(ack) && self.recent[0].has(AckRecord::PACED)
    }

    /// A reply of this side measured `round_trip`: its data left after the data it
    /// acknowledges arrived (RFC 9293 3.4), so the path took no longer then.
    pub fn note_reply(&mut self, round_trip: Nanos, time: Nanos) {
        self.last_reply_round_trip = round_trip.max(1);
        self.last_reply_time = time;
    }

    /// The round trip of its latest reply, if any.
    pub fn last_reply_round_trip(&self) -> Option<Nanos> {
        (self.last_reply_round_trip != 0).then_some(self.last_reply_round_trip)
    }

    /// The least time the path took to deliver one queued segment of the other side, as
    /// the spacing of this side's ACKs for two segments or more measured it.
    pub fn least_delivery_per_segment(&self) -> Option<Nanos> {
        (self.least_delivery_per_segment != 0).then_some(self.least_delivery_per_segment)
    }

    /// The least round trip of its ACKs for two full segments or more, the newest large
    /// (1 KB and more).
    pub fn large_round_trip(&self) -> Option<Nanos> {
        (self.large_round_trip != 0).then_some(self.large_round_trip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn pure(time: Nanos, data_time: Nanos, segments: u32) -> PureAck {
        PureAck {
            time,
            data_time,
            data_len: 1448,
            newly_acked: u64::from(segments) * 1448,
            segments,
            newest_full: true,
        }
    }

    fn peer(time: Nanos, data_time: Nanos) -> PeerSegment {
        PeerSegment {
            packet: 1,
            time,
            ack_advanced: true,
            outstanding_before: 1448,
            newly_acked: 1448,
            acked_data_time: Some(data_time),
            acked_data_len: 1448,
            ..PeerSegment::default()
        }
    }

    #[test]
    fn only_an_ack_no_timer_held_measures_large_data() {
        let mut history = AckHistory::default();
        // A tick held the ACK of one large segment 16 ms beyond a 20 ms path, and a reply
        // to the next came after the application's 20 ms: neither is the path's.
        history.observe(pure(36 * MS, 0, 1), 1448, 20 * MS);
        history.note_reply(40 * MS, 56 * MS);
        assert_eq!(history.large_round_trip(), None);
        // An ACK for two full segments is sent at once: 3 ms of serialization is the path.
        history.observe(pure(123 * MS, 100 * MS, 2), 1448, 20 * MS);
        assert_eq!(history.large_round_trip(), Some(23 * MS));
        assert_eq!(history.last_reply_round_trip(), Some(40 * MS));
    }

    #[test]
    fn a_prompt_ack_for_two_segments_of_the_flight_is_the_reference() {
        let mut history = AckHistory::default();
        history.observe(pure(100 * MS, 0, 2), 1448, 90 * MS);
        history.observe(pure(300 * MS, MS / 10, 1), 1448, 90 * MS);
        let late = peer(300 * MS, MS / 10);
        assert_eq!(history.path_reference_for(&late, 10 * MS), Some(100 * MS));
        assert_eq!(history.large_round_trip(), Some(100 * MS));
    }

    #[test]
    fn single_segments_acknowledged_one_by_one_mean_no_delay() {
        let mut history = AckHistory::default();
        history.observe(pure(60 * MS, 0, 1), 1448, 60 * MS);
        history.observe(pure(72 * MS, 100_000, 1), 1448, 60 * MS);
        assert!(history.acks_every_segment(&peer(72 * MS, 100_000)));
        // Not for an ACK that is not the latest.
        assert!(!history.acks_every_segment(&peer(60 * MS, 0)));
    }

    #[test]
    fn acks_for_queued_segments_come_at_the_paths_delivery_pace() {
        // A 1 Mbit/s bottleneck: 12 ms a full segment, a flight of ten queued at once.
        let mut history = AckHistory::default();
        let sent = |i: Nanos| i * MS / 100;
        let mut at = 50 * MS;
        for pair in 0..3 {
            at += 24 * MS;
            history.observe(pure(at, sent(2 * pair + 1), 2), 1448, MS);
        }
        // Two more queued segments (one of them short), 16 ms on: paced, not held.
        at += 16 * MS;
        history.observe(pure(at, sent(8), 2), 1448, MS);
        assert!(history.paced_by_delivery(&peer(at, sent(8))));
        // The flight's last segment, acknowledged 40 ms after the one before: a timer.
        at += 40 * MS;
        history.observe(pure(at, sent(9), 1), 1448, MS);
        assert!(!history.paced_by_delivery(&peer(at, sent(9))));
        // Data sent after the previous ACK came was not queued: its ACK says nothing of
        // the pace.
        history.observe(pure(at + 20 * MS, at + MS, 1), 1448, MS);
        assert!(!history.paced_by_delivery(&peer(at + 20 * MS, at + MS)));
    }

    #[test]
    fn the_least_delivery_is_read_from_acks_for_two_queued_segments() {
        let mut history = AckHistory::default();
        assert_eq!(history.least_delivery_per_segment(), None);
        // Four segments queued before the first ACK came; ACKs for two, 12 then 14 ms
        // apart: 6 ms a segment at the least. One for one segment measures nothing.
        history.observe(pure(100 * MS, 4 * MS, 2), 1448, 90 * MS);
        history.observe(pure(112 * MS, 6 * MS, 2), 1448, 90 * MS);
        history.observe(pure(126 * MS, 8 * MS, 2), 1448, 90 * MS);
        history.observe(pure(127 * MS, 9 * MS, 1), 1448, 90 * MS);
        assert_eq!(history.least_delivery_per_segment(), Some(6 * MS));
    }

    #[test]
    fn an_ack_after_a_timers_says_nothing_of_the_delivery() {
        // A 64 kbit/s link delivers a full segment every 189 ms to a receiver whose
        // 100 ms tick acknowledges the lone one: the timer fires between arrivals, so
        // the ACK for the next two, sent as the second arrives, is not two deliveries
        // after it.
        let mut history = AckHistory::default();
        history.observe(pure(400 * MS, 0, 1), 1448, 250 * MS);
        history.observe(pure(597 * MS, MS, 2), 1448, 250 * MS);
        assert_eq!(history.least_delivery_per_segment(), None);
    }

    #[test]
    fn the_history_stays_as_small_as_documented() {
        assert_eq!(std::mem::size_of::<AckHistory>(), 112);
    }
}
