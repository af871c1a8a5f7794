//! Naming the cause of a gap in a connection's data.
//!
//! A gap is a pause between two data-bearing segments of a connection, longer than the
//! configured threshold. The segment that ends it was sent by one side, X; the other
//! side is Y. What X was waiting for decides the class (DESIGN.md, "The signature in a
//! capture"):
//!
//! - X retransmitted: `retransmission-timeout`.
//! - X sent as soon as a pure ACK from Y reached it, and that ACK came one delayed-ACK
//!   timer after the data it acknowledged: `nagle-delayed-ack` when what X then sent is
//!   smaller than the MSS (only Nagle holds sub-MSS data behind unacknowledged data), or
//!   `delayed-ack` when it is full-sized (a window or congestion limit held it).
//! - Y's window was closed or too small, and the ACK that released X opened it:
//!   `receiver-window`.
//! - X sent with nothing from Y to wait for: `app-think-time`.
//! - X sent right after an ACK that explains nothing: `unexplained`.

use serde::Serialize;

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
    /// How late after an ACK reaches the sender its next data may leave and still count
    /// as "sent as soon as the ACK arrived", on top of the path estimate.
    pub reaction_slack: Nanos,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            min_gap: 10 * NANOS_PER_MILLI,
            reaction_slack: 2 * NANOS_PER_MILLI,
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
    pub sender: usize,
    /// Side that had data and could not send it.
    pub holder: Option<usize>,
    /// Side whose delayed ACK (or closed window) held it.
    pub delayer: Option<usize>,
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

/// What was seen, kept so a person can check the verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// Packet numbers: the data before the gap, the releasing ACK, the data after it.
    pub data_before_packet: u64,
    pub ack_packet: Option<u64>,
    pub data_after_packet: u64,
    /// Size of the segment that ended the gap, and the sender's MSS.
    pub released_segment_bytes: u32,
    pub sender_mss: u32,
    /// Unacknowledged bytes of the sender just before the releasing ACK.
    pub outstanding_bytes: u64,
    /// Whether a sub-MSS segment was among them (Minshall's variant holds only then).
    pub outstanding_small_segment: bool,
    /// Time from the releasing ACK to the released data, as seen at the capture point.
    #[serde(serialize_with = "optional_seconds")]
    pub reaction: Option<Nanos>,
    /// The released segment's TSecr echoes the releasing ACK's TSval: it provably left
    /// after that ACK reached the sender (RFC 7323). None when timestamps are off.
    pub tsecr_echoes_ack: Option<bool>,
    /// The receiver's window before the releasing ACK (bytes, scaled when known).
    pub window_before: Option<u64>,
    pub window_after: Option<u64>,
    /// The gap ended with a retransmission.
    pub retransmission: bool,
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
    /// The side whose segment ends the gap.
    pub sender: usize,
    pub sender_mss: u32,
    pub segment_bytes: u32,
    pub segment_is_retransmission: bool,
    pub segment_tsecr: Option<u32>,
    /// The data before the gap came from the sender itself (it was simply slow to go on).
    pub data_before_from_sender: bool,
    /// Round trip from the capture point to each side and back (index: side).
    pub path_rtt: [Nanos; 2],
    /// The other side's last segment before the one ending the gap, if it came inside it.
    pub last_from_peer: Option<PeerSegment>,
    /// The other side advertised a zero window during the gap.
    pub peer_zero_window: bool,
    /// Full-sized segments in the sender's current message so far.
    pub block_full_segments: u32,
}

/// The other side's last segment inside a gap.
#[derive(Clone, Debug)]
pub struct PeerSegment {
    pub packet: u64,
    pub time: Nanos,
    /// It acknowledged sender data not acknowledged before.
    pub ack_advanced: bool,
    pub outstanding_before: u64,
    pub outstanding_small_segment: bool,
    /// When the newest sender data it acknowledged was seen, and whether that was small.
    pub acked_data_time: Option<Nanos>,
    pub acked_data_small: bool,
    /// The acknowledged data was the first segment of the sender's message.
    pub acked_data_began_message: bool,
    pub tsval: Option<u32>,
    /// Its TSval is newer than any the peer sent before it.
    pub tsval_is_new: bool,
    pub window_before: Option<u64>,
    pub window_after: Option<u64>,
}

/// Names the cause of one gap, or returns `None` when the gap is only the path's round
/// trip (no delay beyond it reaches the threshold).
pub fn classify_gap(ctx: &GapContext, config: &DetectConfig) -> Option<StallEvent> {
    let gap = ctx.gap_end - ctx.gap_start;
    let peer = 1 - ctx.sender;
    let mut event = StallEvent {
        class: StallClass::Unexplained,
        start: ctx.gap_start,
        end: ctx.gap_end,
        sender: ctx.sender,
        holder: None,
        delayer: None,
        held_bytes: u64::from(ctx.segment_bytes),
        ack_time: None,
        ack_delay: None,
        idle: None,
        pattern: None,
        evidence: Evidence {
            data_before_packet: ctx.data_before_packet,
            data_after_packet: ctx.data_after_packet,
            released_segment_bytes: ctx.segment_bytes,
            sender_mss: ctx.sender_mss,
            retransmission: ctx.segment_is_retransmission,
            ..Evidence::default()
        },
    };

    if ctx.segment_is_retransmission {
        event.class = StallClass::RetransmissionTimeout;
        event.holder = Some(ctx.sender);
        return Some(event);
    }

    let released = ctx
        .last_from_peer
        .as_ref()
        .filter(|ack| sent_on_arrival(ctx, ack, config));
    let Some(ack) = released else {
        return app_think_time(ctx, config, event);
    };
    event.ack_time = Some(ack.time);
    event.evidence.ack_packet = Some(ack.packet);
    event.evidence.reaction = Some(ctx.gap_end - ack.time);
    event.evidence.outstanding_bytes = ack.outstanding_before;
    event.evidence.outstanding_small_segment = ack.outstanding_small_segment;
    event.evidence.window_before = ack.window_before;
    event.evidence.window_after = ack.window_after;
    event.evidence.tsecr_echoes_ack = match (ctx.segment_tsecr, ack.tsval) {
        (Some(ecr), Some(val)) => Some(ecr == val && ack.tsval_is_new),
        _ => None,
    };

    if window_held_sender(ctx, ack) {
        event.class = StallClass::ReceiverWindow;
        event.holder = Some(ctx.sender);
        event.delayer = Some(peer);
        return Some(event);
    }

    if !ack.ack_advanced {
        // The sender left right after an ACK that acknowledged nothing new.
        if gap < config.min_gap + ctx.path_rtt[0] + ctx.path_rtt[1] {
            return None;
        }
        return Some(event);
    }

    let ack_delay = ack
        .acked_data_time
        .map(|data_seen| (ack.time - data_seen - ctx.path_rtt[peer]).max(0))
        .unwrap_or(0);
    if ack_delay < config.min_gap {
        // The ACK came promptly: the sender waited one round trip, which is the path's.
        return None;
    }
    event.ack_delay = Some(ack_delay);
    event.holder = Some(ctx.sender);
    event.delayer = Some(peer);
    if nagle_could_hold(ctx) {
        event.class = StallClass::NagleDelayedAck;
        event.pattern = Some(nagle_pattern(ctx, ack));
    } else {
        event.class = StallClass::DelayedAck;
    }
    Some(event)
}

/// The sender's data left as soon as `ack` could have reached it: one round trip between
/// capture point and sender after the ACK was seen, within the slack. With timestamps, the
/// echoed TSval proves the order whatever the capture point.
fn sent_on_arrival(ctx: &GapContext, ack: &PeerSegment, config: &DetectConfig) -> bool {
    let reaction = ctx.gap_end - ack.time;
    if reaction < 0 {
        // Stamped after the data (timestamps out of order): it released nothing.
        return false;
    }
    let path = ctx.path_rtt[ctx.sender];
    let slack = config.reaction_slack + path / 4;
    let tsecr_proves_after = matches!((ctx.segment_tsecr, ack.tsval), (Some(ecr), Some(val)) if ecr == val && ack.tsval_is_new);
    let not_too_early = reaction + slack >= path || tsecr_proves_after;
    not_too_early && reaction <= path + slack
}

/// The receiver's window, not an ACK timer, kept the sender quiet: it was advertised as
/// zero during the gap, or was smaller than what the sender had in flight plus the
/// released segment, and the releasing ACK opened it.
fn window_held_sender(ctx: &GapContext, ack: &PeerSegment) -> bool {
    let opened = matches!((ack.window_before, ack.window_after), (Some(b), Some(a)) if a > b);
    if ctx.peer_zero_window {
        return true;
    }
    let Some(window_before) = ack.window_before else {
        return false;
    };
    opened && ack.outstanding_before + u64::from(ctx.segment_bytes) > window_before
}

/// Nagle (RFC 896, RFC 1122 4.2.3.4) holds only a segment smaller than the MSS while
/// data is unacknowledged; a full segment held back needs another limit.
fn nagle_could_hold(ctx: &GapContext) -> bool {
    ctx.segment_bytes < ctx.sender_mss
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

/// No ACK released the data: the sender was idle. Its idle time is the gap less the path
/// time from the last thing it could have been waiting for.
fn app_think_time(
    ctx: &GapContext,
    config: &DetectConfig,
    mut event: StallEvent,
) -> Option<StallEvent> {
    let idle = match &ctx.last_from_peer {
        Some(peer_segment) => ctx.gap_end - peer_segment.time - ctx.path_rtt[ctx.sender],
        None if ctx.data_before_from_sender => ctx.gap_end - ctx.gap_start,
        None => ctx.gap_end - ctx.gap_start - ctx.path_rtt[ctx.sender],
    };
    if idle < config.min_gap {
        return None;
    }
    event.class = StallClass::AppThinkTime;
    event.idle = Some(idle);
    Some(event)
}
