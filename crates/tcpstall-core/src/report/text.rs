//! The readable summary: worst connections first, each with its verdict, the evidence
//! in one line per actor, and the fixes ranked with what they would save.

use std::fmt::Write;

use crate::analyze::Analysis;
use crate::detect::{Confidence, Pattern, StallClass, StallEvent};
use crate::diagnosis::{ConnectionDiagnosis, DirectionDiagnosis, Fix, Role};
use crate::escape::escaped;
use crate::report::json::speedup;
use crate::segment::{Nanos, millis, secs};

/// What the text report shows.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextOptions {
    /// List every gap of every connection shown.
    pub stalls: bool,
    /// Also show connections with no gap at all.
    pub all: bool,
    /// Show at most this many connections in detail, the most severe; `None`: all.
    pub top: Option<usize>,
    /// Show the scenario inferred from each stalled connection and its simulation.
    pub explain: bool,
}

pub fn render(analysis: &Analysis, options: TextOptions) -> String {
    let mut out = String::new();
    let input = &analysis.input;
    let origin = input.first_time.unwrap_or(0);
    let span = input.last_time.unwrap_or(origin) - origin;
    let format = input.read.format.map_or("capture", |f| f.name());
    let format = match input.read.compression {
        Some(compression) => format!("{format} ({})", compression.name()),
        None => format.to_string(),
    };
    let _ = writeln!(
        out,
        "{}: {format}, {} packets, {} TCP segments, {:.3} s",
        escaped(&input.source),
        input.read.packets,
        input.tcp_segments,
        secs(span)
    );
    if input.fragments.datagrams > 0 {
        let _ = writeln!(
            out,
            "joined {} IP fragments into {} datagrams",
            input.fragments.reassembled_fragments, input.fragments.datagrams
        );
    }
    let skipped = input.skipped.total();
    if skipped > 0 {
        let reasons: Vec<String> = input
            .skipped
            .by_reason
            .iter()
            .map(|(r, n)| format!("{n} {}", r.describe()))
            .collect();
        let _ = writeln!(out, "skipped {skipped} packets: {}", reasons.join(", "));
    }
    if input.filtered_out > 0 {
        let _ = writeln!(out, "filtered out {} TCP segments", input.filtered_out);
    }
    if input.duplicates > 0 {
        let _ = writeln!(
            out,
            "ignored {} duplicate packets (captured more than once)",
            input.duplicates
        );
    }
    // The warnings go to standard error (the command prints them), and into the JSON.
    if input.file_duplicates > 0 {
        let _ = writeln!(
            out,
            "left out {} packets another file holds too (same time, same bytes)",
            input.file_duplicates
        );
    }
    if input.capture_points.len() > 1 {
        let _ = writeln!(
            out,
            "the files saw the same connections at {} capture points, each analysed on its own: {}; a connection seen at several is listed once for each",
            input.capture_points.len(),
            input.capture_points.join(", ")
        );
    }

    if input.late_segments > 0 {
        let _ = writeln!(
            out,
            "counted {} segment{} that arrived just after {} connection closed",
            input.late_segments,
            plural(input.late_segments as usize),
            if input.late_segments == 1 {
                "its"
            } else {
                "their"
            }
        );
    }
    if input.connections_ended_idle > 0 {
        let _ = writeln!(
            out,
            "ended {} connections as idle (silent for {} s, or too many open at once)",
            input.connections_ended_idle,
            crate::flow::IDLE_TIMEOUT / crate::segment::NANOS_PER_SEC
        );
    }
    let total_connections = analysis.total_connections() as usize;
    let with_stalls = analysis.connections_with_stalls();
    let stalls = analysis.total_stalls() as usize;
    let lost: Nanos = analysis.total_time_lost();
    let points = analysis.per_capture_point();
    if points.is_empty() {
        let _ = writeln!(
            out,
            "{} connection{}, {} with stalls: {} stall{}, {:.3} s lost",
            total_connections,
            plural(total_connections),
            with_stalls,
            stalls,
            plural(stalls),
            secs(lost)
        );
    } else {
        // One stall seen at two points is one stall: the totals are given per point,
        // never summed over the points.
        let _ = writeln!(out, "at each capture point (not added up):");
        for p in &points {
            let _ = writeln!(
                out,
                "  {}: {} connection{}, {} with stalls: {} stall{}, {:.3} s lost",
                escaped(&p.label),
                p.connections,
                plural(p.connections as usize),
                p.connections_with_stalls,
                p.stalls,
                plural(p.stalls as usize),
                secs(p.time_lost)
            );
        }
    }
    // Many connections stalling the same way: that is the finding, before any one of them.
    if let Some(group) = super::groups::largest(analysis) {
        let _ = writeln!(out, "\n{}", group.describe(lost));
    }

    let mut quiet = 0;
    let mut beyond_top = 0;
    let mut shown: Vec<&ConnectionDiagnosis> = Vec::new();
    let mut numbers: Vec<usize> = Vec::new();
    for (i, c) in analysis.connections.iter().enumerate() {
        if c.gap_count() == 0 && !options.all {
            quiet += 1;
            continue;
        }
        if options.top.is_some_and(|top| shown.len() >= top) {
            beyond_top += 1;
            continue;
        }
        shown.push(c);
        numbers.push(i + 1);
    }
    super::worst::render(&mut out, &shown);
    for (c, number) in shown.into_iter().zip(numbers) {
        out.push('\n');
        render_connection(&mut out, c, origin, options);
        if options.explain {
            render_inferred(&mut out, c, &input.source, number);
        }
    }
    if beyond_top > 0 {
        // With --all, connections without gaps are among those shown, and beyond.
        let _ = writeln!(
            out,
            "\n{beyond_top} more connection{}{}, less severe, not shown (--top 0 shows them)",
            plural(beyond_top),
            if options.all { "" } else { " with gaps" }
        );
    }
    if quiet > 0 {
        let _ = writeln!(
            out,
            "\n{quiet} connection{} without any gap over {:.0} ms (--all lists them)",
            plural(quiet),
            millis(analysis.min_gap)
        );
    }
    let unlisted = &analysis.unlisted;
    if unlisted.connections > 0 {
        let _ = writeln!(
            out,
            "\n{} less severe connections not listed ({} with stalls: {} stalls, {:.3} s lost; {} packets); they are in the totals above",
            unlisted.connections,
            unlisted.connections_with_stalls,
            unlisted.stalls,
            secs(unlisted.time_lost),
            unlisted.packets
        );
    }
    out
}

fn render_connection(
    out: &mut String,
    c: &ConnectionDiagnosis,
    origin: Nanos,
    options: TextOptions,
) {
    let guess = if c.handshake_seen {
        ""
    } else {
        " (no handshake captured: roles guessed)"
    };
    let _ = writeln!(out, "{} -> {}{guess}", c.client, c.server);
    if let Some(point) = &c.capture_point {
        let _ = writeln!(out, "  seen at:    {point}");
    }
    let _ = writeln!(out, "  verdict:    {}", c.verdict.describe());
    let duration = c.duration();
    if c.stall_count > 0 {
        let _ = writeln!(
            out,
            "  lost:       {:.3} s of {:.3} s ({:.1}%) in {} stall{}",
            secs(c.time_lost),
            secs(duration),
            100.0 * c.time_lost_share(),
            c.stall_count,
            plural(c.stall_count)
        );
    } else {
        let _ = writeln!(
            out,
            "  duration:   {:.3} s, {} packets",
            secs(duration),
            c.packets
        );
    }
    let both_ways = c.directions.len() > 1;
    for direction in &c.directions {
        let indent = if both_ways {
            let _ = writeln!(
                out,
                "  {} -> {}: {} stall{}, {:.3} s",
                direction.holder.name(),
                direction.delayer.name(),
                direction.stall_count,
                plural(direction.stall_count),
                secs(direction.time_lost)
            );
            "    "
        } else {
            "  "
        };
        render_direction(out, c, direction, indent);
    }
    if c.stall_count > 0 {
        let levels: Vec<String> = c
            .confidence_counts()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(level, n)| format!("{n} {}", confidence_description(level)))
            .collect();
        if !levels.is_empty() {
            let _ = writeln!(out, "  evidence:   {}", levels.join(", "));
        }
    }
    let others: Vec<String> = c
        .class_counts()
        .into_iter()
        .filter(|(class, _)| !class.is_tcp_stall())
        .map(|(class, (n, total))| format!("{n} {} ({:.3} s)", class.name(), secs(total)))
        .collect();
    if !others.is_empty() {
        let _ = writeln!(out, "  other gaps: {}", others.join(", "));
    }
    let _ = writeln!(
        out,
        "  path:       MSS client {} ({}), server {} ({}); round trip from capture point to client {}, to server {}",
        c.client_mss.0,
        c.client_mss.1.name(),
        c.server_mss.0,
        c.server_mss.1.name(),
        rtt(c.client_path_rtt),
        rtt(c.server_path_rtt)
    );
    if c.fixes().next().is_some() {
        let _ = writeln!(out, "  fixes, best first:");
        for (i, fix) in c.fixes().enumerate() {
            let how = fix_gain(fix, duration);
            let _ = writeln!(
                out,
                "    {}. {} {}: {}\n       saves {:.3} s ({how}); {}",
                i + 1,
                fix.role.name(),
                fix.endpoint,
                fix.action,
                secs(fix.saves),
                fix.note
            );
        }
    }
    let unlisted: u64 = c.unlisted.iter().map(|(n, _)| n).sum();
    if unlisted > 0 {
        let _ = writeln!(
            out,
            "  listed:     the first gaps of each class; {unlisted} more are counted above but not listed"
        );
    }
    if options.stalls && !c.events.is_empty() {
        let _ = writeln!(
            out,
            "  {:>4} {:>10} {:<22} {:>9} {:>10} {:>8} {:<8} {:<7} packets",
            "#", "start s", "class", "gap ms", "ack ms", "bytes", "sender", "conf."
        );
        for (i, e) in c.events.iter().enumerate() {
            render_event(out, c, e, i + 1, origin);
        }
    }
}

/// `--explain`: the scenario inferred from the connection, and what its simulation gives
/// with each fix.
/// A fix's gain as a reader sees it: simulated on the connection's inferred scenario,
/// with the share still stalling, or an estimate from the time lost.
pub fn fix_gain(fix: &Fix, duration: Nanos) -> String {
    match fix.predicted {
        Some(p) if p.stalled_share > 0.0 => format!(
            "{:.1}x faster, simulated; {:.0}% of transactions still stall",
            p.speedup,
            100.0 * p.stalled_share
        ),
        Some(p) => format!("{:.1}x faster, simulated", p.speedup),
        None => format!("{}x faster, estimate", speedup(duration, fix.saves)),
    }
}

fn render_inferred(out: &mut String, c: &ConnectionDiagnosis, source: &str, number: usize) {
    let Some(inferred) = &c.inferred else {
        return;
    };
    let _ = writeln!(
        out,
        "  scenario inferred from the {} -> {} stalls (tcpstall simulate --from-capture {} --connection {number}):",
        inferred.holder.name(),
        match inferred.holder {
            Role::Client => "server",
            Role::Server => "client",
        },
        escaped(source)
    );
    for v in &inferred.values {
        let _ = writeln!(out, "    {} = {}: {}", v.key, v.value, v.source);
    }
    let per_transaction = if c.client_messages > 0 {
        c.duration() / Nanos::from(c.client_messages)
    } else {
        0
    };
    let _ = writeln!(
        out,
        "  simulated, {} transactions ({} a transaction in the capture):",
        inferred.transactions_simulated,
        ms_text(per_transaction)
    );
    if !inferred.reproduced {
        let _ = writeln!(
            out,
            "    the scenario as inferred does not stall: the fixes keep their estimates"
        );
    }
    for (name, time, speedup, stalled) in &inferred.variants {
        let _ = writeln!(
            out,
            "    {name:<40} {:>11} a transaction, {:>3.0}% stalled, {speedup:.1}x",
            ms_text(*time),
            100.0 * stalled
        );
    }
}

fn ms_text(n: Nanos) -> String {
    format!("{:.3} ms", millis(n))
}

fn render_event(
    out: &mut String,
    c: &ConnectionDiagnosis,
    e: &StallEvent,
    n: usize,
    origin: Nanos,
) {
    let ack = e
        .ack_delay
        .map(|d| format!("{:.1}", millis(d)))
        .or_else(|| e.idle.map(|d| format!("idle {:.1}", millis(d))))
        .unwrap_or_else(|| "-".into());
    let packets = match e.evidence.ack_packet {
        Some(ack_packet) => format!(
            "{} .. ack {} .. {}",
            e.evidence.data_before_packet, ack_packet, e.evidence.data_after_packet
        ),
        None => format!(
            "{} .. {}",
            e.evidence.data_before_packet, e.evidence.data_after_packet
        ),
    };
    let confidence = if e.class.is_tcp_stall() {
        e.evidence.confidence.name()
    } else {
        "-"
    };
    let _ = writeln!(
        out,
        "  {:>4} {:>10.6} {:<22} {:>9.1} {:>10} {:>8} {:<8} {:<7} {}",
        n,
        secs(e.start - origin),
        e.class.name(),
        millis(e.duration()),
        ack,
        e.held_bytes,
        c.role_of_side(e.sender).name(),
        confidence,
        packets
    );
    if !e.evidence.basis.is_empty() {
        let _ = writeln!(
            out,
            "         rests on: {}",
            e.evidence.basis.names().join(", ")
        );
    }
}

fn confidence_description(level: Confidence) -> &'static str {
    match level {
        Confidence::High => "proven by TSecr and timing",
        Confidence::Medium => "by timing alone",
        Confidence::None => "not rated",
    }
}

/// Who held, who delayed, and the pattern, for one direction that stalled.
fn render_direction(
    out: &mut String,
    c: &ConnectionDiagnosis,
    d: &DirectionDiagnosis,
    indent: &str,
) {
    let _ = writeln!(
        out,
        "{indent}held by:    {} {}{}",
        d.holder.name(),
        d.holder_endpoint,
        held_description(c, d)
    );
    match &d.delayed_ack {
        Some(profile) => {
            let _ = writeln!(
                out,
                "{indent}delayed by: {} {}: ACKs held {:.1} ms median ({:.1} to {:.1} ms, {} sample{}): {}",
                profile.role.name(),
                profile.endpoint,
                millis(profile.reading.median),
                millis(profile.reading.min),
                millis(profile.reading.max),
                profile.samples,
                plural(profile.samples),
                profile.reading.describe()
            );
        }
        None => {
            let _ = writeln!(
                out,
                "{indent}delayed by: {} {}",
                d.delayer.name(),
                d.delayer_endpoint
            );
        }
    }
    if let Some(pattern) = d.pattern {
        let _ = writeln!(
            out,
            "{indent}pattern:    {}",
            pattern_description(pattern, Some(d.holder))
        );
    }
}

fn held_description(c: &ConnectionDiagnosis, d: &DirectionDiagnosis) -> String {
    let nagle: Vec<&StallEvent> = c
        .events
        .iter()
        .filter(|e| e.class == StallClass::NagleDelayedAck)
        .filter(|e| {
            e.holder
                .is_some_and(|side| c.role_of_side(side) == d.holder)
        })
        .collect();
    if nagle.is_empty() {
        return String::new();
    }
    let mut sizes: Vec<u64> = nagle.iter().map(|e| e.held_bytes).collect();
    sizes.sort_unstable();
    let (lo, hi) = (sizes[0], sizes[sizes.len() - 1]);
    let size = if lo == hi {
        format!("{lo}-byte")
    } else {
        format!("{lo} to {hi}-byte")
    };
    let behind = if d.classic_nagle_evidence {
        "full-sized segments (classic Nagle)"
    } else {
        "an unacknowledged small segment"
    };
    format!(": Nagle held {size} sends behind {behind}")
}

fn pattern_description(pattern: Pattern, holder: Option<Role>) -> String {
    let who = holder.map_or("the sender", |r| r.name());
    match pattern {
        Pattern::WriteWriteRead => {
            format!(
                "write-write-read: the {who} writes each message in pieces, then waits for the reply"
            )
        }
        Pattern::BulkOddTail { full_segments } => format!(
            "bulk-odd-tail: the {who} sends {full_segments} full segments (odd) and a partial tail, then waits for a reply; the odd segment's ACK is delayed"
        ),
        Pattern::SmallWriteBehindUnacked => {
            format!("small writes by the {who} wait behind unacknowledged data")
        }
    }
}

fn rtt(value: Option<Nanos>) -> String {
    match value {
        Some(n) => format!("{:.3} ms", millis(n)),
        None => "unknown".into(),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
