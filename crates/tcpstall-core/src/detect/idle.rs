//! The sender was not held: it went on by itself (`app-think-time`), when no ACK released
//! the data or when it keeps its own clock.

use std::ops::ControlFlow::{self, Break, Continue};

use super::ack_timer::may_be_timer;
use super::basis::Link;
use super::event::{Confidence, StallClass, StallEvent, Verdict};
use super::gap::{DetectConfig, GapContext, SenderClock};
use super::release::Release;

/// No ACK released the data: the sender went on by itself. Its idle time runs from the
/// last thing it could have been waiting for: its own data before the gap, or the peer's
/// data reaching it (one round trip after the capture point saw it, or its own ACK of
/// that data, whichever came later).
pub fn idle_sender(
    ctx: &GapContext,
    config: &DetectConfig,
    event: StallEvent,
) -> Option<StallEvent> {
    let mut event = event;
    event.holder = None;
    event.delayer = None;
    event.ack_delay = None;
    event.evidence.confidence = Confidence::None;
    app_think_time(ctx, config, event)
}

pub fn app_think_time(
    ctx: &GapContext,
    config: &DetectConfig,
    mut event: StallEvent,
) -> Option<StallEvent> {
    let waited_from = if ctx.data_before_from_sender {
        ctx.gap_start
    } else {
        let reached_sender = ctx.gap_start + ctx.path[ctx.sender].least;
        // Its own ACK of that data says when the data had reached it, unless a delayed-ACK
        // timer may have held that ACK too (then it says nothing).
        let own_ack = ctx
            .sender_acked_peer_at
            .filter(|acked| !may_be_timer(acked - reached_sender));
        own_ack.map_or(reached_sender, |acked| acked.max(reached_sender))
    };
    let idle = ctx.gap_end - waited_from;
    if idle < config.min_gap {
        return None;
    }
    event.class = StallClass::AppThinkTime;
    event.idle = Some(idle);
    Some(event)
}

/// A step of the chain once a timer held the ACK: a steady sender whose release came
/// later than the round trips the connection measured (inside only the variation assumed
/// before any is measured) was keeping its own clock, and so was one seen to follow it.
pub fn not_on_own_clock(
    ctx: &GapContext,
    release: Release,
    event: &mut StallEvent,
) -> ControlFlow<Verdict> {
    let unmeasured = matches!(
        release,
        Release::Proven { unmeasured: true } | Release::OnTime { unmeasured: true }
    );
    if ctx.sender_clock == SenderClock::FollowsOwn
        || (unmeasured && ctx.sender_clock == SenderClock::Steady)
    {
        event.evidence.basis.push(Link::SenderOnOwnClock);
        event.ack_delay = None;
        return Break(Verdict::AppThinkTime);
    }
    Continue(())
}
