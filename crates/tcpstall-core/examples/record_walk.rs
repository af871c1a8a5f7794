//! The floor under `tcpstall analyze`: reads a capture's records through the same reader
//! and counts them, decoding nothing.
//!
//!     cargo run --release -p tcpstall-core --example record_walk -- FILE

use std::fs::File;
use std::process::ExitCode;

use tcpstall_core::capture::CaptureReader;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: record_walk FILE");
        return ExitCode::from(2);
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("record_walk: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut bytes = 0u64;
    let result = CaptureReader::new(file).and_then(|reader| {
        reader.for_each_packet(|packet| {
            bytes += packet.data.len() as u64;
        })
    });
    match result {
        Ok(notes) => {
            println!("{} packets, {bytes} captured bytes", notes.packets);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("record_walk: {path}: {e}");
            ExitCode::from(2)
        }
    }
}
