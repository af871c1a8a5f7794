//! Link 3: a delayed-ACK timer held the ACK that released the data. It covers less than
//! two full segments, and came later than the path's own delay allows.

use std::ops::ControlFlow::{self, Break, Continue};

use super::basis::Link;
use super::event::{StallEvent, Verdict};
use super::gap::{DetectConfig, GapContext, PeerSegment};
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
    let covers_two_full_segments = ack.newly_acked * 2 > u64::from(ctx.sender_full_size) * 3;
    if covers_two_full_segments && delay < SHORTEST_TIMER {
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
    Continue(delay)
}
