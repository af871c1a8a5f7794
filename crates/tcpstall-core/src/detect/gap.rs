//! The gap record: everything a rule may read about one gap, gathered by the flow
//! tracker (the sender's segments, the peer's last segment inside the gap, the paths'
//! round trips), the detector's thresholds, and the sender's clock.

use crate::path::{PathSide, USUAL_TURNAROUND};
use crate::segment::{NANOS_PER_MILLI, Nanos};
use crate::side::{PerSide, Side};

/// Thresholds of the detector.
#[derive(Clone, Copy, Debug)]
pub struct DetectConfig {
    /// A gap is examined when it is at least this long, and reported when the delay it
    /// contains beyond the path's round trip (ACK delay, idle time) is at least this long.
    pub min_gap: Nanos,
    /// Data the sender sends this soon after the segment that ended a gap, with the same
    /// ACK field, left in the same burst and was held too.
    pub burst_slack: Nanos,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            min_gap: 10 * NANOS_PER_MILLI,
            burst_slack: 2 * NANOS_PER_MILLI,
        }
    }
}

/// Everything the classifier needs about one gap, gathered by the flow tracker.
#[derive(Clone, Debug)]
pub struct GapContext {
    pub gap_start: Nanos,
    pub gap_end: Nanos,
    pub data_before_packet: u64,
    pub data_after_packet: u64,
    /// The last segment of the burst that left with it (itself when it left alone).
    pub burst_last_packet: u64,
    /// The side whose segment ends the gap.
    pub sender: Side,
    /// The MSS the sender may use, and its full segment size (the MSS, or a smaller
    /// segment limit it was seen keeping to).
    pub sender_mss: u32,
    pub sender_full_size: u32,
    pub segment_bytes: u32,
    /// The largest segment the sender sent before the gap (below the MSS unless records
    /// of an offloading host were captured), and the size of its data segment before it.
    pub sender_largest_segment: u32,
    pub sender_previous_bytes: u32,
    pub segment_is_retransmission: bool,
    pub segment_tsecr: Option<u32>,
    pub segment_tsval: Option<u32>,
    /// The TSval of the sender's previous data segment, and its timestamp clock's rate
    /// (ticks a second): the sender's own account of when it sent what.
    pub sender_previous_tsval: Option<u32>,
    /// The TSval of the sender's last pure ACK before it, and when that was captured: a
    /// bare segment's transit, no serialization of data in it.
    pub sender_previous_bare: Option<(u32, Nanos)>,
    pub sender_tsval_hz: Option<f64>,
    /// The sender was seen echoing a TSval that only a pure ACK of its peer carried: it
    /// updates TS.Recent from pure ACKs (RFC 7323 4.3), not by RFC 1323's strict rule.
    pub sender_echoes_pure_acks: bool,
    /// Sequence space before the segment ending the gap was never captured: when the
    /// sender sent what it holds is unknown.
    pub release_after_hole: bool,
    /// The sender opened the connection and its SYN was captured: its first data byte is
    /// at sequence position `seq::ORIGIN + 1`, and its peer is the passive opener.
    pub sender_opened: bool,
    /// The data before the gap came from the sender itself (it was simply slow to go on).
    pub data_before_from_sender: bool,
    /// When the sender's previous data segment was captured.
    pub sender_previous_data: Option<Nanos>,
    /// The same, when that segment ended a message (smaller than the full size): the
    /// sender's rhythm is read from the time between its messages.
    pub sender_previous_message: Option<Nanos>,
    /// When the sender's own ACK of the data before the gap was captured, if it sent
    /// one inside the gap: the data had reached it by then.
    pub sender_acked_peer_at: Option<Nanos>,
    /// The round trips from the capture point to each side and back (index: side).
    pub path: PerSide<PathSide>,
    /// The step of the capture's clock (1 us for most captures, 1 ms for some).
    pub clock_step: Nanos,
    /// The round trip of a prompt ACK from the other side for the same flight of data:
    /// what the path, queue included, took then.
    pub prompt_round_trip: Option<Nanos>,
    /// The round trip of the other side's first pure ACK for the data the gap released:
    /// what the path, queue included, took a moment after the candidate ACK.
    pub release_round_trip: Option<Nanos>,
    /// The round trip of the other side's latest reply before that ACK: the path took no
    /// longer then.
    pub release_reply_bound: Option<Nanos>,
    /// The round trip of the other side's pure ACK before the candidate, for earlier
    /// data: what the path took a moment before it.
    pub round_trip_before: Option<Nanos>,
    /// The other side acknowledged the previous full segment of the same flight alone,
    /// sooner than any timer: it acknowledges every segment.
    pub peer_acks_every_segment: bool,
    /// The releasing ACK came at the pace the path delivers queued segments.
    pub peer_paced_by_delivery: bool,
    /// Over the connection, the other side's ACKs that released this sender's data came
    /// no later than the path a moment after them at least twice and at least as often as
    /// later: it acknowledges at once ([`acks_at_once`](super::ack_timer::acks_at_once)).
    /// Holds how far above the least round trip those prompt ACKs reached (the path's own
    /// range); filled in when the gap is classified.
    pub peer_acks_at_once: Option<Nanos>,
    /// The other side's least round trip, over the whole connection, of an ACK it sent at
    /// once for two full segments the newest large (1 KB and more): what a narrow link's
    /// serialization adds; filled in when the gap is classified.
    pub peer_large_data_rtt: Option<Nanos>,
    /// How long a full segment of the sender took to cross the links before the capture
    /// point: the least spacing of two of its contiguous full segments there, where the
    /// other side's ACKs paced the same data no faster (0: not measured); filled in when
    /// the gap is classified.
    pub sender_full_segment_serialization: Nanos,
    /// The other side's last segment before the one ending the gap, if it came inside it.
    pub last_from_peer: Option<PeerSegment>,
    /// A late ACK of the other side from before the gap: the one whose TSval the segment
    /// ending the gap echoes, or else the latest. The chain judges the gap against it
    /// where the other side's segment in the gap, if any, cannot have released the data
    /// ([`release::answered_instead`](super::release::answered_instead)).
    pub late_ack_before_gap: Option<Box<PeerSegment>>,
    /// The other side's pure ACK before `last_from_peer`, when it came inside the gap too:
    /// the data may have answered it instead
    /// ([`release::released_by_earlier_ack`](super::release::released_by_earlier_ack)).
    pub earlier_ack_in_gap: Option<Box<PeerSegment>>,
    /// The other side advertised a zero window during the gap.
    pub peer_zero_window: bool,
    /// Full-sized segments in the sender's current message so far.
    pub block_full_segments: u32,
    /// Data the sender sent in the same burst right after the segment ending the gap,
    /// where that burst ended (sequence position), and whether its last segment was
    /// smaller than the full size.
    pub burst_bytes: u64,
    pub burst_end: u64,
    pub burst_ends_with_small: bool,
    /// The sender was seen not applying Nagle by the time the gap ended.
    pub sender_nagle_off: bool,
    /// The sender's rhythm: a clock of its own, or steady.
    pub sender_clock: SenderClock,
}

impl GapContext {
    /// The same gap, judged against `ack` as the other side's segment that released it:
    /// what other ACKs measured about the path around the first candidate does not
    /// apply to it.
    pub fn answering(&self, ack: &PeerSegment) -> GapContext {
        GapContext {
            last_from_peer: Some(ack.clone()),
            late_ack_before_gap: None,
            earlier_ack_in_gap: None,
            prompt_round_trip: None,
            release_round_trip: None,
            release_reply_bound: None,
            round_trip_before: None,
            peer_acks_every_segment: false,
            peer_paced_by_delivery: false,
            peer_acks_at_once: None,
            ..self.clone()
        }
    }
}

/// The other side's last segment inside a gap.
#[derive(Clone, Debug, Default)]
pub struct PeerSegment {
    pub packet: u64,
    pub time: Nanos,
    /// When the peer's segment before this one was captured: it did not acknowledge the
    /// data this one did, so that data reached the peer after it left.
    pub previous_time: Option<Nanos>,
    /// It acknowledged sender data not acknowledged before.
    pub ack_advanced: bool,
    /// The sender's first unacknowledged byte before it (sequence position), its
    /// unacknowledged bytes, and how many of them it acknowledged.
    pub snd_una_before: u64,
    pub outstanding_before: u64,
    pub newly_acked: u64,
    pub outstanding_small_segment: bool,
    /// A sub-MSS segment of the sender was still unacknowledged after it.
    pub small_outstanding_after: bool,
    /// When the newest sender data it acknowledged was seen, and whether that was small.
    pub acked_data_time: Option<Nanos>,
    pub acked_data_small: bool,
    /// The size of that newest segment.
    pub acked_data_len: u32,
    /// The acknowledged data was the first segment of the sender's message.
    pub acked_data_began_message: bool,
    pub tsval: Option<u32>,
    /// Its TSval is newer than any the peer sent before it.
    pub tsval_is_new: bool,
    /// When it came, the sender (of the gap's data) had not acknowledged all the peer's
    /// data before it: RFC 7323 4.3 keeps TS.Recent from being updated by it.
    pub sender_owed_ack: bool,
    /// Some of what it newly acknowledged was not captured (a hole in the sender's
    /// sequence space, or its TSecr names data newer than the captured data it covers).
    pub acked_uncaptured: bool,
    /// It carried data of its own.
    pub carries_data: bool,
    /// The window its side advertised before it and after it (at most 1 GiB).
    pub window_before: Option<u32>,
    pub window_after: Option<u32>,
}

/// What a sender's rhythm says, over its gaps that ended after an ACK of its peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SenderClock {
    /// Too few gaps, or no rhythm.
    #[default]
    Unknown,
    /// The time since its previous data hardly varies: a clock, or ACKs and data that
    /// are both steady. A release later than the round trip is then the clock's.
    Steady,
    /// Steady where the time since the ACKs wanders: its data follows its own clock,
    /// not the ACKs (a meter sending a reading every 20 ms).
    FollowsOwn,
}

/// Reads a sender's rhythm from the time since its previous data (`intervals`) and the
/// time since the peer's ACK (`reactions`) at the end of each of its gaps.
pub fn sender_clock(intervals: &mut [Nanos], reactions: &mut [Nanos]) -> SenderClock {
    const MIN_SAMPLES: usize = 6;
    if intervals.len() < MIN_SAMPLES || intervals.len() != reactions.len() {
        return SenderClock::Unknown;
    }
    // The rhythm is the usual time since the previous data. Data that left those gaps
    // as soon after an ACK as a host sends what an ACK released kept the ACKs' rhythm,
    // which a steady delayed ACK makes as regular as a clock (Nagle releasing each write
    // on it), however the ACKs wandered in its other gaps. (Only a capture beside the
    // sender times its reaction that finely; a meter whose readings follow the ACKs by
    // 3 ms keeps its own clock.)
    let usual = median(&mut intervals.to_vec());
    let mut on_rhythm: Vec<Nanos> = intervals
        .iter()
        .zip(reactions.iter())
        .filter(|(interval, _)| (*interval - usual).abs() <= NANOS_PER_MILLI)
        .map(|(_, reaction)| *reaction)
        .collect();
    let left_on_the_acks = median(&mut on_rhythm) <= USUAL_TURNAROUND;
    let interval_spread = median_absolute_deviation(intervals);
    let reaction_spread = median_absolute_deviation(reactions).max(quartile_range(reactions) / 2);
    // The ACKs must wander for the comparison to say anything: where both are steady,
    // data that follows each ACK is what a held sender shows. (The range between the
    // quartiles catches ACKs that changed their timing part way, which the median
    // deviation alone would not.)
    let acks_wander = reaction_spread >= 2 * NANOS_PER_MILLI;
    if acks_wander
        && !left_on_the_acks
        && interval_spread <= NANOS_PER_MILLI
        && interval_spread * 4 <= reaction_spread
    {
        SenderClock::FollowsOwn
    } else if interval_spread <= NANOS_PER_MILLI / 10 {
        SenderClock::Steady
    } else {
        SenderClock::Unknown
    }
}

/// The spread between the first and the third quartile.
fn quartile_range(values: &mut [Nanos]) -> Nanos {
    values.sort_unstable();
    let n = values.len();
    values[n * 3 / 4] - values[n / 4]
}

/// The middle value (the upper of the two middle ones), sorting `values`.
fn median(values: &mut [Nanos]) -> Nanos {
    values.sort_unstable();
    values[values.len() / 2]
}

fn median_absolute_deviation(values: &mut [Nanos]) -> Nanos {
    let middle = median(values);
    let mut deviations: Vec<Nanos> = values.iter().map(|v| (v - middle).abs()).collect();
    median(&mut deviations)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = NANOS_PER_MILLI;

    #[test]
    fn a_clock_is_tight_where_the_acks_wander() {
        let mut intervals: Vec<Nanos> = (0..8).map(|i| 20 * MS + i * 10_000).collect();
        let mut reactions: Vec<Nanos> = (0..8).map(|i| 2 * MS + i * MS).collect();
        assert_eq!(
            sender_clock(&mut intervals, &mut reactions),
            SenderClock::FollowsOwn
        );
    }

    #[test]
    fn acks_that_release_data_are_tight_where_the_timer_wanders() {
        // A Linux 40 ms timer on 4 ms jiffies, the data leaving 50 us after each ACK.
        let mut intervals: Vec<Nanos> = (0..8).map(|i| 40 * MS + (i % 4) * MS).collect();
        let mut reactions: Vec<Nanos> = (0..8).map(|i| 50_000 + i * 1_000).collect();
        assert_ne!(
            sender_clock(&mut intervals, &mut reactions),
            SenderClock::FollowsOwn
        );
    }

    #[test]
    fn writes_a_steady_delayed_ack_releases_keep_its_rhythm_not_their_own() {
        // A server writing every 205 ms to a Windows client over a 100 ms path: Nagle
        // holds each write until the 200 ms timer's ACK, and the data leaves 9 us after
        // it, 300 ms after the data before; between, a full segment and its tail leave
        // 125 ms apart, 25 ms after an ACK. The usual interval is the ACKs'.
        let mut intervals = [300, 300, 125, 300, 300, 125, 300, 300, 125].map(|i| i * MS);
        let mut reactions = [
            9_000,
            9_000,
            25 * MS,
            9_000,
            9_000,
            25 * MS,
            9_000,
            9_000,
            25 * MS,
        ];
        assert_eq!(
            sender_clock(&mut intervals, &mut reactions),
            SenderClock::Steady
        );
    }

    #[test]
    fn steady_acks_and_steady_data_are_no_clock() {
        let mut intervals = vec![44 * MS; 8];
        let mut reactions = vec![50_000; 8];
        assert_ne!(
            sender_clock(&mut intervals, &mut reactions),
            SenderClock::FollowsOwn
        );
    }

    #[test]
    fn few_samples_decide_nothing() {
        let mut intervals = vec![20 * MS; 3];
        let mut reactions = vec![MS, 5 * MS, 9 * MS];
        assert_ne!(
            sender_clock(&mut intervals, &mut reactions),
            SenderClock::FollowsOwn
        );
    }
}
