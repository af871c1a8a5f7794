//! The one record every source produces: a TCP segment as seen at a capture point.
//!
//! Captures, the simulator and the lab all turn what they see into [`Segment`]s; the
//! flow tracker and the detector never know where a segment came from.

use std::fmt;
use std::net::SocketAddr;

use crate::seq::SeqNumber;

/// Nanoseconds since the Unix epoch (or since any fixed origin, for synthetic sources).
pub type Nanos = i64;

pub const NANOS_PER_SEC: i64 = 1_000_000_000;
pub const NANOS_PER_MILLI: i64 = 1_000_000;

/// Seconds as `f64`, for display and JSON.
pub fn secs(n: Nanos) -> f64 {
    n as f64 / NANOS_PER_SEC as f64
}

/// Milliseconds as `f64`, for display.
pub fn millis(n: Nanos) -> f64 {
    n as f64 / NANOS_PER_MILLI as f64
}

/// TCP header flags (RFC 9293 section 3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;

    pub fn fin(self) -> bool {
        self.0 & Self::FIN != 0
    }
    pub fn syn(self) -> bool {
        self.0 & Self::SYN != 0
    }
    pub fn rst(self) -> bool {
        self.0 & Self::RST != 0
    }
    pub fn psh(self) -> bool {
        self.0 & Self::PSH != 0
    }
    pub fn ack(self) -> bool {
        self.0 & Self::ACK != 0
    }
    pub fn urg(self) -> bool {
        self.0 & Self::URG != 0
    }
}

impl fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // tcpdump's letters: S F R P U and '.' for ACK.
        let mut any = false;
        for (bit, letter) in [
            (Self::SYN, 'S'),
            (Self::FIN, 'F'),
            (Self::RST, 'R'),
            (Self::PSH, 'P'),
            (Self::URG, 'U'),
            (Self::ACK, '.'),
        ] {
            if self.0 & bit != 0 {
                write!(f, "{letter}")?;
                any = true;
            }
        }
        if !any {
            write!(f, "none")?;
        }
        Ok(())
    }
}

/// The TCP options this project reads (RFC 9293, RFC 7323, RFC 2018).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    /// Number of SACK blocks carried (their edges are not needed by the detector).
    pub sack_blocks: u8,
    /// (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

/// One TCP segment as seen at a capture point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub time: Nanos,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: SeqNumber,
    pub ack: SeqNumber,
    pub flags: TcpFlags,
    /// The raw window field, not yet scaled.
    pub window: u16,
    /// Payload length from the IP header, even when the capture cut the payload off.
    pub payload_len: u32,
    /// The IPv4 header's Identification field; 0 where there is none (IPv6, a source
    /// without IP headers) and where a stack leaves it 0, which tells nothing.
    pub ip_id: u16,
    /// The IPv4 TTL or IPv6 hop limit as captured: the sender's initial value less the
    /// routers on the way; 0 where the source has no IP header.
    pub ttl: u8,
    pub options: TcpOptions,
    /// The overlay network that carried the segment (a VXLAN or Geneve network, an NVGRE
    /// virtual subnet), 0 when none. Two overlays may reuse the same addresses, so it is
    /// part of a connection's identity. Never above [`MAX_TUNNEL_ID`].
    pub tunnel: u32,
}

/// The largest overlay identifier a [`Segment`] carries (29 bits).
pub const MAX_TUNNEL_ID: u32 = (1 << 29) - 1;

impl Segment {
    /// Sequence space this segment occupies: payload plus one for SYN and one for FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload_len + u32::from(self.flags.syn()) + u32::from(self.flags.fin())
    }

    /// An ACK with no payload and no SYN, FIN or RST.
    pub fn is_pure_ack(&self) -> bool {
        self.payload_len == 0
            && self.flags.ack()
            && self.flags.0 & (TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST) == 0
    }
}
