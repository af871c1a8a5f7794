//! The stall zoom: one stall drawn as a two-lane timeline, the sender above and the
//! receiver below. A bar along the sender's lane is the time its data was held; a bar
//! along the receiver's lane is the time it sat on the ACK (the delayed-ACK timer);
//! arrows are the packets, the three that make the stall labelled: the last data
//! before it, the delayed ACK, and the data it released.

use tcpstall_core::detect::{StallClass, StallEvent};
use tcpstall_core::diagnosis::ConnectionDiagnosis;
use tcpstall_core::segment::Nanos;

use crate::graphs::{ACK_COLOR, DATA_COLOR, class_color, x_tick};
use crate::scale::{self, Linear};
use crate::svg::{Svg, num, text_width};
use crate::trace::{Listing, ListingRow};

/// Colour of "the receiver sat on the ACK": apart from every gap class's colour.
pub const ACK_DELAY_COLOR: &str = "#6a3d9a";
/// Packets drawn one by one at most; the rest of a long listing is left out.
const MAX_ARROWS: usize = 60;

/// What the zoom draws.
pub struct StallZoom<'a> {
    pub connection: &'a ConnectionDiagnosis,
    pub event_index: usize,
    /// The stall's packets, when the capture was read again.
    pub listing: Option<&'a Listing>,
    pub title: String,
    pub width: f64,
    pub height: f64,
}

/// The time window: from shortly before the last data ahead of the gap to shortly
/// after the release, so the stall fills the picture.
pub fn window(e: &StallEvent) -> (Nanos, Nanos) {
    let duration = e.duration().max(1);
    let margin = (duration / 8).max(20_000);
    (e.start - margin, e.end + margin)
}

fn held_label(e: &StallEvent, sender: &str) -> String {
    let what = match e.class {
        StallClass::NagleDelayedAck => format!("{sender}'s data held by Nagle"),
        StallClass::DelayedAck => format!("{sender}'s data waiting for the ACK"),
        StallClass::AppThinkTime => format!("{sender} had nothing to send"),
        StallClass::ReceiverWindow => format!("{sender}'s data held by the closed window"),
        StallClass::RetransmissionTimeout => {
            format!("{sender} waited for its retransmission timer")
        }
        StallClass::Unexplained => format!("{sender} sent nothing (unexplained)"),
    };
    format!("{what}: {}", scale::duration(e.duration() as f64 / 1e9))
}

/// The stall of `z.event_index` as an SVG document.
pub fn stall_zoom(z: &StallZoom<'_>) -> String {
    let c = z.connection;
    let mut svg = Svg::titled(z.width, z.height, &z.title);
    let Some(e) = c.events.get(z.event_index) else {
        return svg.finish();
    };
    let sender_side = e.sender;
    let receiver_side = sender_side.other();
    let sender = c.role_of_side(sender_side).name();
    let receiver = c.role_of_side(receiver_side).name();
    let held_color = class_color(e.class);

    // Legend: what each mark means.
    let mut entries: Vec<(String, String)> =
        vec![(bar_swatch(held_color), format!("data held ({sender})"))];
    if e.ack_delay.is_some() {
        entries.push((
            bar_swatch(ACK_DELAY_COLOR),
            format!("ACK delayed ({receiver}'s timer)"),
        ));
    }
    entries.push((arrow_swatch(DATA_COLOR), "data".into()));
    entries.push((arrow_swatch(ACK_COLOR), "ACK".into()));
    let mut x = 10.0;
    for (swatch, label) in &entries {
        svg.raw(&swatch.replace("{x}", &num(x)).replace("{y}", "34"));
        svg.text(
            x + 22.0,
            38.0,
            "start",
            r##"font-size="11" fill="#222222""##,
            label,
        );
        x += 22.0 + text_width(label, 11.0) + 16.0;
    }

    let (t0, t1) = window(e);
    let left = 70.0;
    let right = z.width - 20.0;
    let sender_y = 96.0;
    let receiver_y = z.height - 96.0;
    let to_ms = |t: Nanos| (t - e.start) as f64 / 1e6;
    let xs = Linear::new(to_ms(t0), to_ms(t1), left, right);
    let x_of = |t: Nanos| xs.map(to_ms(t)).clamp(left, right);

    // Time axis: milliseconds from the last data before the gap.
    let step = scale::nice_step(xs.d1 - xs.d0, 6);
    for t in xs.ticks(6) {
        x_tick(
            &mut svg,
            xs.map(t),
            sender_y - 30.0,
            receiver_y + 40.0,
            true,
            &scale::tick_label(t, step),
        );
    }
    svg.text(
        (left + right) / 2.0,
        receiver_y + 74.0,
        "middle",
        r##"font-size="12" fill="#111111""##,
        "ms from the last data before the stall",
    );

    // The two lanes.
    for (y, role, side) in [
        (sender_y, sender, sender_side),
        (receiver_y, receiver, receiver_side),
    ] {
        svg.line(
            left,
            y,
            right,
            y,
            r##"stroke="#444444" stroke-width="1.5""##,
        );
        svg.text(
            left - 6.0,
            y + 4.0,
            "end",
            r##"font-size="12" font-weight="bold" fill="#222222""##,
            role,
        );
        svg.text(
            left - 6.0,
            y + 18.0,
            "end",
            r##"font-size="9" fill="#666666""##,
            &c.endpoint_of_side(side).ip().to_string(),
        );
    }

    // Data held: a bar along the sender's lane, above it.
    let (hx0, hx1) = (x_of(e.start), x_of(e.end));
    svg.open_group(&format!(
        r#"class="zoom-held" data-class="{}""#,
        e.class.name()
    ));
    svg.title(&held_label(e, sender));
    svg.rect(
        hx0,
        sender_y - 16.0,
        (hx1 - hx0).max(2.0),
        12.0,
        &format!(r#"fill="{held_color}" fill-opacity="0.85""#),
    );
    svg.close_group();
    let label = held_label(e, sender);
    let (lx, anchor) = fit_label(&label, 11.0, (hx0 + hx1) / 2.0, left, right);
    svg.text(
        lx,
        sender_y - 22.0,
        anchor,
        &format!(r#"font-size="11" font-weight="bold" fill="{held_color}""#),
        &label,
    );

    // ACK delayed: a bar along the receiver's lane, below it, from the data's arrival
    // (the ACK's time less its delay) to the ACK.
    if let (Some(ack_time), Some(delay)) = (e.ack_time, e.ack_delay) {
        let (ax0, ax1) = (x_of(ack_time - delay), x_of(ack_time));
        let timer = c
            .delayed_ack
            .as_ref()
            .map_or(String::new(), |p| format!(" ({})", p.reading.describe()));
        let label = format!(
            "ACK delayed {} by the {receiver}'s timer{timer}",
            scale::duration(delay as f64 / 1e9)
        );
        svg.open_group(r#"class="zoom-ack-delay""#);
        svg.title(&label);
        svg.rect(
            ax0,
            receiver_y + 4.0,
            (ax1 - ax0).max(2.0),
            12.0,
            &format!(r#"fill="{ACK_DELAY_COLOR}" fill-opacity="0.85""#),
        );
        svg.close_group();
        let (lx, anchor) = fit_label(&label, 11.0, (ax0 + ax1) / 2.0, left, right);
        svg.text(
            lx,
            receiver_y + 30.0,
            anchor,
            &format!(r#"font-size="11" font-weight="bold" fill="{ACK_DELAY_COLOR}""#),
            &label,
        );
    }

    // The packets: data down from the sender, ACKs up from the receiver.
    let ev = &e.evidence;
    let mut rows: Vec<&ListingRow> = z
        .listing
        .map(|l| l.rows().into_iter().flatten().collect())
        .unwrap_or_default();
    rows.retain(|r| r.time >= t0 && r.time <= t1);
    let key = |r: &ListingRow| {
        r.packet == ev.data_before_packet
            || Some(r.packet) == ev.ack_packet
            || r.packet == ev.data_after_packet
    };
    if rows.len() > MAX_ARROWS {
        let mut kept: Vec<&ListingRow> = rows.iter().copied().filter(|r| key(r)).collect();
        kept.extend(rows.iter().copied().filter(|r| !key(r)).take(MAX_ARROWS));
        rows = kept;
    }
    for r in &rows {
        let down = r.side == sender_side;
        let is_data = r.payload > 0;
        let color = if is_data { DATA_COLOR } else { ACK_COLOR };
        let x = x_of(r.time);
        let (y_from, y_to) = if down {
            (sender_y, receiver_y)
        } else {
            (receiver_y, sender_y)
        };
        let important = key(r);
        let width = if important { 2.2 } else { 1.2 };
        let opacity = if important { 1.0 } else { 0.55 };
        svg.open_group(&format!(
            r#"class="zoom-packet" data-packet="{}" opacity="{opacity}""#,
            r.packet
        ));
        svg.title(&packet_text(r, c, is_data));
        svg.line(
            x,
            y_from,
            x,
            y_to,
            &format!(r#"stroke="{color}" stroke-width="{width}""#),
        );
        let dir = if y_to > y_from { 1.0 } else { -1.0 };
        svg.raw(&format!(
            r#"<path d="M{} {}l-4 {}h8z" fill="{color}"/>"#,
            num(x),
            num(y_to),
            num(-dir * 8.0)
        ));
        svg.close_group();
    }
    // Labels of the three packets that make the stall, where they do not collide.
    let mut labels: Vec<(f64, f64, String, &str)> = Vec::new();
    for r in rows.iter().filter(|r| key(r)) {
        let x = x_of(r.time);
        let seq = format!(
            "seq {}:{} ({} bytes)",
            r.seq,
            r.seq + i64::from(r.payload),
            r.payload
        );
        let (text, y) = if r.packet == ev.data_before_packet {
            (format!("last data: {seq}"), sender_y + 18.0)
        } else if Some(r.packet) == ev.ack_packet {
            (
                format!("the delayed ACK: ack {}", r.ack.unwrap_or(0)),
                receiver_y - 10.0,
            )
        } else {
            (format!("released: {seq}"), sender_y + 34.0)
        };
        labels.push((
            x,
            y,
            text,
            if r.side == sender_side {
                DATA_COLOR
            } else {
                ACK_COLOR
            },
        ));
    }
    for (x, y, text, color) in labels {
        let anchor = if x > (left + right) / 2.0 {
            "end"
        } else {
            "start"
        };
        let dx = if anchor == "end" { -6.0 } else { 6.0 };
        svg.text(
            x + dx,
            y,
            anchor,
            &format!(r#"font-size="10" fill="{color}""#),
            &text,
        );
    }
    if rows.is_empty() {
        svg.text(
            (left + right) / 2.0,
            (sender_y + receiver_y) / 2.0,
            "middle",
            r##"font-size="11" fill="#666666""##,
            "packets not read again: the bars come from the analysis",
        );
    }
    svg.finish()
}

/// Keeps a label inside the plot: centred where it fits, else against an edge.
fn fit_label(text: &str, size: f64, centre: f64, left: f64, right: f64) -> (f64, &'static str) {
    let half = text_width(text, size) / 2.0;
    if centre - half < left {
        (left, "start")
    } else if centre + half > right {
        (right, "end")
    } else {
        (centre, "middle")
    }
}

fn packet_text(r: &ListingRow, c: &ConnectionDiagnosis, is_data: bool) -> String {
    let from = c.role_of_side(r.side).name();
    if is_data {
        format!(
            "seq {}:{} ({} bytes) from the {from}",
            r.seq,
            r.seq + i64::from(r.payload),
            r.payload
        )
    } else {
        format!(
            "ACK {} from the {from}",
            r.ack.map_or("-".into(), |a| a.to_string())
        )
    }
}

fn bar_swatch(color: &str) -> String {
    format!(
        r#"<rect x="{{x}}" y="{{y}}" width="18" height="10" transform="translate(0 -5)" fill="{color}" fill-opacity="0.85"/>"#
    )
}

fn arrow_swatch(color: &str) -> String {
    format!(
        r#"<g transform="translate(0 0)"><path d="M{{x}} {{y}}h14" stroke="{color}" stroke-width="2"/><path d="M{{x}} {{y}}m18 0l-6 -4v8z" fill="{color}"/></g>"#
    )
}
