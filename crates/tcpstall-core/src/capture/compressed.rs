//! Compressed captures: gzip (`.pcap.gz`, `.pcapng.gz`) and zstd (`.zst`), recognised
//! by their magic bytes whatever the file is called, from a file or a pipe.
//!
//! Decompression runs on a thread of its own, a few chunks ahead of the reader, so that
//! inflating and reading packets share the machine's cores. A stream that ends early or
//! turns corrupt after some data ends the input there, like a capture cut off mid-write:
//! the packets before it are analysed and a warning says what happened.
//!
//! A stream may expand only so far: [`DEFAULT_MAX_EXPANSION`] decompressed bytes for each
//! compressed byte read, beyond the first [`EXPANSION_FLOOR_BYTES`]. A stream that expands
//! further (a decompression bomb) is refused. The decoders do work in proportion to what
//! they read and write, so the bound on the output bounds the time a bomb can cost too.

use std::cell::Cell;
use std::io::{self, BufRead, BufReader, Read};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use flate2::bufread::MultiGzDecoder;
use ruzstd::decoding::FrameDecoder;
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};

/// The compression a capture came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Zstd,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    /// The compression whose magic number `head` starts with (RFC 1952 2.3.1: 1f 8b;
    /// RFC 8878 3.1.1: 28 b5 2f fd, and 3.1.2: skippable frames 5? 2a 4d 18).
    pub fn from_magic(head: &[u8]) -> Option<Compression> {
        match head {
            [0x1f, 0x8b, ..] => Some(Compression::Gzip),
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Some(Compression::Zstd),
            [low, 0x2a, 0x4d, 0x18, ..] if low & 0xf0 == 0x50 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// Decompressed bytes allowed per compressed byte, unless told otherwise: ten times more
/// than deflate can reach at all (about 1032 to 1), far beyond any capture's (2 to 20).
pub const DEFAULT_MAX_EXPANSION: u64 = 1000;
/// Decompressed bytes any stream may produce, whatever its size.
pub const EXPANSION_FLOOR_BYTES: u64 = 64 << 20;
/// The ratio in force for every compressed capture this process reads (0: no limit). A
/// setting of the whole run, as a resource limit is: the reads of the report's second
/// pass and of the annotated copy obey the same one.
static MAX_EXPANSION: AtomicU64 = AtomicU64::new(DEFAULT_MAX_EXPANSION);

/// Sets how far a compressed capture may expand: `Some(ratio)` decompressed bytes per
/// compressed byte read (beyond [`EXPANSION_FLOOR_BYTES`]), `None` for no limit.
pub fn set_max_expansion(ratio: Option<u64>) {
    MAX_EXPANSION.store(ratio.map_or(0, |r| r.max(1)), Ordering::Relaxed);
}

/// How a compressed stream ended before its end: shared with the decompressing thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// Cut off or corrupt after some data: what came before is read, with a warning.
    Cut(String),
    /// It expanded past the limit: the capture is refused.
    OverExpansionLimit(String),
}

/// Counts the bytes read through it.
struct CountingReader<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Decompressed bytes handed over at a time, and how many may wait for the reader.
const CHUNK_BYTES: usize = 1 << 18;
const CHUNKS_AHEAD: usize = 4;
/// Compressed bytes read from the source at a time.
const SOURCE_BUFFER_BYTES: usize = 1 << 17;

/// Why a compressed stream ended before its end: shared with the decompressing thread.
pub type StreamNote = Arc<Mutex<Option<StreamEnd>>>;

/// The decompressed bytes of `source`, read on a thread of its own, and where that
/// thread leaves a note when the stream ends early.
pub fn decompress<R: Read + Send + 'static>(
    source: R,
    compression: Compression,
) -> (ThreadedReader, StreamNote) {
    let note: StreamNote = Arc::default();
    let (chunks, received) = mpsc::sync_channel::<Vec<u8>>(CHUNKS_AHEAD);
    let (emptied, recycled) = mpsc::sync_channel::<Vec<u8>>(CHUNKS_AHEAD + 2);
    let thread_note = Arc::clone(&note);
    let max_expansion = MAX_EXPANSION.load(Ordering::Relaxed);
    std::thread::spawn(move || {
        let consumed = Rc::new(Cell::new(0u64));
        let source = BufReader::with_capacity(
            SOURCE_BUFFER_BYTES,
            CountingReader {
                inner: source,
                count: Rc::clone(&consumed),
            },
        );
        let mut decoder: Box<dyn Read> = match compression {
            Compression::Gzip => Box::new(MultiGzDecoder::new(source)),
            Compression::Zstd => Box::new(ZstdFrames::new(source)),
        };
        let mut produced: u64 = 0;
        let set_note = |end: StreamEnd| {
            *thread_note.lock().unwrap_or_else(|e| e.into_inner()) = Some(end);
        };
        loop {
            let mut chunk = recycled
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(CHUNK_BYTES));
            chunk.resize(CHUNK_BYTES, 0);
            let (filled, problem) = fill(&mut decoder, &mut chunk);
            chunk.truncate(filled);
            produced += filled as u64;
            let allowed =
                EXPANSION_FLOOR_BYTES.saturating_add(max_expansion.saturating_mul(consumed.get()));
            if max_expansion > 0 && produced > allowed {
                set_note(StreamEnd::OverExpansionLimit(format!(
                    "the {} stream expands to more than {allowed} bytes from {} compressed bytes: over {max_expansion} times as much beyond its first {} MiB, a decompression bomb? (--max-expansion RATIO or unlimited lifts the limit)",
                    compression.name(),
                    consumed.get(),
                    EXPANSION_FLOOR_BYTES >> 20
                )));
                return;
            }
            if let Some(problem) = problem {
                set_note(StreamEnd::Cut(format!(
                    "the {} stream {problem} after {produced} decompressed bytes; what came before was read",
                    compression.name()
                )));
            }
            let last = filled < CHUNK_BYTES;
            // The reader stops early when the capture is refused; then so does this thread.
            if (filled > 0 && chunks.send(chunk).is_err()) || last {
                return;
            }
        }
    });
    (
        ThreadedReader {
            received,
            emptied,
            chunk: Vec::new(),
            at: 0,
        },
        note,
    )
}

/// Fills `chunk` from `decoder`; stops at the end of the stream, or at a problem,
/// which it describes.
fn fill(decoder: &mut dyn Read, chunk: &mut [u8]) -> (usize, Option<String>) {
    let mut filled = 0;
    while filled < chunk.len() {
        match decoder.read(&mut chunk[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return (filled, Some("ends early (cut off mid-write?)".into()));
            }
            Err(e) => return (filled, Some(format!("is corrupt ({e})"))),
        }
    }
    (filled, None)
}

/// The decompressed bytes, chunk by chunk from the decompressing thread.
pub struct ThreadedReader {
    received: mpsc::Receiver<Vec<u8>>,
    emptied: mpsc::SyncSender<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for ThreadedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            let Ok(next) = self.received.recv() else {
                return Ok(0);
            };
            let done = std::mem::replace(&mut self.chunk, next);
            // The thread may have finished; then the buffer is simply dropped.
            let _ = self.emptied.try_send(done);
            self.at = 0;
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Every frame of a zstd stream in turn (RFC 8878 3.1: a stream is a sequence of
/// frames), skippable frames skipped.
struct ZstdFrames<R: BufRead> {
    source: R,
    decoder: FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        ZstdFrames {
            source,
            decoder: FrameDecoder::new(),
            in_frame: false,
        }
    }

    /// Starts the next data frame; `false` at the end of the stream.
    fn next_frame(&mut self) -> io::Result<bool> {
        // Skippable frames are skipped one per turn; a stream is finite, so is this loop.
        loop {
            if self.source.fill_buf()?.is_empty() {
                return Ok(false);
            }
            match self.decoder.reset(&mut self.source) {
                Ok(()) => return Ok(true),
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = io::copy(
                        &mut (&mut self.source).take(u64::from(length)),
                        &mut io::sink(),
                    )?;
                    if skipped < u64::from(length) {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Err(e) => return Err(zstd_error(e)),
            }
        }
    }
}

/// A cut frame header reads as the end of the input; anything else is corruption.
fn zstd_error(e: FrameDecoderError) -> io::Error {
    let text = e.to_string();
    let cut = matches!(&e, FrameDecoderError::ReadFrameHeaderError(_)) && text.contains("EOF")
        || text.contains("failed to fill whole buffer")
        || text.contains("UnexpectedEof");
    if cut {
        io::Error::new(io::ErrorKind::UnexpectedEof, text)
    } else {
        io::Error::other(text)
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // Each turn either yields bytes, decodes at least one block, or moves to the next
        // frame; a finite stream ends it.
        loop {
            if !self.in_frame {
                if !self.next_frame()? {
                    return Ok(0);
                }
                self.in_frame = true;
            }
            if self.decoder.can_collect() > 0 {
                return self.decoder.read(buf);
            }
            if self.decoder.is_finished() {
                self.in_frame = false;
                continue;
            }
            self.decoder
                .decode_blocks(
                    &mut self.source,
                    ruzstd::decoding::BlockDecodingStrategy::UptoBytes(buf.len().max(1 << 16)),
                )
                .map_err(zstd_error)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn read_all(mut reader: impl Read) -> Vec<u8> {
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        out
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn recognises_each_magic_number() {
        assert_eq!(
            Compression::from_magic(&gzip(b"x")),
            Some(Compression::Gzip)
        );
        assert_eq!(
            Compression::from_magic(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Some(Compression::Zstd)
        );
        assert_eq!(
            Compression::from_magic(&[0x5e, 0x2a, 0x4d, 0x18]),
            Some(Compression::Zstd)
        );
        assert_eq!(Compression::from_magic(&[0xd4, 0xc3, 0xb2, 0xa1]), None);
        assert_eq!(Compression::from_magic(&[0x1f]), None);
    }

    #[test]
    fn gzip_members_one_after_another_read_as_one_stream() {
        let (a, b) = (sample(3 * CHUNK_BYTES + 17), sample(1000));
        let mut both = gzip(&a);
        both.extend(gzip(&b));
        let (reader, note) = decompress(io::Cursor::new(both), Compression::Gzip);
        let mut expected = a.clone();
        expected.extend(&b);
        assert_eq!(read_all(reader), expected);
        assert!(note.lock().unwrap().is_none());
    }

    #[test]
    fn a_cut_gzip_stream_gives_what_came_before_and_a_note() {
        let data = sample(4 * CHUNK_BYTES);
        let compressed = gzip(&data);
        let cut = compressed[..compressed.len() / 2].to_vec();
        let (reader, note) = decompress(io::Cursor::new(cut), Compression::Gzip);
        let got = read_all(reader);
        assert!(!got.is_empty() && got.len() < data.len());
        assert_eq!(got[..], data[..got.len()]);
        let Some(StreamEnd::Cut(note)) = note.lock().unwrap().clone() else {
            panic!("a note that the stream was cut");
        };
        assert!(note.contains("ends early"), "{note}");
    }

    #[test]
    fn zstd_frames_and_skippable_frames_read_as_one_stream() {
        // Two frames of raw (uncompressed) blocks, built by hand (RFC 8878 3.1.1), with a
        // skippable frame between them.
        fn raw_frame(content: &[u8]) -> Vec<u8> {
            let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd];
            // Frame header descriptor: single segment, 2-byte content size (+256).
            frame.push(0b0110_0000);
            frame.extend(((content.len() - 256) as u16).to_le_bytes());
            // One last raw block: header = last(1) | type raw(0) << 1 | size << 3.
            let header = 1 | (content.len() as u32) << 3;
            frame.extend(&header.to_le_bytes()[..3]);
            frame.extend(content);
            frame
        }
        let (a, b) = (sample(1000), sample(700));
        let mut stream = raw_frame(&a);
        stream.extend([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9]);
        stream.extend(raw_frame(&b));
        let (reader, note) = decompress(io::Cursor::new(stream), Compression::Zstd);
        let mut expected = a.clone();
        expected.extend(&b);
        assert_eq!(read_all(reader), expected);
        assert!(note.lock().unwrap().is_none());
    }
}
