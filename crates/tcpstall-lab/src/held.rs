//! Whether a delayed ACK held a round trip, by what the captures at both ends of the line
//! show rather than by how long the round trip took. Each packet is matched between the
//! client's and the server's capture (when it left its sender's end, when it reached the
//! other); from the last data to reach the client in a round trip, the chain is walked
//! back (each packet sent because of the last one its sender had received) to the packet
//! that began it. A pure ACK on that chain that left its end long after the data it
//! answers arrived there was held by a delayed-ACK timer. A round trip that took long
//! without one was slowed by something else: a program the host did not run at once (a
//! JVM pausing), which is no TCP stall.

use std::collections::HashMap;

use crate::capture::Packet;
use crate::exchange::Measured;
use crate::measure::SLOW_MARGIN;

pub const SYN: u8 = 0x02;
pub const FIN: u8 = 0x01;
const ACK: u8 = 0x10;
/// Packets a chain walks back over at most.
const MAX_CHAIN: usize = 1000;

/// A TCP packet of the connection as one capture saw it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub time: i64,
    /// Client to server.
    pub outbound: bool,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: u32,
    pub ip_id: u16,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// On a SYN: its window scale option's shift, if it has one.
    pub window_scale: Option<u8>,
}

impl Seen {
    fn key(&self) -> (bool, u32, u32, u8, u32, u16) {
        (
            self.outbound,
            self.seq,
            self.ack,
            self.flags,
            self.payload,
            self.ip_id,
        )
    }
}

/// An IPv4 address and a port.
pub type Endpoint = ([u8; 4], u16);

/// An IPv4 TCP packet's endpoints and fields; `None` for anything else.
fn parse(p: &Packet) -> Option<(Endpoint, Endpoint, Seen)> {
    let h = &p.headers;
    if h.len() < 20 || h[0] >> 4 != 4 || h[9] != 6 {
        return None;
    }
    let ihl = usize::from(h[0] & 0xf) * 4;
    let t = h.get(ihl..ihl + 20)?;
    let total = u32::from(u16::from_be_bytes([h[2], h[3]]));
    let word = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    let doff = u32::from(t[12] >> 4) * 4;
    let src = (
        [h[12], h[13], h[14], h[15]],
        u16::from_be_bytes([t[0], t[1]]),
    );
    let dst = (
        [h[16], h[17], h[18], h[19]],
        u16::from_be_bytes([t[2], t[3]]),
    );
    Some((
        src,
        dst,
        Seen {
            time: p.time,
            outbound: false,
            seq: word(4),
            ack: word(8),
            flags: t[13],
            payload: total.saturating_sub(ihl as u32 + doff),
            ip_id: u16::from_be_bytes([h[4], h[5]]),
            window: u16::from_be_bytes([t[14], t[15]]),
            window_scale: if t[13] & SYN != 0 {
                h.get(ihl + 20..ihl + doff as usize).and_then(window_scale)
            } else {
                None
            },
        },
    ))
}

/// The window scale option's shift in a SYN's options (RFC 7323: kind 3, length 3).
fn window_scale(options: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = usize::from(*options.get(i + 1)?).max(2);
                if kind == 3 && len == 3 {
                    // RFC 7323 2.3: a shift above 14 is taken as 14.
                    return options.get(i + 2).map(|&shift| shift.min(14));
                }
                i += len;
            }
        }
    }
    None
}

/// The client's and the server's ends of the first connection a capture saw opened (its
/// SYN without ACK), to `port` when one is given.
pub fn client_of(packets: &[Packet], port: Option<u16>) -> Option<(Endpoint, Endpoint)> {
    packets.iter().filter_map(parse).find_map(|(src, dst, s)| {
        (s.flags & (SYN | ACK) == SYN && port.is_none_or(|p| dst.1 == p)).then_some((src, dst))
    })
}

/// The client's and the server's ends of the connection a capture saw opened from the
/// client's port `client_port` (its SYN without ACK).
pub fn opened_from(packets: &[Packet], client_port: u16) -> Option<(Endpoint, Endpoint)> {
    packets.iter().filter_map(parse).find_map(|(src, dst, s)| {
        (s.flags & (SYN | ACK) == SYN && src.1 == client_port).then_some((src, dst))
    })
}

/// The packets of the connection between `client` and `server` in a capture.
pub fn connection(packets: &[Packet], client: Endpoint, server: Endpoint) -> Vec<Seen> {
    packets
        .iter()
        .filter_map(parse)
        .filter_map(|(src, dst, mut s)| {
            s.outbound = (src, dst) == (client, server);
            (s.outbound || (src, dst) == (server, client)).then_some(s)
        })
        .collect()
}

/// One packet across the line: when it left its sender's end and reached the other.
#[derive(Clone, Copy, Debug)]
pub struct Crossing {
    pub outbound: bool,
    pub depart: i64,
    pub arrive: i64,
    pub payload: u32,
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// The window it offered, in bytes (scaled as its SYNs agreed).
    pub window: u32,
}

/// The packets seen at both ends, matched (the n-th copy at one end with the n-th at the
/// other: the line changes nothing in them).
pub fn crossings(client: &[Seen], server: &[Seen]) -> Vec<Crossing> {
    // RFC 7323 2.2: each side's windows are scaled by its own SYN's shift when both SYNs
    // carried the option, never the SYN's own window.
    let shift_of = |outbound: bool| {
        client
            .iter()
            .find(|s| s.outbound == outbound && s.flags & SYN != 0)
            .and_then(|s| s.window_scale)
    };
    let shifts = match (shift_of(true), shift_of(false)) {
        (Some(c), Some(s)) => [c, s],
        _ => [0, 0],
    };
    let mut at_server: HashMap<_, Vec<i64>> = HashMap::new();
    for s in server {
        at_server.entry(s.key()).or_default().push(s.time);
    }
    for times in at_server.values_mut() {
        times.reverse();
    }
    let mut out = Vec::new();
    for c in client {
        let Some(t) = at_server.get_mut(&c.key()).and_then(Vec::pop) else {
            continue;
        };
        let (depart, arrive) = if c.outbound { (c.time, t) } else { (t, c.time) };
        out.push(Crossing {
            outbound: c.outbound,
            depart,
            arrive,
            payload: c.payload,
            flags: c.flags,
            seq: c.seq,
            ack: c.ack,
            window: if c.flags & SYN != 0 {
                u32::from(c.window)
            } else {
                u32::from(c.window) << shifts[usize::from(!c.outbound)]
            },
        });
    }
    out
}

/// What the chain of one round trip shows: its packets' time on the path, and the
/// longest wait of a pure ACK on it at its sender's end (from the arrival there of what
/// it answers to its departure: a delayed ACK's timer), in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chain {
    pub path_ms: f64,
    pub ack_wait_ms: Option<f64>,
    /// What followed that ACK: how it and the segment it released crossed the line,
    /// and how long the holder took between them.
    pub answer: Option<Answer>,
}

/// A delayed ACK and the segment that answered it, in ms: its crossing, the holder's
/// turnaround (the ACK's arrival at the holder's end to the answer's departure there),
/// and the answer's crossing. Their sum is what the delayer sees between sending its ACK
/// and receiving the answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Answer {
    pub ack_crossing_ms: f64,
    pub turnaround_ms: f64,
    pub answer_crossing_ms: f64,
}

/// Where a round trip ends: the client's read of the response, or, for a one-way message,
/// the server's read of its last byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ends {
    AtClient,
    AtServer,
}

/// Walks back from the last data to reach the client before `next` (where the round
/// trip's window closes, [`Until`]): each packet was sent because of the last one its
/// sender received before sending it, until the packet that left the client at the round
/// trip's start `start`, or the handshake. `None` when the chain cannot be walked.
pub fn chain(crossings: &[Crossing], start: i64, next: i64) -> Option<Chain> {
    chain_to(crossings, start, next, Ends::AtClient)
}

/// [`chain`] from the last data to reach the round trip's end `ends`.
pub fn chain_to(crossings: &[Crossing], start: i64, next: i64, ends: Ends) -> Option<Chain> {
    let toward_server = ends == Ends::AtServer;
    let mut current = crossings
        .iter()
        .filter(|c| c.outbound == toward_server && c.payload > 0 && c.arrive < next)
        .max_by_key(|c| c.arrive)?;
    if current.arrive < start {
        return None;
    }
    let mut path_ns = 0i64;
    let mut ack_wait: Option<f64> = None;
    let mut answer: Option<Answer> = None;
    let mut after: Option<&Crossing> = None;
    for _ in 0..MAX_CHAIN {
        path_ns += current.arrive - current.depart;
        if current.flags & SYN != 0 {
            // The handshake begins every chain: a round trip timed from the moment the
            // connection opened (its start stamped a little before the SYN-ACK's arrival)
            // began there.
            return Some(Chain {
                path_ms: path_ns as f64 / 1e6,
                ack_wait_ms: ack_wait,
                answer,
            });
        }
        // Its sender's end: the server for an inbound packet.
        let sender_is_server = !current.outbound;
        let before = crossings
            .iter()
            .filter(|c| c.outbound == sender_is_server && c.arrive <= current.depart)
            .max_by_key(|c| c.arrive)?;
        let pure_ack = current.payload == 0 && current.flags & (SYN | FIN) == 0;
        if pure_ack
            && (!acknowledges_new_data(crossings, current)
                || opens_a_full_window(crossings, current))
        {
            // A window update: its application's read sent it, not what its end last
            // received, so the chain ends here, and no timer held it.
            return Some(Chain {
                path_ms: path_ns as f64 / 1e6,
                ack_wait_ms: ack_wait,
                answer,
            });
        }
        if pure_ack {
            let wait = (current.depart - before.arrive) as f64 / 1e6;
            if ack_wait.is_none_or(|w| wait > w) {
                ack_wait = Some(wait);
                answer = after.map(|next| Answer {
                    ack_crossing_ms: (current.arrive - current.depart) as f64 / 1e6,
                    turnaround_ms: (next.depart - current.arrive) as f64 / 1e6,
                    answer_crossing_ms: (next.arrive - next.depart) as f64 / 1e6,
                });
            }
        }
        if !sender_is_server && before.arrive < start {
            // The client sent this first: the round trip began with it.
            return Some(Chain {
                path_ms: path_ns as f64 / 1e6,
                ack_wait_ms: ack_wait,
                answer,
            });
        }
        after = Some(current);
        current = before;
    }
    None
}

/// Whether a pure ACK acknowledges data its sender had not acknowledged before: a delayed
/// ACK does; a window update (the receiving application read, the window opened) or a
/// duplicate repeats the last acknowledgment number and was held by no ACK timer.
fn acknowledges_new_data(crossings: &[Crossing], ack: &Crossing) -> bool {
    crossings
        .iter()
        .filter(|c| c.outbound == ack.outbound && c.depart < ack.depart)
        .max_by_key(|c| c.depart)
        .is_none_or(|previous| previous.ack != ack.ack)
}

/// Whether a pure ACK opened a window its peer had filled: the data that had reached its
/// end when it left reached the right edge of the window its end offered before. Its peer
/// waited for the window, and the receiving application's read sent the ACK (Linux sends
/// one when a read opens the window enough, `__tcp_cleanup_rbuf`), not a delayed-ACK timer.
fn opens_a_full_window(crossings: &[Crossing], ack: &Crossing) -> bool {
    let Some(offered) = crossings
        .iter()
        .filter(|c| c.outbound == ack.outbound && c.depart < ack.depart)
        .max_by_key(|c| c.depart)
    else {
        return false;
    };
    let edge = offered.ack.wrapping_add(offered.window);
    crossings
        .iter()
        .filter(|c| c.outbound != ack.outbound && c.payload > 0 && c.arrive <= ack.depart)
        .any(|c| c.seq.wrapping_add(c.payload).wrapping_sub(edge) as i32 >= 0)
        && ack.window > offered.window
}

/// Where a round trip's chain begins: the last data to reach the client before its window
/// closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// The next round trip's start (the end of the connection for the last): round trips
    /// one after the other, timed by a program whose clock is not the capture's.
    NextStart,
    /// The round trip's own end and this many ns more: round trips that overlap (pipelined
    /// requests), timed on the capture's clock; the kernel stamps a packet before the
    /// application reads it.
    OwnEnd(i64),
}

/// The packets of one connection matched between the captures at the client's and the
/// server's ends: the one opened from `client_port`, or the first opened.
pub fn connection_crossings(
    client_port: Option<u16>,
    client_capture: &[Packet],
    server_capture: &[Packet],
) -> Option<Vec<Crossing>> {
    let (client, server) = match client_port {
        Some(port) => opened_from(client_capture, port)?,
        None => client_of(client_capture, None)?,
    };
    Some(crossings(
        &connection(client_capture, client, server),
        &connection(server_capture, client, server),
    ))
}

/// Per round trip of `round_trips`: the longest a pure ACK on its chain was held at its
/// sender's end, in ms, from the captures at the client's and the server's ends of the
/// line (`None` where they do not show the chain). On loopback one capture is both ends.
/// Round trips on several connections are each walked on their own connection's packets.
pub fn ack_waits_ms(
    round_trips: &[Measured],
    until: Until,
    ends: Ends,
    client_capture: &[Packet],
    server_capture: &[Packet],
) -> Vec<Option<f64>> {
    let mut by_connection: HashMap<Option<u16>, Option<Vec<Crossing>>> = HashMap::new();
    round_trips
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let matched = by_connection.entry(t.client_port).or_insert_with(|| {
                connection_crossings(t.client_port, client_capture, server_capture)
            });
            let bound = match until {
                Until::NextStart => round_trips[i + 1..]
                    .iter()
                    .find(|n| n.client_port == t.client_port)
                    .map_or(i64::MAX, |n| n.start),
                Until::OwnEnd(tolerance) => t.end.saturating_add(tolerance),
            };
            chain_to(matched.as_deref()?, t.start, bound, ends)
                .map(|c| c.ack_wait_ms.unwrap_or(0.0))
        })
        .collect()
}

/// Each packet's time across the line from one end to the other, in ms, of the first
/// connection the captures at both ends saw opened: client to server, then server to
/// client. On the delay line these are the path's one-way delays as they were; a path's
/// round trip is one of each.
pub fn crossing_times_ms(client_capture: &[Packet], server_capture: &[Packet]) -> [Vec<f64>; 2] {
    let mut times = [Vec::new(), Vec::new()];
    for c in connection_crossings(None, client_capture, server_capture).unwrap_or_default() {
        times[usize::from(!c.outbound)].push((c.arrive - c.depart) as f64 / 1e6);
    }
    times
}

/// Per round trip: whether the captures at both ends show a pure ACK on its chain held at
/// least [`SLOW_MARGIN`] (a delayed-ACK timer: 40 ms at least on Linux, TCP_DELACK_MIN,
/// less a tick of a 100 Hz kernel); `None` where they do not show the chain.
pub fn held_by_ack(
    round_trips: &[Measured],
    until: Until,
    ends: Ends,
    client_capture: &[Packet],
    server_capture: &[Packet],
) -> Vec<Option<bool>> {
    let least = SLOW_MARGIN.as_secs_f64() * 1e3;
    ack_waits_ms(round_trips, until, ends, client_capture, server_capture)
        .into_iter()
        .map(|wait| wait.map(|w| w >= least))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const CLIENT: [u8; 4] = [10, 0, 0, 1];
    const SERVER: [u8; 4] = [10, 0, 0, 2];

    fn packet(time_ms: f64, outbound: bool, seq: u32, ack: u32, flags: u8, payload: u16) -> Packet {
        let (src, dst, sport, dport) = if outbound {
            (CLIENT, SERVER, 40000u16, 80u16)
        } else {
            (SERVER, CLIENT, 80, 40000)
        };
        let mut h = vec![0u8; 40];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&(40 + payload).to_be_bytes());
        h[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
        h[9] = 6;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        h[20..22].copy_from_slice(&sport.to_be_bytes());
        h[22..24].copy_from_slice(&dport.to_be_bytes());
        h[24..28].copy_from_slice(&seq.to_be_bytes());
        h[28..32].copy_from_slice(&ack.to_be_bytes());
        h[32] = 5 << 4;
        h[33] = flags;
        Packet {
            time: (time_ms * 1e6) as i64,
            headers: h,
            orig_len: 40 + u32::from(payload),
        }
    }

    /// A write-write-read round trip from 10 ms on a path of 1 ms each way: the
    /// server's ACK of the first piece leaves `ack_after_ms` after it arrives, the
    /// response `response_after_ms` after the second piece does.
    fn round_trip(
        ack_after_ms: f64,
        response_after_ms: f64,
    ) -> (Vec<Packet>, Vec<Packet>, Measured) {
        let one_way = 1.0;
        let mut at_client = Vec::new();
        let mut at_server = Vec::new();
        let mut both = |t: f64, outbound: bool, seq, ack, flags, payload| {
            let (here, there) = if outbound {
                (t, t + one_way)
            } else {
                (t + one_way, t)
            };
            at_client.push(packet(here, outbound, seq, ack, flags, payload));
            at_server.push(packet(there, outbound, seq, ack, flags, payload));
        };
        both(0.0, true, 0, 0, SYN, 0);
        both(1.0, false, 0, 1, SYN | ACK, 0);
        both(2.0, true, 1, 1, ACK, 0);
        // The first piece, its ACK, the second piece Nagle held until then, the response.
        both(10.0, true, 1, 1, ACK, 100);
        let acked = 11.0 + ack_after_ms;
        both(acked, false, 1, 101, ACK, 0);
        both(acked + 1.0, true, 101, 1, ACK, 100);
        let answered = acked + 2.0 + response_after_ms;
        both(answered, false, 1, 201, ACK, 50);
        let end = ((answered + 1.0) * 1e6) as i64;
        let measured = Measured {
            index: 0,
            start: 10_000_000,
            end,
            latency: Duration::from_nanos((end - 10_000_000) as u64),
            client_port: None,
        };
        (at_client, at_server, measured)
    }

    #[test]
    fn a_held_ack_is_seen_and_a_slow_program_is_not_one() {
        // A delayed ACK of 40 ms: the round trip is held.
        let (client, server, measured) = round_trip(40.0, 0.1);
        let waits = ack_waits_ms(
            &[measured],
            Until::NextStart,
            Ends::AtClient,
            &client,
            &server,
        );
        let held = waits[0].expect("the chain walked");
        assert!((held - 40.0).abs() < 0.01, "{held}");
        // An ACK at once, and a server that answered 55 ms late: as long, and no hold.
        let (client, server, measured) = round_trip(0.05, 55.0);
        assert!(measured.latency > Duration::from_millis(55));
        let waits = ack_waits_ms(
            &[measured],
            Until::NextStart,
            Ends::AtClient,
            &client,
            &server,
        );
        assert!(waits[0].expect("the chain walked") < 1.0, "{waits:?}");
    }

    #[test]
    fn a_window_update_ends_the_chain_and_no_timer_held_it() {
        // The first piece ACKed at once; the window opened 60 ms later by the server's
        // read (the same acknowledgment number again) releases the second piece.
        let one_way = 1.0;
        let mut at_client = Vec::new();
        let mut at_server = Vec::new();
        let mut both = |t: f64, outbound: bool, seq, ack, flags, payload| {
            let (here, there) = if outbound {
                (t, t + one_way)
            } else {
                (t + one_way, t)
            };
            at_client.push(packet(here, outbound, seq, ack, flags, payload));
            at_server.push(packet(there, outbound, seq, ack, flags, payload));
        };
        both(0.0, true, 0, 0, SYN, 0);
        both(1.0, false, 0, 1, SYN | ACK, 0);
        both(2.0, true, 1, 1, ACK, 0);
        both(10.0, true, 1, 1, ACK, 100);
        both(11.05, false, 1, 101, ACK, 0);
        both(71.0, false, 1, 101, ACK, 0);
        both(72.0, true, 101, 1, ACK, 100);
        both(73.1, false, 1, 201, ACK, 50);
        let measured = Measured {
            index: 0,
            start: 10_000_000,
            end: 74_100_000,
            latency: Duration::from_nanos(64_100_000),
            client_port: Some(40000),
        };
        let held = held_by_ack(
            &[measured],
            Until::NextStart,
            Ends::AtClient,
            &at_client,
            &at_server,
        );
        assert_eq!(held, vec![Some(false)]);
    }

    #[test]
    fn each_round_trip_is_walked_on_its_own_connection() {
        let (client, server, measured) = round_trip(40.0, 0.1);
        let elsewhere = Measured {
            client_port: Some(40001),
            ..measured
        };
        let mine = Measured {
            client_port: Some(40000),
            ..measured
        };
        let held = held_by_ack(
            &[mine, elsewhere],
            Until::OwnEnd(1_000_000),
            Ends::AtClient,
            &client,
            &server,
        );
        assert_eq!(held, vec![Some(true), None]);
    }

    #[test]
    fn a_round_trip_timed_from_before_the_handshake_ends_walks_back_to_it() {
        // The first round trip, its start stamped before the SYN-ACK reached the client.
        let (client, server, mut measured) = round_trip(40.0, 0.1);
        measured.start = 1_000_000;
        let held = held_by_ack(
            &[measured],
            Until::OwnEnd(1_000_000),
            Ends::AtClient,
            &client,
            &server,
        );
        assert_eq!(held, vec![Some(true)]);
    }
}
