//! The vocabulary of evidence: each link of a verdict's chain that held, or the first
//! that did not, by name. A verdict's basis is a set of them, listed in chain order
//! (docs/json-schema.md explains each name).

use serde::{Serialize, Serializer};

/// One piece of evidence about a gap, in the order the chain examines them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    Retransmission,
    TsecrEchoesAck,
    TsecrPredatesAck,
    AckAfterData,
    ReleaseAfterUncapturedData,
    LeftBeforeAckCouldArrive,
    LeftOnAckArrival,
    LeftLongAfterAck,
    BareFin,
    ZeroWindow,
    WindowFullBeforeAck,
    BurstFillsWindow,
    StillClosedAtEnd,
    WindowOpen,
    AckAcknowledgedNothingNew,
    AckedDataNotCaptured,
    AckLaterThanAnyTimer,
    AckHeldByTimer,
    SenderOnOwnClock,
    FullSizedSegment,
    ReleasedAFullSegment,
    ReleasedPiecesNotHeld,
    SenderNotUsingNagle,
    SmallSegmentStillUnacknowledged,
    PairStillCrossing,
    AckDelayShorterThanTimers,
    NagleCouldHold,
}

impl Link {
    pub const ALL: [Link; 27] = [
        Link::Retransmission,
        Link::TsecrEchoesAck,
        Link::TsecrPredatesAck,
        Link::AckAfterData,
        Link::ReleaseAfterUncapturedData,
        Link::LeftBeforeAckCouldArrive,
        Link::LeftOnAckArrival,
        Link::LeftLongAfterAck,
        Link::BareFin,
        Link::ZeroWindow,
        Link::WindowFullBeforeAck,
        Link::BurstFillsWindow,
        Link::StillClosedAtEnd,
        Link::WindowOpen,
        Link::AckAcknowledgedNothingNew,
        Link::AckedDataNotCaptured,
        Link::AckLaterThanAnyTimer,
        Link::AckHeldByTimer,
        Link::SenderOnOwnClock,
        Link::FullSizedSegment,
        Link::ReleasedAFullSegment,
        Link::ReleasedPiecesNotHeld,
        Link::SenderNotUsingNagle,
        Link::SmallSegmentStillUnacknowledged,
        Link::PairStillCrossing,
        Link::AckDelayShorterThanTimers,
        Link::NagleCouldHold,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Link::Retransmission => "retransmission",
            Link::TsecrEchoesAck => "tsecr-echoes-ack",
            Link::TsecrPredatesAck => "tsecr-predates-ack",
            Link::AckAfterData => "ack-after-data",
            Link::ReleaseAfterUncapturedData => "release-after-uncaptured-data",
            Link::LeftBeforeAckCouldArrive => "left-before-ack-could-arrive",
            Link::LeftOnAckArrival => "left-on-ack-arrival",
            Link::LeftLongAfterAck => "left-long-after-ack",
            Link::BareFin => "bare-fin",
            Link::ZeroWindow => "zero-window",
            Link::WindowFullBeforeAck => "window-full-before-ack",
            Link::BurstFillsWindow => "burst-fills-window",
            Link::StillClosedAtEnd => "still-closed-at-end",
            Link::WindowOpen => "window-open",
            Link::AckAcknowledgedNothingNew => "ack-acknowledged-nothing-new",
            Link::AckedDataNotCaptured => "acked-data-not-captured",
            Link::AckLaterThanAnyTimer => "ack-later-than-any-timer",
            Link::AckHeldByTimer => "ack-held-by-timer",
            Link::SenderOnOwnClock => "sender-on-own-clock",
            Link::FullSizedSegment => "full-sized-segment",
            Link::ReleasedAFullSegment => "released-a-full-segment",
            Link::ReleasedPiecesNotHeld => "released-pieces-not-held",
            Link::SenderNotUsingNagle => "sender-not-using-nagle",
            Link::SmallSegmentStillUnacknowledged => "small-segment-still-unacknowledged",
            Link::PairStillCrossing => "pair-still-crossing",
            Link::AckDelayShorterThanTimers => "ack-delay-shorter-than-timers",
            Link::NagleCouldHold => "nagle-could-hold",
        }
    }
}

/// The links a verdict rests on: a set of [`Link`]s, kept in one word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Basis(u32);

impl Basis {
    pub fn of(links: &[Link]) -> Basis {
        let mut basis = Basis::default();
        for &link in links {
            basis.push(link);
        }
        basis
    }

    pub fn push(&mut self, link: Link) {
        self.0 |= 1 << link as u32;
    }

    pub fn contains(self, link: Link) -> bool {
        self.0 & (1 << link as u32) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The links, in chain order.
    pub fn links(self) -> impl Iterator<Item = Link> {
        Link::ALL.into_iter().filter(move |l| self.contains(*l))
    }

    pub fn names(self) -> Vec<&'static str> {
        self.links().map(Link::name).collect()
    }
}

impl Serialize for Basis {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.links().map(Link::name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_fits_in_the_word_and_names_come_back_in_chain_order() {
        assert!(Link::ALL.len() <= 32);
        let basis = Basis::of(&[Link::AckHeldByTimer, Link::TsecrEchoesAck]);
        assert_eq!(basis.names(), ["tsecr-echoes-ack", "ack-held-by-timer"]);
        assert!(!basis.contains(Link::NagleCouldHold));
        for (i, link) in Link::ALL.into_iter().enumerate() {
            assert_eq!(link as usize, i);
        }
    }
}
