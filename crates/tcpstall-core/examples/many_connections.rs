//! Writes a capture of very many short TCP connections, for measuring memory:
//!
//!     cargo run --release -p tcpstall-core --example many_connections -- OUT.pcap 3000000 [half-open]
//!
//! Each connection is a handshake, a small request, a response, and a close (six
//! packets); `OPEN` of them (default 10,000) overlap at any time, so the capture is a
//! busy server's, not a sequence of one-at-a-time exchanges. With `half-open`, every
//! connection is a lone SYN that is never answered: a scan or a SYN flood, which never
//! closes and must be ended as idle.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use tcpstall_core::capture::PcapWriter;
use tcpstall_core::segment::{Nanos, Segment, TcpFlags, TcpOptions};
use tcpstall_core::seq::SeqNumber;

const OPEN: u64 = 10_000;
const PACKETS_PER_CONNECTION: u64 = 6;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(count)) = (
        args.first(),
        args.get(1)
            .and_then(|n| n.replace('_', "").parse::<u64>().ok()),
    ) else {
        eprintln!("usage: many_connections OUT.pcap CONNECTIONS [half-open]");
        return ExitCode::from(2);
    };
    let half_open = args.get(2).is_some_and(|a| a == "half-open");
    match write(path, count, half_open) {
        Ok(packets) => {
            eprintln!("{path}: {count} connections, {packets} packets");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("many_connections: {path}: {e}");
            ExitCode::from(1)
        }
    }
}

fn client_of(n: u64) -> SocketAddr {
    // 2^24 addresses times 30,000 ports: distinct 4-tuples for any count used here.
    let host = (n % (1 << 24)) as u32;
    let port = 20_000 + (n >> 24) as u16;
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | host)), port)
}

fn write(path: &str, count: u64, half_open: bool) -> io::Result<u64> {
    let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut out = PcapWriter::new(file, 0)?;
    let server = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)), 443);
    let mut packets = 0;
    let per_step: Nanos = 2_000; // 2 us between packets
    if half_open {
        for n in 0..count {
            let syn = segment(
                packets as Nanos * per_step,
                client_of(n),
                server,
                1,
                0,
                TcpFlags::SYN,
                0,
            );
            out.write_segment(&syn)?;
            packets += 1;
        }
        out.flush()?;
        return Ok(packets);
    }
    // Step k of connection n happens at slot n + k * OPEN: OPEN connections interleave.
    let total_slots = count + (PACKETS_PER_CONNECTION - 1) * OPEN;
    for slot in 0..total_slots {
        for step in 0..PACKETS_PER_CONNECTION {
            let Some(n) = slot.checked_sub(step * OPEN) else {
                continue;
            };
            if n >= count {
                continue;
            }
            let time = packets as Nanos * per_step;
            let client = client_of(n);
            let (c_isn, s_isn) = (1000u32, 5000u32);
            let seg = match step {
                0 => segment(time, client, server, c_isn, 0, TcpFlags::SYN, 0),
                1 => segment(
                    time,
                    server,
                    client,
                    s_isn,
                    c_isn + 1,
                    TcpFlags::SYN | TcpFlags::ACK,
                    0,
                ),
                2 => segment(
                    time,
                    client,
                    server,
                    c_isn + 1,
                    s_isn + 1,
                    TcpFlags::ACK | TcpFlags::PSH,
                    100,
                ),
                3 => segment(
                    time,
                    server,
                    client,
                    s_isn + 1,
                    c_isn + 101,
                    TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN,
                    300,
                ),
                4 => segment(
                    time,
                    client,
                    server,
                    c_isn + 101,
                    s_isn + 302,
                    TcpFlags::ACK | TcpFlags::FIN,
                    0,
                ),
                _ => segment(
                    time,
                    server,
                    client,
                    s_isn + 302,
                    c_isn + 102,
                    TcpFlags::ACK,
                    0,
                ),
            };
            out.write_segment(&seg)?;
            packets += 1;
        }
    }
    out.flush()?;
    Ok(packets)
}

fn segment(
    time: Nanos,
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    len: u32,
) -> Segment {
    Segment {
        time,
        src,
        dst,
        seq: SeqNumber(seq),
        ack: SeqNumber(ack),
        flags: TcpFlags(flags),
        window: 1024,
        payload_len: len,
        ip_id: 0,
        ttl: 64,
        options: TcpOptions {
            mss: (flags & TcpFlags::SYN != 0).then_some(1460),
            ..TcpOptions::default()
        },
        tunnel: 0,
    }
}
