//! Writing classic pcap files: the simulator's, the lab's and the benchmarks' output.

use std::io::{self, Write};
use std::net::IpAddr;

use etherparse::{
    EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6Header, TcpHeader, TcpOptionElement,
};

use crate::segment::{NANOS_PER_SEC, Nanos, Segment};

const LINKTYPE_ETHERNET: u32 = 1;

/// A classic pcap writer (nanosecond timestamps, Ethernet link type).
pub struct PcapWriter<W: Write> {
    out: W,
    frame: Vec<u8>,
    /// Payload bytes kept per packet; the rest is cut as a snap length would.
    snap_payload: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header. `snap_payload` bounds the payload bytes stored per packet
    /// (0 keeps headers only, which is all the analyzer needs).
    pub fn new(out: W, snap_payload: u32) -> io::Result<Self> {
        Self::with_link_type(out, snap_payload, LINKTYPE_ETHERNET)
    }

    /// Writes the file header for another link type, e.g. 101 (raw IP) for packets
    /// captured without a link-layer header; packets then go through
    /// [`write_frame`](Self::write_frame) as they are.
    pub fn with_link_type(mut out: W, snap_payload: u32, link_type: u32) -> io::Result<Self> {
        out.write_all(&0xa1b2_3c4du32.to_le_bytes())?; // nanosecond magic
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&(crate::capture::MAX_RECORD_BYTES).to_le_bytes())?;
        out.write_all(&link_type.to_le_bytes())?;
        Ok(PcapWriter {
            out,
            frame: Vec::with_capacity(256),
            snap_payload,
        })
    }

    /// Writes one raw Ethernet frame.
    pub fn write_frame(&mut self, time: Nanos, data: &[u8], orig_len: u32) -> io::Result<()> {
        let secs = time.div_euclid(NANOS_PER_SEC) as u32;
        let nanos = time.rem_euclid(NANOS_PER_SEC) as u32;
        self.out.write_all(&secs.to_le_bytes())?;
        self.out.write_all(&nanos.to_le_bytes())?;
        self.out.write_all(&(data.len() as u32).to_le_bytes())?;
        self.out.write_all(&orig_len.to_le_bytes())?;
        self.out.write_all(data)
    }

    /// Builds the Ethernet, IP and TCP headers of `segment` and writes them as one packet.
    pub fn write_segment(&mut self, segment: &Segment) -> io::Result<()> {
        let mut frame = std::mem::take(&mut self.frame);
        frame.clear();
        let orig_len = encode_segment(segment, self.snap_payload, &mut frame)?;
        let result = self.write_frame(segment.time, &frame, orig_len);
        self.frame = frame;
        result
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Appends the frame for `segment` to `frame`; returns the frame's full (uncut) length.
pub fn encode_segment(
    segment: &Segment,
    snap_payload: u32,
    frame: &mut Vec<u8>,
) -> io::Result<u32> {
    let mut tcp = TcpHeader::new(
        segment.src.port(),
        segment.dst.port(),
        segment.seq.0,
        segment.window,
    );
    tcp.acknowledgment_number = segment.ack.0;
    tcp.fin = segment.flags.fin();
    tcp.syn = segment.flags.syn();
    tcp.rst = segment.flags.rst();
    tcp.psh = segment.flags.psh();
    tcp.ack = segment.flags.ack();
    let mut options = Vec::with_capacity(6);
    if let Some(mss) = segment.options.mss {
        options.push(TcpOptionElement::MaximumSegmentSize(mss));
    }
    if segment.options.sack_permitted {
        options.push(TcpOptionElement::SelectiveAcknowledgementPermitted);
    }
    if let Some((val, ecr)) = segment.options.timestamps {
        options.push(TcpOptionElement::Noop);
        options.push(TcpOptionElement::Noop);
        options.push(TcpOptionElement::Timestamp(val, ecr));
    }
    if let Some(shift) = segment.options.window_scale {
        options.push(TcpOptionElement::Noop);
        options.push(TcpOptionElement::WindowScale(shift));
    }
    tcp.set_options(&options).map_err(io::Error::other)?;
    let tcp_len = tcp.header_len() + segment.payload_len as usize;
    let ether_type = match segment.src.ip() {
        IpAddr::V4(_) => EtherType::IPV4,
        IpAddr::V6(_) => EtherType::IPV6,
    };
    Ethernet2Header {
        source: [0x02, 0, 0, 0, 0, 1],
        destination: [0x02, 0, 0, 0, 0, 2],
        ether_type,
    }
    .write(frame)?;
    // A segment that came without an IP header leaves with the usual initial TTL.
    let ttl = if segment.ttl == 0 { 64 } else { segment.ttl };
    match (segment.src.ip(), segment.dst.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let payload = u16::try_from(tcp_len).unwrap_or(u16::MAX - 20);
            let mut ip = Ipv4Header::new(payload, ttl, IpNumber::TCP, src.octets(), dst.octets())
                .map_err(io::Error::other)?;
            ip.identification = segment.ip_id;
            ip.write(frame)?;
        }
        (src, dst) => {
            let to_v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            Ipv6Header {
                traffic_class: 0,
                flow_label: Default::default(),
                payload_length: u16::try_from(tcp_len).unwrap_or(u16::MAX),
                next_header: IpNumber::TCP,
                hop_limit: ttl,
                source: to_v6(src).octets(),
                destination: to_v6(dst).octets(),
            }
            .write(frame)?;
        }
    }
    tcp.write(frame)?;
    let kept = segment.payload_len.min(snap_payload) as usize;
    frame.resize(frame.len() + kept, 0);
    Ok((frame.len() - kept + segment.payload_len as usize) as u32)
}
