//! The second pass over a capture: the segments of the connections worth drawing.
//!
//! The analysis keeps no packets, so the graphs read the capture again and keep only the
//! selected connections. A view with more points than a graph can show is decimated
//! honestly: each pixel column keeps the range of sequence numbers sent in it, the
//! highest ACK and window edge, and whether any segment in it was a retransmission.
//! Stalls are drawn from the analysis, never from the kept segments, so none is lost.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::net::SocketAddr;

use tcpstall_core::analyze::Analysis;
use tcpstall_core::capture::{CaptureReader, decode_packet};
use tcpstall_core::diagnosis::ConnectionDiagnosis;
use tcpstall_core::segment::{Nanos, Segment, TcpFlags};
use tcpstall_core::seq::{ORIGIN, SeqNumber};
use tcpstall_core::side::{PerSide, Side};

use crate::ReportError;
use crate::round_trips::RoundTrips;

/// How much the second pass keeps.
#[derive(Clone, Copy, Debug)]
pub struct TraceConfig {
    /// Connections drawn, worst first.
    pub max_connections: usize,
    /// Points a view keeps one by one before it switches to pixel columns.
    pub raw_limit: usize,
    /// Pixel columns of a decimated view.
    pub columns: usize,
    /// Stalls per connection whose packets are listed.
    pub max_listings: usize,
    /// Packets shown at each end of a long listing.
    pub listing_edge_rows: usize,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            max_connections: 12,
            raw_limit: 6000,
            columns: 900,
            max_listings: 40,
            listing_edge_rows: 25,
        }
    }
}

/// A data segment of the graphed direction: its sequence range, relative to the ISN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DataPoint {
    pub time: Nanos,
    pub lo: i64,
    pub hi: i64,
    pub retransmission: bool,
}

/// An ACK of the graphed direction's data, and the right edge of the window it offers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AckPoint {
    pub time: Nanos,
    pub ack: i64,
    pub window_edge: i64,
}

/// What one pixel column of a decimated view holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Column {
    pub data_lo: i64,
    pub data_hi: i64,
    pub data_segments: u32,
    pub retransmissions: u32,
    pub ack: i64,
    pub window_edge: i64,
    pub acks: u32,
}

impl Column {
    const EMPTY: Column = Column {
        data_lo: i64::MAX,
        data_hi: i64::MIN,
        data_segments: 0,
        retransmissions: 0,
        ack: i64::MIN,
        window_edge: i64::MIN,
        acks: 0,
    };

    fn add_data(&mut self, p: &DataPoint) {
        self.data_lo = self.data_lo.min(p.lo);
        self.data_hi = self.data_hi.max(p.hi);
        self.data_segments += 1;
        self.retransmissions += u32::from(p.retransmission);
    }

    fn add_ack(&mut self, a: &AckPoint) {
        self.ack = self.ack.max(a.ack);
        self.window_edge = self.window_edge.max(a.window_edge);
        self.acks += 1;
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ViewContent {
    /// Every segment and ACK in the view.
    Raw {
        data: Vec<DataPoint>,
        acks: Vec<AckPoint>,
    },
    /// Too many to draw one by one: one entry per pixel column.
    Columns(Vec<Column>),
}

/// One time window of one connection's graphed direction.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub start: Nanos,
    pub end: Nanos,
    pub content: ViewContent,
    pub data_segments: u64,
    pub acks: u64,
    raw_limit: usize,
    columns: usize,
}

impl View {
    fn new(start: Nanos, end: Nanos, config: &TraceConfig) -> View {
        View {
            start,
            end: end.max(start + 1),
            content: ViewContent::Raw {
                data: Vec::new(),
                acks: Vec::new(),
            },
            data_segments: 0,
            acks: 0,
            raw_limit: config.raw_limit,
            columns: config.columns.max(1),
        }
    }

    fn contains(&self, t: Nanos) -> bool {
        t >= self.start && t <= self.end
    }

    fn column_of(&self, t: Nanos) -> usize {
        let f = (t - self.start) as f64 / (self.end - self.start) as f64;
        ((f * self.columns as f64) as usize).min(self.columns - 1)
    }

    fn add_data(&mut self, p: DataPoint) {
        if !self.contains(p.time) {
            return;
        }
        self.data_segments += 1;
        let column = self.column_of(p.time);
        match &mut self.content {
            ViewContent::Raw { data, .. } => data.push(p),
            ViewContent::Columns(columns) => columns[column].add_data(&p),
        }
        self.decimate_if_full();
    }

    fn add_ack(&mut self, a: AckPoint) {
        if !self.contains(a.time) {
            return;
        }
        self.acks += 1;
        let column = self.column_of(a.time);
        match &mut self.content {
            ViewContent::Raw { acks, .. } => acks.push(a),
            ViewContent::Columns(columns) => columns[column].add_ack(&a),
        }
        self.decimate_if_full();
    }

    fn decimate_if_full(&mut self) {
        let ViewContent::Raw { data, acks } = &self.content else {
            return;
        };
        if data.len() + acks.len() <= self.raw_limit {
            return;
        }
        let mut columns = vec![Column::EMPTY; self.columns];
        for p in data {
            columns[self.column_of(p.time)].add_data(p);
        }
        for a in acks {
            columns[self.column_of(a.time)].add_ack(a);
        }
        self.content = ViewContent::Columns(columns);
    }

    pub fn is_decimated(&self) -> bool {
        matches!(self.content, ViewContent::Columns(_))
    }
}

/// Counts on a log time axis, 10 bins a decade from 100 ns to 1000 s, split by whether
/// the interval held a TCP stall.
#[derive(Clone, Debug, PartialEq)]
pub struct LogHistogram {
    pub plain: Vec<u64>,
    pub stalled: Vec<u64>,
    pub count: u64,
    pub min: f64,
    pub max: f64,
}

impl LogHistogram {
    pub const LOWEST_EXP: f64 = -7.0;
    pub const BINS_PER_DECADE: f64 = 10.0;
    pub const BINS: usize = 100;

    pub fn new() -> LogHistogram {
        LogHistogram {
            plain: vec![0; Self::BINS],
            stalled: vec![0; Self::BINS],
            count: 0,
            min: f64::INFINITY,
            max: 0.0,
        }
    }

    pub fn bin_of(seconds: f64) -> usize {
        let b = ((seconds.max(1e-12).log10() - Self::LOWEST_EXP) * Self::BINS_PER_DECADE).floor();
        (b.max(0.0) as usize).min(Self::BINS - 1)
    }

    /// Lower and upper edge of a bin, in seconds.
    pub fn edges(bin: usize) -> (f64, f64) {
        let lo = Self::LOWEST_EXP + bin as f64 / Self::BINS_PER_DECADE;
        (10f64.powf(lo), 10f64.powf(lo + 1.0 / Self::BINS_PER_DECADE))
    }

    pub fn add(&mut self, seconds: f64, stalled: bool) {
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let bin = Self::bin_of(seconds);
        if stalled {
            self.stalled[bin] += 1;
        } else {
            self.plain[bin] += 1;
        }
        self.count += 1;
        self.min = self.min.min(seconds);
        self.max = self.max.max(seconds);
    }
}

impl Default for LogHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// One packet of a stall's evidence listing.
#[derive(Clone, Debug, PartialEq)]
pub struct ListingRow {
    pub packet: u64,
    pub time: Nanos,
    /// The side of the connection that sent it.
    pub side: Side,
    pub flags: TcpFlags,
    /// Sequence and acknowledgement numbers relative to each side's first.
    pub seq: i64,
    pub ack: Option<i64>,
    /// The window in bytes (scaled when the handshake told the scale).
    pub window: u64,
    pub payload: u32,
    pub timestamps: Option<(u32, u32)>,
}

/// The packets of one stall, from the data before the gap to the data after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Listing {
    /// Index of the event in the diagnosis' events.
    pub event: usize,
    pub first_packet: u64,
    pub last_packet: u64,
    pub ack_packet: Option<u64>,
    pub head: Vec<ListingRow>,
    pub pinned: Vec<ListingRow>,
    pub tail: VecDeque<ListingRow>,
    /// Packets of this connection left out of the middle of a long listing.
    pub omitted: u64,
}

impl Listing {
    /// The rows to print, with `None` where packets were left out.
    pub fn rows(&self) -> Vec<Option<&ListingRow>> {
        let mut out: Vec<Option<&ListingRow>> = self.head.iter().map(Some).collect();
        if self.omitted > 0 {
            let mut middle: Vec<&ListingRow> = self.pinned.iter().collect();
            middle.sort_by_key(|r| r.packet);
            for row in middle {
                out.push(None);
                out.push(Some(row));
            }
            out.push(None);
        }
        out.extend(self.tail.iter().map(Some));
        out
    }
}

const ONE_SECOND: Nanos = 1_000_000_000;

/// Everything drawn for one connection.
#[derive(Clone, Debug)]
pub struct ConnectionTrace {
    /// Index into the analysis' connections.
    pub connection: usize,
    /// The side whose data is graphed: the one that was held.
    pub sender: Side,
    pub overview: View,
    /// One second around the stall the zoom shows, in a connection longer than two: the
    /// zoom a person makes on a smooth-looking graph to see its pauses (seed 001).
    pub one_second: Option<View>,
    /// The stall the zoom shows (its packets are always listed).
    pub representative: Option<usize>,
    /// Request-to-response round trips (first request byte to last response byte).
    pub round_trips: LogHistogram,
    /// Gaps between consecutive data segments of the graphed direction.
    pub data_gaps: LogHistogram,
    pub listings: Vec<Listing>,
    /// The window scale was announced in the handshake; otherwise windows are raw.
    pub window_scaled: bool,
    pub segments_seen: u64,
}

/// Which events matter for drawing: TCP stalls when there are any, else every gap.
pub fn key_events(c: &ConnectionDiagnosis) -> Vec<usize> {
    let stalls: Vec<usize> = (0..c.events.len())
        .filter(|&i| c.events[i].class.is_tcp_stall())
        .collect();
    if stalls.is_empty() {
        (0..c.events.len()).collect()
    } else {
        stalls
    }
}

/// The event of median duration among the key events.
pub fn representative_event(c: &ConnectionDiagnosis) -> Option<usize> {
    let mut keys = key_events(c);
    if keys.is_empty() {
        return None;
    }
    keys.sort_by_key(|&i| (c.events[i].duration(), c.events[i].start));
    Some(keys[keys.len() / 2])
}

/// Picks the connections to draw: those with TCP stalls, then those with other gaps.
pub fn select_connections(analysis: &Analysis, max: usize) -> Vec<usize> {
    let mut picked: Vec<usize> = (0..analysis.connections.len())
        .filter(|&i| analysis.connections[i].stall_count > 0)
        .collect();
    picked.extend(
        (0..analysis.connections.len())
            .filter(|&i| analysis.connections[i].stall_count == 0)
            .filter(|&i| !analysis.connections[i].events.is_empty()),
    );
    picked.truncate(max);
    picked
}

/// Sequence numbers relative to a side's initial sequence number, as Wireshark shows
/// them: the SYN is 0 and the first data byte 1. Without the SYN, the first number seen
/// is 1. Unwrapped across 2^32.
#[derive(Clone, Copy, Debug, Default)]
struct SeqSpace {
    base: Option<SeqNumber>,
    /// The furthest position placed so far, so that an old retransmission does not drag
    /// the reference back.
    furthest: u64,
}

impl SeqSpace {
    /// The SYN's sequence number: relative 0.
    fn start_at_syn(&mut self, isn: SeqNumber) {
        if self.base.is_none() {
            self.base = Some(isn);
            self.furthest = ORIGIN;
        }
    }

    fn rel(&mut self, raw: SeqNumber) -> i64 {
        // No SYN seen: the first number shows as 1, as in Wireshark.
        let base = *self.base.get_or_insert_with(|| {
            self.furthest = ORIGIN;
            raw - 1
        });
        let position = raw.unwrap(base, self.furthest);
        self.furthest = self.furthest.max(position);
        position as i64 - ORIGIN as i64
    }
}

/// Second-pass state of one connection.
struct Tracker {
    trace: ConnectionTrace,
    endpoints: PerSide<SocketAddr>,
    first_time: Nanos,
    last_time: Nanos,
    client_side: Side,
    spaces: PerSide<SeqSpace>,
    syn_wscale: PerSide<Option<Option<u8>>>,
    highest_end: i64,
    round_trip: RoundTrips,
    last_data: Option<Nanos>,
    stall_ends: Vec<Nanos>,
    /// (first packet, last packet, listing index), sorted by first packet.
    ranges: Vec<(u64, u64, usize)>,
    edge_rows: usize,
}

impl Tracker {
    fn new(analysis: &Analysis, index: usize, config: &TraceConfig) -> Tracker {
        let c = &analysis.connections[index];
        let keys = key_events(c);
        let mut votes = PerSide::new(0usize, 0);
        for &i in &keys {
            votes[c.events[i].sender] += 1;
        }
        let sender = Side::second_if(votes[Side::Second] > votes[Side::First]);
        let representative = representative_event(c);
        let mut listed: Vec<usize> = Vec::new();
        if let Some(r) = representative {
            listed.push(r);
        }
        for &i in &keys {
            if listed.len() >= config.max_listings {
                break;
            }
            if !listed.contains(&i) {
                listed.push(i);
            }
        }
        listed.sort_unstable();
        let listings: Vec<Listing> = listed
            .iter()
            .map(|&i| {
                let e = &c.events[i].evidence;
                let (a, b) = (e.data_before_packet, e.data_after_packet);
                Listing {
                    event: i,
                    first_packet: a.min(b),
                    last_packet: a.max(b),
                    ack_packet: e.ack_packet,
                    head: Vec::new(),
                    pinned: Vec::new(),
                    tail: VecDeque::new(),
                    omitted: 0,
                }
            })
            .collect();
        let mut ranges: Vec<(u64, u64, usize)> = listings
            .iter()
            .enumerate()
            .map(|(k, l)| (l.first_packet, l.last_packet, k))
            .collect();
        ranges.sort_unstable();
        let mut stall_ends: Vec<Nanos> = c
            .events
            .iter()
            .filter(|e| e.class.is_tcp_stall())
            .map(|e| e.end)
            .collect();
        stall_ends.sort_unstable();
        let client_side = Side::second_if(c.endpoints[Side::Second] == c.client);
        Tracker {
            trace: ConnectionTrace {
                connection: index,
                sender,
                overview: View::new(c.first_time, c.last_time, config),
                one_second: representative
                    .filter(|_| c.last_time - c.first_time > 2 * ONE_SECOND)
                    .map(|r| {
                        // The stall a little left of the middle, the pauses after it in view.
                        let start = (c.events[r].start - 2 * ONE_SECOND / 5)
                            .clamp(c.first_time, c.last_time - ONE_SECOND);
                        View::new(start, start + ONE_SECOND, config)
                    }),
                representative,
                round_trips: LogHistogram::new(),
                data_gaps: LogHistogram::new(),
                listings,
                window_scaled: false,
                segments_seen: 0,
            },
            endpoints: c.endpoints,
            first_time: c.first_time,
            last_time: c.last_time,
            client_side,
            spaces: PerSide::default(),
            syn_wscale: PerSide::default(),
            highest_end: i64::MIN,
            round_trip: RoundTrips::default(),
            last_data: None,
            stall_ends,
            ranges,
            edge_rows: config.listing_edge_rows.max(1),
        }
    }

    fn count_round_trip(&mut self, (start, end): (Nanos, Nanos)) {
        let stalled = self.stall_ended_in(start, end);
        self.trace
            .round_trips
            .add((end - start) as f64 / 1e9, stalled);
    }

    /// The end of the capture: the last round trip closes.
    fn finish(mut self) -> ConnectionTrace {
        if let Some(trip) = self.round_trip.finish() {
            self.count_round_trip(trip);
        }
        self.trace
    }

    fn stall_ended_in(&self, from: Nanos, to: Nanos) -> bool {
        let i = self.stall_ends.partition_point(|&e| e <= from);
        self.stall_ends.get(i).is_some_and(|&e| e <= to)
    }

    fn window_shift(&self, side: Side) -> Option<u8> {
        match self.syn_wscale.0 {
            [Some(Some(a)), Some(Some(b))] => Some(if side == Side::First { a } else { b }.min(14)),
            [Some(_), Some(_)] => Some(0),
            _ => None,
        }
    }

    fn observe(&mut self, s: &Segment, side: Side, packet: u64) {
        self.trace.segments_seen += 1;
        if s.flags.syn() {
            self.spaces[side].start_at_syn(s.seq);
            self.syn_wscale[side] = Some(s.options.window_scale);
        }
        let seq = self.spaces[side].rel(s.seq);
        let ack = s.flags.ack().then(|| self.spaces[side.other()].rel(s.ack));
        let shift = if s.flags.syn() {
            Some(0)
        } else {
            self.window_shift(side)
        };
        self.trace.window_scaled = self.window_shift(Side::First).is_some();
        let window = u64::from(s.window) << shift.unwrap_or(0);

        let sender = self.trace.sender;
        if side == sender && s.payload_len > 0 {
            let hi = seq + i64::from(s.payload_len);
            let point = DataPoint {
                time: s.time,
                lo: seq,
                hi,
                retransmission: seq < self.highest_end,
            };
            self.highest_end = self.highest_end.max(hi);
            if let Some(view) = &mut self.trace.one_second {
                view.add_data(point);
            }
            self.trace.overview.add_data(point);
            if let Some(prev) = self.last_data {
                let stalled = self.stall_ended_in(prev, s.time);
                self.trace
                    .data_gaps
                    .add((s.time - prev) as f64 / 1e9, stalled);
            }
            self.last_data = Some(s.time);
        }
        if side != sender
            && let Some(ack) = ack
        {
            let point = AckPoint {
                time: s.time,
                ack,
                window_edge: ack + window as i64,
            };
            if let Some(view) = &mut self.trace.one_second {
                view.add_ack(point);
            }
            self.trace.overview.add_ack(point);
        }
        if s.payload_len > 0
            && let Some(trip) = self.round_trip.data(s.time, side == self.client_side)
        {
            self.count_round_trip(trip);
        }
        self.list(s, side, packet, seq, ack, window);
    }

    fn list(
        &mut self,
        s: &Segment,
        side: Side,
        packet: u64,
        seq: i64,
        ack: Option<i64>,
        window: u64,
    ) {
        let first_candidate = self.ranges.partition_point(|r| r.1 < packet);
        for k in first_candidate..self.ranges.len() {
            let (lo, hi, index) = self.ranges[k];
            if lo > packet {
                break;
            }
            if packet > hi {
                continue;
            }
            let row = ListingRow {
                packet,
                time: s.time,
                side,
                flags: s.flags,
                seq,
                ack,
                window,
                payload: s.payload_len,
                timestamps: s.options.timestamps,
            };
            let edge = self.edge_rows;
            let listing = &mut self.trace.listings[index];
            if listing.head.len() < edge {
                listing.head.push(row);
            } else {
                listing.tail.push_back(row);
                if listing.tail.len() > edge {
                    if let Some(out) = listing.tail.pop_front() {
                        if Some(out.packet) == listing.ack_packet {
                            listing.pinned.push(out);
                        }
                    }
                    listing.omitted += 1;
                }
            }
        }
    }
}

/// Reads the capture again and gathers what the graphs of the selected connections need.
pub fn collect<R: Read + Send + 'static>(
    input: R,
    analysis: &Analysis,
    selected: &[usize],
    config: &TraceConfig,
) -> Result<Vec<ConnectionTrace>, ReportError> {
    let mut trackers: Vec<Tracker> = selected
        .iter()
        .filter(|&&i| i < analysis.connections.len())
        .map(|&i| Tracker::new(analysis, i, config))
        .collect();
    if trackers.is_empty() {
        return Ok(Vec::new());
    }
    let mut by_pair: HashMap<(SocketAddr, SocketAddr), Vec<usize>> = HashMap::new();
    for (k, t) in trackers.iter().enumerate() {
        by_pair
            .entry((t.endpoints[Side::First], t.endpoints[Side::Second]))
            .or_default()
            .push(k);
        by_pair
            .entry((t.endpoints[Side::Second], t.endpoints[Side::First]))
            .or_default()
            .push(k);
    }
    let reader = CaptureReader::new(input).map_err(|e| ReportError::SecondPass(e.to_string()))?;
    reader
        .for_each_packet(|packet| {
            let Ok(segment) = decode_packet(packet) else {
                return;
            };
            let Some(candidates) = by_pair.get(&(segment.src, segment.dst)) else {
                return;
            };
            let Some(&k) = candidates.iter().find(|&&k| {
                segment.time >= trackers[k].first_time && segment.time <= trackers[k].last_time
            }) else {
                return;
            };
            let tracker = &mut trackers[k];
            let side = Side::second_if(segment.src == tracker.endpoints[Side::Second]);
            tracker.observe(&segment, side, packet.number);
        })
        .map_err(|e| ReportError::SecondPass(e.to_string()))?;
    Ok(trackers.into_iter().map(Tracker::finish).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_unwrap_across_zero() {
        let mut s = SeqSpace::default();
        s.start_at_syn(SeqNumber(u32::MAX - 9));
        assert_eq!(s.rel(SeqNumber(u32::MAX - 9)), 0);
        assert_eq!(s.rel(SeqNumber(5)), 15);
        assert_eq!(s.rel(SeqNumber(u32::MAX - 4)), 5);
    }

    #[test]
    fn sequence_numbers_are_relative_as_in_wireshark() {
        // SYN at ISN 1000: the SYN is 0, the first data byte 1, "hello " ends at 7.
        let mut s = SeqSpace::default();
        s.start_at_syn(SeqNumber(1000));
        assert_eq!(s.rel(SeqNumber(1000)), 0);
        assert_eq!(s.rel(SeqNumber(1001)), 1);
        assert_eq!(s.rel(SeqNumber(1007)), 7);
        // Joined mid-stream: the first number seen is 1.
        let mut s = SeqSpace::default();
        assert_eq!(s.rel(SeqNumber(5_000_000)), 1);
        assert_eq!(s.rel(SeqNumber(5_000_006)), 7);
    }

    #[test]
    fn a_full_view_switches_to_columns_and_keeps_the_envelope() {
        let config = TraceConfig {
            raw_limit: 10,
            columns: 4,
            ..TraceConfig::default()
        };
        let mut view = View::new(0, 100, &config);
        for i in 0..40 {
            view.add_data(DataPoint {
                time: i * 2,
                lo: i * 10,
                hi: i * 10 + 10,
                retransmission: i == 3,
            });
        }
        let ViewContent::Columns(columns) = &view.content else {
            panic!("expected columns");
        };
        assert_eq!(columns.iter().map(|c| c.data_segments).sum::<u32>(), 40);
        assert_eq!(columns[0].data_lo, 0);
        assert_eq!(columns[0].retransmissions, 1);
        assert_eq!(columns[3].data_hi, 400);
    }

    #[test]
    fn histogram_bins_are_logarithmic() {
        let mut h = LogHistogram::new();
        h.add(0.044, true);
        h.add(7e-5, false);
        assert_eq!(h.count, 2);
        let (lo, hi) = LogHistogram::edges(LogHistogram::bin_of(0.044));
        assert!(lo <= 0.044 && 0.044 < hi);
    }
}
