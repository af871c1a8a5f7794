//! The links of the chain a stall verdict rests on, one small function each. Every link
//! is judged from the capture alone (DESIGN.md, "The signature in a capture"):
//!
//! 1. the ACK released the data: it left one capture-point-to-sender round trip after the
//!    ACK, within the spread the connection's own round trips show, and its TSecr does
//!    not predate the ACK's TSval where the sender's TS.Recent rule lets TSecr speak;
//! 2. the receiver's window did not hold it;
//! 3. a timer held the ACK: it covers less than two full segments, and came later than
//!    the path's own delay allows;
//! 4. Nagle could hold it: a sub-MSS segment, from a sender seen applying Nagle, released
//!    by an ACK that cleared what Nagle waits for.
//!
//! A link that fails names why, and the gap gets the class that the evidence supports.

use crate::basis::Link;
use crate::detect::{DetectConfig, GapContext, PeerSegment};
use crate::path::HOST_TURNAROUND;
use crate::segment::{NANOS_PER_MILLI, Nanos};

/// The shortest per-connection delayed-ACK timer of the known stacks (Linux's
/// TCP_DELACK_MIN, 40 ms), less a 4 ms jiffy of measurement slack.
pub const SHORTEST_TIMER: Nanos = 36 * NANOS_PER_MILLI;

/// The longest default delayed-ACK timer of the known stacks (Windows and AIX, 200 ms),
/// with a jiffy of slack.
const LONGEST_DEFAULT_TIMER: Nanos = 210 * NANOS_PER_MILLI;

/// Whether an ACK this late (beyond the round trip) may have been held by a known
/// stack's delayed-ACK timer: from the shortest per-connection timer to the longest
/// default. Sooner is prompt; later is the path (a queue, a slow link), not a timer.
pub fn may_be_timer(delay: Nanos) -> bool {
    (SHORTEST_TIMER..=LONGEST_DEFAULT_TIMER).contains(&delay)
}

/// RFC 1122 4.2.3.2: an ACK must not be delayed by 0.5 s or more.
const MAX_DELAYED_ACK: Nanos = 500 * NANOS_PER_MILLI;

/// How the data that ended a gap relates to the peer's last segment before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// TSecr echoes the ACK's TSval and it left within the round trip: proven.
    /// `unmeasured`: later than the round trips the connection showed, inside only the
    /// variation TCP assumes before it has measured one (RFC 6298 2.2).
    Proven { unmeasured: bool },
    /// It left within the round trip after the ACK: timing alone.
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
        (Some(ecr), Some(val)) if (val.wrapping_sub(ecr) as i32) > 0 => Echo::PredatesAck,
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
    let path = &ctx.path[ctx.sender];
    // Both times are stamped by the capture's clock; a reaction under the least round
    // trip by its measured spread, or by what a host's answer to an ACK and to data may
    // differ, is that, not a release before the ACK. (TSecr echoing the ACK proves the
    // order outright.)
    let timing = 2 * ctx.clock_step;
    if let Some(floor) = path.floor
        && echo != Echo::EchoesAck
        && reaction + timing.max(path.measured_spread) + HOST_TURNAROUND < floor
    {
        return Release::NotReleased(Link::LeftBeforeAckCouldArrive);
    }
    let reaction = reaction - path_delay_of_data(ctx);
    if reaction <= on_time_limit(ctx, path.spread) {
        let unmeasured = reaction > on_time_limit(ctx, path.measured_spread);
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

/// The latest a reaction counts as on time: the least round trip from the capture point
/// to the sender, the spread allowed to its round trips, the host's turnaround, and the
/// capture clock's step.
fn on_time_limit(ctx: &GapContext, spread: Nanos) -> Nanos {
    ctx.path[ctx.sender].least + spread + HOST_TURNAROUND + 2 * ctx.clock_step
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
    let peer = 1 - ctx.sender;
    let sample = ack.time - data_seen;
    let path = ctx.path[peer].least;
    // A large segment's round trip is judged against the least one seen for large data,
    // where that is no timer's (a narrow link serializes it).
    let large = ctx
        .peer_large_data_rtt
        .filter(|large| ack.acked_data_len >= 1024 && large - path < SHORTEST_TIMER)
        .unwrap_or(path);
    let reference = ctx
        .prompt_round_trip
        .map_or(path, |r| r.max(path))
        .max(large);
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
    let interval_spread = median_absolute_deviation(intervals);
    let reaction_spread = median_absolute_deviation(reactions).max(quartile_range(reactions) / 2);
    // The ACKs must wander for the comparison to say anything: where both are steady,
    // data that follows each ACK is what a held sender shows. (The range between the
    // quartiles catches ACKs that changed their timing part way, which the median
    // deviation alone would not.)
    let acks_wander = reaction_spread >= 2 * NANOS_PER_MILLI;
    if acks_wander && interval_spread <= NANOS_PER_MILLI && interval_spread * 4 <= reaction_spread {
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

fn median_absolute_deviation(values: &mut [Nanos]) -> Nanos {
    values.sort_unstable();
    let median = values[values.len() / 2];
    let mut deviations: Vec<Nanos> = values.iter().map(|v| (v - median).abs()).collect();
    deviations.sort_unstable();
    deviations[deviations.len() / 2]
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
