//! `tcpstall simulate --html FILE`: a sweep's throughput against the swept value (the
//! seed 000 sawtooth), or a single run's latency histogram.

use std::fmt::Write as _;

use tcpstall_sim::RunResult;
use tcpstall_sim::summary::Summary;
use tcpstall_sim::sweep::SweepPoint;

use crate::graphs::{self, Histogram, PLAIN_COLOR, STALL_COLOR};
use crate::page::page;
use crate::scale::{self, Linear};
use crate::svg::{Svg, escape, num};
use crate::trace::LogHistogram;

/// Points drawn as dots at most; beyond, only the line.
const MAX_DOTS: usize = 3000;
/// Table rows at most.
const MAX_ROWS: usize = 2000;

/// Throughput against the swept value; red dots are points where transactions stalled.
pub fn sweep_svg(parameter: &str, points: &[SweepPoint]) -> String {
    let (width, height) = (960.0, 420.0);
    let title = format!("throughput against {parameter}");
    let mut svg = Svg::titled(width, height, &title);
    svg.rect(10.0, 30.0, 16.0, 9.0, &format!(r#"fill="{PLAIN_COLOR}""#));
    svg.text(
        30.0,
        38.0,
        "start",
        r##"font-size="11" fill="#222222""##,
        "no transaction stalled",
    );
    svg.rect(220.0, 30.0, 16.0, 9.0, &format!(r#"fill="{STALL_COLOR}""#));
    svg.text(
        240.0,
        38.0,
        "start",
        r##"font-size="11" fill="#222222""##,
        "transactions stalled (simulator's ground truth)",
    );
    let (left, top, right, bottom) = (84.0, 54.0, width - 30.0, height - 52.0);
    let x_lo = points.iter().map(|p| p.value).fold(f64::INFINITY, f64::min);
    let x_hi = points
        .iter()
        .map(|p| p.value)
        .fold(f64::NEG_INFINITY, f64::max);
    let (x_lo, x_hi) = if x_lo.is_finite() {
        (x_lo, x_hi)
    } else {
        (0.0, 1.0)
    };
    let pad = ((x_hi - x_lo) * 0.02).max(0.5);
    let xs = Linear::new(x_lo - pad, x_hi + pad, left, right);
    let y_hi = points
        .iter()
        .map(|p| p.summary.throughput_bps / 1e6)
        .fold(0.0, f64::max);
    let ys = Linear::new(0.0, (y_hi * 1.08).max(1e-3), bottom, top);
    let xstep = scale::nice_step(xs.d1 - xs.d0, 8);
    for t in xs.ticks(8) {
        graphs::x_tick(
            &mut svg,
            xs.map(t),
            top,
            bottom,
            false,
            &scale::tick_label(t, xstep),
        );
    }
    let ystep = scale::nice_step(ys.d1, 5);
    for v in ys.ticks(5) {
        let y = ys.map(v);
        svg.line(left, y, right, y, r##"stroke="#e4e4e4""##);
        svg.text(
            left - 6.0,
            y + 4.0,
            "end",
            r##"font-size="11" fill="#333333""##,
            &scale::tick_label(v, ystep),
        );
    }
    let mut d = String::new();
    for p in points {
        let (x, y) = (xs.map(p.value), ys.map(p.summary.throughput_bps / 1e6));
        let _ = write!(
            d,
            "{}{} {}",
            if d.is_empty() { "M" } else { "L" },
            num(x),
            num(y)
        );
    }
    svg.path(&d, r##"fill="none" stroke="#777777" stroke-width="1""##);
    if points.len() <= MAX_DOTS {
        for p in points {
            let color = if p.summary.stalled_transactions > 0 {
                STALL_COLOR
            } else {
                PLAIN_COLOR
            };
            svg.open_group(r#"class="sweep-point""#);
            svg.title(&format!(
                "{parameter} {}: {:.3} Mbit/s, {}/{} stalled, p50 {}",
                p.value,
                p.summary.throughput_bps / 1e6,
                p.summary.stalled_transactions,
                p.summary.transactions,
                scale::duration(p.summary.latency_p50)
            ));
            svg.circle(
                xs.map(p.value),
                ys.map(p.summary.throughput_bps / 1e6),
                3.0,
                &format!(r#"fill="{color}""#),
            );
            svg.close_group();
        }
    }
    svg.rect(
        left,
        top,
        right - left,
        bottom - top,
        r##"fill="none" stroke="#444444""##,
    );
    let unit = tcpstall_sim::sweep::PARAMETERS
        .iter()
        .find(|(p, _)| *p == parameter)
        .map_or(String::new(), |(_, what)| format!(": {what}"));
    svg.text(
        (left + right) / 2.0,
        bottom + 36.0,
        "middle",
        r##"font-size="12" fill="#111111""##,
        &format!("{parameter}{unit}"),
    );
    svg.vtext(
        18.0,
        (top + bottom) / 2.0,
        r##"font-size="12" fill="#111111""##,
        "throughput (Mbit/s)",
    );
    svg.finish()
}

/// The sweep page: the chart and the points as a table.
pub fn sweep_page(description: &str, parameter: &str, points: &[SweepPoint]) -> String {
    let mut body = format!(
        r#"<header><h1>tcpstall simulate: sweep of {}</h1><p>{}</p></header><div class="figures"><figure>{}<figcaption>Each dot is one simulated run. A cliff between neighbouring values is the parity rule: an odd number of full segments before a partial tail waits for a delayed ACK.</figcaption></figure></div>"#,
        escape(parameter),
        escape(description),
        sweep_svg(parameter, points)
    );
    let _ = write!(
        body,
        r#"<h2>Points</h2><table><thead><tr><th class="num">{}</th><th class="num">stalled</th><th class="num">mean</th><th class="num">p50</th><th class="num">p99</th><th class="num">Mbit/s</th><th class="num">tx/s</th></tr></thead><tbody>"#,
        escape(parameter)
    );
    for p in points.iter().take(MAX_ROWS) {
        let s = &p.summary;
        let _ = write!(
            body,
            r#"<tr><td class="num">{}</td><td class="num">{}/{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{:.3}</td><td class="num">{:.1}</td></tr>"#,
            p.value,
            s.stalled_transactions,
            s.transactions,
            scale::duration(s.latency_mean),
            scale::duration(s.latency_p50),
            scale::duration(s.latency_p99),
            s.throughput_bps / 1e6,
            s.transactions_per_second
        );
    }
    body.push_str("</tbody></table>");
    if points.len() > MAX_ROWS {
        let _ = write!(
            body,
            r#"<p class="note">{} more points: tcpstall simulate --csv lists them all.</p>"#,
            points.len() - MAX_ROWS
        );
    }
    page(
        &format!("tcpstall simulate: sweep of {parameter}"),
        &body,
        0,
    )
}

/// Latency of each transaction of one run, stalled ones red.
pub fn latency_svg(title: &str, result: &RunResult) -> String {
    let mut h = LogHistogram::new();
    for t in &result.transactions {
        h.add(t.latency, t.stalled);
    }
    graphs::log_histogram(&Histogram {
        histogram: &h,
        title: title.to_string(),
        x_label: "latency per transaction (log scale)".into(),
        plain_label: "no stall".into(),
        stalled_label: "stalled (ground truth)".into(),
        marker: None,
        width: 760.0,
        height: 340.0,
    })
}

/// The page of one run: its summary and its latency histogram.
pub fn run_page(description: &str, result: &RunResult, summary: &Summary) -> String {
    let svg = latency_svg(&format!("{} transactions", summary.transactions), result);
    let rows = [
        (
            "transactions",
            format!(
                "{} ({} stalled)",
                summary.transactions, summary.stalled_transactions
            ),
        ),
        (
            "latency p50 / p90 / p99 / max",
            format!(
                "{} / {} / {} / {}",
                scale::duration(summary.latency_p50),
                scale::duration(summary.latency_p90),
                scale::duration(summary.latency_p99),
                scale::duration(summary.latency_max)
            ),
        ),
        ("mean latency", scale::duration(summary.latency_mean)),
        (
            "transactions per second",
            format!("{:.1}", summary.transactions_per_second),
        ),
        (
            "throughput",
            format!("{:.3} Mbit/s", summary.throughput_bps / 1e6),
        ),
        (
            "stalls (ground truth)",
            format!(
                "{} nagle-delayed-ack, {} delayed-ack",
                summary.nagle_delayed_ack_stalls, summary.delayed_ack_stalls
            ),
        ),
        (
            "MSS client / server",
            format!("{} / {}", summary.client_mss, summary.server_mss),
        ),
        ("packets", summary.packets.to_string()),
    ];
    let mut body = format!(
        r#"<header><h1>tcpstall simulate</h1><p>{}</p></header><dl class="facts">"#,
        escape(description)
    );
    for (k, v) in rows {
        let _ = write!(body, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(&v));
    }
    let _ = write!(
        body,
        "</dl><div class=\"figures\"><figure>{svg}<figcaption>Latency of each transaction on a log scale. A stalled transaction waits for a delayed-ACK timer: a second mode far to the right of the fast one.</figcaption></figure></div>"
    );
    page("tcpstall simulate", &body, 0)
}
