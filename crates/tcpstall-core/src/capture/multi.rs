//! Many capture files read as one: files named one by one, directories of them, and the
//! rings `tcpdump -C`, `-G` and `-W` write, merged packet by packet in time order so
//! that a connection spanning several files is seen whole.
//!
//! Each file is first opened just far enough to learn its first packet's time; the files
//! are then read in that order, a file joining the merge when the merged stream reaches
//! its first packet. Files written one after the other (a ring) are so read one at a
//! time, as fast as a single file; files that overlap in time (two interfaces, two
//! capture points) are interleaved. Compressed files decompress on threads of their own.
//! A file that cannot be read is named, and the others are read on (or the run stops).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::capture::{CaptureError, CaptureReader, Packet, ReadNotes, ReadStep, is_capture_magic};
use crate::segment::Nanos;

/// Files read at once at most; files beyond this that overlap in time with all of them
/// join when one ends, and their packets may then come out of time order.
const MAX_OPEN_FILES: usize = 64;
/// Read buffer of a file opened to learn its first packet's time.
const PEEK_BUFFER_BYTES: usize = 1 << 16;
/// Entries of a directory looked at, at most.
const MAX_DIRECTORY_ENTRIES: usize = 1 << 20;

/// What to do when a file cannot be read, or turns out corrupt part-way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFileError {
    /// Say which file and why, and read the others (the packets before the problem count).
    #[default]
    Continue,
    /// Stop the run at the first problem.
    Stop,
}

/// Called with the number of bytes read from the files, as they are read.
pub type ProgressFn = Arc<dyn Fn(u64) + Send + Sync>;

/// A file that could not be read, or not to its end.
#[derive(Debug)]
pub struct FileError {
    pub path: PathBuf,
    pub error: CaptureError,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for FileError {}

/// What became of one file.
#[derive(Clone, Debug)]
pub struct FileNotes {
    pub path: PathBuf,
    pub notes: ReadNotes,
    /// Why the file could not be read, or not to its end.
    pub error: Option<String>,
}

/// The files named on a command line, and the directory entries left out.
#[derive(Clone, Debug, Default)]
pub struct ExpandedPaths {
    pub files: Vec<PathBuf>,
    /// Files in a directory given whose first bytes are no capture's: not read.
    pub skipped: Vec<PathBuf>,
}

impl ExpandedPaths {
    /// The one warning for the directory entries left out, when there are any.
    pub fn skipped_warning(&self) -> Option<String> {
        let first = self.skipped.first()?;
        let n = self.skipped.len();
        Some(if n == 1 {
            format!(
                "1 file in a directory given was not read: {} does not start as a capture does (pcap, pcapng, gzip or zstd)",
                first.display()
            )
        } else {
            format!(
                "{n} files in the directories given were not read: they do not start as a capture does (pcap, pcapng, gzip or zstd), for example {}",
                first.display()
            )
        })
    }
}

/// The files named on a command line: each file as it is, each directory as its files
/// (not hidden, not in subdirectories) in name order, those whose first bytes are a
/// capture's magic number (pcap, pcapng, gzip, zstd) whatever they are called; the
/// others are left out, and listed. A file named on its own is read whatever it holds
/// (one that is no capture is then said so).
pub fn expand_paths(paths: &[PathBuf]) -> Result<ExpandedPaths, FileError> {
    let mut expanded = ExpandedPaths::default();
    for path in paths {
        let is_dir = path.is_dir();
        if !is_dir {
            expanded.files.push(path.clone());
            continue;
        }
        let entries = std::fs::read_dir(path).map_err(|e| FileError {
            path: path.clone(),
            error: CaptureError::Io(e),
        })?;
        let mut inside: Vec<PathBuf> = entries
            .take(MAX_DIRECTORY_ENTRIES)
            .filter_map(|entry| entry.ok())
            .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
            .map(|entry| entry.path())
            .filter(|p| p.is_file())
            .collect();
        inside.sort_by(|a, b| natural_order(a, b));
        if inside.is_empty() {
            return Err(FileError {
                path: path.clone(),
                error: CaptureError::Empty,
            });
        }
        let (captures, others): (Vec<PathBuf>, Vec<PathBuf>) =
            inside.into_iter().partition(|p| starts_as_a_capture(p));
        if captures.is_empty() {
            return Err(FileError {
                path: path.clone(),
                error: CaptureError::NotACapture {
                    detail: format!(
                        "a directory none of whose {} files starts as a capture does (pcap, pcapng, gzip or zstd)",
                        others.len()
                    ),
                },
            });
        }
        expanded.files.extend(captures);
        expanded.skipped.extend(others);
    }
    Ok(expanded)
}

/// Whether a file's first bytes are a capture's or a compressed stream's magic number.
/// A file that cannot be opened counts as one, so that its reading names the problem.
fn starts_as_a_capture(path: &Path) -> bool {
    let mut head = [0u8; 4];
    let Ok(mut file) = File::open(path) else {
        return true;
    };
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    is_capture_magic(&head[..got])
}

/// Names compared with their runs of digits as numbers, so that `trace9` comes before
/// `trace10` (the order `tcpdump -C` numbers its files in).
fn natural_order(a: &Path, b: &Path) -> std::cmp::Ordering {
    let key = |p: &Path| {
        let name = p.to_string_lossy().into_owned();
        let mut parts: Vec<(String, u128)> = Vec::new();
        let mut text = String::new();
        let mut digits = String::new();
        for c in name.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
            } else {
                if !digits.is_empty() {
                    parts.push((
                        std::mem::take(&mut text),
                        digits.parse().unwrap_or(u128::MAX),
                    ));
                    digits.clear();
                }
                text.push(c);
            }
        }
        parts.push((text, digits.parse().unwrap_or(0)));
        parts
    };
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}

/// A file's raw bytes, counted into the progress as they are read.
struct Counted {
    file: File,
    progress: Option<ProgressFn>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        if let Some(progress) = &self.progress {
            progress(n as u64);
        }
        Ok(n)
    }
}

fn open(path: &Path, progress: Option<ProgressFn>) -> Result<CaptureReader, CaptureError> {
    let file = File::open(path)?;
    CaptureReader::new(Counted { file, progress })
}

/// Opens a file only to learn when its first packet is: a small buffer is enough, and
/// the file's bytes are read (and the buffer cleared) once more when its turn comes.
fn peek(path: &Path) -> Result<CaptureReader, CaptureError> {
    let file = File::open(path)?;
    CaptureReader::with_buffer(
        Counted {
            file,
            progress: None,
        },
        PEEK_BUFFER_BYTES,
    )
}

/// One file waiting its turn: when its first packet is.
struct Waiting {
    index: usize,
    first_time: Nanos,
}

/// One file being read.
struct Open {
    index: usize,
    reader: CaptureReader,
}

impl Open {
    /// Its next packet's time and its place, the order the merge takes packets in.
    fn next(&self) -> (Nanos, usize) {
        (self.reader.next_time().unwrap_or(Nanos::MAX), self.index)
    }
}

/// Capture files read as one stream of packets in time order.
pub struct MergedCaptures {
    paths: Vec<PathBuf>,
    notes: Vec<FileNotes>,
    waiting: VecDeque<Waiting>,
    on_error: OnFileError,
    progress: Option<ProgressFn>,
    /// Files opened after the merge had passed their first packet (more than
    /// [`MAX_OPEN_FILES`] overlapped in time).
    out_of_order_files: usize,
}

impl MergedCaptures {
    /// Looks at each file's first packet. Files that cannot be read are noted (or, with
    /// [`OnFileError::Stop`], end it here).
    pub fn open(
        paths: Vec<PathBuf>,
        on_error: OnFileError,
        progress: Option<ProgressFn>,
    ) -> Result<MergedCaptures, FileError> {
        let mut notes = Vec::with_capacity(paths.len());
        let mut waiting = Vec::with_capacity(paths.len());
        for (index, path) in paths.iter().enumerate() {
            let first = peek(path).and_then(|mut reader| {
                let step = reader.read_until(Nanos::MIN, &mut |_| {})?;
                Ok((step, reader.next_time(), reader.notes().clone()))
            });
            let mut file_notes = FileNotes {
                path: path.clone(),
                notes: ReadNotes::default(),
                error: None,
            };
            match first {
                Ok((ReadStep::Paused, Some(first_time), _)) => {
                    waiting.push(Waiting { index, first_time })
                }
                // No packet at all: nothing to merge, and nothing wrong with it.
                Ok((_, _, read)) => file_notes.notes = read,
                Err(error) => {
                    if on_error == OnFileError::Stop {
                        return Err(FileError {
                            path: path.clone(),
                            error,
                        });
                    }
                    file_notes.error = Some(error.to_string());
                }
            }
            notes.push(file_notes);
        }
        waiting.sort_by_key(|w| (w.first_time, w.index));
        Ok(MergedCaptures {
            paths,
            notes,
            waiting: waiting.into(),
            on_error,
            progress,
            out_of_order_files: 0,
        })
    }

    /// Calls `on_packet` for every packet of every file in time order (ties: the file
    /// named first), numbered from 1 across all of them; returns what became of each file.
    pub fn for_each_packet(
        self,
        mut on_packet: impl FnMut(&Packet<'_>),
    ) -> Result<MergedNotes, FileError> {
        self.for_each_file_packet(|_, _, packet| on_packet(packet))
    }

    /// As [`for_each_packet`](Self::for_each_packet), each packet with the index of
    /// the file it came from (in the order the paths were given), and whether that file
    /// was the only one open: then no other file has a packet at its time (the files of
    /// a ring are read so, one after the other).
    pub fn for_each_file_packet(
        mut self,
        mut on_packet: impl FnMut(usize, bool, &Packet<'_>),
    ) -> Result<MergedNotes, FileError> {
        let mut open_files: Vec<Open> = Vec::new();
        // Packets numbered so far (as each file counts them), and the time of the last
        // packet a read ended with.
        let mut handed: u64 = 0;
        let mut latest = Nanos::MIN;
        // Each turn ends a file, or reads up to the next packet of another one (a file
        // with packets left always has one, so the merge moves on every turn).
        loop {
            let frontier = open_files.iter().map(Open::next).min();
            while let Some(next) = self.waiting.front() {
                let due = frontier.is_none_or(|(time, _)| next.first_time <= time);
                if !due {
                    break;
                }
                if open_files.len() >= MAX_OPEN_FILES {
                    break;
                }
                let Some(next) = self.waiting.pop_front() else {
                    break;
                };
                if next.first_time < latest {
                    self.out_of_order_files += 1;
                }
                if let Some(reader) = self.reopen(next.index)? {
                    open_files.push(Open {
                        index: next.index,
                        reader,
                    });
                }
            }
            let Some(current) = (0..open_files.len()).min_by_key(|&i| open_files[i].next()) else {
                if self.waiting.is_empty() {
                    break;
                }
                continue;
            };
            let index = open_files[current].index;
            // Read on until another file's next packet comes first (ties go to the file
            // named first).
            let others = open_files
                .iter()
                .filter(|o| o.index != index)
                .map(Open::next)
                .chain(
                    self.waiting
                        .front()
                        .filter(|_| open_files.len() < MAX_OPEN_FILES)
                        .map(|w| (w.first_time, w.index)),
                );
            let until = others
                .map(|(time, other)| if other > index { time } else { time - 1 })
                .min()
                .unwrap_or(Nanos::MAX);
            // The file numbers its packets on from those of the files read before; the
            // packets go straight to `on_packet`, with nothing between them.
            let alone = open_files.len() == 1;
            let reader = &mut open_files[current].reader;
            let before = reader.notes().packets;
            reader.number_next_as(handed + 1);
            let step = reader.read_until(until, &mut |packet| on_packet(index, alone, packet));
            if reader.notes().packets > before {
                handed += reader.notes().packets - before;
                latest = latest.max(reader.last_time());
            }
            match step {
                Ok(ReadStep::Paused) => {}
                Ok(ReadStep::Finished) => {
                    let done = open_files.swap_remove(current);
                    self.notes[index].notes = done.reader.notes().clone();
                }
                Err(error) => {
                    let done = open_files.swap_remove(current);
                    self.notes[index].notes = done.reader.notes().clone();
                    self.fail(index, error)?;
                }
            }
        }
        Ok(MergedNotes {
            files: self.notes,
            out_of_order_files: self.out_of_order_files,
        })
    }

    /// Opens a file again for the merge, and reads up to its first packet.
    fn reopen(&mut self, index: usize) -> Result<Option<CaptureReader>, FileError> {
        let path = &self.paths[index];
        let opened = open(path, self.progress.clone()).and_then(|mut reader| {
            reader.read_until(Nanos::MIN, &mut |_| {})?;
            Ok(reader)
        });
        match opened {
            Ok(reader) => Ok(Some(reader)),
            Err(error) => {
                self.fail(index, error)?;
                Ok(None)
            }
        }
    }

    fn fail(&mut self, index: usize, error: CaptureError) -> Result<(), FileError> {
        if self.on_error == OnFileError::Stop {
            return Err(FileError {
                path: self.paths[index].clone(),
                error,
            });
        }
        self.notes[index].error = Some(error.to_string());
        Ok(())
    }
}

/// What became of each file of a merge.
#[derive(Clone, Debug, Default)]
pub struct MergedNotes {
    pub files: Vec<FileNotes>,
    /// Files that overlapped in time with `MAX_OPEN_FILES` others and were read late.
    pub out_of_order_files: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcap file of raw IP link type holding one tiny record at each of `times`.
    fn capture_at(dir: &Path, name: &str, times: &[Nanos]) -> PathBuf {
        let path = dir.join(name);
        let mut writer =
            crate::capture::PcapWriter::with_link_type(Vec::new(), 0, 101).expect("header");
        for &time in times {
            writer.write_frame(time, &[0x45], 1).expect("record");
        }
        std::fs::write(&path, writer.into_inner()).expect("write");
        path
    }

    #[test]
    fn interleaved_files_number_their_packets_across_all_of_them() {
        let dir = std::env::temp_dir().join(format!("tcpstall-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let paths = vec![
            capture_at(&dir, "a.pcap", &[10, 30, 50, 60]),
            capture_at(&dir, "b.pcap", &[20, 40]),
            capture_at(&dir, "c.pcap", &[70]),
        ];
        let merged = MergedCaptures::open(paths, OnFileError::Stop, None).expect("open");
        let mut seen = Vec::new();
        let notes = merged
            .for_each_packet(|packet| seen.push((packet.number, packet.time)))
            .expect("read");
        std::fs::remove_dir_all(&dir).ok();
        let expected: Vec<(u64, Nanos)> = vec![
            (1, 10),
            (2, 20),
            (3, 30),
            (4, 40),
            (5, 50),
            (6, 60),
            (7, 70),
        ];
        assert_eq!(seen, expected);
        let counts: Vec<u64> = notes.files.iter().map(|f| f.notes.packets).collect();
        assert_eq!(counts, [4, 2, 1]);
        assert_eq!(notes.out_of_order_files, 0);
    }

    #[test]
    fn ring_file_names_sort_by_their_numbers() {
        let mut names: Vec<PathBuf> = ["t.pcap10", "t.pcap9", "t.pcap", "t.pcap1", "a.pcap"]
            .iter()
            .map(PathBuf::from)
            .collect();
        names.sort_by(|a, b| natural_order(a, b));
        let names: Vec<String> = names.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            ["a.pcap", "t.pcap", "t.pcap1", "t.pcap9", "t.pcap10"]
        );
    }
}
