//! Writes a large, deterministic synthetic capture for benchmarking `tcpstall analyze`:
//! a server's view of a few thousand concurrent IPv4 connections over Ethernet, each
//! packet cut after 64 bytes of payload as a short snap length would (82 to 146 bytes a
//! record; about 8.5 million packets a GiB).
//!
//!     cargo run --release -p tcpstall-core --example synth_capture -- OUT.pcap 1G [SEED]
//!
//! SIZE takes K, M, G or T suffixes (powers of 1024); the file ends with the first
//! packet that reaches it. The same SEED and SIZE always give the same bytes, and a
//! smaller SIZE gives a prefix of a larger one.
//!
//! Every connection opens with a SYN, SYN-ACK, ACK handshake (MSS 1460, window scale 7,
//! SACK permitted, timestamps) and closes with FIN/ACK from either side. Most carry
//! request/response exchanges: a small request, a response of 1 to 20 segments of 1448
//! bytes, the client ACKing every second segment and delaying the ACK of an odd last one
//! by 40 ms when it has nothing to send sooner. Some are bulk downloads or uploads. Some
//! exchanges stall the way tcpstall looks for: a request written in two pieces (Nagle
//! holds the second until the server's delayed ACK, 40 ms later), a response whose tail
//! waits for the client's delayed ACK after an odd count of full segments (a full-sized
//! tail makes that a plain delayed-ACK stall), a slow server, a lost last segment sent
//! again after the RTO, long client think times. Timestamps are strictly increasing,
//! about 1.8 us apart on average. Memory stays bounded: only the open connections and
//! their next few packets are held.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use tcpstall_core::capture::PcapWriter;
use tcpstall_core::segment::{Nanos, Segment, TcpFlags, TcpOptions};
use tcpstall_core::seq::SeqNumber;

const US: Nanos = 1_000;
const MS: Nanos = 1_000_000;
/// Connections open at any time; a closed one is replaced at once.
const CONCURRENT: usize = 3000;
/// Payload bytes kept per packet, as a short snap length would.
const SNAP_PAYLOAD: u32 = 64;
const MSS_OPTION: u16 = 1460;
/// Payload of a full segment: the MSS less the 12-byte timestamp option.
const FULL: u32 = 1448;
const WSCALE: u8 = 7;
/// 2026-01-01T00:00:00Z.
const START: Nanos = 1_767_225_600 * 1_000_000_000;
/// Data segments generated at a time for a bulk transfer.
const BULK_CHUNK: u32 = 32;
pub(crate) const DEFAULT_SEED: u64 = 0x7c9_57a11;
const OUT_BUFFER: usize = 8 << 20;

const CLIENT: usize = 0;
const SERVER: usize = 1;

/// xorshift64* seeded through splitmix64.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        debug_assert!(lo < hi);
        let span = (hi - lo) as u64;
        lo + ((u128::from(self.next()) * u128::from(span)) >> 64) as i64
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Log-uniform in `lo..hi`: as many values in each decade.
    fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + self.unit() * (hi.ln() - lo.ln())).exp()
    }

    fn log_nanos(&mut self, lo: Nanos, hi: Nanos) -> Nanos {
        self.log_uniform(lo as f64, hi as f64) as Nanos
    }
}

/// One packet waiting to be written, in capture-point time.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    time: Nanos,
    /// Generation order within the connection: breaks ties in time.
    serial: u32,
    from: usize,
    seq: u32,
    ack: u32,
    len: u32,
    flags: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Handshake,
    Exchange { left: u32 },
    BulkDown { left: u64, started: bool },
    BulkUp { left: u64 },
    Close,
    Done,
}

/// Both sides of one connection. Side 0 is the client, side 1 the server; the capture
/// point is at the server, so a client packet answering a server packet is seen one
/// round trip after it.
struct Conn {
    addr: [SocketAddr; 2],
    /// Round trip from the capture point to the client and back.
    rtt: Nanos,
    /// The server's reaction time to a SYN.
    srv: Nanos,
    /// Next sequence number each side sends.
    nxt: [u32; 2],
    /// Next sequence number each side expects from the other.
    rcv: [u32; 2],
    /// Data segments each side has received and not yet acknowledged.
    unacked: [u32; 2],
    /// Each side's delayed-ACK timer: when its ACK would be seen, and what it acknowledges.
    pending: [Option<(Nanos, u32)>; 2],
    /// Raw windows (scaled by 2^7 after the SYNs).
    win: [u16; 2],
    ts_base: [u32; 2],
    last_tsval: [u32; 2],
    synack_tsval: u32,
    phase: Phase,
    after_handshake: Phase,
    /// When the next phase begins.
    t: Nanos,
    /// Packets generated and not yet written, latest first.
    queue: Vec<Pkt>,
    serial: u32,
    /// Every request of this client is written in two pieces.
    nagle_prone: bool,
    /// Time between data segments of a bulk transfer.
    pace: Nanos,
}

impl Conn {
    fn new(id: u64, start: Nanos, rng: &mut Rng) -> Conn {
        let host = rng.range(0, 1 << 20) as u32;
        let client_ip = Ipv4Addr::new(10, 1 + (host >> 16) as u8, (host >> 8) as u8, host as u8);
        let port = 32768 + (id % 28232) as u16;
        let services = [80u16, 443, 443, 443, 8080, 6379, 5432, 3306];
        let server_port = services[rng.range(0, services.len() as i64) as usize];
        let server_ip = Ipv4Addr::new(10, 0, 0, 1 + rng.range(0, 8) as u8);
        // Half the clients in the same data centre, half across the internet.
        let rtt = if rng.chance(0.5) {
            rng.log_nanos(80 * US, 1500 * US)
        } else {
            rng.log_nanos(4 * MS, 120 * MS)
        };
        let kind = rng.unit();
        let after_handshake = if kind < 0.03 {
            Phase::BulkDown {
                left: rng.log_uniform(64e3, 8e6) as u64,
                started: false,
            }
        } else if kind < 0.05 {
            Phase::BulkUp {
                left: rng.log_uniform(64e3, 2e6) as u64,
            }
        } else {
            Phase::Exchange {
                left: if rng.chance(0.25) {
                    1
                } else {
                    rng.log_uniform(1.0, 100.0) as u32
                },
            }
        };
        // 2 MiB with the scale: room for a bulk transfer's flight.
        let wide = 16384u16;
        let (win, pace) = match after_handshake {
            Phase::Exchange { .. } => ([502 + rng.range(0, 8) as u16, 509], 0),
            _ => {
                let win = if matches!(after_handshake, Phase::BulkDown { .. }) {
                    [wide, 509]
                } else {
                    [502, wide]
                };
                // Never more in flight than 70% of the receiver's window.
                let floor = rtt * i64::from(FULL) * 10 / 7 / (i64::from(wide) << WSCALE);
                (win, rng.range(15 * US, 200 * US).max(floor))
            }
        };
        Conn {
            addr: [
                SocketAddr::new(IpAddr::V4(client_ip), port),
                SocketAddr::new(IpAddr::V4(server_ip), server_port),
            ],
            rtt,
            srv: rng.range(15 * US, 60 * US),
            nxt: [rng.next() as u32, rng.next() as u32],
            rcv: [0, 0],
            unacked: [0, 0],
            pending: [None, None],
            win,
            ts_base: [(rng.next() >> 33) as u32, (rng.next() >> 33) as u32],
            last_tsval: [0, 0],
            synack_tsval: 0,
            phase: Phase::Handshake,
            after_handshake,
            t: start,
            queue: Vec::with_capacity(64),
            serial: 0,
            nagle_prone: rng.chance(0.01),
            pace,
        }
    }

    /// Time from a data segment of the other side being seen to this side's answer being
    /// seen, less the reaction time.
    fn lat(&self, side: usize) -> Nanos {
        if side == CLIENT { self.rtt } else { 0 }
    }

    fn push(&mut self, time: Nanos, from: usize, seq: u32, ack: u32, len: u32, flags: u8) {
        self.serial += 1;
        self.queue.push(Pkt {
            time,
            serial: self.serial,
            from,
            seq,
            ack,
            len,
            flags,
        });
    }

    /// A pure ACK from `side`.
    fn push_ack(&mut self, time: Nanos, side: usize, ack: u32) {
        let seq = self.nxt[side];
        self.push(time, side, seq, ack, 0, TcpFlags::ACK);
    }

    /// Lets `side`'s delayed-ACK timer fire: its pure ACK is seen then. Returns when.
    fn fire_pending(&mut self, side: usize) -> Option<Nanos> {
        let (fire, ack) = self.pending[side].take()?;
        self.unacked[side] = 0;
        self.push_ack(fire, side, ack);
        Some(fire)
    }

    /// Fires `side`'s delayed-ACK timer if it goes off before `t`.
    fn fire_pending_before(&mut self, side: usize, t: Nanos) {
        if let Some((fire, _)) = self.pending[side]
            && fire < t
        {
            self.fire_pending(side);
        }
    }

    /// `to` receives data from the other side ending at `end`, seen at `t`: every second
    /// segment is acknowledged at once, an odd one when the delayed-ACK timer fires.
    fn deliver(&mut self, to: usize, t: Nanos, end: u32, rng: &mut Rng) {
        let arrives = t + self.lat(to);
        self.fire_pending_before(to, arrives);
        self.rcv[to] = end;
        self.unacked[to] += 1;
        if self.unacked[to] >= 2 {
            self.unacked[to] = 0;
            self.pending[to] = None;
            let react = rng.range(5 * US, 30 * US);
            self.push_ack(arrives + react, to, end);
        } else {
            let delack = 40 * MS + rng.range(0, 4 * MS);
            self.pending[to] = Some((arrives + delack, end));
        }
    }

    /// `from` sends a segment at `t` (a delayed ACK due before it goes first; any other
    /// is carried by it) and the other side receives it. Returns the segment's sequence
    /// number.
    fn send(&mut self, from: usize, t: Nanos, flags: u8, len: u32, rng: &mut Rng) -> u32 {
        self.transmit(from, t, flags, len, true, rng)
    }

    /// As [`Conn::send`]; a segment not `delivered` is seen here and lost after.
    fn transmit(
        &mut self,
        from: usize,
        t: Nanos,
        flags: u8,
        len: u32,
        delivered: bool,
        rng: &mut Rng,
    ) -> u32 {
        let to = 1 - from;
        let has_ack = flags & TcpFlags::ACK != 0;
        if has_ack {
            self.fire_pending_before(from, t);
            self.pending[from] = None;
            self.unacked[from] = 0;
        }
        let seq = self.nxt[from];
        let ack = if has_ack { self.rcv[from] } else { 0 };
        self.push(t, from, seq, ack, len, flags);
        let syn_fin = u32::from(flags & (TcpFlags::SYN | TcpFlags::FIN) != 0);
        self.nxt[from] = seq.wrapping_add(len + syn_fin);
        if !delivered {
            return seq;
        }
        if syn_fin == 1 {
            // SYNs and FINs are not delayed-ACK material: the answer is explicit.
            self.rcv[to] = self.nxt[from];
        } else if len > 0 {
            let end = self.nxt[from];
            self.deliver(to, t, end, rng);
        }
        seq
    }

    /// Ends a phase: delayed ACKs that fire before the next phase begins are seen.
    fn settle(&mut self) {
        let t = self.t;
        self.fire_pending_before(CLIENT, t);
        self.fire_pending_before(SERVER, t);
    }

    fn think_time(rng: &mut Rng) -> Nanos {
        if rng.chance(0.15) {
            rng.log_nanos(20 * MS, 1000 * MS)
        } else {
            rng.log_nanos(200 * US, 20 * MS)
        }
    }

    /// The next phase after exchanges or a transfer: more exchanges, or the close.
    fn exchanges_then_close(left: u32) -> Phase {
        if left == 0 {
            Phase::Close
        } else {
            Phase::Exchange { left }
        }
    }

    /// Generates the packets of the next phase, from `self.t` on.
    fn advance(&mut self, rng: &mut Rng) {
        match self.phase {
            Phase::Handshake => self.handshake(rng),
            Phase::Exchange { left } => {
                self.exchange(rng);
                self.phase = Conn::exchanges_then_close(left - 1);
            }
            Phase::BulkDown { left, started } => self.bulk_down(left, started, rng),
            Phase::BulkUp { left } => self.bulk_up(left, rng),
            Phase::Close => self.close(rng),
            Phase::Done => {}
        }
        if self.phase != Phase::Done {
            self.settle();
        }
        // Latest first, so the next packet is popped from the end.
        self.queue
            .sort_unstable_by_key(|p| Reverse((p.time, p.serial)));
    }

    fn handshake(&mut self, rng: &mut Rng) {
        let t = self.t;
        self.send(CLIENT, t, TcpFlags::SYN, 0, rng);
        let t = t + self.srv;
        self.send(SERVER, t, TcpFlags::SYN | TcpFlags::ACK, 0, rng);
        let t = t + self.rtt + rng.range(5 * US, 30 * US);
        self.send(CLIENT, t, TcpFlags::ACK, 0, rng);
        self.t = t + rng.log_nanos(10 * US, 2 * MS);
        self.phase = self.after_handshake;
    }

    /// The client's request; returns when its last byte is seen.
    fn request(&mut self, rng: &mut Rng) -> Nanos {
        let t = self.t;
        let psh = TcpFlags::PSH | TcpFlags::ACK;
        if self.nagle_prone || rng.chance(0.03) {
            // Written in two pieces: Nagle holds the second until the first is
            // acknowledged, and the server delays that ACK.
            self.send(CLIENT, t, psh, rng.range(8, 100) as u32, rng);
            let acked = self.fire_pending(SERVER).unwrap_or(t);
            let t = acked + self.rtt + rng.range(5 * US, 30 * US);
            self.send(CLIENT, t, psh, rng.range(20, 600) as u32, rng);
            t
        } else {
            self.send(CLIENT, t, psh, rng.log_uniform(30.0, 1400.0) as u32, rng);
            t
        }
    }

    /// How long the server takes to answer.
    fn processing(rng: &mut Rng) -> Nanos {
        if rng.chance(0.02) {
            rng.log_nanos(10 * MS, 400 * MS)
        } else {
            rng.log_nanos(20 * US, 3 * MS)
        }
    }

    /// One request and its response; sets when the client acts next.
    fn exchange(&mut self, rng: &mut Rng) {
        let request_end = self.request(rng);
        let mut t = request_end + Conn::processing(rng);
        let r = rng.unit();
        let mut segments = if r < 0.45 {
            1
        } else if r < 0.75 {
            rng.range(2, 5) as u32
        } else {
            rng.range(5, 21) as u32
        };
        // Full segments sent before a tail that waits for the client's delayed ACK.
        let mut odd_block = None;
        if segments >= 2 && rng.chance(0.02) {
            let full = if (segments - 1) % 2 == 1 {
                segments - 1
            } else {
                segments - 2
            };
            let full = full.max(1);
            segments = full + 1;
            odd_block = Some(full);
        }
        let lose_last = odd_block.is_none() && rng.chance(0.003);
        let tail = if rng.chance(0.1) {
            FULL
        } else {
            rng.range(1, i64::from(FULL)) as u32
        };
        for i in 0..segments {
            let last = i + 1 == segments;
            let len = if last { tail } else { FULL };
            let flags = if last {
                TcpFlags::PSH | TcpFlags::ACK
            } else {
                TcpFlags::ACK
            };
            if i > 0 {
                t += rng.range(12 * US, 40 * US);
            }
            if odd_block == Some(i) {
                // Nagle holds the tail until the last full segment is acknowledged.
                if let Some(acked) = self.fire_pending(CLIENT) {
                    t = t.max(acked + rng.range(5 * US, 30 * US));
                }
            }
            if last && lose_last {
                // Seen here, lost on the way to the client, sent again after the RTO.
                let seq = self.transmit(SERVER, t, flags, len, false, rng);
                t += 200 * MS + self.rtt + rng.range(0, 10 * MS);
                let ack = self.rcv[SERVER];
                self.push(t, SERVER, seq, ack, len, flags);
                let end = self.nxt[SERVER];
                self.deliver(CLIENT, t, end, rng);
            } else {
                self.send(SERVER, t, flags, len, rng);
            }
        }
        self.t = t + self.rtt + Conn::think_time(rng);
    }

    /// Sends up to [`BULK_CHUNK`] full segments of the `left` bytes `side` still has to
    /// send, the last one pushed, from `t` on; returns the time after them and what is left.
    fn bulk_chunk(
        &mut self,
        side: usize,
        mut t: Nanos,
        mut left: u64,
        rng: &mut Rng,
    ) -> (Nanos, u64) {
        for _ in 0..BULK_CHUNK {
            if left == 0 {
                break;
            }
            let len = left.min(u64::from(FULL)) as u32;
            left -= u64::from(len);
            let flags = if left == 0 {
                TcpFlags::PSH | TcpFlags::ACK
            } else {
                TcpFlags::ACK
            };
            self.send(side, t, flags, len, rng);
            t += self.pace * rng.range(8, 13) / 10;
        }
        (t, left)
    }

    fn bulk_down(&mut self, left: u64, started: bool, rng: &mut Rng) {
        let mut t = self.t;
        if !started {
            let request_end = self.request(rng);
            t = request_end + Conn::processing(rng);
        }
        let (t, left) = self.bulk_chunk(SERVER, t, left, rng);
        if left > 0 {
            self.t = t;
            self.phase = Phase::BulkDown {
                left,
                started: true,
            };
        } else {
            self.t = t + self.rtt + Conn::think_time(rng);
            self.phase = Conn::exchanges_then_close(rng.range(0, 3) as u32);
        }
    }

    fn bulk_up(&mut self, left: u64, rng: &mut Rng) {
        let (t, left) = self.bulk_chunk(CLIENT, self.t, left, rng);
        if left > 0 {
            self.t = t;
            self.phase = Phase::BulkUp { left };
        } else {
            // The server's short answer, then maybe a few exchanges.
            let t = t + Conn::processing(rng);
            let len = rng.range(40, 400) as u32;
            self.send(SERVER, t, TcpFlags::PSH | TcpFlags::ACK, len, rng);
            self.t = t + self.rtt + Conn::think_time(rng);
            self.phase = Conn::exchanges_then_close(rng.range(0, 3) as u32);
        }
    }

    fn close(&mut self, rng: &mut Rng) {
        let fin = TcpFlags::FIN | TcpFlags::ACK;
        let t = self.t;
        let (first, rtt_first, rtt_second) = if rng.chance(0.6) {
            (CLIENT, 0, self.rtt)
        } else {
            (SERVER, self.rtt, 0)
        };
        self.send(first, t, fin, 0, rng);
        let t = t + rtt_first + rng.range(10 * US, 80 * US);
        self.send(1 - first, t, fin, 0, rng);
        let t = t + rtt_second + rng.range(5 * US, 30 * US);
        self.send(first, t, TcpFlags::ACK, 0, rng);
        for side in [CLIENT, SERVER] {
            self.pending[side] = None;
        }
        self.phase = Phase::Done;
    }

    /// When this connection next needs attention: its next packet, or its next phase.
    fn next_time(&self) -> Option<Nanos> {
        let head = self.queue.last().map(|p| p.time);
        if self.phase == Phase::Done {
            head
        } else {
            Some(head.map_or(self.t, |h| h.min(self.t)))
        }
    }

    /// A side's TCP timestamp clock (1 kHz) at capture time `t`.
    fn tsval(&self, side: usize, t: Nanos) -> u32 {
        let host_time = if side == CLIENT { t - self.rtt / 2 } else { t };
        let ticks = (host_time - START).div_euclid(MS);
        self.ts_base[side].wrapping_add(ticks as u32)
    }

    /// Turns a generated packet into the segment written, with its timestamp option.
    fn segment(&mut self, p: &Pkt, time: Nanos) -> Segment {
        let from = p.from;
        let syn = p.flags & TcpFlags::SYN != 0;
        let tsval = self.tsval(from, time);
        let tsecr = if from == SERVER {
            self.last_tsval[CLIENT]
        } else if syn {
            0
        } else {
            // What the client last received: the server's clock one round trip ago,
            // no older than the SYN-ACK and no newer than the server's last packet.
            let candidate = self.tsval(SERVER, time - self.rtt);
            if SeqNumber(candidate).distance_from(SeqNumber(self.synack_tsval)) < 0 {
                self.synack_tsval
            } else if SeqNumber(candidate).is_after(SeqNumber(self.last_tsval[SERVER])) {
                self.last_tsval[SERVER]
            } else {
                candidate
            }
        };
        self.last_tsval[from] = tsval;
        if syn && from == SERVER {
            self.synack_tsval = tsval;
        }
        let mut options = TcpOptions {
            timestamps: Some((tsval, tsecr)),
            ..TcpOptions::default()
        };
        let window = if syn {
            options.mss = Some(MSS_OPTION);
            options.window_scale = Some(WSCALE);
            options.sack_permitted = true;
            if from == CLIENT { 64240 } else { 65160 }
        } else {
            self.win[from]
        };
        Segment {
            time,
            src: self.addr[from],
            dst: self.addr[1 - from],
            seq: SeqNumber(p.seq),
            ack: SeqNumber(p.ack),
            flags: TcpFlags(p.flags),
            window,
            payload_len: p.len,
            ip_id: 0,
            ttl: 64,
            options,
            tunnel: 0,
        }
    }
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    count: Rc<Cell<u64>>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        self.count.set(self.count.get() + buf.len() as u64);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// "1G", "200M", "64k", "1000": bytes, with binary suffixes.
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last()?.to_ascii_uppercase() {
        'K' => (&t[..t.len() - 1], 10),
        'M' => (&t[..t.len() - 1], 20),
        'G' => (&t[..t.len() - 1], 30),
        'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

pub(crate) struct Totals {
    packets: u64,
    connections: u64,
    bytes: u64,
    last_time: Nanos,
}

pub(crate) fn generate(path: &str, target: u64, seed: u64) -> io::Result<Totals> {
    let file = File::create(path)?;
    let count = Rc::new(Cell::new(0u64));
    let out = Counting {
        inner: BufWriter::with_capacity(OUT_BUFFER, file),
        count: Rc::clone(&count),
    };
    let mut writer = PcapWriter::new(out, SNAP_PAYLOAD)?;
    let mut rng = Rng::new(seed);
    let mut conns = Vec::with_capacity(CONCURRENT);
    let mut heap = BinaryHeap::with_capacity(CONCURRENT);
    let mut opened = 0u64;
    for i in 0..CONCURRENT {
        let start = START + rng.range(0, 100 * MS);
        conns.push(Conn::new(opened, start, &mut rng));
        opened += 1;
        heap.push(Reverse((start, i)));
    }
    let mut packets = 0u64;
    let mut last_time = START - 1;
    // The latest generated time written, before the nudge below.
    let mut last_generated = START;
    while count.get() < target {
        let Some(Reverse((now, i))) = heap.pop() else {
            break;
        };
        let conn = &mut conns[i];
        let head = conn.queue.last().map(|p| p.time);
        if conn.phase != Phase::Done && head.is_none_or(|h| conn.t <= h) {
            conn.advance(&mut rng);
        } else if let Some(p) = conn.queue.pop() {
            assert!(
                p.time >= last_generated,
                "time went back: {} after {last_generated}",
                p.time
            );
            last_generated = p.time;
            // Strictly increasing timestamps across the file.
            let time = p.time.max(last_time + 1);
            last_time = time;
            let segment = conn.segment(&p, time);
            writer.write_segment(&segment)?;
            packets += 1;
        }
        if conn.phase == Phase::Done && conn.queue.is_empty() {
            // Replaced by a new connection, so as many stay open.
            let start = now + rng.range(0, 2 * MS);
            *conn = Conn::new(opened, start, &mut rng);
            opened += 1;
        }
        if let Some(next) = conns[i].next_time() {
            heap.push(Reverse((next, i)));
        }
    }
    writer.flush()?;
    let out = writer.into_inner();
    out.inner
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    Ok(Totals {
        packets,
        connections: opened,
        bytes: count.get(),
        last_time,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: synth_capture OUT.pcap SIZE [SEED]   (SIZE: bytes, or with K, M, G suffix)";
    if args.len() < 2 || args.len() > 3 {
        eprintln!("{usage}");
        return ExitCode::from(2);
    }
    let Some(target) = parse_size(&args[1]).filter(|&n| n > 0) else {
        eprintln!("synth_capture: bad SIZE {:?}\n{usage}", args[1]);
        return ExitCode::from(2);
    };
    let seed = match args.get(2).map(|s| s.parse::<u64>()) {
        None => DEFAULT_SEED,
        Some(Ok(seed)) => seed,
        Some(Err(_)) => {
            eprintln!("synth_capture: bad SEED {:?}\n{usage}", args[2]);
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    match generate(&args[0], target, seed) {
        Ok(totals) => {
            let span = (totals.last_time - START) as f64 / 1e9;
            eprintln!(
                "synth_capture: {}: {} bytes, {} packets, {} connections opened, {:.1} s of traffic, written in {:.1} s",
                args[0],
                totals.bytes,
                totals.packets,
                totals.connections,
                span,
                began.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("synth_capture: {}: {e}", args[0]);
            ExitCode::FAILURE
        }
    }
}
