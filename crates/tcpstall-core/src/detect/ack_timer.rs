//! Link 3: a delayed-ACK timer held the ACK that released the data. It covers less than
//! two full segments, and came later than the path's own delay allows.

use std::ops::ControlFlow::{self, Break, Continue};

use super::basis::Link;
use super::event::{StallEvent, Verdict};
use super::gap::{DetectConfig, GapContext, PeerSegment};
use crate::path::SPREAD_CEILING;
use crate::segment::Nanos;
use crate::side::Side;

pub use crate::stacks::SHORTEST_TIMER;
use crate::stacks::{LONGEST_DEFAULT_TIMER, MAX_DELAYED_ACK};

/// Whether an ACK this late (beyond the round trip) may have been held by a known
/// stack's delayed-ACK timer: from the shortest per-connection timer to the longest
/// default. Sooner is prompt; later is the path (a queue, a slow link), not a timer.
pub fn may_be_timer(delay: Nanos) -> bool {
    (SHORTEST_TIMER..=LONGEST_DEFAULT_TIMER).contains(&delay)
}

/// Whether a side acknowledges at once, read from its ACKs that released the other
/// side's data over one connection: `readings` are each ACK's round trip and that of the
/// side's first pure ACK a moment later. A timer holds every lone segment's ACK alike in
/// one state of a connection, so a side it holds reads late against the path a moment
/// later more often than not; a side that ACKs at once (TCP_QUICKACK, Windows'
/// TcpAckFrequency of 1) reads early as often as late, by as much as the path moves.
/// One early reading is no such rhythm: Linux's quick-ack mode sends a connection's first
/// ACKs at once before its timer holds the rest (`tcp_in_quickack_mode`, v6.6).
/// Returns how far above `least` the round trips of its prompt ACKs reached: a later ACK
/// within that range is the path's own movement, not a timer.
pub fn acks_at_once(
    readings: impl Iterator<Item = (Nanos, Nanos)>,
    least: Nanos,
    config: &DetectConfig,
) -> Option<Nanos> {
    let (mut prompt, mut late, mut reach) = (0u32, 0u32, 0);
    for (sample, next) in readings {
        if sample - next < config.min_gap {
            prompt += 1;
            reach = reach.max(sample.max(next) - least);
        } else {
            late += 1;
        }
    }
    (late > 0 && prompt >= late.max(2)).then_some(reach)
}

/// The reading a gap gives [`acks_at_once`]: its releasing ACK's round trip and that of
/// the other side's first pure ACK for the released data, where the ACK covered a lone
/// segment and neither round trip can be a timer's: both less than the shortest
/// per-connection timer above `least` (the other side's least round trip), and no later
/// than the side's latest reply showed the path to be. `full_size` is the sender's.
pub fn at_once_reading(
    ctx: &GapContext,
    full_size: u32,
    least: Nanos,
    config: &DetectConfig,
) -> Option<(Nanos, Nanos)> {
    let ack = ctx.last_from_peer.as_ref()?;
    let data = ack.acked_data_time.filter(|_| !ack.acked_uncaptured)?;
    let next = ctx.release_round_trip?;
    let sample = ack.time - data;
    let untimed = sample - least < SPREAD_CEILING
        && next - least < SPREAD_CEILING
        && ctx
            .release_reply_bound
            .is_none_or(|bound| next - bound < config.min_gap);
    let lone = !covers_two_full_segments(ack.newly_acked, full_size);
    (lone && untimed).then_some((sample, next))
}

/// Whether the ACK offers at least twice the window the one before it left: a read made
/// that room, and a receiver sends such an update as the read returns (Linux
/// __tcp_cleanup_rbuf once the window doubles, v6.6). Its time is the reader's, not a
/// timer's.
pub(crate) fn sent_as_a_read_opened_the_window(ack: &PeerSegment) -> bool {
    let (Some(before), Some(after)) = (ack.window_before, ack.window_after) else {
        return false;
    };
    let left = u64::from(before).saturating_sub(ack.newly_acked);
    let offered = u64::from(after);
    offered > left && offered >= 2 * left
}

/// Whether `ack` was the first acknowledgment of the sender's data by a peer that
/// accepted the connection (the sender's SYN captured, its first data byte just past
/// it). A Linux listener acknowledges the first data it receives at once:
/// `tcp_event_data_recv` enters quick-ack mode on it (`tcp_incr_quickack`, since 2.4),
/// and ping-pong mode, which suspends quick-ack, can begin only once `ato` is set
/// (`tcp_event_data_sent`, v6.6), which that first data does, unless the application
/// cleared TCP_QUICKACK. A timer that held this ACK is not Linux's. (The side that
/// connected may have set `ato` at the handshake, where it held the handshake's ACK for a
/// pending write, `tcp_rcv_synsent_state_process`, and a request sent within it enters
/// ping-pong mode: Linux clients are seen holding the first response's ACK.)
pub(crate) fn first_data_acked(ctx: &GapContext, ack: &PeerSegment) -> bool {
    ctx.sender_opened && ack.snd_una_before == crate::seq::ORIGIN + 1
}

/// RFC 1122 4.2.3.2: an ACK for at least two full segments is sent at once.
pub(crate) fn covers_two_full_segments(newly_acked: u64, full_size: u32) -> bool {
    newly_acked * 2 > u64::from(full_size) * 3
}

/// What the ACK's timing says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckTiming {
    /// Held by a timer this long beyond the path's own delay.
    Held { delay: Nanos },
    /// Sent at once, and why that is known.
    Prompt(&'static str),
    /// Later than any delayed-ACK timer may hold an ACK: something else held it.
    BeyondTimers { delay: Nanos },
    /// The data it acknowledges was not captured: its delay is unknown.
    Unknown,
}

/// Link 3: a delayed-ACK timer held the ACK. An ACK for two or more full-sized segments
/// is sent at once (RFC 1122 4.2.3.2, RFC 5681 4.2); the rest must come later than the
/// path itself takes: its minimum round trip, or the round trips of prompt ACKs for the
/// same flight, which include the queue it met.
pub fn ack_timing(ctx: &GapContext, ack: &PeerSegment, config: &DetectConfig) -> AckTiming {
    // A delay is measurable only when every byte the ACK newly covers was captured.
    let Some(data_seen) = ack.acked_data_time.filter(|_| !ack.acked_uncaptured) else {
        return AckTiming::Unknown;
    };
    if ctx.peer_acks_every_segment {
        return AckTiming::Prompt("peer-acks-every-segment");
    }
    if ctx.peer_paced_by_delivery {
        return AckTiming::Prompt("ack-paced-by-delivery");
    }
    let peer = ctx.sender.other();
    let sample = ack.time - data_seen;
    let path = ctx.path[peer].least;
    // A large segment's round trip is judged against the least one an ACK sent at once
    // measured for large data (a narrow link serializes it).
    let large = ctx
        .peer_large_data_rtt
        .filter(|large| ack.acked_data_len >= 1024 && large - path < SHORTEST_TIMER)
        .map(|large| {
            // That ACK came after two full segments crossed the narrow link one after the
            // other; an ACK of one came after one crossed it.
            if ack.newly_acked < 2 * u64::from(ctx.sender_full_size) {
                path + (large - path) / 2
            } else {
                large
            }
        })
        .unwrap_or(path);
    let reference = ctx
        .prompt_round_trip
        .map_or(path, |r| r.max(path))
        .max(large);
    // The path just after: the first pure ACK for the data this ACK released. A queue on
    // a long path moves the round trip by tens of milliseconds, so the candidate must
    // stand out from what the path took a moment later, not only from the least. That
    // ACK measures the path only when no timer can have held it: sooner than any
    // per-connection timer beyond the reference, and no later than the side's latest
    // reply, which bounds the path from above (RFC 9293 3.4), showed the path to be (a
    // side whose short timer, or tick, holds every ACK held that one too).
    let reference = ctx
        .release_round_trip
        .filter(|next| next - reference < SHORTEST_TIMER)
        .filter(|next| {
            ctx.release_reply_bound
                .is_none_or(|bound| next - bound < config.min_gap)
        })
        .map_or(reference, |next| next.max(reference));
    // The peer's previous segment did not acknowledge this data, so the data reached the
    // peer after that segment left: the peer held it no longer than the time between.
    let since_previous = ack.previous_time.map_or(Nanos::MAX, |p| ack.time - p);
    let delay = (sample - reference).min(since_previous);
    // RFC 1122 4.2.3.2 asks for an ACK at least every second full segment, but it is a
    // SHOULD: Linux holds one while the window it would advertise is smaller than the
    // last (__tcp_ack_snd_check), macOS sends stretch ACKs on its timer. Such an ACK was
    // held only when it came as late as a per-connection timer fires.
    if covers_two_full_segments(ack.newly_acked, ctx.sender_full_size) && delay < SHORTEST_TIMER {
        return AckTiming::Prompt("ack-covers-two-full-segments");
    }
    // The path's own variation is no timer: the delay must stand out from it.
    if delay < config.min_gap {
        return if since_previous < sample - reference {
            AckTiming::Prompt("ack-soon-after-previous-ack")
        } else if reference > path {
            AckTiming::Prompt("ack-within-queueing-delay")
        } else {
            AckTiming::Prompt("ack-within-round-trip")
        };
    }
    if delay >= MAX_DELAYED_ACK {
        return AckTiming::BeyondTimers { delay };
    }
    if sent_as_a_read_opened_the_window(ack) {
        return AckTiming::Prompt("ack-sent-as-a-read-opened-the-window");
    }
    // A side that acknowledges at once: a later ACK within the range its prompt ones
    // showed is the path moving, against the path a moment later where it was measured,
    // or a moment before (a path whose delay drifts takes longer on one side of the ACK).
    if let Some(reach) = ctx.peer_acks_at_once {
        let against = ctx.release_round_trip.unwrap_or(path);
        let before = ctx.round_trip_before.unwrap_or(path);
        if sample - against.max(before) <= reach {
            return AckTiming::Prompt("peer-acks-at-once");
        }
    }
    AckTiming::Held { delay }
}

/// Link 3 as a step of the chain: a timer held `ack`, this long beyond the path's delay.
pub fn held_by_timer(
    ctx: &GapContext,
    ack: &PeerSegment,
    config: &DetectConfig,
    event: &mut StallEvent,
) -> ControlFlow<Verdict, Nanos> {
    let basis = &mut event.evidence.basis;
    if !ack.ack_advanced {
        // The sender left right after a segment that acknowledged nothing new.
        basis.push(Link::AckAcknowledgedNothingNew);
        if ctx.gap_end - ctx.gap_start
            < config.min_gap + ctx.path[Side::First].least + ctx.path[Side::Second].least
        {
            return Break(Verdict::NoStall);
        }
        return Break(Verdict::Stall);
    }
    let delay = match ack_timing(ctx, ack, config) {
        AckTiming::Held { delay } => delay,
        AckTiming::Prompt(_) => return Break(Verdict::NoStall),
        AckTiming::BeyondTimers { delay } => {
            basis.push(Link::AckLaterThanAnyTimer);
            event.ack_delay = Some(delay);
            return Break(Verdict::Stall);
        }
        AckTiming::Unknown => {
            basis.push(Link::AckedDataNotCaptured);
            return Break(Verdict::Stall);
        }
    };
    basis.push(Link::AckHeldByTimer);
    event.ack_delay = Some(delay);
    event.ack_of_first_data = first_data_acked(ctx, ack);
    event.ack_round_trip = ack.acked_data_time.map(|data| ack.time - data);
    Continue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_side_reading_early_as_often_as_late_acks_at_once() {
        let config = DetectConfig::default();
        // Round trips of 400 ms and more: against the next ACK, early, late, early, late.
        let readings =
            [(410, 420), (425, 412), (405, 409), (430, 418)].map(|(s, n)| (s * MS, n * MS));
        assert_eq!(
            acks_at_once(readings.into_iter(), 400 * MS, &config),
            Some(20 * MS),
            "its prompt ACKs reached 20 ms above the least"
        );
    }

    fn ack(window_before: u32, newly_acked: u64, window_after: u32) -> PeerSegment {
        PeerSegment {
            packet: 1,
            ack_advanced: true,
            outstanding_before: newly_acked,
            newly_acked,
            window_before: Some(window_before),
            window_after: Some(window_after),
            ..PeerSegment::default()
        }
    }

    #[test]
    fn a_window_a_read_doubled_shows_the_read_sent_the_ack() {
        // 2,432 offered, 1,460 of it filled: 972 left; the ACK offers 2,944.
        assert!(sent_as_a_read_opened_the_window(&ack(2432, 1460, 2944)));
        // A large window that a small request barely touched: no read made the ACK.
        assert!(!sent_as_a_read_opened_the_window(&ack(
            4_194_304, 100, 4_194_304
        )));
        // Less than twice what was left.
        assert!(!sent_as_a_read_opened_the_window(&ack(8192, 1460, 9000)));
        // A window filled and offered again as it was: nothing opened.
        assert!(!sent_as_a_read_opened_the_window(&ack(1460, 1460, 0)));
    }

    #[test]
    fn a_side_a_timer_holds_does_not() {
        let config = DetectConfig::default();
        // Its first ACK came at once (quick-ack mode), the rest 40 ms late.
        let readings =
            [(401, 402), (441, 401), (442, 400), (440, 401)].map(|(s, n)| (s * MS, n * MS));
        assert_eq!(acks_at_once(readings.into_iter(), 400 * MS, &config), None);
        // One ACK at once (quick-ack mode) and one its timer held: no rhythm yet.
        let first_at_once = [(401, 402), (441, 401)].map(|(s, n)| (s * MS, n * MS));
        assert_eq!(
            acks_at_once(first_at_once.into_iter(), 400 * MS, &config),
            None
        );
        // Nothing late: nothing for the rule to excuse.
        let prompt = [(401, 402), (400, 401)].map(|(s, n)| (s * MS, n * MS));
        assert_eq!(acks_at_once(prompt.into_iter(), 400 * MS, &config), None);
    }
}
