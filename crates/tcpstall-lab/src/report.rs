//! Text renderers over lab results.

use std::fmt::Write as _;

use tcpstall_core::detect::StallClass;

use crate::compare::{Confusion, SimComparison};
use crate::lab::LabRun;
use crate::measure::{SLOW_MARGIN, STALL_MARGIN, millis, percentile};
use crate::suites::{DelayPoint, LATE_LIMIT, MAX_ATTEMPTS, MatrixResult, Row, VaryingRow};

/// One run: its latency, throughput and stalled transactions.
pub fn run_text(run: &LabRun, label: &str, path: &str) -> String {
    let mut out = String::new();
    let s = &run.summary;
    let e = &run.exchange;
    let _ = writeln!(out, "lab:          {label}, on {path}");
    let _ = writeln!(
        out,
        "connection:   client {} -> server {}; request {:?} response {:?}, depth {}; TCP_MAXSEG {}",
        e.client,
        e.server,
        run.plan.request,
        run.plan.response,
        run.plan.depth,
        run.plan.client_mss
    );
    let _ = writeln!(
        out,
        "latency:      p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms, mean {:.3} ms",
        s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms, s.mean_ms
    );
    let _ = writeln!(
        out,
        "throughput:   {:.1} transactions/s, {:.3} Mbit/s",
        s.transactions_per_second,
        s.throughput_bps / 1e6
    );
    let base = run.baselines.first().map_or(0.0, |&b| millis(b));
    let _ = writeln!(
        out,
        "stalled:      {} of {} (more than one path RTT + {} ms above the unstalled baseline, {:.3} ms for the first)",
        s.stalled,
        s.transactions,
        STALL_MARGIN.as_millis(),
        base
    );
    let _ = write!(out, "per transaction (ms, * = stalled):");
    for (t, &stalled) in e.transactions.iter().zip(&run.stalled).take(40) {
        let _ = write!(
            out,
            " {:.3}{}",
            millis(t.latency),
            if stalled { "*" } else { "" }
        );
    }
    if e.transactions.len() > 40 {
        let _ = write!(out, " ...");
    }
    out.push('\n');
    if let Some([out_ms, in_ms]) = run.crossing_times_ms() {
        let span = |ms: &[f64]| {
            let mut sorted = ms.to_vec();
            sorted.sort_by(f64::total_cmp);
            format!(
                "least {:.3} ms, p50 {:.3} ms",
                sorted.first().copied().unwrap_or(0.0),
                percentile(&sorted, 50.0)
            )
        };
        let _ = writeln!(
            out,
            "path:         one way as the captures at both ends saw {} packets cross: client to server {}, server to client {}",
            out_ms.len() + in_ms.len(),
            span(&out_ms),
            span(&in_ms)
        );
    }
    if let (Some(held), Some(found), Some(packets)) =
        (run.held_by_ack(), &run.analyzer_stalled, &run.packets)
    {
        let unknown: Vec<bool> = held.iter().map(Option::is_none).collect();
        let waited: Vec<bool> = held.iter().map(|h| *h == Some(true)).collect();
        let c = Confusion::of_judged(found, &waited, &unknown);
        let _ = writeln!(
            out,
            "waited:       {} of {} transactions waited for a delayed ACK by the captures ({} chains not shown)",
            waited.iter().filter(|&&w| w).count(),
            held.len(),
            unknown.iter().filter(|&&u| u).count()
        );
        let _ = writeln!(
            out,
            "analyzer:     {} packets captured; {} transactions stalled by the analyzer; agree with the captures on {} of {}",
            packets.len(),
            found.iter().filter(|&&f| f).count(),
            c.true_positives + c.true_negatives,
            c.total()
        );
    }
    out
}

/// The simulator and the lab, transaction by transaction.
pub fn comparison_text(cmp: &SimComparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "simulator (linux profile) against the lab, per transaction (stall = time above the unstalled baseline):"
    );
    let _ = writeln!(
        out,
        "  {:>4}  {:>10}  {:>10}  {:>7}  {:>7}  {:>12}  {:>12}",
        "#", "lab ms", "sim ms", "lab", "sim", "lab stall ms", "sim stall ms"
    );
    let yes = |b: bool| if b { "stalled" } else { "-" };
    for p in cmp.pairs.iter().take(60) {
        let _ = writeln!(
            out,
            "  {:>4}  {:>10.3}  {:>10.3}  {:>7}  {:>7}  {:>12.1}  {:>12.1}",
            p.index,
            p.lab_ms,
            p.sim_ms,
            yes(p.lab_stalled),
            yes(p.sim_stalled),
            p.lab_stall_ms,
            p.sim_stall_ms
        );
    }
    if cmp.pairs.len() > 60 {
        let _ = writeln!(out, "  ... {} more", cmp.pairs.len() - 60);
    }
    out.push_str(&agreement_line(cmp));
    out
}

fn agreement_line(cmp: &SimComparison) -> String {
    let c = &cmp.confusion;
    format!(
        "agreement:    stalled-or-not {} of {} ({:.1}%); stall durations within 20%: {} of {} stalled in both\n",
        c.true_positives + c.true_negatives,
        c.total(),
        c.agreement() * 100.0,
        cmp.durations_within,
        cmp.both_stalled
    )
}

/// A side-by-side table of scenarios: each row's exchanges that waited for a delayed ACK by
/// its captures at both ends of the line, whether the analyzer found exactly those in the
/// same capture, and the simulator against the same truth (`-` where nothing was
/// captured).
pub fn table_text(title: &str, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "  {:<36} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}   {:>9} {:>8} {:>7}",
        "scenario",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "tx/s",
        "waited",
        "analyze",
        "sim p50",
        "sim st.",
        "agree"
    );
    let mut differ = Vec::new();
    for row in rows {
        let s = row.summary();
        let waited = row.waited();
        let (count, analyze, agree) = match &waited {
            Some(w) => {
                let unknown = match w.unknown() {
                    0 => String::new(),
                    n => format!("+{n}?"),
                };
                let c = w.analyzer();
                let analyze = if w.exact() {
                    "exact".to_string()
                } else {
                    format!("+{} -{}", c.false_positives, c.false_negatives)
                };
                (
                    format!("{}/{}{unknown}", w.count(), w.held.len()),
                    analyze,
                    format!("{:.0}%", w.simulator(&row.sim).agreement() * 100.0),
                )
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "  {:<36} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.1} {:>8} {:>8}   {:>9.3} {:>8} {:>7}",
            row.name,
            s.p50_ms,
            s.p90_ms,
            s.p99_ms,
            s.max_ms,
            s.transactions_per_second,
            count,
            analyze,
            row.sim_p50_ms(),
            format!("{}/{}", row.sim_stalled(), row.sim.pairs.len()),
            agree
        );
        if let Some(w) = waited.filter(|w| !w.exact()) {
            let numbered = |pick: &dyn Fn(Option<bool>, bool) -> bool| -> String {
                let picked: Vec<String> = w
                    .held
                    .iter()
                    .zip(&w.found)
                    .enumerate()
                    .filter(|(_, (h, f))| pick(**h, **f))
                    .map(|(i, _)| format!("#{}", i + 1))
                    .collect();
                if picked.is_empty() {
                    "none".into()
                } else {
                    picked.join(" ")
                }
            };
            differ.push(format!(
                "  analyzer differs: {}: a stall in {} that did not wait, none in {} that did; chain not shown: {}",
                row.name,
                numbered(&|h, f| f && h == Some(false)),
                numbered(&|h, f| !f && h == Some(true)),
                numbered(&|h, _| h.is_none()),
            ));
        }
    }
    if rows.iter().any(|r| r.waited().is_some()) {
        let _ = writeln!(
            out,
            "waited:       exchanges whose chain in the captures at both ends holds a pure ACK held {} ms or more (a delayed-ACK timer)",
            SLOW_MARGIN.as_millis()
        );
        let _ = writeln!(
            out,
            "analyze:      the analyzer on the same capture: exact when its stalls end in those exchanges and no other (+ more, - fewer)"
        );
    }
    for line in differ {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The matrix: closed loop (analyzer against the lab) and fidelity (simulator against the lab).
pub fn matrix_text(result: &MatrixResult) -> String {
    closed_loop_text(
        "matrix (lab on this kernel, simulator's linux profile):",
        result,
    )
}

/// The look-alikes: the matrix's lines, then what the analyzer called each gap it found
/// in each scenario's capture.
pub fn lookalike_text(result: &MatrixResult) -> String {
    let mut out = closed_loop_text(
        "look-alikes of a stall (lab on this kernel, simulator's linux profile):",
        result,
    );
    if result.closed_loop.is_none() {
        return out;
    }
    let _ = writeln!(out, "the analyzer's gaps in each capture:");
    for row in &result.rows {
        let Some(analysis) = &row.run.analysis else {
            continue;
        };
        let mut counts = [0usize; StallClass::ALL.len()];
        for event in analysis.connections.iter().flat_map(|c| c.events.iter()) {
            counts[event.class.index()] += 1;
        }
        let named: Vec<String> = StallClass::ALL
            .iter()
            .filter(|c| counts[c.index()] > 0)
            .map(|c| format!("{} {}", c.name(), counts[c.index()]))
            .collect();
        let stalls =
            counts[StallClass::NagleDelayedAck.index()] + counts[StallClass::DelayedAck.index()];
        let _ = writeln!(
            out,
            "  {:<36} {}; {stalls} stalls, {} of {} waited for a delayed ACK",
            row.name,
            if named.is_empty() {
                "no gap".to_string()
            } else {
                named.join(", ")
            },
            row.waited().map_or(0, |w| w.count()),
            row.run.summary.transactions
        );
    }
    out
}

fn closed_loop_text(title: &str, result: &MatrixResult) -> String {
    let mut out = table_text(title, &result.rows);
    let transactions: usize = result.rows.iter().map(|r| r.run.summary.transactions).sum();
    let _ = write!(
        out,
        "transactions: {transactions} in {} scenarios",
        result.rows.len()
    );
    match &result.closed_loop {
        Some(c) => {
            let waited: usize = result
                .rows
                .iter()
                .filter_map(Row::waited)
                .map(|w| w.count())
                .sum();
            let _ = writeln!(
                out,
                ", {waited} waited for a delayed ACK by the captures ({} chains not shown)",
                result.unknown
            );
            let _ = writeln!(
                out,
                "closed loop:  analyzer (from the capture) against the exchanges that waited: precision {:.4}, recall {:.4} (TP {}, FP {}, FN {}, TN {})",
                c.precision(),
                c.recall(),
                c.true_positives,
                c.false_positives,
                c.false_negatives,
                c.true_negatives
            );
        }
        None => {
            let _ = writeln!(out);
            let _ = writeln!(out, "closed loop:  skipped (no capture)");
        }
    }
    if let Some(c) = &result.fidelity_to_truth {
        let _ = writeln!(
            out,
            "fidelity:     simulator against the exchanges that waited: precision {:.4}, recall {:.4}, stalled-or-not {} of {} ({:.1}%)",
            c.precision(),
            c.recall(),
            c.true_positives + c.true_negatives,
            c.total(),
            c.agreement() * 100.0
        );
    }
    let f = &result.fidelity;
    let _ = writeln!(
        out,
        "latencies:    simulator against the lab's latencies: precision {:.4}, recall {:.4}",
        f.confusion.precision(),
        f.confusion.recall()
    );
    out.push_str(&agreement_line(f));
    out
}

/// Requested against measured round trips.
pub fn delay_text(points: &[DelayPoint]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "delay line accuracy (one-byte echo, TCP_NODELAY and TCP_QUICKACK both sides; each transaction is one round trip):"
    );
    let _ = writeln!(
        out,
        "  {:>12} {:>12} {:>12} {:>12} {:>10}   {:>14} {:>14} {:>14}",
        "requested ms", "min ms", "p50 ms", "p99 ms", "p50 error", "line late p50", "p99", "max"
    );
    for p in points {
        let _ = writeln!(
            out,
            "  {:>12.1} {:>12.3} {:>12.3} {:>12.3} {:>9.3}ms   {:>12.1}us {:>12.1}us {:>12.1}us",
            p.requested_ms,
            p.measured_min_ms,
            p.measured_p50_ms,
            p.measured_p99_ms,
            p.measured_p50_ms - p.requested_ms,
            p.line.p50_us,
            p.line.p99_us,
            p.line.max_us
        );
    }
    out
}

/// The varying-delay suite: per program and path, the programs' round trips, the line's
/// queue waits, and each capture point's stalls against the programs' slow round trips.
pub fn varying_text(rows: &[VaryingRow]) -> String {
    let mut out = String::new();
    for row in rows {
        let p = &row.path;
        let rtt = p.rtt_ms;
        let _ = writeln!(
            out,
            "{}, {} {:.1} ms RTT + up to {:.0}% (round trips {:.2} to {:.2} ms), seed {}:",
            row.program.name(),
            p.name,
            rtt,
            p.variation * 100.0,
            rtt,
            rtt * (1.0 + p.variation),
            row.seed
        );
        let _ = write!(out, "  round trips (ms, * = slow, ? = neither):");
        for ((t, &slow), &between) in row.run.round_trips.iter().zip(&row.slow).zip(&row.between) {
            let _ = write!(
                out,
                " {:.3}{}",
                millis(t.latency),
                if slow {
                    "*"
                } else if between {
                    "?"
                } else {
                    ""
                }
            );
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "  delay line:  queue wait per stage p50 {:.0} us, p99 {:.0} us, max {:.0} us; late p50 {:.0} us, p99 {:.0} us, max {:.0} us ({} stage passes)",
            row.waits.p50_us,
            row.waits.p99_us,
            row.waits.max_us,
            row.lateness.p50_us,
            row.lateness.p99_us,
            row.lateness.max_us,
            row.lateness.packets
        );
        if !row.late_runs.is_empty() {
            let late: Vec<String> = row
                .late_runs
                .iter()
                .map(|us| format!("{:.1} ms", us / 1e3))
                .collect();
            let _ = writeln!(
                out,
                "               run again: the line was late by {} (more than {} ms)",
                late.join(", then "),
                LATE_LIMIT.as_millis()
            );
        }
        for unclear in &row.unclear_runs {
            let round_trips: Vec<String> = unclear
                .iter()
                .map(|(i, ms)| format!("#{} {ms:.3} ms", i + 1))
                .collect();
            let _ = writeln!(
                out,
                "               run again: round trips neither fast nor slow ({}), a program delayed",
                round_trips.join(", ")
            );
        }
        if !row.faithful() {
            let _ = writeln!(
                out,
                "               not the path asked for: the line was late by {:.1} ms in each of {} runs",
                row.lateness.max_us / 1e3,
                MAX_ATTEMPTS
            );
        }
        let neither = match row.between_count() {
            0 => String::new(),
            n => format!(" ({n} neither)"),
        };
        for point in &row.points {
            let c = &point.confusion;
            let _ = writeln!(
                out,
                "  {:<7} {} packets; analyzer {} stalls, programs {} slow{neither}; agree on {} of {}",
                format!("{}:", point.point.name()),
                point.packets,
                point.stalls,
                row.slow_count(),
                c.true_positives + c.true_negatives,
                c.total()
            );
            let differ: Vec<String> = point
                .found
                .iter()
                .zip(&row.slow)
                .zip(&row.between)
                .map(|((f, s), b)| (f, s, b))
                .enumerate()
                .filter(|(_, (f, s, b))| !**b && f != s)
                .map(|(i, (f, s, _))| (i, (f, s)))
                .map(|(i, (&f, _))| {
                    format!(
                        "#{} {:.3} ms {}",
                        i + 1,
                        millis(row.run.round_trips[i].latency),
                        if f {
                            "stalled by the analyzer, not slow"
                        } else {
                            "slow, no stall from the analyzer"
                        }
                    )
                })
                .collect();
            if !differ.is_empty() {
                let _ = writeln!(out, "          differ: {}", differ.join("; "));
            }
        }
        out.push('\n');
    }
    let agree = rows.iter().filter(|r| r.agrees()).count();
    let faithful = rows.iter().filter(|r| r.faithful()).count();
    let _ = writeln!(
        out,
        "varying delays: {agree} of {} program and path pairs agree at every capture point; the line gave the path asked for in {faithful} of {}",
        rows.len(),
        rows.len()
    );
    out
}
