//! The connection table: which connection a segment belongs to, opening and ending
//! connections (closed, reset, idle, or beyond the table's limit).

use std::collections::VecDeque;
use std::net::SocketAddr;

use rustc_hash::FxHashMap;

use super::connection::Connection;
use crate::detect::DetectConfig;
use crate::segment::{Nanos, Segment};
use crate::side::Side;

/// A connection's two endpoints, lower first, packed into machine words so that
/// hashing and comparing them is cheap: IPv4 takes the first two words (address and port
/// in each), IPv6 all five, the last marking it IPv6 and holding the ports. The overlay
/// network ([`Segment::tunnel`], 29 bits) takes the third word for IPv4 and the free
/// bits of the last for IPv6.
#[derive(Clone, Copy, Debug, Eq)]
pub(super) struct FlowKey([u64; 5]);

impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for word in self.0 {
            state.write_u64(word);
        }
    }
}

impl PartialEq for FlowKey {
    fn eq(&self, other: &FlowKey) -> bool {
        // Word by word, with no early exit: cheaper than a call to compare bytes.
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |differ, (a, b)| differ | (a ^ b))
            == 0
    }
}

/// Marks a [`FlowKey`] as holding IPv6 (or mixed) endpoints.
pub(super) const V6_KEY: u64 = 1 << 63;

impl FlowKey {
    /// The key of the connection between `src` and `dst`, and the side `src` is: the first
    /// for the lower endpoint in the order of [`SocketAddr`] (IPv4 first, then address, then
    /// port), whose IPv6 flow label and scope are always zero here.
    // Inlined: returned through memory, the key cost a copy on every segment.
    #[inline(always)]
    pub(super) fn of(src: &SocketAddr, dst: &SocketAddr, tunnel: u32) -> (FlowKey, Side) {
        let tunnel = u64::from(tunnel & crate::segment::MAX_TUNNEL_ID);
        if let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) {
            let word = |a: &std::net::SocketAddrV4| {
                u64::from(a.ip().to_bits()) << 16 | u64::from(a.port())
            };
            let (src, dst) = (word(src), word(dst));
            return if src <= dst {
                (FlowKey([src, dst, tunnel, 0, 0]), Side::First)
            } else {
                (FlowKey([dst, src, tunnel, 0, 0]), Side::Second)
            };
        }
        let side = Side::second_if(src > dst);
        let (lower, upper) = if side == Side::First {
            (src, dst)
        } else {
            (dst, src)
        };
        let bits = |addr: &SocketAddr| match addr.ip() {
            std::net::IpAddr::V4(ip) => (u128::from(ip.to_bits()), 0),
            std::net::IpAddr::V6(ip) => (ip.to_bits(), 1),
        };
        let ((a, a_v6), (b, b_v6)) = (bits(lower), bits(upper));
        let tail = V6_KEY
            | tunnel << 34
            | a_v6 << 33
            | b_v6 << 32
            | u64::from(lower.port()) << 16
            | u64::from(upper.port());
        (
            FlowKey([(a >> 64) as u64, a as u64, (b >> 64) as u64, b as u64, tail]),
            side,
        )
    }
}

/// Which of `buckets` the connection `segment` belongs to falls in, by a hash of its
/// endpoints: both directions of a connection land in the same one.
pub fn bucket_of(segment: &Segment, buckets: usize) -> usize {
    let fold = |addr: &SocketAddr| {
        let address = match addr.ip() {
            std::net::IpAddr::V4(ip) => u64::from(u32::from(ip)),
            std::net::IpAddr::V6(ip) => {
                let bits = u128::from(ip);
                bits as u64 ^ (bits >> 64) as u64
            }
        };
        address ^ (u64::from(addr.port()) << 32)
    };
    // XOR makes it the same both ways; the multiply (Fibonacci hashing) mixes it.
    let mixed = (fold(&segment.src) ^ fold(&segment.dst)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((mixed >> 32) % buckets as u64) as usize
}

/// Connections tracked at once. Beyond this the least recently active quarter is
/// ended as idle: memory follows open connections, never the capture's size.
pub const MAX_OPEN_CONNECTIONS: usize = 200_000;
/// A connection silent this long (capture time) is ended as idle.
pub const IDLE_TIMEOUT: Nanos = 300 * crate::segment::NANOS_PER_SEC;
/// Segments of a closed connection that arrive this soon after its close (the last ACK,
/// a retransmitted FIN) belong to it, not to a new connection.
pub(super) const LATE_SEGMENT_WINDOW: Nanos = 2 * crate::segment::NANOS_PER_SEC;
/// How often (in segments) idle connections are looked for.
pub(super) const IDLE_SWEEP_EVERY: u32 = 1 << 20;

/// All connections of a segment stream. Ended connections (closed, reset, or idle) are
/// handed over through [`FlowTable::take_ended`] as they end.
pub struct FlowTable {
    pub(super) config: DetectConfig,
    pub(super) index: FxHashMap<FlowKey, u32>,
    pub(super) slots: Vec<Option<Box<Connection>>>,
    pub(super) free_slots: Vec<u32>,
    /// Boxed as they were tracked: a connection is large, and moving it by value costs
    /// more than the pointer.
    #[allow(clippy::vec_box)]
    pub(super) ended: Vec<Box<Connection>>,
    pub(super) closed_recently: FxHashMap<FlowKey, Nanos>,
    pub(super) closed_order: VecDeque<(Nanos, FlowKey)>,
    pub(super) now: Nanos,
    pub(super) segments_since_sweep: u32,
    pub(super) max_open: usize,
    /// Segments that arrived just after their connection closed.
    pub late_segments: u64,
    /// Connections ended because they were idle, or because too many were open.
    pub ended_idle: u64,
}

impl FlowTable {
    pub fn new(config: DetectConfig) -> FlowTable {
        FlowTable::with_limit(config, MAX_OPEN_CONNECTIONS)
    }

    /// A table that tracks at most `max_open` connections at once.
    pub fn with_limit(config: DetectConfig, max_open: usize) -> FlowTable {
        FlowTable {
            config,
            index: FxHashMap::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            ended: Vec::new(),
            closed_recently: FxHashMap::default(),
            closed_order: VecDeque::new(),
            now: Nanos::MIN,
            segments_since_sweep: 0,
            max_open: max_open.max(4),
            late_segments: 0,
            ended_idle: 0,
        }
    }

    /// Feeds one segment; `packet` is its number in the capture (for evidence).
    pub fn observe(&mut self, segment: &Segment, packet: u64) {
        self.now = self.now.max(segment.time);
        let (key, side) = FlowKey::of(&segment.src, &segment.dst, segment.tunnel);
        let opening = segment.flags.syn() && !segment.flags.ack();
        let mut slot = self.index.get(&key).copied();
        if let Some(i) = slot
            && opening
            && self.slots[i as usize]
                .as_ref()
                .is_some_and(|c| c.reuse_by(side))
        {
            self.end(i, false);
            slot = None;
        }
        let i = match slot {
            Some(i) => i,
            None => {
                if !opening && self.closed_recently.contains_key(&key) {
                    self.late_segments += 1;
                    return;
                }
                self.open(key, segment, side, packet)
            }
        };
        let Some(connection) = self.slots[i as usize].as_deref_mut() else {
            return;
        };
        connection.observe(segment, side, packet, &self.config);
        // Only a FIN or a RST can finish a connection.
        if (segment.flags.fin() || segment.flags.rst()) && connection.is_finished() {
            self.end(i, true);
        }
        self.segments_since_sweep += 1;
        if self.segments_since_sweep >= IDLE_SWEEP_EVERY {
            self.segments_since_sweep = 0;
            self.end_idle(self.now - IDLE_TIMEOUT);
        }
    }

    pub(super) fn open(&mut self, key: FlowKey, segment: &Segment, side: Side, packet: u64) -> u32 {
        if self.index.len() >= self.max_open {
            self.end_least_recent_quarter();
        }
        let connection = Box::new(Connection::new(segment, side, packet));
        let i = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(connection);
                i
            }
            None => {
                self.slots.push(Some(connection));
                (self.slots.len() - 1) as u32
            }
        };
        self.closed_recently.remove(&key);
        self.index.insert(key, i);
        i
    }

    /// Ends the connection in slot `i`: classifies its gaps and hands it over.
    pub(super) fn end(&mut self, i: u32, closed: bool) {
        let Some(mut connection) = self.slots[i as usize].take() else {
            return;
        };
        self.free_slots.push(i);
        let (key, _) = FlowKey::of(
            &connection.endpoints[Side::First],
            &connection.endpoints[Side::Second],
            connection.tunnel,
        );
        self.index.remove(&key);
        if closed {
            self.closed_recently.insert(key, connection.last_time);
            self.closed_order.push_back((connection.last_time, key));
            while let Some(&(time, old)) = self.closed_order.front() {
                if self.now - time <= LATE_SEGMENT_WINDOW {
                    break;
                }
                self.closed_order.pop_front();
                if self.closed_recently.get(&old) == Some(&time) {
                    self.closed_recently.remove(&old);
                }
            }
        }
        connection.classify_gaps(&self.config);
        connection.window_closed_at_end(&self.config);
        // Kept until the report: without the room its growth left.
        connection.events.shrink_to_fit();
        connection.release_tracking();
        self.ended.push(connection);
    }

    /// Ends every connection silent since `before`.
    pub(super) fn end_idle(&mut self, before: Nanos) {
        let idle: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.as_ref()
                    .filter(|c| c.last_time < before)
                    .map(|_| i as u32)
            })
            .collect();
        self.ended_idle += idle.len() as u64;
        for i in idle {
            self.end(i, false);
        }
    }

    /// Too many open connections: ends the least recently active quarter.
    pub(super) fn end_least_recent_quarter(&mut self) {
        let mut last_times: Vec<Nanos> = self.slots.iter().flatten().map(|c| c.last_time).collect();
        if last_times.is_empty() {
            return;
        }
        let quarter = last_times.len() / 4;
        let (_, threshold, _) = last_times.select_nth_unstable(quarter);
        let threshold = *threshold;
        self.end_idle(threshold + 1);
    }

    /// Connections open right now.
    pub fn open_connections(&self) -> usize {
        self.index.len()
    }

    /// Takes the connections that ended since the last call.
    pub fn take_ended(&mut self) -> std::vec::Drain<'_, Box<Connection>> {
        self.ended.drain(..)
    }

    pub fn has_ended(&self) -> bool {
        !self.ended.is_empty()
    }

    /// Ends the stream: every connection still open ends, and all are handed over.
    pub fn into_connections(mut self) -> Vec<Box<Connection>> {
        for i in 0..self.slots.len() as u32 {
            if self.slots[i as usize].is_some() {
                self.end(i, false);
            }
        }
        std::mem::take(&mut self.ended)
    }
}

impl Connection {
    /// A new SYN from `side` on this 4-tuple starts a new connection when this one has
    /// ended, or when it is a different SYN from the one already seen.
    pub(super) fn reuse_by(&self, side: Side) -> bool {
        if self.is_finished() {
            return true;
        }
        let dir = &self.dirs[side];
        dir.syn_seen && dir.data_segments > 0
    }
}
