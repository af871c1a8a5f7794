//! Link 4: Nagle could hold the data: a sub-MSS segment, from a sender seen applying
//! Nagle, released by an ACK that cleared what Nagle waits for; and the application
//! behaviour such a stall points to.

use super::ack_timer::SHORTEST_TIMER;
use super::basis::Link;
use super::event::{Confidence, Pattern, StallClass, StallEvent, Verdict};
use super::gap::{GapContext, PeerSegment};
use super::release::{Release, sooner_than_a_round_trip};
use crate::segment::Nanos;

/// Link 4: Nagle (RFC 896, RFC 1122 4.2.3.4) could have held this data behind the
/// unacknowledged data that `ack` cleared. Nagle holds only a sub-MSS segment, and only
/// while data is unacknowledged (classic) or a sub-MSS segment is (Minshall's variant).
pub fn nagle_could_hold(ctx: &GapContext, ack: &PeerSegment) -> Result<(), Link> {
    if ctx.segment_bytes >= ctx.sender_full_size {
        return Err(Link::FullSizedSegment);
    }
    if u64::from(ctx.segment_bytes) + ctx.burst_bytes >= u64::from(ctx.sender_full_size) {
        return Err(Link::ReleasedAFullSegment);
    }
    if ctx.sender_nagle_off {
        return Err(Link::SenderNotUsingNagle);
    }
    let acked_everything = ack.newly_acked >= ack.outstanding_before;
    if !acked_everything && ack.small_outstanding_after {
        return Err(Link::SmallSegmentStillUnacknowledged);
    }
    Ok(())
}

/// Data a hold kept queued leaves in segments as large as its sender sends (RFC 1122
/// 4.2.3.4: send when a maximum-sized segment can be sent; Linux tcp_sendmsg appends each
/// write to the unsent tail up to the size goal, BSD tcp_output cuts segments from the
/// socket buffer): a release that begins with a segment smaller than one the sender has
/// already sent, more data right behind it, was written in pieces as it left.
pub fn released_in_pieces(ctx: &GapContext) -> bool {
    let largest = ctx.sender_largest_segment.min(ctx.sender_mss);
    ctx.burst_bytes > 0 && ctx.segment_bytes < largest
}

/// The timer fired while the segment sent right behind the newest one `ack` acknowledged
/// was still crossing to the receiver: the sender's data before the gap, full-sized and
/// left unacknowledged by `ack`, went in that segment's burst, for no segment of the
/// receiver came early enough to have released it after that one left. A receiver
/// acknowledges two full segments at once (RFC 1122 4.2.3.2), so the pair's ACK would
/// have come no sooner: the link spacing them held the sender, not the timer (a slow
/// link to a receiver whose timer acknowledges each lone segment).
pub fn pair_still_crossing(ctx: &GapContext, ack: &PeerSegment) -> bool {
    let Some(held_seen) = ack.acked_data_time else {
        return false;
    };
    let full = ctx.data_before_from_sender && ctx.sender_previous_bytes >= ctx.sender_full_size;
    // Seen after the ACK, or before it and left outstanding by it.
    let unacknowledged =
        ack.packet < ctx.data_before_packet || ack.newly_acked < ack.outstanding_before;
    // A segment of the receiver seen at `p` released no data seen before it or sooner
    // than a round trip after it: where that rules out the held segment and not the
    // data before the gap, it may have released that data alone.
    let could_not_release =
        |seen: Nanos, p: Nanos| seen < p || sooner_than_a_round_trip(ctx, seen - p);
    let released_between =
        |p: Nanos| could_not_release(held_seen, p) && !could_not_release(ctx.gap_start, p);
    let one_burst = !ack.previous_time.is_some_and(released_between)
        && (ack.time >= ctx.gap_start || sooner_than_a_round_trip(ctx, ctx.gap_start - ack.time));
    full && unacknowledged && one_burst
}

pub fn nagle_pattern(ctx: &GapContext, ack: &PeerSegment) -> Pattern {
    if ack.acked_data_small && ack.acked_data_began_message {
        Pattern::WriteWriteRead
    } else if !ack.acked_data_small && ctx.block_full_segments % 2 == 1 {
        Pattern::BulkOddTail {
            full_segments: ctx.block_full_segments,
        }
    } else {
        Pattern::SmallWriteBehindUnacked
    }
}

/// Link 4 as the last step of the chain: what held the data once a timer held the ACK
/// (`delay` beyond the path's): Nagle (`nagle-delayed-ack`), or the sender waiting for
/// ACKs (`delayed-ack`).
pub fn held_by_nagle(
    ctx: &GapContext,
    ack: &PeerSegment,
    release: Release,
    delay: Nanos,
    event: &mut StallEvent,
) -> Verdict {
    event.holder = Some(ctx.sender);
    event.delayer = Some(ctx.sender.other());
    event.evidence.confidence = match release {
        Release::Proven { .. } => Confidence::High,
        Release::OnTime { .. } => Confidence::Medium,
        Release::NotReleased(_) => Confidence::None,
    };
    let basis = &mut event.evidence.basis;
    match nagle_could_hold(ctx, ack) {
        Ok(()) => {
            basis.push(Link::NagleCouldHold);
            event.class = StallClass::NagleDelayedAck;
            event.pattern = Some(nagle_pattern(ctx, ack));
        }
        Err(Link::SenderNotUsingNagle) => {
            // A sub-MSS segment from a sender that does not wait for ACKs: it had
            // nothing to send, whatever the ACK did.
            basis.push(Link::SenderNotUsingNagle);
            event.holder = None;
            event.delayer = None;
            event.ack_delay = None;
            event.evidence.confidence = Confidence::None;
            return Verdict::AppThinkTime;
        }
        Err(why) if pair_still_crossing(ctx, ack) => {
            basis.push(why);
            basis.push(Link::PairStillCrossing);
            return Verdict::Idle;
        }
        Err(why) if released_in_pieces(ctx) => {
            // Not Nagle, and not a queue that waited: the sender wrote it as it went.
            basis.push(why);
            basis.push(Link::ReleasedPiecesNotHeld);
            event.holder = None;
            event.delayer = None;
            event.ack_delay = None;
            event.evidence.confidence = Confidence::None;
            return Verdict::AppThinkTime;
        }
        Err(why) if delay < SHORTEST_TIMER => {
            // Not Nagle, and an ACK later by less than any per-connection timer: a
            // tick-driven stack's delayed ACK, or a queue on the path; the capture cannot
            // tell which.
            basis.push(why);
            basis.push(Link::AckDelayShorterThanTimers);
            event.holder = None;
            event.delayer = None;
            event.evidence.confidence = Confidence::None;
        }
        Err(why) => {
            basis.push(why);
            event.class = StallClass::DelayedAck;
        }
    }
    Verdict::Stall
}
