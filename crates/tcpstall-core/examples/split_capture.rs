//! Splits a classic pcap capture into N files of about equal size, the way a capture
//! ring (`tcpdump -C`) cuts one: at record boundaries, each file with its own copy of the
//! file header, the records in their order. Together the files hold the same packets.
//!
//!     cargo run --release -p tcpstall-core --example split_capture -- IN.pcap N OUT_PREFIX
//!
//! writes OUT_PREFIX01.pcap ... OUT_PREFIX<N>.pcap (numbered from 1, two digits at least).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::process::ExitCode;

/// Classic pcap: file header, record header (RFC draft-ietf-opsawg-pcap 4 and 5).
const FILE_HEADER: usize = 24;
const RECORD_HEADER: usize = 16;
/// The most parts asked for: each is a file.
const MAX_PARTS: u64 = 10_000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, parts, prefix] = args.as_slice() else {
        eprintln!("usage: split_capture IN.pcap N OUT_PREFIX");
        return ExitCode::from(2);
    };
    let parts = match parts.parse::<u64>() {
        Ok(n) if (1..=MAX_PARTS).contains(&n) => n,
        _ => {
            eprintln!("split_capture: N must be 1 to {MAX_PARTS}");
            return ExitCode::from(2);
        }
    };
    match split(input, parts, prefix) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("split_capture: {input}: {e}");
            ExitCode::from(2)
        }
    }
}

fn split(input: &str, parts: u64, prefix: &str) -> io::Result<()> {
    let file = File::open(input)?;
    let total = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; FILE_HEADER];
    reader.read_exact(&mut header)?;
    let big_endian = match header[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => false,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => true,
        _ => return Err(io::Error::other("not a classic pcap file")),
    };
    let width = parts.to_string().len().max(2);
    let share = (total - FILE_HEADER as u64).div_ceil(parts);
    let mut record = Vec::with_capacity(1 << 16);
    let mut read: u64 = 0;
    let mut part = 0;
    let mut out: Option<BufWriter<File>> = None;
    // Each turn copies one record; the input is finite, so is the loop.
    loop {
        let mut head = [0u8; RECORD_HEADER];
        match reader.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        let caplen = [head[8], head[9], head[10], head[11]];
        let caplen = if big_endian {
            u32::from_be_bytes(caplen)
        } else {
            u32::from_le_bytes(caplen)
        };
        record.resize(caplen as usize, 0);
        match reader.read_exact(&mut record) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                eprintln!("split_capture: {input}: the last record is cut; left out");
                break;
            }
            Err(e) => return Err(e),
        }
        // A new part begins when the records so far fill the previous ones' shares.
        if out.is_none() || (read >= share * part && part < parts) {
            if let Some(mut done) = out.take() {
                done.flush()?;
            }
            part += 1;
            let mut next = BufWriter::with_capacity(
                1 << 20,
                File::create(format!("{prefix}{part:0width$}.pcap"))?,
            );
            next.write_all(&header)?;
            out = Some(next);
        }
        if let Some(out) = out.as_mut() {
            out.write_all(&head)?;
            out.write_all(&record)?;
        }
        read += (RECORD_HEADER + record.len()) as u64;
    }
    if let Some(mut done) = out.take() {
        done.flush()?;
    }
    println!("{part} files");
    Ok(())
}
