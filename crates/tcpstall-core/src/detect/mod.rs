//! Naming the cause of a gap in a connection's data.
//!
//! A gap is a pause between two data-bearing segments of a connection, longer than the
//! configured threshold, or, where both ends held data at once, between one side's data
//! and its next that answers nothing the other side sent since. The segment that ends it
//! was sent by one side, X; the other side is Y. What X was waiting for decides the
//! class (docs/architecture.md, "The signature in a capture"):
//!
//! - X retransmitted: `retransmission-timeout`.
//! - X sent as soon as a pure ACK from Y reached it, and a timer held that ACK:
//!   `nagle-delayed-ack` when Nagle could have held what X sent (a sub-MSS segment, a
//!   sender seen applying Nagle), or `delayed-ack` when something else held it (the
//!   congestion window, or the sender's own ACK clock).
//! - Y's window was closed or too small, and the ACK that released X opened it:
//!   `receiver-window`.
//! - X sent with nothing from Y to wait for, or on its own clock: `app-think-time`.
//! - X sent right after an ACK, but the capture cannot show what held it: `unexplained`.
//!
//! Every link of a stall's chain must hold in the capture alone, and has a file of its
//! own; the links that held are named in [`Evidence::basis`], the first that failed too.
//! [`classify_gap`] runs them in order. The modules here import nothing above them.

pub mod ack_timer;
pub mod basis;
pub mod event;
pub mod gap;
pub mod idle;
pub mod nagle;
pub mod release;
pub mod window;

use std::ops::ControlFlow::{self, Break, Continue};

pub use event::{Confidence, Evidence, Pattern, StallClass, StallEvent, Verdict};
pub use gap::{DetectConfig, GapContext, PeerSegment, SenderClock, sender_clock};

/// Names the cause of one gap, or returns `None` when the gap is only the path's round
/// trip (no delay beyond it reaches the threshold).
pub fn classify_gap(ctx: &GapContext, config: &DetectConfig) -> Option<StallEvent> {
    // Seen near the receiver, the ACK the data answered may have left before the gap, or
    // before the other side's last ACK in it.
    let answering = release::answered_instead(ctx)
        .or_else(|| release::released_by_earlier_ack(ctx))
        .map(|ack| ctx.answering(ack));
    let ctx = answering.as_ref().unwrap_or(ctx);
    let mut event = StallEvent::opened_by(ctx);
    let (Break(verdict) | Continue(verdict)) = chain(ctx, config, &mut event);
    match verdict {
        Verdict::Stall => Some(event),
        Verdict::NoStall => None,
        Verdict::Idle => idle::idle_sender(ctx, config, event),
        Verdict::AppThinkTime => idle::app_think_time(ctx, config, event),
    }
}

/// The chain, one step a link: each step records in `event` what it found and either
/// hands the gap on or ends the chain with a verdict.
fn chain(
    ctx: &GapContext,
    config: &DetectConfig,
    event: &mut StallEvent,
) -> ControlFlow<Verdict, Verdict> {
    // The sender's own retransmission timer released the data.
    release::retransmitted(ctx, event)?;
    // A narrow link still delivering the sender's burst.
    release::link_busy(ctx)?;
    // No segment of the peer inside the gap: nothing to wait for.
    let Some(ack) = &ctx.last_from_peer else {
        return Break(Verdict::Idle);
    };
    release::record_ack(ctx, ack, event);
    // Link 1: the ACK released the data.
    let release = release::released_by_ack(ctx, ack, event)?;
    // Link 2: not the window.
    window::window_open(ctx, ack, event)?;
    // Link 3: a timer held the ACK.
    let delay = ack_timer::held_by_timer(ctx, ack, config, event)?;
    // Not the sender's own clock.
    idle::not_on_own_clock(ctx, release, event)?;
    // Link 4: what held the data: Nagle, or the sender waiting for ACKs.
    Continue(nagle::held_by_nagle(ctx, ack, release, delay, event))
}
