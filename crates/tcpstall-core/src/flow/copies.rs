//! Copies of a packet the capture holds more than once: captured on several mirrored
//! links, or on two interfaces, each packet arrives 2 to 4 times, milliseconds apart,
//! and other packets between. A copy is the same datagram again, header for header:
//! sequence and acknowledgement numbers, length, flags, window, TSval and IP ID. What a
//! side sends again of its own (a retransmission, a duplicate ACK) is a new datagram.

use crate::segment::{Nanos, Segment};
use crate::side::{PerSide, Side};

/// How many of a side's last segments a copy is looked for among.
const RECENT: usize = 4;
/// Copies come within this of their original: sooner than any stack resends by its
/// timer (Linux's TCP_RTO_MIN is 200 ms; RFC 6298 2.4 asks for 1 s).
const COPY_WITHIN: Nanos = 100_000_000;
/// Without an IP ID, only data seen again straight after itself, within this, is taken
/// for a copy (the same packet captured on two interfaces, or on "any").
const SAME_PACKET_WITHIN: Nanos = 100_000;

/// One sent segment as a copy of it repeats it, folded into 64 bits: its sequence and
/// acknowledgement numbers, payload length, window, flags, TSval and IP ID.
fn fingerprint(segment: &Segment) -> u64 {
    let words = [
        u64::from(segment.seq.0) << 32 | u64::from(segment.ack.0),
        u64::from(segment.payload_len) << 32
            | u64::from(segment.window) << 16
            | u64::from(segment.flags.0) << 8,
        segment
            .options
            .timestamps
            .map_or(0, |(tsval, _)| u64::from(tsval) | 1 << 32),
        u64::from(segment.ip_id),
    ];
    // FNV-1a over the words: two different segments of one side fold to the same value
    // once in 2^64, and are compared only among its last few.
    words.iter().fold(0xcbf2_9ce4_8422_2325, |hash, word| {
        (hash ^ word).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One of a side's last segments; a time of 0 is no segment.
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    fingerprint: u64,
    time: Nanos,
}

/// Finds the copies of each side's segments in one connection: each side's last
/// [`RECENT`] segments (128 bytes for the two).
#[derive(Clone, Debug, Default)]
pub(super) struct CaptureCopies {
    recent: PerSide<[Recent; RECENT]>,
    next: PerSide<u8>,
}

impl CaptureCopies {
    /// Whether `segment`, sent by side `x`, is a copy of one it sent before; if not, it
    /// is remembered.
    pub(super) fn is_copy(&mut self, segment: &Segment, x: Side) -> bool {
        let sent = fingerprint(segment);
        let t = segment.time;
        let recent = &self.recent[x];
        let next = usize::from(self.next[x]);
        let copy = if segment.ip_id != 0 {
            // RFC 6864 4.1: a source numbers its datagrams, and a copy carries its
            // original's IP ID; a retransmission or another ACK, sent anew, a new one
            // (TSval too, RFC 7323 4.3, once its clock ticked).
            recent
                .iter()
                .any(|r| r.time != 0 && r.fingerprint == sent && (t - r.time).abs() < COPY_WITHIN)
        } else {
            // No IP ID to tell (IPv6, or a stack that leaves it 0): an ACK sent again
            // for each arriving segment looks the same, so only data is taken, straight
            // after itself.
            let latest = recent[(next + RECENT - 1) % RECENT];
            segment.payload_len > 0
                && latest.time != 0
                && latest.fingerprint == sent
                && (0..SAME_PACKET_WITHIN).contains(&(t - latest.time))
        };
        if !copy {
            self.recent[x][next] = Recent {
                fingerprint: sent,
                time: if t == 0 { 1 } else { t },
            };
            self.next[x] = ((next + 1) % RECENT) as u8;
        }
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{TcpFlags, TcpOptions};
    use crate::seq::SeqNumber;

    const MS: Nanos = 1_000_000;

    fn segment(time_ms: f64, seq: u32, ack: u32, len: u32, tsval: u32, ip_id: u16) -> Segment {
        Segment {
            time: (time_ms * MS as f64) as Nanos,
            src: "10.0.0.1:1000".parse().unwrap(),
            dst: "10.0.0.2:80".parse().unwrap(),
            seq: SeqNumber(seq),
            ack: SeqNumber(ack),
            flags: TcpFlags(TcpFlags::ACK),
            window: 1000,
            payload_len: len,
            ip_id,
            ttl: 64,
            options: TcpOptions {
                timestamps: Some((tsval, 0)),
                ..TcpOptions::default()
            },
            tunnel: 0,
        }
    }

    #[test]
    fn copies_from_mirrored_links_are_found_with_packets_between() {
        // A body four times within 4 ms, and the server's delayed ACK again 50 ms later,
        // after it had acknowledged newer data: each copy with its original's IP ID.
        let (client, server) = (Side::First, Side::Second);
        let mut copies = CaptureCopies::default();
        assert!(!copies.is_copy(&segment(72.9, 1, 199, 0, 7, 0xa342), server));
        assert!(copies.is_copy(&segment(72.92, 1, 199, 0, 7, 0xa342), server));
        assert!(!copies.is_copy(&segment(74.3, 199, 1, 1090, 5, 0x0dfe), client));
        assert!(copies.is_copy(&segment(75.3, 199, 1, 1090, 5, 0x0dfe), client));
        assert!(copies.is_copy(&segment(78.5, 199, 1, 1090, 5, 0x0dfe), client));
        assert!(!copies.is_copy(&segment(80.9, 1, 1289, 144, 8, 0xa343), server));
        assert!(copies.is_copy(&segment(122.9, 1, 199, 0, 7, 0xa342), server));
    }

    #[test]
    fn what_tcp_sends_again_is_no_copy() {
        let (client, server) = (Side::First, Side::Second);
        let mut copies = CaptureCopies::default();
        // Duplicate ACKs, each for arriving out-of-order data, and the fast retransmission
        // they prompt, all within a millisecond clock's tick (RFC 5681 3.2): each a new
        // datagram.
        assert!(!copies.is_copy(&segment(0.0, 1000, 1, 100, 5, 1), client));
        assert!(!copies.is_copy(&segment(0.1, 1100, 1, 100, 5, 2), client));
        assert!(!copies.is_copy(&segment(0.2, 1, 1000, 0, 9, 70), server));
        assert!(!copies.is_copy(&segment(0.3, 1200, 1, 100, 5, 3), client));
        assert!(!copies.is_copy(&segment(0.4, 1, 1000, 0, 9, 71), server));
        assert!(!copies.is_copy(&segment(0.5, 1, 1000, 0, 9, 72), server));
        assert!(!copies.is_copy(&segment(0.6, 1000, 1, 100, 5, 4), client));
        // Without IP IDs the same duplicate ACKs are no copies either.
        assert!(!copies.is_copy(&segment(0.7, 1, 1000, 0, 9, 0), server));
        assert!(!copies.is_copy(&segment(0.71, 1, 1000, 0, 9, 0), server));
        // The same datagram again after a timer's wait is a resend, not a copy.
        assert!(!copies.is_copy(&segment(300.0, 1000, 1, 100, 5, 4), client));
    }

    #[test]
    fn without_an_ip_id_data_straight_after_itself_is_a_copy() {
        let client = Side::First;
        let mut copies = CaptureCopies::default();
        assert!(!copies.is_copy(&segment(1.0, 1000, 1, 100, 5, 0), client));
        assert!(copies.is_copy(&segment(1.02, 1000, 1, 100, 5, 0), client));
        assert!(!copies.is_copy(&segment(1.04, 1100, 1, 100, 5, 0), client));
        // Another segment came between: no telling it from a resend.
        assert!(!copies.is_copy(&segment(1.06, 1000, 1, 100, 5, 0), client));
    }
}
