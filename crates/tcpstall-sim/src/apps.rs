//! The applications on both ends: how they write (request and response, a client on its
//! own clock, a one-way stream) and how they read (at once, late, slowly, in pieces).
//!
//! Request/response: a transaction starts when the client writes a request and ends when
//! the whole response has been read by the client application. Two-way: both ends write
//! a message at once, and each its next after reading the other's; a transaction is the
//! client's message until it has read the server's of the same number. One-way patterns
//! (`periodic`, `stream`): a transaction is one message (or block), from its write until
//! the server application has read all of it; the server only acknowledges.

use tcpstall_core::side::Side;

use crate::endpoint::Output;
use crate::engine::{CLIENT, Event, SERVER, Shape, Simulation, Transaction, secs};
use crate::truth::{WriteCause, WriteRecord};

/// Reads a reader without a size limit takes in one call: all that is there.
const READ_ALL: u64 = u64::MAX;
/// Read calls one wake-up makes at most (a reader of one byte at a time is bounded).
const MAX_READS_PER_WAKEUP: u32 = 100_000;

impl Simulation<'_> {
    /// The connection is open: the client starts.
    pub(crate) fn start_applications(&mut self) {
        match self.apps.shape {
            Shape::RequestResponse | Shape::TwoWay => {
                let first = self.apps.depth.min(self.apps.transactions);
                for _ in 0..first {
                    self.issue_request(WriteCause::OwnClock);
                }
            }
            Shape::Periodic { period } => {
                self.issue_request(WriteCause::OwnClock);
                self.schedule(self.now + period, Event::AppWrite { side: CLIENT });
            }
            Shape::Script => {
                for side in [CLIENT, SERVER] {
                    let (script, urgent) = if side == CLIENT {
                        (&self.scenario.client_script, &self.scenario.client_urgent)
                    } else {
                        (&self.scenario.server_script, &self.scenario.server_urgent)
                    };
                    for (n, &(at, bytes)) in script.iter().enumerate() {
                        let at = at.max(self.now);
                        let urgent = urgent.contains(&n);
                        self.schedule(
                            at,
                            Event::ScriptWrite {
                                side,
                                bytes,
                                urgent,
                            },
                        );
                    }
                }
            }
            Shape::Stream => {
                while self.apps.issued < self.apps.transactions {
                    self.issue_request(WriteCause::OwnClock);
                }
                self.close(CLIENT, WriteCause::OwnClock);
            }
        }
    }

    /// The server has accepted the connection: a two-way server starts talking.
    pub(crate) fn server_accepted(&mut self) {
        if self.apps.shape == Shape::TwoWay {
            self.server_message(WriteCause::OwnClock);
        }
    }

    /// A two-way server writes its next message, if it has one left.
    fn server_message(&mut self, cause: WriteCause) {
        if self.apps.server_written >= self.apps.transactions {
            return;
        }
        self.apps.server_written += 1;
        let writes = self.apps.response.clone();
        self.write_message(SERVER, &writes, cause);
    }

    fn issue_request(&mut self, cause: WriteCause) {
        if self.apps.issued >= self.apps.transactions {
            return;
        }
        self.apps.issued += 1;
        self.apps.starts.push(self.now);
        let writes = self.apps.request.clone();
        self.write_message(CLIENT, &writes, cause);
    }

    fn write_message(&mut self, side: Side, writes: &[u32], cause: WriteCause) {
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
        self.write_some(side, marked, cause);
    }

    /// The rest of a message whose writes are `write_gap` apart: the application's timing.
    pub(crate) fn write_rest(&mut self, side: Side, writes: Vec<(u32, bool)>) {
        self.write_some(side, writes, WriteCause::OwnClock);
    }

    /// Performs a message's writes: all at once, or the first now and the rest
    /// `write_gap` apart.
    fn write_some(&mut self, side: Side, writes: Vec<(u32, bool)>, cause: WriteCause) {
        let mut out = Output::default();
        let gap = self.scenario.write_gap;
        let split = if gap > 0 {
            1.min(writes.len())
        } else {
            writes.len()
        };
        for &(bytes, more) in &writes[..split] {
            self.endpoints[side].app_write(self.now, bytes, more, &mut out);
            self.writes[side].push(WriteRecord {
                end: self.endpoints[side].written(),
                time: self.now,
                cause,
            });
        }
        self.apply(side, out);
        if split < writes.len() {
            let rest = writes[split..].to_vec();
            self.schedule(self.now + gap, Event::WriteRest { side, writes: rest });
        }
    }

    /// A scripted write is due.
    pub(crate) fn script_write(&mut self, side: Side, bytes: u32, urgent: bool) {
        if side == CLIENT {
            self.apps.issued += 1;
            self.apps.starts.push(self.now);
        }
        if !urgent {
            self.write_some(side, vec![(bytes, false)], WriteCause::OwnClock);
            return;
        }
        let mut out = Output::default();
        self.endpoints[side].app_write_urgent(self.now, bytes, &mut out);
        self.writes[side].push(WriteRecord {
            end: self.endpoints[side].written(),
            time: self.now,
            cause: WriteCause::OwnClock,
        });
        self.apply(side, out);
    }

    /// close(): the FIN follows the data written.
    pub(crate) fn close(&mut self, side: Side, cause: WriteCause) {
        self.writes[side].push(WriteRecord {
            end: self.endpoints[side].written() + 1,
            time: self.now,
            cause,
        });
        let mut out = Output::default();
        self.endpoints[side].app_close(self.now, &mut out);
        self.apply(side, out);
    }

    // ---- Reading. ----

    /// Data was queued for `side`'s application: it reads now, or wakes later.
    pub(crate) fn data_queued(&mut self, side: Side) {
        let reader = self.reader(side);
        if reader.is_eager() {
            self.app_read(side);
            return;
        }
        if self.reads[side].pending {
            return;
        }
        let earliest = self.reads[side]
            .last_read
            .map_or(0, |last| last + reader.read_interval);
        let at = (self.now + reader.read_delay).max(earliest);
        self.reads[side].pending = true;
        self.schedule(at, Event::AppRead { side });
    }

    fn reader(&self, side: Side) -> crate::scenario::Reader {
        if side == CLIENT {
            self.scenario.client.reader
        } else {
            self.scenario.server.reader
        }
    }

    /// The application reads: one call of at most `read_bytes` when its reads are paced,
    /// otherwise calls until nothing is left.
    pub(crate) fn app_read(&mut self, side: Side) {
        let reader = self.reader(side);
        self.reads[side].pending = false;
        let left = |total: u64| {
            reader
                .stop_after_bytes
                .map_or(READ_ALL, |stop| stop.saturating_sub(total))
        };
        if left(self.reads[side].total) == 0 {
            // The application no longer reads.
            return;
        }
        self.reads[side].last_read = Some(self.now);
        let mut calls = 0;
        loop {
            let limit = reader
                .read_bytes
                .map_or(READ_ALL, u64::from)
                .min(left(self.reads[side].total));
            if limit == 0 {
                return;
            }
            let mut out = Output::default();
            let took = self.endpoints[side].app_read(self.now, limit, &mut out);
            self.apply(side, out);
            if took == 0 {
                break;
            }
            self.reads[side].total += took;
            self.deliver(side, took);
            calls += 1;
            if reader.read_interval > 0 || calls >= MAX_READS_PER_WAKEUP {
                break;
            }
        }
        if self.endpoints[side].unread() > 0 && !self.reads[side].pending {
            self.reads[side].pending = true;
            let at = self.now + reader.read_interval.max(1);
            self.schedule(at, Event::AppRead { side });
        }
    }

    fn deliver(&mut self, side: Side, bytes: u64) {
        if side == CLIENT {
            self.client_received(bytes);
        } else {
            self.server_received(bytes);
        }
    }

    // ---- What each application does with what it read. ----

    fn client_received(&mut self, bytes: u64) {
        if !matches!(self.apps.shape, Shape::RequestResponse | Shape::TwoWay) {
            return;
        }
        self.apps.client_received += bytes;
        let arrived = self.endpoints[CLIENT].last_in_order_arrival;
        while self.apps.completed < self.apps.issued
            && self.apps.client_received
                >= u64::from(self.apps.completed + 1) * self.apps.response_bytes
        {
            self.complete_transaction();
            self.apps.client_trigger = arrived;
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
                    self.issue_request(WriteCause::Reply { arrived });
                }
            }
        }
        if self.apps.completed == self.apps.transactions && !self.apps.closed {
            self.apps.closed = true;
            self.close(CLIENT, WriteCause::Reply { arrived });
        }
    }

    fn complete_transaction(&mut self) {
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
    }

    fn server_received(&mut self, bytes: u64) {
        if self.apps.shape == Shape::Script {
            self.apps.server_received += bytes;
            while self.apps.completed < self.apps.issued
                && self.apps.script_ends[self.apps.completed as usize] <= self.apps.server_received
            {
                self.complete_transaction();
            }
            return;
        }
        let request = self.apps.request_bytes.max(1);
        let before = self.apps.server_received / request;
        self.apps.server_received += bytes;
        let after = self.apps.server_received / request;
        if !matches!(self.apps.shape, Shape::RequestResponse | Shape::TwoWay) {
            for _ in before..after {
                if self.apps.completed < self.apps.issued {
                    self.complete_transaction();
                }
            }
            return;
        }
        let arrived = self.endpoints[SERVER].last_in_order_arrival;
        for _ in before..after {
            self.apps.server_backlog.push_back(arrived);
        }
        self.serve_backlog();
    }

    fn serve_backlog(&mut self) {
        while !self.apps.server_backlog.is_empty() && !self.apps.server_answering {
            if self.scenario.server_think > 0 {
                self.apps.server_answering = true;
                self.schedule(
                    self.now + self.scenario.server_think,
                    Event::AppWrite { side: SERVER },
                );
                return;
            }
            self.answer_one();
        }
    }

    fn answer_one(&mut self) {
        if self.apps.shape == Shape::TwoWay {
            // Each of the client's messages read lets the server write its next.
            if let Some(arrived) = self.apps.server_backlog.pop_front() {
                self.server_message(WriteCause::Reply { arrived });
            }
            return;
        }
        if let Some(arrived) = self.apps.server_backlog.pop_front() {
            let writes = self.apps.response.clone();
            self.write_message(SERVER, &writes, WriteCause::Reply { arrived });
        }
    }

    /// The application's own timer fired: think time over, or the next period.
    pub(crate) fn app_timer(&mut self, side: Side) {
        if side == SERVER {
            self.apps.server_answering = false;
            self.answer_one();
            self.serve_backlog();
            return;
        }
        match self.apps.shape {
            Shape::Periodic { period } => {
                self.issue_request(WriteCause::OwnClock);
                let next = self.now + period;
                if self.apps.issued < self.apps.transactions {
                    self.schedule(next, Event::AppWrite { side: CLIENT });
                } else {
                    self.schedule(next, Event::AppClose { side: CLIENT });
                }
            }
            Shape::Stream | Shape::Script => {}
            Shape::RequestResponse | Shape::TwoWay => {
                self.apps.client_waiting_think = false;
                let arrived = self.apps.client_trigger;
                while self.apps.issued < self.apps.transactions
                    && self.apps.issued - self.apps.completed < self.apps.depth
                {
                    self.issue_request(WriteCause::Reply { arrived });
                }
            }
        }
    }
}
