//! Writing a capture again as pcapng, with a comment on the packets that matter.
//!
//! `tcpstall analyze --annotate` reads the capture a second time and writes every packet
//! unchanged (its bytes, its length on the wire, its time, its link type) as an Enhanced
//! Packet Block, with opt_comment options (code 1) on the packets a report names, so a
//! Wireshark user finds them with `frame.comment contains "tcpstall"`.
//!
//! Each input interface (its index, link type and timestamp resolution) becomes one
//! Interface Description Block, written before its first packet, with the same
//! if_tsresol: times keep the resolution they were recorded in. An interface recorded
//! finer than nanoseconds (if_tsresol 10^-12, or a power of two that does not divide a
//! second into whole nanoseconds) is written in nanoseconds, the precision the reader
//! keeps. Times are absolute: an input's if_tsoffset is already added to them.

use std::io::{self, Read, Write};

use crate::capture::{CaptureError, CaptureReader, Packet, ReadNotes};
use crate::segment::NANOS_PER_SEC;

/// pcapng block types and option codes written here (draft-ietf-opsawg-pcapng).
const SECTION_HEADER: u32 = 0x0a0d_0d0a;
const INTERFACE_DESCRIPTION: u32 = 1;
const ENHANCED_PACKET: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_TSRESOL: u16 = 9;
/// An option's value is at most this long (its length field is 16 bits).
const MAX_OPTION_BYTES: usize = u16::MAX as usize;
/// if_tsresol for nanoseconds.
const NANOSECONDS_TSRESOL: u8 = 9;

/// One interface of the output: the input interface it stands for, and how it writes
/// times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OutputInterface {
    input: u32,
    link_type: i32,
    input_units: u64,
    /// Timestamp units per second written, and its if_tsresol byte.
    units: u64,
    tsresol: u8,
}

/// A little-endian pcapng writer: one section, interfaces declared as packets need them.
pub struct PcapngWriter<W: Write> {
    out: W,
    interfaces: Vec<OutputInterface>,
    /// The interface of the previous packet: most packets share it.
    last_interface: usize,
    block: Vec<u8>,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the Section Header Block.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut block = Vec::with_capacity(256);
        begin_block(&mut block, SECTION_HEADER);
        put_u32(&mut block, BYTE_ORDER_MAGIC);
        block.extend_from_slice(&1u16.to_le_bytes()); // major version
        block.extend_from_slice(&0u16.to_le_bytes()); // minor version
        block.extend_from_slice(&(-1i64).to_le_bytes()); // section length: not given
        let application = concat!("tcpstall ", env!("CARGO_PKG_VERSION"));
        put_option(&mut block, SHB_USERAPPL, application.as_bytes());
        put_option(&mut block, OPT_END, &[]);
        end_block(&mut block);
        out.write_all(&block)?;
        Ok(PcapngWriter {
            out,
            interfaces: Vec::new(),
            last_interface: 0,
            block,
        })
    }

    /// Writes `packet` as it was read, with `comments` as its opt_comment options (each
    /// cut at 65,535 bytes, on a character boundary).
    pub fn write_packet(&mut self, packet: &Packet<'_>, comments: &[&str]) -> io::Result<()> {
        let index = self.interface_for(packet)?;
        let iface = self.interfaces[index];
        let units = packet_units(packet.time, iface.units);
        let caplen = u32::try_from(packet.data.len())
            .map_err(|_| io::Error::other("a packet of more than 4 GiB"))?;
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        begin_block(&mut block, ENHANCED_PACKET);
        put_u32(&mut block, index as u32);
        put_u32(&mut block, (units >> 32) as u32);
        put_u32(&mut block, units as u32);
        put_u32(&mut block, caplen);
        put_u32(&mut block, packet.wire_len);
        block.extend_from_slice(packet.data);
        pad(&mut block);
        if !comments.is_empty() {
            for comment in comments {
                put_option(&mut block, OPT_COMMENT, cut_at_char(comment).as_bytes());
            }
            put_option(&mut block, OPT_END, &[]);
        }
        end_block(&mut block);
        let result = self.out.write_all(&block);
        self.block = block;
        result
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    /// The output interface standing for the packet's, declared on its first packet.
    fn interface_for(&mut self, packet: &Packet<'_>) -> io::Result<usize> {
        let matches = |i: &OutputInterface| {
            i.input == packet.interface
                && i.link_type == packet.link_type
                && i.input_units == packet.time_units
        };
        if self
            .interfaces
            .get(self.last_interface)
            .is_some_and(matches)
        {
            return Ok(self.last_interface);
        }
        if let Some(index) = self.interfaces.iter().position(matches) {
            self.last_interface = index;
            return Ok(index);
        }
        let (units, tsresol) = match tsresol_for(packet.time_units) {
            Some(tsresol) => (packet.time_units, tsresol),
            None => (NANOS_PER_SEC as u64, NANOSECONDS_TSRESOL),
        };
        let iface = OutputInterface {
            input: packet.interface,
            link_type: packet.link_type,
            input_units: packet.time_units,
            units,
            tsresol,
        };
        let link_type = u16::try_from(iface.link_type).map_err(|_| {
            io::Error::other(format!("link type {} does not fit pcapng", iface.link_type))
        })?;
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        begin_block(&mut block, INTERFACE_DESCRIPTION);
        block.extend_from_slice(&link_type.to_le_bytes());
        block.extend_from_slice(&0u16.to_le_bytes()); // reserved
        put_u32(&mut block, 0); // snap length: none
        if units != 1_000_000 {
            put_option(&mut block, IF_TSRESOL, &[tsresol]);
        }
        put_option(&mut block, OPT_END, &[]);
        end_block(&mut block);
        let result = self.out.write_all(&block);
        self.block = block;
        result?;
        self.interfaces.push(iface);
        self.last_interface = self.interfaces.len() - 1;
        Ok(self.last_interface)
    }
}

/// The if_tsresol byte for `units` per second, when a time in nanoseconds converts back to
/// those units exactly (they divide a second into whole nanoseconds).
fn tsresol_for(units: u64) -> Option<u8> {
    if units == 0 || !(NANOS_PER_SEC as u64).is_multiple_of(units) {
        return None;
    }
    (0..=9u8)
        .find(|&n| 10u64.pow(u32::from(n)) == units)
        .or_else(|| (0..=9u8).find(|&n| 1u64 << n == units).map(|n| 0x80 | n))
}

/// A packet time (nanoseconds since the epoch, never negative) in `units` per second.
fn packet_units(time: i64, units: u64) -> u64 {
    let nanos = u128::try_from(time).unwrap_or(0);
    (nanos * u128::from(units) / NANOS_PER_SEC as u128) as u64
}

/// `text` cut to at most [`MAX_OPTION_BYTES`] bytes, on a character boundary.
fn cut_at_char(text: &str) -> &str {
    if text.len() <= MAX_OPTION_BYTES {
        return text;
    }
    let mut end = MAX_OPTION_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn put_u32(block: &mut Vec<u8>, value: u32) {
    block.extend_from_slice(&value.to_le_bytes());
}

/// Starts a block: its type, and room for its length (filled in by [`end_block`]).
fn begin_block(block: &mut Vec<u8>, block_type: u32) {
    put_u32(block, block_type);
    put_u32(block, 0);
}

/// Ends a block: its length at both ends.
fn end_block(block: &mut Vec<u8>) {
    let len = (block.len() + 4) as u32;
    block[4..8].copy_from_slice(&len.to_le_bytes());
    put_u32(block, len);
}

/// Pads to a multiple of 4 bytes, as every pcapng field and option value is.
fn pad(block: &mut Vec<u8>) {
    block.resize(block.len().next_multiple_of(4), 0);
}

fn put_option(block: &mut Vec<u8>, code: u16, value: &[u8]) {
    block.extend_from_slice(&code.to_le_bytes());
    block.extend_from_slice(&(value.len() as u16).to_le_bytes());
    block.extend_from_slice(value);
    pad(block);
}

/// What an annotated copy holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnnotateSummary {
    /// Packets written, and those with at least one comment.
    pub packets: u64,
    pub annotated: u64,
    /// Packets of the input left out (on an interface no description declared): the
    /// output's frame numbers after them differ from the input's.
    pub left_out: u64,
    /// Comments whose packet was not in the capture read again.
    pub unplaced: u64,
}

/// Why an annotated copy could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    #[error("reading the capture again: {0}")]
    Read(#[from] CaptureError),
    #[error("writing the annotated capture: {0}")]
    Write(#[from] io::Error),
}

/// Reads the capture in `input` and writes every packet of it to `out` as pcapng, with
/// `comments` (packet number, text; in packet-number order, several for one packet kept
/// in their order) as packet comments.
pub fn annotate<R: Read + Send + 'static, W: Write>(
    input: R,
    out: W,
    comments: &[(u64, String)],
) -> Result<(AnnotateSummary, ReadNotes), AnnotateError> {
    let reader = CaptureReader::new(input)?;
    let mut writer = PcapngWriter::new(out)?;
    let mut summary = AnnotateSummary::default();
    let mut failed: Option<io::Error> = None;
    let mut next = 0;
    let mut expected = 1;
    let mut texts: Vec<&str> = Vec::new();
    let notes = reader.for_each_packet(|packet| {
        if failed.is_some() {
            return;
        }
        summary.left_out += packet.number.saturating_sub(expected);
        expected = packet.number + 1;
        while comments.get(next).is_some_and(|(n, _)| *n < packet.number) {
            summary.unplaced += 1;
            next += 1;
        }
        texts.clear();
        while let Some((n, text)) = comments.get(next)
            && *n == packet.number
        {
            texts.push(text);
            next += 1;
        }
        summary.packets += 1;
        summary.annotated += u64::from(!texts.is_empty());
        if let Err(e) = writer.write_packet(packet, &texts) {
            failed = Some(e);
        }
    })?;
    if let Some(e) = failed {
        return Err(AnnotateError::Write(e));
    }
    summary.left_out += notes.packets.saturating_sub(expected - 1);
    summary.unplaced += (comments.len() - next) as u64;
    writer.flush()?;
    Ok((summary, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every packet a reader hands over: number, time, link type, bytes, wire length,
    /// interface, timestamp units.
    type Read = (u64, i64, i32, Vec<u8>, u32, u32, u64);

    fn read_all(capture: Vec<u8>) -> Vec<Read> {
        let mut packets = Vec::new();
        CaptureReader::new(io::Cursor::new(capture))
            .expect("a capture")
            .for_each_packet(|p| {
                packets.push((
                    p.number,
                    p.time,
                    p.link_type,
                    p.data.to_vec(),
                    p.wire_len,
                    p.interface,
                    p.time_units,
                ))
            })
            .expect("read to the end");
        packets
    }

    /// A classic pcap file: little-endian, microsecond or nanosecond timestamps.
    fn pcap(nanos: bool, link_type: u32, records: &[(u32, u32, &[u8], u32)]) -> Vec<u8> {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let mut file = Vec::new();
        file.extend_from_slice(&magic.to_le_bytes());
        file.extend_from_slice(&2u16.to_le_bytes());
        file.extend_from_slice(&4u16.to_le_bytes());
        file.extend_from_slice(&[0; 8]);
        file.extend_from_slice(&65535u32.to_le_bytes());
        file.extend_from_slice(&link_type.to_le_bytes());
        for (secs, fraction, data, wire_len) in records {
            file.extend_from_slice(&secs.to_le_bytes());
            file.extend_from_slice(&fraction.to_le_bytes());
            file.extend_from_slice(&(data.len() as u32).to_le_bytes());
            file.extend_from_slice(&wire_len.to_le_bytes());
            file.extend_from_slice(data);
        }
        file
    }

    /// Writes every packet of `capture` through the writer, `comments` on some.
    fn rewrite(capture: Vec<u8>, comments: &[(u64, String)]) -> (Vec<u8>, AnnotateSummary) {
        let mut out = Vec::new();
        let (summary, _) =
            annotate(io::Cursor::new(capture), &mut out, comments).expect("annotated");
        (out, summary)
    }

    /// The comments of each Enhanced Packet Block of a little-endian pcapng file, and the
    /// if_tsresol of each interface, walked block by block.
    fn blocks(file: &[u8]) -> (Vec<Vec<String>>, Vec<Option<u8>>) {
        let u16_at = |at: usize| u16::from_le_bytes([file[at], file[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap());
        let options = |mut at: usize, end: usize| {
            let mut found = Vec::new();
            while at + 4 <= end {
                let (code, len) = (u16_at(at), usize::from(u16_at(at + 2)));
                if code == OPT_END {
                    break;
                }
                found.push((code, file[at + 4..at + 4 + len].to_vec()));
                at += 4 + len.next_multiple_of(4);
            }
            found
        };
        let (mut packets, mut interfaces) = (Vec::new(), Vec::new());
        let mut at = 0;
        while at < file.len() {
            let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
            assert_eq!(u32_at(at + len - 4) as usize, len, "trailing length");
            let end = at + len - 4;
            match kind {
                INTERFACE_DESCRIPTION => interfaces.push(
                    options(at + 16, end)
                        .into_iter()
                        .find(|(code, _)| *code == IF_TSRESOL)
                        .map(|(_, v)| v[0]),
                ),
                ENHANCED_PACKET => {
                    let caplen = u32_at(at + 20) as usize;
                    let comments = options(at + 28 + caplen.next_multiple_of(4), end)
                        .into_iter()
                        .filter(|(code, _)| *code == OPT_COMMENT)
                        .map(|(_, v)| String::from_utf8(v).unwrap())
                        .collect();
                    packets.push(comments);
                }
                _ => {}
            }
            at += len;
        }
        (packets, interfaces)
    }

    #[test]
    fn a_pcap_file_comes_back_with_the_same_bytes_times_and_lengths() {
        let frames: [&[u8]; 3] = [&[1, 2, 3, 4, 5], &[6; 60], &[7, 8, 9]];
        for nanos in [false, true] {
            let capture = pcap(
                nanos,
                1,
                &[
                    (1_700_000_000, 999_999, frames[0], 5),
                    (1_700_000_001, 1, frames[1], 1514),
                    (1_700_000_002, 123_456, frames[2], 3),
                ],
            );
            let comments = vec![
                (2, "tcpstall: first".to_string()),
                (2, "tcpstall: second".to_string()),
                (3, "tcpstall: ünïcode".to_string()),
            ];
            let (out, summary) = rewrite(capture.clone(), &comments);
            assert_eq!(read_all(out.clone()), read_all(capture), "nanos {nanos}");
            assert_eq!(
                summary,
                AnnotateSummary {
                    packets: 3,
                    annotated: 2,
                    left_out: 0,
                    unplaced: 0
                }
            );
            let (packets, interfaces) = blocks(&out);
            assert_eq!(
                packets,
                vec![
                    vec![],
                    vec!["tcpstall: first".to_string(), "tcpstall: second".into()],
                    vec!["tcpstall: ünïcode".to_string()],
                ]
            );
            // Microseconds are pcapng's default: no option needed.
            assert_eq!(interfaces, vec![if nanos { Some(9) } else { None }]);
        }
    }

    #[test]
    fn a_pcapng_file_keeps_its_interfaces_link_types_and_resolutions() {
        let mut first = Vec::new();
        let mut writer = PcapngWriter::new(&mut first).unwrap();
        let packet = |number, interface, link_type, time_units, time, data| Packet {
            number,
            time,
            link_type,
            data,
            wire_len: 1000,
            interface,
            time_units,
        };
        // Nanoseconds on Ethernet, milliseconds on raw IP, 2^-8 s on Linux cooked
        // capture, and 10^-12 s (written in nanoseconds).
        let written = [
            packet(
                1,
                0,
                1,
                1_000_000_000,
                1_600_000_000_123_456_789,
                &[1u8; 14][..],
            ),
            packet(2, 1, 101, 1_000, 1_600_000_001_007_000_000, &[2u8; 20][..]),
            packet(3, 0, 1, 1_000_000_000, 1_600_000_001_500_000_001, &[3u8; 1]),
            packet(4, 2, 113, 256, 1_600_000_002_003_906_250, &[4u8; 16]),
            packet(
                5,
                3,
                1,
                1_000_000_000_000,
                1_600_000_003_000_000_007,
                &[5u8; 7],
            ),
        ];
        for (i, p) in written.iter().enumerate() {
            let comment = format!("tcpstall: packet {}", i + 1);
            let comments: &[&str] = if i % 2 == 0 { &[&comment] } else { &[] };
            writer.write_packet(p, comments).unwrap();
        }
        drop(writer);
        let (packets, interfaces) = blocks(&first);
        assert_eq!(interfaces, vec![Some(9), Some(3), Some(0x88), Some(9)]);
        assert_eq!(packets[2], vec!["tcpstall: packet 3".to_string()]);
        assert!(packets[1].is_empty());
        let read = read_all(first.clone());
        assert_eq!(read.len(), written.len());
        for (got, want) in read.iter().zip(&written) {
            assert_eq!(got.0, want.number);
            assert_eq!(got.1, want.time, "packet {}", want.number);
            assert_eq!(got.2, want.link_type);
            assert_eq!(got.3, want.data);
            assert_eq!(got.4, want.wire_len);
            assert_eq!(got.5, want.interface);
        }
        // Once more through the annotation: the same packets, the same blocks.
        let (again, summary) = rewrite(first.clone(), &[]);
        assert_eq!(read_all(again.clone()), read);
        assert_eq!(summary.packets, 5);
        assert_eq!(blocks(&again).1, interfaces);
    }

    #[test]
    fn comments_for_packets_not_in_the_capture_are_counted() {
        let capture = pcap(false, 1, &[(1, 0, &[1, 2], 2), (2, 0, &[3, 4], 2)]);
        let comments = vec![
            (0, "tcpstall: none".to_string()),
            (2, "tcpstall: two".to_string()),
            (9, "tcpstall: nine".to_string()),
        ];
        let (out, summary) = rewrite(capture, &comments);
        assert_eq!(summary.annotated, 1);
        assert_eq!(summary.unplaced, 2);
        assert_eq!(blocks(&out).0[1], vec!["tcpstall: two".to_string()]);
    }

    #[test]
    fn a_long_comment_is_cut_on_a_character_boundary() {
        let long = "é".repeat(40_000);
        let cut = cut_at_char(&long);
        assert!(cut.len() <= MAX_OPTION_BYTES);
        assert!(long.starts_with(cut));
        let capture = pcap(false, 1, &[(1, 0, &[1, 2], 2)]);
        let (out, _) = rewrite(capture, &[(1, long.clone())]);
        assert_eq!(blocks(&out).0[0], vec![cut.to_string()]);
    }

    #[test]
    fn not_a_capture_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        let result = annotate(io::Cursor::new(b"hello world".to_vec()), &mut out, &[]);
        assert!(matches!(result, Err(AnnotateError::Read(_))));
    }
}
