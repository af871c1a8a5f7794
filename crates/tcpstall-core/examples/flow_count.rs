//! The least any connection tracker does, as a floor under `tcpstall analyze`: reads a
//! capture through tcpstall's reader, decodes each packet with its decoder, and counts
//! packets and payload bytes under the packet's connection in a hash map. No sequence
//! numbers, ACKs, windows, round trips or gaps; one thread, and every connection kept
//! to the end.
//!
//!     cargo run --release -p tcpstall-core --example flow_count -- FILE

use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use rustc_hash::FxHashMap;
use tcpstall_core::capture::{CaptureReader, decode_packet};

/// Packets and payload bytes of one connection.
#[derive(Default)]
struct Counts {
    packets: u64,
    bytes: u64,
}

/// An endpoint as plain numbers: the address (IPv4 mapped into IPv6) and the port.
type Endpoint = (u128, u16);

fn endpoint(addr: &SocketAddr) -> Endpoint {
    let ip = match addr.ip() {
        IpAddr::V4(ip) => ip.to_ipv6_mapped(),
        IpAddr::V6(ip) => ip,
    };
    (ip.to_bits(), addr.port())
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: flow_count FILE");
        return ExitCode::from(2);
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("flow_count: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut connections: FxHashMap<(Endpoint, Endpoint), Counts> = FxHashMap::default();
    let result = CaptureReader::new(file).and_then(|reader| {
        reader.for_each_packet(|packet| {
            if let Ok(segment) = decode_packet(packet) {
                let (src, dst) = (endpoint(&segment.src), endpoint(&segment.dst));
                let key = (src.min(dst), src.max(dst));
                let counts = connections.entry(key).or_default();
                counts.packets += 1;
                counts.bytes += u64::from(segment.payload_len);
            }
        })
    });
    match result {
        Ok(notes) => {
            let segments: u64 = connections.values().map(|c| c.packets).sum();
            let bytes: u64 = connections.values().map(|c| c.bytes).sum();
            println!(
                "{} packets, {segments} TCP segments, {} connections, {bytes} payload bytes",
                notes.packets,
                connections.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flow_count: {path}: {e}");
            ExitCode::from(2)
        }
    }
}
