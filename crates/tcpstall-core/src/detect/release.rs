//! Link 1: what released the data that ended the gap. A retransmission released itself;
//! otherwise the data must have left one capture-point-to-sender round trip after the
//! peer's ACK, within the spread the connection's own round trips show, and its TSecr
//! must not predate the ACK's TSval where the sender's TS.Recent rule lets TSecr speak.

use std::ops::ControlFlow::{self, Break, Continue};

use super::basis::Link;
use super::event::{StallClass, StallEvent, Verdict};
use super::gap::{GapContext, PeerSegment};
use crate::path::HOST_TURNAROUND;
use crate::segment::Nanos;
use crate::seq::SeqNumber;

/// How the data that ended a gap relates to the peer's last segment before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// TSecr echoes the ACK's TSval and it left within the round trip: proven.
    /// `unmeasured`: later than the path-alone round trips the connection showed, inside
    /// only the variation TCP assumes before it has measured one (RFC 6298 2.2).
    Proven { unmeasured: bool },
    /// It left within the round trip after the ACK: timing alone. `unmeasured`: later
    /// than the path-alone round trips, within those of the replies.
    OnTime { unmeasured: bool },
    /// It did not wait for this ACK, and why.
    NotReleased(Link),
}

/// What the released segment's TSecr says about the ACK (RFC 7323: TSecr echoes the
/// newest TSval its sender had received).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Echo {
    /// It echoes the ACK's own TSval, which no earlier peer segment carried.
    EchoesAck,
    /// It echoes an older TSval: the sender had not received the ACK.
    PredatesAck,
    /// No timestamps, or nothing to conclude.
    Unknown,
}

pub fn echo(ctx: &GapContext, ack: &PeerSegment) -> Echo {
    match (ctx.segment_tsecr, ack.tsval) {
        (Some(ecr), Some(val)) if ecr == val && ack.tsval_is_new => Echo::EchoesAck,
        (Some(ecr), Some(val)) if SeqNumber(val).is_after(SeqNumber(ecr)) => Echo::PredatesAck,
        _ => Echo::Unknown,
    }
}

/// Whether an older TSecr on the released segment shows it was sent before `ack`
/// arrived. TSecr echoes TS.Recent, and stacks update it under different rules: RFC 1323
/// 3.4 only from a segment with `SEG.SEQ <= Last.ACK.sent < SEG.SEQ + SEG.LEN`, so never
/// from a pure ACK (4.4BSD-Lite2 `tcp_input`); RFC 7323 4.3 and Linux
/// (`tcp_replace_ts_recent`, `!after(seq, tp->rcv_wup)`, v6.6) only while the sender
/// owes no ACK for its peer's data. So only a sender seen echoing a TSval that a pure ACK
/// alone carried, and that owed no ACK when `ack` came, would have echoed it.
fn tsecr_speaks(ctx: &GapContext, ack: &PeerSegment) -> bool {
    ctx.sender_echoes_pure_acks && !ack.sender_owed_ack
}

/// The late ACK from before the gap that the data answered instead of the other side's
/// segment in the gap, if any. Where the data's TSecr names that ACK, the sender's
/// TS.Recent rule must show that the segment in the gap had not reached it; otherwise
/// timing decides: the data before the gap was on its way before the ACK could reach the
/// sender, the data after it left on the ACK's arrival (a sender held by its window or by
/// Nagle sends as the ACK is processed: RFC 5681 3.1, RFC 896), and the segment in the gap
/// came too late to have released it.
pub fn answered_instead(ctx: &GapContext) -> Option<&PeerSegment> {
    let late = ctx.late_ack_before_gap.as_deref()?;
    match &ctx.last_from_peer {
        Some(ack) if echo(ctx, late) == Echo::EchoesAck => {
            (echo(ctx, ack) == Echo::PredatesAck && tsecr_speaks(ctx, ack)).then_some(late)
        }
        in_gap => {
            // The sender's data before the gap was on its way before this ACK reached it
            // (else the ACK released that data, not the data after the gap)...
            let first_release = ctx.data_before_from_sender
                && sooner_than_a_round_trip(ctx, ctx.gap_start - late.time);
            // ...and the other side's segment in the gap came too late to release it.
            let in_gap_too_late = in_gap.as_ref().is_none_or(|ack| {
                release_by(ctx, ack) == Release::NotReleased(Link::LeftBeforeAckCouldArrive)
            });
            let on_time = matches!(
                release_by(ctx, late),
                Release::Proven { .. } | Release::OnTime { .. }
            );
            (first_release && in_gap_too_late && on_time).then_some(late)
        }
    }
}

/// The other side's earlier ACK in the gap that the data answered instead of its last
/// one, if any: the data came sooner than the least round trip after the last ACK (no
/// spread allowed), on time after the earlier one, and the earlier one left no sub-MSS
/// segment unacknowledged, so even a Nagle sender could send on it (Minshall's variant:
/// Linux tcp_nagle_check holds a partial segment only while tcp_minshall_check finds
/// snd_sml unacknowledged; a sender without Nagle, or held by its window, sends too).
pub fn released_by_earlier_ack(ctx: &GapContext) -> Option<&PeerSegment> {
    let earlier = ctx.earlier_ack_in_gap.as_deref()?;
    let last = ctx.last_from_peer.as_ref()?;
    let too_soon_after_last = echo(ctx, last) != Echo::EchoesAck
        && sooner_than_the_least_round_trip(ctx, ctx.gap_end - last.time);
    let cleared = earlier.ack_advanced && !earlier.small_outstanding_after;
    let on_time = matches!(
        release_by(ctx, earlier),
        Release::Proven { .. } | Release::OnTime { .. }
    );
    (too_soon_after_last && cleared && on_time).then_some(earlier)
}

/// Link 1: the data left as soon as `ack` could have reached its sender. Data seen
/// sooner than one round trip (capture point to sender and back, its measured minimum)
/// after the ACK was already on its way; later than the round trips the connection
/// showed to that sender, it was not waiting for it.
pub fn release_by(ctx: &GapContext, ack: &PeerSegment) -> Release {
    let reaction = ctx.gap_end - ack.time;
    if reaction < 0 {
        return Release::NotReleased(Link::AckAfterData);
    }
    let echo = echo(ctx, ack);
    if echo == Echo::PredatesAck && tsecr_speaks(ctx, ack) {
        return Release::NotReleased(Link::TsecrPredatesAck);
    }
    if echo == Echo::PredatesAck && sooner_than_the_least_round_trip(ctx, reaction) {
        // TSecr older than the ACK, and no path measured brings the ACK there that soon:
        // both say it left before the ACK arrived, whatever the path's spread excuses.
        return Release::NotReleased(Link::TsecrPredatesAck);
    }
    // The path-alone round trips came back bare; data released on the ACK's arrival
    // then crosses the narrow link too (a FIFO link sends a segment one serialization
    // after it, or the one before it, arrives), so it is seen that much later. Only
    // where the links before the capture point are the path's: nearer the receiver.
    let path = &ctx.path[ctx.sender];
    let near_receiver = ctx.path[ctx.sender.other()].least < path.least;
    let crossing = if near_receiver && path.floor.is_some_and(|floor| floor <= path.least) {
        serialization_of_release(ctx)
    } else {
        0
    };
    if echo != Echo::EchoesAck && sooner_than_a_round_trip(ctx, reaction - crossing) {
        return Release::NotReleased(Link::LeftBeforeAckCouldArrive);
    }
    let reaction = reaction - path_delay_of_data(ctx).max(serialization_of_release(ctx));
    if reaction <= on_time_limit(ctx, path.spread) {
        let unmeasured = reaction > on_time_limit(ctx, path.measured_spread);
        // RFC 6298's variation of half the first round trip is a sender's guess before it
        // has measured, not the path: without TSecr's word, only a reaction within what
        // the connection measured (its path-alone and its reply round trips) is timed.
        if echo != Echo::EchoesAck
            && reaction > on_time_limit(ctx, path.measured_spread.max(path.reply_spread))
        {
            return Release::NotReleased(Link::LeftLongAfterAck);
        }
        if echo == Echo::EchoesAck {
            Release::Proven { unmeasured }
        } else {
            Release::OnTime { unmeasured }
        }
    } else {
        // TSecr would prove the order, not the cause: a release driven by the ACK leaves
        // while the ACK is processed (Linux tcp_rcv_established -> tcp_ack ->
        // tcp_data_snd_check; BSD tcp_input -> tcp_output).
        Release::NotReleased(Link::LeftLongAfterAck)
    }
}

/// Whether data seen `reaction` after an ACK left before that ACK could reach its sender.
/// Both times are stamped by the capture's clock; a reaction under the least round trip
/// by its measured spread (the path-alone samples', or the replies' where those spread
/// further: a handshake, often the one path-alone sample, may have met a queue the later
/// path did not), or by what a host's answer to an ACK and to data may differ, is that,
/// not a release before the ACK.
pub fn sooner_than_a_round_trip(ctx: &GapContext, reaction: Nanos) -> bool {
    let path = &ctx.path[ctx.sender];
    let timing = 2 * ctx.clock_step;
    // Every round trip, a reply's too, is the path's least plus something (a segment
    // acknowledging data left after that data arrived, RFC 9293 3.4): a reply that came
    // sooner than the path-alone samples shows they met a queue, and lowers the floor.
    path.floor
        .map(|floor| floor.min(path.least))
        .is_some_and(|floor| {
            let spread = timing.max(path.measured_spread).max(path.reply_spread);
            // Saturating: times clamped to the ends of 1970 to 2106 make differences near
            // the whole range, and three of them overflow.
            reaction
                .saturating_add(spread)
                .saturating_add(HOST_TURNAROUND)
                < floor
        })
}

/// Whether data seen `reaction` after an ACK came sooner than the least round trip the
/// connection ever measured to its sender, with no spread allowed: only a host's turnaround
/// and the capture clock's step.
fn sooner_than_the_least_round_trip(ctx: &GapContext, reaction: Nanos) -> bool {
    let path = &ctx.path[ctx.sender];
    path.floor
        .map(|floor| floor.min(path.least))
        .is_some_and(|floor| reaction + HOST_TURNAROUND + 2 * ctx.clock_step < floor)
}

/// The gap is a narrow link delivering a burst, not a pause: the sender's previous
/// segment was full-sized and this one came no later than it takes to cross the links
/// before the capture point (segments queued one behind another leave a link one
/// serialization apart, RFC 5681 2's "ACK clock" run backwards): the sender waited for
/// nothing.
pub fn link_busy(ctx: &GapContext) -> ControlFlow<Verdict> {
    let after_full_segment =
        ctx.data_before_from_sender && ctx.sender_previous_bytes >= ctx.sender_full_size;
    let crossing = serialization_of_release(ctx);
    if after_full_segment
        && crossing > 0
        && ctx.gap_end - ctx.gap_start <= crossing + 2 * ctx.clock_step
    {
        return Break(Verdict::NoStall);
    }
    Continue(())
}

/// The latest a reaction counts as on time: the least round trip from the capture point
/// to the sender, the spread allowed to its round trips, the host's turnaround, and the
/// capture clock's steps: one for the reaction's own two stamps, and what the least round
/// trip may hide under its stamps ([`least_uncertainty`](crate::path::PathSide::least_uncertainty)).
fn on_time_limit(ctx: &GapContext, spread: Nanos) -> Nanos {
    let path = &ctx.path[ctx.sender];
    path.least
        .saturating_add(spread)
        .saturating_add(HOST_TURNAROUND + ctx.clock_step)
        .saturating_add(path.least_uncertainty(ctx.clock_step))
}

/// How much longer the data took from its sender to the capture point than its previous
/// data segment did, by the sender's own timestamp clock: its TSval says when it left,
/// the capture when it arrived. A segment queued behind others, or slowed by a narrow
/// link, arrives late although it left on time. The clock's rate is the one fitted over
/// the connection (RFC 7323 5.4 allows 1 ms to 1 s a tick), and a tick's worth is given
/// to the send time, since a TSval tells it only to the tick.
fn path_delay_of_data(ctx: &GapContext) -> Nanos {
    let (Some(hz), Some(now)) = (ctx.sender_tsval_hz, ctx.segment_tsval) else {
        return 0;
    };
    // Later than the sender's previous data segment (a queue it met), or than its last
    // pure ACK (the data's own serialization on a narrow link, which a bare segment has
    // not).
    let previous_data = ctx.sender_previous_tsval.zip(ctx.sender_previous_data);
    [previous_data, ctx.sender_previous_bare]
        .into_iter()
        .flatten()
        .map(|(before, before_time)| {
            let ticks = now.wrapping_sub(before);
            if ticks >= 1 << 31 {
                return 0;
            }
            let sent_apart_at_most = ((f64::from(ticks) + 1.0) * 1e9 / hz) as Nanos;
            let arrived_apart = ctx.gap_end - before_time;
            (arrived_apart - sent_apart_at_most).max(0)
        })
        .max()
        .unwrap_or(0)
}

/// How long the released segment took to cross the links before the capture point: a
/// segment is captured once it has crossed them, so data released on the ACK's arrival is
/// seen that much later on a narrow link. A full segment's time as the connection
/// measured it, in proportion to the segment's size.
fn serialization_of_release(ctx: &GapContext) -> Nanos {
    let full = ctx.sender_full_size.max(1);
    let bytes = ctx.segment_bytes.min(full);
    ctx.sender_full_segment_serialization * Nanos::from(bytes) / Nanos::from(full)
}

/// The gap ended with a retransmission: the sender's own timer released the data.
pub fn retransmitted(ctx: &GapContext, event: &mut StallEvent) -> ControlFlow<Verdict> {
    if ctx.segment_is_retransmission {
        event.class = StallClass::RetransmissionTimeout;
        event.holder = Some(ctx.sender);
        event.evidence.basis.push(Link::Retransmission);
        return Break(Verdict::Stall);
    }
    Continue(())
}

/// Copies what the releasing candidate shows into the event.
pub fn record_ack(ctx: &GapContext, ack: &PeerSegment, event: &mut StallEvent) {
    event.ack_time = Some(ack.time);
    let e = &mut event.evidence;
    e.ack_packet = Some(ack.packet);
    e.reaction = Some(ctx.gap_end - ack.time);
    e.sender_round_trip = Some(ctx.path[ctx.sender].least);
    e.outstanding_bytes = ack.outstanding_before;
    e.outstanding_small_segment = ack.outstanding_small_segment;
    e.acked_bytes = ack.newly_acked;
    e.window_before = ack.window_before;
    e.window_after = ack.window_after;
    e.tsecr_echoes_ack = match echo(ctx, ack) {
        Echo::EchoesAck => Some(true),
        Echo::PredatesAck => Some(false),
        Echo::Unknown => ctx.segment_tsecr.zip(ack.tsval).map(|_| false),
    };
}

/// Link 1 as a step of the chain: `ack` released the data, and it was data.
pub fn released_by_ack(
    ctx: &GapContext,
    ack: &PeerSegment,
    event: &mut StallEvent,
) -> ControlFlow<Verdict, Release> {
    let basis = &mut event.evidence.basis;
    if ctx.release_after_hole {
        // Sequence space before it was never captured: the release may have begun earlier.
        basis.push(Link::ReleaseAfterUncapturedData);
        return Break(Verdict::Stall);
    }
    let release = release_by(ctx, ack);
    match release {
        Release::NotReleased(why) => {
            basis.push(why);
            return Break(Verdict::Idle);
        }
        Release::Proven { .. } => {
            basis.push(Link::TsecrEchoesAck);
            basis.push(Link::LeftOnAckArrival);
        }
        Release::OnTime { .. } => basis.push(Link::LeftOnAckArrival),
    }
    if ctx.segment_bytes == 0 {
        // A bare FIN: the application closed; no data waited.
        basis.push(Link::BareFin);
        return Break(Verdict::Idle);
    }
    Continue(release)
}
