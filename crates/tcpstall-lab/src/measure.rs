//! What a run measured: latency percentiles, throughput, and which transactions stalled.
//!
//! **Stalled, as the lab measures it**: a transaction whose latency exceeds its unstalled
//! baseline by more than one path round trip plus [`STALL_MARGIN`] (20 ms; on loopback
//! the round trip is zero), plus the read interval of a paced reader. The baseline is the same transaction
//! (same index, so slow start lines up) in a reference run of the same scenario with
//! TCP_NODELAY and TCP_QUICKACK on both sides, where neither Nagle nor a delayed ACK can
//! hold anything. 20 ms is half of Linux's shortest delayed-ACK timer (TCP_DELACK_MIN,
//! 40 ms): every Nagle x delayed-ACK stall adds at least one timer, while scheduling and
//! delay-line noise on an idle machine stay below a few milliseconds.

use std::time::Duration;

use serde::Serialize;

/// How far above its baseline a transaction must be to count as stalled.
pub const STALL_MARGIN: Duration = Duration::from_millis(20);

/// Latency and throughput of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencySummary {
    pub transactions: usize,
    pub stalled: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    pub transactions_per_second: f64,
    /// Request and response payload, bits per second.
    pub throughput_bps: f64,
}

/// A round trip as its program timed it, on a path whose round trip lies between
/// `min_rtt` and `max_rtt` (a delay that varies). A round trip no timer held takes at most
/// two path round trips (one more when Nagle holds a write until a prompt ACK), so at most
/// `2 * max_rtt`: fast up to [`FAST_MARGIN`] beyond that. One a delayed-ACK timer held
/// takes at least `2 * min_rtt` plus the timer, 40 ms at least (TCP_DELACK_MIN): slow from
/// [`SLOW_MARGIN`] beyond `2 * min_rtt`. Between the two a round trip is neither: a busy
/// host delayed a program (a JVM warming up, a thread not run at once), and what it
/// says about the stall rules is nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Timed {
    Fast,
    Between,
    Slow,
}

/// How far past two of the path's longest round trips a round trip is still fast: what
/// scheduling adds to a prompt round trip on a quiet host stays well below it.
pub const FAST_MARGIN: Duration = Duration::from_millis(5);
/// How far past two of the path's shortest round trips a held round trip is at least: the
/// 40 ms delayed-ACK timer less 10 ms, a tick of a 100 Hz kernel's timer wheel.
pub const SLOW_MARGIN: Duration = Duration::from_millis(30);

/// Each round trip fast, slow or in the band between ([`Timed`]).
pub fn judge_round_trips(
    latencies: &[Duration],
    min_rtt: Duration,
    max_rtt: Duration,
) -> Vec<Timed> {
    let fast_up_to = 2 * max_rtt + FAST_MARGIN;
    let slow_from = 2 * min_rtt + SLOW_MARGIN;
    latencies
        .iter()
        .map(|&l| {
            if l <= fast_up_to {
                Timed::Fast
            } else if l >= slow_from {
                Timed::Slow
            } else {
                Timed::Between
            }
        })
        .collect()
}

/// The nearest-rank percentile of sorted values (as the simulator's summary does).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn summarize(
    latencies: &[Duration],
    stalled: &[bool],
    elapsed: Duration,
    bytes_per_transaction: u64,
) -> LatencySummary {
    let mut ms: Vec<f64> = latencies.iter().map(|&d| millis(d)).collect();
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let per_second = if elapsed.is_zero() {
        0.0
    } else {
        n as f64 / elapsed.as_secs_f64()
    };
    LatencySummary {
        transactions: n,
        stalled: stalled.iter().filter(|&&s| s).count(),
        p50_ms: percentile(&ms, 50.0),
        p90_ms: percentile(&ms, 90.0),
        p99_ms: percentile(&ms, 99.0),
        max_ms: ms.last().copied().unwrap_or(0.0),
        mean_ms: if n > 0 {
            ms.iter().sum::<f64>() / n as f64
        } else {
            0.0
        },
        transactions_per_second: per_second,
        throughput_bps: per_second * bytes_per_transaction as f64 * 8.0,
    }
}

/// Each transaction's unstalled baseline: the reference run's transaction of the same
/// index, or the reference median past its end.
pub fn baselines(reference: &[Duration], count: usize) -> Vec<Duration> {
    let mut sorted = reference.to_vec();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    (0..count)
        .map(|i| reference.get(i).copied().unwrap_or(median))
        .collect()
}

/// The lab's stall rule, per transaction. `slack` is at least the delay line's round trip
/// (zero on loopback): a Nagle hold released by an immediate ACK costs one round trip,
/// which is not a delayed-ACK stall, so the margin starts above it. A paced reader adds
/// its read interval.
pub fn stalled(latencies: &[Duration], baselines: &[Duration], slack: Duration) -> Vec<bool> {
    latencies
        .iter()
        .zip(baselines)
        .map(|(&latency, &baseline)| latency > baseline + slack + STALL_MARGIN)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_is_stalled_only_past_the_margin() {
        let ms = Duration::from_millis;
        let base = baselines(&[ms(1), ms(1)], 3);
        assert_eq!(base, vec![ms(1), ms(1), ms(1)]);
        assert_eq!(
            stalled(&[ms(1), ms(42), ms(20)], &base, Duration::ZERO),
            vec![false, true, false]
        );
        // One round trip of Nagle hold at 20 ms RTT is not a delayed-ACK stall.
        assert_eq!(
            stalled(&[ms(41), ms(84)], &[ms(20), ms(20)], ms(20)),
            vec![false, true]
        );
    }

    #[test]
    fn round_trips_are_fast_slow_or_in_the_band_between() {
        use Timed::{Between, Fast, Slow};
        let ms = Duration::from_millis;
        // 30 to 36 ms round trips: fast up to 77 ms, slow from 90 ms.
        assert_eq!(
            judge_round_trips(&[ms(31), ms(77), ms(78), ms(89), ms(90)], ms(30), ms(36)),
            vec![Fast, Fast, Between, Between, Slow]
        );
        // 1 to 1.3 ms: a JVM's 23 ms warm-up round trip is neither.
        let us = Duration::from_micros;
        assert_eq!(
            judge_round_trips(&[ms(2), ms(8), ms(23), ms(41)], ms(1), us(1300)),
            vec![Fast, Between, Between, Slow]
        );
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 50.0), 3.0);
        assert_eq!(percentile(&v, 100.0), 5.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
