//! Whether several capture files are one trace. Files that share no host address and
//! whose packets are more than a day apart were not captured together: merged, they would
//! make one timeline of unrelated traffic spanning years. Files that share a host (a ring
//! of `tcpdump -C/-G`, two capture points of one path, captures of one server on two
//! days) or follow on within a day are one trace.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::segment::{NANOS_PER_SEC, Nanos, Segment};

/// Files whose packets are further apart than this, sharing no host, are not one trace.
pub const TRACE_GAP: Nanos = 86_400 * NANOS_PER_SEC;
/// Host addresses remembered per file, at most (the first seen).
const MAX_HOSTS_PER_FILE: usize = 4096;

/// One file's packets as far as the rule needs them: when, and between which hosts.
struct FileSpan {
    first: Nanos,
    last: Nanos,
    hosts: rustc_hash::FxHashSet<IpAddr>,
    /// The addresses of the segment last seen (most follow one another's).
    last_pair: Option<(IpAddr, IpAddr)>,
}

/// Watches the TCP segments of several files as they are read.
pub(super) struct TraceWatch {
    spans: Vec<Option<FileSpan>>,
}

/// Two files that do not belong to one trace, and how far apart their packets are.
#[derive(Clone, Debug)]
pub struct NotOneTrace {
    pub first: PathBuf,
    pub second: PathBuf,
    pub apart: Nanos,
    /// How many traces the files make.
    pub traces: usize,
}

impl std::fmt::Display for NotOneTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} and {} are not one trace: no host address in common and packets {} apart ({} traces in the files given); --join reads them as one anyway",
            self.first.display(),
            self.second.display(),
            describe_gap(self.apart),
            self.traces
        )
    }
}

fn describe_gap(gap: Nanos) -> String {
    let days = gap as f64 / TRACE_GAP as f64;
    if days >= 365.25 {
        format!("{:.1} years", days / 365.25)
    } else {
        format!("{days:.1} days")
    }
}

/// Whether an address names a host: not loopback (every machine's) nor unspecified.
fn is_host(address: IpAddr) -> bool {
    !address.is_loopback() && !address.is_unspecified()
}

impl TraceWatch {
    pub(super) fn new(files: usize) -> TraceWatch {
        TraceWatch {
            spans: (0..files).map(|_| None).collect(),
        }
    }

    /// Notes a TCP segment of `file`.
    pub(super) fn segment(&mut self, file: usize, segment: &Segment) {
        self.note(file, segment.time, segment.src.ip(), segment.dst.ip());
    }

    /// Notes a packet of `file` at `time` from `src` to `dst`.
    fn note(&mut self, file: usize, time: Nanos, src: IpAddr, dst: IpAddr) {
        let Some(slot) = self.spans.get_mut(file) else {
            return;
        };
        let span = slot.get_or_insert_with(|| FileSpan {
            first: time,
            last: time,
            hosts: Default::default(),
            last_pair: None,
        });
        span.first = span.first.min(time);
        span.last = span.last.max(time);
        let pair = (src, dst);
        if span.last_pair == Some(pair) {
            return;
        }
        span.last_pair = Some(pair);
        for address in [pair.0, pair.1] {
            if span.hosts.len() < MAX_HOSTS_PER_FILE && is_host(address) {
                span.hosts.insert(address);
            }
        }
    }

    /// The files as traces: each a list of file indices, the earliest trace first. Files
    /// join when their packets are within [`TRACE_GAP`] of each other's (in a chain) or
    /// when they share a host address. Files without a TCP segment belong to none.
    fn traces(&self) -> Vec<Vec<usize>> {
        let mut files: Vec<(usize, &FileSpan)> = self
            .spans
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.as_ref()?)))
            .collect();
        files.sort_by_key(|(i, s)| (s.first, *i));
        // Runs in time: a file starting within the gap of the run's end joins it.
        let mut run_of = vec![0usize; self.spans.len()];
        let mut runs = 0;
        let mut end = Nanos::MIN;
        for &(i, span) in &files {
            if runs == 0 || span.first.saturating_sub(end) > TRACE_GAP {
                runs += 1;
            }
            end = end.max(span.last);
            run_of[i] = runs - 1;
        }
        // Runs that share a host are one trace.
        let mut parent: Vec<usize> = (0..runs).collect();
        fn root(parent: &mut [usize], mut run: usize) -> usize {
            while parent[run] != run {
                parent[run] = parent[parent[run]];
                run = parent[run];
            }
            run
        }
        let mut run_of_host: rustc_hash::FxHashMap<IpAddr, usize> = Default::default();
        for &(i, span) in &files {
            for &host in &span.hosts {
                let run = *run_of_host.entry(host).or_insert(run_of[i]);
                let (a, b) = (root(&mut parent, run), root(&mut parent, run_of[i]));
                parent[a.max(b)] = a.min(b);
            }
        }
        let mut traces: Vec<Vec<usize>> = Vec::new();
        let mut trace_of_root: rustc_hash::FxHashMap<usize, usize> = Default::default();
        for &(i, _) in &files {
            let r = root(&mut parent, run_of[i]);
            let next = traces.len();
            let t = *trace_of_root.entry(r).or_insert(next);
            if t == next {
                traces.push(Vec::new());
            }
            traces[t].push(i);
        }
        traces
    }

    /// Two files of different traces, when the files make more than one: the earliest
    /// file and the earliest of another trace.
    pub(super) fn not_one_trace(&self, paths: &[PathBuf]) -> Option<NotOneTrace> {
        let traces = self.traces();
        let (first, second) = (*traces.first()?.first()?, *traces.get(1)?.first()?);
        let (a, b) = (self.spans[first].as_ref()?, self.spans[second].as_ref()?);
        let apart = if b.first >= a.last {
            b.first - a.last
        } else {
            a.first.saturating_sub(b.last)
        };
        let path = |i: usize| paths.get(i).cloned().unwrap_or_default();
        Some(NotOneTrace {
            first: path(first),
            second: path(second),
            apart,
            traces: traces.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::NANOS_PER_MILLI;
    use std::path::Path;

    fn note(watch: &mut TraceWatch, file: usize, time: Nanos, src: &str, dst: &str) {
        watch.note(file, time, src.parse().unwrap(), dst.parse().unwrap());
    }

    const YEAR: Nanos = 365 * TRACE_GAP;

    #[test]
    fn a_ring_and_a_host_seen_again_are_one_trace() {
        let mut watch = TraceWatch::new(4);
        // A ring: three files following on, one host pair.
        for file in 0..3 {
            let start = file as Nanos * 3_600 * NANOS_PER_SEC;
            note(&mut watch, file, start, "10.0.0.1", "10.0.0.2");
            note(
                &mut watch,
                file,
                start + NANOS_PER_MILLI,
                "10.0.0.2",
                "10.0.0.1",
            );
        }
        // The same server a year later, from another client.
        note(&mut watch, 3, YEAR, "192.0.2.7", "10.0.0.2");
        assert_eq!(watch.traces(), vec![vec![0, 1, 2, 3]]);
        assert!(watch.not_one_trace(&[]).is_none());
    }

    #[test]
    fn other_hosts_years_apart_are_two_traces_and_loopback_is_no_host() {
        let mut watch = TraceWatch::new(3);
        note(&mut watch, 0, 0, "10.0.0.1", "10.0.0.2");
        note(&mut watch, 0, 0, "127.0.0.1", "127.0.0.1");
        note(&mut watch, 1, 2 * YEAR, "192.0.2.1", "192.0.2.2");
        note(&mut watch, 1, 2 * YEAR, "127.0.0.1", "127.0.0.1");
        // Within a day of the second: joins it though it shares no host.
        note(
            &mut watch,
            2,
            2 * YEAR + TRACE_GAP / 2,
            "198.51.100.1",
            "198.51.100.2",
        );
        assert_eq!(watch.traces(), vec![vec![0], vec![1, 2]]);
        let paths: Vec<PathBuf> = ["a", "b", "c"].iter().map(PathBuf::from).collect();
        let apart = watch.not_one_trace(&paths).expect("two traces");
        assert_eq!(
            (apart.first.as_path(), apart.second.as_path()),
            (Path::new("a"), Path::new("b"))
        );
        assert_eq!(apart.apart, 2 * YEAR);
        assert!(apart.to_string().contains("2.0 years"), "{apart}");
    }
}
