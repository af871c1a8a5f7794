//! What a classified gap is: its class, the evidence behind it, and how firmly the
//! capture supports it.

use serde::Serialize;

use super::basis::Basis;
use super::gap::GapContext;
use crate::segment::Nanos;
use crate::side::Side;

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
    /// How many classes there are: every count and table per class has this length.
    pub const COUNT: usize = 6;

    pub const ALL: [StallClass; Self::COUNT] = [
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

/// One classified gap, with the evidence behind its class.
#[derive(Clone, Debug, PartialEq)]
pub struct StallEvent {
    pub class: StallClass,
    /// The gap as seen at the capture point: the last data before it, the data ending it.
    pub start: Nanos,
    pub end: Nanos,
    /// The side whose data ended the gap.
    pub sender: Side,
    /// Side that had data and could not send it.
    pub holder: Option<Side>,
    /// Side whose delayed ACK (or closed window) held it.
    pub delayer: Option<Side>,
    /// Bytes released when the gap ended.
    pub held_bytes: u64,
    /// The releasing pure ACK, when there was one.
    pub ack_time: Option<Nanos>,
    /// How long the receiver sat on that ACK after the data reached it (path time removed).
    pub ack_delay: Option<Nanos>,
    /// From the data the ACK acknowledged to the ACK, at the capture point: the hold and
    /// the way from the capture point to the delayer and back, which the diagnosis takes
    /// out with what the whole connection measured of that path.
    pub ack_round_trip: Option<Nanos>,
    /// That ACK was the delayer's first acknowledgment of the holder's data (the
    /// handshake captured): Linux sends it at once (see `ack_timer::first_data_acked`).
    pub ack_of_first_data: bool,
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
    pub fn count_in(&self, unlisted: &mut [(u64, Nanos); StallClass::COUNT]) {
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

impl StallEvent {
    /// The gap as the chain begins to examine it: `unexplained` until a link says more.
    pub fn opened_by(ctx: &GapContext) -> StallEvent {
        StallEvent {
            class: StallClass::Unexplained,
            start: ctx.gap_start,
            end: ctx.gap_end,
            sender: ctx.sender,
            holder: None,
            delayer: None,
            held_bytes: u64::from(ctx.segment_bytes) + ctx.burst_bytes,
            ack_time: None,
            ack_delay: None,
            ack_round_trip: None,
            ack_of_first_data: false,
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
        }
    }
}

/// Where the chain ends for a gap: each step either lets the next one examine the gap or
/// ends the chain with one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The event as the links left it.
    Stall,
    /// Only the path's round trip: no delay beyond it reaches the threshold.
    NoStall,
    /// Nothing held the sender; what it might have waited for is cleared from the event,
    /// and it is `app-think-time` when it was idle long enough.
    Idle,
    /// The sender was not held: `app-think-time` when it was idle long enough.
    AppThinkTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new class stops this match from compiling until it is handled here, and then the
    /// list must hold it: every class once, in the order of its index.
    #[test]
    fn every_class_is_listed_once_in_order() {
        for (position, class) in StallClass::ALL.into_iter().enumerate() {
            match class {
                StallClass::NagleDelayedAck
                | StallClass::DelayedAck
                | StallClass::AppThinkTime
                | StallClass::ReceiverWindow
                | StallClass::RetransmissionTimeout
                | StallClass::Unexplained => assert_eq!(class.index(), position),
            }
            assert_eq!(StallClass::from_name(class.name()), Some(class));
        }
    }
}
