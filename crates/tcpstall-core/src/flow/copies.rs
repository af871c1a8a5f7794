//! Copies of a packet the capture holds more than once: captured on several mirrored
//! links, or on two interfaces, each packet arrives 2 to 4 times, milliseconds apart,
//! and other packets between. A copy is what its side sent before, header for header,
//! its TSval too, which no rule of TCP makes that side send again so soon.

use crate::segment::{Nanos, Segment};
use crate::side::{PerSide, Side};

/// How many of a side's last segments a copy is looked for among.
const RECENT: usize = 4;
/// Copies come within this of their original: sooner than any stack resends by its
/// timer (Linux's TCP_RTO_MIN is 200 ms; RFC 6298 2.4 asks for 1 s; a SYN's first
/// retransmission waits 1 s, RFC 6298 2.1).
const COPY_WITHIN: Nanos = 100_000_000;

/// One sent segment as a copy of it would repeat it, folded into 64 bits: its sequence
/// and acknowledgement numbers, payload length, window and flags, and TSval.
fn fingerprint(segment: &Segment) -> u64 {
    let window_and_flags = u64::from(segment.window) | u64::from(segment.flags.0) << 16;
    let tsval = segment
        .options
        .timestamps
        .map_or(0, |(tsval, _)| u64::from(tsval) | 1 << 32);
    let words = [
        u64::from(segment.seq.0) << 32 | u64::from(segment.ack.0),
        u64::from(segment.payload_len) << 32 | window_and_flags,
        tsval,
    ];
    // FNV-1a over the three words: two different segments of one side fold to the same
    // value once in 2^64, and are compared only among its last few.
    words.iter().fold(0xcbf2_9ce4_8422_2325, |hash, word| {
        (hash ^ word).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A side's last segments, with what its peer had sent by then that could make the side
/// send the same again.
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    fingerprint: u64,
    time: Nanos,
    /// The peer's data segments, and all its segments (any may be a duplicate ACK or
    /// carry SACK blocks), counted when this one was sent.
    peer_data: u32,
    peer_duplicate_acks: u32,
}

/// Per side: its last segments, and counts of what it sent that was no copy.
#[derive(Clone, Debug, Default)]
struct SideCopies {
    recent: [Recent; RECENT],
    next: u8,
    data: u32,
    duplicate_acks: u32,
    highest_ack: Option<u32>,
}

/// Finds the copies of each side's segments in one connection.
#[derive(Clone, Debug, Default)]
pub(super) struct CaptureCopies {
    sides: PerSide<SideCopies>,
}

impl CaptureCopies {
    /// Whether `segment`, sent by side `x`, is a copy of one it sent before; if not, it
    /// is remembered. A side sends the same data again only on a timer or after
    /// duplicate ACKs (RFC 5681 3.2), the same ACK again only for arriving data (RFC
    /// 9293 3.10.7.4), and never an ACK below one it sent (RCV.NXT only advances), nor a
    /// SYN again before its timer (RFC 6298 2.1).
    pub(super) fn is_copy(&mut self, segment: &Segment, x: Side) -> bool {
        let sent = fingerprint(segment);
        let (ack, payload_len) = (segment.ack.0, segment.payload_len);
        let t = segment.time;
        let peer = &self.sides[x.other()];
        let (peer_data, peer_duplicate_acks) = (peer.data, peer.duplicate_acks);
        let own = &self.sides[x];
        let acks_backwards = segment.flags.ack()
            && own
                .highest_ack
                .is_some_and(|highest| (highest.wrapping_sub(ack) as i32) > 0);
        let copy = own.recent.iter().any(|r| {
            r.time > 0
                && r.fingerprint == sent
                && t - r.time < COPY_WITHIN
                && t >= r.time
                && (segment.flags.syn()
                    || acks_backwards
                    || if payload_len > 0 {
                        r.peer_duplicate_acks == peer_duplicate_acks
                    } else {
                        r.peer_data == peer_data
                    })
        });
        if copy {
            return true;
        }
        let own = &mut self.sides[x];
        own.recent[usize::from(own.next)] = Recent {
            fingerprint: sent,
            time: t.max(1),
            peer_data,
            peer_duplicate_acks,
        };
        own.next = (own.next + 1) % RECENT as u8;
        if payload_len > 0 {
            own.data = own.data.wrapping_add(1);
        }
        // Any segment may carry the SACK blocks or the window a resend answers: counted
        // with the duplicate ACKs.
        own.duplicate_acks = own.duplicate_acks.wrapping_add(1);
        if segment.flags.ack() {
            match own.highest_ack {
                Some(highest) if (ack.wrapping_sub(highest) as i32) > 0 => {
                    own.highest_ack = Some(ack)
                }
                Some(_) => {}
                None => own.highest_ack = Some(ack),
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{TcpFlags, TcpOptions};
    use crate::seq::SeqNumber;

    const MS: Nanos = 1_000_000;

    fn segment(time_ms: f64, seq: u32, ack: u32, len: u32, tsval: u32) -> Segment {
        Segment {
            time: (time_ms * MS as f64) as Nanos,
            src: "10.0.0.1:1000".parse().unwrap(),
            dst: "10.0.0.2:80".parse().unwrap(),
            seq: SeqNumber(seq),
            ack: SeqNumber(ack),
            flags: TcpFlags(TcpFlags::ACK),
            window: 1000,
            payload_len: len,
            options: TcpOptions {
                timestamps: Some((tsval, 0)),
                ..TcpOptions::default()
            },
            tunnel: 0,
        }
    }

    #[test]
    fn copies_from_mirrored_links_are_found_with_packets_between() {
        // arkime's wireshark-retrans: a 1090 B body four times within 4 ms, and the
        // server's delayed ACK again 50 ms later, after it had acknowledged newer data.
        let (client, server) = (Side::First, Side::Second);
        let mut copies = CaptureCopies::default();
        assert!(!copies.is_copy(&segment(72.9, 1, 199, 0, 7), server));
        assert!(copies.is_copy(&segment(72.92, 1, 199, 0, 7), server));
        assert!(!copies.is_copy(&segment(74.3, 199, 1, 1090, 5), client));
        assert!(copies.is_copy(&segment(75.3, 199, 1, 1090, 5), client));
        assert!(copies.is_copy(&segment(78.5, 199, 1, 1090, 5), client));
        assert!(!copies.is_copy(&segment(80.9, 1, 1289, 144, 8), server));
        assert!(
            copies.is_copy(&segment(122.9, 1, 199, 0, 7), server),
            "an ACK below one sent"
        );
    }

    #[test]
    fn what_tcp_sends_again_is_no_copy() {
        let (client, server) = (Side::First, Side::Second);
        let mut copies = CaptureCopies::default();
        // Duplicate ACKs, each for arriving out-of-order data, and the fast retransmission
        // they prompt, all within a millisecond clock's tick (RFC 5681 3.2).
        assert!(!copies.is_copy(&segment(0.0, 1000, 1, 100, 5), client));
        assert!(!copies.is_copy(&segment(0.1, 1100, 1, 100, 5), client));
        assert!(!copies.is_copy(&segment(0.2, 1, 1000, 0, 9), server));
        assert!(!copies.is_copy(&segment(0.3, 1200, 1, 100, 5), client));
        assert!(!copies.is_copy(&segment(0.4, 1, 1000, 0, 9), server));
        assert!(!copies.is_copy(&segment(0.45, 1300, 1, 100, 5), client));
        assert!(!copies.is_copy(&segment(0.5, 1, 1000, 0, 9), server));
        assert!(!copies.is_copy(&segment(0.6, 1000, 1, 100, 5), client));
        // The same segment resent by its timer, later than any copy comes.
        assert!(!copies.is_copy(&segment(300.0, 1000, 1, 100, 5), client));
    }
}
