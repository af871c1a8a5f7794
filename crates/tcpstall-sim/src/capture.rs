//! The capture point: what it records of the segments passing it, and how it turns them
//! into the analyzer's segments. A host capture with segmentation offload records what
//! the host sends before TSO splits it and what it receives after GRO merged it (records
//! larger than the MSS; the wire still carries MSS-sized segments); a lossy capture misses
//! records the link still delivered.

use std::collections::HashSet;
use std::net::SocketAddr;

use tcpstall_core::segment::{Nanos, Segment, TcpFlags, TcpOptions};
use tcpstall_core::seq::SeqNumber;
use tcpstall_core::side::{PerSide, Side};

use crate::endpoint::{SegmentKind, WINDOW_SCALE, WireSegment};
use crate::link::Rng;
use crate::scenario::CapturePoint;

/// The largest record segmentation offload makes (TSO and GRO stop at 64 KB).
pub const OFFLOAD_MAX_BYTES: u32 = 65_535;
/// GRO merges segments that arrive this close together (one NAPI poll's batch).
const GRO_BATCH: Nanos = 100_000;

/// A segment as the capture point saw it.
#[derive(Clone, Debug)]
pub struct Captured {
    pub time: Nanos,
    pub segment: WireSegment,
    /// Wire segments this record stands for (more than one after offload merged them).
    pub merged: u32,
    /// The TTL it passed the capture point with: its sender's initial TTL, less a
    /// router per [`ROUTERS`] share of the way it came.
    pub ttl: u8,
}

/// The routers a path holds end to end, each of which takes one from a packet's TTL
/// (RFC 791 3.2).
pub const ROUTERS: f64 = 8.0;

/// Records the capture kept, and the same before it missed any (for the ground truth).
#[derive(Clone, Debug, Default)]
pub struct CaptureRecords {
    /// What the capture file holds, in time order.
    pub kept: Vec<Captured>,
    /// Every record the capture point made (after offload), in time order.
    pub made: Vec<Captured>,
    /// The ids of the segments named by the kept records (a merged record: its first).
    pub kept_ids: HashSet<u64>,
}

/// The host whose stack the capture runs on, if the capture point is at an endpoint.
fn capture_host(point: CapturePoint) -> Option<Side> {
    match point {
        CapturePoint::Client => Some(Side::First),
        CapturePoint::Server => Some(Side::Second),
        CapturePoint::Tap(_) => None,
    }
}

/// Turns what passed the capture point into its records: offload merging at a host
/// capture, the clock's step (`clock_step`, 0: exact; a record keeps its place among
/// those stamped alike), then the misses.
pub fn finish(
    mut passed: Vec<Captured>,
    point: CapturePoint,
    offload: bool,
    miss: f64,
    clock_step: Nanos,
    seed: u64,
) -> CaptureRecords {
    passed.sort_by_key(|c| c.time);
    let mut made = match capture_host(point) {
        Some(host) if offload => merge_offloaded(passed, host),
        _ => passed,
    };
    if clock_step > 0 {
        for record in &mut made {
            record.time -= record.time.rem_euclid(clock_step);
        }
    }
    let mut rng = Rng::new(seed ^ 0x00c0_ffee);
    let kept: Vec<Captured> = made
        .iter()
        .filter(|c| miss <= 0.0 || c.segment.syn || rng.unit() >= miss)
        .cloned()
        .collect();
    let kept_ids = kept.iter().map(|c| c.segment.id).collect();
    CaptureRecords {
        kept,
        made,
        kept_ids,
    }
}

/// Whether `next` continues `record` as one offloaded record: plain data of the same
/// direction, in sequence, under 64 KB. TSO (what the host sends): segments of one send
/// burst. GRO (what it receives): segments arriving within one batch; a PSH ends the
/// merge (Linux tcp_gro_receive flushes on PSH).
fn continues(record: &Captured, next: &Captured, host: Side) -> bool {
    let (a, b) = (&record.segment, &next.segment);
    let plain = |s: &WireSegment| {
        s.len > 0 && !s.syn && !s.fin && !s.urg && s.kind == SegmentKind::Data && !s.retransmission
    };
    if a.from != b.from || !plain(a) || !plain(b) || a.seq + u64::from(a.len) != b.seq {
        return false;
    }
    if a.len + b.len > OFFLOAD_MAX_BYTES {
        return false;
    }
    if a.from == host {
        a.burst == b.burst
    } else {
        !a.psh && next.time - record.time <= GRO_BATCH
    }
}

fn merge_offloaded(passed: Vec<Captured>, host: Side) -> Vec<Captured> {
    let mut out: Vec<Captured> = Vec::with_capacity(passed.len());
    // The open record per direction: its index in `out`.
    let mut open: PerSide<Option<usize>> = PerSide::default();
    for c in passed {
        let from = c.segment.from;
        if let Some(i) = open[from]
            && continues(&out[i], &c, host)
        {
            let record = &mut out[i];
            record.segment.len += c.segment.len;
            record.segment.psh |= c.segment.psh;
            if from != host {
                // GRO keeps the newest ACK and window of the merged segments.
                record.segment.ack = c.segment.ack;
                record.segment.window = c.segment.window;
            }
            record.merged += 1;
            continue;
        }
        let data = c.segment.len > 0;
        out.push(c);
        open[from] = data.then_some(out.len() - 1);
    }
    out
}

/// Addresses the simulated endpoints use in captures.
pub fn addresses() -> [SocketAddr; 2] {
    [
        SocketAddr::from(([10, 0, 0, 1], 40000)),
        SocketAddr::from(([10, 0, 0, 2], 8000)),
    ]
}

/// Turns a captured wire segment into the analyzer's [`Segment`].
pub fn to_segment(captured: &Captured, isn: PerSide<SeqNumber>) -> Segment {
    let s = &captured.segment;
    let [client, server] = addresses();
    let (src, dst) = if s.from == Side::First {
        (client, server)
    } else {
        (server, client)
    };
    let mut flags = 0;
    if s.syn {
        flags |= TcpFlags::SYN;
    }
    if s.fin {
        flags |= TcpFlags::FIN;
    }
    if s.ack_flag {
        flags |= TcpFlags::ACK;
    }
    if s.psh {
        flags |= TcpFlags::PSH;
    }
    if s.urg {
        flags |= TcpFlags::URG;
    }
    let window = if s.syn {
        s.window.min(65_535) as u16
    } else {
        (s.window >> WINDOW_SCALE).min(65_535) as u16
    };
    Segment {
        time: captured.time,
        src,
        dst,
        seq: isn[s.from] + s.seq as u32,
        ack: if s.ack_flag {
            isn[s.from.other()] + s.ack as u32
        } else {
            SeqNumber(0)
        },
        flags: TcpFlags(flags),
        window,
        payload_len: s.len,
        // Each datagram numbered, as a stack's counter numbers them (RFC 6864 4.1); a
        // resent segment is a new datagram.
        ip_id: s.id as u16,
        ttl: captured.ttl,
        tunnel: 0,
        options: TcpOptions {
            mss: s.mss_option.map(|m| m.min(65_535) as u16),
            window_scale: s.window_scale,
            sack_permitted: s.syn,
            sack_blocks: 0,
            timestamps: s.timestamps,
        },
    }
}

/// The initial sequence numbers of a run's capture.
pub fn initial_sequence_numbers(seed: u64) -> PerSide<SeqNumber> {
    let mut rng = Rng::new(seed ^ 0x5eed);
    PerSide::new(
        SeqNumber(rng.next_u64() as u32),
        SeqNumber(rng.next_u64() as u32),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::SegmentKind;

    fn data(from: Side, time: Nanos, seq: u64, len: u32, burst: u64, psh: bool) -> Captured {
        Captured {
            time,
            merged: 1,
            ttl: 64,
            segment: WireSegment {
                id: seq,
                from,
                seq,
                ack: 1,
                len,
                syn: false,
                fin: false,
                ack_flag: true,
                psh,
                urg: false,
                window: 65_536,
                timestamps: None,
                mss_option: None,
                window_scale: None,
                sack: [(0, 0); crate::endpoint::SACK_BLOCKS],
                ack_delay: None,
                retransmission: false,
                kind: SegmentKind::Data,
                held: None,
                released_by: None,
                burst,
                sent: time,
            },
        }
    }

    #[test]
    fn tso_merges_one_burst_and_gro_merges_one_batch_up_to_a_push() {
        let passed = vec![
            data(Side::First, 0, 1, 1448, 7, false),
            data(Side::First, 10, 1449, 1448, 7, false),
            data(Side::First, 20, 2897, 1448, 8, true),
            data(Side::Second, 1_000, 1, 1448, 3, false),
            data(Side::Second, 1_010, 1449, 100, 3, true),
            data(Side::Second, 1_020, 1549, 100, 3, true),
        ];
        let records = finish(passed, CapturePoint::Client, true, 0.0, 0, 1);
        let lens: Vec<u32> = records.made.iter().map(|c| c.segment.len).collect();
        assert_eq!(lens, [2896, 1448, 1548, 100]);
        assert_eq!(records.made[0].merged, 2);
    }

    #[test]
    fn a_tap_has_no_host_to_offload_and_misses_drop_records() {
        let passed: Vec<Captured> = (0..1000)
            .map(|i| data(Side::First, i * 10, 1 + i as u64 * 100, 100, 1, false))
            .collect();
        let records = finish(passed, CapturePoint::Tap(0.5), true, 0.1, 0, 3);
        assert_eq!(records.made.len(), 1000);
        let kept = records.kept.len();
        assert!((850..950).contains(&kept), "{kept}");
        assert_eq!(records.kept_ids.len(), kept);
    }

    #[test]
    fn a_coarse_clock_stamps_each_record_down_to_its_step_in_the_same_order() {
        let passed = vec![
            data(Side::First, 1_999_999, 1, 100, 1, true),
            data(Side::Second, 1_000_000, 1, 100, 2, true),
            data(Side::First, 1_000_001, 101, 100, 3, true),
            data(Side::Second, 3_000_000, 101, 100, 4, true),
        ];
        let records = finish(passed, CapturePoint::Tap(0.5), false, 0.0, 1_000_000, 1);
        let stamped: Vec<(Nanos, u64)> = records
            .kept
            .iter()
            .map(|c| (c.time, c.segment.burst))
            .collect();
        assert_eq!(
            stamped,
            [
                (1_000_000, 2),
                (1_000_000, 3),
                (1_000_000, 1),
                (3_000_000, 4)
            ]
        );
    }
}
