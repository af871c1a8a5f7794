//! What a sender's own segments show about how it sends: whether it applies Nagle, the
//! largest segment it sends when that is below the MSS, and when its window was closed.
//!
//! These are facts the capture proves by themselves, whatever the capture point: a
//! segment captured while an earlier one is still unacknowledged at the capture point was
//! sent before that ACK could have reached its sender.

use crate::segment::Nanos;
use crate::seq::SeqNumber;

/// A segment limit below the MSS is only believed from segments this large: path MTUs
/// (VPNs, PPPoE, tunnels) cut the MSS by tens or hundreds of bytes, not to a few hundred.
const MIN_SEGMENT_LIMIT: u32 = 1024;

/// Per direction: the evidence about its sender's rules. Read on every data segment, so
/// kept in 64 bytes.
#[derive(Clone, Debug)]
pub struct SenderEvidence {
    /// When this side was seen, for the second time, sending a sub-MSS segment while an
    /// earlier sub-MSS segment of its own was unacknowledged: Nagle (RFC 896) and
    /// Minshall's variant both forbid that, so from then on this side is not applying
    /// Nagle. (Once may be a capture that missed the ACK in between.) `Nanos::MAX`: never.
    nagle_off_since: Nanos,
    /// The packet of the first time.
    pub nagle_off_packet: u64,
    /// Its last data segment: when (`Nanos::MIN`: none yet), where it ended (sequence
    /// position), its payload.
    last_time: Nanos,
    last_end: u64,
    last_payload: u32,
    /// How many times it did so.
    pub nagle_violations: u32,
    /// The largest payload this side sent as two contiguous segments of the same size
    /// below the MSS within one message: its real segment limit (a path MTU below the
    /// link's), however far apart a slow path delivers them.
    pub segment_limit: u32,
    /// The largest payload below the MSS it has sent: no segment limit lies below it.
    largest_below_mss: u32,
    /// The least time between two contiguous full-sized data segments of this side at the
    /// capture point (`Nanos::MAX`: none yet). Past a link, segments arrive no closer
    /// than one takes to cross it, so this is at least a full segment's serialization on
    /// the links before the capture point, and that when two were sent back to back.
    least_full_spacing: Nanos,
    /// The same over pairs whose second segment left its sender before the other side's
    /// last segment could reach it: two segments of one flight, which only a link between
    /// them spaced (`Nanos::MAX`: none yet).
    least_full_spacing_in_flight: Nanos,
}

impl Default for SenderEvidence {
    fn default() -> Self {
        SenderEvidence {
            nagle_off_since: Nanos::MAX,
            nagle_off_packet: 0,
            last_time: Nanos::MIN,
            last_end: 0,
            last_payload: 0,
            nagle_violations: 0,
            segment_limit: 0,
            largest_below_mss: 0,
            least_full_spacing: Nanos::MAX,
            least_full_spacing_in_flight: Nanos::MAX,
        }
    }
}

/// A data segment as the sender evidence sees it.
#[derive(Clone, Copy, Debug)]
pub struct SentData {
    pub time: Nanos,
    pub packet: u64,
    pub start: u64,
    pub end: u64,
    pub payload: u32,
    /// FIN or URG set: Linux sends these past Nagle (tcp_nagle_test), so they prove nothing.
    pub pushed_past_nagle: bool,
    /// The other side sent no data since this side's previous data segment: both belong
    /// to one message.
    pub same_message: bool,
    /// It reached the capture point sooner than a round trip to its sender after the
    /// other side's last segment: it left before that segment could reach the sender, so
    /// nothing the other side sent since released it.
    pub before_peer_could_release: bool,
}

impl SenderEvidence {
    /// The size at and above which this side's segments are full-sized.
    pub fn full_size(&self, mss: u32) -> u32 {
        if self.segment_limit > 0 {
            mss.min(self.segment_limit)
        } else {
            mss
        }
    }

    /// The payload of its last data segment (0: none yet).
    pub fn last_payload(&self) -> u32 {
        self.last_payload
    }

    /// When its last data segment was captured.
    pub fn last_data_time(&self) -> Option<Nanos> {
        (self.last_time != Nanos::MIN).then_some(self.last_time)
    }

    /// When its last data segment was captured, if that one ended a message: smaller
    /// than the full size, so the sender had nothing more to send then.
    pub fn last_message_end(&self, mss: u32) -> Option<Nanos> {
        self.last_data_time()
            .filter(|_| self.last_payload < self.full_size(mss))
    }

    /// Learns from a new (not retransmitted) data segment. `small_unacked` says whether a
    /// sub-MSS segment of this side was unacknowledged at the capture point when it was
    /// captured. Returns true when the segment limit changed (smaller segments in flight
    /// must then be judged again).
    // Inlined into its one caller, as the ACK history's is.
    #[inline(always)]
    ///
    /// `round_trip`, the connection's least end-to-end round trip measured so far, if any:
    /// the pieces of one write leave back to back (Linux tcp_write_xmit, BSD tcp_output
    /// send all the window allows at once), so two equal segments a round trip or more
    /// apart are two writes, whatever their size.
    pub fn observe(
        &mut self,
        data: SentData,
        mss: u32,
        small_unacked: bool,
        round_trip: Option<Nanos>,
    ) -> bool {
        let mut limit_changed = false;
        let follows_previous = self.last_time != Nanos::MIN && self.last_end == data.start;
        // A sender's segments never exceed its segment limit (RFC 9293 3.7.1: segments
        // are sized to the effective send MSS): equal segments below one it has already
        // sent are the application's message size, not a limit of the path.
        if follows_previous
            && data.same_message
            && self.last_payload == data.payload
            && (MIN_SEGMENT_LIMIT..mss).contains(&data.payload)
            && data.payload > self.segment_limit
            && data.payload >= self.largest_below_mss
            && round_trip.is_none_or(|rtt| data.time - self.last_time < rtt)
        {
            self.segment_limit = data.payload;
            limit_changed = true;
        } else if self.segment_limit > 0 && (self.segment_limit + 1..mss).contains(&data.payload) {
            // A segment above the limit believed: it was a message size after all.
            self.segment_limit = 0;
            limit_changed = true;
        }
        if data.payload < mss {
            self.largest_below_mss = self.largest_below_mss.max(data.payload);
        }
        let full = self.full_size(mss);
        let small = data.payload < full;
        // The sub-MSS tail of a write larger than the MSS follows a full segment of the
        // same write: Linux tests it with Minshall's rule (tcp_mss_split_point), Windows
        // and BSD-derived stacks send it; only a small segment that begins a write shows
        // whether its sender waits for the ACK of an earlier one.
        let tail_of_larger_write =
            follows_previous && data.same_message && self.last_payload >= full;
        if small && small_unacked && !data.pushed_past_nagle && !tail_of_larger_write {
            self.nagle_violations += 1;
            match self.nagle_violations {
                1 => self.nagle_off_packet = data.packet,
                // Once may be a capture that missed the ACK in between; twice is the
                // sender's own doing.
                2 => self.nagle_off_since = data.time,
                _ => {}
            }
        }
        if follows_previous && data.payload >= full && self.last_payload >= full {
            let spacing = data.time - self.last_time;
            self.least_full_spacing = self.least_full_spacing.min(spacing);
            if data.before_peer_could_release {
                self.least_full_spacing_in_flight = self.least_full_spacing_in_flight.min(spacing);
            }
        }
        self.last_time = data.time;
        self.last_end = data.end;
        self.last_payload = data.payload;
        limit_changed
    }

    /// The least time between two of its contiguous full-sized segments at the capture
    /// point, if it sent two.
    pub fn full_segment_spacing(&self) -> Option<Nanos> {
        (self.least_full_spacing != Nanos::MAX).then_some(self.least_full_spacing)
    }

    /// The least time between two of its contiguous full-sized segments of one flight
    /// (the second released by nothing the other side sent after the first), if any.
    pub fn full_segment_spacing_in_flight(&self) -> Option<Nanos> {
        (self.least_full_spacing_in_flight != Nanos::MAX)
            .then_some(self.least_full_spacing_in_flight)
    }

    /// When this side was seen, for the second time, not applying Nagle.
    pub fn nagle_off_since(&self) -> Option<Nanos> {
        (self.nagle_off_since != Nanos::MAX).then_some(self.nagle_off_since)
    }

    /// Whether this side was seen not applying Nagle (twice) at or before `time`.
    pub fn nagle_off_by(&self, time: Nanos) -> bool {
        self.nagle_off_since <= time
    }
}

/// What a side's TCP timestamps (RFC 7323) show: the rate of its clock and its newest
/// TSval. Updated on every segment, so kept in 24 bytes.
#[derive(Clone, Copy, Debug)]
pub struct TimestampClock {
    /// When the first TSval was seen (`Nanos::MIN`: none yet), and the newest.
    first_time: Nanos,
    last_time: Nanos,
    first: u32,
    last: u32,
}

impl Default for TimestampClock {
    fn default() -> Self {
        TimestampClock {
            first_time: Nanos::MIN,
            last_time: Nanos::MIN,
            first: 0,
            last: 0,
        }
    }
}

impl TimestampClock {
    /// Notes a segment's TSval; returns whether it is newer than any before.
    pub fn observe(&mut self, time: Nanos, tsval: u32) -> bool {
        if self.first_time == Nanos::MIN {
            *self = TimestampClock {
                first_time: time,
                last_time: time,
                first: tsval,
                last: tsval,
            };
            return true;
        }
        let newer = SeqNumber(tsval).is_after(SeqNumber(self.last));
        if newer {
            self.last = tsval;
            self.last_time = time;
        }
        newer
    }

    /// The newest TSval seen.
    pub fn newest(&self) -> Option<u32> {
        (self.first_time != Nanos::MIN).then_some(self.last)
    }

    /// Ticks a second (RFC 7323 asks for 1 ms to 1 s a tick), read over at least a fifth
    /// of a second and twenty ticks.
    pub fn rate(&self) -> Option<f64> {
        let ticks = self.last.wrapping_sub(self.first);
        let span = self.last_time - self.first_time;
        (self.first_time != Nanos::MIN && span >= 200_000_000 && (20..1 << 31).contains(&ticks))
            .then(|| f64::from(ticks) / crate::segment::secs(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(time: Nanos, start: u64, payload: u32) -> SentData {
        SentData {
            time,
            packet: 1,
            start,
            end: start + u64::from(payload),
            payload,
            pushed_past_nagle: false,
            same_message: true,
            before_peer_could_release: false,
        }
    }

    #[test]
    fn a_small_segment_behind_an_unacknowledged_small_one_means_no_nagle() {
        let mut sender = SenderEvidence::default();
        sender.observe(data(0, 0, 7), 1460, false, None);
        assert!(!sender.nagle_off_by(10));
        sender.observe(data(5, 7, 67), 1460, true, None);
        // Once may be a missed ACK.
        assert!(!sender.nagle_off_by(5));
        sender.observe(data(20, 74, 7), 1460, false, None);
        sender.observe(data(25, 81, 67), 1460, true, None);
        assert!(sender.nagle_off_by(25));
        assert!(!sender.nagle_off_by(24));
    }

    #[test]
    fn a_timestamp_clock_reads_its_rate_and_its_newest_tsval() {
        let mut clock = TimestampClock::default();
        assert!(clock.observe(0, 100));
        // 1 ms ticks; a segment with the same TSval is not newer.
        assert!(clock.observe(500_000_000, 600));
        assert!(!clock.observe(503_000_000, 600));
        assert!((clock.rate().unwrap() - 1000.0).abs() < 1e-6);
        assert_eq!(clock.newest(), Some(600));
    }

    #[test]
    fn full_segments_one_after_another_space_no_closer_than_their_crossing() {
        let mut sender = SenderEvidence::default();
        assert_eq!(sender.full_segment_spacing(), None);
        // A 6 ms crossing between two full segments; a small one, and a full one that
        // does not follow the previous in sequence, measure nothing.
        sender.observe(data(0, 0, 1448), 1448, false, None);
        sender.observe(data(6_000_000, 1448, 1448), 1448, false, None);
        sender.observe(data(6_100_000, 2896, 100), 1448, false, None);
        sender.observe(data(6_200_000, 2996, 1448), 1448, false, None);
        sender.observe(data(6_300_000, 9000, 1448), 1448, false, None);
        assert_eq!(sender.full_segment_spacing(), Some(6_000_000));
    }

    #[test]
    fn fin_and_urgent_segments_prove_nothing() {
        let mut sender = SenderEvidence::default();
        let mut fin = data(5, 7, 67);
        fin.pushed_past_nagle = true;
        sender.observe(fin, 1460, true, None);
        assert!(!sender.nagle_off_by(Nanos::MAX - 1));
    }

    #[test]
    fn the_small_tail_of_a_larger_write_proves_nothing_about_nagle() {
        let mut sender = SenderEvidence::default();
        for write in 0..4u64 {
            let start = write * 2000;
            sender.observe(data(start as Nanos, start, 1460), 1460, true, None);
            sender.observe(
                data(start as Nanos + 1, start + 1460, 540),
                1460,
                true,
                None,
            );
        }
        assert!(!sender.nagle_off_by(Nanos::MAX - 1));
    }

    #[test]
    fn equal_segments_below_the_mss_in_one_message_are_the_segment_limit() {
        let mut sender = SenderEvidence::default();
        sender.observe(data(0, 0, 1348), 1448, false, None);
        assert_eq!(sender.full_size(1448), 1448);
        // However far apart a slow path brings them.
        assert!(sender.observe(data(8_000_000, 1348, 1348), 1448, false, None));
        assert_eq!(sender.full_size(1448), 1348);
        // Two messages of the same size are no limit.
        let mut messages = SenderEvidence::default();
        messages.observe(data(0, 0, 1100), 1448, false, None);
        let mut next = data(10, 1100, 1100);
        next.same_message = false;
        messages.observe(next, 1448, false, None);
        assert_eq!(messages.full_size(1448), 1448);
        // Small messages repeated are not a limit: SFTP's 656-byte writes stay small.
        let mut sftp = SenderEvidence::default();
        sftp.observe(data(0, 0, 656), 1460, false, None);
        sftp.observe(data(10, 656, 656), 1460, false, None);
        assert_eq!(sftp.full_size(1460), 1460);
    }

    #[test]
    fn equal_segments_below_a_larger_one_sent_are_no_segment_limit() {
        // A server that sent a 1326-byte segment, then writes 1031-byte chunks two at a
        // time: the chunks are its writes, not a limit of the path.
        let mut chunks = SenderEvidence::default();
        chunks.observe(data(0, 0, 1326), 1460, false, None);
        chunks.observe(data(10, 1326, 1031), 1460, false, None);
        chunks.observe(data(20, 2357, 1031), 1460, false, None);
        assert_eq!(chunks.full_size(1460), 1460);
        // A limit learned first gives way to a larger segment sent later.
        let mut later = SenderEvidence::default();
        later.observe(data(0, 0, 1031), 1460, false, None);
        assert!(later.observe(data(10, 1031, 1031), 1460, false, None));
        assert_eq!(later.full_size(1460), 1031);
        assert!(later.observe(data(20, 2062, 1326), 1460, false, None));
        assert_eq!(later.full_size(1460), 1460);
    }

    #[test]
    fn equal_writes_a_round_trip_apart_are_no_segment_limit() {
        // 1031-byte chunks every 205 ms on a 190 ms path: each is its own write.
        let ms = 1_000_000;
        let mut clocked = SenderEvidence::default();
        clocked.observe(data(0, 0, 1031), 1460, false, Some(190 * ms));
        assert!(!clocked.observe(data(205 * ms, 1031, 1031), 1460, false, Some(190 * ms)));
        assert_eq!(clocked.full_size(1460), 1460);
        // The pieces of one write, 8 ms apart on a slow link of the same path, are.
        let mut cut = SenderEvidence::default();
        cut.observe(data(0, 0, 1348), 1448, false, Some(190 * ms));
        assert!(cut.observe(data(8 * ms, 1348, 1348), 1448, false, Some(190 * ms)));
        assert_eq!(cut.full_size(1448), 1348);
    }
}
