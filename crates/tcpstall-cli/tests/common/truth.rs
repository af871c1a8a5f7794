//! The ground truth of a test that runs real programs: each round trip judged by the
//! program's own timing of it, in that very run.
//!
//! A round trip a delayed-ACK timer held takes the timer, 40 ms at least on Linux
//! (TCP_DELACK_MIN); one nothing held takes about the path's round trip, well under a
//! millisecond on loopback. Between the two lies a band: a round trip in it was delayed by
//! something else (a busy host did not run a program at once) and is neither fast nor
//! slow. A run with round trips in the band is recorded again, a bounded number of times,
//! each time saying so; the last run is judged with its round trips in the band counted as
//! either. No judgement rests on how long anything took beyond this.

use std::path::{Path, PathBuf};

/// Runs of one check at most while its ground truth falls in the band.
pub const MAX_RUNS: u32 = 4;

/// Where a round trip is fast or slow, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Band {
    /// Below this a round trip was not held by a timer.
    pub fast_below_ms: f64,
    /// From this on it was (a timer of 40 ms, less a tick of the timer wheel).
    pub slow_from_ms: f64,
}

/// Loopback and the lab's namespaces without a delay: a prompt round trip takes well
/// under 1 ms, a held one 40 ms or more.
pub const LOOPBACK: Band = Band {
    fast_below_ms: 10.0,
    slow_from_ms: 30.0,
};

/// A run's round trips as its program timed them, judged by a [`Band`].
#[derive(Clone, Debug)]
pub struct Truth {
    pub round_trips_ms: Vec<f64>,
    pub fast: usize,
    pub slow: usize,
    /// The round trips in the band: (index, ms).
    pub between: Vec<(usize, f64)>,
    /// The round trips left out of the judgement: (index, ms).
    pub unjudged: Vec<(usize, f64)>,
}

impl Band {
    pub fn judge(&self, round_trips_ms: &[f64]) -> Truth {
        self.judge_except(round_trips_ms, |_| false)
    }

    /// Judges the round trips but those `left_out` names by index: the first of a
    /// connection, which no delayed ACK can hold (a new connection's receiver ACKs at once,
    /// in quick-ACK mode), and which a busy host makes slow when the server is slow to
    /// wake for its first request.
    pub fn judge_except(&self, round_trips_ms: &[f64], left_out: impl Fn(usize) -> bool) -> Truth {
        let mut truth = Truth {
            round_trips_ms: round_trips_ms.to_vec(),
            fast: 0,
            slow: 0,
            between: Vec::new(),
            unjudged: Vec::new(),
        };
        for (i, &ms) in round_trips_ms.iter().enumerate() {
            if left_out(i) {
                truth.unjudged.push((i, ms));
            } else if ms < self.fast_below_ms {
                truth.fast += 1;
            } else if ms >= self.slow_from_ms {
                truth.slow += 1;
            } else {
                truth.between.push((i, ms));
            }
        }
        truth
    }
}

impl Truth {
    /// Whether `stalls` stalls (at most one per round trip) can be right: one in each
    /// slow round trip, none in a fast one, those in the band either way.
    pub fn admits(&self, stalls: usize) -> bool {
        (self.slow..=self.slow + self.between.len()).contains(&stalls)
    }

    /// Whether `reported` stalls are one short of the slow round trips, where none fell
    /// in the band and this is not the last run: one kernel event lost, which a run
    /// recorded again tells from a stall missed.
    pub fn one_short(&self, reported: usize, last: bool) -> bool {
        !last && self.between.is_empty() && reported + 1 == self.slow
    }

    /// The stalls the round trips call for, as text: `18` or `17 to 19`.
    pub fn expected(&self) -> String {
        match self.between.len() {
            0 => self.slow.to_string(),
            n => format!("{} to {}", self.slow, self.slow + n),
        }
    }

    /// `Err(Unclear)` when some round trips fall in the band and this is not the last run.
    pub fn clear_unless_last(&self, last: bool) -> Result<(), Failed> {
        if self.between.is_empty() || last {
            return Ok(());
        }
        Err(Failed::Unclear(format!(
            "round trips in the band between fast and slow (index, ms): {:?}",
            self.between
        )))
    }
}

/// Why a run of a check did not pass.
#[derive(Debug)]
pub enum Failed {
    /// The ground truth fell in the band: the run says nothing; it is recorded again.
    Unclear(String),
    /// The run's own ground truth disagrees with what the tool reported, or the run went
    /// wrong: the test fails.
    Wrong(String),
}

impl From<String> for Failed {
    fn from(e: String) -> Self {
        Failed::Wrong(e)
    }
}

impl From<&str> for Failed {
    fn from(e: &str) -> Self {
        Failed::Wrong(e.to_string())
    }
}

/// Runs `check` until a run's ground truth is clear of the band, at most [`MAX_RUNS`]
/// times (the closure is told when it is the last run, which it then judges as it is).
/// A run recorded again says why on stderr; a wrong run fails the test at once.
pub fn record_until_clear(what: &str, mut check: impl FnMut(bool) -> Result<(), Failed>) {
    for run in 1..=MAX_RUNS {
        match check(run == MAX_RUNS) {
            Ok(()) => return,
            Err(Failed::Unclear(why)) => {
                super::skipped(format_args!(
                    "{what}: run {run} of at most {MAX_RUNS} recorded again: {why}"
                ));
            }
            Err(Failed::Wrong(e)) => panic!("{what}: {e}"),
        }
    }
    panic!("{what}: the last run was not judged")
}

/// A directory under the target directory that keeps a failing run's files (it is not
/// removed): `target/tmp/failed/NAME-PID`.
pub fn failure_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("failed")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the directory for a failing run's files");
    dir
}

/// Writes `files` (name, contents) into [`failure_dir`] and returns its path.
pub fn keep(name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let dir = failure_dir(name);
    for (file, bytes) in files {
        std::fs::write(dir.join(file), bytes).expect("keep a failing run's file");
    }
    dir
}
