//! The delayed-ACK timers of the known stacks, in one place: the detector's thresholds,
//! the diagnosis's reading of a timer and the simulator's profiles all take
//! them from here.

use crate::segment::{NANOS_PER_MILLI, Nanos};

const MS: Nanos = NANOS_PER_MILLI;

/// Linux's shortest delayed-ACK timeout, `TCP_DELACK_MIN` (HZ/25), `include/net/tcp.h`
/// at v6.6.
pub const LINUX_DELACK_MIN: Nanos = 40 * MS;
/// Linux's longest, `TCP_DELACK_MAX` (HZ/5), `include/net/tcp.h` at v6.6.
pub const LINUX_DELACK_MAX: Nanos = 200 * MS;
/// A jiffy at HZ 250 (Debian's and most distributions' kernel configuration): the timer
/// wheel fires that much late at most.
pub const LINUX_JIFFY: Nanos = 4 * MS;
/// FreeBSD's `net.inet.tcp.delacktime` default, per connection (`tcp_timer.c`).
pub const FREEBSD_DELACKTIME: Nanos = 100 * MS;
/// Windows' per-connection timer, `TcpDelAckTicks` 2 of 100 ms (Microsoft KB 328890).
/// AIX's 200 ms is its fast timer's period (`no -o fasttimo`, which scans every
/// connection for a pending delayed ACK): a tick, as classic BSD's.
pub const WINDOWS_DELACK: Nanos = 200 * MS;
/// Windows before Vista counts its delayed-ACK timer in ticks of a 100 ms clock
/// (`TcpDelAckTicks`, "100-millisecond intervals", default 2, Microsoft KB 328890): the
/// ACK goes on the second tick after the data, 100 to 200 ms later (public captures of
/// Windows XP and Server 2003 hosts: 110 to 196 ms).
pub const WINDOWS_XP_TICK: Nanos = 100 * MS;
/// The ticks it counts, `TcpDelAckTicks`' default.
pub const WINDOWS_XP_DELACK_TICKS: u32 = 2;
/// The period of classic BSD's fast timer (`tcp_fasttimo`, PR_FASTHZ 5 a second), which
/// sends every pending delayed ACK at its next tick: 0 to 200 ms after the data.
pub const BSD_FAST_TICK: Nanos = 200 * MS;

/// The TTL Windows' packets leave with (`DefaultTTL` 128, Windows 2000 and later).
pub const WINDOWS_TTL: u8 = 128;
/// The TTL Linux's, the BSDs', macOS's and AIX's packets leave with (Linux
/// `ip_default_ttl`, BSD `IPDEFTTL`): 64.
pub const UNIX_TTL: u8 = 64;

/// The TTL a host's packets left with, from the highest a capture saw of them: the
/// least of the usual initial values (32, 64, 128, 255) at or above it, since each router
/// on the way takes one (RFC 791 3.2) and no path has 32 routers or more. None where
/// the capture had no IP header.
pub fn initial_ttl(highest_seen: u8) -> Option<u8> {
    [32, UNIX_TTL, WINDOWS_TTL, 255]
        .into_iter()
        .find(|&initial| highest_seen > 0 && initial >= highest_seen)
}

/// RFC 1122 4.2.3.2: an ACK must not be delayed by 0.5 s or more.
pub const MAX_DELAYED_ACK: Nanos = 500 * MS;

/// The shortest per-connection delayed-ACK timer of the known stacks (Linux's), less a
/// jiffy of measurement slack.
pub const SHORTEST_TIMER: Nanos = LINUX_DELACK_MIN - LINUX_JIFFY;
/// The longest default delayed-ACK timer of the known stacks (Windows'), with a
/// jiffy of slack at HZ 100.
pub const LONGEST_DEFAULT_TIMER: Nanos = WINDOWS_DELACK + 10 * MS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_ttl_is_the_usual_value_at_or_above_the_highest_seen() {
        for (seen, initial) in [
            (128, Some(128)),
            (117, Some(128)),
            (64, Some(64)),
            (50, Some(64)),
            (30, Some(32)),
            (200, Some(255)),
            (0, None),
        ] {
            assert_eq!(initial_ttl(seen), initial, "{seen}");
        }
    }
}
