//! The table the text report opens with: one line per connection, worst first, so the
//! reader sees where the time went before the detailed blocks.

use std::fmt::Write;

use crate::diagnosis::ConnectionDiagnosis;
use crate::segment::secs;

/// Lines at most; the detailed blocks below may show more.
pub const MAX_LINES: usize = 10;

/// Writes the table of `shown` (worst first), or nothing when it is empty.
pub fn render(out: &mut String, shown: &[&ConnectionDiagnosis]) {
    if shown.is_empty() {
        return;
    }
    let rows: Vec<[String; 5]> = shown
        .iter()
        .take(MAX_LINES)
        .map(|c| {
            let (lost, share) = if c.stall_count > 0 {
                (
                    format!("{:.3} s", secs(c.time_lost)),
                    format!("{:.1}%", 100.0 * c.time_lost_share()),
                )
            } else {
                ("-".into(), "-".into())
            };
            let at = c
                .capture_point
                .as_deref()
                .map(|point| format!(" at {point}"))
                .unwrap_or_default();
            [
                format!("{} -> {}{at}", c.client, c.server),
                c.stall_count.to_string(),
                lost,
                share,
                c.verdict.describe().to_string(),
            ]
        })
        .collect();
    let header = ["connection", "stalls", "lost", "share", "verdict"];
    let width = |k: usize| {
        rows.iter()
            .map(|r| r[k].chars().count())
            .chain([header[k].len()])
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2, w3) = (width(0), width(1), width(2), width(3));
    let _ = writeln!(
        out,
        "\n{}:",
        if shown.len() > MAX_LINES {
            format!("worst {MAX_LINES} connections")
        } else {
            "worst connections".to_string()
        }
    );
    let line = |out: &mut String, r: [&str; 5]| {
        let _ = writeln!(
            out,
            "  {:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {}",
            r[0], r[1], r[2], r[3], r[4]
        );
    };
    line(out, header);
    for r in &rows {
        line(out, [&r[0], &r[1], &r[2], &r[3], &r[4]]);
    }
}
