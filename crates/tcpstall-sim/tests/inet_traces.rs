//! The INET framework's Nagle and delayed-ACK module tests (`tests/module/tcp_nagle_{1,2,3}`
//! and `tcp_delayed_ack_{1,2,3}`), run here: the same send scripts on the `inet` profile
//! (MSS 1024, classic Nagle, a 200 ms delayed-ACK timer, slow start from one segment)
//! over INET's test network (a tester in the middle, 1 ms from each host), and the trace
//! seen in the middle checked segment for segment: sizes exact, times within 1 ms.
//!
//! Sequence numbers are relative to each side's first byte (data starts at 1); an ACK is
//! the next byte expected.

use tcpstall_sim::engine::CLIENT;
use tcpstall_sim::scenario::ScenarioFile;

/// One segment in the middle of the path: when (ms), who sent it, and what it carried.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Seen {
    /// Data from the client: time, first byte, length.
    Client(f64, u64, u32),
    /// A pure ACK from the server: time, acknowledged up to.
    ServerAck(f64, u64),
    /// Data from the server: time, first byte, length, carrying an ACK up to.
    Server(f64, u64, u32, u64),
    /// A pure ACK from the client.
    ClientAck(f64, u64),
}

impl Seen {
    fn time(self) -> f64 {
        match self {
            Seen::Client(t, ..) | Seen::ServerAck(t, _) | Seen::Server(t, ..) => t,
            Seen::ClientAck(t, _) => t,
        }
    }
}

/// INET's test network: the tester sits between the hosts, 1 ms from each.
fn inet_scenario(client_script: &[(f64, u32)], server_script: &[(f64, u32)]) -> ScenarioFile {
    let text = r#"
        capture = "tap:0.5"
        [client]
        stack = "inet"
        mss = 1024
        [server]
        stack = "inet"
        mss = 1024
        [link]
        bandwidth_bps = 1e12
        rtt_ms = 4
        [workload]
        pattern = "script"
    "#;
    let mut file = ScenarioFile::from_toml(text).expect("valid scenario");
    file.workload.client_script = client_script.to_vec();
    file.workload.server_script = server_script.to_vec();
    file
}

/// The segments seen in the middle after the handshake, with times in ms.
fn trace(file: &ScenarioFile) -> Vec<Seen> {
    let scenario = file.resolve().expect("valid scenario");
    let result = tcpstall_sim::run(&scenario, true);
    result
        .captured
        .iter()
        .filter(|c| !c.segment.syn && (c.segment.len > 0 || c.segment.ack > 1))
        .map(|c| {
            let s = &c.segment;
            let ms = c.time as f64 / 1e6;
            match (s.from, s.len) {
                (CLIENT, 0) => Seen::ClientAck(ms, s.ack),
                (CLIENT, len) => Seen::Client(ms, s.seq, len),
                (_, 0) => Seen::ServerAck(ms, s.ack),
                (_, len) => Seen::Server(ms, s.seq, len, s.ack),
            }
        })
        .collect()
}

/// Same segments in the same order, every size and number exact, every time within 1 ms.
fn assert_trace(name: &str, got: &[Seen], expected: &[Seen]) {
    let listing = |t: &[Seen]| {
        t.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join("\n  ")
    };
    let diagnosis = format!(
        "{name}\n expected:\n  {}\n simulated:\n  {}",
        listing(expected),
        listing(got)
    );
    assert_eq!(got.len(), expected.len(), "{diagnosis}");
    for (g, e) in got.iter().zip(expected) {
        let same_shape = match (g, e) {
            (Seen::Client(_, a, b), Seen::Client(_, c, d)) => (a, b) == (c, d),
            (Seen::ServerAck(_, a), Seen::ServerAck(_, b)) => a == b,
            (Seen::ClientAck(_, a), Seen::ClientAck(_, b)) => a == b,
            (Seen::Server(_, a, b, c), Seen::Server(_, d, e, f)) => (a, b, c) == (d, e, f),
            _ => false,
        };
        assert!(same_shape, "{g:?} where {e:?} was expected\n{diagnosis}");
        assert!(
            (g.time() - e.time()).abs() <= 1.0,
            "{g:?} more than 1 ms from {e:?}\n{diagnosis}"
        );
    }
}

use Seen::{Client, ClientAck, Server, ServerAck};

/// Small writes go out only when nothing is unacknowledged: what the application wrote
/// meanwhile leaves in one segment when the delayed ACK arrives.
#[test]
fn inet_tcp_nagle_1_small_writes_wait_for_the_delayed_ack() {
    let script = [
        (1000.0, 2),
        (1010.0, 4),
        (1020.0, 8),
        (1030.0, 16),
        (1040.0, 32),
        (2000.0, 64),
        (2010.0, 128),
        (2020.0, 256),
        (2030.0, 512),
    ];
    let expected = [
        Client(1001.0, 1, 2),
        ServerAck(1203.0, 3),
        Client(1205.0, 3, 60),
        ServerAck(1407.0, 63),
        Client(2001.0, 63, 64),
        ServerAck(2203.0, 127),
        Client(2205.0, 127, 896),
        ServerAck(2407.0, 1023),
    ];
    assert_trace(
        "tcp_nagle_1",
        &trace(&inet_scenario(&script, &[])),
        &expected,
    );
}

/// Full-sized segments are not held; a one-byte segment is acknowledged at once (INET
/// takes it for a window probe); slow start from one segment limits the full ones.
#[test]
fn inet_tcp_nagle_2_full_segments_are_not_delayed() {
    let script = [
        (1000.0, 1),
        (1000.0, 2),
        (1010.0, 1022),
        (1020.0, 1324),
        (1030.0, 300),
        (1040.0, 400),
        (1040.0, 25),
    ];
    let expected = [
        Client(1001.0, 1, 1),
        ServerAck(1003.0, 2),
        Client(1005.0, 2, 2),
        Client(1021.0, 4, 1024),
        ServerAck(1207.0, 1028),
        Client(1209.0, 1028, 1024),
        ServerAck(1411.0, 2052),
        Client(1413.0, 2052, 1023),
        ServerAck(1615.0, 3075),
    ];
    assert_trace(
        "tcp_nagle_2",
        &trace(&inet_scenario(&script, &[])),
        &expected,
    );
}

/// Writes larger than the MSS: full segments as the congestion window allows, the
/// sub-MSS remainder held until everything is acknowledged; two full segments are
/// acknowledged at once.
#[test]
fn inet_tcp_nagle_3_writes_larger_than_the_mss() {
    let script = [
        (1000.0, 3000),
        (1000.5, 2000),
        (2000.0, 3000),
        (2000.5, 100),
    ];
    let expected = [
        Client(1001.0, 1, 1024),
        ServerAck(1203.0, 1025),
        Client(1205.0, 1025, 1024),
        Client(1205.0, 2049, 1024),
        ServerAck(1207.0, 3073),
        Client(1209.0, 3073, 1024),
        ServerAck(1411.0, 4097),
        Client(1413.0, 4097, 904),
        ServerAck(1615.0, 5001),
        Client(2001.0, 5001, 1024),
        Client(2001.0, 6025, 1024),
        Client(2002.0, 7049, 1024),
        ServerAck(2003.0, 7049),
        ServerAck(2204.0, 8073),
        Client(2205.0, 8073, 28),
        ServerAck(2407.0, 8101),
    ];
    assert_trace(
        "tcp_nagle_3",
        &trace(&inet_scenario(&script, &[])),
        &expected,
    );
}

/// One segment with nothing to answer: the ACK waits the whole 200 ms.
#[test]
fn inet_tcp_delayed_ack_1_ack_after_200_ms() {
    let expected = [Client(1001.0, 1, 100), ServerAck(1203.0, 101)];
    assert_trace(
        "tcp_delayed_ack_1",
        &trace(&inet_scenario(&[(1000.0, 100)], &[])),
        &expected,
    );
}

/// Data the receiver sends before the timer carries the ACK; the other side's ACK of
/// that data then waits 200 ms in its turn.
#[test]
fn inet_tcp_delayed_ack_2_ack_rides_on_data() {
    let expected = [
        Client(1001.0, 1, 100),
        Server(1101.0, 1, 100, 101),
        ClientAck(1303.0, 101),
    ];
    assert_trace(
        "tcp_delayed_ack_2",
        &trace(&inet_scenario(&[(1000.0, 100)], &[(1100.0, 100)])),
        &expected,
    );
}

/// Three lone segments a second apart: each ACK waits 200 ms.
#[test]
fn inet_tcp_delayed_ack_3_each_lone_segment_waits() {
    let script = [(1000.0, 110), (2000.0, 120), (3000.0, 130)];
    let expected = [
        Client(1001.0, 1, 110),
        ServerAck(1203.0, 111),
        Client(2001.0, 111, 120),
        ServerAck(2203.0, 231),
        Client(3001.0, 231, 130),
        ServerAck(3203.0, 361),
    ];
    assert_trace(
        "tcp_delayed_ack_3",
        &trace(&inet_scenario(&script, &[])),
        &expected,
    );
}
