//! The delayed-ACK timer a receiver's ACK delays show, and the stacks that use it (the
//! stacks' timers themselves are in `stacks.rs`).

use std::net::SocketAddr;

use super::Role;
use crate::segment::{NANOS_PER_MILLI, Nanos};
use crate::stacks;

/// The delayed-ACK timer a receiver showed, and the stacks that use it.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayedAckProfile {
    pub role: Role,
    pub endpoint: SocketAddr,
    pub samples: usize,
    pub median: Nanos,
    pub min: Nanos,
    pub max: Nanos,
    pub timer: TimerGuess,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerGuess {
    /// 40 ms: Linux's TCP_DELACK_MIN, fired on jiffies.
    Linux40,
    /// 100 ms: FreeBSD's default `net.inet.tcp.delacktime`.
    FreeBsd100,
    /// 200 ms per connection: Windows (TcpDelAckTicks = 2), AIX.
    Fixed200,
    /// 0 to 200 ms: a global 200 ms tick as in classic BSD (delay depends on phase).
    PhasedTick200,
    /// None of the known defaults.
    Other,
}

impl TimerGuess {
    pub fn name(self) -> &'static str {
        match self {
            TimerGuess::Linux40 => "40ms",
            TimerGuess::FreeBsd100 => "100ms",
            TimerGuess::Fixed200 => "200ms",
            TimerGuess::PhasedTick200 => "0-200ms-tick",
            TimerGuess::Other => "other",
        }
    }

    pub fn stacks(self) -> &'static [&'static str] {
        match self {
            TimerGuess::Linux40 => &["Linux"],
            TimerGuess::FreeBsd100 => &["FreeBSD"],
            TimerGuess::Fixed200 => &["Windows", "AIX"],
            TimerGuess::PhasedTick200 => &["classic BSD", "AIX", "macOS before 10.5"],
            TimerGuess::Other => &[],
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            TimerGuess::Linux40 => "Linux (TCP_DELACK_MIN 40 ms)",
            TimerGuess::FreeBsd100 => "FreeBSD (delacktime 100 ms)",
            TimerGuess::Fixed200 => "Windows or AIX (200 ms timer)",
            TimerGuess::PhasedTick200 => "a classic BSD 200 ms tick (delay depends on its phase)",
            TimerGuess::Other => "no known stack default",
        }
    }
}

/// Reads the timer off the observed ACK delays. Linux fires its 40 ms timer on jiffies,
/// so 40 to 48 ms is seen; a tick-based stack spreads delays over its whole period.
pub fn infer_timer(delays: &[Nanos]) -> (Nanos, Nanos, Nanos, TimerGuess) {
    let mut sorted = delays.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    const MS: Nanos = NANOS_PER_MILLI;
    // Whole milliseconds of the median from `below` under a stack's timer to `above` over
    // it (the timer wheel and the path add to a timer; a capture's clock may subtract).
    let near = |timer: Nanos, below: Nanos, above: Nanos| {
        (timer - below..timer + above + MS).contains(&(median - median % MS))
    };
    let spread = (max - min) / MS;
    let guess = if near(stacks::LINUX_DELACK_MIN, 10 * MS, 30 * MS) && spread <= 40 {
        TimerGuess::Linux40
    } else if near(stacks::FREEBSD_DELACKTIME, 15 * MS, 25 * MS) && spread <= 40 {
        TimerGuess::FreeBsd100
    } else if near(stacks::WINDOWS_DELACK, 40 * MS, 40 * MS) && spread <= 60 {
        TimerGuess::Fixed200
    } else if sorted.len() >= 3 && max / MS <= (stacks::BSD_FAST_TICK + 40 * MS) / MS && spread > 60
    {
        TimerGuess::PhasedTick200
    } else {
        TimerGuess::Other
    };
    (median, min, max, guess)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[i64]) -> Vec<Nanos> {
        values.iter().map(|v| v * NANOS_PER_MILLI).collect()
    }

    #[test]
    fn linux_jiffy_rounded_40ms_timer() {
        assert_eq!(
            infer_timer(&ms(&[40, 44, 44, 43, 44])).3,
            TimerGuess::Linux40
        );
    }

    #[test]
    fn fixed_200ms_timer() {
        assert_eq!(infer_timer(&ms(&[200, 201, 199])).3, TimerGuess::Fixed200);
    }

    #[test]
    fn delays_spread_over_a_200ms_tick() {
        assert_eq!(
            infer_timer(&ms(&[12, 150, 77, 190, 40])).3,
            TimerGuess::PhasedTick200
        );
    }

    #[test]
    fn freebsd_and_unknown_timers() {
        assert_eq!(infer_timer(&ms(&[100, 101])).3, TimerGuess::FreeBsd100);
        assert_eq!(infer_timer(&ms(&[480])).3, TimerGuess::Other);
    }
}
