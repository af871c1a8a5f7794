//! The discrete-event loop: two endpoints, the link between them, the applications on
//! both ends, a capture point, and the ground truth of every hold and delayed ACK.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::net::SocketAddr;

use serde::Serialize;

use tcpstall_core::segment::{Nanos, Segment, TcpFlags, TcpOptions};

use crate::endpoint::{Endpoint, HoldReason, Output, WINDOW_SCALE, WireSegment};
use crate::scenario::Scenario;

pub const CLIENT: usize = 0;
pub const SERVER: usize = 1;

/// Simulated time never passes this, and no run processes more events: every run ends.
const MAX_SIM_TIME: Nanos = 3_600 * 1_000_000_000;
const MAX_EVENTS: u64 = 200_000_000;
/// Ethernet, IPv4 and TCP header bytes on the wire per segment (no options).
const FRAME_OVERHEAD: u64 = 14 + 20 + 20;

#[derive(Clone, Debug)]
enum Event {
    Arrive(WireSegment),
    DelayedAck {
        side: usize,
        generation: u64,
    },
    Rto {
        side: usize,
        generation: u64,
    },
    CorkFlush {
        side: usize,
    },
    /// The side's data has left the host: autocorked writes may go.
    HostQueueDrained {
        side: usize,
    },
    AppWrite {
        side: usize,
    },
    /// The next writes of a message whose writes are spaced apart.
    WriteRest {
        side: usize,
        writes: Vec<(u32, bool)>,
    },
}

struct Queued {
    time: Nanos,
    order: u64,
    event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.order) == (other.time, other.order)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time, self.order).cmp(&(other.time, other.order))
    }
}

/// A small deterministic generator (xorshift64*) for jitter, loss and timer phases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One direction of the link: serialization at the bandwidth, then the path delay.
#[derive(Default)]
struct Lane {
    free_at: Nanos,
    last_arrival: Nanos,
}

/// A segment as the capture point saw it.
#[derive(Clone, Debug)]
pub struct Captured {
    pub time: Nanos,
    pub segment: WireSegment,
}

/// Ground truth: a hold that a timer-delayed ACK released.
#[derive(Clone, Debug, Serialize)]
pub struct TruthStall {
    /// `nagle-delayed-ack` (a Nagle hold) or `delayed-ack` (a window hold).
    pub class: &'static str,
    pub holder: &'static str,
    pub delayer: &'static str,
    /// When the held data was ready at the holder, and when it left.
    pub hold_start: f64,
    pub released: f64,
    /// When it left, as seen at the capture point.
    pub released_at_capture: f64,
    pub ack_delay: f64,
    pub bytes: u32,
    #[serde(skip)]
    pub released_nanos: Nanos,
    #[serde(skip)]
    pub released_at_capture_nanos: Nanos,
    #[serde(skip)]
    pub ack_delay_nanos: Nanos,
    #[serde(skip)]
    pub holder_side: usize,
}

/// Ground truth: every hold, released by whatever.
#[derive(Clone, Debug, Serialize)]
pub struct TruthHold {
    pub side: &'static str,
    pub reason: &'static str,
    pub start: f64,
    pub end: f64,
    pub bytes: u32,
    /// The delay of the timer-delayed ACK that released it.
    pub released_by_delayed_ack: Option<f64>,
}

/// Ground truth: every ACK a delayed-ACK timer sent.
#[derive(Clone, Debug, Serialize)]
pub struct TruthDelayedAck {
    pub side: &'static str,
    /// Data arrived, and the timer's ACK left.
    pub data_arrived: f64,
    pub sent: f64,
    pub delay: f64,
}

/// One application transaction (request and its complete response).
#[derive(Clone, Debug, Serialize)]
pub struct Transaction {
    pub index: u32,
    pub start: f64,
    pub end: f64,
    pub latency: f64,
    pub stalled: bool,
    #[serde(skip)]
    pub start_nanos: Nanos,
    #[serde(skip)]
    pub end_nanos: Nanos,
}

/// Everything a run produces.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub captured: Vec<Captured>,
    pub transactions: Vec<Transaction>,
    pub stalls: Vec<TruthStall>,
    pub holds: Vec<TruthHold>,
    pub delayed_acks: Vec<TruthDelayedAck>,
    pub segments_sent: u64,
    pub end_time: Nanos,
    pub completed: bool,
    pub client_mss: u32,
    pub server_mss: u32,
    pub events: u64,
}

fn side_name(side: usize) -> &'static str {
    if side == CLIENT { "client" } else { "server" }
}

fn secs(n: Nanos) -> f64 {
    n as f64 / 1e9
}

/// The application on each end.
struct Apps {
    request: Vec<u32>,
    response: Vec<u32>,
    request_bytes: u64,
    response_bytes: u64,
    transactions: u32,
    depth: u32,
    issued: u32,
    completed: u32,
    starts: Vec<Nanos>,
    client_received: u64,
    server_received: u64,
    /// Complete requests the server has not answered yet.
    server_backlog: u32,
    server_answering: bool,
    client_waiting_think: bool,
    closed: bool,
}

pub struct Simulation<'a> {
    scenario: &'a Scenario,
    now: Nanos,
    order: u64,
    queue: BinaryHeap<Reverse<Queued>>,
    endpoints: [Endpoint; 2],
    lanes: [Lane; 2],
    delays: [Nanos; 2],
    generations: [[u64; 2]; 2],
    rng: Rng,
    apps: Apps,
    result: RunResult,
    record_capture: bool,
    established: [bool; 2],
}

const DELACK: usize = 0;
const RTO: usize = 1;

impl<'a> Simulation<'a> {
    pub fn new(scenario: &'a Scenario, record_capture: bool) -> Simulation<'a> {
        let mut rng = Rng::new(scenario.link.seed);
        let phase = |rng: &mut Rng| (rng.unit() * 200e6) as Nanos;
        let client = Endpoint::new(
            CLIENT,
            scenario.client.profile.clone(),
            scenario.client.options,
            phase(&mut rng),
        );
        let server = Endpoint::new(
            SERVER,
            scenario.server.profile.clone(),
            scenario.server.options,
            phase(&mut rng),
        );
        let half = scenario.link.rtt_ms / 2.0;
        let to_nanos = |ms: f64| (ms * 1e6).round() as Nanos;
        let delays = [
            to_nanos(scenario.link.client_to_server_ms.unwrap_or(half)),
            to_nanos(scenario.link.server_to_client_ms.unwrap_or(half)),
        ];
        let request_bytes = scenario.request.iter().map(|&b| u64::from(b)).sum();
        let response_bytes = scenario.response.iter().map(|&b| u64::from(b)).sum();
        Simulation {
            scenario,
            now: 0,
            order: 0,
            queue: BinaryHeap::new(),
            endpoints: [client, server],
            lanes: [Lane::default(), Lane::default()],
            delays,
            generations: [[0; 2]; 2],
            rng,
            apps: Apps {
                request: scenario.request.clone(),
                response: scenario.response.clone(),
                request_bytes,
                response_bytes,
                transactions: scenario.transactions,
                depth: scenario.depth,
                issued: 0,
                completed: 0,
                starts: Vec::new(),
                client_received: 0,
                server_received: 0,
                server_backlog: 0,
                server_answering: false,
                client_waiting_think: false,
                closed: false,
            },
            result: RunResult {
                captured: Vec::new(),
                transactions: Vec::new(),
                stalls: Vec::new(),
                holds: Vec::new(),
                delayed_acks: Vec::new(),
                segments_sent: 0,
                end_time: 0,
                completed: false,
                client_mss: 0,
                server_mss: 0,
                events: 0,
            },
            record_capture,
            established: [false; 2],
        }
    }

    fn schedule(&mut self, time: Nanos, event: Event) {
        self.order += 1;
        self.queue.push(Reverse(Queued {
            time,
            order: self.order,
            event,
        }));
    }

    /// Runs the scenario to its end and returns what happened.
    pub fn run(mut self) -> RunResult {
        let client = &self.scenario.client;
        let server = &self.scenario.server;
        let timestamps = client.profile.timestamps;
        let syn = self.endpoints[CLIENT].syn(0, client.announced_mss, timestamps, false);
        self.transmit(syn);
        while let Some(Reverse(next)) = self.queue.pop() {
            if next.time > MAX_SIM_TIME || self.result.events >= MAX_EVENTS {
                break;
            }
            self.now = next.time;
            self.result.events += 1;
            match next.event {
                Event::Arrive(segment) => self.arrive(segment, server.announced_mss),
                Event::DelayedAck { side, generation } => {
                    if generation == self.generations[side][DELACK] {
                        let mut out = Output::default();
                        self.endpoints[side].delayed_ack_timer(self.now, &mut out);
                        self.apply(side, out);
                    }
                }
                Event::Rto { side, generation } => {
                    if generation == self.generations[side][RTO] {
                        let mut out = Output::default();
                        self.endpoints[side].retransmission_timeout(self.now, &mut out);
                        self.apply(side, out);
                    }
                }
                Event::CorkFlush { side } => {
                    let mut out = Output::default();
                    self.endpoints[side].cork_flush(self.now, &mut out);
                    self.apply(side, out);
                }
                Event::HostQueueDrained { side } => {
                    let mut out = Output::default();
                    self.endpoints[side].try_send(self.now, None, &mut out);
                    self.apply(side, out);
                }
                Event::AppWrite { side } => self.app_write(side),
                Event::WriteRest { side, writes } => self.write_rest(side, writes),
            }
        }
        self.result.end_time = self.now;
        self.result.completed = self.apps.completed == self.apps.transactions;
        self.result.client_mss = self.endpoints[CLIENT].send_mss;
        self.result.server_mss = self.endpoints[SERVER].send_mss;
        self.mark_stalled_transactions();
        self.result
    }

    fn arrive(&mut self, segment: WireSegment, server_mss: u32) {
        let to = 1 - segment.from;
        if segment.syn {
            self.handshake(segment, server_mss);
            return;
        }
        if !self.established[to] {
            // The third handshake segment, or data that overtook it: establish now.
            self.established[to] = true;
        }
        let mut out = Output::default();
        self.endpoints[to].receive(self.now, &segment, &mut out);
        self.apply(to, out);
    }

    fn handshake(&mut self, segment: WireSegment, server_mss: u32) {
        let client_mss = self.scenario.client.announced_mss;
        let timestamps =
            self.scenario.client.profile.timestamps && self.scenario.server.profile.timestamps;
        if segment.from == CLIENT {
            // SYN at the server: answer SYN-ACK.
            if let Some((tsval, _)) = segment.timestamps {
                self.endpoints[SERVER].note_peer_tsval(tsval);
            }
            self.endpoints[SERVER].establish(server_mss, client_mss, timestamps);
            let with_ts = timestamps;
            let synack = self.endpoints[SERVER].syn(self.now, server_mss, with_ts, true);
            self.transmit(synack);
        } else {
            // SYN-ACK at the client: ACK it and start the application.
            if let Some((tsval, _)) = segment.timestamps {
                self.endpoints[CLIENT].note_peer_tsval(tsval);
            }
            self.endpoints[CLIENT].establish(client_mss, server_mss, timestamps);
            self.established[CLIENT] = true;
            let mut out = Output::default();
            let mut ack = self.endpoints[CLIENT].syn(self.now, client_mss, timestamps, true);
            ack.syn = false;
            ack.seq = 1;
            ack.mss_option = None;
            ack.window_scale = None;
            ack.window = crate::endpoint::RECEIVE_WINDOW;
            out.segments.push(ack);
            self.apply(CLIENT, out);
            let first = self.apps.depth.min(self.apps.transactions);
            for _ in 0..first {
                self.issue_request();
            }
        }
    }

    /// Carries out an endpoint's output: sends its segments, arms its timers, and lets
    /// the applications react to delivered data.
    fn apply(&mut self, side: usize, out: Output) {
        for hold in &out.released {
            self.record_hold(side, hold);
        }
        for segment in out.segments {
            self.transmit(segment);
        }
        if out.autocorked {
            let drained = self.endpoints[side].data_in_host_until.max(self.now);
            self.schedule(drained, Event::HostQueueDrained { side });
        }
        if let Some(at) = out.delack_at {
            self.generations[side][DELACK] += 1;
            let generation = self.generations[side][DELACK];
            self.schedule(at, Event::DelayedAck { side, generation });
        }
        if let Some(at) = out.rto_at {
            self.generations[side][RTO] += 1;
            if at != Nanos::MAX {
                let generation = self.generations[side][RTO];
                self.schedule(at, Event::Rto { side, generation });
            }
        }
        if let Some(at) = out.cork_flush_at {
            self.schedule(at, Event::CorkFlush { side });
        }
        if out.delivered > 0 {
            if side == CLIENT {
                self.client_received(out.delivered);
            } else {
                self.server_received(out.delivered);
            }
        }
        if out.peer_closed && side == SERVER {
            let mut out = Output::default();
            self.endpoints[SERVER].app_close(self.now, &mut out);
            self.apply(SERVER, out);
        }
    }

    fn record_hold(&mut self, side: usize, hold: &crate::endpoint::ReleasedHold) {
        let reason = hold.reason.name();
        self.result.holds.push(TruthHold {
            side: side_name(side),
            reason,
            start: secs(hold.since),
            end: secs(hold.released),
            bytes: hold.bytes,
            released_by_delayed_ack: hold.released_by_delayed_ack.map(secs),
        });
        let Some(ack_delay) = hold.released_by_delayed_ack else {
            return;
        };
        let class = match hold.reason {
            HoldReason::Nagle => "nagle-delayed-ack",
            HoldReason::CongestionWindow | HoldReason::ReceiveWindow => "delayed-ack",
            HoldReason::Cork | HoldReason::Autocork => return,
        };
        let at_capture = self.capture_time_of_departure(side, hold.released);
        self.result.stalls.push(TruthStall {
            class,
            holder: side_name(side),
            delayer: side_name(1 - side),
            hold_start: secs(hold.since),
            released: secs(hold.released),
            released_at_capture: secs(at_capture),
            ack_delay: secs(ack_delay),
            bytes: hold.bytes,
            released_nanos: hold.released,
            released_at_capture_nanos: at_capture,
            ack_delay_nanos: ack_delay,
            holder_side: side,
        });
    }

    /// When a segment leaving `side` at `sent` passes the capture point (no queueing).
    fn capture_time_of_departure(&self, side: usize, sent: Nanos) -> Nanos {
        let f = self.scenario.capture.fraction();
        let share = if side == CLIENT { f } else { 1.0 - f };
        sent + (self.delays[side] as f64 * share) as Nanos
    }

    /// Puts a segment on the link: serialization, delay, jitter, loss; and the capture.
    fn transmit(&mut self, segment: WireSegment) {
        let from = segment.from;
        if let Some(delay) = segment.ack_delay {
            let endpoint_side = from;
            self.result.delayed_acks.push(TruthDelayedAck {
                side: side_name(endpoint_side),
                data_arrived: secs(self.now - delay),
                sent: secs(self.now),
                delay: secs(delay),
            });
        }
        self.result.segments_sent += 1;
        let bytes = FRAME_OVERHEAD
            + u64::from(segment.len)
            + if segment.timestamps.is_some() { 12 } else { 0 };
        let serialization = (bytes as f64 * 8.0 / self.scenario.link.bandwidth_bps * 1e9) as Nanos;
        let lane = &mut self.lanes[from];
        let start = self.now.max(lane.free_at);
        let departed = start + serialization;
        lane.free_at = departed;
        if segment.len > 0 {
            self.endpoints[from].data_in_host_until = departed;
        }
        let jitter = if self.scenario.link.jitter_ms > 0.0 {
            (self.rng.unit() * self.scenario.link.jitter_ms * 1e6) as Nanos
        } else {
            0
        };
        let lost = self.scenario.link.loss > 0.0
            && !segment.syn
            && self.rng.unit() < self.scenario.link.loss;
        let arrival = (departed + self.delays[from] + jitter).max(self.lanes[from].last_arrival);
        let f = self.scenario.capture.fraction();
        let share = if from == CLIENT { f } else { 1.0 - f };
        // A lost packet is lost half way: only a capture point on the sender's half sees it.
        let seen = !lost || share < 0.5;
        if self.record_capture && seen {
            let time = start + ((arrival - start) as f64 * share) as Nanos;
            self.result.captured.push(Captured {
                time,
                segment: segment.clone(),
            });
        }
        if lost {
            return;
        }
        self.lanes[from].last_arrival = arrival;
        self.schedule(arrival, Event::Arrive(segment));
    }

    // ---- The applications. ----

    fn issue_request(&mut self) {
        if self.apps.issued >= self.apps.transactions {
            return;
        }
        self.apps.issued += 1;
        self.apps.starts.push(self.now);
        let writes = self.apps.request.clone();
        self.write_message(CLIENT, &writes);
    }

    fn write_message(&mut self, side: usize, writes: &[u32]) {
        let options = self.endpoints[side].options;
        let marked: Vec<(u32, bool)> = writes
            .iter()
            .enumerate()
            .map(|(i, &bytes)| {
                (
                    bytes,
                    i + 1 < writes.len() && (options.cork || options.msg_more),
                )
            })
            .collect();
        self.write_rest(side, marked);
    }

    /// Performs a message's writes: all at once, or the first now and the rest
    /// `write_gap` apart.
    fn write_rest(&mut self, side: usize, writes: Vec<(u32, bool)>) {
        let mut out = Output::default();
        let gap = self.scenario.write_gap;
        let split = if gap > 0 {
            1.min(writes.len())
        } else {
            writes.len()
        };
        for &(bytes, more) in &writes[..split] {
            self.endpoints[side].app_write(self.now, bytes, more, &mut out);
        }
        self.apply(side, out);
        if split < writes.len() {
            let rest = writes[split..].to_vec();
            self.schedule(self.now + gap, Event::WriteRest { side, writes: rest });
        }
    }

    fn client_received(&mut self, bytes: u64) {
        self.apps.client_received += bytes;
        while self.apps.completed < self.apps.issued
            && self.apps.client_received
                >= u64::from(self.apps.completed + 1) * self.apps.response_bytes
        {
            let index = self.apps.completed as usize;
            let start = self.apps.starts[index];
            self.result.transactions.push(Transaction {
                index: self.apps.completed,
                start: secs(start),
                end: secs(self.now),
                latency: secs(self.now - start),
                stalled: false,
                start_nanos: start,
                end_nanos: self.now,
            });
            self.apps.completed += 1;
            if self.apps.issued < self.apps.transactions {
                if self.scenario.client_think > 0 {
                    if !self.apps.client_waiting_think {
                        self.apps.client_waiting_think = true;
                        self.schedule(
                            self.now + self.scenario.client_think,
                            Event::AppWrite { side: CLIENT },
                        );
                    }
                } else {
                    self.issue_request();
                }
            }
        }
        if self.apps.completed == self.apps.transactions && !self.apps.closed {
            self.apps.closed = true;
            let mut out = Output::default();
            self.endpoints[CLIENT].app_close(self.now, &mut out);
            self.apply(CLIENT, out);
        }
    }

    fn server_received(&mut self, bytes: u64) {
        let before = self.apps.server_received / self.apps.request_bytes;
        self.apps.server_received += bytes;
        let after = self.apps.server_received / self.apps.request_bytes;
        self.apps.server_backlog += (after - before) as u32;
        self.serve_backlog();
    }

    fn serve_backlog(&mut self) {
        while self.apps.server_backlog > 0 && !self.apps.server_answering {
            if self.scenario.server_think > 0 {
                self.apps.server_answering = true;
                self.schedule(
                    self.now + self.scenario.server_think,
                    Event::AppWrite { side: SERVER },
                );
                return;
            }
            self.apps.server_backlog -= 1;
            let writes = self.apps.response.clone();
            self.write_message(SERVER, &writes);
        }
    }

    fn app_write(&mut self, side: usize) {
        if side == CLIENT {
            self.apps.client_waiting_think = false;
            while self.apps.issued < self.apps.transactions
                && self.apps.issued - self.apps.completed < self.apps.depth
            {
                self.issue_request();
            }
        } else {
            self.apps.server_answering = false;
            if self.apps.server_backlog > 0 {
                self.apps.server_backlog -= 1;
                let writes = self.apps.response.clone();
                self.write_message(SERVER, &writes);
            }
            self.serve_backlog();
        }
    }

    fn mark_stalled_transactions(&mut self) {
        for t in &mut self.result.transactions {
            t.stalled = self
                .result
                .stalls
                .iter()
                .any(|s| s.released_nanos > t.start_nanos && s.released_nanos <= t.end_nanos);
        }
    }
}

/// Addresses the simulated endpoints use in captures.
pub fn addresses() -> [SocketAddr; 2] {
    [
        "10.0.0.1:40000".parse().expect("valid"),
        "10.0.0.2:8000".parse().expect("valid"),
    ]
}

/// Turns a captured wire segment into the analyzer's [`Segment`].
pub fn to_segment(captured: &Captured, isn: [u32; 2]) -> Segment {
    let s = &captured.segment;
    let [client, server] = addresses();
    let (src, dst) = if s.from == CLIENT {
        (client, server)
    } else {
        (server, client)
    };
    let mut flags = 0;
    if s.syn {
        flags |= TcpFlags::SYN;
    }
    if s.fin {
        flags |= TcpFlags::FIN;
    }
    if s.ack_flag {
        flags |= TcpFlags::ACK;
    }
    if s.psh {
        flags |= TcpFlags::PSH;
    }
    let window = if s.syn {
        s.window.min(65_535) as u16
    } else {
        (s.window >> WINDOW_SCALE).min(65_535) as u16
    };
    Segment {
        time: captured.time,
        src,
        dst,
        seq: isn[s.from].wrapping_add(s.seq as u32),
        ack: if s.ack_flag {
            isn[1 - s.from].wrapping_add(s.ack as u32)
        } else {
            0
        },
        flags: TcpFlags(flags),
        window,
        payload_len: s.len,
        options: TcpOptions {
            mss: s.mss_option.map(|m| m.min(65_535) as u16),
            window_scale: s.window_scale,
            sack_permitted: s.syn,
            sack_blocks: 0,
            timestamps: s.timestamps,
        },
        tunnel: 0,
    }
}

/// The captured segments in capture order, as the analyzer's segments.
pub fn capture_segments(result: &RunResult, seed: u64) -> Vec<Segment> {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let isn = [rng.next_u64() as u32, rng.next_u64() as u32];
    let mut order: Vec<&Captured> = result.captured.iter().collect();
    order.sort_by_key(|c| c.time);
    order.iter().map(|c| to_segment(c, isn)).collect()
}
