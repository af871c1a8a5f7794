//! A varying delay for the delay line: the wait behind cross traffic in a router's queue.
//!
//! Each stage of the line ([`crate::delayline`]) may share a FIFO queue with traffic the
//! lab does not send. That traffic arrives in bursts (a Poisson process of seeded
//! intervals, each burst a seeded amount of work); the queue drains at one nanosecond of
//! work per nanosecond and holds at most `max_wait` of work (a finite buffer: cross traffic
//! beyond it is dropped). A lab packet waits for the work queued ahead of it when it
//! arrives (Lindley's recursion), so packets close together see nearly the same wait,
//! packets far apart see unrelated ones, and no packet ever leaves before the one ahead
//! of it: `arrival + wait` never decreases, because the queue drains no faster than time
//! passes.
//!
//! The cross traffic is drawn from a seeded generator on the line's own clock: the same
//! seed gives the same bursts, so the same arrivals see the same waits.

/// Mean interval between bursts, as a fraction of the largest wait (one third): with
/// bursts of half the largest wait at most (a quarter on average) the queue is busy
/// about three quarters of the time, so lab packets see waits across the whole range
/// rather than mostly none or mostly the maximum (an M/G/1 queue at load 0.75).
const BURST_INTERVAL_DIVISOR: u64 = 3;
/// The largest burst, as a fraction of the largest wait (one half).
const BURST_SIZE_DIVISOR: u64 = 2;
/// After this many mean intervals with no lab packet the queue has forgotten its past
/// (it drains in at most one largest wait): the model starts again this far back rather
/// than replaying every burst of a long idle time.
const MEMORY_INTERVALS: u64 = 32;
/// Bursts replayed per lab packet at most (the mean is [`MEMORY_INTERVALS`] after an idle
/// time, and one or two between packets of a burst of the lab's own).
const MAX_BURSTS_PER_PACKET: u32 = 4096;

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): small, seedable, and the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One queue: the wait it adds to each lab packet, in nanoseconds on the line's clock.
#[derive(Clone, Debug)]
pub struct Queue {
    max_wait: u64,
    rng: SplitMix64,
    /// Work queued at `now`, nanoseconds.
    backlog: u64,
    now: u64,
    next_burst: u64,
    started: bool,
}

impl Queue {
    /// A queue whose waits never exceed `max_wait` ns; zero gives no wait at all.
    pub fn new(max_wait: u64, seed: u64) -> Queue {
        Queue {
            max_wait,
            rng: SplitMix64::new(seed),
            backlog: 0,
            now: 0,
            next_burst: 0,
            started: false,
        }
    }

    pub fn max_wait(&self) -> u64 {
        self.max_wait
    }

    fn mean_interval(&self) -> u64 {
        (self.max_wait / BURST_INTERVAL_DIVISOR).max(1)
    }

    /// An exponential interval to the next burst, at least 1 ns.
    fn interval(&mut self) -> u64 {
        let u = self.rng.next_f64();
        let mean = self.mean_interval() as f64;
        ((-(1.0 - u).ln()) * mean).max(1.0) as u64
    }

    /// The queue drains until `t`.
    fn drain_to(&mut self, t: u64) {
        let elapsed = t.saturating_sub(self.now);
        self.backlog = self.backlog.saturating_sub(elapsed);
        self.now = self.now.max(t);
    }

    /// The wait of a lab packet arriving at `arrival` ns; arrivals must not go back in
    /// time (an earlier one is taken as arriving with the last).
    pub fn wait(&mut self, arrival: u64) -> u64 {
        if self.max_wait == 0 {
            return 0;
        }
        let memory = self.mean_interval().saturating_mul(MEMORY_INTERVALS);
        if !self.started || arrival.saturating_sub(self.now) > memory {
            // Start (or start again) from an empty queue far enough back that the bursts
            // since then shape the wait as if the queue had always been running.
            self.started = true;
            self.now = arrival.saturating_sub(memory);
            self.backlog = 0;
            self.next_burst = self.now + self.interval();
        }
        let arrival = arrival.max(self.now);
        for _ in 0..MAX_BURSTS_PER_PACKET {
            if self.next_burst > arrival {
                break;
            }
            let at = self.next_burst;
            self.drain_to(at);
            let largest = (self.max_wait / BURST_SIZE_DIVISOR).max(1);
            let size = (self.rng.next_f64() * largest as f64) as u64;
            self.backlog = (self.backlog + size).min(self.max_wait);
            self.next_burst = at + self.interval();
        }
        self.drain_to(arrival);
        self.backlog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(n: u64, seed: u64) -> Vec<u64> {
        // Irregular arrivals: back-to-back pairs, gaps of a few waits, long idles.
        let mut rng = SplitMix64::new(seed);
        let mut t = 1_000_000_000;
        (0..n)
            .map(|_| {
                t += match rng.next_u64() % 4 {
                    0 => 1_000,
                    1 => 50_000,
                    2 => 3_000_000,
                    _ => 400_000_000,
                };
                t
            })
            .collect()
    }

    #[test]
    fn waits_stay_within_the_bound_and_keep_the_order() {
        for max_wait in [1, 150_000, 3_000_000] {
            let mut q = Queue::new(max_wait, 7);
            let mut last_departure = 0;
            for t in arrivals(5_000, 3) {
                let w = q.wait(t);
                assert!(w <= max_wait, "wait {w} above {max_wait}");
                assert!(t + w >= last_departure, "a packet overtook the one ahead");
                last_departure = t + w;
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_waits_and_another_seed_others() {
        let run = |seed| {
            let mut q = Queue::new(3_000_000, seed);
            arrivals(2_000, 11)
                .into_iter()
                .map(|t| q.wait(t))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn waits_spread_over_the_range_and_follow_each_other_closely() {
        let max_wait = 3_000_000;
        let mut q = Queue::new(max_wait, 5);
        let mut waits = Vec::new();
        let mut step_pairs = Vec::new();
        let mut t = 0;
        for i in 0..20_000u64 {
            // Pairs 2 us apart, pairs 10 ms apart.
            t += if i % 2 == 1 { 2_000 } else { 10_000_000 };
            let w = q.wait(t);
            if i % 2 == 1 {
                step_pairs.push(w.abs_diff(*waits.last().unwrap_or(&w)));
            }
            waits.push(w);
        }
        waits.sort_unstable();
        let at = |p: f64| waits[((waits.len() - 1) as f64 * p) as usize];
        // Not white noise around a constant, not stuck at either end.
        assert!(
            at(0.9) - at(0.1) > max_wait / 3,
            "p10 {} p90 {}",
            at(0.1),
            at(0.9)
        );
        assert!(at(0.1) < max_wait / 2);
        // A queue: two packets 2 us apart see waits within one burst of each other, far
        // less than the spread of waits 10 ms apart.
        let mean_step = step_pairs.iter().sum::<u64>() / step_pairs.len() as u64;
        assert!(mean_step < max_wait / 10, "mean step {mean_step}");
    }

    #[test]
    fn no_wait_without_variation() {
        let mut q = Queue::new(0, 1);
        assert!(arrivals(100, 1).into_iter().all(|t| q.wait(t) == 0));
    }

    #[test]
    fn a_long_idle_time_costs_a_bounded_replay() {
        let mut q = Queue::new(1_000, 9);
        assert!(q.wait(1) <= 1_000);
        // Ten seconds later at a 333 ns mean interval: replayed from the memory horizon.
        assert!(q.wait(10_000_000_000) <= 1_000);
    }
}
