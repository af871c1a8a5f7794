//! Compressed captures written by hand, so that they owe nothing to the decoders under
//! test: gzip with stored deflate blocks (RFC 1951 3.2.4, RFC 1952), zstd with raw
//! blocks (RFC 8878 3.1.1).

/// CRC-32 as gzip uses it (RFC 1952 8), bit by bit.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

pub fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let chunks: Vec<&[u8]> = data.chunks(1000).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = chunk.len() as u16;
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend(*chunk);
    }
    out.extend(crc32(data).to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out
}

pub fn zstd_raw(data: &[u8]) -> Vec<u8> {
    // Frame header descriptor: single segment, 4-byte content size.
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0b1010_0000];
    out.extend((data.len() as u32).to_le_bytes());
    let chunks: Vec<&[u8]> = data.chunks(1000).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = u32::from(i + 1 == chunks.len());
        let header = last | (chunk.len() as u32) << 3;
        out.extend(&header.to_le_bytes()[..3]);
        out.extend(*chunk);
    }
    out
}
