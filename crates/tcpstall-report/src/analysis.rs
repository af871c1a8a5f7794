//! `tcpstall analyze --html FILE` and `--graphs DIR`: the summary table, each stalled
//! connection's graphs, and every listed stall's packets.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use tcpstall_core::analyze::Analysis;
use tcpstall_core::detect::{Pattern, StallEvent};
use tcpstall_core::diagnosis::{ConnectionDiagnosis, Role};
use tcpstall_core::output::{self, OutputDir};
use tcpstall_core::report::text;
use tcpstall_core::segment::{Nanos, secs};

use crate::graphs::{self, Histogram, SeqGraph, ViewKind, stall_anchor};
use crate::page::page;
use crate::scale;
use crate::svg::escape;
use crate::table::{self, verdict_class};
use crate::trace::{self, ConnectionTrace, Listing, ListingRow, TraceConfig};
use crate::zoom::{self, StallZoom};
use crate::{ReportError, png, progress};

/// Gaps listed per connection in the HTML at most.
const MAX_EVENT_ROWS: usize = 300;
/// Connections shown with their graphs before the table of every connection.
const WORST_FIRST: usize = 5;

/// The pictures of one connection.
pub struct ConnectionGraphs {
    /// Index in the analysis' connections; its number in the report is this plus one.
    pub connection: usize,
    pub whole: String,
    pub zoom: Option<String>,
    /// The sequence graph over one second around that stall (connections over 2 s).
    pub one_second: Option<String>,
    pub histogram: String,
    pub histogram_kind: &'static str,
    pub trace: ConnectionTrace,
}

impl ConnectionGraphs {
    pub fn number(&self) -> usize {
        self.connection + 1
    }
}

/// Draws the graphs of each traced connection.
pub fn draw(analysis: &Analysis, traces: Vec<ConnectionTrace>) -> Vec<ConnectionGraphs> {
    traces
        .into_iter()
        .filter(|t| t.connection < analysis.connections.len())
        .map(|trace| {
            let c = &analysis.connections[trace.connection];
            let number = trace.connection + 1;
            let direction = format!(
                "{} → {}",
                c.endpoint_of_side(trace.sender),
                c.endpoint_of_side(trace.sender.other())
            );
            let whole = graphs::time_sequence(&SeqGraph {
                connection: c,
                connection_number: number,
                view: &trace.overview,
                sender: trace.sender,
                kind: ViewKind::Whole,
                title: format!("#{number} whole connection: {direction}"),
                width: 640.0,
                height: 400.0,
                window_scaled: trace.window_scaled,
                linked_events: MAX_EVENT_ROWS,
            });
            let zoom = trace.representative.and_then(|r| {
                let e = c.events.get(r)?;
                Some(zoom::stall_zoom(&StallZoom {
                    connection: c,
                    event_index: r,
                    listing: trace.listings.iter().find(|l| l.event == r),
                    title: format!(
                        "#{number} zoom on gap {}: {} {}",
                        r + 1,
                        e.class.name(),
                        scale::duration(e.duration() as f64 / 1e9)
                    ),
                    width: 640.0,
                    height: 330.0,
                }))
            });
            let one_second = trace.one_second.as_ref().map(|view| {
                graphs::time_sequence(&SeqGraph {
                    connection: c,
                    connection_number: number,
                    view,
                    sender: trace.sender,
                    kind: ViewKind::Zoom,
                    title: format!("#{number} one second around the zoomed gap: {direction}"),
                    width: 640.0,
                    height: 400.0,
                    window_scaled: trace.window_scaled,
                    linked_events: MAX_EVENT_ROWS,
                })
            });
            let use_round_trips = trace.round_trips.count >= 3 || trace.data_gaps.count < 3;
            let (hist, kind, x_label) = if use_round_trips {
                (
                    &trace.round_trips,
                    "round trips",
                    "request → response round trip (log scale)",
                )
            } else {
                (
                    &trace.data_gaps,
                    "gaps between data segments",
                    "gap between consecutive data segments (log scale)",
                )
            };
            let marker = c.delayed_ack.as_ref().map(|p| {
                (
                    p.reading.median as f64 / 1e9,
                    format!(
                        "median ACK delay {}",
                        scale::duration(p.reading.median as f64 / 1e9)
                    ),
                )
            });
            let histogram = graphs::log_histogram(&Histogram {
                histogram: hist,
                title: format!("#{number} {kind}: {} counted", hist.count),
                x_label: x_label.to_string(),
                plain_label: "no stall inside".to_string(),
                stalled_label: "a TCP stall inside".to_string(),
                marker,
                width: 640.0,
                height: 320.0,
            });
            ConnectionGraphs {
                connection: trace.connection,
                whole,
                zoom,
                one_second,
                histogram,
                histogram_kind: kind,
                trace,
            }
        })
        .collect()
}

fn pattern_text(p: Pattern) -> String {
    match p {
        Pattern::WriteWriteRead => {
            "write-write-read: each message written in pieces, then a wait for the reply".into()
        }
        Pattern::BulkOddTail { full_segments } => format!(
            "bulk-odd-tail: {full_segments} full segments (odd) and a partial tail, then a wait for the reply"
        ),
        Pattern::SmallWriteBehindUnacked => "small writes behind unacknowledged data".into(),
    }
}

fn facts(c: &ConnectionDiagnosis, out: &mut String) {
    out.push_str(r#"<dl class="facts">"#);
    let _ = write!(
        out,
        r#"<dt>verdict</dt><dd class="{}">{}</dd>"#,
        verdict_class(c),
        escape(c.verdict.describe())
    );
    if c.stall_count > 0 {
        let _ = write!(
            out,
            "<dt>lost</dt><dd>{:.3} s of {:.3} s ({:.1}%) in {} stalls</dd>",
            secs(c.time_lost),
            secs(c.duration()),
            100.0 * c.time_lost_share(),
            c.stall_count
        );
    } else {
        let _ = write!(
            out,
            "<dt>duration</dt><dd>{:.3} s, {} packets</dd>",
            secs(c.duration()),
            c.packets
        );
    }
    if let Some(holder) = c.holder {
        let side = if holder == Role::Client {
            c.client
        } else {
            c.server
        };
        let _ = write!(
            out,
            "<dt>held by</dt><dd>{} {}: its Nagle algorithm held small segments</dd>",
            holder.name(),
            side
        );
    }
    if let Some(p) = &c.delayed_ack {
        let _ = write!(
            out,
            "<dt>delayed by</dt><dd>{} {}: ACKs held {} median ({} to {}, {} samples): {}</dd>",
            p.role.name(),
            p.endpoint,
            scale::duration(p.reading.median as f64 / 1e9),
            scale::duration(p.reading.min as f64 / 1e9),
            scale::duration(p.reading.max as f64 / 1e9),
            p.samples,
            escape(&p.reading.describe())
        );
    }
    if let Some(p) = c.pattern {
        let _ = write!(out, "<dt>pattern</dt><dd>{}</dd>", escape(&pattern_text(p)));
    }
    out.push_str("</dl>");
    if c.fixes().next().is_some() {
        out.push_str(r#"<h3>Fixes, best first</h3><ol class="fixes">"#);
        for f in c.fixes() {
            let _ = write!(
                out,
                "<li>{} {}: <b>{}</b>; saves {:.3} s ({}); {}</li>",
                f.role.name(),
                f.endpoint,
                escape(&f.action.to_string()),
                secs(f.saves),
                text::fix_gain(f, c.duration()),
                escape(f.note)
            );
        }
        out.push_str("</ol>");
    }
}

fn event_summary(c: &ConnectionDiagnosis, i: usize, e: &StallEvent) -> String {
    let mut s = format!(
        "#{} {} {} at {:.6} s: {} bytes from the {}",
        i + 1,
        e.class.name(),
        scale::duration(e.duration() as f64 / 1e9),
        secs(e.start - c.first_time),
        e.held_bytes,
        c.role_of_side(e.sender).name()
    );
    if let Some(d) = e.ack_delay {
        let who = e
            .delayer
            .map_or("the peer", |side| c.role_of_side(side).name());
        let _ = write!(
            s,
            "; the {who} delayed its ACK {}",
            scale::duration(d as f64 / 1e9)
        );
    }
    if let Some(idle) = e.idle {
        let _ = write!(
            s,
            "; the sender was idle {}",
            scale::duration(idle as f64 / 1e9)
        );
    }
    if e.evidence.tsecr_echoes_ack == Some(true) {
        s.push_str("; TSecr proves the data left after the ACK");
    }
    let _ = write!(
        s,
        " (packets {} .. {}{})",
        e.evidence.data_before_packet,
        e.evidence
            .ack_packet
            .map_or(String::new(), |a| format!(" .. ack {a}")),
        if e.evidence.ack_packet.is_some() {
            format!(" .. {}", e.evidence.data_after_packet)
        } else {
            format!("{}", e.evidence.data_after_packet)
        }
    );
    s.replace(" ..  .. ", " .. ").replace(" ..0", " .. 0")
}

fn listing_table(c: &ConnectionDiagnosis, e: &StallEvent, listing: &Listing, out: &mut String) {
    out.push_str(r#"<table class="packets"><thead><tr><th class="num">packet</th><th class="num">time s</th><th class="num">Δ ms</th><th>from</th><th>flags</th><th class="num">seq</th><th class="num">ack</th><th class="num">win</th><th class="num">len</th><th>TSval/TSecr</th><th>what it is</th></tr></thead><tbody>"#);
    let mut previous: Option<Nanos> = None;
    for row in listing.rows() {
        let Some(r) = row else {
            let _ = write!(
                out,
                r#"<tr class="gap"><td colspan="11">… {} packets of this connection not shown …</td></tr>"#,
                listing.omitted
            );
            previous = None;
            continue;
        };
        let (class, what) = row_role(c, e, r);
        let delta = previous.map_or(String::new(), |p| {
            format!("{:.3}", (r.time - p) as f64 / 1e6)
        });
        previous = Some(r.time);
        let _ = write!(
            out,
            r#"<tr class="{class}"><td class="num">{}</td><td class="num">{:.6}</td><td class="num">{delta}</td><td>{} {}</td><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td>{}</td><td>{}</td></tr>"#,
            r.packet,
            secs(r.time - c.first_time),
            c.role_of_side(r.side).name(),
            c.endpoint_of_side(r.side),
            r.flags,
            r.seq,
            r.ack.map_or("-".into(), |a| a.to_string()),
            r.window,
            r.payload,
            r.timestamps.map_or("-".into(), |(v, e)| format!("{v}/{e}")),
            escape(&what)
        );
    }
    out.push_str("</tbody></table>");
}

fn row_role(c: &ConnectionDiagnosis, e: &StallEvent, r: &ListingRow) -> (&'static str, String) {
    let ev = &e.evidence;
    if r.packet == ev.data_before_packet {
        ("before", "last data before the gap".into())
    } else if Some(r.packet) == ev.ack_packet {
        let delay = e.ack_delay.map_or(String::new(), |d| {
            format!(
                ", held {} by the {}",
                scale::duration(d as f64 / 1e9),
                c.role_of_side(r.side).name()
            )
        });
        ("ack", format!("the ACK that released the data{delay}"))
    } else if r.packet == ev.data_after_packet {
        let reaction = ev.reaction.map_or(String::new(), |d| {
            format!(", {} after the ACK", scale::duration(d as f64 / 1e9))
        });
        (
            "after",
            format!(
                "data after the gap: {} bytes released{reaction}",
                e.held_bytes
            ),
        )
    } else {
        ("", String::new())
    }
}

fn connection_section(analysis: &Analysis, g: &ConnectionGraphs, out: &mut String) {
    let c = &analysis.connections[g.connection];
    let n = g.number();
    let guess = if c.handshake_seen {
        ""
    } else {
        " (no handshake captured: roles guessed)"
    };
    let _ = write!(
        out,
        r#"<section class="connection" id="conn-{n}"><h2>#{n} {} → {}{guess}</h2>"#,
        c.client, c.server
    );
    facts(c, out);
    let sender = c.role_of_side(g.trace.sender).name();
    out.push_str(r#"<div class="figures">"#);
    let _ = write!(
        out,
        "<figure>{}<figcaption>The {sender}'s data (blue: each segment's sequence range, Wireshark's relative numbers), the ACKs that came back (green) and the receive window's right edge (dashed), over the whole connection. Each gap is a band in its class's colour, numbered on top, with a bar where the data stood still; click one for its packets.</figcaption></figure>",
        g.whole
    );
    if let Some(zoom) = &g.zoom {
        let _ = write!(
            out,
            "<figure>{zoom}<figcaption>One gap of median length, packet by packet: the {sender} above, its peer below, arrows for the packets. The bar on the {sender}'s line is the time its data was held; the purple bar on the peer's line is the time the peer sat on its ACK (its delayed-ACK timer). The ACK's arrival releases the data.</figcaption></figure>"
        );
    }
    if let Some(one_second) = &g.one_second {
        let _ = write!(
            out,
            "<figure>{one_second}<figcaption>The same graph over one second around that gap: where the whole connection looks smooth, the {sender}'s data stands still in every band until an ACK lets it go.</figcaption></figure>"
        );
    }
    let _ = write!(
        out,
        "<figure>{}<figcaption>Histogram of {} on a log scale{}: red bars are intervals that held a TCP stall. Two modes, one fast and one at the delayed-ACK timer, are the signature.</figcaption></figure>",
        g.histogram,
        g.histogram_kind,
        if g.histogram_kind == "round trips" {
            " (a round trip runs from a request's first byte to the end of its response)"
        } else {
            ""
        }
    );
    out.push_str("</div>");

    let _ = write!(
        out,
        "<h3>Gaps ({} shown; the listing opens for the stall the zoom shows)</h3>",
        c.events.len().min(MAX_EVENT_ROWS)
    );
    for (i, e) in c.events.iter().enumerate().take(MAX_EVENT_ROWS) {
        let listing = g.trace.listings.iter().find(|l| l.event == i);
        let open = if g.trace.representative == Some(i) {
            " open"
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<details id="{}" data-class="{}"{open}><summary>{}</summary>"#,
            stall_anchor(n, i),
            e.class.name(),
            escape(&event_summary(c, i, e))
        );
        match listing {
            Some(l) if !l.head.is_empty() => listing_table(c, e, l, out),
            Some(_) => out.push_str(r#"<p class="note">No packet of this connection was found in the second reading of the capture.</p>"#),
            None => out.push_str(r#"<p class="note">Packets are listed for the first stalls only; the packet numbers above find this one in Wireshark or tcpdump.</p>"#),
        }
        out.push_str("</details>");
    }
    if c.events.len() > MAX_EVENT_ROWS {
        let _ = write!(
            out,
            r#"<p class="note">{} more gaps are in the JSON report (tcpstall analyze --json).</p>"#,
            c.events.len() - MAX_EVENT_ROWS
        );
    }
    out.push_str("</section>");
}

/// The whole HTML report. `note` explains graphs that could not be drawn.
pub fn html(analysis: &Analysis, graphs: &[ConnectionGraphs], note: Option<&str>) -> String {
    let input = &analysis.input;
    let origin = input.first_time.unwrap_or(0);
    let span = input.last_time.unwrap_or(origin) - origin;
    // The totals count every connection, the listed ones and those beyond the listing
    // limit (MAX_LISTED_CONNECTIONS), as the text and JSON reports do.
    let stalls = analysis.total_stalls();
    let total = analysis.total_connections();
    let all_with_stalls = analysis.connections_with_stalls();
    let with_stalls = analysis
        .connections
        .iter()
        .filter(|c| c.stall_count > 0)
        .count();
    let lost: Nanos = analysis.total_time_lost();
    let mut body = String::with_capacity(256 * 1024);
    let _ = write!(
        body,
        r#"<header><h1>tcpstall report: {}</h1><p>{}, {} packets, {} TCP segments, {:.3} s. <b>{} connection{}, {} with stalls: {} stall{}, {:.3} s lost.</b></p>"#,
        escape(&input.source),
        input.read.format.map_or("capture", |f| f.name()),
        input.read.packets,
        input.tcp_segments,
        secs(span),
        total,
        if total == 1 { "" } else { "s" },
        all_with_stalls,
        stalls,
        if stalls == 1 { "" } else { "s" },
        secs(lost)
    );
    if let Some(group) = tcpstall_core::report::groups::largest(analysis) {
        let _ = write!(
            body,
            r#"<p class="group"><b>{}</b></p>"#,
            escape(&group.describe(analysis.total_time_lost()))
        );
    }
    for w in &input.warnings {
        let _ = write!(body, r#"<p class="note">warning: {}</p>"#, escape(w));
    }
    if let Some(note) = note {
        let _ = write!(body, r#"<p class="note">{}</p>"#, escape(note));
    }
    body.push_str("</header>");
    let drawn: HashSet<usize> = graphs.iter().map(|g| g.number()).collect();
    let drawn_stalled = graphs
        .iter()
        .filter(|g| analysis.connections[g.connection].stall_count > 0)
        .count();
    let (first, rest) = graphs.split_at(graphs.len().min(WORST_FIRST));
    if !first.is_empty() {
        let _ = write!(
            body,
            r#"<nav class="worst"><b>Worst first:</b> {}</nav>"#,
            first
                .iter()
                .map(|g| {
                    let c = &analysis.connections[g.connection];
                    format!(
                        r##"<a href="#conn-{n}">#{n} {} → {}</a> ({})"##,
                        c.client,
                        c.server,
                        if c.stall_count > 0 {
                            format!("{} stalls, {:.3} s lost", c.stall_count, secs(c.time_lost))
                        } else {
                            format!("{} gaps", c.gap_count())
                        },
                        n = g.number()
                    )
                })
                .collect::<Vec<_>>()
                .join(" · ")
        );
    } else if analysis.connections.iter().all(|c| c.events.is_empty()) {
        body.push_str(r#"<p class="verdict-ok">No connection has a gap worth drawing.</p>"#);
    }
    for g in first {
        connection_section(analysis, g, &mut body);
    }
    let listed = analysis.connections.len() as u64;
    if listed < total {
        let _ = write!(
            body,
            r#"<section id="connections"><h2>Connections: the {listed} worst of {total} listed</h2>"#
        );
    } else {
        let _ = write!(
            body,
            r#"<section id="connections"><h2>Every connection ({total})</h2>"#
        );
    }
    table::connections_table(analysis, &drawn, &mut body);
    if with_stalls > drawn_stalled {
        let _ = write!(
            body,
            r#"<p class="note">Graphs are drawn for the {drawn_stalled} worst connections with stalls (their numbers link to them); the other {} are in the table only.</p>"#,
            with_stalls - drawn_stalled
        );
    }
    body.push_str("</section>");
    if !rest.is_empty() {
        body.push_str(r#"<h2 id="more">More connections with graphs</h2>"#);
    }
    for g in rest {
        connection_section(analysis, g, &mut body);
    }
    let expected: usize = graphs
        .iter()
        .map(|g| {
            analysis.connections[g.connection]
                .events
                .iter()
                .filter(|e| e.class.is_tcp_stall())
                .count()
        })
        .sum();
    page(
        &format!("tcpstall report: {}", input.source),
        &body,
        expected,
    )
}

/// What a report run wrote.
#[derive(Debug, Default)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub connections_drawn: usize,
}

/// Writes `name` in `dir` whole, or leaves what was there (`tcpstall_core::output`).
fn write(
    dir: &OutputDir,
    name: &str,
    bytes: &[u8],
    written: &mut Written,
) -> Result<(), ReportError> {
    let path = dir.path().join(name);
    dir.write(name.as_ref(), bytes)
        .map_err(|source| ReportError::Write {
            path: path.display().to_string(),
            source,
        })?;
    written.files.push(path);
    Ok(())
}

/// Reads `capture` a second time for the graphs, then writes the HTML report and/or the
/// SVG and PNG files. Without a capture file (standard input not kept), the HTML report
/// has the tables and says why the graphs are missing.
pub fn write_reports(
    analysis: &Analysis,
    capture: Option<&Path>,
    html_path: Option<&Path>,
    graphs_dir: Option<&Path>,
    config: &TraceConfig,
) -> Result<Written, ReportError> {
    let mut written = Written::default();
    let selected = trace::select_connections(analysis, config.max_connections);
    let (traces, note) = match capture {
        Some(path) if !selected.is_empty() => {
            let file = File::open(path)
                .map_err(|e| ReportError::SecondPass(format!("{}: {e}", path.display())))?;
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let input: Box<dyn Read + Send> = Box::new(progress::reader(file, len, "drawing"));
            (trace::collect(input, analysis, &selected, config)?, None)
        }
        Some(_) => (Vec::new(), None),
        None => (
            Vec::new(),
            Some("Graphs need the capture as a file: it is read a second time to draw them."),
        ),
    };
    let graphs = draw(analysis, traces);
    written.connections_drawn = graphs.len();
    if let Some(dir) = graphs_dir {
        // Created if missing; never a link (see `OutputDir::create`).
        let dir = OutputDir::create(dir).map_err(|source| ReportError::Write {
            path: dir.display().to_string(),
            source,
        })?;
        for g in &graphs {
            let n = g.number();
            let mut pictures = vec![(format!("conn{n}-sequence"), &g.whole)];
            if let Some(zoom) = &g.zoom {
                pictures.push((format!("conn{n}-zoom"), zoom));
            }
            if let Some(one_second) = &g.one_second {
                pictures.push((format!("conn{n}-one-second"), one_second));
            }
            pictures.push((format!("conn{n}-round-trips"), &g.histogram));
            for (name, svg) in pictures {
                write(&dir, &format!("{name}.svg"), svg.as_bytes(), &mut written)?;
                let png = png::svg_to_png(svg, &name, 1.5)?;
                write(&dir, &format!("{name}.png"), &png, &mut written)?;
            }
        }
    }
    if let Some(path) = html_path {
        let page = html(analysis, &graphs, note);
        output::write(path, page.as_bytes()).map_err(|source| ReportError::Write {
            path: path.display().to_string(),
            source,
        })?;
        written.files.push(path.to_path_buf());
    }
    Ok(written)
}
