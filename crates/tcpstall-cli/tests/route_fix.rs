//! The route fix `tcpstall analyze` offers (`quickack 1` on the delayed-ACK side's route
//! to its peer), run exactly as offered, in network namespaces of the test's own: a peer
//! on loopback (IPv4 and IPv6), a directly connected peer, and a peer behind a router.
//! Before it, two writes then a read wait for the delayed ACK (seed 002); after it,
//! `ip route get` shows `quickack 1` and they no longer wait.
//!
//! Needs root (namespaces, routes): ignored by default, run by .ci/run.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tcpstall_core::diagnosis::FixAction;
use tcpstall_lab::netns::{Namespace, Setup, ip};

mod common;

/// Transactions per exchange: Linux ACKs the first segments of a connection at once
/// (quick-ACK mode, up to 16 segments), so the stalls begin a few transactions in.
const TRANSACTIONS: usize = 16;
/// A round trip this long waited for a delayed ACK: Linux's timer is 40 ms
/// (TCP_DELACK_MIN), a round trip in these namespaces well under 1 ms.
const STALLED: Duration = Duration::from_millis(30);
/// A round trip this short did not.
const PROMPT: Duration = Duration::from_millis(10);
/// The request, written in two pieces, and the reply (seed 002's sizes).
const PIECE: usize = 6;
const REPLY: usize = 12;

/// How long `f` may take in another thread before the test gives up.
const LIMIT: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    // CAP_NET_ADMIN is bit 12 of the effective capabilities (linux/capability.h).
    common::effective_capabilities() & (1 << 12) != 0
}

/// Runs `f` on a thread inside `ns` and waits for it (at most [`LIMIT`]).
fn inside<T: Send + 'static>(ns: &Arc<Namespace>, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = Arc::clone(ns);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        ns.enter().expect("enter the namespace");
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT)
        .expect("the namespace's thread ended in time")
}

/// `sh -c COMMAND` inside `ns`: its status and output.
fn shell(ns: &Arc<Namespace>, command: &str) -> (bool, String) {
    let command = command.to_string();
    inside(ns, move || {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .output()
            .expect("run sh");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    })
}

/// Two writes then a read, [`TRANSACTIONS`] times: the client in `client_ns` connects to
/// a server at `server` in `server_ns`. The round trip of each transaction.
fn exchange(
    server_ns: &Arc<Namespace>,
    client_ns: &Arc<Namespace>,
    server: IpAddr,
) -> Vec<Duration> {
    let listener = inside(server_ns, move || {
        TcpListener::bind(SocketAddr::new(server, 0)).expect("listen")
    });
    let address = listener.local_addr().expect("address");
    let serving = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        stream.set_read_timeout(Some(LIMIT)).expect("timeout");
        let mut request = [0u8; 2 * PIECE];
        for _ in 0..TRANSACTIONS {
            stream.read_exact(&mut request).expect("request");
            stream.write_all(&[1u8; REPLY]).expect("reply");
        }
    });
    let times = inside(client_ns, move || {
        let mut stream = TcpStream::connect_timeout(&address, LIMIT).expect("connect");
        stream.set_read_timeout(Some(LIMIT)).expect("timeout");
        let mut reply = [0u8; REPLY];
        (0..TRANSACTIONS)
            .map(|_| {
                let start = Instant::now();
                stream.write_all(&[2u8; PIECE]).expect("first piece");
                stream.write_all(&[3u8; PIECE]).expect("second piece");
                stream.read_exact(&mut reply).expect("reply");
                start.elapsed()
            })
            .collect::<Vec<_>>()
    });
    serving.join().expect("server");
    times
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// The delayed-ACK side at `server` in `server_ns` serves a client at `client` in
/// `client_ns`: stalls before the fix, none after it, and the route shows it.
fn check_fix(
    what: &str,
    server_ns: &Arc<Namespace>,
    client_ns: &Arc<Namespace>,
    server: IpAddr,
    client: IpAddr,
) {
    let before = exchange(server_ns, client_ns, server);
    assert!(
        median(&before) >= STALLED,
        "{what}: the exchange does not stall before the fix: {before:?}"
    );
    let action = FixAction::route_quickack(client, server);
    let command = action.command().expect("the route fix is a command");
    assert!(
        action.to_string().contains(&command),
        "{what}: the fix's text does not hold its command: {action}"
    );
    let (ok, out) = shell(server_ns, &command);
    assert!(ok, "{what}: `{command}` failed: {out}");
    let family = if client.is_ipv4() { "-4" } else { "-6" };
    let (ok, route) = shell(server_ns, &format!("ip {family} route get {client}"));
    assert!(
        ok && route.contains("quickack 1"),
        "{what}: after `{command}`, the route is: {route}"
    );
    let after = exchange(server_ns, client_ns, server);
    assert!(
        median(&after) < PROMPT,
        "{what}: after `{command}` the exchange still waits: {after:?}"
    );
}

#[test]
#[ignore = "needs root (network namespaces and routes); .ci/run runs it"]
fn the_route_fix_works_where_it_is_offered() {
    if !is_root() {
        common::skipped(format_args!(
            "skipped: the route fix test needs root (CAP_NET_ADMIN)"
        ));
        return;
    }
    let mut setup = Setup::new();

    // Loopback: both ends in one namespace.
    let alone = setup.create("lo").expect("namespace");
    ip(&["-n", &alone.label, "link", "set", "lo", "up"]).expect("lo up");
    let v4: IpAddr = "127.0.0.1".parse().expect("address");
    check_fix("loopback", &alone, &alone, v4, v4);
    let v6: IpAddr = "::1".parse().expect("address");
    let (has_v6, _) = shell(&alone, "ip -6 addr show dev lo | grep -q '::1'");
    if has_v6 {
        check_fix("IPv6 loopback", &alone, &alone, v6, v6);
    } else {
        common::skipped(format_args!(
            "skipped: IPv6 loopback: this kernel gives lo no ::1"
        ));
    }

    // Two namespaces joined by a veth pair; the addresses come from 198.18.0.0/15, the
    // range set aside for benchmarking (RFC 2544), and exist only in these namespaces.
    let client_ns = setup.create("c").expect("namespace");
    let server_ns = setup.create("s").expect("namespace");
    let (c, s) = (client_ns.label.as_str(), server_ns.label.as_str());
    for args in [
        &[
            "link", "add", "vc", "netns", c, "type", "veth", "peer", "vs", "netns", s,
        ][..],
        &["-n", c, "addr", "add", "198.18.200.1/24", "dev", "vc"],
        &["-n", s, "addr", "add", "198.18.200.2/24", "dev", "vs"],
        &["-n", c, "link", "set", "vc", "up"],
        &["-n", s, "link", "set", "vs", "up"],
        &["-n", c, "link", "set", "lo", "up"],
        &["-n", s, "link", "set", "lo", "up"],
    ] {
        ip(args).expect("configure the namespaces");
    }
    check_fix(
        "directly connected",
        &server_ns,
        &client_ns,
        "198.18.200.2".parse().expect("address"),
        "198.18.200.1".parse().expect("address"),
    );

    // Routed: each end also has an address of another network, reached through the
    // other end as its gateway, and speaks from it.
    for args in [
        &["-n", c, "addr", "add", "198.18.201.1/32", "dev", "lo"][..],
        &["-n", s, "addr", "add", "198.18.202.2/32", "dev", "lo"],
        &[
            "-n",
            c,
            "route",
            "add",
            "198.18.202.0/24",
            "via",
            "198.18.200.2",
            "src",
            "198.18.201.1",
        ],
        &[
            "-n",
            s,
            "route",
            "add",
            "198.18.201.0/24",
            "via",
            "198.18.200.1",
            "src",
            "198.18.202.2",
        ],
    ] {
        ip(args).expect("configure the routes");
    }
    let (_, route) = shell(&server_ns, "ip route get 198.18.201.1");
    assert!(route.contains("via 198.18.200.1"), "not routed: {route}");
    check_fix(
        "routed",
        &server_ns,
        &client_ns,
        "198.18.202.2".parse().expect("address"),
        "198.18.201.1".parse().expect("address"),
    );
}
