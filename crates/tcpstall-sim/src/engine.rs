//! The discrete-event loop: two endpoints, the link between them ([`crate::link`]), the
//! applications on both ends (`apps`), the capture point ([`crate::capture`]),
//! and the ground truth of every hold, delayed ACK and gap ([`crate::truth`]).

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;

use serde::Serialize;

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos, Segment};
use tcpstall_core::side::{PerSide, Side};

use crate::capture::{self, CaptureRecords, Captured};
use crate::endpoint::{Endpoint, HoldReason, Output, WireSegment};
use crate::link::{FRAME_OVERHEAD, Link, Rng};
use crate::scenario::Scenario;
use crate::truth::{SentSegment, TruthGap, TruthInputs, WriteCause, WriteRecord};
pub use crate::truth::{TruthDelayedAck, TruthHold, TruthStall};
use crate::window::ReceiveBuffer;

pub use crate::capture::{addresses, to_segment};

pub const CLIENT: Side = Side::First;
pub const SERVER: Side = Side::Second;

/// Simulated time never passes this, and no run processes more events: every run ends.
const MAX_SIM_TIME: Nanos = 3_600 * 1_000_000_000;
const MAX_EVENTS: u64 = 200_000_000;
/// The gap threshold the truth labels gaps with (the analyzer's default `min_gap`).
pub const TRUTH_MIN_GAP: Nanos = 10 * NANOS_PER_MILLI;

#[derive(Clone, Debug)]
pub(crate) enum Event {
    Arrive(WireSegment),
    DelayedAck {
        side: Side,
        generation: u64,
    },
    Rto {
        side: Side,
        generation: u64,
    },
    Persist {
        side: Side,
        generation: u64,
    },
    CorkFlush {
        side: Side,
    },
    /// The side's data has left the host: autocorked writes may go.
    HostQueueDrained {
        side: Side,
    },
    /// The application's timer: think time over, or its period.
    AppWrite {
        side: Side,
    },
    /// The next writes of a message whose writes are spaced apart.
    WriteRest {
        side: Side,
        writes: Vec<(u32, bool)>,
    },
    /// A write of a send script is due.
    ScriptWrite {
        side: Side,
        bytes: u32,
        /// Sent with MSG_OOB.
        urgent: bool,
    },
    /// The application wakes to read.
    AppRead {
        side: Side,
    },
    /// The one-way client closes its end.
    AppClose {
        side: Side,
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

/// One application transaction: a request and its complete response, or for the
/// one-way patterns a message from its write until the server application has read it.
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
    /// The records of the capture file, in time order.
    pub captured: Vec<Captured>,
    pub transactions: Vec<Transaction>,
    pub stalls: Vec<TruthStall>,
    pub holds: Vec<TruthHold>,
    pub delayed_acks: Vec<TruthDelayedAck>,
    /// The true class of every gap in the capture (at the analyzer's default threshold).
    pub gaps: Vec<TruthGap>,
    pub segments_sent: u64,
    pub end_time: Nanos,
    pub completed: bool,
    pub client_mss: u32,
    pub server_mss: u32,
    pub events: u64,
    /// Window probes sent by persist timers, and windows of zero advertised.
    pub window_probes: u64,
    pub zero_windows: u64,
}

pub(crate) fn side_name(side: Side) -> &'static str {
    if side == CLIENT { "client" } else { "server" }
}

pub(crate) fn secs(n: Nanos) -> f64 {
    n as f64 / 1e9
}

/// What the applications do: see `apps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    RequestResponse,
    /// The client writes a message every period on its own clock.
    Periodic {
        period: Nanos,
    },
    /// The client writes every block at once; the server reads as it can.
    Stream,
    /// Both sides write what their scripts say when they say it; a transaction is one
    /// client write, until the server application has read it.
    Script,
    /// Both sides write a message at once (the server as it accepts), and each its next
    /// after reading the other's: neither waits for the other to finish.
    TwoWay,
}

/// The applications' state on both ends; how they act is `apps`' part of [`Simulation`].
pub(crate) struct Apps {
    pub shape: Shape,
    pub request: Vec<u32>,
    pub response: Vec<u32>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub transactions: u32,
    pub depth: u32,
    pub issued: u32,
    pub completed: u32,
    pub starts: Vec<Nanos>,
    pub client_received: u64,
    pub server_received: u64,
    /// Complete requests the server has not answered yet: when each arrived.
    pub server_backlog: VecDeque<Nanos>,
    pub server_answering: bool,
    pub client_waiting_think: bool,
    /// When the response the client last completed arrived.
    pub client_trigger: Nanos,
    pub closed: bool,
    /// For `script`: where each client write ends in the byte stream.
    pub script_ends: Vec<u64>,
    /// For `two-way`: messages the server has written.
    pub server_written: u32,
}

impl Apps {
    pub fn new(scenario: &Scenario) -> Apps {
        let shape = match scenario.pattern.as_str() {
            "periodic" => Shape::Periodic {
                period: scenario.period.max(1),
            },
            "stream" => Shape::Stream,
            "script" => Shape::Script,
            "two-way" => Shape::TwoWay,
            _ => Shape::RequestResponse,
        };
        Apps {
            shape,
            request: scenario.request.clone(),
            response: scenario.response.clone(),
            request_bytes: scenario.request.iter().map(|&b| u64::from(b)).sum(),
            response_bytes: scenario.response.iter().map(|&b| u64::from(b)).sum(),
            transactions: scenario.transactions,
            depth: scenario.depth,
            issued: 0,
            completed: 0,
            starts: Vec::new(),
            client_received: 0,
            server_received: 0,
            server_backlog: VecDeque::new(),
            server_answering: false,
            client_waiting_think: false,
            client_trigger: 0,
            closed: false,
            script_ends: scenario
                .client_script
                .iter()
                .scan(0u64, |end, &(_, bytes)| {
                    *end += u64::from(bytes);
                    Some(*end)
                })
                .collect(),
            server_written: 0,
        }
    }
}

/// The application's reader on one side.
#[derive(Default)]
pub(crate) struct ReadState {
    pub pending: bool,
    pub last_read: Option<Nanos>,
    /// Bytes the application has read in all.
    pub total: u64,
}

pub struct Simulation<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) now: Nanos,
    order: u64,
    queue: BinaryHeap<Reverse<Queued>>,
    pub(crate) endpoints: PerSide<Endpoint>,
    /// The path, shared with the other connections of a concurrent run.
    link: Rc<RefCell<Link>>,
    generations: PerSide<[u64; 3]>,
    rng: Rng,
    pub(crate) apps: Apps,
    pub(crate) result: RunResult,
    record_capture: bool,
    established: PerSide<bool>,
    /// Everything that passed the capture point, before the capture made its records.
    passed: Vec<Captured>,
    sent: Vec<SentSegment>,
    pub(crate) writes: PerSide<Vec<WriteRecord>>,
    pub(crate) reads: PerSide<ReadState>,
}

const DELACK: usize = 0;
const RTO: usize = 1;
const PERSIST: usize = 2;

impl<'a> Simulation<'a> {
    pub fn new(scenario: &'a Scenario, record_capture: bool) -> Simulation<'a> {
        let link = Link::new(&scenario.link, scenario.capture.fraction());
        Simulation::on_link(scenario, record_capture, Rc::new(RefCell::new(link)), 0)
    }

    /// One connection of several on a shared `link`; `index` varies its seed (timer
    /// phases, jitter) from the others'.
    pub fn on_link(
        scenario: &'a Scenario,
        record_capture: bool,
        link: Rc<RefCell<Link>>,
        index: u64,
    ) -> Simulation<'a> {
        let mut rng = Rng::new(scenario.link.seed.wrapping_add(index));
        let phase = |rng: &mut Rng| (rng.unit() * 200e6) as Nanos;
        let endpoint = |side: Side, rng: &mut Rng| {
            let config = if side == CLIENT {
                &scenario.client
            } else {
                &scenario.server
            };
            let mut endpoint = Endpoint::new(
                side,
                config.profile.clone(),
                config.options,
                phase(rng),
                ReceiveBuffer::new(config.reader.rcvbuf, config.reader.is_eager()),
            );
            endpoint.send_buffer = config.sndbuf.map(u64::from);
            endpoint
        };
        let client = endpoint(CLIENT, &mut rng);
        let server = endpoint(SERVER, &mut rng);
        Simulation {
            scenario,
            now: 0,
            order: 0,
            queue: BinaryHeap::new(),
            endpoints: PerSide::new(client, server),
            link,
            generations: PerSide::default(),
            rng,
            apps: Apps::new(scenario),
            result: RunResult {
                captured: Vec::new(),
                transactions: Vec::new(),
                stalls: Vec::new(),
                holds: Vec::new(),
                delayed_acks: Vec::new(),
                gaps: Vec::new(),
                segments_sent: 0,
                end_time: 0,
                completed: false,
                client_mss: 0,
                server_mss: 0,
                events: 0,
                window_probes: 0,
                zero_windows: 0,
            },
            record_capture,
            established: PerSide::default(),
            passed: Vec::new(),
            sent: Vec::new(),
            writes: PerSide::default(),
            reads: PerSide::default(),
        }
    }

    pub(crate) fn schedule(&mut self, time: Nanos, event: Event) {
        self.order += 1;
        self.queue.push(Reverse(Queued {
            time,
            order: self.order,
            event,
        }));
    }

    /// Runs the scenario to its end and returns what happened.
    pub fn run(mut self) -> RunResult {
        self.begin();
        while self.step() {}
        self.finish()
    }

    /// The client opens the connection.
    pub fn begin(&mut self) {
        let client = &self.scenario.client;
        let timestamps = client.profile.timestamps;
        let syn = self.endpoints[CLIENT].syn(0, client.announced_mss, timestamps, false);
        self.transmit(syn);
    }

    /// When the next event is due, if there is one within the run's limits.
    pub fn next_event_time(&self) -> Option<Nanos> {
        let Reverse(next) = self.queue.peek()?;
        (next.time <= MAX_SIM_TIME && self.result.events < MAX_EVENTS).then_some(next.time)
    }

    /// Processes the next event; false when the run is over.
    pub fn step(&mut self) -> bool {
        if self.next_event_time().is_none() {
            return false;
        }
        let Some(Reverse(next)) = self.queue.pop() else {
            return false;
        };
        let server_mss = self.scenario.server.announced_mss;
        {
            self.now = next.time;
            self.result.events += 1;
            match next.event {
                Event::Arrive(segment) => self.arrive(segment, server_mss),
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
                Event::Persist { side, generation } => {
                    if generation == self.generations[side][PERSIST] {
                        let mut out = Output::default();
                        self.endpoints[side].persist_timer(self.now, &mut out);
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
                Event::AppWrite { side } => self.app_timer(side),
                Event::WriteRest { side, writes } => self.write_rest(side, writes),
                Event::AppRead { side } => self.app_read(side),
                Event::ScriptWrite {
                    side,
                    bytes,
                    urgent,
                } => self.script_write(side, bytes, urgent),
                Event::AppClose { side } => self.close(side, WriteCause::OwnClock),
            }
        }
        true
    }

    /// The run is over: what happened.
    pub fn finish(mut self) -> RunResult {
        self.result.end_time = self.now;
        self.result.completed = self.apps.completed == self.apps.transactions;
        self.result.client_mss = self.endpoints[CLIENT].send_mss;
        self.result.server_mss = self.endpoints[SERVER].send_mss;
        self.finish_capture();
        self.mark_stalled_transactions();
        self.result
    }

    /// The capture point makes its records; the truth names every gap in them.
    fn finish_capture(&mut self) {
        if !self.record_capture {
            return;
        }
        let records: CaptureRecords = capture::finish(
            std::mem::take(&mut self.passed),
            self.scenario.capture,
            self.scenario.capture_offload,
            self.scenario.capture_miss,
            self.scenario.capture_clock,
            self.scenario.link.seed,
        );
        let mut seen_at = std::collections::HashMap::new();
        for c in &records.made {
            seen_at.insert(c.segment.id, c.time);
        }
        for stall in &mut self.result.stalls {
            if let Some(&t) = seen_at.get(&stall.segment_id) {
                stall.released_at_capture_nanos = t;
                stall.released_at_capture = secs(t);
            }
        }
        self.result.gaps = TruthInputs {
            records: &records,
            sent: &self.sent,
            writes: &self.writes,
            min_gap: TRUTH_MIN_GAP,
            bare_transit: TruthInputs::bare_transits(&records),
        }
        .gaps();
        self.result.captured = records.kept;
    }

    fn arrive(&mut self, segment: WireSegment, server_mss: u32) {
        let to = segment.from.other();
        if segment.syn {
            self.handshake(segment, server_mss);
            return;
        }
        if !self.established[to] {
            // The third handshake segment, or data that overtook it: establish now.
            self.established[to] = true;
            if to == SERVER {
                self.server_accepted();
            }
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
            self.endpoints[SERVER].establish(server_mss, client_mss, timestamps, segment.window);
            let synack = self.endpoints[SERVER].syn(self.now, server_mss, timestamps, true);
            self.transmit(synack);
        } else {
            // SYN-ACK at the client: ACK it and start the application.
            if let Some((tsval, _)) = segment.timestamps {
                self.endpoints[CLIENT].note_peer_tsval(tsval);
            }
            self.endpoints[CLIENT].establish(client_mss, server_mss, timestamps, segment.window);
            self.established[CLIENT] = true;
            let mut out = Output::default();
            let mut ack = self.endpoints[CLIENT].syn(self.now, client_mss, timestamps, true);
            ack.syn = false;
            ack.seq = 1;
            ack.mss_option = None;
            ack.window_scale = None;
            ack.window = self.endpoints[CLIENT].current_window();
            out.segments.push(ack);
            self.apply(CLIENT, out);
            self.start_applications();
        }
    }

    /// Carries out an endpoint's output: sends its segments, arms its timers, and lets
    /// the application read what arrived.
    pub(crate) fn apply(&mut self, side: Side, out: Output) {
        let first_id = self.result.segments_sent + 1;
        for hold in &out.released {
            self.record_hold(side, hold, first_id + hold.segment_index as u64);
        }
        for segment in out.segments {
            self.transmit(segment);
        }
        if out.autocorked {
            let drained = self.endpoints[side].data_in_host_until.max(self.now);
            self.schedule(drained, Event::HostQueueDrained { side });
        }
        if let Some(at) = out.delack_at {
            self.rearm(side, DELACK, at);
        }
        if let Some(at) = out.rto_at {
            self.rearm(side, RTO, at);
        }
        if let Some(at) = out.persist_at {
            self.rearm(side, PERSIST, at);
        }
        if let Some(at) = out.cork_flush_at {
            self.schedule(at, Event::CorkFlush { side });
        }
        if out.delivered > 0 {
            self.data_queued(side);
        }
        if out.peer_closed && side == SERVER {
            self.close(SERVER, WriteCause::Reply { arrived: self.now });
        }
    }

    fn rearm(&mut self, side: Side, timer: usize, at: Nanos) {
        self.generations[side][timer] += 1;
        if at != Nanos::MAX {
            let generation = self.generations[side][timer];
            let event = match timer {
                DELACK => Event::DelayedAck { side, generation },
                RTO => Event::Rto { side, generation },
                _ => Event::Persist { side, generation },
            };
            self.schedule(at, event);
        }
    }

    fn record_hold(&mut self, side: Side, hold: &crate::endpoint::ReleasedHold, id: u64) {
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
            HoldReason::CongestionWindow | HoldReason::ReceiveWindow | HoldReason::SendBuffer => {
                "delayed-ack"
            }
            HoldReason::PeerWindow | HoldReason::Cork | HoldReason::Autocork => return,
        };
        let at_capture = self.capture_time_of_departure(side, hold.released);
        self.result.stalls.push(TruthStall {
            class,
            holder: side_name(side),
            delayer: side_name(side.other()),
            hold_start: secs(hold.since),
            released: secs(hold.released),
            released_at_capture: secs(at_capture),
            ack_delay: secs(ack_delay),
            bytes: hold.bytes,
            released_nanos: hold.released,
            released_at_capture_nanos: at_capture,
            ack_delay_nanos: ack_delay,
            holder_side: side,
            segment_id: id,
        });
    }

    /// When a segment leaving `side` at `sent` passes the capture point on an idle path
    /// (replaced by the recorded time when the capture saw it).
    fn capture_time_of_departure(&self, side: Side, sent: Nanos) -> Nanos {
        let link = self.link.borrow();
        sent + (link.delays[side] as f64 * link.share_to_capture(side)) as Nanos
    }

    /// Puts a segment on the link, and records what the capture point sees of it.
    pub(crate) fn transmit(&mut self, mut segment: WireSegment) {
        let from = segment.from;
        segment.id = self.result.segments_sent + 1;
        if self.record_capture {
            self.sent.push(SentSegment {
                from,
                kind: segment.kind,
                ack_delay: segment.ack_delay,
                window: segment.window,
            });
        }
        if segment.kind == crate::endpoint::SegmentKind::WindowProbe {
            self.result.window_probes += 1;
        }
        if segment.window == 0 && !segment.syn {
            self.result.zero_windows += 1;
        }
        if let Some(delay) = segment.ack_delay {
            self.result.delayed_acks.push(TruthDelayedAck {
                side: side_name(from),
                data_arrived: secs(self.now - delay),
                sent: secs(self.now),
                delay: secs(delay),
            });
        }
        self.result.segments_sent += 1;
        let bytes = FRAME_OVERHEAD
            + u64::from(segment.len)
            + if segment.timestamps.is_some() { 12 } else { 0 };
        let transit =
            self.link
                .borrow_mut()
                .carry(from, self.now, bytes, segment.syn, &mut self.rng);
        if segment.len > 0 {
            self.endpoints[from].data_in_host_until = transit.departed_host;
        }
        if self.record_capture
            && let Some(time) = transit.captured_at
        {
            let routers_passed =
                (self.link.borrow().share_to_capture(from) * capture::ROUTERS).round() as u8;
            self.passed.push(Captured {
                time,
                segment: segment.clone(),
                merged: 1,
                ttl: self.endpoints[from].profile.initial_ttl - routers_passed,
            });
        }
        if let Some(arrival) = transit.arrival {
            self.schedule(arrival, Event::Arrive(segment));
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

/// The captured segments in capture order, as the analyzer's segments.
pub fn capture_segments(result: &RunResult, seed: u64) -> Vec<Segment> {
    let isn = capture::initial_sequence_numbers(seed);
    result
        .captured
        .iter()
        .map(|c| capture::to_segment(c, isn))
        .collect()
}
