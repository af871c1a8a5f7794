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
    /// What its ACK delays say of its timer.
    pub reading: TimerReading,
}

impl TimerReading {
    /// What the delays say of the delayer's stack: the stack named, the stacks it could
    /// be, or an unknown stack's timer, with the timer at the delayer.
    pub fn describe(&self) -> String {
        let (low, high) = self.at_delayer;
        let timer = if high - low < MS {
            format!("{:.1} ms", millis(low))
        } else {
            format!("{:.1} to {:.1} ms", millis(low), millis(high))
        };
        let reading = match (self.timer, self.could_be.as_slice()) {
            (TimerGuess::Other, []) => format!("unknown stack, timer {timer} at the delayer"),
            (TimerGuess::Other, [TimerGuess::PhasedTick200]) => format!(
                "unknown stack's timer of {timer} at the delayer, or {} at a steady phase",
                TimerGuess::PhasedTick200.describe()
            ),
            (TimerGuess::Other, could_be) => format!(
                "could be {} (timer {timer} at the delayer)",
                could_be
                    .iter()
                    .map(|t| t.describe())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
            (named, _) => format!("{} (timer {timer} at the delayer)", named.describe()),
        };
        let reading = if self.linux_ruled_out {
            format!(
                "{reading}; not Linux, which acknowledges the first data of a connection it \
                 accepted at once"
            )
        } else {
            reading
        };
        match self.ttl_ruled_out {
            Some(stacks::WINDOWS_TTL) => {
                format!("{reading}; its packets left with TTL 128, as Windows' do")
            }
            Some(ttl) => format!("{reading}; its packets left with TTL {ttl}, as Windows' do not"),
            None => reading,
        }
    }
}

fn millis(n: Nanos) -> f64 {
    n as f64 / NANOS_PER_MILLI as f64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerGuess {
    /// 40 ms: Linux's TCP_DELACK_MIN, fired on jiffies.
    Linux40,
    /// 100 ms: FreeBSD's default `net.inet.tcp.delacktime`.
    FreeBsd100,
    /// 200 ms per connection: Windows (TcpDelAckTicks = 2).
    Fixed200,
    /// 100 to 200 ms: Windows before Vista, two ticks of a 100 ms clock (the delay
    /// depends on their phase).
    WindowsTicks,
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
            TimerGuess::WindowsTicks => "100-200ms-ticks",
            TimerGuess::PhasedTick200 => "0-200ms-tick",
            TimerGuess::Other => "other",
        }
    }

    pub fn stacks(self) -> &'static [&'static str] {
        match self {
            TimerGuess::Linux40 => &["Linux"],
            TimerGuess::FreeBsd100 => &["FreeBSD"],
            TimerGuess::Fixed200 => &["Windows"],
            TimerGuess::WindowsTicks => &["Windows XP", "Windows Server 2003"],
            TimerGuess::PhasedTick200 => &["classic BSD", "AIX", "macOS before 10.5"],
            TimerGuess::Other => &[],
        }
    }

    /// One of Windows' timers (its packets leave with TTL 128).
    pub fn is_windows(self) -> bool {
        matches!(self, TimerGuess::Fixed200 | TimerGuess::WindowsTicks)
    }

    pub fn describe(self) -> &'static str {
        match self {
            TimerGuess::Linux40 => "Linux (TCP_DELACK_MIN 40 ms)",
            TimerGuess::FreeBsd100 => "FreeBSD (delacktime 100 ms)",
            TimerGuess::Fixed200 => "Windows (200 ms timer)",
            TimerGuess::WindowsTicks => {
                "Windows before Vista (two 100 ms ticks, TcpDelAckTicks 2: 100 to 200 ms)"
            }
            TimerGuess::PhasedTick200 => "a classic BSD 200 ms tick (delay depends on its phase)",
            TimerGuess::Other => "no known stack default",
        }
    }
}

/// Reads the timer off the observed ACK delays, each known exactly (measured where the
/// timer ran).
pub fn infer_timer(delays: &[Nanos]) -> (Nanos, Nanos, Nanos, TimerGuess) {
    let ranges: Vec<(Nanos, Nanos)> = delays.iter().map(|&d| (d, d)).collect();
    let reading = read_timer(delays, &ranges);
    (reading.median, reading.min, reading.max, reading.timer)
}

/// What the ACK delays say of the delayer's timer.
#[derive(Clone, Debug, PartialEq)]
pub struct TimerReading {
    pub median: Nanos,
    pub min: Nanos,
    pub max: Nanos,
    /// The stack named: the one timer the delays fit, or `Other`.
    pub timer: TimerGuess,
    /// The timer at the delayer, least and most, the path's share taken out.
    pub at_delayer: (Nanos, Nanos),
    /// When the delays fit more than one stack's timer (a path whose variation is as
    /// large as the timers' differences): each they fit. Empty when one is named.
    pub could_be: Vec<TimerGuess>,
    /// The delays fit Linux's timer, which the first acknowledgment it held rules out.
    pub linux_ruled_out: bool,
    /// The TTL the delayer's packets left with, where it ruled out a timer the delays
    /// fit (128: the others than Windows'; 64: Windows').
    pub ttl_ruled_out: Option<u8>,
}

const MS: Nanos = NANOS_PER_MILLI;
/// How far one timer's own firings spread: a jiffy at HZ 100 (Linux's 40 ms fires at
/// 40 to 50 ms), Windows' 15.6 ms clock tick, and the hosts' scheduling.
const ONE_TIMER_SPREAD: Nanos = 20 * MS;
/// A capture's clock: how much sooner than a timer's least a delay may read (a delay's
/// most, the path's least taken out, is never less than it was).
const EARLY_SLACK: Nanos = MS;
/// A capture's clock and the hosts' turnaround: how much later than a timer's most.
const LATE_SLACK: Nanos = 4 * MS;

/// Below this chance, delays a tick could have given are no tick's: it would have put
/// each one where it fell by coincidence (the one-in-twenty of a statistical test).
const COINCIDENCE: f64 = 0.05;

/// The chance that a timer whose delay its phase sets, anywhere from `first` to `last`
/// (a 200 ms tick: 0 to 200 ms, `tcp_fasttimo`), met at phases the data's arrivals set
/// (each uniform over its spread), puts each delay within its range at the delayer. A
/// per-connection timer puts them all alike; a phase rarely puts several, or one within
/// a narrow range, just there.
fn phase_chance(ranges: &[(Nanos, Nanos)], (first, last): (Nanos, Nanos)) -> f64 {
    ranges
        .iter()
        .map(|&(low, high)| {
            let within = (high + EARLY_SLACK).min(last) - (low - LATE_SLACK).max(first);
            within.clamp(0, last - first) as f64 / (last - first) as f64
        })
        .product()
}

/// Whether the ACKs a timer sent, at `times` as the capture saw them, left on a 200 ms
/// tick: a classic BSD fast timer (`tcp_fasttimo`, every 200 ms) sends every delayed ACK
/// of the host on its ticks, so each is a whole number of ticks after the one before; a
/// per-connection timer sends each one its delay after the data. Three spacings at least,
/// each within `tolerance` (what the way from the delayer to the capture point may move
/// an ACK by) of a whole number of ticks, one at least.
pub fn left_on_a_tick(times: &[Nanos], tolerance: Nanos) -> bool {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let spacings: Vec<Nanos> = sorted.windows(2).map(|w| w[1] - w[0]).collect();
    let tick = stacks::BSD_FAST_TICK;
    spacings.len() >= 3
        && spacings.iter().all(|&s| {
            let phase = s.rem_euclid(tick);
            s + tolerance >= tick && phase.min(tick - phase) <= tolerance
        })
}

/// The delays a per-connection timer shows at the delayer, least and most.
fn fixed_timer_window(timer: TimerGuess) -> Option<(Nanos, Nanos)> {
    match timer {
        // Linux's `ato`, at least TCP_DELACK_MIN, counted in jiffies from a jiffy counter
        // that lags the clock by up to one (HZ 100: 10 ms) and fired up to one late, and
        // raised by the gaps between arrivals (tcp_event_data_recv): 30 to 60 ms (40 to
        // 44 ms measured on a 6.x kernel at HZ 250; 36 to 54 ms in public captures).
        TimerGuess::Linux40 => Some((
            stacks::LINUX_DELACK_MIN - 10 * MS,
            stacks::LINUX_DELACK_MIN + 20 * MS,
        )),
        // FreeBSD's callout, at HZ 1000, and the hosts' scheduling.
        TimerGuess::FreeBsd100 => Some((
            stacks::FREEBSD_DELACKTIME - 5 * MS,
            stacks::FREEBSD_DELACKTIME + 10 * MS,
        )),
        // Windows' timer counts on its 15.6 ms clock tick, either way, and its hosts
        // answer late (226 ms in a public capture).
        TimerGuess::Fixed200 => Some((
            stacks::WINDOWS_DELACK - 16 * MS,
            stacks::WINDOWS_DELACK + 30 * MS,
        )),
        TimerGuess::WindowsTicks | TimerGuess::PhasedTick200 | TimerGuess::Other => None,
    }
}

/// Reads the delayer's timer off the ACK delays and, for each, the least and the most it
/// can have been at the delayer (`ranges`, in the same order). A stack is named only
/// where every range fits its timer and no other's; where several fit, `could_be` lists
/// them. Delays that no one timer can give, even with the path's share taken either way,
/// spread over a tick's phase (classic BSD's 200 ms fast timer) when they stay within it.
pub fn read_timer(delays: &[Nanos], ranges: &[(Nanos, Nanos)]) -> TimerReading {
    read_timer_on(delays, ranges, TimerShows::default())
}

/// What the connection showed of the delayer's timer besides its delays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerShows {
    /// Its ACKs left on a 200 ms tick ([`left_on_a_tick`]).
    pub on_tick: bool,
    /// It held its first acknowledgment of the holder's data, which Linux sends at once.
    pub first_data_held: bool,
    /// The TTL its packets left with ([`stacks::initial_ttl`]).
    pub initial_ttl: Option<u8>,
}

/// As [`read_timer`], told what else the connection showed: where the timer's ACKs left
/// on a 200 ms tick, delays that fit a per-connection timer shorter than the tick came
/// from the tick's phase, since such a timer leaves its ACKs wherever the exchanges put
/// them; where it held the first acknowledgment of data, it is not Linux's.
pub fn read_timer_on(
    delays: &[Nanos],
    ranges: &[(Nanos, Nanos)],
    shows: TimerShows,
) -> TimerReading {
    let on_tick = shows.on_tick;
    let mut sorted = delays.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    let latest_least = ranges.iter().map(|r| r.0).max().unwrap_or(0);
    let earliest_most = ranges.iter().map(|r| r.1).min().unwrap_or(0);
    let least = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let most = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    // No one timer: the delays disagree by more than one timer's firings spread.
    let disagree = latest_least - earliest_most > ONE_TIMER_SPREAD;
    let fits = |(low, high): (Nanos, Nanos)| {
        ranges
            .iter()
            .all(|&(l, h)| l - LATE_SLACK <= high && h + EARLY_SLACK >= low)
    };
    let mut candidates: Vec<TimerGuess> = [
        TimerGuess::Linux40,
        TimerGuess::FreeBsd100,
        TimerGuess::Fixed200,
    ]
    .into_iter()
    .filter(|&t| !disagree && fixed_timer_window(t).is_some_and(fits))
    .collect();
    let linux_ruled_out = shows.first_data_held && candidates.contains(&TimerGuess::Linux40);
    candidates.retain(|&t| !(linux_ruled_out && t == TimerGuess::Linux40));
    let shorter_than_the_tick =
        |t: &TimerGuess| matches!(t, TimerGuess::Linux40 | TimerGuess::FreeBsd100);
    if on_tick && !candidates.is_empty() && candidates.iter().all(shorter_than_the_tick) {
        candidates = vec![TimerGuess::PhasedTick200];
    }
    // A 200 ms timer whose ACKs fall on a 200 ms beat: the exchanges took less than the
    // beat's tolerance besides the timer, and a tick met at a steady phase gives the same
    // delays and the same beat. Neither is named.
    if on_tick && candidates == [TimerGuess::Fixed200] {
        candidates.push(TimerGuess::PhasedTick200);
    }
    // Windows before Vista sends a delayed ACK on the second tick of its 100 ms clock
    // after the data: a delay anywhere from 100 to 200 ms, as its phase sets it. Where
    // every delay falls there, a 200 ms tick's phases could have put them there as well.
    // Where a per-connection timer fits too, it is ruled out as the tick is (below).
    let ticks = stacks::WINDOWS_XP_DELACK_TICKS as Nanos;
    let windows_ticks = (
        stacks::WINDOWS_XP_TICK * (ticks - 1),
        stacks::WINDOWS_XP_TICK * ticks,
    );
    let windows_ticks_by_chance = phase_chance(ranges, windows_ticks) >= COINCIDENCE;
    let none_per_connection = candidates.is_empty();
    if fits(windows_ticks) && (disagree || none_per_connection || windows_ticks_by_chance) {
        candidates.push(TimerGuess::WindowsTicks);
    }
    // The TTL the delayer's packets left with tells Windows (128) from the stacks whose
    // packets leave with 64 (the tick's among them): where the delays fit a Windows
    // timer, a host that sent with 128 is Windows; one that sent with 64 is not.
    let fitting = candidates.len();
    let windows_shown = match shows.initial_ttl {
        Some(stacks::WINDOWS_TTL) if candidates.iter().any(|t| t.is_windows()) => {
            candidates.retain(|t| t.is_windows());
            true
        }
        Some(stacks::UNIX_TTL) => {
            candidates.retain(|t| !t.is_windows());
            false
        }
        _ => false,
    };
    // A tick fires at a phase the data's arrival sets: delays anywhere within its
    // period, or (data on a steady clock of its own) one delay that no stack's timer
    // explains. Where a per-connection timer fits too, the tick is ruled out only when
    // its phases would have put every delay where the timer did by chance.
    let within_tick = fits((0, stacks::BSD_FAST_TICK + ONE_TIMER_SPREAD));
    let tick_by_chance = phase_chance(ranges, (0, stacks::BSD_FAST_TICK)) >= COINCIDENCE;
    let tick_missing = !candidates.contains(&TimerGuess::PhasedTick200);
    let tick_fits = within_tick
        && tick_missing
        && (disagree || none_per_connection || candidates.is_empty() || tick_by_chance);
    let ttl_ruled_out = (candidates.len() < fitting || windows_shown && tick_fits)
        .then_some(shows.initial_ttl)
        .flatten();
    if tick_fits && !windows_shown {
        candidates.push(TimerGuess::PhasedTick200);
    }
    let at_delayer = if disagree {
        (least, most)
    } else {
        (
            latest_least.min(earliest_most),
            earliest_most.max(latest_least),
        )
    };
    let (timer, could_be) = match candidates.as_slice() {
        [TimerGuess::PhasedTick200] if !disagree || ranges.len() < 3 => {
            (TimerGuess::Other, candidates)
        }
        [one] => (*one, Vec::new()),
        _ => (TimerGuess::Other, candidates),
    };
    TimerReading {
        median,
        min,
        max,
        timer,
        at_delayer,
        could_be,
        linux_ruled_out,
        ttl_ruled_out,
    }
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

    /// Each delay read away from the delayer: the timer plus up to `spread` of the path,
    /// as a range from the delay less the spread to the delay.
    fn through_path(delays_ms: &[i64], spread_ms: i64) -> (Vec<Nanos>, Vec<(Nanos, Nanos)>) {
        let delays = ms(delays_ms);
        let ranges = delays
            .iter()
            .map(|&d| ((d - spread_ms * NANOS_PER_MILLI).max(0), d))
            .collect();
        (delays, ranges)
    }

    #[test]
    fn a_linux_timer_through_a_varying_path_is_linux_not_a_tick() {
        // 42 ms at the client, seen from the server's side of a 60 ms + 0-40 ms path:
        // each leg adds 0 to 40 ms, so the delays read 42 to 122 ms.
        let (delays, ranges) = through_path(&[58, 97, 121, 70, 44, 110, 83, 64], 80);
        let reading = read_timer(&delays, &ranges);
        assert_eq!(reading.timer, TimerGuess::Linux40, "{reading:?}");
        assert!(reading.at_delayer.0 <= 42 * NANOS_PER_MILLI);
        assert!(reading.at_delayer.1 >= 42 * NANOS_PER_MILLI);
        // The same delays taken as read at the delayer spread like a tick's.
        assert_eq!(infer_timer(&delays).3, TimerGuess::PhasedTick200);
    }

    #[test]
    fn a_tick_through_a_varying_path_is_still_a_tick() {
        let (delays, ranges) = through_path(&[12, 150, 77, 190, 40, 121], 30);
        assert_eq!(
            read_timer(&delays, &ranges).timer,
            TimerGuess::PhasedTick200
        );
    }

    #[test]
    fn ranges_that_fit_two_timers_name_neither() {
        // A path varying by 100 ms: 100 to 140 ms could be FreeBSD's timer or Linux's,
        // and a tick puts four delays within such ranges one time in thirteen.
        let (delays, ranges) = through_path(&[140, 120, 135, 110], 100);
        let reading = read_timer(&delays, &ranges);
        assert_eq!(reading.timer, TimerGuess::Other);
        assert_eq!(
            reading.could_be,
            vec![
                TimerGuess::Linux40,
                TimerGuess::FreeBsd100,
                TimerGuess::PhasedTick200
            ]
        );
        // Over a path varying by 60 ms they fit FreeBSD's timer alone, and a tick would
        // have put all four there by coincidence (one time in a hundred).
        let (delays, ranges) = through_path(&[140, 120, 135, 110], 60);
        assert_eq!(read_timer(&delays, &ranges).timer, TimerGuess::FreeBsd100);
    }

    #[test]
    fn one_delay_a_tick_could_give_as_often_as_not_names_no_timer_alone() {
        // One ACK 132 ms late behind a queue that leaves the timer anywhere from 132 to
        // 461 ms at the delayer: Windows' 200 ms timer fits, and so do the phases of
        // Windows XP's two 100 ms ticks and of a 200 ms tick, which put a delay there
        // seven and four times in ten.
        let reading = read_timer(&ms(&[132]), &[(132 * MS, 461 * MS)]);
        assert_eq!(reading.timer, TimerGuess::Other);
        assert_eq!(
            reading.could_be,
            vec![
                TimerGuess::Fixed200,
                TimerGuess::WindowsTicks,
                TimerGuess::PhasedTick200
            ]
        );
        // Known within a few milliseconds, a tick would fall there one time in thirty.
        let narrow = read_timer(&ms(&[41]), &[(40 * MS, 41 * MS)]);
        assert_eq!(narrow.timer, TimerGuess::Linux40);
        // Three delays, each known within 30 ms, all where Linux's timer fires: a tick
        // would put them there one time in two hundred.
        let (delays, ranges) = through_path(&[45, 60, 52], 30);
        assert_eq!(read_timer(&delays, &ranges).timer, TimerGuess::Linux40);
    }

    #[test]
    fn a_cluster_no_stack_uses_is_an_unknown_timer() {
        // No per-connection timer we list fires at 12 to 25 ms,
        // and the delays agree, so one timer; a tick at a steady phase could give it too.
        let reading = read_timer(
            &ms(&[20, 25, 13, 12, 13, 13, 13, 11]),
            &through_path(&[20, 25, 13, 12, 13, 13, 13, 11], 0).1,
        );
        assert_eq!(reading.timer, TimerGuess::Other);
        assert_eq!(reading.could_be, vec![TimerGuess::PhasedTick200]);
        let windows = read_timer(&ms(&[150, 152]), &through_path(&[150, 152], 0).1);
        assert_ne!(
            windows.timer,
            TimerGuess::Fixed200,
            "a 200 ms timer fires at 184 ms at the soonest"
        );
    }

    /// Reads the delays of ACKs that left at `acks`, which must be on a 200 ms beat.
    fn read_on_the_beat(
        delays: &[Nanos],
        ranges: &[(Nanos, Nanos)],
        acks: &[Nanos],
    ) -> TimerReading {
        let on_tick = left_on_a_tick(acks, 2 * MS);
        assert!(on_tick, "{acks:?} are off the beat");
        read_timer_on(
            delays,
            ranges,
            TimerShows {
                on_tick,
                ..TimerShows::default()
            },
        )
    }

    #[test]
    fn one_delay_on_a_200ms_tick_is_the_tick_not_linux() {
        // A classic BSD fast timer in a closed loop: every exchange lands at the same
        // phase, so every delay reads 36 ms, which Linux's timer gives too; but the ACKs
        // left a whole number of 200 ms ticks apart.
        let (delays, ranges) = through_path(&[36, 36, 37, 36, 36], 0);
        let acks = ms(&[1_000, 1_400, 1_600, 2_000, 2_200]);
        assert_eq!(read_timer(&delays, &ranges).timer, TimerGuess::Linux40);
        let reading = read_on_the_beat(&delays, &ranges, &acks);
        assert_eq!(reading.timer, TimerGuess::Other);
        assert_eq!(reading.could_be, vec![TimerGuess::PhasedTick200]);
    }

    #[test]
    fn a_held_first_acknowledgment_rules_linux_out() {
        // One 36 ms delay fits Linux's timer; but a Linux listener acknowledges the
        // first data at once, so a timer that held that ACK is another stack's.
        let (delays, ranges) = through_path(&[36], 0);
        assert_eq!(read_timer(&delays, &ranges).timer, TimerGuess::Linux40);
        let shows = TimerShows {
            first_data_held: true,
            ..TimerShows::default()
        };
        let reading = read_timer_on(&delays, &ranges, shows);
        assert_eq!(reading.timer, TimerGuess::Other);
        assert_eq!(reading.could_be, vec![TimerGuess::PhasedTick200]);
        assert!(reading.linux_ruled_out);
        // Windows' timer is not ruled out with it.
        let (delays, ranges) = through_path(&[200, 201], 0);
        assert_eq!(
            read_timer_on(&delays, &ranges, shows).timer,
            TimerGuess::Fixed200
        );
    }

    #[test]
    fn a_per_connection_timer_leaves_its_acks_where_the_exchanges_put_them() {
        // Linux's 40 ms timer on a 20 ms path: an ACK every 61 ms or so.
        assert!(!left_on_a_tick(
            &ms(&[1_000, 1_061, 1_122, 1_184, 1_245]),
            2 * MS
        ));
        // Near the tick's multiples, but one spacing off by more than the tolerance.
        assert!(!left_on_a_tick(&ms(&[1_000, 1_400, 1_607, 2_007]), 2 * MS));
        // Two spacings say nothing.
        assert!(!left_on_a_tick(&ms(&[1_000, 1_200, 1_400]), 2 * MS));
    }

    #[test]
    fn a_200ms_timer_on_the_beat_of_a_tick_names_neither() {
        // Windows' 200 ms timer with exchanges that take no time besides it leaves ACKs
        // 200 ms apart as a tick would, and a tick met at a steady phase holds each ACK
        // 198 ms, as near 200 as the timer's own clock: either could have sent them.
        let (delays, ranges) = through_path(&[200, 201, 200, 200], 0);
        let acks = ms(&[1_000, 1_200, 1_401, 1_601]);
        let reading = read_on_the_beat(&delays, &ranges, &acks);
        assert_eq!(reading.timer, TimerGuess::Other);
        assert_eq!(
            reading.could_be,
            vec![TimerGuess::Fixed200, TimerGuess::PhasedTick200]
        );
        // Off the beat (the exchanges take 30 ms besides the timer), Windows is named.
        let acks = ms(&[1_000, 1_230, 1_461, 1_690]);
        assert!(!left_on_a_tick(&acks, 2 * MS));
        assert_eq!(read_timer(&delays, &ranges).timer, TimerGuess::Fixed200);
    }

    /// Reads the delays of a delayer whose packets left with `initial_ttl`.
    fn read_with_ttl(
        delays: &[Nanos],
        ranges: &[(Nanos, Nanos)],
        initial_ttl: Option<u8>,
    ) -> TimerReading {
        read_timer_on(
            delays,
            ranges,
            TimerShows {
                initial_ttl,
                ..TimerShows::default()
            },
        )
    }

    #[test]
    fn delays_over_two_100ms_ticks_are_windows_before_vista_where_its_ttl_says_windows() {
        // A Windows XP client's ACKs, 110 to 130 ms late: its timer counts two ticks of a
        // 100 ms clock. A 200 ms tick gives such delays too, and only the TTL its packets
        // left with tells the two apart.
        let (delays, ranges) = through_path(&[110, 130, 120], 0);
        let with_ttl = |initial_ttl| read_with_ttl(&delays, &ranges, initial_ttl);
        let windows = with_ttl(Some(128));
        assert_eq!(windows.timer, TimerGuess::WindowsTicks);
        assert_eq!(windows.ttl_ruled_out, Some(128));
        assert!(
            windows
                .describe()
                .ends_with("left with TTL 128, as Windows' do")
        );
        let tick = with_ttl(Some(64));
        assert_eq!(tick.timer, TimerGuess::Other);
        assert_eq!(tick.could_be, vec![TimerGuess::PhasedTick200]);
        assert_eq!(tick.ttl_ruled_out, Some(64));
        let unknown = with_ttl(None);
        assert_eq!(unknown.ttl_ruled_out, None);
        assert_eq!(
            unknown.could_be,
            vec![TimerGuess::WindowsTicks, TimerGuess::PhasedTick200]
        );
        // Delays below 100 ms are no Windows timer's, whatever the TTL.
        let (delays, ranges) = through_path(&[30, 90, 150], 0);
        let reading = read_with_ttl(&delays, &ranges, Some(128));
        assert_eq!(reading.timer, TimerGuess::PhasedTick200);
    }

    #[test]
    fn the_delayers_ttl_names_the_timer_on_the_beat() {
        // The same ACKs on the beat: a host whose packets left with TTL 128 is Windows,
        // one whose packets left with 64 runs one of the tick stacks.
        let (delays, ranges) = through_path(&[200, 201, 200, 200], 0);
        let acks = ms(&[1_000, 1_200, 1_401, 1_601]);
        let with_ttl = |initial_ttl| {
            read_timer_on(
                &delays,
                &ranges,
                TimerShows {
                    on_tick: left_on_a_tick(&acks, 2 * MS),
                    initial_ttl: Some(initial_ttl),
                    ..TimerShows::default()
                },
            )
        };
        assert_eq!(with_ttl(128).timer, TimerGuess::Fixed200);
        let tick = with_ttl(64);
        assert_eq!(tick.timer, TimerGuess::Other);
        assert_eq!(tick.could_be, vec![TimerGuess::PhasedTick200]);
        // A TTL says nothing against the only timer the delays fit.
        let (delays, ranges) = through_path(&[41, 43, 42], 0);
        let linux = read_with_ttl(&delays, &ranges, Some(128));
        assert_eq!(linux.timer, TimerGuess::Linux40);
        assert_eq!(linux.ttl_ruled_out, None, "the TTL ruled nothing out");
    }
}
