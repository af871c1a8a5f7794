//! The path as one connection measured it: per side of the capture point, the least
//! round trip from the capture point to that side and back, and how far its round trips
//! spread above that least one; and the step of the capture's clock. Every link of the
//! evidence chain that judges timing reads the path from here, never from a fixed slack.

use crate::segment::Nanos;

/// Round trips more than this above the least one are no sample of the path's spread:
/// the shortest per-connection delayed-ACK timer of the known stacks may have held them.
pub const SPREAD_CEILING: Nanos = crate::stacks::SHORTEST_TIMER;

/// How much longer (or shorter) a host takes to send what an ACK released than to answer
/// data with an ACK: measured in the lab (`tcpstall lab --pattern P -n 200 --capture`,
/// patterns two-writes, http-keepalive, proxy-split and sftp, twice each, on this
/// project's 2-core Linux 6.x host: over 3,204 releases whose TSecr echoes the ACK, 61 us
/// at the median, 0.14 ms at the 99th percentile, and 3.96 ms at most; the lab's closed
/// loop saw 4.02 ms once, the sender's own TSvals confirming the late send). The most,
/// rounded up to the half millisecond.
pub const HOST_TURNAROUND: Nanos = 4_500_000;

/// The same turnaround at the 99th percentile of that measurement (0.14 ms): how soon
/// after the ACK a host sends what the ACK released, as a rule.
pub const USUAL_TURNAROUND: Nanos = 140_000;

/// What one side's round trips (capture point to that side and back) showed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathSide {
    /// The least round trip of any kind (0: none measured).
    pub least: Nanos,
    /// The least measured on the path alone (the handshake, pure ACKs): a floor no
    /// reaction can go below. A round trip measured on an ACK riding on data includes the
    /// application and is no floor.
    pub floor: Option<Nanos>,
    /// How far the path-alone round trips came above the least one, where no timer can
    /// have held them: the queue and the hosts' own variation.
    pub measured_spread: Nanos,
    /// How far a round trip may come above the least one: TCP's own estimate of the
    /// variation (RFC 6298 RTTVAR over the same samples, which starts at half the first
    /// round trip), robust to the odd ACK an application's read sent late, which the
    /// measured spread is not.
    pub spread: Nanos,
    /// How far the round trips of replies (data acknowledging data: the path and the
    /// application's time) came above the least of them, where no timer can have held
    /// them: the path varied as much, unless the application's time did.
    pub reply_spread: Nanos,
    /// Whether any reply was measured (else `reply_spread` says nothing).
    pub replies_seen: bool,
    /// How many path-alone round trips came less than [`SPREAD_CEILING`] above the
    /// floor.
    pub untimed_samples: u32,
}

impl PathSide {
    /// How far the least round trip may lie above what a clock stepping every `step` read
    /// for it: up to one step, since each stamp is off by less than one. Where every
    /// path-alone round trip read zero, less: a round trip `r` under one step reads zero
    /// with chance `1 - r/step` (the clock's phase is uniform), so after `n` zeros it is
    /// at most `1 - 0.05^(1/n)` of a step, at 95% confidence.
    pub fn least_uncertainty(&self, step: Nanos) -> Nanos {
        // Every one read zero: the floor is zero and none came above it.
        let all_zero = self.floor == Some(0) && self.measured_spread == 0;
        if !all_zero || self.untimed_samples == 0 {
            return step;
        }
        let share = 1.0 - 0.05f64.powf(1.0 / f64::from(self.untimed_samples));
        (step as f64 * share).ceil() as Nanos
    }
}

/// Per side: the round-trip samples, kept as the least and the largest untimed one, of
/// the path-alone samples and of the replies. Updated on every ACK, so kept small.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundTrips {
    least: Option<Nanos>,
    floor: Option<Nanos>,
    /// The largest path-alone sample less than [`SPREAD_CEILING`] above the floor, of
    /// those since the floor last fell the ceiling or more below it (0: none); and how
    /// far the samples before that came above the floor of their time.
    largest_untimed: Nanos,
    earlier_untimed_spread: Nanos,
    /// RFC 6298 2.2-2.3 over the same samples: the smoothed round trip and its variation.
    smoothed: Nanos,
    variation: Nanos,
    /// The least reply sample, and the largest less than [`SPREAD_CEILING`] above it, of
    /// those since the least last fell the ceiling or more below it (0: none); and how
    /// far the replies before that came above the least of their time.
    least_reply: Nanos,
    largest_reply: Nanos,
    earlier_reply_spread: Nanos,
    /// Path-alone samples within [`SPREAD_CEILING`] of the floor.
    untimed_samples: u32,
}

impl RoundTrips {
    /// A round-trip sample. `bare` when nothing but the path is in it (the handshake,
    /// a pure ACK); an ACK riding on data also holds the application's own time.
    pub fn record(&mut self, sample: Nanos, bare: bool) {
        if sample < 0 {
            return;
        }
        self.least = Some(self.least.map_or(sample, |r| r.min(sample)));
        if !bare {
            if self.least_reply == 0 || sample < self.least_reply {
                let least = sample.max(1);
                set_aside(
                    &mut self.largest_reply,
                    &mut self.earlier_reply_spread,
                    self.least_reply,
                    least,
                );
                self.least_reply = least;
            }
            if sample - self.least_reply < SPREAD_CEILING {
                self.largest_reply = self.largest_reply.max(sample);
            }
        }
        if bare {
            let floor = self.floor.map_or(sample, |r| r.min(sample));
            if let Some(before) = self.floor {
                set_aside(
                    &mut self.largest_untimed,
                    &mut self.earlier_untimed_spread,
                    before,
                    floor,
                );
            }
            self.floor = Some(floor);
            if sample - floor < SPREAD_CEILING {
                self.largest_untimed = self.largest_untimed.max(sample);
                self.untimed_samples = self.untimed_samples.saturating_add(1);
                self.smooth(sample);
            }
        }
    }

    /// RFC 6298 2.2: the first sample R sets SRTT = R, RTTVAR = R/2; 2.3: each later one
    /// RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, SRTT = 7/8 SRTT + 1/8 R.
    fn smooth(&mut self, sample: Nanos) {
        if self.smoothed == 0 {
            self.smoothed = sample.max(1);
            self.variation = sample / 2;
        } else {
            // All of them non-negative: the shifts are the divisions by 4 and 8. In 128
            // bits: a round trip across years of clamped timestamps overflows 64.
            let (variation, smoothed) = (i128::from(self.variation), i128::from(self.smoothed));
            let deviation = (smoothed - i128::from(sample)).abs();
            self.variation = ((3 * variation + deviation) >> 2) as Nanos;
            self.smoothed = ((7 * smoothed + i128::from(sample)) >> 3) as Nanos;
        }
    }

    /// The least round trip so far, if any.
    pub fn least(&self) -> Option<Nanos> {
        self.least
    }

    pub fn side(&self) -> PathSide {
        let least = self.least.unwrap_or(0);
        let measured_spread = self.floor.map_or(0, |floor| {
            (self.largest_untimed - floor)
                .clamp(0, SPREAD_CEILING)
                .max(self.earlier_untimed_spread)
        });
        PathSide {
            least,
            floor: self.floor,
            measured_spread,
            spread: self.variation,
            reply_spread: (self.largest_reply - self.least_reply)
                .clamp(0, SPREAD_CEILING)
                .max(self.earlier_reply_spread),
            replies_seen: self.least_reply > 0,
            untimed_samples: self.untimed_samples,
        }
    }
}

/// A least sample falls from `before` to `least`. The `largest` kept stays while the
/// ceiling still holds it above the new least; otherwise it is as likely a timer's or the
/// application's time as the path's, and the spread around the new least starts anew.
/// What the samples until then showed, their spread above the least of their time, is
/// kept in `earlier`: samples no timer apart measure the path however far a later least
/// falls below them.
fn set_aside(largest: &mut Nanos, earlier: &mut Nanos, before: Nanos, least: Nanos) {
    if *largest - least >= SPREAD_CEILING {
        *earlier = (*earlier).max((*largest - before).clamp(0, SPREAD_CEILING));
        *largest = 0;
    }
}

/// A connection's first packets tell the step of the capture's clock.
pub const CLOCK_SAMPLE_PACKETS: u64 = 16;

/// The step of a capture's clock, learned from its timestamps: the greatest common
/// divisor of their differences. A capture stamped every 125 us, or in milliseconds,
/// cannot time a reaction to better than that.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockStep {
    first: Option<Nanos>,
    step: Nanos,
}

impl ClockStep {
    pub fn observe(&mut self, time: Nanos) {
        let Some(first) = self.first else {
            self.first = Some(time);
            return;
        };
        let difference = (time - first).abs();
        if difference != 0 && self.step != 1 {
            self.step = gcd(self.step, difference);
        }
    }

    /// The step; 1 ns until two distinct times tell it.
    pub fn step(&self) -> Nanos {
        self.step.max(1)
    }
}

fn gcd(mut a: Nanos, mut b: Nanos) -> Nanos {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn the_spread_is_what_untimed_round_trips_came_above_the_least() {
        let mut trips = RoundTrips::default();
        // An 80 ms path whose queue adds up to 30 ms, and one ACK a 40 ms timer held.
        for sample in [95, 80, 110, 88, 80 + 41] {
            trips.record(sample * MS, true);
        }
        trips.record(70 * MS, false);
        let side = trips.side();
        assert_eq!(side.least, 70 * MS);
        assert_eq!(side.floor, Some(80 * MS));
        assert_eq!(side.measured_spread, 30 * MS);
        assert!(side.spread > 0 && side.spread < side.measured_spread);
        // One sample: TCP's own first estimate, half the round trip.
        let mut one = RoundTrips::default();
        one.record(80 * MS, true);
        assert_eq!(one.side().spread, 40 * MS);
        assert_eq!(one.side().measured_spread, 0);
    }

    #[test]
    fn the_replies_spread_is_what_they_came_above_the_least_reply() {
        let mut trips = RoundTrips::default();
        // A 150 ms path's handshake, then replies after 60 ms of the application's time
        // over a queue that adds 0 to 9 ms; one reply the application took 50 ms longer.
        trips.record(166 * MS, true);
        for sample in [221, 212, 219, 215, 212 + 50] {
            trips.record(sample * MS, false);
        }
        let side = trips.side();
        assert_eq!(side.reply_spread, 9 * MS);
        assert_eq!(side.measured_spread, 0);
        assert_eq!(RoundTrips::default().side().reply_spread, 0);
    }

    #[test]
    fn a_sample_a_lower_least_puts_past_the_ceiling_is_no_spread() {
        let mut trips = RoundTrips::default();
        // A reply the application took 200 ms over, before any quicker one: once the
        // 47 ms replies come, it is no sample of how the path varies.
        for sample in [258, 47, 57, 52] {
            trips.record(sample * MS, false);
        }
        assert_eq!(trips.side().reply_spread, 10 * MS);
        // The same for the path alone: a first ACK a timer held, then the path's own.
        for sample in [95, 54, 56] {
            trips.record(sample * MS, true);
        }
        assert_eq!(trips.side().floor, Some(54 * MS));
        assert_eq!(trips.side().measured_spread, 2 * MS);
        // Replies 120 to 123 ms apart by the path, then one far quicker (a close): how
        // the 120s varied is still the path's variation.
        let mut cluster = RoundTrips::default();
        for sample in [121, 120, 123, 122, 66] {
            cluster.record(sample * MS, false);
        }
        assert_eq!(cluster.side().reply_spread, 3 * MS);
    }

    #[test]
    fn a_path_every_tick_read_as_zero_hides_less_than_a_step() {
        let step = 10 * MS;
        // A path the 10 ms clock never saw take a tick, 20 times: at most 14% of a step.
        let mut zeros = RoundTrips::default();
        for _ in 0..20 {
            zeros.record(0, true);
        }
        let hidden = zeros.side().least_uncertainty(step);
        assert!(hidden > MS && hidden < 15 * MS / 10, "{hidden}");
        // Once: it may hide most of a step.
        let mut once = RoundTrips::default();
        once.record(0, true);
        assert_eq!(once.side().least_uncertainty(step), 95 * step / 100);
        // One sample across a tick: the round trip is somewhere under a step, any of it.
        zeros.record(step, true);
        assert_eq!(zeros.side().least_uncertainty(step), step);
        // A path the clock read as a tick or more: a whole step, as ever.
        let mut ticks = RoundTrips::default();
        ticks.record(step, true);
        assert_eq!(ticks.side().least_uncertainty(step), step);
        assert_eq!(RoundTrips::default().side().least_uncertainty(step), step);
    }

    #[test]
    fn the_clock_step_is_the_common_divisor_of_the_stamps() {
        let mut clock = ClockStep::default();
        for t in [1_000_125_000, 1_000_250_000, 1_007_875_000, 1_009_000_000] {
            clock.observe(t);
        }
        assert_eq!(clock.step(), 125_000);
        clock.observe(1_009_000_001);
        assert_eq!(clock.step(), 1);
    }
}
