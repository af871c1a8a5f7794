//! Runs over many scenarios: a sweep of one parameter, and the fixed variants of one
//! scenario side by side.

use serde::Serialize;

use crate::report::request_response_bytes;
use crate::scenario::{ScenarioError, ScenarioFile};
use crate::summary::{Summary, summarize};

/// Parameters a sweep can vary.
pub const PARAMETERS: &[(&str, &str)] = &[
    ("block", "the request, written in one call (bytes)"),
    ("write1", "the request's first write (bytes)"),
    ("write2", "the request's second write (bytes)"),
    ("response", "the response, written in one call (bytes)"),
    (
        "mss",
        "the MSS both sides announce (bytes, before the timestamp option)",
    ),
    ("delack", "both sides' delayed-ACK timer (ms)"),
    ("rtt", "the round trip (ms)"),
    ("depth", "requests in flight"),
];

/// A parsed `--sweep PARAM=FROM..TO[:STEP]` or `PARAM=A,B,C`.
#[derive(Clone, Debug)]
pub struct SweepSpec {
    pub parameter: String,
    pub values: Vec<f64>,
}

/// At most this many points, so a typo cannot start an endless run.
pub const MAX_POINTS: usize = 100_000;

impl SweepSpec {
    pub fn parse(text: &str) -> Result<SweepSpec, ScenarioError> {
        let (parameter, range) = text.split_once('=').ok_or_else(|| {
            ScenarioError::Invalid(format!(
                "sweep {text:?}: use PARAM=FROM..TO[:STEP] or PARAM=A,B,C"
            ))
        })?;
        if !PARAMETERS.iter().any(|(p, _)| *p == parameter) {
            let names: Vec<&str> = PARAMETERS.iter().map(|(p, _)| *p).collect();
            return Err(ScenarioError::Invalid(format!(
                "sweep parameter {parameter:?}: one of {}",
                names.join(", ")
            )));
        }
        let number = |s: &str| {
            s.trim()
                .replace('_', "")
                .parse::<f64>()
                .map_err(|_| ScenarioError::Invalid(format!("sweep value {s:?} is not a number")))
        };
        let values = if let Some((from, rest)) = range.split_once("..") {
            let (to, step) = match rest.split_once(':') {
                Some((to, step)) => (number(to)?, number(step)?),
                None => (number(rest)?, 1.0),
            };
            let from = number(from)?;
            if step.is_nan() || step <= 0.0 || to < from {
                return Err(ScenarioError::Invalid(
                    "sweep needs FROM <= TO and a positive STEP".into(),
                ));
            }
            let count = ((to - from) / step).floor() as usize + 1;
            if count > MAX_POINTS {
                return Err(ScenarioError::Invalid(format!(
                    "sweep of {count} points: at most {MAX_POINTS}"
                )));
            }
            (0..count).map(|i| from + i as f64 * step).collect()
        } else {
            range
                .split(',')
                .map(number)
                .collect::<Result<Vec<_>, _>>()?
        };
        if values.is_empty() || values.len() > MAX_POINTS {
            return Err(ScenarioError::Invalid(
                "sweep needs 1 to 100000 values".into(),
            ));
        }
        Ok(SweepSpec {
            parameter: parameter.to_string(),
            values,
        })
    }
}

/// One point of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    pub value: f64,
    pub summary: Summary,
}

/// Sets one parameter of a scenario file.
pub fn apply(file: &mut ScenarioFile, parameter: &str, value: f64) -> Result<(), ScenarioError> {
    let bytes = || -> Result<u32, ScenarioError> {
        if value >= 1.0 && value <= f64::from(1u32 << 30) {
            Ok(value as u32)
        } else {
            Err(ScenarioError::Invalid(format!(
                "{parameter} {value} is out of range"
            )))
        }
    };
    let resolved = file.resolve()?;
    match parameter {
        "block" => file.workload.request = vec![bytes()?],
        "write1" | "write2" => {
            let mut request = resolved.request.clone();
            if request.len() < 2 {
                request.resize(2, 1);
            }
            request[usize::from(parameter == "write2")] = bytes()?;
            file.workload.request = request;
        }
        "response" => file.workload.response = vec![bytes()?],
        "mss" => {
            file.client.mss = Some(bytes()?);
            file.server.mss = Some(bytes()?);
        }
        "delack" => {
            file.client.delack_ms = Some(value);
            file.server.delack_ms = Some(value);
        }
        "rtt" => {
            file.link.rtt_ms = value;
            file.link.client_to_server_ms = None;
            file.link.server_to_client_ms = None;
        }
        "depth" => file.workload.depth = value as u32,
        other => {
            return Err(ScenarioError::Invalid(format!(
                "unknown sweep parameter {other:?}"
            )));
        }
    }
    Ok(())
}

/// Runs every point of a sweep (without captures).
pub fn sweep(file: &ScenarioFile, spec: &SweepSpec) -> Result<Vec<SweepPoint>, ScenarioError> {
    let mut points = Vec::with_capacity(spec.values.len());
    for &value in &spec.values {
        let mut point = file.clone();
        apply(&mut point, &spec.parameter, value)?;
        let scenario = point.resolve()?;
        let result = crate::run(&scenario, false);
        let (req, resp) = request_response_bytes(&scenario);
        points.push(SweepPoint {
            value,
            summary: summarize(&result, req, resp),
        });
    }
    Ok(points)
}

/// One variant of a scenario with a fix applied.
#[derive(Clone, Debug, Serialize)]
pub struct Variant {
    pub name: String,
    pub summary: Summary,
    /// This variant's transactions per second over those of the scenario as given.
    pub speedup: f64,
}

/// A client's wake-up after a response arrives, when it keeps requests in flight and its
/// scenario says nothing of how it reads (milliseconds).
pub const PIPELINED_CLIENT_WAKEUP_MS: f64 = 0.1;

/// `file` with `depth` requests in flight. A client that keeps requests in flight reads
/// all that is there when it wakes, often two responses in one call, and then writes its
/// next requests back to back: on Linux the lab saw 8 to 13 of 20 round trips of seed
/// 002's two writes stall so in six runs (65 to 113 transactions a second), as a client
/// waking [`PIPELINED_CLIENT_WAKEUP_MS`] after each response does here (12 of 20, 76);
/// one that read each response the instant it arrived would stall 2 of 20.
pub fn pipelined(file: &ScenarioFile, depth: u32) -> ScenarioFile {
    let mut pipelined = file.clone();
    pipelined.workload.depth = depth;
    let reader = &mut pipelined.client.reader;
    if depth > 1 && *reader == crate::scenario::ReaderConfig::default() {
        reader.read_delay_ms = PIPELINED_CLIENT_WAKEUP_MS;
    }
    pipelined
}

/// The scenario as given, then each fix on its own: each message in one write,
/// two requests in flight, TCP_NODELAY on both sides, TCP_QUICKACK on both sides.
pub fn compare_fixes(file: &ScenarioFile) -> Result<Vec<Variant>, ScenarioError> {
    let base = file.resolve()?;
    let mut variants: Vec<(String, ScenarioFile)> = vec![("as given".into(), file.clone())];
    let mut one_write = file.clone();
    one_write.workload.request = vec![base.request.iter().sum()];
    one_write.workload.response = vec![base.response.iter().sum()];
    variants.push(("one write per message".into(), one_write));
    if base.depth == 1 {
        variants.push(("two requests in flight".into(), pipelined(file, 2)));
    }
    let mut nodelay = file.clone();
    nodelay.client.options.nodelay = true;
    nodelay.server.options.nodelay = true;
    variants.push(("TCP_NODELAY (Nagle off)".into(), nodelay));
    let mut quickack = file.clone();
    quickack.client.options.quickack = true;
    quickack.server.options.quickack = true;
    variants.push(("TCP_QUICKACK after every read".into(), quickack));
    run_variants(variants)
}

/// Runs each named variant; the first is the reference of every speed-up.
pub fn run_variants(variants: Vec<(String, ScenarioFile)>) -> Result<Vec<Variant>, ScenarioError> {
    let mut out = Vec::new();
    let mut base_rate = None;
    for (name, variant) in variants {
        let scenario = variant.resolve()?;
        let result = crate::run(&scenario, false);
        let (req, resp) = request_response_bytes(&scenario);
        let summary = summarize(&result, req, resp);
        let base = *base_rate.get_or_insert(summary.transactions_per_second);
        let speedup = if base > 0.0 {
            summary.transactions_per_second / base
        } else {
            1.0
        };
        out.push(Variant {
            name,
            summary,
            speedup,
        });
    }
    Ok(out)
}

/// Redis' reply to a SET: "+OK\r\n".
const SET_REPLY: u32 = 5;
/// A GET of a 16-byte key in Redis' protocol: "*2\r\n$3\r\nGET\r\n$16\r\n" and the key
/// with its "\r\n".
const GET_REQUEST: u32 = 36;
/// A bulk reply adds "$N\r\n" before the value and "\r\n" after it.
const fn get_reply(size: u32) -> u32 {
    size + 8 + (size.ilog10() + 1)
}

/// One request kind and size, as given and with each request written in one call.
#[derive(Clone, Debug, Serialize)]
pub struct SizeRow {
    pub kind: String,
    pub size: u32,
    /// The request's writes as given (after the proxy's split).
    pub writes: Vec<u32>,
    pub as_given: Summary,
    pub one_write: Summary,
    /// Transactions per second as given over those with one write per request.
    pub ratio: f64,
}

/// A request-size sweep for each kind of request (`request_sizes`, `kinds`): each size as
/// given (the proxy's split included) against the same requests written in one call.
pub fn compare_sizes(file: &ScenarioFile) -> Result<Vec<SizeRow>, ScenarioError> {
    // Every size and kind checked before any is used.
    file.resolve()?;
    let kinds = if file.workload.kinds.is_empty() {
        vec!["set".to_string()]
    } else {
        file.workload.kinds.clone()
    };
    let mut rows = Vec::new();
    for kind in &kinds {
        for &size in &file.workload.request_sizes {
            let mut given = file.clone();
            given.workload.request_sizes.clear();
            let (request, response) = if kind == "get" {
                (GET_REQUEST, get_reply(size))
            } else {
                (size, SET_REPLY)
            };
            given.workload.request = vec![request];
            given.workload.response = vec![response];
            let mut one_write = given.clone();
            one_write.workload.split_over = None;
            let writes = given.resolve()?.request;
            let summaries = run_variants(vec![
                ("as given".into(), given),
                ("one write".into(), one_write),
            ])?;
            let [as_given, one_write] = [&summaries[0], &summaries[1]];
            rows.push(SizeRow {
                kind: kind.clone(),
                size,
                writes,
                ratio: 1.0 / one_write.speedup.max(f64::MIN_POSITIVE),
                as_given: as_given.summary.clone(),
                one_write: one_write.summary.clone(),
            });
        }
    }
    Ok(rows)
}
