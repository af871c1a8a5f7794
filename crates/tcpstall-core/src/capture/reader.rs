//! Reading pcap and pcapng captures from a file or a pipe, one packet at a time.
//!
//! Block parsing is `pcap-parser`'s; this module adds what a user needs around it:
//! format detection with readable errors, framing of every record and block by its own
//! length before any parser sees it (limits checked, unknown pcapng blocks skipped
//! whole), interfaces with their own link types and timestamp resolutions, bounded
//! buffers, and truncation reported as a warning. docs/malformed-captures.md lists what
//! each kind of damaged or unusual input does.

use std::io::{self, Read};

use pcap_parser::pcapng::{Block, OptionCode, PcapNGOption};
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{PcapBlockOwned, PcapError};

use crate::capture::CaptureError;
use crate::capture::compressed::{self, Compression, StreamEnd};
use crate::segment::{NANOS_PER_SEC, Nanos};

/// Initial read buffer: large enough that a refill is rare, small enough to be cheap.
/// Fuzzing builds (`--cfg fuzzing`, set by cargo-fuzz) start small: a fresh megabyte per
/// input would dominate the run time, and a small buffer exercises its growth.
#[allow(unexpected_cfgs)]
const BUFFER_BYTES: usize = if cfg!(fuzzing) { 1 << 12 } else { 1 << 20 };
/// The smallest read buffer: a few headers' worth.
const MIN_BUFFER_BYTES: usize = 1 << 12;
/// libpcap's MAXIMUM_SNAPLEN: no real capture has a record longer than this.
pub const MAX_RECORD_BYTES: u32 = 262_144;
/// pcapng blocks other than packets (name tables, journal exports) may be larger.
const MAX_BLOCK_BYTES: usize = 16 << 20;

/// The container format of a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    Pcap,
    PcapNg,
}

impl CaptureFormat {
    pub fn name(self) -> &'static str {
        match self {
            CaptureFormat::Pcap => "pcap",
            CaptureFormat::PcapNg => "pcapng",
        }
    }
}

/// One captured packet, borrowed from the reader's buffer.
#[derive(Debug)]
pub struct Packet<'a> {
    /// 1-based packet number, as Wireshark counts.
    pub number: u64,
    pub time: Nanos,
    /// pcap LINKTYPE_ value of the interface the packet came from.
    pub link_type: i32,
    /// The captured bytes (possibly cut short by the snap length).
    pub data: &'a [u8],
    /// Its length on the wire, and the interface it came from (0 in a pcap file; in
    /// pcapng, the index of its Interface Description Block in the section).
    pub wire_len: u32,
    pub interface: u32,
    /// Timestamp units per second of that interface (10^6 or 10^9 in pcap; what
    /// if_tsresol says in pcapng): how finely `time` was recorded.
    pub time_units: u64,
}

impl Packet<'_> {
    /// The bytes the frame had on the wire from `at` on, when `at` starts in the captured
    /// bytes (a reassembled datagram's do not): what a header there may claim at most. The
    /// frame's original length, or its captured length when a writer recorded less.
    #[inline]
    pub(crate) fn wire_bytes_from(&self, at: &[u8]) -> Option<usize> {
        let offset = (at.as_ptr() as usize).checked_sub(self.data.as_ptr() as usize)?;
        if offset > self.data.len() {
            return None;
        }
        Some((self.wire_len as usize).max(self.data.len()) - offset)
    }
}

/// What a reader noticed that did not stop it.
#[derive(Clone, Debug, Default)]
pub struct ReadNotes {
    pub format: Option<CaptureFormat>,
    pub packets: u64,
    pub bytes_read: u64,
    /// The capture ends inside a record: the packets before it were all read.
    pub truncated_tail: Option<String>,
    /// pcapng Simple Packet Blocks carry no timestamp; they get the previous packet's time.
    pub packets_without_timestamp: u64,
    /// Packets that refer to an interface that no Interface Description Block declared.
    pub packets_unknown_interface: u64,
    /// Interface Description Blocks past the [`MAX_INTERFACES`] a section keeps, and the
    /// packets on those interfaces (skipped: their link type and clock are not known).
    pub interfaces_over_limit: u64,
    pub packets_on_interfaces_over_limit: u64,
    /// pcap records whose fraction of a second is a second or more (a microsecond field
    /// of 10^6 or more, a nanosecond field of 10^9 or more): the excess was carried into
    /// the seconds.
    pub packets_fraction_over_a_second: u64,
    /// Packets whose timestamp fell before 1970 or after 2106 (pcapng timestamps and
    /// offsets can say so); they were given the nearest end of that range.
    pub packets_time_out_of_range: u64,
    /// The compression the capture came in, if any.
    pub compression: Option<Compression>,
    /// A compressed stream that ended early or turned corrupt: the packets before were read.
    pub compressed_stream_cut: Option<String>,
}

#[derive(Clone, Copy, Debug)]
struct Interface {
    link_type: i32,
    /// Timestamp units per second.
    units_per_sec: u64,
    /// Seconds added to every timestamp (pcapng if_tsoffset).
    offset_secs: i64,
}

/// Reads until `buf` is full or the input ends, so a pipe behaves like a file.
struct FillReader<R> {
    inner: R,
}

impl<R: Read> Read for FillReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }
}

/// pcapng block types this reader looks inside; every other block is skipped whole.
mod block {
    pub const SECTION_HEADER: u32 = 0x0a0d_0d0a;
    pub const INTERFACE_DESCRIPTION: u32 = 1;
    /// The obsolete Packet Block: still written by old tools, not parsed by pcap-parser.
    pub const PACKET: u32 = 2;
    pub const SIMPLE_PACKET: u32 = 3;
    pub const ENHANCED_PACKET: u32 = 6;
}

/// A section header block's type field: the same bytes in either byte order.
const SECTION_HEADER_TYPE: [u8; 4] = block::SECTION_HEADER.to_be_bytes();
/// The pcapng byte-order magic as it appears in a little-endian section.
const BYTE_ORDER_MAGIC_LE: [u8; 4] = [0x4d, 0x3c, 0x2b, 0x1a];
const BYTE_ORDER_MAGIC_BE: [u8; 4] = [0x1a, 0x2b, 0x3c, 0x4d];
/// Smallest pcapng blocks: any block (type, two lengths), a section header block.
const MIN_BLOCK_BYTES: usize = 12;
const MIN_SECTION_HEADER_BYTES: usize = 28;
/// Interfaces remembered per pcapng section: memory stays bounded whatever a file declares
/// (an Enhanced Packet Block's interface ID has 32 bits, pcapng section 4.3). More than a
/// capture tool writes: one per interface of a host, or a packet block's 16-bit ID of old.
pub const MAX_INTERFACES: usize = 1 << 16;
/// The latest time classic pcap can hold (February 2106). Packet times are kept between
/// 0 and this, so even the sum of two differences of packet times fits an `i64`.
pub const MAX_TIME: Nanos = (u32::MAX as i64 + 1) * NANOS_PER_SEC - 1;

/// The next record or block, framed by its own length field before any parser sees it.
enum Frame {
    /// The whole record or block, this many bytes, is in the buffer.
    Whole(usize),
    /// The input ends inside it: `present` bytes of `needed` (`None`: its header is cut).
    Cut {
        present: usize,
        needed: Option<usize>,
    },
    /// The input ends between records.
    End,
}

/// Streams packets out of a pcap or pcapng capture.
///
/// Every record or block is framed here first, from its length field: the length is
/// checked (limits, pcapng's multiple of 4), the buffer grows to hold it, and only a
/// complete block reaches the parser. So a cut file is told apart from a corrupt one,
/// and a block whose fields overrun its length is an error, never a wait for more input.
pub struct CaptureReader {
    inner: Box<dyn PcapReaderIterator + Send>,
    format: CaptureFormat,
    interfaces: Vec<Interface>,
    /// Interface Description Blocks in this section, those not kept included.
    interfaces_declared: u64,
    notes: ReadNotes,
    last_time: Nanos,
    /// Added to this reader's own count to number its packets: several readers merged
    /// into one stream number their packets across all of them.
    number_offset: u64,
    section_big_endian: bool,
    /// Size of the read buffer; it grows for long blocks.
    capacity: usize,
    /// Classic pcap: the file's byte order, and its record header size (16, or 24 in the
    /// modified format).
    pcap_big_endian: bool,
    pcap_record_header: usize,
    /// Where the decompressing thread says why a compressed stream ended early.
    stream_note: Option<compressed::StreamNote>,
    started: bool,
    finished: bool,
    /// Set when paused: the time of the packet the reader stopped at.
    next_time: Option<Nanos>,
}

/// Where [`CaptureReader::read_until`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStep {
    /// At a packet later than asked for: [`CaptureReader::next_time`] says when.
    Paused,
    /// At the end of the capture.
    Finished,
}

impl CaptureReader {
    /// Detects the format from the first bytes and prepares to stream packets.
    pub fn new<R: Read + Send + 'static>(input: R) -> Result<Self, CaptureError> {
        Self::with_buffer(input, BUFFER_BYTES)
    }

    /// The same, with a read buffer of `buffer_bytes` to begin with (it still grows for a
    /// long block): a small one suits a reader that only looks at the first packet.
    pub(crate) fn with_buffer<R: Read + Send + 'static>(
        input: R,
        buffer_bytes: usize,
    ) -> Result<Self, CaptureError> {
        let mut input: FillReader<Box<dyn Read + Send>> = FillReader {
            inner: Box::new(input),
        };
        let mut head = vec![0u8; 24];
        let got = input.read(&mut head).map_err(CaptureError::Io)?;
        head.truncate(got);
        let compression = Compression::from_magic(&head);
        let mut stream_note = None;
        if let Some(compression) = compression {
            let compressed = io::Cursor::new(std::mem::take(&mut head)).chain(input.inner);
            let (decompressed, note) = compressed::decompress(compressed, compression);
            input = FillReader {
                inner: Box::new(decompressed),
            };
            stream_note = Some(note);
            head.resize(24, 0);
            let got = input.read(&mut head).map_err(CaptureError::Io)?;
            head.truncate(got);
            if head.is_empty() {
                let why = match stream_note.as_ref().and_then(|n| n.lock().ok()?.clone()) {
                    Some(StreamEnd::OverExpansionLimit(detail)) => {
                        return Err(CaptureError::ExpansionLimit { detail });
                    }
                    Some(StreamEnd::Cut(why)) => why,
                    None => format!("the {} stream is empty", compression.name()),
                };
                return Err(CaptureError::NotACapture {
                    detail: format!("{why}, before any capture header"),
                });
            }
        }
        let format = detect_format(&head)?;
        let mut capacity = buffer_bytes.max(MIN_BUFFER_BYTES);
        if format == CaptureFormat::PcapNg {
            // The whole section header block, so that a cut one is told from a bad one.
            let len = section_header_len(&head)?;
            let mut rest = vec![0u8; len - head.len()];
            let more = input.read(&mut rest).map_err(CaptureError::Io)?;
            head.extend_from_slice(&rest[..more]);
            if head.len() < len {
                return Err(CaptureError::TruncatedHeader {
                    format: format.name(),
                });
            }
            capacity = len.next_power_of_two().max(capacity);
        }
        let source = FillReader {
            inner: io::Cursor::new(head).chain(input),
        };
        let inner = pcap_parser::create_reader(capacity, source).map_err(|e| match e {
            PcapError::Incomplete(_) | PcapError::Eof | PcapError::UnexpectedEof => {
                CaptureError::TruncatedHeader {
                    format: format.name(),
                }
            }
            PcapError::ReadError => CaptureError::Io(io::Error::other("read failed")),
            _ => CaptureError::NotACapture {
                detail: format!("its {} header is malformed", format.name()),
            },
        })?;
        Ok(CaptureReader {
            inner,
            format,
            interfaces: Vec::new(),
            interfaces_declared: 0,
            notes: ReadNotes {
                format: Some(format),
                compression,
                ..ReadNotes::default()
            },
            stream_note,
            started: false,
            finished: false,
            next_time: None,
            last_time: 0,
            number_offset: 0,
            section_big_endian: false,
            capacity,
            pcap_big_endian: false,
            pcap_record_header: 16,
        })
    }

    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// Calls `on_packet` for every packet, in file order, and returns what was noticed.
    pub fn for_each_packet(
        mut self,
        mut on_packet: impl FnMut(&Packet<'_>),
    ) -> Result<ReadNotes, CaptureError> {
        self.read_until(Nanos::MAX, &mut on_packet)?;
        Ok(self.notes)
    }

    /// Calls `on_packet` for every packet, in file order, until the next packet's time is
    /// after `until` (then [`ReadStep::Paused`], and [`Self::next_time`] says when it is)
    /// or the capture ends ([`ReadStep::Finished`]). Several captures are merged in time
    /// order this way; `Nanos::MIN` reads the headers and stops at the first packet.
    pub fn read_until(
        &mut self,
        until: Nanos,
        on_packet: &mut impl FnMut(&Packet<'_>),
    ) -> Result<ReadStep, CaptureError> {
        if self.finished {
            return Ok(ReadStep::Finished);
        }
        if !self.started {
            self.started = true;
            if self.format == CaptureFormat::Pcap {
                self.read_pcap_header()?;
            }
        }
        self.next_time = None;
        // Each turn consumes at least one record or block, or ends the capture.
        loop {
            if self.format == CaptureFormat::Pcap {
                // No shifting of the rest of the buffer here: a refill shifts what is
                // left, and by then that is less than one record.
                let used = if self.pcap_big_endian {
                    self.pcap_records::<true>(until, on_packet)
                } else {
                    self.pcap_records::<false>(until, on_packet)
                };
                self.inner.consume_noshift(used);
                self.notes.bytes_read += used as u64;
                if self.next_time.is_some() {
                    return Ok(ReadStep::Paused);
                }
            }
            let len = match self.next_frame()? {
                Frame::Whole(len) => len,
                Frame::End => break,
                Frame::Cut { present, needed } => {
                    self.note_cut(present, needed)?;
                    break;
                }
            };
            if self.format == CaptureFormat::PcapNg {
                if let Some(time) = self.pcapng_packet_time(len)
                    && time > until
                {
                    self.next_time = Some(time);
                    return Ok(ReadStep::Paused);
                }
                self.pcapng_block(len, on_packet)?;
                self.inner.consume_noshift(len);
                self.notes.bytes_read += len as u64;
            }
        }
        self.finished = true;
        if let Some(StreamEnd::Cut(why)) = self.stream_end() {
            self.notes.compressed_stream_cut = Some(why);
        }
        Ok(ReadStep::Finished)
    }

    /// Numbers the next packet handed on `next` (packets are numbered from 1), and those
    /// after it on from there: the number it has in a stream merged from several readers.
    pub(crate) fn number_next_as(&mut self, next: u64) {
        self.number_offset = next.saturating_sub(self.notes.packets + 1);
    }

    /// The time of the last packet handed on (0 before the first).
    pub(crate) fn last_time(&self) -> Nanos {
        self.last_time
    }

    /// The time of the packet a paused reader stops at.
    pub fn next_time(&self) -> Option<Nanos> {
        self.next_time
    }

    /// What was noticed so far (all of it once the reader has finished).
    pub fn notes(&self) -> &ReadNotes {
        &self.notes
    }

    /// The time of the pcapng packet block whole in the buffer (`len` bytes), when it is
    /// one with a timestamp on a declared interface.
    fn pcapng_packet_time(&self, len: usize) -> Option<Nanos> {
        let data = self.inner.data();
        let big_endian = self.block_byte_order(data).ok()?;
        let field = |at: usize| Some(read_u32(data.get(at..at + 4)?, big_endian));
        let if_id = match field(0)? {
            block::ENHANCED_PACKET if len >= 32 => field(8)? as usize,
            block::PACKET if len >= 32 => usize::from(if big_endian {
                u16::from_be_bytes([data[8], data[9]])
            } else {
                u16::from_le_bytes([data[8], data[9]])
            }),
            _ => return None,
        };
        let iface = self.interfaces.get(if_id)?;
        let units = (u64::from(field(12)?) << 32) | u64::from(field(16)?);
        Some(clamp_time(iface_time(units, *iface)).0)
    }

    /// The classic pcap file header: pcap-parser hands it over first.
    fn read_pcap_header(&mut self) -> Result<(), CaptureError> {
        let (consumed, header) = match self.inner.next() {
            Ok((consumed, PcapBlockOwned::LegacyHeader(header))) => (consumed, header),
            _ => {
                return Err(CaptureError::NotACapture {
                    detail: "its pcap header is malformed".into(),
                });
            }
        };
        let units_per_sec = if header.is_nanosecond_precision() {
            NANOS_PER_SEC as u64
        } else {
            1_000_000
        };
        // The upper 16 bits of the link type field carry FCS information, not the type.
        self.interfaces = vec![Interface {
            link_type: header.network.0 & 0xffff,
            units_per_sec,
            offset_secs: 0,
        }];
        self.pcap_big_endian = header.is_bigendian();
        self.pcap_record_header = if header.is_modified_format() { 24 } else { 16 };
        self.inner.consume(consumed);
        self.notes.bytes_read += consumed as u64;
        Ok(())
    }

    /// Makes sure the next whole record or block is in the buffer, or says why it is not.
    fn next_frame(&mut self) -> Result<Frame, CaptureError> {
        loop {
            let data = self.inner.data();
            let header = self.frame_header_len(data);
            let needed = if data.len() >= header {
                Some(self.frame_len(data)?)
            } else {
                None
            };
            let want = needed.unwrap_or(header);
            let present = data.len();
            if present >= want {
                return Ok(Frame::Whole(want));
            }
            if self.inner.reader_exhausted() {
                if let Some(StreamEnd::OverExpansionLimit(detail)) = self.stream_end() {
                    return Err(CaptureError::ExpansionLimit { detail });
                }
                return Ok(if present == 0 {
                    Frame::End
                } else {
                    Frame::Cut { present, needed }
                });
            }
            if want > self.capacity {
                let size = want.next_power_of_two();
                self.inner.grow(size);
                self.capacity = size;
            }
            self.inner.refill().map_err(|_| read_failed())?;
        }
    }

    /// Why the compressed stream under this reader ended early, if it did.
    fn stream_end(&self) -> Option<StreamEnd> {
        self.stream_note.as_ref()?.lock().ok()?.clone()
    }

    /// Bytes needed to know a record's or block's length.
    fn frame_header_len(&self, data: &[u8]) -> usize {
        match self.format {
            CaptureFormat::Pcap => self.pcap_record_header,
            // A section header's length is in its own byte order, given after it.
            CaptureFormat::PcapNg if data.get(..4) == Some(&SECTION_HEADER_TYPE) => 12,
            CaptureFormat::PcapNg => 8,
        }
    }

    /// The whole length of the record or block at the read position, checked.
    fn frame_len(&self, data: &[u8]) -> Result<usize, CaptureError> {
        match self.format {
            CaptureFormat::Pcap => {
                let caplen = read_u32(&data[8..12], self.pcap_big_endian);
                if caplen > MAX_RECORD_BYTES {
                    return Err(CaptureError::RecordTooLong {
                        packet: self.notes.packets + 1,
                        offset: self.notes.bytes_read,
                        claimed: u64::from(caplen),
                        limit: u64::from(MAX_RECORD_BYTES),
                    });
                }
                Ok(self.pcap_record_header + caplen as usize)
            }
            CaptureFormat::PcapNg => {
                let big_endian = self.block_byte_order(data)?;
                let len = read_u32(&data[4..8], big_endian) as usize;
                if len > MAX_BLOCK_BYTES {
                    return Err(CaptureError::RecordTooLong {
                        packet: self.notes.packets + 1,
                        offset: self.notes.bytes_read,
                        claimed: len as u64,
                        limit: MAX_BLOCK_BYTES as u64,
                    });
                }
                if len < MIN_BLOCK_BYTES || !len.is_multiple_of(4) {
                    return Err(self.corrupt(format!(
                        "the pcapng block here claims {len} bytes; a block length is a multiple of 4, at least {MIN_BLOCK_BYTES}"
                    )));
                }
                Ok(len)
            }
        }
    }

    /// The byte order of the pcapng block at the start of `data`: a section header's own
    /// (its byte-order magic), any other block's section's.
    fn block_byte_order(&self, data: &[u8]) -> Result<bool, CaptureError> {
        if data[..4] != SECTION_HEADER_TYPE {
            return Ok(self.section_big_endian);
        }
        section_byte_order(&data[8..12]).map_err(|bad| {
            self.corrupt(format!("a section header block here has byte-order {bad}"))
        })
    }

    /// Every classic pcap record already whole in the buffer, in order (each: seconds,
    /// fraction, captured length, original length, data); returns the bytes they take.
    /// A record the buffer cuts, or one over the length limit, is left to
    /// [`Self::next_frame`], which refills the buffer or says what is wrong.
    /// Stops before a record whose time is after `until`, and notes that time. The
    /// file's byte order is a constant here, not a test in every field read.
    fn pcap_records<const BIG_ENDIAN: bool>(
        &mut self,
        until: Nanos,
        on_packet: &mut impl FnMut(&Packet<'_>),
    ) -> usize {
        let iface = self.interfaces[0];
        let header = self.pcap_record_header;
        let big_endian = BIG_ENDIAN;
        let nanos_per_unit = NANOS_PER_SEC as u64 / iface.units_per_sec;
        let data = self.inner.data();
        let mut used = 0;
        while let Some(head) = data.get(used..used + header) {
            let caplen = read_u32(&head[8..12], big_endian);
            if caplen > MAX_RECORD_BYTES {
                break;
            }
            let end = used + header + caplen as usize;
            let Some(bytes) = data.get(used + header..end) else {
                break;
            };
            // Both products fit 64 bits: seconds below 2^32 times 10^9, a fraction below
            // 2^32 times at most 10^3. A fraction of a second or more is carried into the
            // seconds, and counted.
            let fraction = u64::from(read_u32(&head[4..8], big_endian));
            let nanos = u64::from(read_u32(&head[0..4], big_endian)) * NANOS_PER_SEC as u64
                + fraction * nanos_per_unit;
            let (time, out_of_range) = clamp_time(i128::from(nanos));
            if time > until {
                self.next_time = Some(time);
                break;
            }
            self.notes.packets_time_out_of_range += u64::from(out_of_range);
            self.notes.packets_fraction_over_a_second += u64::from(fraction >= iface.units_per_sec);
            self.notes.packets += 1;
            self.last_time = time;
            on_packet(&Packet {
                number: self.number_offset + self.notes.packets,
                time,
                link_type: iface.link_type,
                data: bytes,
                wire_len: read_u32(&head[12..16], big_endian),
                interface: 0,
                time_units: iface.units_per_sec,
            });
            used = end;
        }
        used
    }

    /// One pcapng block, whole in the buffer (`len` bytes).
    fn pcapng_block(
        &mut self,
        len: usize,
        on_packet: &mut impl FnMut(&Packet<'_>),
    ) -> Result<(), CaptureError> {
        let data = self.inner.data();
        let big_endian = self.block_byte_order(data)?;
        let block_type = read_u32(&data[..4], big_endian);
        match block_type {
            block::SECTION_HEADER
            | block::INTERFACE_DESCRIPTION
            | block::SIMPLE_PACKET
            | block::ENHANCED_PACKET => {}
            block::PACKET => return self.obsolete_packet_block(len, big_endian, on_packet),
            // Statistics, name resolution, journal, secrets, custom and unknown blocks:
            // nothing in them is needed, and a block's length is all it takes to skip it.
            _ => return Ok(()),
        }
        let Ok((_, PcapBlockOwned::NG(block))) = self.inner.next() else {
            let problem = block_problem(self.inner.data(), len, big_endian);
            return Err(self.corrupt(problem));
        };
        match block {
            Block::SectionHeader(shb) => {
                // Interface numbers restart in each section.
                self.interfaces.clear();
                self.interfaces_declared = 0;
                self.section_big_endian = shb.big_endian();
            }
            // Beyond the limit, interfaces are counted, and so are the packets on them.
            Block::InterfaceDescription(idb) => {
                self.interfaces_declared += 1;
                if self.interfaces.len() < MAX_INTERFACES {
                    self.interfaces.push(Interface {
                        link_type: i32::from(idb.linktype.0 as u16),
                        units_per_sec: ts_units_per_sec(idb.if_tsresol),
                        offset_secs: ts_offset_option(&idb.options, self.section_big_endian),
                    });
                } else {
                    self.notes.interfaces_over_limit += 1;
                }
            }
            Block::EnhancedPacket(epb) => {
                self.notes.packets += 1;
                let Some(iface) = packet_interface(
                    &self.interfaces,
                    self.interfaces_declared,
                    &mut self.notes,
                    epb.if_id,
                ) else {
                    return Ok(());
                };
                let units = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                let (time, out_of_range) = clamp_time(iface_time(units, iface));
                self.notes.packets_time_out_of_range += u64::from(out_of_range);
                self.last_time = time;
                let caplen = (epb.caplen as usize).min(epb.data.len());
                on_packet(&Packet {
                    number: self.number_offset + self.notes.packets,
                    time,
                    link_type: iface.link_type,
                    data: &epb.data[..caplen],
                    wire_len: epb.origlen,
                    interface: epb.if_id,
                    time_units: iface.units_per_sec,
                });
            }
            Block::SimplePacket(spb) => {
                self.notes.packets += 1;
                self.notes.packets_without_timestamp += 1;
                if let Some(iface) = self.interfaces.first().copied() {
                    let caplen = (spb.origlen as usize).min(spb.data.len());
                    on_packet(&Packet {
                        number: self.number_offset + self.notes.packets,
                        time: self.last_time,
                        link_type: iface.link_type,
                        data: &spb.data[..caplen],
                        wire_len: spb.origlen,
                        interface: 0,
                        time_units: iface.units_per_sec,
                    });
                } else {
                    self.notes.packets_unknown_interface += 1;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The obsolete Packet Block (pcapng block type 2): interface (16 bits), drops
    /// (16 bits), timestamp (high, low), captured and original lengths, data.
    fn obsolete_packet_block(
        &mut self,
        len: usize,
        big_endian: bool,
        on_packet: &mut impl FnMut(&Packet<'_>),
    ) -> Result<(), CaptureError> {
        const HEADER: usize = 28;
        if len < HEADER + 4 {
            return Err(self.corrupt(format!(
                "the packet block here has {len} bytes, fewer than its {} bytes of fields",
                HEADER + 4
            )));
        }
        self.notes.packets += 1;
        let data = self.inner.data();
        let field = |at: usize| read_u32(&data[at..at + 4], big_endian);
        let if_id = if big_endian {
            u16::from_be_bytes([data[8], data[9]])
        } else {
            u16::from_le_bytes([data[8], data[9]])
        };
        let Some(iface) = packet_interface(
            &self.interfaces,
            self.interfaces_declared,
            &mut self.notes,
            u32::from(if_id),
        ) else {
            return Ok(());
        };
        let units = (u64::from(field(12)) << 32) | u64::from(field(16));
        let caplen = (field(20) as usize).min(len - HEADER - 4);
        let (time, out_of_range) = clamp_time(iface_time(units, iface));
        self.notes.packets_time_out_of_range += u64::from(out_of_range);
        self.last_time = time;
        on_packet(&Packet {
            number: self.number_offset + self.notes.packets,
            time,
            link_type: iface.link_type,
            data: &data[HEADER..HEADER + caplen],
            wire_len: field(24),
            interface: u32::from(if_id),
            time_units: iface.units_per_sec,
        });
        Ok(())
    }

    /// The input ended inside a record or block. After some packets that is a capture
    /// cut off mid-write (a warning); before any, there is nothing to analyse.
    fn note_cut(&mut self, present: usize, needed: Option<usize>) -> Result<(), CaptureError> {
        let what = match self.format {
            CaptureFormat::Pcap => format!("record {}", self.notes.packets + 1),
            CaptureFormat::PcapNg => "a pcapng block".to_string(),
        };
        let have = match needed {
            Some(needed) => format!("{present} of its {needed} bytes are present"),
            None => format!("only {present} bytes of its header are present"),
        };
        let offset = self.notes.bytes_read;
        if self.notes.packets == 0 {
            return Err(CaptureError::Truncated {
                detail: format!(
                    "it ends inside {what} at byte offset {offset} ({have}), before any complete packet"
                ),
            });
        }
        self.notes.truncated_tail = Some(format!(
            "capture ends inside {what} at byte offset {offset}: {have}; the {} packets before it were analysed",
            self.notes.packets
        ));
        Ok(())
    }

    fn corrupt(&self, detail: String) -> CaptureError {
        CaptureError::Corrupt {
            packet: self.notes.packets + 1,
            offset: self.notes.bytes_read,
            detail,
        }
    }
}

/// The interface a packet names, when its section declared (`declared` in all) and kept
/// it; a packet on any other is counted in `notes` (undeclared, or past those kept).
fn packet_interface(
    interfaces: &[Interface],
    declared: u64,
    notes: &mut ReadNotes,
    id: u32,
) -> Option<Interface> {
    let found = interfaces.get(id as usize).copied();
    if found.is_none() {
        if u64::from(id) < declared {
            notes.packets_on_interfaces_over_limit += 1;
        } else {
            notes.packets_unknown_interface += 1;
        }
    }
    found
}

fn read_failed() -> CaptureError {
    CaptureError::Io(io::Error::other("read failed"))
}

fn read_u32(bytes: &[u8], big_endian: bool) -> u32 {
    let bytes = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if big_endian {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    }
}

/// Why pcap-parser refused a complete, well-framed pcapng block.
fn block_problem(data: &[u8], len: usize, big_endian: bool) -> String {
    let name = match read_u32(&data[..4], big_endian) {
        block::SECTION_HEADER => "section header",
        block::INTERFACE_DESCRIPTION => "interface description",
        block::SIMPLE_PACKET => "simple packet",
        _ => "enhanced packet",
    };
    let trailing = read_u32(&data[len - 4..len], big_endian) as usize;
    if trailing != len {
        format!("the {name} block here claims {len} bytes at its start and {trailing} at its end")
    } else {
        format!("the {name} block here ({len} bytes) is malformed: its fields overrun its length")
    }
}

/// Whether a section is big-endian, from its byte-order magic (4 bytes); when it is
/// neither order, what the magic is instead.
fn section_byte_order(magic: &[u8]) -> Result<bool, String> {
    match <[u8; 4]>::try_from(magic) {
        Ok(BYTE_ORDER_MAGIC_LE) => Ok(false),
        Ok(BYTE_ORDER_MAGIC_BE) => Ok(true),
        _ => Err(format!(
            "magic {:02x} {:02x} {:02x} {:02x}, not 1a 2b 3c 4d in either order",
            magic[0], magic[1], magic[2], magic[3]
        )),
    }
}

/// The length a pcapng file's first block, its section header, claims.
fn section_header_len(head: &[u8]) -> Result<usize, CaptureError> {
    let big_endian = section_byte_order(&head[8..12]).map_err(|bad| CaptureError::NotACapture {
        detail: format!("its pcapng section header has byte-order {bad}"),
    })?;
    let len = read_u32(&head[4..8], big_endian) as usize;
    if len < MIN_SECTION_HEADER_BYTES || !len.is_multiple_of(4) || len > MAX_BLOCK_BYTES {
        return Err(CaptureError::NotACapture {
            detail: format!(
                "its pcapng section header claims {len} bytes; it takes a multiple of 4 from {MIN_SECTION_HEADER_BYTES} to {MAX_BLOCK_BYTES}"
            ),
        });
    }
    Ok(len)
}

/// Time of a packet of `iface` from its timestamp units, before clamping.
fn iface_time(units: u64, iface: Interface) -> i128 {
    i128::from(units) * i128::from(NANOS_PER_SEC) / i128::from(iface.units_per_sec)
        + i128::from(iface.offset_secs) * i128::from(NANOS_PER_SEC)
}

/// Keeps a packet time between 1970 and the end of 2106; says whether it was moved.
fn clamp_time(nanos: i128) -> (Nanos, bool) {
    let clamped = nanos.clamp(0, i128::from(MAX_TIME)) as Nanos;
    (clamped, i128::from(clamped) != nanos)
}

/// Timestamp units per second from pcapng's if_tsresol: 10^n, or 2^n when the top bit
/// is set. (pcap-parser 0.17 refuses every power of two.) Microseconds when invalid.
fn ts_units_per_sec(tsresol: u8) -> u64 {
    let exponent = u32::from(tsresol & 0x7f);
    let units = if tsresol & 0x80 == 0 {
        10u64.checked_pow(exponent)
    } else {
        1u64.checked_shl(exponent)
    };
    units.unwrap_or(1_000_000)
}

/// The if_tsoffset option (pcapng, code 14), read in the section's byte order.
fn ts_offset_option(options: &[PcapNGOption<'_>], big_endian: bool) -> i64 {
    options
        .iter()
        .filter(|o| o.code == OptionCode::IfTsoffset)
        .find_map(|o| o.value().get(..8)?.try_into().ok())
        .map(|bytes: [u8; 8]| {
            if big_endian {
                i64::from_be_bytes(bytes)
            } else {
                i64::from_le_bytes(bytes)
            }
        })
        .unwrap_or(0)
}

/// Whether `head`, a file's first bytes, starts as a capture does: a pcap magic number
/// in either byte order (microseconds a1b2c3d4, nanoseconds a1b23c4d, the modified
/// pcap's a1b2cd34), a pcapng section header (0a0d0d0a), or a gzip or zstd stream.
pub fn is_capture_magic(head: &[u8]) -> bool {
    if Compression::from_magic(head).is_some() {
        return true;
    }
    let Some(&[a, b, c, d]) = head.get(..4) else {
        return false;
    };
    let magic = [a, b, c, d];
    if magic == SECTION_HEADER_TYPE {
        return true;
    }
    [
        [0xa1, 0xb2, 0xc3, 0xd4],
        [0xa1, 0xb2, 0x3c, 0x4d],
        [0xa1, 0xb2, 0xcd, 0x34],
    ]
    .iter()
    .any(|m| magic == *m || magic == [m[3], m[2], m[1], m[0]])
}

fn detect_format(head: &[u8]) -> Result<CaptureFormat, CaptureError> {
    if head.is_empty() {
        return Err(CaptureError::Empty);
    }
    if head.len() < 4 {
        return Err(CaptureError::TruncatedHeader { format: "capture" });
    }
    let magic = [head[0], head[1], head[2], head[3]];
    let format = match magic {
        SECTION_HEADER_TYPE => CaptureFormat::PcapNg,
        [0xa1, 0xb2, 0xcd, 0x34] => {
            return Err(CaptureError::Unsupported {
                detail: "big-endian modified pcap (magic a1 b2 cd 34); convert it with `editcap -F pcap`".into(),
            });
        }
        [0xa1, 0xb2, 0xc3, 0xd4]
        | [0xd4, 0xc3, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0x3c, 0x4d]
        | [0x4d, 0x3c, 0xb2, 0xa1]
        | [0x34, 0xcd, 0xb2, 0xa1] => CaptureFormat::Pcap,
        _ => {
            return Err(CaptureError::NotACapture {
                detail: format!(
                    "it starts with bytes {:02x} {:02x} {:02x} {:02x}, not a pcap or pcapng magic number",
                    magic[0], magic[1], magic[2], magic[3]
                ),
            });
        }
    };
    let header_len = match format {
        CaptureFormat::Pcap => 24,
        // Block type, length, byte-order magic, version.
        CaptureFormat::PcapNg => 16,
    };
    if head.len() < header_len {
        return Err(CaptureError::TruncatedHeader {
            format: format.name(),
        });
    }
    Ok(format)
}
