//! Axes: linear and logarithmic scales, round tick values, and units a person reads.

/// Maps a data interval onto a pixel interval.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub d0: f64,
    pub d1: f64,
    pub p0: f64,
    pub p1: f64,
}

impl Linear {
    pub fn new(d0: f64, d1: f64, p0: f64, p1: f64) -> Linear {
        let (d0, d1) = if d1 > d0 && (d1 - d0).is_finite() {
            (d0, d1)
        } else {
            (d0, d0 + 1.0)
        };
        Linear { d0, d1, p0, p1 }
    }

    pub fn map(&self, v: f64) -> f64 {
        self.p0 + (v - self.d0) / (self.d1 - self.d0) * (self.p1 - self.p0)
    }

    /// Round tick values inside the domain, about `target` of them.
    pub fn ticks(&self, target: usize) -> Vec<f64> {
        nice_ticks(self.d0, self.d1, target)
    }
}

/// A step of 1, 2 or 5 times a power of ten giving about `target` ticks over the range.
pub fn nice_step(range: f64, target: usize) -> f64 {
    let raw = range / target.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

pub fn nice_ticks(d0: f64, d1: f64, target: usize) -> Vec<f64> {
    let step = nice_step(d1 - d0, target);
    let first = (d0 / step).ceil();
    let mut ticks = Vec::new();
    let mut i = 0.0;
    while ticks.len() < 200 {
        let v = (first + i) * step;
        if v > d1 + step * 1e-9 {
            break;
        }
        ticks.push(v);
        i += 1.0;
    }
    ticks
}

/// Base-10 logarithmic scale over positive values.
#[derive(Clone, Copy, Debug)]
pub struct Log {
    pub lo: f64,
    pub hi: f64,
    pub p0: f64,
    pub p1: f64,
}

impl Log {
    /// Widens the domain to whole decades around `min..max`.
    pub fn decades(min: f64, max: f64, p0: f64, p1: f64) -> Log {
        let min = if min > 0.0 && min.is_finite() {
            min
        } else {
            1e-6
        };
        let max = if max >= min && max.is_finite() {
            max
        } else {
            min
        };
        let lo = min.log10().floor();
        let mut hi = max.log10().ceil();
        if hi <= lo {
            hi = lo + 1.0;
        }
        Log {
            lo: 10f64.powf(lo),
            hi: 10f64.powf(hi),
            p0,
            p1,
        }
    }

    pub fn map(&self, v: f64) -> f64 {
        let v = v.max(self.lo * 1e-3);
        let t = (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10());
        self.p0 + t * (self.p1 - self.p0)
    }

    /// Decade ticks 1, 10, 100, ... times `lo`.
    pub fn ticks(&self) -> Vec<f64> {
        let mut v = self.lo;
        let mut out = Vec::new();
        while v <= self.hi * 1.0001 && out.len() < 40 {
            out.push(v);
            v *= 10.0;
        }
        out
    }
}

/// A time unit chosen for a span, so tick labels stay short.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeUnit {
    pub name: &'static str,
    pub seconds: f64,
}

pub fn time_unit_for(span_seconds: f64) -> TimeUnit {
    if span_seconds < 0.002 {
        TimeUnit {
            name: "µs",
            seconds: 1e-6,
        }
    } else if span_seconds < 2.0 {
        TimeUnit {
            name: "ms",
            seconds: 1e-3,
        }
    } else {
        TimeUnit {
            name: "s",
            seconds: 1.0,
        }
    }
}

/// A tick label with just enough decimals for its step.
pub fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil().clamp(0.0, 9.0) as usize
    };
    let s = format!("{v:.decimals$}");
    if s == "-0" { "0".to_string() } else { s }
}

/// A duration in seconds as a person writes it: 43.8 ms, 1.20 s, 75 µs.
pub fn duration(seconds: f64) -> String {
    let a = seconds.abs();
    if a >= 1.0 {
        format!("{seconds:.2} s")
    } else if a >= 0.01 {
        format!("{:.1} ms", seconds * 1e3)
    } else if a >= 0.001 {
        format!("{:.2} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

/// A decade tick of a log time axis: 1 µs, 10 ms, 1 s.
pub fn decade_time_label(seconds: f64) -> String {
    let units = [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")];
    for (scale, name) in units {
        if seconds >= scale * 0.999 {
            let v = seconds / scale;
            return format!("{} {name}", tick_label(v, 1.0));
        }
    }
    format!("{seconds:e} s")
}

/// A byte count for an axis unit: picks B, KB, MB or GB for the largest value.
pub fn byte_unit_for(max: f64) -> (f64, &'static str) {
    if max >= 5e9 {
        (1e9, "GB")
    } else if max >= 5e6 {
        (1e6, "MB")
    } else if max >= 5e3 {
        (1e3, "kB")
    } else {
        (1.0, "bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            nice_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(nice_step(0.39, 5), 0.1);
        let log = Log::decades(7e-5, 0.044, 0.0, 100.0);
        assert_eq!(log.lo, 1e-5);
        assert!((log.hi - 0.1).abs() < 1e-12);
        assert_eq!(log.ticks().len(), 5);
        assert_eq!(decade_time_label(1e-5), "10 µs");
        assert_eq!(decade_time_label(0.1), "100 ms");
        assert_eq!(duration(0.0438), "43.8 ms");
        assert_eq!(tick_label(0.30000000000000004, 0.1), "0.3");
    }

    #[test]
    fn degenerate_domains_do_not_divide_by_zero() {
        let s = Linear::new(5.0, 5.0, 0.0, 100.0);
        assert!(s.map(5.0).is_finite());
        assert!(Log::decades(0.0, -1.0, 0.0, 1.0).map(1.0).is_finite());
    }
}
