//! The pictures: Stevens time-sequence graphs with the gaps shaded, and histograms of
//! round trips on a logarithmic time axis. Each returns a standalone SVG document.

use tcpstall_core::detect::StallClass;
use tcpstall_core::diagnosis::ConnectionDiagnosis;
use tcpstall_core::segment::Nanos;
use tcpstall_core::side::Side;

use crate::scale::{self, Linear, Log};
use crate::svg::{Svg, escape, num, text_width};
use crate::trace::{LogHistogram, View, ViewContent};

pub const DATA_COLOR: &str = "#1f5fb4";
pub const RETRANSMISSION_COLOR: &str = "#8c2d04";
pub const ACK_COLOR: &str = "#2a9d2a";
pub const WINDOW_COLOR: &str = "#b8860b";
pub const PLAIN_COLOR: &str = "#4a7fc1";
pub const STALL_COLOR: &str = "#d62728";
const GRID: &str = "#e4e4e4";
const AXIS: &str = "#444444";

/// Colour of each class of gap.
pub fn class_color(class: StallClass) -> &'static str {
    match class {
        StallClass::NagleDelayedAck => "#d62728",
        StallClass::DelayedAck => "#ff7f0e",
        StallClass::AppThinkTime => "#7f7f7f",
        StallClass::ReceiverWindow => "#9467bd",
        StallClass::RetransmissionTimeout => "#8c564b",
        StallClass::Unexplained => "#bcbd22",
    }
}

/// Plot area inside a graph.
#[derive(Clone, Copy, Debug)]
struct Frame {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

/// What kind of time-sequence view is drawn, which decides the marker classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    /// The whole connection: every gap gets a marker (class `stall-marker` for TCP stalls).
    Whole,
    /// A part of a connection: bands with full labels.
    Zoom,
}

/// Options of a time-sequence graph.
pub struct SeqGraph<'a> {
    pub connection: &'a ConnectionDiagnosis,
    /// Number of the connection in the report, for stall anchors.
    pub connection_number: usize,
    pub view: &'a View,
    pub sender: Side,
    pub kind: ViewKind,
    pub title: String,
    pub width: f64,
    pub height: f64,
    pub window_scaled: bool,
    /// Gaps with an index below this have a listing in the page to link to.
    pub linked_events: usize,
}

/// The id of a stall's listing in the HTML report.
pub fn stall_anchor(connection_number: usize, event: usize) -> String {
    format!("c{connection_number}-s{}", event + 1)
}

fn axes_frame(svg: &mut Svg, f: Frame) {
    svg.rect(
        f.left,
        f.top,
        f.right - f.left,
        f.bottom - f.top,
        r##"fill="none" stroke="#444444" stroke-width="1""##,
    );
}

/// A vertical grid line at `x` from `top` to `bottom`, a tick below it when
/// `tick_mark`, and its label.
pub(crate) fn x_tick(svg: &mut Svg, x: f64, top: f64, bottom: f64, tick_mark: bool, label: &str) {
    svg.line(x, top, x, bottom, &format!(r#"stroke="{GRID}""#));
    if tick_mark {
        svg.line(x, bottom, x, bottom + 4.0, &format!(r#"stroke="{AXIS}""#));
    }
    svg.text(
        x,
        bottom + 16.0,
        "middle",
        r##"font-size="11" fill="#333333""##,
        label,
    );
}

fn legend_entry(svg: &mut Svg, x: f64, y: f64, swatch: &str, label: &str) -> f64 {
    svg.raw(&swatch.replace("{x}", &num(x)).replace("{y}", &num(y)));
    svg.text(
        x + 20.0,
        y + 4.0,
        "start",
        r##"font-size="11" fill="#222222""##,
        label,
    );
    x + 20.0 + text_width(label, 11.0) + 14.0
}

fn line_swatch(color: &str, dash: bool) -> String {
    format!(
        r#"<path d="M{{x}} {{y}}h16" transform="translate(0 0)" stroke="{color}" stroke-width="2" fill="none"{}/>"#,
        if dash {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        }
    )
}

fn box_swatch(color: &str, opacity: f64) -> String {
    format!(
        r#"<rect x="{{x}}" y="{{y}}" width="16" height="9" transform="translate(0 -4.5)" fill="{color}" fill-opacity="{opacity}" stroke="{color}"/>"#
    )
}

/// Lays legend entries out in rows that fit the width; returns the y below them.
fn legend(svg: &mut Svg, entries: &[(String, String)], left: f64, right: f64, y: f64) -> f64 {
    let mut x = left;
    let mut y = y;
    for (swatch, label) in entries {
        let w = 20.0 + text_width(label, 11.0) + 14.0;
        if x + w > right && x > left {
            x = left;
            y += 16.0;
        }
        x = legend_entry(svg, x, y, swatch, label);
    }
    y + 14.0
}

/// The y extent a view needs, and whether the window line fits in it.
fn seq_extent(view: &View) -> (f64, f64, f64) {
    let (mut lo, mut hi, mut win) = (i64::MAX, i64::MIN, i64::MIN);
    match &view.content {
        ViewContent::Raw { data, acks } => {
            for p in data {
                lo = lo.min(p.lo);
                hi = hi.max(p.hi);
            }
            for a in acks {
                lo = lo.min(a.ack);
                hi = hi.max(a.ack);
                win = win.max(a.window_edge);
            }
        }
        ViewContent::Columns(columns) => {
            for c in columns {
                if c.data_segments > 0 {
                    lo = lo.min(c.data_lo);
                    hi = hi.max(c.data_hi);
                }
                if c.acks > 0 {
                    lo = lo.min(c.ack);
                    hi = hi.max(c.ack);
                    win = win.max(c.window_edge);
                }
            }
        }
    }
    if lo > hi {
        return (0.0, 1.0, f64::NAN);
    }
    (lo as f64, hi as f64, win as f64)
}

/// The highest sequence number sent up to `t`: where the data stood during a gap.
fn level_at(view: &View, t: Nanos) -> Option<i64> {
    match &view.content {
        ViewContent::Raw { data, .. } => data.iter().filter(|p| p.time <= t).map(|p| p.hi).max(),
        ViewContent::Columns(columns) => {
            let f = (t - view.start) as f64 / (view.end - view.start).max(1) as f64;
            let last = ((f * columns.len() as f64) as usize).min(columns.len().saturating_sub(1));
            columns
                .iter()
                .take(last + 1)
                .filter(|c| c.data_segments > 0)
                .map(|c| c.data_hi)
                .max()
        }
    }
}

/// A Stevens time-sequence graph of one direction, gaps shaded by class.
pub fn time_sequence(g: &SeqGraph<'_>) -> String {
    let c = g.connection;
    let view = g.view;
    let mut svg = Svg::titled(g.width, g.height, &g.title);

    let classes_shown: Vec<StallClass> = StallClass::ALL
        .into_iter()
        .filter(|cl| {
            c.events
                .iter()
                .any(|e| e.class == *cl && e.end >= view.start && e.start <= view.end)
        })
        .collect();
    let (mut y_lo, mut y_hi, window_max) = seq_extent(view);
    let window_fits = window_max.is_finite() && window_max <= y_hi + (y_hi - y_lo).max(1.0) * 0.6;
    if window_fits {
        y_hi = y_hi.max(window_max);
    }
    let pad = ((y_hi - y_lo) * 0.04).max(1.0);
    y_lo = (y_lo - pad).max(if y_lo >= 0.0 { 0.0 } else { y_lo - pad });
    y_hi += pad;

    let mut entries: Vec<(String, String)> = vec![
        (
            line_swatch(DATA_COLOR, false),
            "data segment (seq range)".into(),
        ),
        (line_swatch(ACK_COLOR, false), "ACK".into()),
        (
            line_swatch(WINDOW_COLOR, true),
            if window_fits {
                "receive window edge".to_string()
            } else if window_max.is_finite() {
                format!("window edge: off the top, to {}", bytes_label(window_max))
            } else {
                "receive window edge".to_string()
            },
        ),
    ];
    for cl in &classes_shown {
        entries.push((box_swatch(class_color(*cl), 0.3), cl.name().to_string()));
    }
    let legend_bottom = legend(&mut svg, &entries, 10.0, g.width - 10.0, 34.0);

    let f = Frame {
        left: 78.0,
        top: legend_bottom + 18.0,
        right: g.width - 26.0,
        bottom: g.height - 52.0,
    };
    let span = (view.end - view.start) as f64 / 1e9;
    let unit = scale::time_unit_for(span);
    let t_of = |t: Nanos| (t - c.first_time) as f64 / 1e9 / unit.seconds;
    let xs = Linear::new(t_of(view.start), t_of(view.end), f.left, f.right);
    let (byte_scale, byte_unit) = scale::byte_unit_for(y_hi.abs().max(y_lo.abs()));
    let ys = Linear::new(y_lo / byte_scale, y_hi / byte_scale, f.bottom, f.top);
    let y_of = |v: f64| ys.map(v / byte_scale).clamp(f.top, f.bottom);

    // Grid and ticks.
    let xt = xs.ticks(6);
    let xstep = scale::nice_step(xs.d1 - xs.d0, 6);
    for &t in &xt {
        x_tick(
            &mut svg,
            xs.map(t),
            f.top,
            f.bottom,
            true,
            &scale::tick_label(t, xstep),
        );
    }
    let yt = ys.ticks(5);
    let ystep = scale::nice_step(ys.d1 - ys.d0, 5);
    for &v in &yt {
        let y = ys.map(v);
        svg.line(f.left, y, f.right, y, &format!(r#"stroke="{GRID}""#));
        svg.line(f.left - 4.0, y, f.left, y, &format!(r#"stroke="{AXIS}""#));
        svg.text(
            f.left - 7.0,
            y + 4.0,
            "end",
            r##"font-size="11" fill="#333333""##,
            &scale::tick_label(v, ystep),
        );
    }
    svg.text(
        (f.left + f.right) / 2.0,
        f.bottom + 34.0,
        "middle",
        r##"font-size="12" fill="#111111""##,
        &format!("time since the connection's first packet ({})", unit.name),
    );
    svg.vtext(
        16.0,
        (f.top + f.bottom) / 2.0,
        r##"font-size="12" fill="#111111""##,
        &format!("relative sequence number ({byte_unit})"),
    );

    // Gaps first, under the data. Where gaps cover much of the view, full fills would
    // paint it all one colour: the bands are then outlines, and a bar in the gap's
    // colour marks where the data stood still.
    let x_of = |t: Nanos| xs.map(t_of(t));
    let covered: Nanos = c
        .events
        .iter()
        .map(|e| (e.end.min(view.end) - e.start.max(view.start)).max(0))
        .sum();
    let crowded = covered as f64 > 0.25 * (view.end - view.start) as f64;
    let fill_opacity = if crowded { "0.045" } else { "0.16" };
    let mut label_end = f64::NEG_INFINITY;
    let mut number_end = f64::NEG_INFINITY;
    for (i, e) in c.events.iter().enumerate() {
        if e.end < view.start || e.start > view.end {
            continue;
        }
        let color = class_color(e.class);
        let x0 = x_of(e.start).max(f.left);
        let x1 = x_of(e.end).min(f.right);
        let (x0, w) = if x1 - x0 < 3.0 {
            let mid = (x0 + x1) / 2.0;
            (mid - 1.5, 3.0)
        } else {
            (x0, x1 - x0)
        };
        let tcp = e.class.is_tcp_stall();
        let class = match (g.kind, tcp) {
            (ViewKind::Whole, true) => "stall-marker",
            (ViewKind::Whole, false) => "gap-marker",
            (ViewKind::Zoom, true) => "stall-band",
            (ViewKind::Zoom, false) => "gap-band",
        };
        let anchor = stall_anchor(g.connection_number, i);
        let duration = scale::duration((e.end - e.start) as f64 / 1e9);
        svg.open_group(&format!(
            r#"class="{class}" data-class="{}" data-stall="{anchor}""#,
            e.class.name()
        ));
        let linked = i < g.linked_events;
        if linked {
            svg.raw(&format!(r##"<a href="#{anchor}">"##));
        }
        svg.title(&format!("gap {}: {} {duration}", i + 1, e.class.name()));
        let outline = if crowded {
            format!(r#" stroke="{color}" stroke-opacity="0.5" stroke-width="0.8""#)
        } else {
            String::new()
        };
        svg.rect(
            x0,
            f.top,
            w,
            f.bottom - f.top,
            &format!(r#"fill="{color}" fill-opacity="{fill_opacity}"{outline}"#),
        );
        svg.rect(x0, f.top - 6.0, w, 6.0, &format!(r#"fill="{color}""#));
        if e.sender == g.sender
            && let Some(level) = level_at(view, e.start)
        {
            let y = y_of(level as f64);
            svg.rect(x0, y - 2.5, w, 5.0, &format!(r#"fill="{color}""#));
        }
        if linked {
            svg.raw("</a>");
        }
        svg.close_group();
        let short = format!("{}", i + 1);
        let centre = x0 + w / 2.0;
        let name_width = text_width(e.class.name(), 9.0).max(text_width(&duration, 9.0));
        if w >= name_width + 4.0 && x0 >= label_end {
            let attrs = format!(r#"font-size="9" fill="{color}""#);
            svg.text(centre, f.top + 14.0, "middle", &attrs, e.class.name());
            svg.text(centre, f.top + 26.0, "middle", &attrs, &duration);
            label_end = x0 + w;
        }
        if centre - text_width(&short, 9.0) / 2.0 > number_end {
            svg.text(
                centre,
                f.top - 9.0,
                "middle",
                &format!(r#"font-size="9" fill="{color}""#),
                &short,
            );
            number_end = centre + text_width(&short, 9.0) / 2.0 + 2.0;
        }
    }

    // Window edge, ACK line, data segments.
    let mut window_d = String::new();
    let mut ack_d = String::new();
    let mut data_d = String::new();
    let mut retrans_d = String::new();
    let step = |d: &mut String, x: f64, y: f64| {
        if d.is_empty() {
            d.push_str(&format!("M{} {}", num(x), num(y)));
        } else {
            d.push_str(&format!("H{}V{}", num(x), num(y)));
        }
    };
    let bar = |d: &mut String, x: f64, y_lo: f64, y_hi: f64| {
        let (top, bottom) = if (y_lo - y_hi).abs() < 2.0 {
            (y_hi - 1.0, y_hi + 1.0)
        } else {
            (y_hi, y_lo)
        };
        d.push_str(&format!("M{} {}V{}", num(x), num(bottom), num(top)));
    };
    let decimated = match &view.content {
        ViewContent::Raw { data, acks } => {
            for a in acks {
                let x = x_of(a.time);
                step(&mut ack_d, x, y_of(a.ack as f64));
                step(&mut window_d, x, y_of(a.window_edge as f64));
            }
            for p in data {
                let x = x_of(p.time);
                let d = if p.retransmission {
                    &mut retrans_d
                } else {
                    &mut data_d
                };
                bar(d, x, y_of(p.lo as f64), y_of(p.hi as f64));
                if data.len() < 400 {
                    d.push_str(&format!("M{} {}h5", num(x - 2.5), num(y_of(p.hi as f64))));
                }
            }
            false
        }
        ViewContent::Columns(columns) => {
            let n = columns.len().max(1) as f64;
            for (k, col) in columns.iter().enumerate() {
                let x = f.left + (k as f64 + 0.5) / n * (f.right - f.left);
                if col.acks > 0 {
                    step(&mut ack_d, x, y_of(col.ack as f64));
                    step(&mut window_d, x, y_of(col.window_edge as f64));
                }
                if col.data_segments > 0 {
                    bar(
                        &mut data_d,
                        x,
                        y_of(col.data_lo as f64),
                        y_of(col.data_hi as f64),
                    );
                    if col.retransmissions > 0 {
                        bar(
                            &mut retrans_d,
                            x,
                            y_of(col.data_lo as f64),
                            y_of(col.data_hi as f64),
                        );
                    }
                }
            }
            true
        }
    };
    if window_fits {
        svg.path(
            &window_d,
            &format!(
                r#"fill="none" stroke="{WINDOW_COLOR}" stroke-width="1.2" stroke-dasharray="4 3""#
            ),
        );
    }
    svg.path(
        &ack_d,
        &format!(r#"fill="none" stroke="{ACK_COLOR}" stroke-width="1.4""#),
    );
    svg.path(
        &data_d,
        &format!(r#"fill="none" stroke="{DATA_COLOR}" stroke-width="1.6""#),
    );
    svg.path(
        &retrans_d,
        &format!(r#"fill="none" stroke="{RETRANSMISSION_COLOR}" stroke-width="2""#),
    );
    axes_frame(&mut svg, f);

    let mut note = format!("{} data segments, {} ACKs", view.data_segments, view.acks);
    if decimated {
        note.push_str(&format!(
            "; drawn as {} time columns (each: the seq range sent in it)",
            match &view.content {
                ViewContent::Columns(c) => c.len(),
                ViewContent::Raw { .. } => 0,
            }
        ));
    }
    if !g.window_scaled {
        note.push_str("; window scale unknown: raw windows");
    }
    svg.text(
        g.width - 10.0,
        g.height - 6.0,
        "end",
        r##"font-size="10" fill="#666666""##,
        &note,
    );
    svg.finish()
}

fn bytes_label(v: f64) -> String {
    let (s, u) = scale::byte_unit_for(v.abs());
    if u == "bytes" {
        format!("{} bytes", v.round() as i64)
    } else {
        format!("{:.1} {u}", v / s)
    }
}

/// A histogram on a logarithmic time axis, bars split by whether a stall was inside.
pub struct Histogram<'a> {
    pub histogram: &'a LogHistogram,
    pub title: String,
    pub x_label: String,
    pub plain_label: String,
    pub stalled_label: String,
    /// A vertical reference line: (seconds, label).
    pub marker: Option<(f64, String)>,
    pub width: f64,
    pub height: f64,
}

pub fn log_histogram(h: &Histogram<'_>) -> String {
    let mut svg = Svg::titled(h.width, h.height, &h.title);
    let entries = vec![
        (box_swatch(PLAIN_COLOR, 0.9), h.plain_label.clone()),
        (box_swatch(STALL_COLOR, 0.9), h.stalled_label.clone()),
    ];
    let legend_bottom = legend(&mut svg, &entries, 10.0, h.width - 10.0, 34.0);
    let f = Frame {
        left: 62.0,
        top: legend_bottom + 10.0,
        right: h.width - 34.0,
        bottom: h.height - 48.0,
    };
    let hist = h.histogram;
    if hist.count == 0 {
        axes_frame(&mut svg, f);
        svg.text(
            (f.left + f.right) / 2.0,
            (f.top + f.bottom) / 2.0,
            "middle",
            r##"fill="#666666""##,
            "nothing to count",
        );
        return svg.finish();
    }
    let xs = Log::decades(hist.min, hist.max.max(hist.min * 1.0001), f.left, f.right);
    let max_count = (0..LogHistogram::BINS)
        .map(|b| hist.plain[b] + hist.stalled[b])
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let ys = Linear::new(0.0, max_count * 1.1, f.bottom, f.top);
    let ystep = scale::nice_step(ys.d1, 5).max(1.0);
    for v in scale::nice_ticks(0.0, ys.d1, 5) {
        if v.fract() != 0.0 {
            continue;
        }
        let y = ys.map(v);
        svg.line(f.left, y, f.right, y, &format!(r#"stroke="{GRID}""#));
        svg.text(
            f.left - 6.0,
            y + 4.0,
            "end",
            r##"font-size="11" fill="#333333""##,
            &scale::tick_label(v, ystep),
        );
    }
    for t in xs.ticks() {
        x_tick(
            &mut svg,
            xs.map(t),
            f.top,
            f.bottom,
            true,
            &scale::decade_time_label(t),
        );
    }
    for b in 0..LogHistogram::BINS {
        let (plain, stalled) = (hist.plain[b], hist.stalled[b]);
        if plain + stalled == 0 {
            continue;
        }
        let (lo, hi) = LogHistogram::edges(b);
        let x0 = xs.map(lo) + 0.5;
        let w = (xs.map(hi) - xs.map(lo) - 1.0).max(1.5);
        let y_plain = ys.map(plain as f64);
        let y_all = ys.map((plain + stalled) as f64);
        let tip = format!(
            "{} to {}: {} {}, {} {}",
            scale::duration(lo),
            scale::duration(hi),
            plain,
            h.plain_label,
            stalled,
            h.stalled_label
        );
        svg.open_group(r#"class="histogram-bar""#);
        svg.title(&tip);
        if plain > 0 {
            svg.rect(
                x0,
                y_plain,
                w,
                f.bottom - y_plain,
                &format!(r#"fill="{PLAIN_COLOR}""#),
            );
        }
        if stalled > 0 {
            svg.rect(
                x0,
                y_all,
                w,
                y_plain - y_all,
                &format!(r#"fill="{STALL_COLOR}""#),
            );
        }
        svg.close_group();
        let total = plain + stalled;
        svg.text(
            x0 + w / 2.0,
            y_all - 3.0,
            "middle",
            r##"font-size="9" fill="#333333""##,
            &total.to_string(),
        );
    }
    if let Some((at, label)) = &h.marker
        && *at > 0.0
    {
        let x = xs.map(*at);
        if x >= f.left && x <= f.right {
            svg.line(
                x,
                f.top,
                x,
                f.bottom,
                r##"stroke="#555555" stroke-dasharray="3 3""##,
            );
            let anchor = if x > (f.left + f.right) / 2.0 {
                "end"
            } else {
                "start"
            };
            let dx = if anchor == "end" { -4.0 } else { 4.0 };
            svg.text(
                x + dx,
                (f.top + f.bottom) / 2.0,
                anchor,
                r##"font-size="10" fill="#333333""##,
                label,
            );
        }
    }
    axes_frame(&mut svg, f);
    svg.text(
        (f.left + f.right) / 2.0,
        f.bottom + 34.0,
        "middle",
        r##"font-size="12" fill="#111111""##,
        &h.x_label,
    );
    svg.vtext(
        16.0,
        (f.top + f.bottom) / 2.0,
        r##"font-size="12" fill="#111111""##,
        "count",
    );
    svg.finish()
}

/// Escaped text for HTML, shared with the page builders.
pub fn html(text: &str) -> String {
    escape(text)
}
