//! The pipeline of `tcpstall analyze`: capture → segments → flows → diagnoses.

use crate::detect::StallClass;
use std::cmp::Reverse;
use std::io::Read;
use std::net::IpAddr;
use std::sync::mpsc;

use std::path::PathBuf;

use crate::capture::{
    CaptureError, CaptureReader, Decoded, Decoder, FileError, FileNotes, FragmentCounts,
    MergedCaptures, MergedNotes, OnFileError, Packet, ProgressFn, ReadNotes, SkipCounts,
    SkipReason, expand_paths, supported_link_types,
};
use crate::detect::DetectConfig;
use crate::diagnosis::{ConnectionDiagnosis, diagnose};
use crate::flow::{FlowTable, bucket_of};
use crate::segment::{Nanos, Segment};
use crate::seq::SeqNumber;

/// Which connections to keep: those with an endpoint matching a host (when any is given)
/// and an endpoint matching a port (when any is given).
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub hosts: Vec<IpAddr>,
    pub ports: Vec<u16>,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.ports.is_empty()
    }

    #[inline]
    pub fn matches(&self, segment: &Segment) -> bool {
        if self.is_empty() {
            return true;
        }
        let host_ok = self.hosts.is_empty()
            || self.hosts.contains(&segment.src.ip())
            || self.hosts.contains(&segment.dst.ip());
        let port_ok = self.ports.is_empty()
            || self.ports.contains(&segment.src.port())
            || self.ports.contains(&segment.dst.port());
        host_ok && port_ok
    }
}

#[derive(Clone, Debug, Default)]
pub struct AnalyzeOptions {
    pub detect: DetectConfig,
    pub filter: Filter,
}

/// What was read, and what was not used and why.
#[derive(Clone, Debug, Default)]
pub struct InputSummary {
    pub source: String,
    pub read: ReadNotes,
    pub tcp_segments: u64,
    pub filtered_out: u64,
    pub duplicates: u64,
    /// Segments that arrived just after their connection closed (its last ACK).
    pub late_segments: u64,
    /// Connections ended because they fell silent, or because too many were open.
    pub connections_ended_idle: u64,
    pub skipped: SkipCounts,
    /// IP fragments seen, and those joined into whole datagrams.
    pub fragments: FragmentCounts,
    /// Each file, when several were read as one (empty for a single input).
    pub files: Vec<FileNotes>,
    pub first_time: Option<Nanos>,
    pub last_time: Option<Nanos>,
    pub warnings: Vec<String>,
    /// Packets of one file that another file holds too, at the same time with the same
    /// bytes (one file given twice, or one interface captured twice): left out.
    pub file_duplicates: u64,
    /// When several files saw the same traffic at different capture points: each
    /// point's name (its file, or its files), each analysed on its own.
    pub capture_points: Vec<String>,
}

/// The result of one analysis.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub input: InputSummary,
    /// Worst first: most time lost to TCP stalls, then most gaps, then by start time;
    /// at most [`MAX_LISTED_CONNECTIONS`].
    pub connections: Vec<ConnectionDiagnosis>,
    /// The connections beyond the listing limit (the least severe): only their totals.
    pub unlisted: UnlistedTotals,
    pub min_gap: Nanos,
}

impl Analysis {
    /// Every connection, listed or not.
    pub fn total_connections(&self) -> u64 {
        self.connections.len() as u64 + self.unlisted.connections
    }

    pub fn connections_with_stalls(&self) -> u64 {
        self.connections
            .iter()
            .filter(|c| c.stall_count > 0)
            .count() as u64
            + self.unlisted.connections_with_stalls
    }

    pub fn total_stalls(&self) -> u64 {
        self.connections
            .iter()
            .map(|c| c.stall_count as u64)
            .sum::<u64>()
            + self.unlisted.stalls
    }

    pub fn total_time_lost(&self) -> Nanos {
        self.connections.iter().map(|c| c.time_lost).sum::<Nanos>() + self.unlisted.time_lost
    }

    /// Gaps of each class over every connection: (count, total duration) by class index.
    pub fn gaps_by_class(&self) -> [(u64, Nanos); StallClass::COUNT] {
        let mut totals = self.unlisted.gaps_by_class;
        for c in &self.connections {
            add_gaps_by_class(&mut totals, c);
        }
        totals
    }
}

/// Adds the gaps of `d`, listed and counted, to `totals` (count, duration) by class index.
fn add_gaps_by_class(totals: &mut [(u64, Nanos); StallClass::COUNT], d: &ConnectionDiagnosis) {
    for (class, (count, duration)) in d.class_counts() {
        totals[class.index()].0 += count as u64;
        totals[class.index()].1 += duration;
    }
}

/// Connections listed in detail. Beyond this the least severe are only added to
/// totals, so memory stays bounded on captures of millions of connections.
pub const MAX_LISTED_CONNECTIONS: usize = 20_000;

/// Totals of the connections not listed.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnlistedTotals {
    pub connections: u64,
    pub connections_with_stalls: u64,
    pub stalls: u64,
    pub time_lost: Nanos,
    pub packets: u64,
    pub bytes: u64,
    /// (count, total duration) by class index.
    pub gaps_by_class: [(u64, Nanos); StallClass::COUNT],
}

impl UnlistedTotals {
    fn merge(&mut self, other: &UnlistedTotals) {
        self.connections += other.connections;
        self.connections_with_stalls += other.connections_with_stalls;
        self.stalls += other.stalls;
        self.time_lost += other.time_lost;
        self.packets += other.packets;
        self.bytes += other.bytes;
        for (total, (count, duration)) in self.gaps_by_class.iter_mut().zip(other.gaps_by_class) {
            total.0 += count;
            total.1 += duration;
        }
    }

    fn add(&mut self, d: &ConnectionDiagnosis) {
        self.connections += 1;
        self.connections_with_stalls += u64::from(d.stall_count > 0);
        self.stalls += d.stall_count as u64;
        self.time_lost += d.time_lost;
        self.packets += d.packets;
        self.bytes += d.bytes_client_to_server + d.bytes_server_to_client;
        add_gaps_by_class(&mut self.gaps_by_class, d);
    }
}

/// Each diagnosis's severity key with its index: ordering these instead of the large
/// diagnoses spares moving them through the sort.
fn severity_keys(diagnoses: &[ConnectionDiagnosis]) -> Vec<(SeverityKey, usize)> {
    diagnoses
        .iter()
        .enumerate()
        .map(|(i, d)| (severity_key(d), i))
        .collect()
}

/// The indices of `diagnoses`, most severe first. The order is total (no two
/// connections begin with the same packet), so an unstable sort gives it.
fn severity_ranking(diagnoses: &[ConnectionDiagnosis]) -> Vec<usize> {
    let mut keys = severity_keys(diagnoses);
    keys.sort_unstable();
    keys.into_iter().map(|(_, i)| i).collect()
}

/// Most severe first: time lost to stalls, then gaps, then the earliest; a total order,
/// so the report does not depend on which tracking thread saw which connection.
type SeverityKey = (Reverse<Nanos>, Reverse<usize>, Nanos, u64);

fn severity_key(d: &ConnectionDiagnosis) -> SeverityKey {
    (
        Reverse(d.time_lost),
        Reverse(d.gap_count()),
        d.first_time,
        d.first_packet,
    )
}

/// Gaps listed one by one over all listed connections (208 bytes each); beyond this the
/// least severe connections keep only their gaps' counts.
pub const MAX_LISTED_GAPS: usize = 200_000;

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

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{0}")]
    Capture(#[from] CaptureError),
    /// One of several files (its path is in the message).
    #[error("{0}")]
    File(#[from] FileError),
    /// None of several files could be read: each one's problem.
    #[error("no file could be read: {0}")]
    NoFileRead(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("no TCP segments in the capture ({0})")]
    NoTcp(String),
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

/// How several capture files are read.
#[derive(Clone, Default)]
pub struct FileOptions {
    pub on_error: OnFileError,
    /// Told the bytes read from the files as they are read (a progress bar).
    pub progress: Option<ProgressFn>,
}

/// Reads capture files (directories: the files in them) as one capture, merged in time
/// order, and diagnoses every TCP connection in them: a connection that continues from
/// one file into the next is one connection.
///
/// Packets one file holds that another holds too, at the same time with the same bytes,
/// are left out and counted. Files that saw the same traffic at different capture points
/// (the same segments at different times) are not merged: the files are split into
/// capture points, each is analysed on its own, and their connections are reported
/// together, each labelled with its capture point.
pub fn analyze_files(
    paths: &[PathBuf],
    options: &AnalyzeOptions,
    files: &FileOptions,
) -> Result<Analysis, AnalyzeError> {
    let paths = expand_paths(paths)?;
    let (whole, points) = analyze_merged(&paths, options, files, paths.len() > 1)?;
    if points.len() <= 1 {
        return Ok(whole);
    }
    // The files are read again, one capture point at a time; the progress is that of
    // the first reading.
    let again = FileOptions {
        on_error: files.on_error,
        progress: None,
    };
    let mut analyses = Vec::with_capacity(points.len());
    for point in &points {
        let point_paths: Vec<PathBuf> = point.iter().map(|&i| paths[i].clone()).collect();
        let label: std::sync::Arc<str> = describe_files(&point_paths).into();
        let (analysis, _) = analyze_merged(&point_paths, options, &again, false)?;
        analyses.push((label, analysis));
    }
    Ok(combine_points(whole, analyses))
}

/// Files named in a report: the one, or how many with the first and the last.
fn describe_files(paths: &[PathBuf]) -> String {
    match paths {
        [one] => one.display().to_string(),
        [first, .., last] => format!(
            "{} files ({} ... {})",
            paths.len(),
            first.display(),
            last.display()
        ),
        [] => String::new(),
    }
}

/// Reads `paths` merged in time order, exact copies across files left out; with
/// `recognise`, also says which files saw the same traffic at different points: the
/// capture points, each a list of file indices (one list when there is no such pair).
fn analyze_merged(
    paths: &[PathBuf],
    options: &AnalyzeOptions,
    files: &FileOptions,
    recognise: bool,
) -> Result<(Analysis, Vec<Vec<usize>>), AnalyzeError> {
    let source = describe_files(paths);
    let merged = MergedCaptures::open(paths.to_vec(), files.on_error, files.progress.clone())?;
    let mut watch = FileWatch::new(paths.len(), recognise);
    let mut analysis = pipeline(&source, options, |intake| {
        let merged = merged.for_each_file_packet(|file, alone, packet| {
            // A file read alone has no packet in common with another, but at the time
            // of the last packet another file gave (that file ended there).
            if alone && packet.time != watch.same_time {
                intake.packet(packet);
                return;
            }
            if watch.duplicate(file, packet) {
                return;
            }
            if intake.packet(packet) {
                watch.segment(file, &intake.segment);
            }
        })?;
        merged_input(merged)
    })?;
    analysis.input.file_duplicates = watch.duplicates;
    Ok((analysis, watch.capture_points()))
}

/// The analyses of each capture point as one report: their connections together, each
/// labelled with its point; the input as the first reading of every file saw it.
fn combine_points(whole: Analysis, points: Vec<(std::sync::Arc<str>, Analysis)>) -> Analysis {
    let mut input = whole.input;
    input.duplicates = 0;
    input.late_segments = 0;
    input.connections_ended_idle = 0;
    input.capture_points = points.iter().map(|(label, _)| label.to_string()).collect();
    let mut unlisted = UnlistedTotals::default();
    let mut keyed = Vec::new();
    let mut diagnoses = Vec::new();
    for (index, (label, analysis)) in points.into_iter().enumerate() {
        input.duplicates += analysis.input.duplicates;
        input.late_segments += analysis.input.late_segments;
        input.connections_ended_idle += analysis.input.connections_ended_idle;
        unlisted.merge(&analysis.unlisted);
        for mut d in analysis.connections {
            d.capture_point = Some(label.clone());
            keyed.push(((severity_key(&d), index), diagnoses.len()));
            diagnoses.push(d);
        }
    }
    // Most severe first; a connection seen at two points, with the same key at each,
    // is listed in the order of the points.
    keyed.sort_unstable();
    let mut slots: Vec<Option<ConnectionDiagnosis>> = diagnoses.into_iter().map(Some).collect();
    let mut connections = Vec::with_capacity(keyed.len().min(MAX_LISTED_CONNECTIONS));
    for (_, i) in keyed {
        let Some(d) = slots[i].take() else { continue };
        if connections.len() < MAX_LISTED_CONNECTIONS {
            connections.push(d);
        } else {
            unlisted.add(&d);
        }
    }
    Analysis {
        input,
        connections,
        unlisted,
        min_gap: whole.min_gap,
    }
}

/// Two files saw the same traffic at different points when this many segments of one
/// are in the other at another time, both files being read together (they overlap in
/// time). A segment sent again looks the same, but only within one file or across the
/// end of one file and the start of the next (a ring), which are read one after the
/// other; a few matches are kept apart from chance by the sequence and acknowledgment
/// numbers, which repeat only after 4 GB.
const SAME_TRAFFIC_MATCHES: u64 = 4;
/// Segments remembered to find them in another file: two windows of this many each, so
/// that a point may see a segment up to this many compared segments later than another
/// (with 1 in 256 compared, a window of 2^14 covers some 4 million segments, seconds of
/// a busy link, far more than the delay between two capture points of one path).
const SAME_TRAFFIC_WINDOW: usize = 1 << 14;
/// Packets at one timestamp compared for exact copies, at most.
const SAME_TIME_PACKETS: usize = 4096;
/// Bytes of a packet compared for exact copies, with its length: its link, IP and TCP
/// headers (Ethernet 14 and a VLAN tag 4, IPv6 40, TCP 20 with room for options: 96),
/// whose TCP checksum covers the rest. Hashing the whole of every packet would make
/// reading several files twice as slow.
const COMPARED_BYTES: usize = 96;
/// Each file's first segments are all looked for in the other files...
const FULLY_COMPARED: u64 = 1024;
/// ...and beyond them only those whose sequence and acknowledgment numbers have these
/// bits clear (1 in 256): the same segments at every capture point, so two points that
/// saw the same traffic still meet [`SAME_TRAFFIC_MATCHES`] of them, while a ring of
/// many files is read almost as fast as one file.
const SAMPLE_MASK: u32 = 255;

/// What identifies a segment wherever it is seen on its path: everything in its TCP
/// header the path does not change.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SegmentKey {
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    seq: SeqNumber,
    ack: SeqNumber,
    flags: u8,
    window: u16,
    len: u32,
    timestamps: Option<(u32, u32)>,
    tunnel: u32,
}

/// Watches the packets of several files as they are merged: drops exact copies, and
/// finds files that saw the same segments at different times.
struct FileWatch {
    recognise: bool,
    current: rustc_hash::FxHashMap<SegmentKey, (usize, Nanos)>,
    previous: rustc_hash::FxHashMap<SegmentKey, (usize, Nanos)>,
    /// Segments seen in both files of a pair (lower index first) at different times.
    matches: rustc_hash::FxHashMap<(usize, usize), u64>,
    /// The packets at the latest time: their file and a hash of their bytes.
    same_time: Nanos,
    same_time_packets: Vec<(usize, u64)>,
    duplicates: u64,
    /// Segments seen in each file.
    segments: Vec<u64>,
}

impl FileWatch {
    fn new(files: usize, recognise: bool) -> FileWatch {
        FileWatch {
            recognise,
            current: Default::default(),
            previous: Default::default(),
            matches: Default::default(),
            same_time: Nanos::MIN,
            same_time_packets: Vec::new(),
            duplicates: 0,
            segments: vec![0; files],
        }
    }

    /// True when another file read together with this one holds this packet at the same
    /// time with the same bytes (its length and headers, checksums included, compared;
    /// the merge hands over the packets of one time file after file).
    fn duplicate(&mut self, file: usize, packet: &Packet<'_>) -> bool {
        use std::hash::BuildHasher;
        let head = &packet.data[..packet.data.len().min(COMPARED_BYTES)];
        let hash = rustc_hash::FxBuildHasher.hash_one((
            head,
            packet.data.len(),
            packet.wire_len,
            packet.link_type,
        ));
        if packet.time != self.same_time {
            self.same_time = packet.time;
            self.same_time_packets.clear();
        } else if self
            .same_time_packets
            .iter()
            .any(|&(f, h)| f != file && h == hash)
        {
            self.duplicates += 1;
            return true;
        }
        if self.same_time_packets.len() < SAME_TIME_PACKETS {
            self.same_time_packets.push((file, hash));
        }
        false
    }

    /// Notes a segment of `file`, and whether another file saw it at another time.
    fn segment(&mut self, file: usize, segment: &Segment) {
        if !self.recognise {
            return;
        }
        let Some(seen_in_file) = self.segments.get_mut(file) else {
            return;
        };
        *seen_in_file += 1;
        if *seen_in_file > FULLY_COMPARED && (segment.seq.0 ^ segment.ack.0) & SAMPLE_MASK != 0 {
            return;
        }
        let key = SegmentKey {
            src: segment.src,
            dst: segment.dst,
            seq: segment.seq,
            ack: segment.ack,
            flags: segment.flags.0,
            window: segment.window,
            len: segment.payload_len,
            timestamps: segment.options.timestamps,
            tunnel: segment.tunnel,
        };
        let seen = self.current.get(&key).or_else(|| self.previous.get(&key));
        match seen {
            Some(&(other, time)) => {
                if other != file && time != segment.time {
                    *self
                        .matches
                        .entry((other.min(file), other.max(file)))
                        .or_default() += 1;
                }
            }
            None => {
                if self.current.len() >= SAME_TRAFFIC_WINDOW {
                    // The older window goes; its room is used again.
                    std::mem::swap(&mut self.previous, &mut self.current);
                    self.current.clear();
                }
                self.current.insert(key, (file, segment.time));
            }
        }
    }

    /// The files split into capture points: each file joins the first point holding no
    /// file that saw the same traffic as it.
    fn capture_points(&self) -> Vec<Vec<usize>> {
        let apart = |a: usize, b: usize| {
            let pair = (a.min(b), a.max(b));
            self.matches.get(&pair).copied().unwrap_or(0) >= SAME_TRAFFIC_MATCHES
        };
        let mut points: Vec<Vec<usize>> = Vec::new();
        for file in 0..self.segments.len() {
            match points
                .iter_mut()
                .find(|point| point.iter().all(|&other| !apart(file, other)))
            {
                Some(point) => point.push(file),
                None => points.push(vec![file]),
            }
        }
        points
    }
}

/// What the reading of the input gave, besides its packets.
struct InputRead {
    read: ReadNotes,
    files: Vec<FileNotes>,
    warnings: Vec<String>,
}

/// The notes of several files as those of one input, and the warnings of each; an error
/// when no file gave a packet and some could not be read.
fn merged_input(merged: MergedNotes) -> Result<InputRead, AnalyzeError> {
    let mut read = ReadNotes::default();
    let mut warnings = Vec::new();
    let mut failed = Vec::new();
    let formats: Vec<_> = merged.files.iter().filter_map(|f| f.notes.format).collect();
    read.format = formats
        .first()
        .copied()
        .filter(|f| formats.iter().all(|g| g == f));
    let compressions: Vec<_> = merged.files.iter().map(|f| f.notes.compression).collect();
    read.compression = compressions
        .first()
        .copied()
        .flatten()
        .filter(|c| compressions.iter().all(|d| *d == Some(*c)));
    for file in &merged.files {
        let notes = &file.notes;
        read.packets += notes.packets;
        read.bytes_read += notes.bytes_read;
        read.packets_without_timestamp += notes.packets_without_timestamp;
        read.packets_unknown_interface += notes.packets_unknown_interface;
        read.packets_time_out_of_range += notes.packets_time_out_of_range;
        warnings.extend(read_warnings(notes, Some(&file.path)));
        if let Some(error) = &file.error {
            failed.push(format!("{}: {error}", file.path.display()));
        }
    }
    if read.packets == 0 && !failed.is_empty() {
        return Err(AnalyzeError::NoFileRead(failed.join("; ")));
    }
    for failure in failed {
        warnings.push(format!("{failure}; the other files were read"));
    }
    if merged.out_of_order_files > 0 {
        warnings.push(format!(
            "{} files began before the merge reached them (more than 64 files overlap in time): their packets came out of time order",
            merged.out_of_order_files
        ));
    }
    Ok(InputRead {
        read,
        files: merged.files,
        warnings,
    })
}

/// Warnings about what reading one capture noticed; `path` names it among several.
fn read_warnings(read: &ReadNotes, path: Option<&std::path::Path>) -> Vec<String> {
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
struct Intake<'a> {
    summary: &'a mut InputSummary,
    decoder: Decoder,
    local: Tracker,
    batch: Batch,
    batches: mpsc::SyncSender<Batch>,
    recycled: mpsc::Receiver<Batch>,
    /// The filter, none when it lets every segment through (decided once, not per packet).
    filter: Option<&'a Filter>,
    /// Where each packet is decoded, in place.
    segment: Segment,
    /// The earliest and latest packet times so far ([`Nanos::MAX`] and [`Nanos::MIN`]
    /// before the first packet); the summary is given them at the end.
    first_time: Nanos,
    last_time: Nanos,
}

impl Intake<'_> {
    /// Takes one packet; true when it was a TCP segment (then in `self.segment`).
    #[inline(always)]
    fn packet(&mut self, packet: &Packet<'_>) -> bool {
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
fn pipeline(
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
    let (read, fragments, local, tracked) = std::thread::scope(|scope| {
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
        (read, decoder.fragment_counts(), local, remote.join())
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
    // Each diagnosis moved once, into its place.
    let order = severity_ranking(&collector.diagnoses);
    let mut slots: Vec<Option<ConnectionDiagnosis>> =
        collector.diagnoses.into_iter().map(Some).collect();
    let diagnoses: Vec<ConnectionDiagnosis> =
        order.into_iter().filter_map(|i| slots[i].take()).collect();
    Ok(Analysis {
        input: summary,
        connections: diagnoses,
        unlisted: collector.unlisted,
        min_gap: options.detect.min_gap,
    })
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
