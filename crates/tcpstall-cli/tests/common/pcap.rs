//! The shipped capture read by hand, and pcap/pcapng writers and IPv4/TCP packets
//! written by hand, so that the inputs the tests build owe nothing to the reader they
//! test.

use std::fs;
use std::sync::OnceLock;

/// `captures/seed002-two-writes.pcap`: classic pcap, little-endian, microseconds,
/// Ethernet, one IPv4 loopback connection to port 8000.
pub const ORIGINAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../captures/seed002-two-writes.pcap"
);
pub const SERVER_PORT: u16 = 8000;
pub const LINK_ETHERNET: u32 = 1;
pub const LINK_RAW: u32 = 101;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// One record of the shipped capture: a whole Ethernet frame (IPv4, TCP).
#[derive(Clone, Debug)]
pub struct Record {
    pub sec: u32,
    pub usec: u32,
    pub frame: Vec<u8>,
}

impl Record {
    pub fn nanos(&self) -> u64 {
        u64::from(self.sec) * 1_000_000_000 + u64::from(self.usec) * 1_000
    }

    pub fn micros(&self) -> u64 {
        u64::from(self.sec) * 1_000_000 + u64::from(self.usec)
    }

    pub fn set_micros(&mut self, micros: u64) {
        self.sec = (micros / 1_000_000) as u32;
        self.usec = (micros % 1_000_000) as u32;
    }

    /// Offset of the TCP header in the frame.
    pub fn tcp_at(&self) -> usize {
        14 + usize::from(self.frame[14] & 0x0f) * 4
    }

    pub fn src_port(&self) -> u16 {
        let at = self.tcp_at();
        u16::from_be_bytes([self.frame[at], self.frame[at + 1]])
    }

    pub fn sent_by_client(&self) -> bool {
        self.src_port() != SERVER_PORT
    }

    pub fn flags(&self) -> u8 {
        self.frame[self.tcp_at() + 13]
    }

    /// The 32-bit TCP header field at `at` (4: sequence number, 8: acknowledgment).
    pub fn field(&self, at: usize) -> u32 {
        let at = self.tcp_at() + at;
        u32::from_be_bytes(self.frame[at..at + 4].try_into().unwrap())
    }

    pub fn set_field(&mut self, at: usize, value: u32) {
        let at = self.tcp_at() + at;
        self.frame[at..at + 4].copy_from_slice(&value.to_be_bytes());
    }

    pub fn payload_len(&self) -> usize {
        let ip = &self.frame[14..];
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let tcp_header = usize::from(self.frame[self.tcp_at() + 12] >> 4) * 4;
        total - (self.tcp_at() - 14) - tcp_header
    }
}

pub fn ether_type(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[12], frame[13]])
}

pub fn original_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| fs::read(ORIGINAL).expect("read the shipped capture"))
}

/// The classic pcap records of the shipped file: 24-byte file header, then 16-byte record
/// headers (seconds, microseconds, captured length, original length), little-endian.
pub fn original_records() -> &'static [Record] {
    static RECORDS: OnceLock<Vec<Record>> = OnceLock::new();
    RECORDS.get_or_init(|| {
        let bytes = original_bytes();
        assert!(bytes.len() >= 24, "shipped capture too short");
        assert_eq!(
            bytes[..4],
            [0xd4, 0xc3, 0xb2, 0xa1],
            "little-endian microsecond pcap"
        );
        let le32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!(le32(20), LINK_ETHERNET, "shipped capture is Ethernet");
        let mut records = Vec::new();
        let mut at = 24;
        while at < bytes.len() {
            assert!(at + 16 <= bytes.len(), "record header cut at {at}");
            let (sec, usec, caplen, origlen) =
                (le32(at), le32(at + 4), le32(at + 8), le32(at + 12));
            assert_eq!(caplen, origlen, "shipped capture holds whole frames");
            let start = at + 16;
            let end = start + caplen as usize;
            assert!(end <= bytes.len(), "record data cut at {start}");
            let frame = bytes[start..end].to_vec();
            assert_eq!(
                ether_type(&frame),
                ETHERTYPE_IPV4,
                "shipped frames are IPv4"
            );
            records.push(Record { sec, usec, frame });
            at = end;
        }
        assert!(!records.is_empty());
        records
    })
}

#[derive(Clone, Copy, Debug)]
pub enum Endian {
    Little,
    Big,
}

impl Endian {
    pub fn u16(self, v: u16) -> [u8; 2] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    pub fn u32(self, v: u32) -> [u8; 4] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    pub fn u64(self, v: u64) -> [u8; 8] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }
}

/// A byte buffer whose integers are written in one byte order.
pub struct Buf {
    pub endian: Endian,
    pub bytes: Vec<u8>,
}

impl Buf {
    pub fn new(endian: Endian) -> Self {
        Buf {
            endian,
            bytes: Vec::new(),
        }
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes.extend_from_slice(&self.endian.u16(v));
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&self.endian.u32(v));
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&self.endian.u64(v));
        self
    }

    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(b);
        self
    }

    /// Zero bytes up to the next multiple of 4.
    pub fn pad4(&mut self) -> &mut Self {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Classic pcap.
// ---------------------------------------------------------------------------------------------

/// libpcap's MAXIMUM_SNAPLEN, the documented record limit.
pub const MAX_RECORD: u32 = 262_144;

/// One record to write: `frac` is microseconds or nanoseconds, as the file says.
pub struct PcapRecord {
    pub sec: u32,
    pub frac: u32,
    pub orig_len: u32,
    pub data: Vec<u8>,
}

impl PcapRecord {
    pub fn whole(record: &Record, data: Vec<u8>, nanos: bool) -> Self {
        PcapRecord {
            sec: record.sec,
            frac: if nanos {
                record.usec * 1_000
            } else {
                record.usec
            },
            orig_len: data.len() as u32,
            data,
        }
    }
}

pub fn write_pcap(
    endian: Endian,
    nanos: bool,
    link_type: u32,
    snaplen: u32,
    records: &[PcapRecord],
) -> Vec<u8> {
    let mut out = Buf::new(endian);
    out.u32(if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 })
        .u16(2)
        .u16(4)
        .u32(0) // thiszone
        .u32(0) // sigfigs
        .u32(snaplen)
        .u32(link_type);
    for r in records {
        out.u32(r.sec)
            .u32(r.frac)
            .u32(r.data.len() as u32)
            .u32(r.orig_len)
            .raw(&r.data);
    }
    out.bytes
}

/// `records` as a little-endian microsecond pcap with the given link type.
pub fn pcap(link_type: u32, records: &[Record]) -> Vec<u8> {
    let records: Vec<PcapRecord> = records
        .iter()
        .map(|r| PcapRecord::whole(r, r.frame.clone(), false))
        .collect();
    write_pcap(Endian::Little, false, link_type, MAX_RECORD, &records)
}

/// The original records, re-framed by `frame`, as a little-endian microsecond pcap.
pub fn pcap_with_frames(link_type: u32, frame: impl Fn(&Record) -> Vec<u8>) -> Vec<u8> {
    let records: Vec<PcapRecord> = original_records()
        .iter()
        .map(|r| PcapRecord::whole(r, frame(r), false))
        .collect();
    write_pcap(Endian::Little, false, link_type, MAX_RECORD, &records)
}

/// A little-endian microsecond pcap file header, for records written one at a time
/// with [`pcap_record`].
pub fn pcap_header(link_type: u32) -> Vec<u8> {
    write_pcap(Endian::Little, false, link_type, MAX_RECORD, &[])
}

/// One little-endian microsecond record header claiming `caplen` captured and
/// `orig_len` original bytes, whatever `data` holds, then `data`.
pub fn pcap_record(out: &mut Vec<u8>, micros: u64, caplen: u32, orig_len: u32, data: &[u8]) {
    let mut record = Buf::new(Endian::Little);
    record
        .u32((micros / 1_000_000) as u32)
        .u32((micros % 1_000_000) as u32)
        .u32(caplen)
        .u32(orig_len)
        .raw(data);
    out.extend(record.bytes);
}

// ---------------------------------------------------------------------------------------------
// pcapng.
// ---------------------------------------------------------------------------------------------

// pcapng block types (draft-ietf-opsawg-pcapng).
pub const SHB: u32 = 0x0a0d_0d0a;
pub const IDB: u32 = 1;
pub const OBSOLETE_PB: u32 = 2;
pub const SPB: u32 = 3;
pub const NRB: u32 = 4;
pub const ISB: u32 = 5;
pub const EPB: u32 = 6;

/// A pcapng block: type, total length, body padded to 4 bytes, total length again.
pub fn ng_block(endian: Endian, block_type: u32, body: &[u8]) -> Vec<u8> {
    let padded = body.len().div_ceil(4) * 4;
    let total = (12 + padded) as u32;
    let mut out = Buf::new(endian);
    out.u32(block_type).u32(total).raw(body).pad4().u32(total);
    out.bytes
}

/// A Section Header Block, version 1.0, of unknown length.
pub fn ng_section_header(endian: Endian) -> Vec<u8> {
    let mut body = Buf::new(endian);
    body.u32(0x1a2b_3c4d) // byte-order magic
        .u16(1)
        .u16(0)
        .u64(u64::MAX);
    ng_block(endian, SHB, &body.bytes)
}

/// An Interface Description Block; `tsresol` adds an if_tsresol option, `name` an if_name one.
pub fn ng_interface(
    endian: Endian,
    link_type: u16,
    tsresol: Option<u8>,
    name: Option<&str>,
) -> Vec<u8> {
    let mut body = Buf::new(endian);
    body.u16(link_type).u16(0).u32(MAX_RECORD);
    let mut any_option = false;
    if let Some(name) = name {
        body.u16(2)
            .u16(name.len() as u16)
            .raw(name.as_bytes())
            .pad4();
        any_option = true;
    }
    if let Some(resol) = tsresol {
        body.u16(9).u16(1).raw(&[resol]).pad4();
        any_option = true;
    }
    if any_option {
        body.u16(0).u16(0); // opt_endofopt
    }
    ng_block(endian, IDB, &body.bytes)
}

/// An Enhanced Packet Block holding all of `data`, at `units` of its interface's resolution.
pub fn ng_enhanced_packet(endian: Endian, if_id: u32, units: u64, data: &[u8]) -> Vec<u8> {
    let mut body = Buf::new(endian);
    body.u32(if_id)
        .u32((units >> 32) as u32)
        .u32(units as u32)
        .u32(data.len() as u32)
        .u32(data.len() as u32)
        .raw(data);
    ng_block(endian, EPB, &body.bytes)
}

/// `records` as pcapng: one Ethernet interface in microseconds.
pub fn pcapng(e: Endian, records: &[Record]) -> Vec<u8> {
    let mut out = ng_section_header(e);
    out.extend(ng_interface(e, LINK_ETHERNET as u16, None, None));
    for r in records {
        out.extend(ng_enhanced_packet(e, 0, r.micros(), &r.frame));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Packets built from scratch: IPv4 and TCP, no options.
// ---------------------------------------------------------------------------------------------

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

#[derive(Clone, Copy)]
pub struct Tcp {
    pub src: ([u8; 4], u16),
    pub dst: ([u8; 4], u16),
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: usize,
}

impl Tcp {
    /// An IPv4 packet (raw IP link type) carrying this segment; the payload is zeros.
    pub fn ipv4(&self) -> Vec<u8> {
        let total = 20 + 20 + self.payload;
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&(total as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]); // id, DF, TTL, TCP, checksum
        p.extend_from_slice(&self.src.0);
        p.extend_from_slice(&self.dst.0);
        p.extend_from_slice(&self.src.1.to_be_bytes());
        p.extend_from_slice(&self.dst.1.to_be_bytes());
        p.extend_from_slice(&self.seq.to_be_bytes());
        p.extend_from_slice(&self.ack.to_be_bytes());
        p.push(5 << 4);
        p.push(self.flags);
        p.extend_from_slice(&65_535u16.to_be_bytes());
        p.extend_from_slice(&[0; 4]); // checksum, urgent pointer
        p.resize(total, 0);
        p
    }

    /// The same packet in an Ethernet frame.
    pub fn ethernet(&self) -> Vec<u8> {
        let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f.extend(self.ipv4());
        f
    }
}
