//! Ground truth: every hold, every delayed ACK, every stall, and the true class of every
//! gap the capture shows.
//!
//! A gap is what the detector examines: a pause of at least `min_gap` between
//! consecutive data-bearing segments of the connection (either direction, a FIN counts)
//! as recorded at the capture point, named by the record that ends it. Its true class
//! comes from what the simulator knows about that record: why it was sent when it was
//! (a retransmission timer, a persist probe, a hold and what released it, or the
//! application's write and what that write waited for).

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use tcpstall_core::detect::StallClass;
use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};
use tcpstall_core::side::{PerSide, Side};

use crate::capture::{CaptureRecords, Captured};
use crate::endpoint::{HoldReason, SegmentKind, WireSegment};

/// A true ACK delay this close to the threshold counts neither way: the detector measures
/// it through the path, the truth at the endpoint.
pub const BORDERLINE: Nanos = 3 * NANOS_PER_MILLI;

/// Ground truth: a hold that a timer-delayed ACK released.
#[derive(Clone, Debug, Serialize)]
pub struct TruthStall {
    /// `nagle-delayed-ack` (a Nagle hold) or `delayed-ack` (a window hold).
    pub class: &'static str,
    pub holder: &'static str,
    pub delayer: &'static str,
    /// When the held data was ready at the holder, and when it left.
    pub hold_start: f64,
    pub released: f64,
    /// When it left, as seen at the capture point.
    pub released_at_capture: f64,
    pub ack_delay: f64,
    pub bytes: u32,
    #[serde(skip)]
    pub released_nanos: Nanos,
    #[serde(skip)]
    pub released_at_capture_nanos: Nanos,
    #[serde(skip)]
    pub ack_delay_nanos: Nanos,
    #[serde(skip)]
    pub holder_side: Side,
    /// The released segment.
    #[serde(skip)]
    pub segment_id: u64,
}

/// Ground truth: every hold, released by whatever.
#[derive(Clone, Debug, Serialize)]
pub struct TruthHold {
    pub side: &'static str,
    pub reason: &'static str,
    pub start: f64,
    pub end: f64,
    pub bytes: u32,
    /// The delay of the timer-delayed ACK that released it.
    pub released_by_delayed_ack: Option<f64>,
}

/// Ground truth: every ACK a delayed-ACK timer sent.
#[derive(Clone, Debug, Serialize)]
pub struct TruthDelayedAck {
    pub side: &'static str,
    /// Data arrived, and the timer's ACK left.
    pub data_arrived: f64,
    pub sent: f64,
    pub delay: f64,
}

/// What a segment was, kept for every segment sent (index: id - 1).
#[derive(Clone, Copy, Debug)]
pub struct SentSegment {
    pub from: Side,
    pub kind: SegmentKind,
    pub ack_delay: Option<Nanos>,
    pub window: u64,
}

/// Why the application wrote when it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteCause {
    /// On its own clock: a period, or the first request.
    OwnClock,
    /// In answer to data from its peer that arrived at this time (the write's lateness
    /// beyond that is the application's: think time, a late read).
    Reply { arrived: Nanos },
}

/// One application write (or close), by the end of its sequence space.
#[derive(Clone, Copy, Debug)]
pub struct WriteRecord {
    pub end: u64,
    pub time: Nanos,
    pub cause: WriteCause,
}

/// The true class of a gap: one of the detector's classes, or no gap at all (path time
/// only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    Class(StallClass),
    NoGap,
}

/// Written as its name.
impl Serialize for Label {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl Label {
    /// The detector's classes and no gap.
    pub const COUNT: usize = StallClass::COUNT + 1;

    /// The classes in their order, then no gap: `Label::index` is a position here.
    pub const ALL: [Label; Self::COUNT] = {
        let mut all = [Label::NoGap; Self::COUNT];
        let mut i = 0;
        while i < StallClass::COUNT {
            all[i] = Label::Class(StallClass::ALL[i]);
            i += 1;
        }
        all
    };

    pub fn name(self) -> &'static str {
        match self {
            Label::Class(class) => class.name(),
            Label::NoGap => "no-gap",
        }
    }

    pub fn index(self) -> usize {
        match self {
            Label::Class(class) => class.index(),
            Label::NoGap => StallClass::COUNT,
        }
    }

    pub fn is_stall(self) -> bool {
        matches!(self, Label::Class(class) if class.is_tcp_stall())
    }

    fn bit(self) -> LabelSet {
        1 << self.index()
    }
}

/// A set of labels, as bits of `Label::index`: wide enough for every label, or the build
/// fails.
pub type LabelSet = u32;
const _: () = assert!(Label::COUNT <= LabelSet::BITS as usize);

/// What the simulator knows about the record that ends a gap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cause {
    Retransmitted {
        by_timer: bool,
    },
    WindowProbe,
    /// Held for `held_for` by `reason`; released by a segment of `released_by` kind (with
    /// its ACK delay), if a segment released it.
    Held {
        reason: HoldReason,
        held_for: Nanos,
        released_by: Option<(SegmentKind, Option<Nanos>, u64)>,
        write: Option<(WriteCause, Nanos)>,
    },
    /// Sent when written; `write` is why and when the application wrote.
    Written {
        write: Option<(WriteCause, Nanos)>,
    },
}

/// The true class of one gap, with the answers that are also right.
#[derive(Clone, Debug, Serialize)]
pub struct TruthGap {
    /// The gap at the capture point: the data record before it, and the one ending it.
    #[serde(skip)]
    pub start: Nanos,
    #[serde(skip)]
    pub end: Nanos,
    pub start_s: f64,
    pub end_s: f64,
    /// Side (0 client, 1 server) whose record ends the gap, and its payload.
    pub sender: Side,
    pub bytes: u32,
    pub label: Label,
    /// Labels that are also right (the label itself included), as bits of `Label::index`.
    #[serde(skip)]
    pub acceptable: LabelSet,
    /// The ACK delay is this close to the threshold: a stall answer or the other is right.
    pub borderline: bool,
    /// The capture shows the evidence (no missed record inside the gap, the releasing
    /// ACK recorded).
    pub observable: bool,
    /// 1-based number of the record ending the gap in the capture.
    pub packet: u64,
    #[serde(skip)]
    pub cause: Cause,
}

impl TruthGap {
    pub fn accepts(&self, label: Label) -> bool {
        self.acceptable & label.bit() != 0
    }

    /// One line on what the simulator knows about this gap.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{} {} B at {:.6} s after {:.1} ms: ",
            if self.sender == Side::First {
                "client"
            } else {
                "server"
            },
            self.bytes,
            self.end as f64 / 1e9,
            (self.end - self.start) as f64 / 1e6
        );
        let write_text = |write: Option<(WriteCause, Nanos)>| match write {
            Some((WriteCause::OwnClock, at)) => {
                format!(
                    "written at {:.6} s on the application's own clock",
                    at as f64 / 1e9
                )
            }
            Some((WriteCause::Reply { arrived }, at)) => format!(
                "written {:.1} ms after the peer's data arrived",
                (at - arrived) as f64 / 1e6
            ),
            None => "written by the application".into(),
        };
        match self.cause {
            Cause::Retransmitted { by_timer } => {
                out.push_str(if by_timer {
                    "retransmitted by the RTO"
                } else {
                    "fast retransmission"
                });
            }
            Cause::WindowProbe => out.push_str("a persist-timer window probe"),
            Cause::Held {
                reason,
                held_for,
                released_by,
                write,
            } => {
                let _ = write!(
                    out,
                    "{}, held {:.1} ms by {}",
                    write_text(write),
                    held_for as f64 / 1e6,
                    reason.name()
                );
                match released_by {
                    Some((kind, delay, window)) => {
                        let _ = write!(out, ", released by {}", kind_name(kind));
                        if let Some(d) = delay {
                            let _ = write!(out, " held {:.1} ms", d as f64 / 1e6);
                        }
                        let _ = write!(out, " (window {window})");
                    }
                    None => out.push_str(", released by a timer"),
                }
            }
            Cause::Written { write } => out.push_str(&write_text(write)),
        }
        let _ = write!(out, "; truth {}", self.label.name());
        if !self.observable {
            out.push_str(" (not observable)");
        }
        out
    }
}

fn kind_name(kind: SegmentKind) -> &'static str {
    match kind {
        SegmentKind::Data => "a data segment",
        SegmentKind::Retransmission { .. } => "a retransmission",
        SegmentKind::WindowProbe => "a window probe",
        SegmentKind::DelayedAck => "a timer-delayed ACK",
        SegmentKind::PromptAck => "a prompt ACK",
        SegmentKind::ReadAck => "an ACK sent on a read (window update)",
        SegmentKind::ProbeAnswer => "a probe answer",
        SegmentKind::Handshake => "a handshake segment",
    }
}

/// Everything the labelling reads.
pub struct TruthInputs<'a> {
    pub records: &'a CaptureRecords,
    pub sent: &'a [SentSegment],
    pub writes: &'a PerSide<Vec<WriteRecord>>,
    pub min_gap: Nanos,
    /// The least time a pure ACK of each side took from leaving it to the capture point
    /// (the path alone, nothing queued): [`TruthInputs::bare_transits`].
    pub bare_transit: PerSide<Nanos>,
}

fn data_bearing(c: &Captured) -> bool {
    (c.segment.len > 0 || c.segment.fin) && !c.segment.syn
}

/// Data that reaches the capture point this much later than a bare segment from the
/// same sender does arrives too late for the capture to show it was released on time.
const LATE_RELEASE: Nanos = 2_000_000;

impl TruthInputs<'_> {
    /// The least time a pure ACK of each side took from leaving it to the capture
    /// point: the path alone, with nothing queued.
    pub fn bare_transits(records: &CaptureRecords) -> PerSide<Nanos> {
        PerSide::from_fn(|side| {
            records
                .made
                .iter()
                .filter(|r| r.segment.from == side && r.segment.len == 0 && !r.segment.syn)
                .map(|r| r.time - r.segment.sent)
                .min()
                .unwrap_or(0)
        })
    }

    fn sent(&self, id: u64) -> Option<&SentSegment> {
        self.sent.get(id.checked_sub(1)? as usize)
    }

    /// The write the record's last byte (or its FIN) came from.
    fn write_of(&self, c: &Captured) -> Option<(WriteCause, Nanos)> {
        let s = &c.segment;
        let last = s.seq + u64::from(s.len) + u64::from(s.fin);
        let log = &self.writes[s.from];
        let i = log.partition_point(|w| w.end < last);
        log.get(i).map(|w| (w.cause, w.time))
    }

    /// The label of an application write: on its own clock, or later than the data it
    /// answered by at least the threshold, is the application's time; otherwise path time.
    fn write_label(&self, write: Option<(WriteCause, Nanos)>) -> (Label, LabelSet) {
        match write {
            Some((WriteCause::OwnClock, _)) | None => (Label::Class(StallClass::AppThinkTime), 0),
            Some((WriteCause::Reply { arrived }, at)) => {
                let late = at - arrived;
                let near = (late - self.min_gap).abs() <= BORDERLINE;
                let also = if near {
                    Label::Class(StallClass::AppThinkTime).bit() | Label::NoGap.bit()
                } else {
                    0
                };
                if late >= self.min_gap {
                    (Label::Class(StallClass::AppThinkTime), also)
                } else {
                    (Label::NoGap, also)
                }
            }
        }
    }

    /// The true label of a data record as the end of a gap, the other right answers, and
    /// whether its ACK delay is borderline.
    fn record_label(&self, c: &Captured) -> (Label, LabelSet, bool, Cause) {
        let s = &c.segment;
        let write = self.write_of(c);
        match s.kind {
            SegmentKind::Retransmission { by_timer } => {
                // A fast or partial-ACK retransmission left as its ACK arrived: the gap
                // before it is also path time, or the delay of that ACK's timer.
                let timer_delay = s
                    .released_by
                    .and_then(|id| self.sent(id))
                    .filter(|t| t.kind == SegmentKind::DelayedAck)
                    .and_then(|t| t.ack_delay);
                let also = match timer_delay {
                    _ if by_timer => 0,
                    // Held by loss recovery, not by Nagle or a window: either stall
                    // class names the timer that held the releasing ACK.
                    Some(delay) if delay >= self.min_gap => {
                        Label::Class(StallClass::DelayedAck).bit()
                            | Label::Class(StallClass::NagleDelayedAck).bit()
                    }
                    _ => Label::NoGap.bit(),
                };
                return (
                    Label::Class(StallClass::RetransmissionTimeout),
                    also,
                    false,
                    Cause::Retransmitted { by_timer },
                );
            }
            SegmentKind::WindowProbe => {
                return (
                    Label::Class(StallClass::ReceiverWindow),
                    0,
                    false,
                    Cause::WindowProbe,
                );
            }
            _ => {}
        }
        let Some((reason, held_for)) = s.held else {
            let queued_in_a_burst = write.is_some_and(|(_, at)| at + self.min_gap / 2 < s.sent);
            let (label, also) = if queued_in_a_burst {
                // Written long before, sent with the burst a hold released: what follows
                // the burst's first segment is path time (serialization, a queue).
                (Label::NoGap, 0)
            } else {
                self.write_label(write)
            };
            return (label, also, false, Cause::Written { write });
        };
        let trigger = s.released_by.and_then(|id| self.sent(id));
        let cause = Cause::Held {
            reason,
            held_for,
            released_by: trigger.map(|t| (t.kind, t.ack_delay, t.window)),
            write,
        };
        let (app, app_also) = self.write_label(write);
        let timer_delay = trigger
            .filter(|t| t.kind == SegmentKind::DelayedAck)
            .and_then(|t| t.ack_delay);
        let window_opened = trigger
            .is_some_and(|t| matches!(t.kind, SegmentKind::ReadAck | SegmentKind::ProbeAnswer));
        let short_hold = held_for < self.min_gap;
        // Released by a prompt ACK: the data waited for the path (and its queue), not the
        // application, unless the hold was short and the write itself came late. A write
        // a full send buffer blocked was made long before its data could go: never late.
        let (app, app_also) = if short_hold && reason != HoldReason::SendBuffer {
            (app, app_also)
        } else {
            (Label::NoGap, 0)
        };
        let stall = |class: Label, delay: Nanos| -> (Label, LabelSet, bool) {
            let borderline = (delay - self.min_gap).abs() <= BORDERLINE;
            let mut also = app_also;
            if borderline || short_hold {
                also |= app.bit();
            }
            if delay >= self.min_gap {
                // A delay this near the least gap is as well read as too short for any
                // stack's timer: the detector may leave it unexplained.
                let near = Label::Class(StallClass::Unexplained).bit() | class.bit();
                (class, also | if borderline { near } else { 0 }, borderline)
            } else if borderline {
                (app, also | class.bit(), true)
            } else {
                (app, app_also, false)
            }
        };
        let (label, also, borderline) = match reason {
            HoldReason::Nagle
            | HoldReason::CongestionWindow
            | HoldReason::ReceiveWindow
            | HoldReason::SendBuffer => {
                let class = if reason == HoldReason::Nagle {
                    Label::Class(StallClass::NagleDelayedAck)
                } else {
                    Label::Class(StallClass::DelayedAck)
                };
                match timer_delay {
                    Some(_)
                        if reason != HoldReason::Nagle
                            && self.pair_still_crossing(s.released_by) =>
                    {
                        (Label::NoGap, 0, false)
                    }
                    Some(delay) => stall(class, delay),
                    None if window_opened && !short_hold => {
                        // The ACK waited for the peer's application to read. From the
                        // capture it is an ACK the receiver did not send at once, which
                        // released what the sender held (Linux __tcp_cleanup_rbuf sends the
                        // pending ACK on that read): the stall class is accepted too.
                        (
                            Label::Class(StallClass::AppThinkTime),
                            Label::Class(StallClass::ReceiverWindow).bit() | class.bit(),
                            false,
                        )
                    }
                    None => (app, app_also, false),
                }
            }
            HoldReason::PeerWindow => {
                if short_hold && !window_opened {
                    (
                        app,
                        app_also | Label::Class(StallClass::ReceiverWindow).bit(),
                        false,
                    )
                } else {
                    let also = match timer_delay {
                        Some(delay) if delay >= self.min_gap => {
                            Label::Class(StallClass::DelayedAck).bit()
                        }
                        _ => 0,
                    };
                    (Label::Class(StallClass::ReceiverWindow), also, false)
                }
            }
            HoldReason::Cork | HoldReason::Autocork => {
                if short_hold {
                    (app, app_also, false)
                } else {
                    (Label::Class(StallClass::AppThinkTime), 0, false)
                }
            }
        };
        (label, also, borderline, cause)
    }

    /// Whether the releasing ACK fired on its timer while the segment sent right behind
    /// the newest one it acknowledged, in the same burst, was still crossing to the
    /// receiver (the ACK did not cover it). A receiver acknowledges two full segments at
    /// once (RFC 1122 4.2.3.2): the pair's ACK would have come no sooner, and the link
    /// spacing them, not the timer, held the sender.
    fn pair_still_crossing(&self, trigger: Option<u64>) -> bool {
        let made = &self.records.made;
        let Some(ack) = trigger.and_then(|id| made.iter().map(|r| &r.segment).find(|s| s.id == id))
        else {
            return false;
        };
        let data = made
            .iter()
            .map(|r| &r.segment)
            .filter(|s| s.from != ack.from && s.len > 0 && !s.retransmission);
        let held = data.clone().find(|s| s.seq + u64::from(s.len) == ack.ack);
        let next = data.clone().find(|s| s.seq == ack.ack);
        // Sent again, it was lost: the held segment was the last to arrive, and odd.
        let resent = |n: &WireSegment| {
            made.iter().any(|r| {
                let s = &r.segment;
                s.from == n.from
                    && s.retransmission
                    && s.seq <= n.seq
                    && n.seq < s.seq + u64::from(s.len)
            })
        };
        matches!((held, next), (Some(h), Some(n)) if h.burst == n.burst && !resent(n))
    }

    /// Whether the ACK that released `c` newly covered (beyond the ACKs the file holds)
    /// data of `c`'s sender that the capture point saw pass but the file does not hold.
    fn release_acked_uncaptured_data(&self, c: &Captured) -> bool {
        let made = &self.records.made;
        if self.records.kept.len() == made.len() {
            // The file holds every record: nothing was missed (and no scan per gap).
            return false;
        }
        let Some(at) = c
            .segment
            .released_by
            .and_then(|id| made.iter().position(|r| r.segment.id == id))
        else {
            return false;
        };
        let ack = &made[at].segment;
        let acked_before = made[..at]
            .iter()
            .filter(|r| r.segment.from == ack.from && r.segment.ack_flag)
            .filter(|r| self.records.kept_ids.contains(&r.segment.id))
            .map(|r| r.segment.ack)
            .max()
            .unwrap_or(0);
        made[..at].iter().any(|r| {
            let end = r.segment.seq + u64::from(r.segment.len);
            r.segment.from == c.segment.from
                && r.segment.len > 0
                && end > acked_before
                && end <= ack.ack
                && !self.records.kept_ids.contains(&r.segment.id)
        })
    }

    /// Whether the capture file holds an earlier record of this retransmission's data.
    fn original_recorded(&self, c: &Captured) -> bool {
        let s = &c.segment;
        self.records
            .kept
            .iter()
            .take_while(|k| k.time < c.time)
            .any(|k| {
                let o = &k.segment;
                o.from == s.from && o.len > 0 && o.seq <= s.seq && s.seq < o.seq + u64::from(o.len)
            })
    }

    /// Labels every gap of the capture file's records.
    pub fn gaps(&self) -> Vec<TruthGap> {
        let made = &self.records.made;
        let index_in_made: HashMap<u64, usize> = made
            .iter()
            .enumerate()
            .filter(|(_, c)| data_bearing(c))
            .map(|(i, c)| (c.segment.id, i))
            .collect();
        let mut gaps = Vec::new();
        let mut previous: Option<(Side, Nanos, u64)> = None;
        // Per side: its previous data record (time, id) and how far the other side's data
        // reached when it was captured; and how far each side's data reached.
        let mut own_previous: PerSide<Option<(Nanos, u64, u64)>> = PerSide::new(None, None);
        let mut sent_up_to = PerSide::new(0u64, 0u64);
        for (k, c) in self.records.kept.iter().enumerate() {
            if !data_bearing(c) {
                continue;
            }
            let side = c.segment.from;
            let other = side.other();
            if let Some((_, start, previous_id)) = previous
                && c.time - start >= self.min_gap
            {
                gaps.push(self.gap(c, k, start, previous_id, &index_in_made, false));
            } else if let Some((before_side, before, _)) = previous
                && let Some((own_start, own_id, other_then)) = own_previous[side]
                && before_side != side
                && c.time - before < self.min_gap
                && c.time - own_start >= self.min_gap
                && c.segment.ack_flag
                && c.segment.ack <= other_then
                && other_then < sent_up_to[other]
            {
                // Both ends held data at once: this record answers nothing the other
                // side sent since this side's previous data, and waited from there.
                gaps.push(self.gap(c, k, own_start, own_id, &index_in_made, true));
            }
            previous = Some((side, c.time, c.segment.id));
            own_previous[side] = Some((c.time, c.segment.id, sent_up_to[other]));
            let end = c.segment.seq + u64::from(c.segment.len);
            sent_up_to[side] = sent_up_to[side].max(end);
        }
        gaps
    }

    fn gap(
        &self,
        c: &Captured,
        k: usize,
        start: Nanos,
        previous_id: u64,
        index_in_made: &HashMap<u64, usize>,
        crossing: bool,
    ) -> TruthGap {
        let made = &self.records.made;
        let here = index_in_made.get(&c.segment.id).copied();
        let before = index_in_made.get(&previous_id).copied();
        // The data records the capture point made between the two the file holds.
        // Where both ends held data at once, the other side's records the file holds
        // between the two are no missed ones.
        let missed = |r: &Captured| {
            data_bearing(r)
                && (!crossing
                    || r.segment.from == c.segment.from
                    || !self.records.kept_ids.contains(&r.segment.id))
        };
        let missed_inside = match (before, here) {
            (Some(b), Some(h)) => made[b + 1..h].iter().any(missed),
            _ => true,
        };
        let (label, mut also, borderline, cause, mut observable) = if missed_inside {
            // The gap the file shows joins several: the longest of them names it.
            let (b, h) = (before.unwrap_or(0), here.unwrap_or(0));
            let mut longest: Option<(Nanos, &Captured)> = None;
            let mut last = made.get(b).map_or(start, |r| r.time);
            for r in made
                .get(b + 1..=h)
                .unwrap_or(&[])
                .iter()
                .filter(|r| data_bearing(r))
            {
                if longest.is_none_or(|(d, _)| r.time - last > d) {
                    longest = Some((r.time - last, r));
                }
                last = r.time;
            }
            let named = longest.map_or(c, |(_, r)| r);
            let (label, also, borderline, cause) = self.record_label(named);
            (label, also, borderline, cause, false)
        } else {
            let (label, also, borderline, cause) = self.record_label(c);
            (label, also, borderline, cause, true)
        };
        if let Cause::Held {
            released_by: Some(_),
            ..
        } = cause
            && let Some(id) = c.segment.released_by
            && !self.records.kept_ids.contains(&id)
        {
            observable = false;
        }
        if label.is_stall() && self.release_acked_uncaptured_data(c) {
            // The ACK that released it covered data the capture missed: when that data
            // passed, and so the ACK's delay, is not in the file.
            observable = false;
        }
        if label.is_stall()
            && c.segment.timestamps.is_none()
            && c.time - c.segment.sent - self.bare_transit[c.segment.from] > LATE_RELEASE
        {
            // The released data met a queue or a narrow link between its sender and the
            // capture point: it reaches the capture later than its sender's release, and
            // without timestamps nothing in the capture shows that it left on the ACK.
            observable = false;
        }
        if let Cause::Retransmitted { .. } = cause
            && !self.original_recorded(c)
        {
            // The capture never saw the original: nothing shows it is sent again.
            observable = false;
        }
        if !observable {
            also |= Label::Class(StallClass::Unexplained).bit();
        }
        TruthGap {
            start,
            end: c.time,
            start_s: start as f64 / 1e9,
            end_s: c.time as f64 / 1e9,
            sender: c.segment.from,
            bytes: c.segment.len,
            label,
            acceptable: also | label.bit(),
            borderline,
            observable,
            packet: k as u64 + 1,
            cause,
        }
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;

    /// The truth's labels are the detector's classes, in the same order, and no gap
    /// last; each is written in JSON as its name.
    #[test]
    fn labels_are_the_classes_and_no_gap() {
        for class in StallClass::ALL {
            let label = Label::Class(class);
            assert_eq!(label.index(), class.index());
            assert_eq!(label.name(), class.name());
            assert_eq!(label.is_stall(), class.is_tcp_stall());
            assert_eq!(Label::ALL[class.index()], label);
        }
        assert_eq!(Label::ALL[StallClass::COUNT], Label::NoGap);
        assert_eq!(Label::NoGap.index(), StallClass::COUNT);
        for (position, label) in Label::ALL.into_iter().enumerate() {
            assert_eq!(label.index(), position);
            let json = serde_json::to_string(&label).expect("a label is written");
            assert_eq!(json, format!("\"{}\"", label.name()));
        }
    }
}
