//! From a stalled connection in a capture to a scenario the simulator can run, and the
//! gain of each fix simulated on it rather than assumed.
//!
//! Every value comes from what the diagnosis keeps (no second read of the capture): the
//! stacks from the delayed-ACK timer the stalls showed, the round trip from the path
//! round trips, each side's MSS, the message sizes from the bytes and messages (runs of
//! data between two of the other side's) of each side, split where Nagle held the
//! message's last piece, the think times from the application's own gaps, and what the
//! capture's time per transaction leaves beyond the simulated one.

use serde_json::{Value, json};
use tcpstall_core::detect::{Pattern, StallClass};
use tcpstall_core::diagnosis::{
    ConnectionDiagnosis, FixKind, InferredScenario, InferredValue, Role, TimerGuess, helpful_first,
    predicted_gain,
};
use tcpstall_core::flow::MssSource;
use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};
use tcpstall_core::side::Side;

use crate::profile::{self, NagleMode};
use crate::scenario::{ScenarioError, ScenarioFile};
use crate::sweep::{Variant, run_variants};

/// A scenario inferred from one stalled connection.
#[derive(Clone, Debug)]
pub struct Inferred {
    pub file: ScenarioFile,
    /// The side that held the data in the direction modelled (the one that lost most).
    pub holder: Role,
    /// Transactions the capture holds (the file may simulate fewer).
    pub capture_transactions: u32,
    /// Each value and where it comes from.
    pub values: Vec<InferredValue>,
}

impl Inferred {
    /// One line per value: `key = value: source`.
    pub fn notes(&self) -> Vec<String> {
        self.values
            .iter()
            .map(|v| format!("{} = {}: {}", v.key, v.value, v.source))
            .collect()
    }

    /// The scenario file, with the sources as comments, to edit and run again.
    pub fn toml(&self) -> String {
        let mut out =
            String::from("# Inferred from a capture by tcpstall; where each value comes from:\n");
        for note in self.notes() {
            out.push_str("#   ");
            out.push_str(&note);
            out.push('\n');
        }
        match self.file.to_toml() {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!("# the scenario could not be written: {e}\n")),
        }
        out
    }
}

/// How much to simulate.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// At most this many transactions per run.
    pub max_transactions: u32,
    /// At most this many bytes of requests and responses per run: fewer transactions
    /// when the messages are large, none when one transaction is larger.
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_transactions: 50,
            max_bytes: 32 << 20,
        }
    }
}

const MS: f64 = NANOS_PER_MILLI as f64;

/// TCP timestamps take 12 option bytes (RFC 7323 3.2: 10 bytes, padded to 12) in every
/// segment, out of the MSS a side announced.
const TIMESTAMP_OPTION_BYTES: u32 = 12;

fn ms(n: Nanos) -> f64 {
    n as f64 / MS
}

/// Rounds to a microsecond, so the scenario file reads well.
fn round_ms(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The profile a receiver's delayed-ACK timer points to; the second value overrides the
/// profile's timer (ms) when none of the known defaults fits.
fn stack_for(
    timer: TimerGuess,
    median: Nanos,
    timestamps: bool,
) -> (&'static str, Option<f64>, String) {
    match timer {
        TimerGuess::Linux40 => ("linux", None, "its delayed ACKs: Linux's 40 ms timer".into()),
        TimerGuess::FreeBsd100 => ("freebsd", None, "its delayed ACKs: FreeBSD's 100 ms timer".into()),
        TimerGuess::Fixed200 => (
            "windows",
            None,
            "its delayed ACKs: a fixed 200 ms timer (Windows)".into(),
        ),
        TimerGuess::WindowsTicks => (
            "windows-xp",
            None,
            "its delayed ACKs: two 100 ms ticks (Windows before Vista)".into(),
        ),
        TimerGuess::PhasedTick200 if timestamps => (
            "macos-legacy",
            None,
            "its delayed ACKs: a 0-200 ms tick, with timestamps on (macOS before 10.5, classic BSD)".into(),
        ),
        TimerGuess::PhasedTick200 => (
            "aix",
            None,
            "its delayed ACKs: a 0-200 ms tick, timestamps off (AIX)".into(),
        ),
        TimerGuess::Other => {
            let stack = if timestamps { "linux" } else { "windows" };
            let delack = round_ms(ms(median)).clamp(1.0, 500.0);
            (
                stack,
                Some(delack),
                format!(
                    "its delayed ACKs: {delack} ms, no known default; {stack}'s rules with that timer"
                ),
            )
        }
    }
}

fn median(values: &mut [i64]) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[values.len() / 2])
}

/// Infers the scenario of `d`'s worst stalled direction. None when it has none, or no
/// data to model.
pub fn scenario_from(d: &ConnectionDiagnosis, limits: Limits) -> Option<Inferred> {
    let direction = d.directions.first()?;
    let holder = direction.holder;
    let side_of = |role: Role| Side::BOTH.into_iter().find(|&s| d.role_of_side(s) == role);
    let holder_side = side_of(holder)?;
    let client_side = side_of(Role::Client)?;
    let server_side = client_side.other();
    if d.client_messages == 0 {
        return None;
    }
    let mut values: Vec<InferredValue> = Vec::new();
    let mut note = |key: &str, value: Value, source: String| {
        values.push(InferredValue {
            key: key.to_string(),
            value,
            source,
        })
    };
    let mut file = ScenarioFile::default();

    // Stacks: the delayer's from its timer; the holder's from its own delayed ACKs when
    // the other direction stalled too, otherwise assumed like its peer.
    let (delayer_stack, delayer_delack, delayer_source) = match &direction.delayed_ack {
        Some(p) => stack_for(p.reading.timer, p.reading.median, d.timestamps),
        None => stack_for(TimerGuess::Other, 40 * NANOS_PER_MILLI, d.timestamps),
    };
    let other_way = d
        .directions
        .iter()
        .find(|o| o.holder != holder)
        .and_then(|o| o.delayed_ack.as_ref());
    let (holder_stack, holder_delack, holder_source) = match other_way {
        Some(p) => stack_for(p.reading.timer, p.reading.median, d.timestamps),
        None => (
            delayer_stack,
            delayer_delack,
            "not seen delaying ACKs: assumed the same stack as its peer".to_string(),
        ),
    };
    let (holder_cfg, delayer_cfg) = match holder {
        Role::Client => (&mut file.client, &mut file.server),
        Role::Server => (&mut file.server, &mut file.client),
    };
    holder_cfg.stack = holder_stack.into();
    holder_cfg.delack_ms = holder_delack;
    delayer_cfg.stack = delayer_stack.into();
    delayer_cfg.delack_ms = delayer_delack;
    let holder_profile = profile::by_name(holder_stack)?;
    let delayer_profile = profile::by_name(delayer_stack)?;
    let holder_key = holder.name();
    let delayer_key = match holder {
        Role::Client => "server",
        Role::Server => "client",
    };
    note(
        &format!("{holder_key}.stack"),
        json!(holder_stack),
        holder_source,
    );
    note(
        &format!("{delayer_key}.stack"),
        json!(delayer_stack),
        delayer_source,
    );
    // Timestamps as the capture shows them, whatever the stacks' defaults.
    for (cfg, profile, key) in [
        (&mut *holder_cfg, &holder_profile, holder_key),
        (&mut *delayer_cfg, &delayer_profile, delayer_key),
    ] {
        if profile.timestamps != d.timestamps {
            cfg.timestamps = Some(d.timestamps);
            note(
                &format!("{key}.timestamps"),
                json!(d.timestamps),
                if d.timestamps {
                    "the capture's segments carry timestamps".into()
                } else {
                    "the capture's segments carry no timestamps".into()
                },
            );
        }
    }
    if direction.classic_nagle_evidence && holder_profile.nagle == NagleMode::Minshall {
        holder_cfg.nagle = Some("classic".into());
        note(
            &format!("{holder_key}.nagle"),
            json!("classic"),
            "Nagle held data behind full-sized segments only: classic Nagle".into(),
        );
    }

    // The path.
    let rtt = match (d.client_path_rtt, d.server_path_rtt) {
        (Some(c), Some(s)) => {
            let rtt = round_ms(ms(c + s)).max(0.001);
            note(
                "link.rtt_ms",
                json!(rtt),
                format!(
                    "round trips from the capture point: to the client {:.3} ms, to the server {:.3} ms",
                    ms(c),
                    ms(s)
                ),
            );
            rtt
        }
        _ => {
            note(
                "link.rtt_ms",
                json!(file.link.rtt_ms),
                "no round trip measured: the default".into(),
            );
            file.link.rtt_ms
        }
    };
    file.link.rtt_ms = rtt;
    if let Some(position) = d.capture_position() {
        let point = match position {
            p if p <= 0.01 => "client".to_string(),
            p if p >= 0.99 => "server".to_string(),
            p => format!("tap:{p:.2}"),
        };
        note(
            "capture",
            json!(point),
            "where the capture point sits on the path, by its round trips to each side".into(),
        );
        file.capture = Some(point);
    }
    // Each side announces what the other sends, plus the timestamp option when the
    // capture's segments carry it (RFC 7323 3.2: both SYNs offered it).
    let option_bytes = if d.timestamps {
        TIMESTAMP_OPTION_BYTES
    } else {
        0
    };
    let announce = |sent: u32| (sent + option_bytes).clamp(88, 65_495);
    file.server.mss = Some(announce(d.client_mss.0));
    file.client.mss = Some(announce(d.server_mss.0));
    let sends = |who: &str, mss: &(u32, MssSource)| {
        format!(
            "the {who} sends {}-byte segments ({}){}",
            mss.0,
            mss.1.name(),
            if option_bytes > 0 {
                ", plus 12 bytes of timestamps"
            } else {
                ""
            }
        )
    };
    note(
        "server.mss",
        json!(file.server.mss),
        sends("client", &d.client_mss),
    );
    note(
        "client.mss",
        json!(file.client.mss),
        sends("server", &d.server_mss),
    );

    // The messages: bytes over messages each way; the holder's split where Nagle held
    // its last piece.
    let per_message = |bytes: u64, messages: u32| -> u32 {
        if messages == 0 {
            1
        } else {
            ((bytes as f64 / f64::from(messages)).round() as u64).clamp(1, 1 << 30) as u32
        }
    };
    let request_total = per_message(d.bytes_client_to_server, d.client_messages);
    let response_total = per_message(d.bytes_server_to_client, d.server_messages);
    let mut held: Vec<i64> = d
        .events
        .iter()
        .filter(|e| e.class == StallClass::NagleDelayedAck && e.holder == Some(holder_side))
        .map(|e| e.held_bytes.min(1 << 30) as i64)
        .collect();
    let holds = held.len();
    let held = median(&mut held).unwrap_or(0) as u32;
    let bulk = matches!(direction.pattern, Some(Pattern::BulkOddTail { .. }));
    let split = |total: u32| -> (Vec<u32>, String) {
        if !bulk && held > 0 && total > held {
            (
                vec![total - held, held],
                format!("; Nagle held the last {held} bytes (median of {holds} holds): two writes"),
            )
        } else if !bulk && held > 0 && total >= 2 {
            // Messages differ in size: the holds are as large as the average message.
            (
                vec![total - total / 2, total / 2],
                format!(
                    "; Nagle held {held} bytes (median of {holds} holds), as much as the average message: two halves"
                ),
            )
        } else if bulk {
            (
                vec![total],
                "; a block, then a wait for the reply: one write".into(),
            )
        } else {
            (vec![total], String::new())
        }
    };
    let (request, request_how) = if holder == Role::Client {
        split(request_total)
    } else {
        (vec![request_total], String::new())
    };
    let (response, response_how) = if holder == Role::Server {
        split(response_total)
    } else {
        (vec![response_total], String::new())
    };
    file.workload.pattern = "custom".into();
    note(
        "workload.request",
        json!(request),
        format!(
            "{} bytes in {} messages of the client{request_how}",
            d.bytes_client_to_server, d.client_messages
        ),
    );
    note(
        "workload.response",
        json!(response),
        format!(
            "{} bytes in {} messages of the server{response_how}",
            d.bytes_server_to_client, d.server_messages
        ),
    );
    file.workload.request = request;
    file.workload.response = response;
    file.workload.depth = 1;
    note(
        "workload.depth",
        json!(1),
        "assumed: the client waits for each response before its next request".into(),
    );
    let capture_transactions = d.client_messages;
    let transaction_bytes = u64::from(request_total) + u64::from(response_total);
    if transaction_bytes > limits.max_bytes {
        return None;
    }
    let by_bytes = (limits.max_bytes / transaction_bytes.max(1)).min(u64::from(u32::MAX)) as u32;
    let transactions = capture_transactions.clamp(1, limits.max_transactions.min(by_bytes).max(1));
    file.workload.transactions = transactions;
    note(
        "workload.transactions",
        json!(transactions),
        if transactions < capture_transactions {
            format!(
                "the client's {capture_transactions} messages, one a transaction; {transactions} simulated"
            )
        } else {
            "the client's messages, one a transaction".into()
        },
    );

    // Think times: the application's own gaps of 10 ms or more, when most transactions
    // show one.
    let think = |side: Side| -> Option<f64> {
        let mut idle: Vec<i64> = d
            .events
            .iter()
            .filter(|e| e.class == StallClass::AppThinkTime && e.sender == side)
            .map(|e| e.idle.unwrap_or(e.duration()))
            .collect();
        (idle.len() * 2 >= capture_transactions as usize)
            .then(|| median(&mut idle).map(|n| round_ms(ms(n))))
            .flatten()
    };
    let mut server_think = think(server_side);
    let mut client_think = think(client_side);
    let mut think_source = String::from("the application's own gaps (median)");
    let mut client_think_source = None;

    // What the capture spends per transaction outside its gaps and beyond what the
    // simulation spends there: think time below the gap threshold.
    let gaps: Nanos = d.class_counts().values().map(|(_, t)| *t).sum();
    let rtt_nanos = (rtt * MS) as Nanos;
    let outside =
        (d.duration() - gaps - 2 * rtt_nanos).max(0) as f64 / f64::from(capture_transactions);
    let mut probe = file.clone();
    probe.workload.server_think_ms = server_think.unwrap_or(0.0);
    probe.workload.client_think_ms = client_think.unwrap_or(0.0);
    probe.workload.request = vec![probe.workload.request.iter().sum()];
    probe.workload.response = vec![probe.workload.response.iter().sum()];
    probe.workload.transactions = transactions.min(20);
    let simulated = run_variants(vec![(String::new(), probe)])
        .ok()
        .and_then(|v| v.first().map(per_transaction))
        .unwrap_or(0.0);
    let excess = outside - simulated;
    if excess > simulated && excess > 0.01 * MS {
        let half = round_ms(excess / MS / 2.0);
        if server_think.is_none() && client_think.is_none() {
            server_think = Some(half);
            client_think = Some(half);
            think_source = format!(
                "the capture spends {:.3} ms a transaction outside its gaps, the simulation {:.3} ms: half the difference (below the gap threshold, the capture cannot tell whose)",
                outside / MS,
                simulated / MS
            );
            client_think_source = Some("the other half".to_string());
        } else if server_think.is_none() {
            server_think = Some(2.0 * half);
        } else if client_think.is_none() {
            client_think = Some(2.0 * half);
        }
    } else if server_think.is_none() && client_think.is_none() {
        think_source = "no time beyond the path's: none".into();
    }
    file.workload.server_think_ms = server_think.unwrap_or(0.0);
    file.workload.client_think_ms = client_think.unwrap_or(0.0);
    note(
        "workload.server_think_ms",
        json!(file.workload.server_think_ms),
        think_source.clone(),
    );
    note(
        "workload.client_think_ms",
        json!(file.workload.client_think_ms),
        client_think_source.unwrap_or(think_source),
    );
    file.resolve().ok()?;
    Some(Inferred {
        file,
        holder,
        capture_transactions,
        values,
    })
}

/// Mean time per transaction of a run, nanoseconds (0 when nothing completed).
fn per_transaction(v: &Variant) -> f64 {
    if v.summary.transactions_per_second > 0.0 {
        1e9 / v.summary.transactions_per_second
    } else {
        0.0
    }
}

/// The variant a fix becomes in the inferred scenario; None when it has no simulated
/// counterpart.
fn variant_of(kind: FixKind, inferred: &Inferred) -> Option<(String, ScenarioFile)> {
    let mut file = inferred.file.clone();
    let (holder, delayer, holder_name, delayer_name) = match inferred.holder {
        Role::Client => (&mut file.client, &mut file.server, "client", "server"),
        Role::Server => (&mut file.server, &mut file.client, "server", "client"),
    };
    let name = match kind {
        FixKind::OneWrite => {
            file.workload.request = vec![file.workload.request.iter().sum()];
            file.workload.response = vec![file.workload.response.iter().sum()];
            "one write per message".to_string()
        }
        FixKind::TwoInFlight => {
            file = crate::sweep::pipelined(&file, file.workload.depth.max(1) + 1);
            "two requests in flight".to_string()
        }
        FixKind::NoDelay => {
            holder.options.nodelay = true;
            format!("TCP_NODELAY on the {holder_name}")
        }
        FixKind::OneWriteNoDelay => {
            holder.options.nodelay = true;
            file.workload.request = vec![file.workload.request.iter().sum()];
            file.workload.response = vec![file.workload.response.iter().sum()];
            format!("one write and TCP_NODELAY on the {holder_name}")
        }
        FixKind::Minshall => {
            holder.nagle = Some("minshall".into());
            format!("Minshall's Nagle on the {holder_name}")
        }
        FixKind::Cork => {
            holder.options.cork = true;
            format!("TCP_CORK around each message on the {holder_name}")
        }
        FixKind::AckAtOnce => {
            delayer.options.quickack = true;
            format!("no delayed ACKs on the {delayer_name}")
        }
        FixKind::MoreInFlight => return None,
    };
    Some((name, file))
}

/// Simulates the inferred scenario as given and with each fix of its direction, and
/// records the outcomes: each fix's prediction (its saving becomes the simulated one)
/// and the inferred scenario on the diagnosis.
pub fn predict(d: &mut ConnectionDiagnosis, inferred: &Inferred) -> Result<(), ScenarioError> {
    let Some(direction) = d.directions.first() else {
        return Ok(());
    };
    let mut kinds: Vec<FixKind> = Vec::new();
    for fix in &direction.fixes {
        if !kinds.contains(&fix.kind) && variant_of(fix.kind, inferred).is_some() {
            kinds.push(fix.kind);
        }
    }
    let mut runs = vec![("as given".to_string(), inferred.file.clone())];
    runs.extend(kinds.iter().filter_map(|&k| variant_of(k, inferred)));
    let variants = run_variants(runs)?;
    let share = |v: &Variant| {
        if v.summary.transactions > 0 {
            v.summary.stalled_transactions as f64 / v.summary.transactions as f64
        } else {
            0.0
        }
    };
    let duration = d.duration();
    let lost = d.time_lost;
    // A scenario that does not stall as the capture did says nothing about the fixes:
    // they keep their estimates.
    let reproduced = share(&variants[0]) > 0.0;
    if reproduced && let Some(direction) = d.directions.first_mut() {
        for fix in &mut direction.fixes {
            if let Some(i) = kinds.iter().position(|&k| k == fix.kind) {
                let v = &variants[i + 1];
                fix.set_prediction(duration, v.speedup, share(v), lost);
            }
        }
        helpful_first(&mut direction.fixes, share(&variants[0]));
    }
    let base = &variants[0];
    d.inferred = Some(InferredScenario {
        holder: inferred.holder,
        values: inferred.values.clone(),
        toml: inferred.toml(),
        transactions_simulated: inferred.file.workload.transactions,
        simulated_transaction_time: per_transaction(base).round() as Nanos,
        simulated_stalled_share: share(base),
        reproduced,
        variants: variants
            .iter()
            .map(|v| {
                (
                    v.name.clone(),
                    per_transaction(v).round() as Nanos,
                    if reproduced {
                        predicted_gain(duration, v.speedup, lost).1
                    } else {
                        v.speedup
                    },
                    share(v),
                )
            })
            .collect(),
    });
    Ok(())
}

/// Infers and simulates the worst `connections` stalled connections (in report order),
/// `limits` bounding each simulation.
///
/// Each connection is simulated on its own, so they are shared out among the machine's
/// cores (dealt in turn: the worst, simulated first, are often the longest).
pub fn predict_worst(d: &mut [ConnectionDiagnosis], connections: usize, limits: Limits) {
    let worst: Vec<&mut ConnectionDiagnosis> = d
        .iter_mut()
        .filter(|c| c.stall_count > 0 && !c.directions.is_empty())
        .take(connections)
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(worst.len()).max(1);
    let mut shares: Vec<Vec<&mut ConnectionDiagnosis>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in worst.into_iter().enumerate() {
        shares[i % threads].push(c);
    }
    let predict_share = |share: Vec<&mut ConnectionDiagnosis>| {
        for c in share {
            if let Some(inferred) = scenario_from(c, limits) {
                let _ = predict(c, &inferred);
            }
        }
    };
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || predict_share(share));
        }
    });
}
