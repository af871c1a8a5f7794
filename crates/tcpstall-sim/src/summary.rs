//! Per-transaction latency and throughput of a run.

use serde::Serialize;

use crate::engine::RunResult;

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub transactions: usize,
    pub completed: bool,
    pub stalled_transactions: usize,
    pub latency_mean: f64,
    pub latency_p50: f64,
    pub latency_p90: f64,
    pub latency_p99: f64,
    pub latency_max: f64,
    /// Transactions per second over the run's transactions.
    pub transactions_per_second: f64,
    /// Request and response payload per second.
    pub throughput_bps: f64,
    pub packets: u64,
    pub nagle_delayed_ack_stalls: usize,
    pub delayed_ack_stalls: usize,
    pub client_mss: u32,
    pub server_mss: u32,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn summarize(result: &RunResult, request_bytes: u64, response_bytes: u64) -> Summary {
    let mut latencies: Vec<f64> = result.transactions.iter().map(|t| t.latency).collect();
    latencies.sort_by(f64::total_cmp);
    let n = latencies.len();
    // From the first start to the last end (concurrent connections interleave).
    let first_start = result
        .transactions
        .iter()
        .map(|t| t.start)
        .fold(f64::MAX, f64::min);
    let last_end = result
        .transactions
        .iter()
        .map(|t| t.end)
        .fold(0.0, f64::max);
    let span = if n > 0 { last_end - first_start } else { 0.0 };
    let per_second = if span > 0.0 { n as f64 / span } else { 0.0 };
    Summary {
        transactions: n,
        completed: result.completed,
        stalled_transactions: result.transactions.iter().filter(|t| t.stalled).count(),
        latency_mean: if n > 0 {
            latencies.iter().sum::<f64>() / n as f64
        } else {
            0.0
        },
        latency_p50: percentile(&latencies, 50.0),
        latency_p90: percentile(&latencies, 90.0),
        latency_p99: percentile(&latencies, 99.0),
        latency_max: latencies.last().copied().unwrap_or(0.0),
        transactions_per_second: per_second,
        throughput_bps: per_second * (request_bytes + response_bytes) as f64 * 8.0,
        packets: result.segments_sent,
        nagle_delayed_ack_stalls: result
            .stalls
            .iter()
            .filter(|s| s.class == "nagle-delayed-ack")
            .count(),
        delayed_ack_stalls: result
            .stalls
            .iter()
            .filter(|s| s.class == "delayed-ack")
            .count(),
        client_mss: result.client_mss,
        server_mss: result.server_mss,
    }
}
