//! The two applications: a client that writes each request as the scenario says and
//! waits for the reply (keeping `depth` requests in flight), or writes one-way messages
//! on its own clock or back to back; and a server that answers each complete request
//! with the scenario's response writes, or only reads. Both set the scenario's socket
//! options and read as its readers say; every read has a timeout and every run a time
//! limit.

use std::io::{ErrorKind, IoSlice};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use socket2::{Domain, SockRef, Socket, Type};
use tcpstall_sim::scenario::{Scenario, SocketOptions};

use crate::netns::Namespace;
use crate::reader::{PacedReader, READ_TIMEOUT, ReadPace};
use crate::{LabError, Result};

/// The largest write the lab performs.
pub const MAX_WRITE: u32 = 16 << 20;

/// What the client application does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Writes a request, reads its response (`depth` requests in flight).
    RequestResponse,
    /// Writes a message every period on its own clock; the server only reads.
    Periodic { period: Duration },
    /// Writes every message back to back, then closes; the server only reads.
    Stream,
}

impl Shape {
    pub fn is_one_way(self) -> bool {
        self != Shape::RequestResponse
    }
}

/// What the applications do, taken from a resolved scenario.
#[derive(Clone, Debug)]
pub struct Plan {
    pub shape: Shape,
    pub request: Vec<u32>,
    pub response: Vec<u32>,
    /// The request's writes go out in one writev/sendmsg call.
    pub gather_request: bool,
    pub depth: u32,
    pub transactions: u32,
    pub server_think: Duration,
    pub client_think: Duration,
    /// Time between the writes of one message (zero: back to back).
    pub write_gap: Duration,
    pub client: SocketOptions,
    pub server: SocketOptions,
    /// How each application reads.
    pub client_reader: ReadPace,
    pub server_reader: ReadPace,
    /// TCP_MAXSEG each side sets, so the segment size is the scenario's on any path.
    pub client_mss: u32,
    pub server_mss: u32,
    /// Client and server pairs running the plan at once (a load test's clients).
    pub connections: u32,
}

impl Plan {
    pub fn from_scenario(scenario: &Scenario) -> Result<Plan> {
        let mut request = scenario.request.clone();
        let gather_request = scenario.pattern == "writev";
        // "writev": the one-write request, handed over as two pieces in one call.
        if gather_request && request.len() == 1 && request[0] >= 2 {
            let first = request[0] / 2;
            request = vec![first, request[0] - first];
        }
        if request
            .iter()
            .chain(&scenario.response)
            .any(|&b| b > MAX_WRITE)
        {
            return Err(LabError::Unsupported(format!(
                "the lab writes at most {} MiB per call",
                MAX_WRITE >> 20
            )));
        }
        if scenario.pattern == "script" {
            return Err(LabError::Unsupported(
                "the lab does not run send scripts (pattern \"script\")".into(),
            ));
        }
        if scenario.pattern == "two-way" {
            return Err(LabError::Unsupported(
                "the lab does not run two-way exchanges (pattern \"two-way\")".into(),
            ));
        }
        if scenario.client.sndbuf.is_some() || scenario.server.sndbuf.is_some() {
            return Err(LabError::Unsupported(
                "the lab does not set SO_SNDBUF (`sndbuf`)".into(),
            ));
        }
        if scenario.connections > MAX_CONNECTIONS {
            return Err(LabError::Unsupported(format!(
                "the lab runs at most {MAX_CONNECTIONS} connections at once"
            )));
        }
        let nanos = |n: i64| Duration::from_nanos(n.max(0) as u64);
        let shape = match scenario.pattern.as_str() {
            "periodic" => Shape::Periodic {
                period: nanos(scenario.period).max(Duration::from_micros(1)),
            },
            "stream" => Shape::Stream,
            _ => Shape::RequestResponse,
        };
        Ok(Plan {
            shape,
            request,
            response: scenario.response.clone(),
            gather_request,
            depth: scenario.depth,
            transactions: scenario.transactions,
            server_think: nanos(scenario.server_think),
            client_think: nanos(scenario.client_think),
            write_gap: nanos(scenario.write_gap),
            client: scenario.client.options,
            server: scenario.server.options,
            client_reader: ReadPace::from_scenario(&scenario.client.reader),
            server_reader: ReadPace::from_scenario(&scenario.server.reader),
            client_mss: scenario.client.announced_mss,
            server_mss: scenario.server.announced_mss,
            connections: scenario.connections,
        })
    }

    /// The reader whose read ends a transaction: the client's, or (one-way) the server's.
    pub fn ending_reader(&self) -> ReadPace {
        if self.shape.is_one_way() {
            self.server_reader
        } else {
            self.client_reader
        }
    }

    pub fn request_bytes(&self) -> u64 {
        self.request.iter().map(|&b| u64::from(b)).sum()
    }

    /// What a transaction carries back: nothing in a one-way pattern.
    pub fn response_bytes(&self) -> u64 {
        if self.shape.is_one_way() {
            0
        } else {
            self.response.iter().map(|&b| u64::from(b)).sum()
        }
    }
}

/// One measured transaction: from the request's first write to the response's last byte
/// read by the client (one-way: to the message's last byte read by the server).
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub index: u32,
    /// Wall-clock (CLOCK_REALTIME) nanoseconds, comparable with capture timestamps.
    pub start: i64,
    pub end: i64,
    pub latency: Duration,
    /// The client's port of the connection it ran on, when the lab opened that connection
    /// (with several connections at once, which of them a capture's packets belong to).
    pub client_port: Option<u16>,
}

/// What one exchange produced.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub transactions: Vec<Measured>,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub elapsed: Duration,
}

/// A pair of clocks read together, to turn `Instant`s into wall-clock nanoseconds.
#[derive(Clone, Copy)]
struct ClockAnchor {
    instant: Instant,
    wall: i64,
}

/// Reads of the two clocks an anchor takes at most, keeping the pair read closest together.
const ANCHOR_READS: usize = 16;

impl ClockAnchor {
    /// The two clocks read together: of several reads, the wall clock between the two
    /// `Instant`s closest together, so a thread the host stopped between two reads (under
    /// load, for milliseconds) does not move every transaction's stamps off the capture's.
    fn now() -> ClockAnchor {
        let mut best: Option<(Duration, ClockAnchor)> = None;
        for _ in 0..ANCHOR_READS {
            let before = Instant::now();
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64);
            let after = Instant::now();
            let spread = after.saturating_duration_since(before);
            if best.as_ref().is_none_or(|(s, _)| spread < *s) {
                let instant = before + spread / 2;
                best = Some((spread, ClockAnchor { instant, wall }));
            }
        }
        best.map_or_else(
            || ClockAnchor {
                instant: Instant::now(),
                wall: 0,
            },
            |(_, anchor)| anchor,
        )
    }
    fn wall(&self, at: Instant) -> i64 {
        self.wall + at.saturating_duration_since(self.instant).as_nanos() as i64
    }
}

/// Where the two applications run.
pub struct Placement<'a> {
    pub client_ns: Option<&'a Arc<Namespace>>,
    pub server_ns: Option<&'a Arc<Namespace>>,
    pub server_ip: IpAddr,
}

/// What the client saw: when each transaction started and, with responses, ended.
struct ClientRun {
    client: SocketAddr,
    starts: Vec<Instant>,
    ends: Vec<Instant>,
}

/// Connections one lab run opens at most: two threads each, on a machine of a few cores.
pub const MAX_CONNECTIONS: u32 = 64;

/// Runs the plan's connections at once, each a client and a server of its own, and
/// gathers their transactions, connection by connection.
pub fn run_concurrent(plan: &Plan, place: &Placement, time_limit: Duration) -> Result<Exchange> {
    if plan.connections <= 1 {
        return run(plan, place, time_limit);
    }
    let results: Vec<Result<Exchange>> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..plan.connections)
            .map(|_| scope.spawn(|| run(plan, place, time_limit)))
            .collect();
        runs.into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(LabError::Failed("a lab connection panicked".into())))
            })
            .collect()
    });
    let mut exchanges = results.into_iter();
    let mut merged = exchanges.next().expect("two connections or more")?;
    for exchange in exchanges {
        let exchange = exchange?;
        let offset = merged.transactions.len() as u32;
        merged
            .transactions
            .extend(exchange.transactions.into_iter().map(|mut t| {
                t.index += offset;
                t
            }));
    }
    let first_start = merged.transactions.iter().map(|t| t.start).min();
    let last_end = merged.transactions.iter().map(|t| t.end).max();
    if let (Some(first), Some(last)) = (first_start, last_end) {
        merged.elapsed = Duration::from_nanos((last - first).max(0) as u64);
    }
    Ok(merged)
}

/// Runs the client and the server to the end of the plan, or to `time_limit`.
pub fn run(plan: &Plan, place: &Placement, time_limit: Duration) -> Result<Exchange> {
    let deadline = Instant::now() + time_limit;
    let anchor = ClockAnchor::now();
    let (port_tx, port_rx) = channel::<Result<SocketAddr>>();
    std::thread::scope(|scope| {
        let server = scope.spawn(move || {
            let listener = match enter(place.server_ns).and_then(|()| listen(place, plan)) {
                Ok(l) => l,
                Err(e) => {
                    let _ = port_tx.send(Err(LabError::Failed(e.to_string())));
                    return Err(e);
                }
            };
            let local = listener
                .local_addr()
                .map_err(|e| LabError::io("listener address", e))?;
            let _ = port_tx.send(Ok(local));
            serve(&listener, plan, deadline)
        });
        let client = scope.spawn(move || {
            let server_addr = port_rx
                .recv_timeout(READ_TIMEOUT)
                .map_err(|_| LabError::Failed("the lab server did not start".into()))??;
            enter(place.client_ns)?;
            run_client(plan, server_addr, deadline).map(|run| (server_addr, run))
        });
        let client_result = client
            .join()
            .unwrap_or_else(|_| Err(LabError::Failed("the lab client panicked".into())));
        let server_result = server
            .join()
            .unwrap_or_else(|_| Err(LabError::Failed("the lab server panicked".into())));
        let (server_addr, client_run) = client_result?;
        let server_ends = server_result?;
        let ends = if plan.shape.is_one_way() {
            server_ends
        } else {
            client_run.ends
        };
        if ends.len() < client_run.starts.len() {
            return Err(LabError::Failed(format!(
                "time limit reached after {} of {} transactions",
                ends.len(),
                plan.transactions
            )));
        }
        Ok(measured(
            anchor,
            &client_run.starts,
            &ends,
            client_run.client,
            server_addr,
        ))
    })
}

fn measured(
    anchor: ClockAnchor,
    starts: &[Instant],
    ends: &[Instant],
    client: SocketAddr,
    server: SocketAddr,
) -> Exchange {
    let transactions = starts
        .iter()
        .zip(ends)
        .enumerate()
        .map(|(i, (&start, &end))| Measured {
            index: i as u32,
            start: anchor.wall(start),
            end: anchor.wall(end),
            latency: end.saturating_duration_since(start),
            client_port: Some(client.port()),
        })
        .collect();
    let elapsed = match (starts.first(), ends.last()) {
        (Some(&first), Some(&last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    Exchange {
        transactions,
        client,
        server,
        elapsed,
    }
}

fn enter(ns: Option<&Arc<Namespace>>) -> Result<()> {
    match ns {
        Some(ns) => ns.enter(),
        None => Ok(()),
    }
}

/// SO_RCVBUF before the handshake, so the window scale fits the buffer.
fn set_receive_buffer(socket: &Socket, pace: ReadPace) -> Result<()> {
    if let Some(bytes) = pace.rcvbuf {
        socket
            .set_recv_buffer_size(bytes as usize)
            .map_err(|e| LabError::io("SO_RCVBUF", e))?;
    }
    Ok(())
}

fn listen(place: &Placement, plan: &Plan) -> Result<TcpListener> {
    let addr = SocketAddr::new(place.server_ip, 0);
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)
        .map_err(|e| LabError::io("server socket", e))?;
    // TCP_MAXSEG and SO_RCVBUF on the listener are inherited by the accepted socket and
    // shape the SYN-ACK (MSS option, window scale).
    set_mss(&socket, plan.server_mss)?;
    set_receive_buffer(&socket, plan.server_reader)?;
    socket
        .bind(&addr.into())
        .map_err(|e| LabError::io(format!("bind {addr}"), e))?;
    socket.listen(4).map_err(|e| LabError::io("listen", e))?;
    // accept(2) honours SO_RCVTIMEO: the server never waits forever for its client.
    socket
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| LabError::io("SO_RCVTIMEO", e))?;
    Ok(socket.into())
}

/// Linux refuses TCP_MAXSEG above MAX_TCP_WINDOW (32,767, do_tcp_setsockopt): a larger
/// MSS is left to the path (loopback's MTU of 65,536 gives 65,483 with timestamps).
const MAX_SETTABLE_MSS: u32 = 32_767;

fn set_mss(socket: &Socket, mss: u32) -> Result<()> {
    if mss > MAX_SETTABLE_MSS {
        return Ok(());
    }
    socket
        .set_tcp_mss(mss)
        .map_err(|e| LabError::io("TCP_MAXSEG", e))
}

/// Options set once on a connected socket.
fn prepare(stream: &TcpStream, options: SocketOptions) -> Result<()> {
    let sock = SockRef::from(stream);
    let fail = |what: &str, e| LabError::io(what.to_string(), e);
    sock.set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| fail("SO_RCVTIMEO", e))?;
    sock.set_write_timeout(Some(READ_TIMEOUT))
        .map_err(|e| fail("SO_SNDTIMEO", e))?;
    if options.nodelay {
        sock.set_tcp_nodelay(true)
            .map_err(|e| fail("TCP_NODELAY", e))?;
    }
    rearm_quickack(stream, options)
}

/// TCP_QUICKACK is not permanent: Linux clears it when the connection goes back to
/// delaying ACKs (tcp(7)), so the lab sets it again after every read.
fn rearm_quickack(stream: &TcpStream, options: SocketOptions) -> Result<()> {
    if options.quickack {
        SockRef::from(stream)
            .set_tcp_quickack(true)
            .map_err(|e| LabError::io("TCP_QUICKACK", e))?;
    }
    Ok(())
}

/// Writes one message as the scenario says: each write its own call, MSG_MORE on all but
/// the last, wrapped in TCP_CORK, or all in one gathering call.
fn write_message(
    stream: &TcpStream,
    writes: &[u32],
    options: SocketOptions,
    gather: bool,
    gap: Duration,
    payload: &[u8],
) -> Result<()> {
    let sock = SockRef::from(stream);
    if options.cork {
        sock.set_tcp_cork(true)
            .map_err(|e| LabError::io("TCP_CORK", e))?;
    }
    if gather {
        let slices: Vec<IoSlice> = writes
            .iter()
            .map(|&n| IoSlice::new(&payload[..n as usize]))
            .collect();
        let total: usize = writes.iter().map(|&n| n as usize).sum();
        let sent = sock
            .send_vectored(&slices)
            .map_err(|e| LabError::io("writev", e))?;
        if sent < total {
            send_all(&sock, &vec![b'x'; total - sent], 0)?;
        }
    } else {
        for (i, &n) in writes.iter().enumerate() {
            let last = i + 1 == writes.len();
            if i > 0 && !gap.is_zero() {
                std::thread::sleep(gap);
            }
            let flags = if options.msg_more && !last {
                libc::MSG_MORE
            } else {
                0
            };
            send_all(&sock, &payload[..n as usize], flags)?;
        }
    }
    if options.cork {
        sock.set_tcp_cork(false)
            .map_err(|e| LabError::io("TCP_CORK", e))?;
    }
    Ok(())
}

/// One request, written as the client's options and writes say.
fn write_request(plan: &Plan, stream: &TcpStream, payload: &[u8]) -> Result<()> {
    write_message(
        stream,
        &plan.request,
        plan.client,
        plan.gather_request,
        plan.write_gap,
        payload,
    )
}

/// Sends every byte; SO_SNDTIMEO bounds each call, and the loop ends when all is sent.
fn send_all(sock: &SockRef, mut data: &[u8], flags: libc::c_int) -> Result<()> {
    while !data.is_empty() {
        match sock.send_with_flags(data, flags) {
            Ok(0) => {
                return Err(LabError::Failed(
                    "the connection closed while sending".into(),
                ));
            }
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(LabError::io("send", e)),
        }
    }
    Ok(())
}

fn payload_for(writes: &[u32]) -> Vec<u8> {
    vec![b'x'; writes.iter().copied().max().unwrap_or(0) as usize]
}

/// Messages whose last byte `received` bytes cover, beyond the `done` already counted.
fn newly_complete(received: u64, message: u64, done: usize, total: u32) -> usize {
    let complete = (received / message.max(1)).min(u64::from(total)) as usize;
    complete.saturating_sub(done)
}

/// The server: answers each complete request, or (one-way) reads and notes when each
/// message was read whole. Returns those times (empty for request/response).
fn serve(listener: &TcpListener, plan: &Plan, deadline: Instant) -> Result<Vec<Instant>> {
    let (mut stream, _) = listener.accept().map_err(|e| LabError::io("accept", e))?;
    prepare(&stream, plan.server)?;
    let mut reader = PacedReader::new(plan.server_reader);
    let payload = payload_for(&plan.response);
    let request_bytes = plan.request_bytes();
    let mut buf = vec![0u8; 1 << 18];
    let mut received: u64 = 0;
    let mut done: usize = 0;
    let mut read_whole: Vec<Instant> = Vec::new();
    while Instant::now() < deadline && done < plan.transactions as usize {
        let n = reader.read(&mut stream, &mut buf, "server")?;
        if n == 0 {
            break;
        }
        rearm_quickack(&stream, plan.server)?;
        received += n as u64;
        for _ in 0..newly_complete(received, request_bytes, done, plan.transactions) {
            done += 1;
            if plan.shape.is_one_way() {
                read_whole.push(Instant::now());
                continue;
            }
            if !plan.server_think.is_zero() {
                std::thread::sleep(plan.server_think);
            }
            write_message(
                &stream,
                &plan.response,
                plan.server,
                false,
                plan.write_gap,
                &payload,
            )?;
        }
    }
    // Wait (bounded) for the client to close first, so the server's FIN is not part of
    // any measured transaction.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = std::io::Read::read(&mut stream, &mut buf);
    Ok(read_whole)
}

fn connect(plan: &Plan, server: SocketAddr) -> Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(server), Type::STREAM, None)
        .map_err(|e| LabError::io("client socket", e))?;
    set_mss(&socket, plan.client_mss)?;
    set_receive_buffer(&socket, plan.client_reader)?;
    socket
        .connect_timeout(&server.into(), READ_TIMEOUT)
        .map_err(|e| LabError::io(format!("connect {server}"), e))?;
    let stream: TcpStream = socket.into();
    prepare(&stream, plan.client)?;
    Ok(stream)
}

fn time_limit_reached(done: usize, total: u32) -> LabError {
    LabError::Failed(format!(
        "time limit reached after {done} of {total} transactions"
    ))
}

fn run_client(plan: &Plan, server: SocketAddr, deadline: Instant) -> Result<ClientRun> {
    let mut stream = connect(plan, server)?;
    let client = stream
        .local_addr()
        .map_err(|e| LabError::io("client address", e))?;
    let (starts, ends) = if plan.shape.is_one_way() {
        (send_one_way(plan, &stream, deadline)?, Vec::new())
    } else {
        request_response(plan, &mut stream, deadline)?
    };
    drop(stream);
    Ok(ClientRun {
        client,
        starts,
        ends,
    })
}

/// One-way: every message on the period's clock (or back to back), then the client's FIN.
fn send_one_way(plan: &Plan, stream: &TcpStream, deadline: Instant) -> Result<Vec<Instant>> {
    let payload = payload_for(&plan.request);
    let began = Instant::now();
    let mut starts = Vec::with_capacity(plan.transactions as usize);
    for i in 0..plan.transactions {
        if let Shape::Periodic { period } = plan.shape {
            let at = began + period * i;
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
        }
        if Instant::now() >= deadline {
            return Err(time_limit_reached(starts.len(), plan.transactions));
        }
        starts.push(Instant::now());
        write_request(plan, stream, &payload)?;
    }
    let _ = stream.shutdown(Shutdown::Write);
    Ok(starts)
}

/// Request/response: `depth` requests in flight, each ended by its response's last byte.
fn request_response(
    plan: &Plan,
    stream: &mut TcpStream,
    deadline: Instant,
) -> Result<(Vec<Instant>, Vec<Instant>)> {
    let mut reader = PacedReader::new(plan.client_reader);
    let payload = payload_for(&plan.request);
    let response_bytes = plan.response_bytes();
    let total = plan.transactions;
    let mut starts: Vec<Instant> = Vec::with_capacity(total as usize);
    let mut ends: Vec<Instant> = Vec::with_capacity(total as usize);
    let mut buf = vec![0u8; 1 << 18];
    let mut received: u64 = 0;
    let mut think_until: Option<Instant> = None;
    while (ends.len() as u32) < total {
        if Instant::now() >= deadline {
            return Err(time_limit_reached(ends.len(), total));
        }
        if let Some(until) = think_until.take() {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        while (starts.len() as u32) < total && starts.len() - ends.len() < plan.depth as usize {
            starts.push(Instant::now());
            write_request(plan, stream, &payload)?;
        }
        let n = reader.read(stream, &mut buf, "client")?;
        if n == 0 {
            return Err(LabError::Failed("the server closed the connection".into()));
        }
        rearm_quickack(stream, plan.client)?;
        received += n as u64;
        let now = Instant::now();
        let fresh = newly_complete(received, response_bytes, ends.len(), total)
            .min(starts.len() - ends.len());
        ends.extend(std::iter::repeat_n(now, fresh));
        if fresh > 0 && !plan.client_think.is_zero() {
            think_until = Some(now + plan.client_think);
        }
    }
    Ok((starts, ends))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_complete_on_their_last_byte() {
        assert_eq!(newly_complete(11, 12, 0, 10), 0);
        assert_eq!(newly_complete(12, 12, 0, 10), 1);
        assert_eq!(newly_complete(36, 12, 1, 10), 2);
        // Never past the plan's transactions, nor below what was already counted.
        assert_eq!(newly_complete(1000, 12, 5, 10), 5);
        assert_eq!(newly_complete(0, 12, 3, 10), 0);
    }
}
