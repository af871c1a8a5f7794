//! The two applications: a client that writes each request as the scenario says and
//! waits for the reply (keeping `depth` requests in flight), and a server that answers
//! each complete request with the scenario's response writes. Both set the scenario's
//! socket options; every read has a timeout and every run a time limit.

use std::io::{ErrorKind, IoSlice, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use socket2::{Domain, SockRef, Socket, Type};
use tcpstall_sim::scenario::{Scenario, SocketOptions};

use crate::netns::Namespace;
use crate::{LabError, Result};

/// No single read waits longer: far above any delayed-ACK timer (at most 500 ms, RFC
/// 1122 4.2.3.2), Linux's 200 ms cork flush and the delay line's round trips.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest write the lab performs.
pub const MAX_WRITE: u32 = 16 << 20;

/// What the applications do, taken from a resolved scenario.
#[derive(Clone, Debug)]
pub struct Plan {
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
    /// TCP_MAXSEG each side sets, so the segment size is the scenario's on any path.
    pub client_mss: u32,
    pub server_mss: u32,
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
        Ok(Plan {
            request,
            response: scenario.response.clone(),
            gather_request,
            depth: scenario.depth,
            transactions: scenario.transactions,
            server_think: Duration::from_nanos(scenario.server_think.max(0) as u64),
            client_think: Duration::from_nanos(scenario.client_think.max(0) as u64),
            write_gap: Duration::from_nanos(scenario.write_gap.max(0) as u64),
            client: scenario.client.options,
            server: scenario.server.options,
            client_mss: scenario.client.announced_mss,
            server_mss: scenario.server.announced_mss,
        })
    }

    pub fn request_bytes(&self) -> u64 {
        self.request.iter().map(|&b| u64::from(b)).sum()
    }

    pub fn response_bytes(&self) -> u64 {
        self.response.iter().map(|&b| u64::from(b)).sum()
    }
}

/// One measured transaction: from the request's first write to the response's last byte.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub index: u32,
    /// Wall-clock (CLOCK_REALTIME) nanoseconds, comparable with capture timestamps.
    pub start: i64,
    pub end: i64,
    pub latency: Duration,
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

impl ClockAnchor {
    fn now() -> ClockAnchor {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        ClockAnchor {
            instant: Instant::now(),
            wall,
        }
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

/// Runs the client and the server to the end of the plan, or to `time_limit`.
pub fn run(plan: &Plan, place: &Placement, time_limit: Duration) -> Result<Exchange> {
    let deadline = Instant::now() + time_limit;
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
            run_client(plan, server_addr, deadline)
        });
        let client_result = client
            .join()
            .unwrap_or_else(|_| Err(LabError::Failed("the lab client panicked".into())));
        let server_result = server
            .join()
            .unwrap_or_else(|_| Err(LabError::Failed("the lab server panicked".into())));
        let exchange = client_result?;
        server_result?;
        Ok(exchange)
    })
}

fn enter(ns: Option<&Arc<Namespace>>) -> Result<()> {
    match ns {
        Some(ns) => ns.enter(),
        None => Ok(()),
    }
}

fn listen(place: &Placement, plan: &Plan) -> Result<TcpListener> {
    let addr = SocketAddr::new(place.server_ip, 0);
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)
        .map_err(|e| LabError::io("server socket", e))?;
    // TCP_MAXSEG on the listener is inherited by the accepted socket and announced in
    // the SYN-ACK.
    socket
        .set_tcp_mss(plan.server_mss)
        .map_err(|e| LabError::io("TCP_MAXSEG", e))?;
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

fn read_some(stream: &mut TcpStream, buf: &mut [u8], who: &str) -> Result<usize> {
    loop {
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(LabError::Failed(format!(
                    "the {who} waited {} s for data: the exchange is stuck",
                    READ_TIMEOUT.as_secs()
                )));
            }
            Err(e) => return Err(LabError::io(format!("{who} read"), e)),
        }
    }
}

fn serve(listener: &TcpListener, plan: &Plan, deadline: Instant) -> Result<()> {
    let (mut stream, _) = listener.accept().map_err(|e| LabError::io("accept", e))?;
    prepare(&stream, plan.server)?;
    let payload = payload_for(&plan.response);
    let request_bytes = plan.request_bytes().max(1);
    let mut buf = vec![0u8; 1 << 18];
    let mut received: u64 = 0;
    let mut answered: u64 = 0;
    while Instant::now() < deadline && answered < u64::from(plan.transactions) {
        let n = read_some(&mut stream, &mut buf, "server")?;
        if n == 0 {
            break;
        }
        rearm_quickack(&stream, plan.server)?;
        received += n as u64;
        while received >= (answered + 1) * request_bytes && answered < u64::from(plan.transactions)
        {
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
            answered += 1;
        }
    }
    // Wait (bounded) for the client to close first, so the server's FIN is not part of
    // any measured transaction.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = stream.read(&mut buf);
    Ok(())
}

fn run_client(plan: &Plan, server: SocketAddr, deadline: Instant) -> Result<Exchange> {
    let socket = Socket::new(Domain::for_address(server), Type::STREAM, None)
        .map_err(|e| LabError::io("client socket", e))?;
    socket
        .set_tcp_mss(plan.client_mss)
        .map_err(|e| LabError::io("TCP_MAXSEG", e))?;
    socket
        .connect_timeout(&server.into(), READ_TIMEOUT)
        .map_err(|e| LabError::io(format!("connect {server}"), e))?;
    let mut stream: TcpStream = socket.into();
    prepare(&stream, plan.client)?;
    let client = stream
        .local_addr()
        .map_err(|e| LabError::io("client address", e))?;
    let anchor = ClockAnchor::now();
    let began = Instant::now();
    let payload = payload_for(&plan.request);
    let response_bytes = plan.response_bytes().max(1);
    let total = plan.transactions;
    let mut starts: Vec<Instant> = Vec::with_capacity(total as usize);
    let mut done: Vec<Measured> = Vec::with_capacity(total as usize);
    let mut buf = vec![0u8; 1 << 18];
    let mut received: u64 = 0;
    let mut think_until: Option<Instant> = None;
    while (done.len() as u32) < total {
        if Instant::now() >= deadline {
            return Err(LabError::Failed(format!(
                "time limit reached after {} of {total} transactions",
                done.len()
            )));
        }
        if let Some(until) = think_until.take() {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        while (starts.len() as u32) < total && starts.len() - done.len() < plan.depth as usize {
            starts.push(Instant::now());
            write_message(
                &stream,
                &plan.request,
                plan.client,
                plan.gather_request,
                plan.write_gap,
                &payload,
            )?;
        }
        let n = read_some(&mut stream, &mut buf, "client")?;
        if n == 0 {
            return Err(LabError::Failed("the server closed the connection".into()));
        }
        rearm_quickack(&stream, plan.client)?;
        received += n as u64;
        let now = Instant::now();
        while done.len() < starts.len() && received >= (done.len() as u64 + 1) * response_bytes {
            let start = starts[done.len()];
            done.push(Measured {
                index: done.len() as u32,
                start: anchor.wall(start),
                end: anchor.wall(now),
                latency: now.saturating_duration_since(start),
            });
            if !plan.client_think.is_zero() {
                think_until = Some(now + plan.client_think);
            }
        }
    }
    let elapsed = began.elapsed();
    drop(stream);
    Ok(Exchange {
        transactions: done,
        client,
        server,
        elapsed,
    })
}
