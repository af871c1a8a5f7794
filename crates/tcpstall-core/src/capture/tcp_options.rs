//! The TCP options a segment carries, read from its header's option bytes: the one
//! reader both the fast path and the full decoder use.

use crate::segment::TcpOptions;

/// TCP option kinds this project reads (RFC 9293 3.2, RFC 7323, RFC 2018).
mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// The TCP options this project reads, from the option bytes of a TCP header (RFC 9293
/// 3.2, RFC 7323, RFC 2018). Unknown kinds are skipped by their length; an option whose
/// length cannot be right ends the list, as a receiving stack would stop there.
pub(crate) fn tcp_options(mut bytes: &[u8]) -> TcpOptions {
    // Nearly every segment of a connection with timestamps carries exactly these: two
    // NOPs, then the timestamps (RFC 7323 appendix A); read them at once.
    if let [
        option::NOP,
        option::NOP,
        option::TIMESTAMPS,
        10,
        values @ ..,
    ] = bytes
        && let Ok(values) = <&[u8; 8]>::try_from(values)
    {
        return TcpOptions {
            timestamps: Some(timestamps(values)),
            ..TcpOptions::default()
        };
    }
    let mut options = TcpOptions::default();
    while let [kind, rest @ ..] = bytes {
        match *kind {
            option::END => break,
            option::NOP => {
                bytes = rest;
                continue;
            }
            _ => {}
        }
        let Some(&len) = rest.first() else { break };
        let len = usize::from(len);
        let Some(body) = bytes.get(2..len.max(2)).filter(|_| len >= 2) else {
            break;
        };
        match (*kind, body) {
            (option::MSS, &[hi, lo]) => options.mss = Some(u16::from_be_bytes([hi, lo])),
            (option::WINDOW_SCALE, &[shift]) => options.window_scale = Some(shift),
            (option::SACK_PERMITTED, []) => options.sack_permitted = true,
            (option::SACK, blocks)
                if !blocks.is_empty() && blocks.len() % 8 == 0 && blocks.len() <= 32 =>
            {
                options.sack_blocks = (blocks.len() / 8) as u8;
            }
            (option::TIMESTAMPS, values) if values.len() == 8 => {
                options.timestamps = <&[u8; 8]>::try_from(values).ok().map(timestamps);
            }
            (
                option::MSS
                | option::WINDOW_SCALE
                | option::SACK_PERMITTED
                | option::SACK
                | option::TIMESTAMPS,
                _,
            ) => break,
            _ => {}
        }
        bytes = &bytes[len..];
    }
    options
}

/// TSval and TSecr, from the timestamps option's body (RFC 7323 section 3).
fn timestamps(values: &[u8; 8]) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = *values;
    (
        u32::from_be_bytes([a, b, c, d]),
        u32::from_be_bytes([e, f, g, h]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_syn_s_options_and_a_data_segment_s_timestamps() {
        // MSS 1460, SACK permitted, timestamps, NOP, window scale 7: Linux's SYN.
        let syn = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        let options = tcp_options(&syn);
        assert_eq!(options.mss, Some(1460));
        assert!(options.sack_permitted);
        assert_eq!(options.timestamps, Some((1, 0)));
        assert_eq!(options.window_scale, Some(7));
        let data = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8];
        assert_eq!(tcp_options(&data).timestamps, Some((9, 8)));
    }

    #[test]
    fn counts_sack_blocks_and_skips_unknown_kinds_by_their_length() {
        // An unknown 4-byte option (kind 30, as MPTCP), then SACK with two blocks.
        let mut bytes = vec![30, 4, 0xaa, 0xbb, 1, 1, 5, 18];
        bytes.extend_from_slice(&[0; 16]);
        let options = tcp_options(&bytes);
        assert_eq!(options.sack_blocks, 2);
    }

    #[test]
    fn a_malformed_option_ends_the_list() {
        // A length of 1, a known kind with the wrong length, a length past the end.
        assert_eq!(tcp_options(&[30, 1, 8, 10]), TcpOptions::default());
        assert_eq!(tcp_options(&[2, 3, 5, 1, 3, 3, 7]), TcpOptions::default());
        assert_eq!(tcp_options(&[3, 3, 7, 8, 10, 0]).window_scale, Some(7));
        assert_eq!(tcp_options(&[3, 3, 7, 8, 10, 0]).timestamps, None);
        // Nothing after the end-of-list option is read.
        assert_eq!(tcp_options(&[0, 3, 3, 7]).window_scale, None);
    }
}
