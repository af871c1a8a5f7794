//! What a sender's own segments show about how it sends: whether it applies Nagle, the
//! largest segment it sends when that is below the MSS, and when its window was closed.
//!
//! These are facts the capture proves by themselves, whatever the capture point: a
//! segment captured while an earlier one is still unacknowledged at the capture point was
//! sent before that ACK could have reached its sender.

use crate::segment::Nanos;

/// A segment limit below the MSS is only believed from segments this large: path MTUs
/// (VPNs, PPPoE, tunnels) cut the MSS by tens or hundreds of bytes, not to a few hundred.
const MIN_SEGMENT_LIMIT: u32 = 1024;

/// Two of the sender's data segments this close together are one burst.
const SAME_BURST: Nanos = 1_000_000;

/// Per direction: the evidence about its sender's rules.
#[derive(Clone, Debug, Default)]
pub struct SenderEvidence {
    /// When this side was seen, for the second time, sending a sub-MSS segment while an
    /// earlier sub-MSS segment of its own was unacknowledged: Nagle (RFC 896) and
    /// Minshall's variant both forbid that, so from then on this side is not applying
    /// Nagle. (Once may be a capture that missed the ACK in between.)
    pub nagle_off_since: Option<Nanos>,
    /// How many times it did so, and the packet of the first time.
    pub nagle_violations: u32,
    pub nagle_off_packet: u64,
    /// The largest payload this side sent as two back-to-back contiguous segments of the
    /// same size below the MSS: its real segment limit (a path MTU below the link's).
    pub segment_limit: u32,
    /// Its last data segment: time, end (sequence position) and payload.
    last_data: Option<(Nanos, u64, u32)>,
}

/// A data segment as the sender evidence sees it.
#[derive(Clone, Copy, Debug)]
pub struct SentData {
    pub time: Nanos,
    pub packet: u64,
    pub start: u64,
    pub end: u64,
    pub payload: u32,
    /// FIN or URG set: Linux sends these past Nagle (tcp_nagle_test), so they prove nothing.
    pub pushed_past_nagle: bool,
}

impl SenderEvidence {
    /// The size at and above which this side's segments are full-sized.
    pub fn full_size(&self, mss: u32) -> u32 {
        if self.segment_limit > 0 {
            mss.min(self.segment_limit)
        } else {
            mss
        }
    }

    /// When its last data segment was captured.
    pub fn last_data_time(&self) -> Option<Nanos> {
        self.last_data.map(|(time, _, _)| time)
    }

    /// When its last data segment was captured, if that one ended a message: smaller
    /// than the full size, so the sender had nothing more to send then.
    pub fn last_message_end(&self, mss: u32) -> Option<Nanos> {
        self.last_data
            .filter(|(_, _, payload)| *payload < self.full_size(mss))
            .map(|(time, _, _)| time)
    }

    /// Learns from a new (not retransmitted) data segment. `small_unacked` says whether a
    /// sub-MSS segment of this side was unacknowledged at the capture point when it was
    /// captured. Returns true when the segment limit changed (smaller segments in flight
    /// must then be judged again).
    pub fn observe(&mut self, data: SentData, mss: u32, small_unacked: bool) -> bool {
        let mut limit_changed = false;
        if let Some((time, end, payload)) = self.last_data
            && end == data.start
            && payload == data.payload
            && data.time - time <= SAME_BURST
            && (MIN_SEGMENT_LIMIT..mss).contains(&data.payload)
            && data.payload > self.segment_limit
        {
            self.segment_limit = data.payload;
            limit_changed = true;
        }
        let small = data.payload < self.full_size(mss);
        if small && small_unacked && !data.pushed_past_nagle {
            self.nagle_violations += 1;
            match self.nagle_violations {
                1 => self.nagle_off_packet = data.packet,
                // Once may be a capture that missed the ACK in between; twice is the
                // sender's own doing.
                2 => self.nagle_off_since = Some(data.time),
                _ => {}
            }
        }
        self.last_data = Some((data.time, data.end, data.payload));
        limit_changed
    }

    /// Whether this side was seen not applying Nagle (twice) at or before `time`.
    pub fn nagle_off_by(&self, time: Nanos) -> bool {
        self.nagle_off_since.is_some_and(|since| since <= time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(time: Nanos, start: u64, payload: u32) -> SentData {
        SentData {
            time,
            packet: 1,
            start,
            end: start + u64::from(payload),
            payload,
            pushed_past_nagle: false,
        }
    }

    #[test]
    fn a_small_segment_behind_an_unacknowledged_small_one_means_no_nagle() {
        let mut sender = SenderEvidence::default();
        sender.observe(data(0, 0, 7), 1460, false);
        assert!(!sender.nagle_off_by(10));
        sender.observe(data(5, 7, 67), 1460, true);
        // Once may be a missed ACK.
        assert!(!sender.nagle_off_by(5));
        sender.observe(data(20, 74, 7), 1460, false);
        sender.observe(data(25, 81, 67), 1460, true);
        assert!(sender.nagle_off_by(25));
        assert!(!sender.nagle_off_by(24));
    }

    #[test]
    fn fin_and_urgent_segments_prove_nothing() {
        let mut sender = SenderEvidence::default();
        let mut fin = data(5, 7, 67);
        fin.pushed_past_nagle = true;
        sender.observe(fin, 1460, true);
        assert_eq!(sender.nagle_off_since, None);
    }

    #[test]
    fn back_to_back_equal_segments_below_the_mss_are_the_segment_limit() {
        let mut sender = SenderEvidence::default();
        sender.observe(data(0, 0, 1348), 1448, false);
        assert_eq!(sender.full_size(1448), 1448);
        assert!(sender.observe(data(10, 1348, 1348), 1448, false));
        assert_eq!(sender.full_size(1448), 1348);
        // Small messages repeated are not a limit: SFTP's 656-byte writes stay small.
        let mut sftp = SenderEvidence::default();
        sftp.observe(data(0, 0, 656), 1460, false);
        sftp.observe(data(10, 656, 656), 1460, false);
        assert_eq!(sftp.full_size(1460), 1460);
    }
}
