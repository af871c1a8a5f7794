//! The state of the data one side of a connection sends: its sequence space (unwrapped to
//! 64 bits), what is in flight, the receiver's window, and the last segment it sent, as a
//! gap in the other side's data will see it.

use std::collections::VecDeque;

use super::acks::AckHistory;
use super::sender::{SenderEvidence, TimestampClock};
use crate::detect::PeerSegment;
use crate::path::{PathSide, RoundTrips};
use crate::segment::Nanos;
use crate::seq::SeqNumber;

/// Unacknowledged data segments remembered per direction; beyond this the oldest are
/// forgotten (their ACK-delay samples are lost, nothing else).
pub(super) const MAX_TRACKED_IN_FLIGHT: usize = 1024;

/// Room made for a direction's segments in flight when its first data is sent.
pub(super) const INITIAL_IN_FLIGHT: usize = 16;

/// One data segment still waiting for its ACK.
#[derive(Clone, Copy, Debug)]
pub(super) struct InFlight {
    pub(super) end: u64,
    pub(super) time: Nanos,
    pub(super) len: u32,
    pub(super) small: bool,
    pub(super) began_message: bool,
    pub(super) retransmitted: bool,
}

/// The state of the data one side sends. The fields are laid out by when they are used,
/// so that a segment touches as few cache lines as it can: first 64 bytes of what every
/// segment reads of either side, then what every segment writes of its sender, then its
/// sender's last segment, then what its ACKs update, then what data segments update. (Not aligned to 64 bytes:
/// aligned allocations left glibc's heap fragmented, 40% more peak RSS on large captures.)
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct Direction {
    /// Highest sequence number sent plus one, unwrapped to 64 bits.
    pub(super) snd_max: u64,
    /// Highest cumulative ACK received from the other side.
    pub(super) snd_una: u64,
    pub(super) in_flight: VecDeque<InFlight>,
    /// The first sequence number seen; positions are relative to it.
    pub(super) base: SeqNumber,
    /// How many of them are smaller than the MSS.
    pub(super) small_in_flight: u32,
    pub window_scale_option: Option<u8>,
    pub(super) started: bool,
    /// This side's SYN options.
    pub syn_seen: bool,
    /// Timestamps seen on any segment of this side.
    pub timestamps_seen: bool,
    /// The highest TTL (or hop limit) this side's packets came with.
    pub highest_ttl: u8,
    pub(super) zero_window_in_gap: bool,
    pub(super) peer_spoke_since_data: bool,
    pub fin_seen: bool,

    // What every segment of this side writes.
    pub(super) last_raw_time: Nanos,
    /// When the other side's first data since this side's last was captured.
    pub(super) peer_spoke_at: Nanos,
    pub packets: u64,
    /// The window this side advertises, scaled when the scale is known.
    pub(super) window: Option<u64>,
    /// The shift of the window this side advertises, once both SYNs are seen
    /// ([`Connection::window_scale`], kept here as it is read on every segment).
    pub(super) window_shift: Option<u8>,
    pub mss_option: Option<u16>,
    /// The window it advertises is zero (since `zero_window_since`).
    pub(super) window_closed: bool,
    /// This side echoed a TSval that only a pure ACK of the other side carried: it
    /// updates TS.Recent from pure ACKs (RFC 7323 4.3, not RFC 1323 3.4's strict rule).
    pub echoes_pure_acks: bool,
    /// The newest TSval of this side, and whether only pure ACKs carried it so far
    /// (read by every segment with timestamps, so kept with what every segment writes).
    pub(super) newest_tsval_pure_ack_only: bool,
    pub(super) newest_tsval: u32,
    /// What its TSvals show: its clock's rate, the path's least transit.
    pub(super) timestamps: TimestampClock,
    /// The latest stretch of this side's sequence space that the capture never saw
    /// (start, end): data sent past it was captured, it was not. (Read by every ACK of
    /// the other side, with the TSvals above.)
    pub(super) uncaptured: (u64, u64),
    /// Its last new data segment's packet, and how far the other side's data reached
    /// (sequence position) when it was captured.
    pub(super) last_data_packet: u64,
    pub(super) peer_sent_at_last_data: u64,

    /// The last segment this side sent, as seen by a gap in the other side's data.
    pub(super) last: LastSegment,

    // What an ACK from this side updates.
    /// Round trips from the capture point to this side and back.
    pub(super) round_trips: RoundTrips,
    /// Its full segment size as of its last data segment (read by the other side's ACKs).
    pub(super) full_size: u32,
    /// What its pure ACKs showed: the path's round trips, whether it acknowledges every
    /// segment.
    pub(super) acks: AckHistory,

    // What a data segment of this side updates.
    pub data_bytes: u64,
    pub data_segments: u64,
    /// Its sub-MSS data segments seen behind one of its own in flight, later than an ACK
    /// could have cleared it, while the capture had missed nothing.
    pub(super) unproven_violations: u32,
    /// Data segments since the other side last sent data.
    pub(super) message_full_segments: u32,
    pub(super) message_segments: u32,
    /// Messages: runs of data segments between two of the other side's data.
    pub messages: u32,
    pub max_payload: u32,
    /// The TSval and TSecr of its last data segment.
    pub(super) last_data_timestamps: Option<(u32, u32)>,
    /// The TSval of its last pure ACK, and when the capture saw it.
    pub(super) last_bare_tsval: Option<(u32, Nanos)>,
    /// What this side's own data segments prove about how it sends.
    pub sender: SenderEvidence,
    /// Urgent mode lasts until the data up to here is acknowledged.
    pub(super) urgent_until: u64,

    // Rarely used.
    /// Its data segments sent again (counted to 4 billion), and when it last did.
    pub retransmitted_segments: u32,
    pub timestamps_option: bool,
    pub(super) last_resent: Nanos,
    /// Since when the window this side advertises has been zero, and the packet.
    pub(super) zero_window_since: (Nanos, u64),
    /// The furthest the peer acknowledged beyond what the capture had seen this side send
    /// (0: never): data the capture missed, already acknowledged by a captured ACK.
    pub(super) acked_beyond_captured: u64,
    /// This side's last pure ACK, kept when data of its own followed it: the ACK a
    /// release that crossed that data was answering.
    pub(super) last_pure_ack: LastSegment,
    /// This side's segment before its last, when that was a pure ACK of new data (flags
    /// clear otherwise): a second candidate for a release in the other side's gap.
    pub(super) previous_ack: LastSegment,
    /// This side's latest late ACKs ([`LateAcks`]), kept from its first one.
    pub(super) late_acks: Option<Box<LateAcks>>,
}

/// A side's latest pure ACKs of new data that came later after that data than the least
/// round trip by `--min-gap` or more (a timer may have held them), each with the window it
/// advertised: seen near the receiver of a flight, the ACK a release one round trip later
/// answers, which other ACKs may follow before that release comes.
#[derive(Clone, Debug, Default)]
pub(super) struct LateAcks {
    acks: [(LastSegment, Option<u64>); LateAcks::KEPT],
    next: usize,
}

impl LateAcks {
    /// As many as a timer of 40 ms holds over a 160 ms round trip, one after another.
    const KEPT: usize = 4;

    pub(super) fn push(&mut self, ack: LastSegment, window: Option<u64>) {
        self.acks[self.next] = (ack, window);
        self.next = (self.next + 1) % Self::KEPT;
    }

    /// The one that first carried `tsval`, as a gap sees it.
    pub(super) fn carrying(&self, tsval: u32) -> Option<PeerSegment> {
        self.acks
            .iter()
            .find(|(ack, _)| {
                ack.has(LastSegment::HAS_TSVAL)
                    && ack.has(LastSegment::TSVAL_IS_NEW)
                    && ack.tsval == tsval
            })
            .and_then(|(ack, window)| ack.get(*window))
    }

    /// The latest one seen no later than `time`.
    pub(super) fn latest_until(&self, time: Nanos) -> Option<PeerSegment> {
        self.acks
            .iter()
            .filter(|(ack, _)| ack.has(LastSegment::SEEN) && ack.time <= time)
            .max_by_key(|(ack, _)| ack.time)
            .and_then(|(ack, window)| ack.get(*window))
    }
}

/// The last segment a side sent, as a gap in the other side's data will see it
/// ([`Direction::last_segment`]). Written for every segment, read only when such a gap
/// ends: its fields are kept as they come, and turned into a [`PeerSegment`] only then.
/// Windows and byte counts take 32 bits (a scaled window is at most 1 GiB); the window
/// after it is its side's current one, which only its side's next segment changes. In
/// one cache line.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LastSegment {
    pub(super) packet: u64,
    pub(super) time: Nanos,
    /// When this side's previous segment, and the newest data it acknowledged, were
    /// seen ([`LastSegment::NO_TIME`]: none).
    pub(super) previous_time: Nanos,
    pub(super) acked_data_time: Nanos,
    pub(super) snd_una_before: u64,
    pub(super) outstanding_before: u32,
    pub(super) newly_acked: u32,
    pub(super) window_before: u32,
    pub(super) acked_data_len: u32,
    pub(super) tsval: u32,
    pub(super) flags: u16,
}

impl LastSegment {
    pub(super) const SEEN: u16 = 1;
    pub(super) const ACK_ADVANCED: u16 = 2;
    pub(super) const OUTSTANDING_SMALL: u16 = 4;
    pub(super) const ACKED_DATA_SMALL: u16 = 8;
    pub(super) const ACKED_DATA_BEGAN_MESSAGE: u16 = 16;
    pub(super) const HAS_TSVAL: u16 = 32;
    pub(super) const TSVAL_IS_NEW: u16 = 64;
    pub(super) const SMALL_AFTER: u16 = 128;
    pub(super) const SENDER_OWED_ACK: u16 = 256;
    pub(super) const ACKED_UNCAPTURED: u16 = 512;
    pub(super) const CARRIES_DATA: u16 = 1024;
    pub(super) const NONE: u32 = u32::MAX;
    pub(super) const NO_TIME: Nanos = Nanos::MIN;

    /// A value in 32 bits, [`LastSegment::NONE`] kept for none.
    pub(super) fn small(value: u64) -> u32 {
        value.min(u64::from(Self::NONE - 1)) as u32
    }

    /// Segment `packet`, seen at `time` (its side's previous one at `previous_time`);
    /// what its ACK field did, its TSval and the window before it are set after.
    pub(super) fn begin(packet: u64, time: Nanos, previous_time: Option<Nanos>) -> LastSegment {
        LastSegment {
            packet,
            time,
            previous_time: previous_time.unwrap_or(Self::NO_TIME),
            acked_data_time: Self::NO_TIME,
            snd_una_before: 0,
            outstanding_before: 0,
            newly_acked: 0,
            window_before: Self::NONE,
            acked_data_len: 0,
            tsval: 0,
            flags: Self::SEEN,
        }
    }

    /// Its ACK field found the other side's first unacknowledged byte at
    /// `snd_una_before`, with `outstanding_before` bytes unacknowledged.
    pub(super) fn ack_field(&mut self, snd_una_before: u64, outstanding_before: u64) {
        self.snd_una_before = snd_una_before;
        self.outstanding_before = Self::small(outstanding_before);
    }

    /// It acknowledged `newly_acked` new bytes, `newest` the newest segment among them,
    /// answering a retransmission sent at `answered_resend` ([`Nanos::MIN`]:
    /// none); `small_before` and `small_after`: a sub-MSS segment was unacknowledged
    /// before and after it.
    pub(super) fn acked(
        &mut self,
        newly_acked: u64,
        newest: Option<&InFlight>,
        answered_resend: Nanos,
        small_before: bool,
        small_after: bool,
    ) {
        self.newly_acked = Self::small(newly_acked);
        self.set(Self::ACK_ADVANCED, true);
        self.set(Self::OUTSTANDING_SMALL, small_before);
        self.set(Self::SMALL_AFTER, small_after);
        if let Some(newest) = newest {
            self.acked_data_time = newest.time.max(answered_resend);
            self.acked_data_len = newest.len;
            self.set(Self::ACKED_DATA_SMALL, newest.small);
            self.set(Self::ACKED_DATA_BEGAN_MESSAGE, newest.began_message);
        }
    }

    /// The window its side advertised before it, and its TSval (`is_new`: newer than
    /// any its side sent before).
    pub(super) fn window_and_tsval(
        &mut self,
        window_before: Option<u64>,
        tsval: Option<u32>,
        is_new: bool,
    ) {
        self.window_before = window_before.map_or(Self::NONE, Self::small);
        self.tsval = tsval.unwrap_or(0);
        self.set(Self::HAS_TSVAL, tsval.is_some());
        self.set(Self::TSVAL_IS_NEW, is_new);
    }

    pub(super) fn set(&mut self, bit: u16, on: bool) {
        if on {
            self.flags |= bit;
        }
    }

    pub(super) fn has(&self, bit: u16) -> bool {
        self.flags & bit != 0
    }

    /// An earlier time as gaps judge it: a whole number of microseconds before this
    /// segment (rounded towards it, at most `u32::MAX - 1`), and never after it.
    pub(super) fn earlier(&self, earlier: Nanos) -> Option<Nanos> {
        (earlier != Self::NO_TIME).then(|| {
            let age = ((self.time - earlier).max(0) / 1_000).min(i64::from(Self::NONE - 1));
            self.time - age * 1_000
        })
    }

    /// The segment, given the window its side advertises now (the one after it).
    pub(super) fn get(&self, window_after: Option<u64>) -> Option<PeerSegment> {
        self.has(Self::SEEN).then(|| PeerSegment {
            packet: self.packet,
            time: self.time,
            previous_time: self.earlier(self.previous_time),
            ack_advanced: self.has(Self::ACK_ADVANCED),
            snd_una_before: self.snd_una_before,
            outstanding_before: u64::from(self.outstanding_before),
            newly_acked: u64::from(self.newly_acked),
            acked_data_len: self.acked_data_len,
            outstanding_small_segment: self.has(Self::OUTSTANDING_SMALL),
            small_outstanding_after: self.has(Self::SMALL_AFTER),
            acked_data_time: self.earlier(self.acked_data_time),
            acked_data_small: self.has(Self::ACKED_DATA_SMALL),
            acked_data_began_message: self.has(Self::ACKED_DATA_BEGAN_MESSAGE),
            tsval: self.has(Self::HAS_TSVAL).then_some(self.tsval),
            tsval_is_new: self.has(Self::TSVAL_IS_NEW),
            sender_owed_ack: self.has(Self::SENDER_OWED_ACK),
            acked_uncaptured: self.has(Self::ACKED_UNCAPTURED),
            carries_data: self.has(Self::CARRIES_DATA),
            window_before: (self.window_before != Self::NONE).then_some(self.window_before),
            window_after: window_after.map(Self::small),
        })
    }
}

impl Direction {
    /// The last segment this side sent, as a gap in the other side's data sees it.
    pub(super) fn last_segment(&self) -> Option<PeerSegment> {
        self.last.get(self.window)
    }

    /// The 64-bit position of a sequence (or acknowledgement) number of this direction,
    /// its first number at [`ORIGIN`](crate::seq::ORIGIN).
    pub(super) fn position(&self, seq: SeqNumber) -> u64 {
        seq.unwrap(self.base, self.snd_max)
    }

    /// A round-trip sample. `bare` when nothing but the path is in it (the handshake,
    /// a pure ACK); an ACK riding on data also holds the application's own time.
    pub(super) fn record_rtt_sample(&mut self, sample: Nanos, bare: bool) {
        self.round_trips.record(sample, bare);
    }

    /// The least round trip from the capture point to this side and back, if measured.
    pub fn path_rtt(&self) -> Option<Nanos> {
        self.round_trips.least()
    }

    /// What this side's round trips showed over the whole connection so far.
    pub fn path(&self) -> PathSide {
        self.round_trips.side()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::ORIGIN;

    #[test]
    fn the_last_segment_gives_back_what_it_was_given() {
        assert!(LastSegment::default().get(None).is_none());
        let time = 1_767_225_600_123_456_789;
        // Earlier times a whole number of microseconds before, byte counts and windows
        // within 32 bits: what the compact form keeps exactly.
        let full = PeerSegment {
            packet: u64::MAX,
            time,
            previous_time: Some(time - 123_456_000),
            snd_una_before: 1 << 33,
            newly_acked: 1 << 29,
            small_outstanding_after: true,
            ack_advanced: true,
            outstanding_before: 1 << 30,
            outstanding_small_segment: true,
            acked_data_time: Some(time - 3_600_000_000_000),
            acked_data_small: true,
            acked_data_len: 65_535,
            acked_data_began_message: true,
            tsval: Some(0),
            tsval_is_new: true,
            sender_owed_ack: true,
            acked_uncaptured: true,
            carries_data: true,
            window_before: Some(0),
            window_after: Some(65_535 << 14),
        };
        let empty = PeerSegment {
            time: -5,
            ..PeerSegment::default()
        };
        for segment in [full, empty] {
            let mut last = LastSegment::begin(segment.packet, segment.time, segment.previous_time);
            last.set(LastSegment::SENDER_OWED_ACK, segment.sender_owed_ack);
            last.set(LastSegment::CARRIES_DATA, segment.carries_data);
            last.ack_field(segment.snd_una_before, segment.outstanding_before);
            if segment.ack_advanced {
                let newest = segment.acked_data_time.map(|time| InFlight {
                    end: 0,
                    time,
                    len: segment.acked_data_len,
                    small: segment.acked_data_small,
                    began_message: segment.acked_data_began_message,
                    retransmitted: false,
                });
                last.acked(
                    segment.newly_acked,
                    newest.as_ref(),
                    Nanos::MIN,
                    segment.outstanding_small_segment,
                    segment.small_outstanding_after,
                );
                last.set(LastSegment::ACKED_UNCAPTURED, segment.acked_uncaptured);
            }
            last.window_and_tsval(
                segment.window_before.map(u64::from),
                segment.tsval,
                segment.tsval_is_new,
            );
            let back = last.get(segment.window_after.map(u64::from));
            assert_eq!(format!("{back:?}"), format!("{:?}", Some(segment)));
        }
    }

    #[test]
    fn the_latest_late_ack_until_a_time_is_found_in_the_ring() {
        let mut late = LateAcks::default();
        assert!(late.latest_until(i64::MAX).is_none());
        // Six pushed into a ring of four: the first two are gone.
        for (packet, time) in [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50), (6, 60)] {
            late.push(LastSegment::begin(packet, time, None), None);
        }
        let packet_until = |time| late.latest_until(time).map(|ack| ack.packet);
        assert_eq!(packet_until(65), Some(6));
        assert_eq!(packet_until(50), Some(5));
        assert_eq!(packet_until(31), Some(3));
        assert_eq!(packet_until(29), None);
    }

    #[test]
    fn the_last_segment_takes_one_cache_line() {
        assert!(std::mem::size_of::<LastSegment>() <= 64);
    }

    #[test]
    fn earlier_times_are_whole_microseconds_before_and_never_after() {
        let last = LastSegment {
            time: 10_000_000,
            ..LastSegment::default()
        };
        assert_eq!(last.earlier(9_998_999), Some(9_999_000));
        assert_eq!(last.earlier(10_000_500), Some(10_000_000));
        assert_eq!(last.earlier(LastSegment::NO_TIME), None);
    }

    #[test]
    fn positions_are_relative_to_the_first_sequence_number() {
        let dir = Direction {
            started: true,
            base: SeqNumber(u32::MAX - 2),
            snd_max: ORIGIN,
            ..Direction::default()
        };
        assert_eq!(dir.position(SeqNumber(u32::MAX - 2)), ORIGIN);
        assert_eq!(dir.position(SeqNumber(5)), ORIGIN + 8);
    }
}
