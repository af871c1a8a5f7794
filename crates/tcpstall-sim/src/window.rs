//! The receive buffer and the windows both sides advertise and obey: what is free in the
//! buffer, how it is rounded and when it is worth announcing (receiver silly-window
//! avoidance), when a read is worth a window update, when a sender may send into a small
//! window (sender silly-window avoidance), and the persist timer's backoff.
//!
//! Each rule is a small function with its source; [`WindowRules`] picks the stack's flavour.

use serde::Serialize;

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};

/// Receive window of an application that reads everything at once: never limits.
pub const UNLIMITED_WINDOW: u64 = 4 << 20;
/// Window scale shift announced in SYNs (RFC 7323): windows travel in units of 128 bytes.
pub const WINDOW_SCALE: u8 = 7;

/// Whose window rules a stack follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowRules {
    /// Linux: `__tcp_select_window`, `__tcp_cleanup_rbuf`, `tcp_snd_wnd_test`, probe0.
    Linux,
    /// BSD-derived (FreeBSD, macOS, AIX) and, by its documented RFC 1122 behaviour, Windows.
    Bsd,
}

/// The receiving side's buffer: what arrived in order and was not read yet, and the
/// window last advertised (its right edge is `advertised_at + advertised`).
#[derive(Clone, Debug)]
pub struct ReceiveBuffer {
    /// Bytes the buffer holds for data (the window when it is empty).
    pub capacity: u64,
    /// The application reads at once and everything: the window stays at `capacity`.
    pub eager: bool,
    pub unread: u64,
    /// The last window advertised, and `rcv_nxt` when it was (Linux `rcv_wnd`, `rcv_wup`).
    pub advertised: u64,
    pub advertised_at: u64,
}

impl ReceiveBuffer {
    pub fn new(capacity: Option<u32>, eager: bool) -> ReceiveBuffer {
        let capacity = capacity.map_or(UNLIMITED_WINDOW, u64::from);
        ReceiveBuffer {
            capacity,
            eager,
            unread: 0,
            advertised: capacity,
            advertised_at: 1,
        }
    }

    pub fn free(&self) -> u64 {
        self.capacity.saturating_sub(self.unread)
    }

    /// What is left of the window last advertised (Linux `tcp_receive_window`).
    pub fn window_now(&self, rcv_nxt: u64) -> u64 {
        (self.advertised_at + self.advertised).saturating_sub(rcv_nxt)
    }

    /// The right edge of the window last advertised: data beyond it is not accepted.
    pub fn right_edge(&self) -> u64 {
        self.advertised_at + self.advertised
    }

    /// The window to put in an outgoing segment now, remembered as advertised.
    pub fn advertise(&mut self, rules: WindowRules, rcv_nxt: u64, rcv_mss: u32) -> u64 {
        let window = if self.eager && self.capacity == UNLIMITED_WINDOW {
            UNLIMITED_WINDOW
        } else {
            let current = self.window_now(rcv_nxt);
            let candidate = select_window(rules, self.free(), self.capacity, rcv_mss);
            // RFC 9293 3.8.6.2.2 / Linux tcp_select_window: never shrink the offered window;
            // the header carries it shifted by the scale (RFC 7323 2.3), rounding down.
            let window = candidate.max(current);
            window - window % scale_unit()
        };
        self.advertised = window;
        self.advertised_at = rcv_nxt;
        window
    }
}

/// The window a receiver would advertise with `free` bytes of `capacity` free.
pub fn select_window(rules: WindowRules, free: u64, capacity: u64, rcv_mss: u32) -> u64 {
    match rules {
        WindowRules::Linux => linux_select_window(free, capacity, rcv_mss),
        WindowRules::Bsd => bsd_select_window(free, capacity, rcv_mss),
    }
}

fn scale_unit() -> u64 {
    1 << WINDOW_SCALE
}

/// Linux `__tcp_select_window`: below half the buffer free, round the free space down to
/// the scale and offer nothing when under one MSS or 1/16 of the buffer (receiver SWS
/// avoidance); otherwise offer the free space rounded up to the window scale.
fn linux_select_window(free: u64, capacity: u64, rcv_mss: u32) -> u64 {
    let mss = u64::from(rcv_mss).min(capacity);
    let mut free = free;
    if free < capacity / 2 {
        free -= free % scale_unit();
        if free < capacity / 16 || free < mss {
            return 0;
        }
    }
    free.div_ceil(scale_unit()) * scale_unit()
}

/// BSD tcp_output (RFC 1122 4.2.3.3): offer nothing while the free space is under a quarter
/// of the buffer and under one MSS; the window field truncates to the scale.
fn bsd_select_window(free: u64, capacity: u64, rcv_mss: u32) -> u64 {
    if free < capacity / 4 && free < u64::from(rcv_mss) {
        return 0;
    }
    free - free % scale_unit()
}

/// After the application read: is the window it could now offer worth an ACK of its own?
/// Linux `__tcp_cleanup_rbuf`: when the window left is at most half the buffer and the new
/// one is at least twice it. FreeBSD tcp_output: when it grows by two segments (and by a
/// quarter of the buffer, or the window is under an eighth of it, or the buffer is at most
/// eight segments), or by half the buffer; never when the scaled field would not change.
pub fn read_opens_window(
    rules: WindowRules,
    buffer: &ReceiveBuffer,
    rcv_nxt: u64,
    rcv_mss: u32,
) -> bool {
    if buffer.eager && buffer.capacity == UNLIMITED_WINDOW {
        return false;
    }
    let now = buffer.window_now(rcv_nxt);
    let new = select_window(rules, buffer.free(), buffer.capacity, rcv_mss);
    match rules {
        WindowRules::Linux => 2 * now <= buffer.capacity && new > 0 && new >= 2 * now,
        WindowRules::Bsd => {
            let growth = new.saturating_sub(now);
            let mss = u64::from(rcv_mss);
            let capacity = buffer.capacity;
            let field_changes = now >> WINDOW_SCALE < new >> WINDOW_SCALE;
            let two_segments = growth >= 2 * mss
                && (growth >= capacity / 4 || new <= capacity / 8 || capacity <= 8 * mss);
            field_changes && (two_segments || 2 * growth >= capacity)
        }
    }
}

/// May a sender send `len` bytes (of `available` written and unsent) into `usable` bytes of
/// window? Linux `tcp_snd_wnd_test`: only a segment that fits whole. BSD tcp_output (RFC
/// 1122 4.2.3.4, sender SWS avoidance): also what fits when it is at least half the largest
/// window the peer offered, or when it is all that is left to send and nothing is in flight.
pub fn sender_may_use_window(
    rules: WindowRules,
    len: u64,
    usable: u64,
    available: u64,
    max_peer_window: u64,
    nothing_in_flight: bool,
) -> Option<u64> {
    if len <= usable {
        return Some(len);
    }
    if usable == 0 {
        return None;
    }
    match rules {
        WindowRules::Linux => None,
        WindowRules::Bsd => {
            let half_largest = 2 * usable >= max_peer_window && max_peer_window > 0;
            let all_that_is_left = usable >= available && nothing_in_flight;
            (half_largest || all_that_is_left).then_some(usable)
        }
    }
}

/// The persist (zero-window probe) timer after `backoff` probes (RFC 9293 3.8.6.1). Linux
/// `tcp_probe0_when`: the RTO doubled per probe, at most TCP_RTO_MAX (120 s). BSD
/// `tcp_setpersist`: the same doubling kept between TCPTV_PERSMIN (5 s) and TCPTV_PERSMAX
/// (60 s).
pub fn persist_interval(rules: WindowRules, rto: Nanos, backoff: u32) -> Nanos {
    let doubled = rto.saturating_mul(1 << backoff.min(20));
    match rules {
        WindowRules::Linux => doubled.min(120_000 * NANOS_PER_MILLI),
        WindowRules::Bsd => doubled.clamp(5_000 * NANOS_PER_MILLI, 60_000 * NANOS_PER_MILLI),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = NANOS_PER_MILLI;

    #[test]
    fn linux_offers_nothing_below_one_mss_when_the_buffer_is_more_than_half_full() {
        assert_eq!(linux_select_window(1000, 8192, 1448), 0);
        assert_eq!(linux_select_window(1500, 8192, 1448), 0);
        assert_eq!(linux_select_window(1600, 8192, 1448), 1536);
        // More than half free: the free space, rounded up to the 128-byte scale.
        assert_eq!(linux_select_window(5000, 8192, 1448), 5120);
    }

    #[test]
    fn bsd_offers_nothing_below_a_quarter_and_one_mss() {
        assert_eq!(bsd_select_window(1000, 8192, 1460), 0);
        assert_eq!(bsd_select_window(2100, 8192, 1460), 2048);
    }

    #[test]
    fn a_linux_read_is_worth_an_update_when_it_doubles_a_small_window() {
        let mut buffer = ReceiveBuffer::new(Some(8192), false);
        buffer.unread = 8192;
        assert_eq!(buffer.advertise(WindowRules::Linux, 8193, 1448), 0);
        buffer.unread = 8192 - 1024;
        // 1024 bytes free: under one MSS, still nothing to offer.
        assert!(!read_opens_window(WindowRules::Linux, &buffer, 8193, 1448));
        buffer.unread = 8192 - 2048;
        assert!(read_opens_window(WindowRules::Linux, &buffer, 8193, 1448));
    }

    #[test]
    fn the_offered_window_never_shrinks() {
        let mut buffer = ReceiveBuffer::new(Some(8192), false);
        assert_eq!(buffer.advertise(WindowRules::Linux, 1, 1448), 8192);
        buffer.unread = 4096;
        // 4096 bytes arrived: the edge stays where it was, 4096 beyond rcv_nxt.
        assert_eq!(buffer.advertise(WindowRules::Linux, 4097, 1448), 4096);
        // 4000 more: 96 bytes are left, less than the scale's unit: zero on the wire.
        buffer.unread = 8096;
        assert_eq!(buffer.advertise(WindowRules::Linux, 8097, 1448), 0);
    }

    #[test]
    fn linux_sends_only_whole_segments_into_a_small_window_and_bsd_half_the_largest() {
        assert_eq!(
            sender_may_use_window(WindowRules::Linux, 1448, 1000, 5000, 8192, true),
            None
        );
        assert_eq!(
            sender_may_use_window(WindowRules::Bsd, 1448, 1000, 5000, 1536, false),
            Some(1000)
        );
        assert_eq!(
            sender_may_use_window(WindowRules::Bsd, 1448, 1000, 1000, 65535, true),
            Some(1000)
        );
        assert_eq!(
            sender_may_use_window(WindowRules::Bsd, 1448, 1000, 5000, 65535, true),
            None
        );
    }

    #[test]
    fn persist_backs_off_between_the_stack_bounds() {
        let linux: Vec<Nanos> = (0..3)
            .map(|b| persist_interval(WindowRules::Linux, 200 * MS, b))
            .collect();
        assert_eq!(linux, [200 * MS, 400 * MS, 800 * MS]);
        assert_eq!(
            persist_interval(WindowRules::Linux, 200 * MS, 12),
            120_000 * MS
        );
        assert_eq!(persist_interval(WindowRules::Bsd, 200 * MS, 0), 5_000 * MS);
        assert_eq!(
            persist_interval(WindowRules::Bsd, 1000 * MS, 7),
            60_000 * MS
        );
    }
}
