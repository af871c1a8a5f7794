//! Link 2: the receiver's window did not hold the data; and a window still closed when
//! the connection ends.

use std::ops::ControlFlow::{self, Break, Continue};

use super::basis::{Basis, Link};
use super::event::{Evidence, StallClass, StallEvent, Verdict};
use super::gap::{DetectConfig, GapContext, PeerSegment};
use crate::segment::Nanos;
use crate::side::Side;

/// Link 2: the receiver's window, not an ACK timer, kept the sender quiet. It was zero
/// during the gap; or the sender could not fit the released data under the right edge
/// before the ACK moved it; or the burst the ACK released stopped at the new right edge.
pub fn window_limited(ctx: &GapContext, ack: &PeerSegment) -> Option<Link> {
    if ctx.peer_zero_window {
        return Some(Link::ZeroWindow);
    }
    let sent_up_to = ack.snd_una_before + ack.outstanding_before;
    if let Some(window) = ack.window_before {
        let right_edge_before = ack.snd_una_before + u64::from(window);
        let moved = ack.window_after.is_some_and(|after| {
            ack.snd_una_before + ack.newly_acked + u64::from(after) > right_edge_before
        });
        if moved && sent_up_to + u64::from(ctx.segment_bytes) > right_edge_before {
            return Some(Link::WindowFullBeforeAck);
        }
    }
    if let Some(window) = ack.window_after {
        let right_edge_after = ack.snd_una_before + ack.newly_acked + u64::from(window);
        let burst_of_full_segments = ctx.segment_bytes >= ctx.sender_full_size
            && !ctx.burst_ends_with_small
            && ctx.burst_end > sent_up_to;
        if burst_of_full_segments
            && right_edge_after.saturating_sub(ctx.burst_end) < u64::from(ctx.sender_full_size)
        {
            return Some(Link::BurstFillsWindow);
        }
    }
    None
}

/// Link 2 as a step of the chain: the window was open, or it held the sender
/// (`receiver-window`).
pub fn window_open(
    ctx: &GapContext,
    ack: &PeerSegment,
    event: &mut StallEvent,
) -> ControlFlow<Verdict> {
    if let Some(why) = window_limited(ctx, ack) {
        event.evidence.basis.push(why);
        event.class = StallClass::ReceiverWindow;
        event.holder = Some(ctx.sender);
        event.delayer = Some(ctx.sender.other());
        return Break(Verdict::Stall);
    }
    event.evidence.basis.push(Link::WindowOpen);
    Continue(())
}

/// A window still closed when the connection ends: the sender it holds (`holder`) never
/// got to send again, so no data ends that gap; it is reported from the zero window
/// (advertised at `closed_since`, in packet `closed_packet`) to the sender's last segment
/// (its window probes).
pub fn still_closed_at_end(
    holder: Side,
    (closed_since, closed_packet): (Nanos, u64),
    last: &PeerSegment,
    config: &DetectConfig,
) -> Option<StallEvent> {
    if last.time - closed_since < config.min_gap {
        return None;
    }
    Some(StallEvent {
        class: StallClass::ReceiverWindow,
        start: closed_since,
        end: last.time,
        sender: holder,
        holder: Some(holder),
        delayer: Some(holder.other()),
        held_bytes: 0,
        ack_time: Some(closed_since),
        ack_delay: None,
        ack_round_trip: None,
        ack_of_first_data: false,
        idle: None,
        pattern: None,
        evidence: Evidence {
            data_before_packet: closed_packet,
            ack_packet: Some(closed_packet),
            data_after_packet: last.packet,
            released_last_packet: last.packet,
            window_before: Some(0),
            window_after: Some(0),
            basis: Basis::of(&[Link::ZeroWindow, Link::StillClosedAtEnd]),
            ..Default::default()
        },
    })
}
