//! Reading pcap and pcapng captures from a file or a pipe, one packet at a time.
//!
//! Block parsing is `pcap-parser`'s; this module adds what a user needs around it:
//! format detection with readable errors, interfaces with their own link types and
//! timestamp resolutions, bounded buffers, and truncation reported as a warning.

use std::io::{self, Read};

use pcap_parser::pcapng::{Block, OptionCode, PcapNGOption};
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{PcapBlockOwned, PcapError};

use crate::capture::CaptureError;
use crate::segment::{NANOS_PER_SEC, Nanos};

/// Initial read buffer: large enough that a refill is rare, small enough to be cheap.
const BUFFER_BYTES: usize = 1 << 20;
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

/// Streams packets out of a pcap or pcapng capture.
pub struct CaptureReader {
    inner: Box<dyn PcapReaderIterator + Send>,
    format: CaptureFormat,
    interfaces: Vec<Interface>,
    notes: ReadNotes,
    last_time: Nanos,
    section_big_endian: bool,
}

impl CaptureReader {
    /// Detects the format from the first bytes and prepares to stream packets.
    pub fn new<R: Read + Send + 'static>(input: R) -> Result<Self, CaptureError> {
        let mut input = FillReader { inner: input };
        let mut head = [0u8; 24];
        let got = input.read(&mut head).map_err(CaptureError::Io)?;
        let format = detect_format(&head[..got])?;
        let source = FillReader {
            inner: io::Cursor::new(head[..got].to_vec()).chain(input),
        };
        let inner = pcap_parser::create_reader(BUFFER_BYTES, source).map_err(|e| match e {
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
            notes: ReadNotes {
                format: Some(format),
                ..ReadNotes::default()
            },
            last_time: 0,
            section_big_endian: false,
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
        loop {
            match self.inner.next() {
                Ok((consumed, block)) => {
                    match block {
                        PcapBlockOwned::LegacyHeader(header) => {
                            let units_per_sec = if header.is_nanosecond_precision() {
                                NANOS_PER_SEC as u64
                            } else {
                                1_000_000
                            };
                            self.interfaces = vec![Interface {
                                link_type: header.network.0,
                                units_per_sec,
                                offset_secs: 0,
                            }];
                        }
                        PcapBlockOwned::Legacy(record) => {
                            let iface = self.interfaces.first().copied().unwrap_or(Interface {
                                link_type: 1,
                                units_per_sec: 1_000_000,
                                offset_secs: 0,
                            });
                            let time = i64::from(record.ts_sec) * NANOS_PER_SEC
                                + i64::from(record.ts_usec)
                                    * (NANOS_PER_SEC / iface.units_per_sec as i64);
                            self.notes.packets += 1;
                            self.last_time = time;
                            on_packet(&Packet {
                                number: self.notes.packets,
                                time,
                                link_type: iface.link_type,
                                data: record.data,
                            });
                        }
                        PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                            // Interface numbers restart in each section.
                            self.interfaces.clear();
                            self.section_big_endian = shb.big_endian();
                        }
                        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                            self.interfaces.push(Interface {
                                link_type: idb.linktype.0,
                                units_per_sec: idb.ts_resolution().unwrap_or(1_000_000).max(1),
                                offset_secs: ts_offset_option(
                                    &idb.options,
                                    self.section_big_endian,
                                ),
                            });
                        }
                        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                            self.notes.packets += 1;
                            let Some(iface) = self.interfaces.get(epb.if_id as usize).copied()
                            else {
                                self.notes.packets_unknown_interface += 1;
                                self.inner.consume(consumed);
                                self.notes.bytes_read += consumed as u64;
                                continue;
                            };
                            let units = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                            let time = units_to_nanos(units, iface.units_per_sec)
                                .saturating_add(iface.offset_secs.saturating_mul(NANOS_PER_SEC));
                            self.last_time = time;
                            let caplen = (epb.caplen as usize).min(epb.data.len());
                            on_packet(&Packet {
                                number: self.notes.packets,
                                time,
                                link_type: iface.link_type,
                                data: &epb.data[..caplen],
                            });
                        }
                        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                            self.notes.packets += 1;
                            self.notes.packets_without_timestamp += 1;
                            if let Some(iface) = self.interfaces.first().copied() {
                                let caplen = (spb.origlen as usize).min(spb.data.len());
                                on_packet(&Packet {
                                    number: self.notes.packets,
                                    time: self.last_time,
                                    link_type: iface.link_type,
                                    data: &spb.data[..caplen],
                                });
                            } else {
                                self.notes.packets_unknown_interface += 1;
                            }
                        }
                        PcapBlockOwned::NG(_) => {}
                    }
                    self.inner.consume(consumed);
                    self.notes.bytes_read += consumed as u64;
                }
                Err(PcapError::Eof) => break,
                Err(PcapError::Incomplete(_)) => {
                    self.inner
                        .refill()
                        .map_err(|_| CaptureError::Io(io::Error::other("read failed")))?;
                }
                Err(PcapError::UnexpectedEof) => {
                    let remaining = self.inner.data().len();
                    self.notes.truncated_tail = Some(format!(
                        "capture ends inside record {} at byte offset {}: {} of its bytes are present; the {} packets before it were analysed",
                        self.notes.packets + 1,
                        self.notes.bytes_read,
                        remaining,
                        self.notes.packets
                    ));
                    break;
                }
                Err(PcapError::BufferTooSmall) => {
                    let claimed = self.claimed_record_len();
                    let limit = match self.format {
                        CaptureFormat::Pcap => MAX_RECORD_BYTES as usize + 16,
                        CaptureFormat::PcapNg => MAX_BLOCK_BYTES,
                    };
                    if claimed > limit {
                        return Err(CaptureError::RecordTooLong {
                            packet: self.notes.packets + 1,
                            offset: self.notes.bytes_read,
                            claimed: claimed as u64,
                            limit: limit as u64,
                        });
                    }
                    let want = (claimed + 64).next_power_of_two().max(BUFFER_BYTES);
                    self.inner.grow(want);
                    self.inner
                        .refill()
                        .map_err(|_| CaptureError::Io(io::Error::other("read failed")))?;
                }
                Err(PcapError::ReadError) => {
                    return Err(CaptureError::Io(io::Error::other("read failed")));
                }
                Err(_) => {
                    return Err(CaptureError::Corrupt {
                        packet: self.notes.packets + 1,
                        offset: self.notes.bytes_read,
                        detail: format!("the {} block here cannot be parsed", self.format.name()),
                    });
                }
            }
        }
        Ok(self.notes)
    }

    /// Length in bytes that the record or block at the read position claims.
    fn claimed_record_len(&self) -> usize {
        let data = self.inner.data();
        match self.format {
            CaptureFormat::Pcap => {
                if data.len() < 16 {
                    return 16;
                }
                let raw: [u8; 4] = data[8..12].try_into().unwrap_or_default();
                let le = u32::from_le_bytes(raw);
                let be = u32::from_be_bytes(raw);
                // The byte order is the file's; the smaller reading is never the wrong one
                // for a sane record, and a corrupt one is over the limit either way.
                16 + le.min(be) as usize
            }
            CaptureFormat::PcapNg => {
                if data.len() < 8 {
                    return 8;
                }
                let raw: [u8; 4] = data[4..8].try_into().unwrap_or_default();
                u32::from_le_bytes(raw).min(u32::from_be_bytes(raw)) as usize
            }
        }
    }
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

fn units_to_nanos(units: u64, units_per_sec: u64) -> Nanos {
    let nanos = u128::from(units) * NANOS_PER_SEC as u128 / u128::from(units_per_sec);
    i64::try_from(nanos).unwrap_or(i64::MAX)
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
        [0x0a, 0x0d, 0x0d, 0x0a] => CaptureFormat::PcapNg,
        [0xa1, 0xb2, 0xc3, 0xd4]
        | [0xd4, 0xc3, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0x3c, 0x4d]
        | [0x4d, 0x3c, 0xb2, 0xa1]
        | [0xa1, 0xb2, 0xcd, 0x34]
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
