//! Capture parsing over arbitrary bytes: format detection, the framing of every pcap
//! record and pcapng block, then the link, network and transport headers of every packet.
//!
//! Any error the reader returns is fine; a panic, a hang or unbounded memory is a bug,
//! and so is a packet that breaks what the reader promises (numbers, times, link types).

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use tcpstall_core::capture::{CaptureReader, MAX_TIME, decode_packet};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = CaptureReader::new(Cursor::new(data.to_vec())) else {
        return;
    };
    let mut last_number = 0;
    let result = reader.for_each_packet(|packet| {
        // Packet numbers count up from 1, whatever the blocks around them.
        assert!(packet.number > last_number, "packet numbers go backwards");
        last_number = packet.number;
        assert!(
            (0..=MAX_TIME).contains(&packet.time),
            "packet time {} out of range",
            packet.time
        );
        assert!((0..=0xffff).contains(&packet.link_type), "link type");
        assert!(packet.data.len() <= data.len());
        if let Ok(segment) = decode_packet(packet) {
            assert_eq!(segment.time, packet.time);
            let _ = segment.seq_len();
        }
    });
    if let Ok(notes) = result {
        assert!(notes.packets >= last_number);
        assert!(notes.bytes_read <= data.len() as u64);
    }
});
