//! Renderers over a run: the text summary, the tcpdump-like timeline, the ground truth
//! and the JSON report. They never simulate anything.

use std::fmt::Write;

use serde::Serialize;

use crate::endpoint::SegmentKind;
use crate::engine::{CLIENT, RunResult, TruthDelayedAck, TruthHold, TruthStall};
use crate::scenario::Scenario;
use crate::summary::{Summary, summarize};

pub const SCHEMA_VERSION: u32 = 1;

fn ms(seconds: f64) -> f64 {
    seconds * 1e3
}

/// A one-line description of the scenario.
pub fn describe(scenario: &Scenario) -> String {
    let options = |o: &crate::scenario::SocketOptions| {
        let set = o.names();
        if set.is_empty() {
            String::new()
        } else {
            format!(" ({})", set.join(", "))
        }
    };
    format!(
        "{} x{}, client {}{} -> server {}{}, {}, RTT {} ms, request {:?} response {:?}{}",
        scenario.pattern,
        scenario.transactions,
        scenario.client.profile.name,
        options(&scenario.client.options),
        scenario.server.profile.name,
        options(&scenario.server.options),
        bandwidth(scenario.link.bandwidth_bps),
        scenario.link.rtt_ms,
        scenario.request,
        scenario.response,
        if scenario.depth > 1 {
            format!(", depth {}", scenario.depth)
        } else {
            String::new()
        }
    ) + &if scenario.connections > 1 {
        format!(", {} connections at once", scenario.connections)
    } else {
        String::new()
    }
}

pub fn bandwidth(bps: f64) -> String {
    let (value, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else {
        (bps / 1e3, "kbit/s")
    };
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} {unit}")
}

pub fn request_response_bytes(scenario: &Scenario) -> (u64, u64) {
    (
        scenario.request.iter().map(|&b| u64::from(b)).sum(),
        scenario.response.iter().map(|&b| u64::from(b)).sum(),
    )
}

/// The summary a person reads first.
pub fn text(scenario: &Scenario, result: &RunResult) -> String {
    let (req, resp) = request_response_bytes(scenario);
    let s = summarize(result, req, resp);
    let mut out = String::new();
    let _ = writeln!(out, "scenario:     {}", describe(scenario));
    let _ = writeln!(
        out,
        "MSS:          client sends {} bytes, server sends {} bytes",
        s.client_mss, s.server_mss
    );
    let _ = writeln!(
        out,
        "transactions: {} of {}{}, {} stalled",
        s.transactions,
        scenario.transactions * scenario.connections,
        if s.completed {
            ""
        } else {
            " (did not complete)"
        },
        s.stalled_transactions
    );
    let _ = writeln!(
        out,
        "latency:      p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms, mean {:.3} ms",
        ms(s.latency_p50),
        ms(s.latency_p90),
        ms(s.latency_p99),
        ms(s.latency_max),
        ms(s.latency_mean)
    );
    let _ = writeln!(
        out,
        "throughput:   {:.1} transactions/s, {}",
        s.transactions_per_second,
        bandwidth(s.throughput_bps)
    );
    let _ = writeln!(out, "{}", truth_line(result));
    let shown: Vec<String> = result
        .transactions
        .iter()
        .take(12)
        .map(|t| format!("{:.3}{}", ms(t.latency), if t.stalled { "*" } else { "" }))
        .collect();
    let more = if result.transactions.len() > 12 {
        " ..."
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "per transaction (ms, * = stalled): {}{more}",
        shown.join(" ")
    );
    out
}

fn truth_line(result: &RunResult) -> String {
    let nagle: Vec<&TruthStall> = result
        .stalls
        .iter()
        .filter(|s| s.class == "nagle-delayed-ack")
        .collect();
    let window: Vec<&TruthStall> = result
        .stalls
        .iter()
        .filter(|s| s.class == "delayed-ack")
        .collect();
    if nagle.is_empty() && window.is_empty() {
        return "truth:        no stall (no hold was released by a delayed ACK)".into();
    }
    let mut parts = Vec::new();
    for (stalls, what) in [(&nagle, "nagle-delayed-ack"), (&window, "delayed-ack")] {
        if stalls.is_empty() {
            continue;
        }
        let mut delays: Vec<f64> = stalls.iter().map(|s| s.ack_delay).collect();
        delays.sort_by(f64::total_cmp);
        let holders = if stalls.iter().all(|s| s.holder_side == CLIENT) {
            "the client held, the server delayed its ACKs"
        } else if stalls.iter().all(|s| s.holder_side != CLIENT) {
            "the server held, the client delayed its ACKs"
        } else {
            "both sides held"
        };
        parts.push(format!(
            "{} {what} stalls ({holders}; ACK delay median {:.1} ms)",
            stalls.len(),
            ms(delays[delays.len() / 2])
        ));
    }
    format!("truth:        {}", parts.join("; "))
}

/// A tcpdump-like listing of the packets at the capture point, with what the simulator
/// knows about each: held data and delayed ACKs.
pub fn timeline(result: &RunResult, limit: usize) -> String {
    let mut out = String::new();
    let captured: Vec<_> = result.captured.iter().collect();
    let gap_ends: std::collections::HashMap<u64, &crate::truth::TruthGap> =
        result.gaps.iter().map(|g| (g.packet, g)).collect();
    for (i, c) in captured.iter().enumerate().take(limit) {
        let s = &c.segment;
        let (from, to) = if s.from == CLIENT {
            ("client", "server")
        } else {
            ("server", "client")
        };
        let mut flags = String::new();
        if s.syn {
            flags.push('S');
        }
        if s.fin {
            flags.push('F');
        }
        if s.psh {
            flags.push('P');
        }
        if s.ack_flag {
            flags.push('.');
        }
        let seq = if s.len > 0 {
            format!("seq {}:{}", s.seq, s.seq + u64::from(s.len))
        } else {
            format!("seq {}", s.seq)
        };
        let mut notes = Vec::new();
        if let Some((reason, held)) = s.held {
            notes.push(format!(
                "{} held {:.1} ms",
                reason.name(),
                held as f64 / 1e6
            ));
        }
        if let Some(delay) = s.ack_delay {
            notes.push(format!("delayed ACK {:.1} ms", delay as f64 / 1e6));
        }
        if s.retransmission {
            notes.push("retransmission".into());
        }
        match s.kind {
            SegmentKind::WindowProbe => notes.push("window probe".into()),
            SegmentKind::ReadAck => notes.push("ACK on read".into()),
            SegmentKind::ProbeAnswer => notes.push("probe answer".into()),
            _ => {}
        }
        if c.merged > 1 {
            notes.push(format!("{} segments merged by offload", c.merged));
        }
        if let Some(gap) = gap_ends.get(&(i as u64 + 1)) {
            notes.push(format!(
                "gap {:.1} ms: {}{}",
                (gap.end - gap.start) as f64 / 1e6,
                gap.label.name(),
                if gap.observable {
                    ""
                } else {
                    ", not observable"
                }
            ));
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!("  [{}]", notes.join(", "))
        };
        let _ = writeln!(
            out,
            "{:>12.6} {from} > {to}: [{flags}] {seq} ack {} win {} len {}{notes}",
            c.time as f64 / 1e9,
            s.ack,
            s.window,
            s.len
        );
    }
    if captured.len() > limit {
        let _ = writeln!(out, "... {} more packets", captured.len() - limit);
    }
    out
}

/// The ground truth file (`--truth`).
#[derive(Serialize)]
pub struct Truth<'a> {
    pub schema_version: u32,
    pub stalls: &'a [TruthStall],
    pub holds: &'a [TruthHold],
    pub delayed_acks: &'a [TruthDelayedAck],
    /// The true class of every gap in the capture (with `--pcap` or `--check`).
    pub gaps: &'a [crate::truth::TruthGap],
}

pub fn truth(result: &RunResult) -> Truth<'_> {
    Truth {
        schema_version: SCHEMA_VERSION,
        stalls: &result.stalls,
        holds: &result.holds,
        delayed_acks: &result.delayed_acks,
        gaps: &result.gaps,
    }
}

#[derive(Serialize)]
pub struct JsonScenario {
    pub pattern: String,
    pub client: String,
    pub server: String,
    pub client_options: crate::scenario::SocketOptions,
    pub server_options: crate::scenario::SocketOptions,
    pub request: Vec<u32>,
    pub response: Vec<u32>,
    pub depth: u32,
    pub transactions: u32,
    pub bandwidth_bps: f64,
    pub rtt_ms: f64,
    pub capture_point: f64,
    pub seed: u64,
}

pub fn json_scenario(scenario: &Scenario) -> JsonScenario {
    JsonScenario {
        pattern: scenario.pattern.clone(),
        client: scenario.client.profile.name.into(),
        server: scenario.server.profile.name.into(),
        client_options: scenario.client.options,
        server_options: scenario.server.options,
        request: scenario.request.clone(),
        response: scenario.response.clone(),
        depth: scenario.depth,
        transactions: scenario.transactions,
        bandwidth_bps: scenario.link.bandwidth_bps,
        rtt_ms: scenario.link.rtt_ms,
        capture_point: scenario.capture.fraction(),
        seed: scenario.link.seed,
    }
}

/// The `--json` report of one run.
#[derive(Serialize)]
pub struct JsonRun<'a> {
    pub schema_version: u32,
    pub scenario: JsonScenario,
    pub summary: Summary,
    pub transactions: &'a [crate::engine::Transaction],
    pub truth: Truth<'a>,
}

pub fn json_run<'a>(scenario: &Scenario, result: &'a RunResult) -> JsonRun<'a> {
    let (req, resp) = request_response_bytes(scenario);
    JsonRun {
        schema_version: SCHEMA_VERSION,
        scenario: json_scenario(scenario),
        summary: summarize(result, req, resp),
        transactions: &result.transactions,
        truth: truth(result),
    }
}
