//! Several capture files read as one input: merged in time order, exact copies across
//! files left out, and files that saw the same traffic at different capture points
//! analysed one point at a time.

use std::path::PathBuf;

use super::pipeline::{pipeline, read_warnings};
use super::traces::TraceWatch;
use super::{
    Analysis, AnalyzeError, AnalyzeOptions, InputRead, MAX_LISTED_CONNECTIONS, UnlistedTotals,
    severity_key,
};
use crate::capture::{
    MergedCaptures, MergedNotes, OnFileError, Packet, ProgressFn, ReadNotes, expand_paths,
};
use crate::diagnosis::ConnectionDiagnosis;
use crate::segment::{Nanos, Segment};
use crate::seq::SeqNumber;

/// How several capture files are read.
#[derive(Clone, Default)]
pub struct FileOptions {
    pub on_error: OnFileError,
    /// Told the bytes read from the files as they are read (a progress bar).
    pub progress: Option<ProgressFn>,
    /// Read the files as one capture even when they are not one trace (see
    /// [`NotOneTrace`](super::NotOneTrace)).
    pub join: bool,
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
///
/// Files that are not one trace (no host address in common, packets more than a day
/// apart) are refused unless `files.join`. A directory's files that are no capture (by
/// their first bytes) are left out, in one warning.
pub fn analyze_files(
    paths: &[PathBuf],
    options: &AnalyzeOptions,
    files: &FileOptions,
) -> Result<Analysis, AnalyzeError> {
    let expanded = expand_paths(paths)?;
    let paths = expanded.files.clone();
    let (mut whole, points, traces) = analyze_merged(&paths, options, files, paths.len() > 1)?;
    if !files.join
        && let Some(apart) = traces.not_one_trace(&paths)
    {
        return Err(AnalyzeError::NotOneTrace(apart));
    }
    if let Some(skipped) = expanded.skipped_warning() {
        whole.input.warnings.insert(0, skipped.clone());
    }
    if points.len() <= 1 {
        return Ok(whole);
    }
    // The files are read again, one capture point at a time; the progress is that of
    // the first reading.
    let again = FileOptions {
        on_error: files.on_error,
        progress: None,
        join: true,
    };
    let mut analyses = Vec::with_capacity(points.len());
    for point in &points {
        let point_paths: Vec<PathBuf> = point.iter().map(|&i| paths[i].clone()).collect();
        let label: std::sync::Arc<str> = describe_files(&point_paths).into();
        let (analysis, _, _) = analyze_merged(&point_paths, options, &again, false)?;
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
/// capture points, each a list of file indices (one list when there is no such pair),
/// and the files' spans and hosts, to tell whether they are one trace.
fn analyze_merged(
    paths: &[PathBuf],
    options: &AnalyzeOptions,
    files: &FileOptions,
    recognise: bool,
) -> Result<(Analysis, Vec<Vec<usize>>, TraceWatch), AnalyzeError> {
    let source = describe_files(paths);
    let merged = MergedCaptures::open(paths.to_vec(), files.on_error, files.progress.clone())?;
    let mut watch = FileWatch::new(paths.len(), recognise);
    let mut traces = TraceWatch::new(if recognise { paths.len() } else { 0 });
    let mut analysis = pipeline(&source, options, |intake| {
        let merged = merged.for_each_file_packet(|file, alone, packet| {
            // A file read alone has no packet in common with another, but at the time
            // of the last packet another file gave (that file ended there).
            if alone && packet.time != watch.same_time {
                if intake.packet(packet) {
                    traces.segment(file, &intake.segment);
                }
                return;
            }
            if watch.duplicate(file, packet) {
                return;
            }
            if intake.packet(packet) {
                traces.segment(file, &intake.segment);
                watch.segment(file, &intake.segment);
            }
        })?;
        merged_input(merged)
    })?;
    analysis.input.file_duplicates = watch.duplicates;
    Ok((analysis, watch.capture_points(), traces))
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
        read.interfaces_over_limit += notes.interfaces_over_limit;
        read.packets_on_interfaces_over_limit += notes.packets_on_interfaces_over_limit;
        read.packets_fraction_over_a_second += notes.packets_fraction_over_a_second;
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
