//! One input read into diagnoses: the reading thread decodes each packet and tracks a
//! share of the connections, a tracking thread the rest, and their collectors keep the
//! most severe diagnoses.

use std::io::Read;
use std::sync::mpsc;

use super::{
    Analysis, AnalyzeError, AnalyzeOptions, Filter, InputRead, InputSummary,
    MAX_LISTED_CONNECTIONS, MAX_LISTED_GAPS, UnlistedTotals, severity_keys, severity_ranking,
};
use crate::capture::{
    CaptureReader, Decoded, Decoder, MAX_INTERFACES, Packet, ReadNotes, SkipReason,
    supported_link_types,
};
use crate::detect::DetectConfig;
use crate::diagnosis::{ConnectionDiagnosis, diagnose};
use crate::flow::{FlowTable, bucket_of};
use crate::segment::{Nanos, Segment};

/// Diagnoses a collector holds before it keeps only the [`MAX_LISTED_CONNECTIONS`] most
/// severe.
const COLLECTED_BEFORE_PRUNING: usize = MAX_LISTED_CONNECTIONS + MAX_LISTED_CONNECTIONS / 4;

/// Diagnoses connections as they end and keeps the most severe.
struct Collector {
    diagnoses: Vec<ConnectionDiagnosis>,
    listed_gaps: usize,
    /// Gaps this collector lists one by one at most: its share of [`MAX_LISTED_GAPS`].
    gap_budget: usize,
    unlisted: UnlistedTotals,
    duplicates: u64,
}

impl Collector {
    /// A collector for `buckets` of the [`BUCKETS`] of connections. Each keeps the
    /// [`MAX_LISTED_CONNECTIONS`] most severe of its own, so that the most severe of all
    /// are among them whichever way the connections fell.
    fn new(buckets: usize) -> Collector {
        Collector {
            // Room for as many as it holds before it keeps the most severe: the room is
            // only address space until used, and growing by doubling would copy them.
            diagnoses: Vec::with_capacity(COLLECTED_BEFORE_PRUNING),
            listed_gaps: 0,
            gap_budget: MAX_LISTED_GAPS * buckets / BUCKETS,
            unlisted: UnlistedTotals::default(),
            duplicates: 0,
        }
    }

    fn take(&mut self, mut connection: Box<crate::flow::Connection>) {
        self.duplicates += connection.duplicates;
        let diagnosis = diagnose(&mut connection);
        self.listed_gaps += diagnosis.events.len();
        self.diagnoses.push(diagnosis);
        if self.diagnoses.len() >= COLLECTED_BEFORE_PRUNING {
            self.keep_most_severe();
        }
        if self.listed_gaps > self.gap_budget {
            self.unlist_gaps_of_least_severe();
        }
    }

    /// Keeps the gap listings of the most severe connections within three quarters of
    /// the gap budget; the others keep their gaps as counts.
    fn unlist_gaps_of_least_severe(&mut self) {
        let keep = self.gap_budget * 3 / 4;
        let mut listed = 0;
        for i in severity_ranking(&self.diagnoses) {
            let d = &mut self.diagnoses[i];
            if listed + d.events.len() <= keep {
                listed += d.events.len();
                continue;
            }
            for event in std::mem::take(&mut d.events) {
                event.count_in(&mut d.unlisted);
            }
        }
        self.listed_gaps = listed;
    }

    /// Takes in what another collector gathered.
    fn merge(&mut self, other: Collector) {
        if self.diagnoses.is_empty() {
            // Taken over rather than moved one by one.
            self.diagnoses = other.diagnoses;
        } else {
            self.diagnoses.extend(other.diagnoses);
        }
        self.listed_gaps += other.listed_gaps;
        self.unlisted.merge(&other.unlisted);
        self.duplicates += other.duplicates;
        self.keep_most_severe();
        if self.listed_gaps > self.gap_budget {
            self.unlist_gaps_of_least_severe();
        }
    }

    /// Keeps the [`MAX_LISTED_CONNECTIONS`] most severe, totalling the others.
    fn keep_most_severe(&mut self) {
        if self.diagnoses.len() <= MAX_LISTED_CONNECTIONS {
            return;
        }
        // Chosen by their keys: a diagnosis is large, and moving it is what costs.
        let mut keys = severity_keys(&self.diagnoses);
        keys.select_nth_unstable(MAX_LISTED_CONNECTIONS - 1);
        let mut kept = vec![false; self.diagnoses.len()];
        for &(_, i) in &keys[..MAX_LISTED_CONNECTIONS] {
            kept[i] = true;
        }
        let (listed_gaps, unlisted) = (&mut self.listed_gaps, &mut self.unlisted);
        let mut kept = kept.into_iter();
        self.diagnoses.retain(|d| {
            let keep = kept.next().unwrap_or(true);
            if !keep {
                *listed_gaps -= d.events.len();
                unlisted.add(d);
            }
            keep
        });
    }
}

/// Segments handed from the reading thread to the tracking thread at a time.
const BATCH_SEGMENTS: usize = 4096;
/// Batches waiting for the tracking thread: bounds the memory between the two.
const BATCHES_IN_FLIGHT: usize = 8;
/// Connections fall into this many buckets by a hash of their endpoints...
const BUCKETS: usize = 32;
/// ...and the reading thread tracks the connections of this many itself, the tracking
/// thread those of the others. Reading and decoding a packet costs about half as much as
/// tracking it (the evidence a verdict rests on is gathered on every segment), and this
/// share keeps both threads about equally busy. A fixed split, not one measured at run
/// time, so that the report (which connections are ended early when too many are open)
/// never depends on the machine.
const READER_BUCKETS: usize = 11;

type Batch = Vec<(Segment, u64)>;

/// A flow table with the diagnoses of its ended connections.
struct Tracker {
    flows: FlowTable,
    collector: Collector,
}

impl Tracker {
    /// A tracker for a share of the connections: `buckets` of [`BUCKETS`].
    fn new(detect: DetectConfig, buckets: usize) -> Tracker {
        let limit = crate::flow::MAX_OPEN_CONNECTIONS * buckets / BUCKETS;
        Tracker {
            flows: FlowTable::with_limit(detect, limit),
            collector: Collector::new(buckets),
        }
    }

    fn observe(&mut self, segment: &Segment, packet: u64) {
        self.flows.observe(segment, packet);
        if self.flows.has_ended() {
            for connection in self.flows.take_ended() {
                self.collector.take(connection);
            }
        }
    }

    /// The end of the stream: every connection still open ends and is diagnosed.
    fn finish(self) -> Finished {
        let Tracker {
            flows,
            mut collector,
        } = self;
        let late_segments = flows.late_segments;
        let ended_idle = flows.ended_idle;
        for connection in flows.into_connections() {
            collector.take(connection);
        }
        Finished {
            collector,
            late_segments,
            ended_idle,
        }
    }
}

/// What a tracker found, all its connections ended.
struct Finished {
    collector: Collector,
    late_segments: u64,
    ended_idle: u64,
}

/// The tracking thread: its share of the segments, batch by batch. Emptied batches go
/// back to the reading thread to be refilled.
fn track(
    received: mpsc::Receiver<Batch>,
    emptied: mpsc::SyncSender<Batch>,
    detect: DetectConfig,
) -> Finished {
    let mut tracker = Tracker::new(detect, BUCKETS - READER_BUCKETS);
    for mut batch in received {
        for (segment, packet) in &batch {
            tracker.observe(segment, *packet);
        }
        batch.clear();
        // The reader may have finished and gone; then the batch is simply dropped.
        let _ = emptied.try_send(batch);
    }
    tracker.finish()
}

/// Reads a whole capture and diagnoses every TCP connection in it.
pub fn analyze<R: Read + Send + 'static>(
    input: R,
    source: &str,
    options: &AnalyzeOptions,
) -> Result<Analysis, AnalyzeError> {
    let reader = CaptureReader::new(input)?;
    pipeline(source, options, |intake| {
        let read = reader.for_each_packet(|packet| {
            intake.packet(packet);
        })?;
        Ok(InputRead {
            warnings: read_warnings(&read, None),
            read,
            files: Vec::new(),
        })
    })
}

/// Warnings about what reading one capture noticed; `path` names it among several.
pub(super) fn read_warnings(read: &ReadNotes, path: Option<&std::path::Path>) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(cut) = &read.compressed_stream_cut {
        warnings.push(cut.clone());
    }
    if let Some(tail) = &read.truncated_tail {
        warnings.push(tail.clone());
    }
    if read.packets_without_timestamp > 0 {
        warnings.push(format!(
            "{} packets in Simple Packet Blocks have no timestamp; they were given the previous packet's time",
            read.packets_without_timestamp
        ));
    }
    if read.packets_time_out_of_range > 0 {
        warnings.push(format!(
            "{} packets have timestamps before 1970 or after 2106; they were given the nearest end of that range",
            read.packets_time_out_of_range
        ));
    }
    if read.packets_unknown_interface > 0 {
        warnings.push(format!(
            "{} packets name an interface no Interface Description Block declared; they were skipped",
            read.packets_unknown_interface
        ));
    }
    if read.interfaces_over_limit > 0 {
        warnings.push(format!(
            "{} Interface Description Blocks past the first {MAX_INTERFACES} of a section were not kept; the {} packets on them were skipped",
            read.interfaces_over_limit, read.packets_on_interfaces_over_limit
        ));
    }
    if read.packets_fraction_over_a_second > 0 {
        warnings.push(format!(
            "{} pcap records have a fraction of a second of a second or more (a microsecond field of 1000000 or more, or a nanosecond field of 1000000000 or more); it was carried into the seconds",
            read.packets_fraction_over_a_second
        ));
    }
    match path {
        Some(path) => warnings
            .into_iter()
            .map(|w| format!("{}: {w}", path.display()))
            .collect(),
        None => warnings,
    }
}

/// The reading thread's share of the work, packet by packet: decode, filter, and track
/// its own connections or pass the others on in batches.
pub(super) struct Intake<'a> {
    summary: &'a mut InputSummary,
    decoder: Decoder,
    local: Tracker,
    batch: Batch,
    batches: mpsc::SyncSender<Batch>,
    recycled: mpsc::Receiver<Batch>,
    /// The filter, none when it lets every segment through (decided once, not per packet).
    filter: Option<&'a Filter>,
    /// Where each packet is decoded, in place.
    pub(super) segment: Segment,
    /// The earliest and latest packet times so far ([`Nanos::MAX`] and [`Nanos::MIN`]
    /// before the first packet); the summary is given them at the end.
    first_time: Nanos,
    last_time: Nanos,
}

impl Intake<'_> {
    /// Takes one packet; true when it was a TCP segment (then in `self.segment`).
    #[inline(always)]
    pub(super) fn packet(&mut self, packet: &Packet<'_>) -> bool {
        self.first_time = self.first_time.min(packet.time);
        self.last_time = self.last_time.max(packet.time);
        let summary = &mut *self.summary;
        let segment = &mut self.segment;
        match self.decoder.decode(packet, segment) {
            Decoded::Segment => {}
            Decoded::Skipped(reason) => {
                summary.skipped.add(reason);
                return false;
            }
            Decoded::Held => return false,
        }
        summary.tcp_segments += 1;
        if self.filter.is_some_and(|filter| !filter.matches(segment)) {
            summary.filtered_out += 1;
        } else if bucket_of(segment, BUCKETS) < READER_BUCKETS {
            self.local.observe(segment, packet.number);
        } else {
            self.batch.push((*segment, packet.number));
            if self.batch.len() == BATCH_SEGMENTS {
                let next = self
                    .recycled
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BATCH_SEGMENTS));
                // The tracker only stops early if it failed; its join says so.
                let _ = self.batches.send(std::mem::replace(&mut self.batch, next));
            }
        }
        true
    }
}

/// Reads the input through `read` (which hands every packet to the intake), tracks and
/// diagnoses its connections.
pub(super) fn pipeline(
    source: &str,
    options: &AnalyzeOptions,
    read: impl FnOnce(&mut Intake<'_>) -> Result<InputRead, AnalyzeError>,
) -> Result<Analysis, AnalyzeError> {
    let mut summary = InputSummary {
        source: source.to_string(),
        ..InputSummary::default()
    };
    // Two threads: this one reads, decodes and tracks a share of the connections; the
    // other tracks the rest, its segments passed over in batches.
    let (emptied, recycled) = mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT + 2);
    let (batches, received) = mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT);
    let (read, fragments, ip_length_beyond_frame, local, tracked) = std::thread::scope(|scope| {
        let remote = scope.spawn(move || track(received, emptied, options.detect));
        let mut intake = Intake {
            summary: &mut summary,
            decoder: Decoder::new(),
            local: Tracker::new(options.detect, READER_BUCKETS),
            batch: Vec::with_capacity(BATCH_SEGMENTS),
            batches,
            recycled,
            filter: (!options.filter.is_empty()).then_some(&options.filter),
            segment: crate::capture::fast::BLANK_SEGMENT,
            first_time: Nanos::MAX,
            last_time: Nanos::MIN,
        };
        let read = read(&mut intake);
        let Intake {
            decoder,
            local,
            batch,
            batches,
            first_time,
            last_time,
            ..
        } = intake;
        if first_time <= last_time {
            summary.first_time = Some(first_time);
            summary.last_time = Some(last_time);
        }
        if !batch.is_empty() {
            let _ = batches.send(batch);
        }
        drop(batches);
        // Both trackers end their open connections at once, each on its own thread.
        let local = local.finish();
        (
            read,
            decoder.fragment_counts(),
            decoder.ip_length_beyond_frame(),
            local,
            remote.join(),
        )
    });
    let input = read?;
    let Ok(remote) = tracked else {
        return Err(AnalyzeError::Internal(
            "the connection tracker stopped".into(),
        ));
    };
    summary.read = input.read;
    summary.files = input.files;
    summary.warnings.extend(input.warnings);
    if ip_length_beyond_frame > 0 {
        summary.warnings.push(format!(
            "{ip_length_beyond_frame} packets have an IP length longer than the frame they came in (its length on the wire); their length was taken from the frame"
        ));
    }
    summary.fragments = fragments;
    summary
        .skipped
        .add_many(SkipReason::IpFragment, fragments.incomplete());
    if summary.tcp_segments == 0 {
        return Err(AnalyzeError::NoTcp(describe_no_tcp(&summary)));
    }
    let mut collector = Collector::new(BUCKETS);
    // The tracking thread's, the larger, first: its diagnoses are taken over whole. The
    // order makes no difference to the report (the diagnoses are sorted in a total order).
    for finished in [remote, local] {
        summary.late_segments += finished.late_segments;
        summary.connections_ended_idle += finished.ended_idle;
        collector.merge(finished.collector);
    }
    summary.duplicates = collector.duplicates;
    // Put in order in place: a diagnosis is large, and two new vectors of them cost more
    // than swapping each into its place.
    let mut diagnoses = collector.diagnoses;
    let order = severity_ranking(&diagnoses);
    put_in_order(&mut diagnoses, &order);
    Ok(Analysis {
        input: summary,
        connections: diagnoses,
        unlisted: collector.unlisted,
        min_gap: options.detect.min_gap,
    })
}

/// Reorders `items` so that the `k`-th is the one `order[k]` names (`order` a permutation
/// of their indices), one cycle of the permutation at a time, by swaps in place.
fn put_in_order<T>(items: &mut [T], order: &[usize]) {
    let mut placed = vec![false; items.len()];
    for start in 0..items.len() {
        if placed[start] {
            continue;
        }
        // Along the cycle, each place takes its item from the next, where the cycle's
        // first item travels on until the place that names it.
        let mut place = start;
        placed[place] = true;
        while order[place] != start {
            let from = order[place];
            items.swap(place, from);
            place = from;
            placed[place] = true;
        }
    }
}

fn describe_no_tcp(summary: &InputSummary) -> String {
    let packets = summary.read.packets;
    if packets == 0 {
        return "it holds no packets".to_string();
    }
    let mut parts: Vec<String> = summary
        .skipped
        .by_reason
        .iter()
        .map(|(reason, n)| format!("{n} {}", reason.describe()))
        .collect();
    if summary.read.packets_unknown_interface > 0 {
        parts.push(format!(
            "{} on undeclared interfaces",
            summary.read.packets_unknown_interface
        ));
    }
    if summary.read.packets_on_interfaces_over_limit > 0 {
        parts.push(format!(
            "{} on interfaces past the first {MAX_INTERFACES} of a section",
            summary.read.packets_on_interfaces_over_limit
        ));
    }
    let only_link = summary
        .skipped
        .by_reason
        .keys()
        .all(|r| matches!(r, SkipReason::UnsupportedLinkType(_)));
    let hint = if only_link && !summary.skipped.by_reason.is_empty() {
        format!("; supported link types: {}", supported_link_types())
    } else {
        String::new()
    };
    format!("{packets} packets: {}{hint}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn putting_in_order_in_place_gives_what_taking_each_in_turn_gives() {
        // Every permutation of five, and longer ones drawn from a seeded generator.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut draw = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        let mut orders: Vec<Vec<usize>> = Vec::new();
        for n in [0, 1, 2, 5, 64, 1000] {
            for _ in 0..if n == 5 { 200 } else { 3 } {
                let mut order: Vec<usize> = (0..n).collect();
                for i in (1..n).rev() {
                    order.swap(i, draw(i + 1));
                }
                orders.push(order);
            }
        }
        for order in orders {
            let items: Vec<String> = (0..order.len()).map(|i| format!("item {i}")).collect();
            let expected: Vec<String> = order.iter().map(|&i| items[i].clone()).collect();
            let mut in_place = items;
            put_in_order(&mut in_place, &order);
            assert_eq!(in_place, expected, "order {order:?}");
        }
    }

    /// docs/memory-budget.md gives each thread's share of the open connections: held to
    /// the split the code makes.
    #[test]
    fn the_memory_budget_gives_the_split_between_the_threads() {
        let budget = include_str!("../../../../docs/memory-budget.md");
        let open = crate::flow::MAX_OPEN_CONNECTIONS;
        let thousands = |n: usize| format!("{},{:03}", n / 1000, n % 1000);
        let text = format!(
            "({} and {} of {BUCKETS} hash buckets: {} and {})",
            READER_BUCKETS,
            BUCKETS - READER_BUCKETS,
            thousands(open * READER_BUCKETS / BUCKETS),
            thousands(open * (BUCKETS - READER_BUCKETS) / BUCKETS),
        );
        assert!(
            budget.contains(&text),
            "docs/memory-budget.md should say \"{text}\""
        );
    }
}
