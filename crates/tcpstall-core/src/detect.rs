//! Naming the cause of a gap in a connection's data.
//!
//! A gap is a pause between two data-bearing segments of a connection, longer than the
//! configured threshold. The segment that ends it was sent by one side, X; the other
//! side is Y. What X was waiting for decides the class (DESIGN.md, "The signature in a
//! capture"):
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
//! Every link of a stall's chain must hold in the capture ([`crate::evidence`]); the
//! links that held are named in [`Evidence::basis`], the first that failed too.

use serde::Serialize;

use crate::basis::{Basis, Link};
use crate::evidence::{self, AckTiming, Release};
use crate::path::PathSide;
use crate::segment::{NANOS_PER_MILLI, Nanos};

/// The six names a gap can get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StallClass {
    NagleDelayedAck,
    DelayedAck,
    AppThinkTime,
    ReceiverWindow,
    RetransmissionTimeout,
    Unexplained,
}

impl StallClass {
    pub const ALL: [StallClass; 6] = [
        StallClass::NagleDelayedAck,
        StallClass::DelayedAck,
        StallClass::AppThinkTime,
        StallClass::ReceiverWindow,
        StallClass::RetransmissionTimeout,
        StallClass::Unexplained,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StallClass::NagleDelayedAck => "nagle-delayed-ack",
            StallClass::DelayedAck => "delayed-ack",
            StallClass::AppThinkTime => "app-think-time",
            StallClass::ReceiverWindow => "receiver-window",
            StallClass::RetransmissionTimeout => "retransmission-timeout",
            StallClass::Unexplained => "unexplained",
        }
    }

    /// Position in [`StallClass::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// How many gaps of this class one connection lists; beyond that they are only
    /// counted, so memory stays bounded on pathological captures.
    pub fn listing_limit(self) -> usize {
        if self.is_tcp_stall() { 100_000 } else { 1_000 }
    }

    pub fn from_name(name: &str) -> Option<StallClass> {
        StallClass::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Classes where TCP itself, not the application, held the data: what `--fail-on-stall`
    /// and the stall counts mean.
    pub fn is_tcp_stall(self) -> bool {
        matches!(self, StallClass::NagleDelayedAck | StallClass::DelayedAck)
    }
}

/// The application behaviour a Nagle stall points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "name")]
pub enum Pattern {
    /// A message written in two or more small pieces, then a read (seeds 002, 003, 004).
    WriteWriteRead,
    /// A block of full segments, an odd count, then a sub-MSS tail (seed 000).
    BulkOddTail { full_segments: u32 },
    /// Small writes behind unacknowledged data, neither of the two above.
    SmallWriteBehindUnacked,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::WriteWriteRead => "write-write-read",
            Pattern::BulkOddTail { .. } => "bulk-odd-tail",
            Pattern::SmallWriteBehindUnacked => "small-write-behind-unacked",
        }
    }
}

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

/// One classified gap, with the evidence behind its class.
#[derive(Clone, Debug, PartialEq)]
pub struct StallEvent {
    pub class: StallClass,
    /// The gap as seen at the capture point: the last data before it, the data ending it.
    pub start: Nanos,
    pub end: Nanos,
    /// Side (0 or 1 of the connection) whose data ended the gap.
    pub sender: u8,
    /// Side that had data and could not send it.
    pub holder: Option<u8>,
    /// Side whose delayed ACK (or closed window) held it.
    pub delayer: Option<u8>,
    /// Bytes released when the gap ended.
    pub held_bytes: u64,
    /// The releasing pure ACK, when there was one.
    pub ack_time: Option<Nanos>,
    /// How long the receiver sat on that ACK after the data reached it (path time removed).
    pub ack_delay: Option<Nanos>,
    /// For `app-think-time`: how long the sender was idle with nothing to wait for.
    pub idle: Option<Nanos>,
    pub pattern: Option<Pattern>,
    pub evidence: Evidence,
}

impl StallEvent {
    pub fn duration(&self) -> Nanos {
        self.end - self.start
    }

    /// Counts this gap, unlisted, in `unlisted`: (count, total duration) by class index.
    pub fn count_in(&self, unlisted: &mut [(u64, Nanos); 6]) {
        let entry = &mut unlisted[self.class.index()];
        entry.0 += 1;
        entry.1 += self.duration();
    }
}

/// How firmly the capture supports a stall.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confidence {
    /// Not a stall, or nothing to rate.
    #[default]
    None,
    /// Timing alone: the data left one round trip after the ACK.
    Medium,
    /// TSecr proves the order and the timing agrees.
    High,
}

impl Confidence {
    pub fn name(self) -> &'static str {
        match self {
            Confidence::None => "none",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// What was seen, kept so a person can check the verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// Packet numbers: the data before the gap, the releasing ACK, the data after it.
    pub data_before_packet: u64,
    pub ack_packet: Option<u64>,
    pub data_after_packet: u64,
    /// The last data segment of the burst that left with the one ending the gap (the same
    /// packet when that one left alone): where the release ends.
    pub released_last_packet: u64,
    /// Size of the segment that ended the gap, and the sender's full segment size (its
    /// MSS, or the smaller segment limit it was seen keeping to).
    pub released_segment_bytes: u32,
    pub sender_mss: u32,
    /// Unacknowledged bytes of the sender just before the releasing ACK.
    pub outstanding_bytes: u64,
    /// Whether a sub-MSS segment was among them (Minshall's variant holds only then).
    pub outstanding_small_segment: bool,
    /// Bytes the releasing ACK acknowledged.
    pub acked_bytes: u64,
    /// Time from the releasing ACK to the released data, as seen at the capture point.
    #[serde(serialize_with = "optional_seconds")]
    pub reaction: Option<Nanos>,
    /// The round trip from the capture point to the sender that the reaction is held to.
    #[serde(serialize_with = "optional_seconds")]
    pub sender_round_trip: Option<Nanos>,
    /// The released segment's TSecr echoes the releasing ACK's TSval: it provably left
    /// after that ACK reached the sender (RFC 7323). None when timestamps are off.
    pub tsecr_echoes_ack: Option<bool>,
    /// The receiver's window before the releasing ACK (bytes, scaled when known; a
    /// scaled window is at most 1 GiB).
    pub window_before: Option<u32>,
    pub window_after: Option<u32>,
    /// The gap ended with a retransmission.
    pub retransmission: bool,
    /// How firmly the capture supports a stall.
    pub confidence: Confidence,
    /// The links of the chain that held, in order, and the first that did not: the
    /// names are listed in docs/json-schema.md.
    pub basis: Basis,
}

fn optional_seconds<S: serde::Serializer>(
    value: &Option<Nanos>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(n) => serializer.serialize_some(&crate::segment::secs(*n)),
        None => serializer.serialize_none(),
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
    pub sender: usize,
    /// The MSS the sender may use, and its full segment size (the MSS, or a smaller
    /// segment limit it was seen keeping to).
    pub sender_mss: u32,
    pub sender_full_size: u32,
    pub segment_bytes: u32,
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
    pub path: [PathSide; 2],
    /// The step of the capture's clock (1 us for most captures, 1 ms for some).
    pub clock_step: Nanos,
    /// The round trip of a prompt ACK from the other side for the same flight of data:
    /// what the path, queue included, took then.
    pub prompt_round_trip: Option<Nanos>,
    /// The other side acknowledged the previous full segment of the same flight alone,
    /// sooner than any timer: it acknowledges every segment.
    pub peer_acks_every_segment: bool,
    /// The releasing ACK came at the pace the path delivers queued segments.
    pub peer_paced_by_delivery: bool,
    /// The other side's least round trip for a large data segment (1 KB and more).
    pub peer_large_data_rtt: Option<Nanos>,
    /// The other side's last segment before the one ending the gap, if it came inside it.
    pub last_from_peer: Option<PeerSegment>,
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
    pub sender_clock: evidence::SenderClock,
}

/// The other side's last segment inside a gap.
#[derive(Clone, Debug)]
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

/// Names the cause of one gap, or returns `None` when the gap is only the path's round
/// trip (no delay beyond it reaches the threshold).
pub fn classify_gap(ctx: &GapContext, config: &DetectConfig) -> Option<StallEvent> {
    let peer = 1 - ctx.sender;
    let mut event = StallEvent {
        class: StallClass::Unexplained,
        start: ctx.gap_start,
        end: ctx.gap_end,
        sender: ctx.sender as u8,
        holder: None,
        delayer: None,
        held_bytes: u64::from(ctx.segment_bytes) + ctx.burst_bytes,
        ack_time: None,
        ack_delay: None,
        idle: None,
        pattern: None,
        evidence: Evidence {
            data_before_packet: ctx.data_before_packet,
            data_after_packet: ctx.data_after_packet,
            released_last_packet: ctx.burst_last_packet,
            released_segment_bytes: ctx.segment_bytes,
            sender_mss: ctx.sender_full_size,
            retransmission: ctx.segment_is_retransmission,
            ..Evidence::default()
        },
    };

    if ctx.segment_is_retransmission {
        event.class = StallClass::RetransmissionTimeout;
        event.holder = Some(ctx.sender as u8);
        event.evidence.basis.push(Link::Retransmission);
        return Some(event);
    }
    let Some(ack) = &ctx.last_from_peer else {
        return idle_sender(ctx, config, event);
    };
    record_ack(ctx, ack, &mut event);
    let basis = &mut event.evidence.basis;

    // Link 1: the ACK released the data.
    if ctx.release_after_hole {
        // Sequence space before it was never captured: the release may have begun earlier.
        basis.push(Link::ReleaseAfterUncapturedData);
        return Some(event);
    }
    let release = evidence::release_by(ctx, ack);
    match release {
        Release::NotReleased(why) => {
            basis.push(why);
            return idle_sender(ctx, config, event);
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
        return idle_sender(ctx, config, event);
    }

    // Link 2: not the window.
    if let Some(why) = evidence::window_limited(ctx, ack) {
        basis.push(why);
        event.class = StallClass::ReceiverWindow;
        event.holder = Some(ctx.sender as u8);
        event.delayer = Some(peer as u8);
        return Some(event);
    }
    basis.push(Link::WindowOpen);

    // Link 3: a timer held the ACK.
    if !ack.ack_advanced {
        // The sender left right after a segment that acknowledged nothing new.
        basis.push(Link::AckAcknowledgedNothingNew);
        if ctx.gap_end - ctx.gap_start < config.min_gap + ctx.path[0].least + ctx.path[1].least {
            return None;
        }
        return Some(event);
    }
    let delay = match evidence::ack_timing(ctx, ack, config) {
        AckTiming::Held { delay } => delay,
        AckTiming::Prompt(_) => return None,
        AckTiming::BeyondTimers { delay } => {
            basis.push(Link::AckLaterThanAnyTimer);
            event.ack_delay = Some(delay);
            return Some(event);
        }
        AckTiming::Unknown => {
            basis.push(Link::AckedDataNotCaptured);
            return Some(event);
        }
    };
    basis.push(Link::AckHeldByTimer);
    event.ack_delay = Some(delay);
    // A steady sender whose release came later than the round trips the connection
    // measured (inside only the variation assumed before any is measured) was keeping
    // its own clock.
    let unmeasured = matches!(
        release,
        Release::Proven { unmeasured: true } | Release::OnTime { unmeasured: true }
    );
    if ctx.sender_clock == evidence::SenderClock::FollowsOwn
        || (unmeasured && ctx.sender_clock == evidence::SenderClock::Steady)
    {
        basis.push(Link::SenderOnOwnClock);
        event.ack_delay = None;
        return app_think_time(ctx, config, event);
    }

    // Link 4: what held the data: Nagle, or the sender waiting for ACKs.
    event.holder = Some(ctx.sender as u8);
    event.delayer = Some(peer as u8);
    event.evidence.confidence = match release {
        Release::Proven { .. } => Confidence::High,
        Release::OnTime { .. } => Confidence::Medium,
        Release::NotReleased(_) => Confidence::None,
    };
    let basis = &mut event.evidence.basis;
    match evidence::nagle_could_hold(ctx, ack) {
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
            return app_think_time(ctx, config, event);
        }
        Err(why) if delay < evidence::SHORTEST_TIMER => {
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
    Some(event)
}

/// Copies what the releasing candidate shows into the event.
fn record_ack(ctx: &GapContext, ack: &PeerSegment, event: &mut StallEvent) {
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
    e.tsecr_echoes_ack = match evidence::echo(ctx, ack) {
        evidence::Echo::EchoesAck => Some(true),
        evidence::Echo::PredatesAck => Some(false),
        evidence::Echo::Unknown => ctx.segment_tsecr.zip(ack.tsval).map(|_| false),
    };
}

fn nagle_pattern(ctx: &GapContext, ack: &PeerSegment) -> Pattern {
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

/// No ACK released the data: the sender went on by itself. Its idle time runs from the
/// last thing it could have been waiting for: its own data before the gap, or the peer's
/// data reaching it (one round trip after the capture point saw it, or its own ACK of
/// that data, whichever came later).
fn idle_sender(ctx: &GapContext, config: &DetectConfig, event: StallEvent) -> Option<StallEvent> {
    let mut event = event;
    event.holder = None;
    event.delayer = None;
    event.ack_delay = None;
    event.evidence.confidence = Confidence::None;
    app_think_time(ctx, config, event)
}

fn app_think_time(
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
            .filter(|acked| !evidence::may_be_timer(acked - reached_sender));
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
