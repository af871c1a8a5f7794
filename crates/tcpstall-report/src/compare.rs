//! A comparison table with latency distributions: one row per variant (a lab run, a
//! simulated fix, a capture), its latencies as a histogram on a shared log time axis.
//! Callers bring the rows; this module only draws them.

use std::fmt::Write as _;

use crate::graphs::{PLAIN_COLOR, STALL_COLOR, x_tick};
use crate::page::page;
use crate::scale::{self, Log};
use crate::svg::{Svg, escape, text_width};
use crate::trace::LogHistogram;

/// One row: a label, its latencies in seconds, and extra columns already formatted.
#[derive(Clone, Debug, Default)]
pub struct ComparisonRow {
    pub label: String,
    pub latencies: Vec<f64>,
    pub extra: Vec<String>,
}

/// The comparison as an HTML fragment (table and inline SVG), a whole page, and the SVG.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub fragment: String,
    pub page: String,
    pub svg: String,
}

/// Percentile of sorted values by nearest rank.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted.get(rank.min(sorted.len() - 1)).copied()
}

fn finite_sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Small multiples: one histogram strip per row over one log time axis. A latency at
/// least `slow_from` seconds is drawn red (e.g. the delayed-ACK timer less a margin).
pub fn latency_strips(title: &str, rows: &[ComparisonRow], slow_from: Option<f64>) -> String {
    let label_width = rows
        .iter()
        .map(|r| text_width(&r.label, 11.0))
        .fold(80.0_f64, f64::max)
        .min(300.0);
    let strip = 58.0;
    let width = 900.0;
    let top = 52.0;
    let height = top + strip * rows.len().max(1) as f64 + 56.0;
    let mut svg = Svg::titled(width, height, title);
    let slow_label = slow_from.map_or("all latencies".to_string(), |s| {
        format!("at least {}", scale::duration(s))
    });
    svg.rect(10.0, 30.0, 16.0, 9.0, &format!(r#"fill="{PLAIN_COLOR}""#));
    svg.text(
        30.0,
        38.0,
        "start",
        r##"font-size="11" fill="#222222""##,
        if slow_from.is_some() {
            "faster"
        } else {
            "latency"
        },
    );
    if slow_from.is_some() {
        svg.rect(110.0, 30.0, 16.0, 9.0, &format!(r#"fill="{STALL_COLOR}""#));
        svg.text(
            130.0,
            38.0,
            "start",
            r##"font-size="11" fill="#222222""##,
            &slow_label,
        );
        svg.text(
            340.0,
            38.0,
            "start",
            r##"font-size="11" fill="#222222""##,
            "| black tick: median",
        );
    }
    let sorted: Vec<Vec<f64>> = rows.iter().map(|r| finite_sorted(&r.latencies)).collect();
    let lo = sorted
        .iter()
        .filter_map(|v| v.first())
        .copied()
        .fold(f64::INFINITY, f64::min);
    let hi = sorted
        .iter()
        .filter_map(|v| v.last())
        .copied()
        .fold(0.0, f64::max);
    let left = 20.0 + label_width;
    let right = width - 30.0;
    let xs = Log::decades(
        if lo.is_finite() { lo.max(1e-7) } else { 1e-4 },
        hi.max(1e-6),
        left,
        right,
    );
    let bottom = top + strip * rows.len().max(1) as f64;
    for t in xs.ticks() {
        x_tick(
            &mut svg,
            xs.map(t),
            top,
            bottom,
            false,
            &scale::decade_time_label(t),
        );
    }
    svg.text(
        (left + right) / 2.0,
        bottom + 36.0,
        "middle",
        r##"font-size="12" fill="#111111""##,
        "latency per transaction (log scale)",
    );
    for (k, (row, values)) in rows.iter().zip(&sorted).enumerate() {
        let y0 = top + strip * k as f64;
        let base = y0 + strip - 8.0;
        svg.line(left, base, right, base, r##"stroke="#999999""##);
        svg.text(
            left - 8.0,
            y0 + strip / 2.0 + 4.0,
            "end",
            r##"font-size="11" fill="#111111""##,
            &row.label,
        );
        let mut h = LogHistogram::new();
        for &v in values {
            h.add(v, slow_from.is_some_and(|s| v >= s));
        }
        let max = (0..LogHistogram::BINS)
            .map(|b| h.plain[b] + h.stalled[b])
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        svg.open_group(r#"class="latency-strip""#);
        svg.title(&format!("{}: {} transactions", row.label, values.len()));
        for b in 0..LogHistogram::BINS {
            let (p, s) = (h.plain[b], h.stalled[b]);
            if p + s == 0 {
                continue;
            }
            let (e0, e1) = LogHistogram::edges(b);
            let x = xs.map(e0) + 0.5;
            let w = (xs.map(e1) - xs.map(e0) - 1.0).max(1.5);
            let scale_h = strip - 16.0;
            let hp = p as f64 / max * scale_h;
            let hs = s as f64 / max * scale_h;
            if p > 0 {
                svg.rect(x, base - hp, w, hp, &format!(r#"fill="{PLAIN_COLOR}""#));
            }
            if s > 0 {
                svg.rect(
                    x,
                    base - hp - hs,
                    w,
                    hs,
                    &format!(r#"fill="{STALL_COLOR}""#),
                );
            }
        }
        if let Some(median) = percentile(values, 50.0) {
            let x = xs.map(median);
            svg.line(
                x,
                base - (strip - 14.0),
                x,
                base + 3.0,
                r##"stroke="#111111" stroke-width="1.5""##,
            );
        } else {
            svg.text(
                left + 6.0,
                base - 6.0,
                "start",
                r##"font-size="10" fill="#666666""##,
                "no latencies",
            );
        }
        svg.close_group();
    }
    svg.finish()
}

/// The table and the distributions. `extra_headers` name the rows' extra columns.
pub fn comparison(
    title: &str,
    extra_headers: &[&str],
    rows: &[ComparisonRow],
    slow_from: Option<f64>,
) -> Comparison {
    let svg = latency_strips(title, rows, slow_from);
    let mut t = String::new();
    let _ = write!(
        t,
        r#"<table class="comparison"><thead><tr><th>variant</th><th class="num">n</th><th class="num">p50</th><th class="num">p90</th><th class="num">p99</th><th class="num">max</th><th class="num">mean</th>"#
    );
    for h in extra_headers {
        let _ = write!(t, "<th>{}</th>", escape(h));
    }
    t.push_str("</tr></thead><tbody>");
    for row in rows {
        let v = finite_sorted(&row.latencies);
        let cell = |x: Option<f64>| x.map_or("-".to_string(), scale::duration);
        let mean = (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let _ = write!(
            t,
            r#"<tr><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>"#,
            escape(&row.label),
            v.len(),
            cell(percentile(&v, 50.0)),
            cell(percentile(&v, 90.0)),
            cell(percentile(&v, 99.0)),
            cell(v.last().copied()),
            cell(mean)
        );
        for k in 0..extra_headers.len() {
            let _ = write!(
                t,
                "<td>{}</td>",
                escape(row.extra.get(k).map_or("", |s| s.as_str()))
            );
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>");
    let fragment = format!(
        r#"<section class="comparison"><h2>{}</h2>{t}<figure>{svg}</figure></section>"#,
        escape(title)
    );
    let page = page(title, &fragment, 0);
    Comparison {
        fragment,
        page,
        svg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_row_and_survives_empty_and_bad_values() {
        let rows = vec![
            ComparisonRow {
                label: "as given".into(),
                latencies: vec![0.044, 0.043, 0.0001, f64::NAN],
                extra: vec!["40 ms".into()],
            },
            ComparisonRow {
                label: "TCP_NODELAY".into(),
                latencies: vec![],
                extra: vec![],
            },
        ];
        let c = comparison("lab <run>", &["timer"], &rows, Some(0.02));
        assert_eq!(c.svg.matches(r#"class="latency-strip""#).count(), 2);
        assert!(c.fragment.contains("lab &lt;run&gt;"));
        assert!(c.page.contains("<!DOCTYPE html>"));
        assert!(c.fragment.contains("43.") || c.fragment.contains("44.0 ms"));
    }
}
