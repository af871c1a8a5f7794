//! The detector on hand-built exchanges: one per class, the look-alikes kept apart, and
//! the tracking corner cases (no handshake, sequence wraparound, a distant capture point).

mod common;

use std::net::SocketAddr;

use common::{MS, US, Wire};
use tcpstall_core::detect::{DetectConfig, Pattern, StallClass};
use tcpstall_core::diagnosis::{Role, TimerGuess, Verdict};
use tcpstall_core::flow::FlowTable;
use tcpstall_core::segment::{Nanos, Segment, TcpFlags, TcpOptions};

/// Seed 002 at a capture point on the client's host: "hello " leaves, the server holds
/// its ACK for 40 ms, "world\n" follows the ACK at once, the reply comes.
fn write_write_read(
    wire: &mut Wire,
    rounds: usize,
    client_rtt: Nanos,
    server_rtt: Nanos,
    ack_delay: Nanos,
) {
    let mut t = wire.handshake(0, client_rtt, server_rtt) + MS;
    for _ in 0..rounds {
        wire.data(true, t, 6);
        let ack_at = t + server_rtt + ack_delay;
        wire.ack(false, ack_at);
        let world_at = ack_at + client_rtt + 20 * US;
        wire.data(true, world_at, 6);
        let reply_at = world_at + server_rtt + 30 * US;
        wire.data(false, reply_at, 12);
        t = reply_at + client_rtt + 50 * US;
    }
}

#[test]
fn write_write_read_is_nagle_delayed_ack_held_by_client_delayed_by_server() {
    let mut wire = Wire::new(1000, 5000);
    write_write_read(&mut wire, 5, 10 * US, 10 * US, 40 * MS);
    let d = wire.only();
    assert_eq!(d.verdict, Verdict::NagleDelayedAckStalls);
    assert_eq!(d.stall_count, 5);
    assert_eq!(d.holder, Some(Role::Client));
    assert_eq!(d.delayer, Some(Role::Server));
    assert_eq!(d.pattern, Some(Pattern::WriteWriteRead));
    let profile = d.delayed_ack.as_ref().expect("a delayed-ACK profile");
    assert_eq!(profile.timer, TimerGuess::Linux40);
    for e in &d.events {
        assert_eq!(e.class, StallClass::NagleDelayedAck);
        let delay = e.ack_delay.unwrap();
        assert!((39 * MS..=41 * MS).contains(&delay), "ack delay {delay}");
        assert_eq!(e.held_bytes, 6);
        assert!(e.evidence.outstanding_small_segment);
    }
    let first = d.fixes().next().expect("a fix");
    assert_eq!(first.role, Role::Client);
    assert!(first.action.to_string().contains("one call"));
}

#[test]
fn distant_capture_point_still_sees_the_signature() {
    // Captured next to the server: the client is 30 ms away (60 ms round trip).
    let mut wire = Wire::new(1000, 5000);
    write_write_read(&mut wire, 4, 60 * MS, 20 * US, 40 * MS);
    let d = wire.only();
    assert_eq!(d.stall_count, 4, "{:#?}", d.events);
    assert!(
        d.events
            .iter()
            .all(|e| e.class == StallClass::NagleDelayedAck)
    );
    let position = d.capture_position().unwrap();
    assert!(
        position > 0.9,
        "capture point should sit at the server, got {position}"
    );
}

#[test]
fn server_thinking_40ms_is_app_think_time_not_a_stall() {
    let mut wire = Wire::new(1000, 5000);
    let mut t = wire.handshake(0, 10 * US, 10 * US) + MS;
    for _ in 0..5 {
        wire.data(true, t, 12);
        // The server's delayed ACK fires just before its late reply.
        wire.ack(false, t + 40 * MS);
        wire.data(false, t + 40 * MS + 300 * US, 12);
        t += 41 * MS;
    }
    let d = wire.only();
    assert_eq!(d.stall_count, 0, "{:#?}", d.events);
    assert_eq!(d.verdict, Verdict::AppThinkTimeOnly);
    assert_eq!(d.events.len(), 5);
    for e in &d.events {
        assert_eq!(e.class, StallClass::AppThinkTime);
        assert_eq!(d.role_of_side(e.sender.into()), Role::Server);
    }
}

/// Seed 000: 100,000 bytes at MSS 1448 are 69 full segments and 88 bytes. The receiver
/// ACKs every second segment; the 69th waits for its 200 ms timer, and classic Nagle
/// holds the tail until then.
#[test]
fn bulk_block_with_odd_segment_count_stalls_on_its_tail() {
    let mut wire = Wire::new(7, 9);
    let mut t = wire.handshake(0, 50 * US, 50 * US) + MS;
    for _ in 0..3 {
        for i in 1..=69u32 {
            wire.data(true, t, 1448);
            t += 12 * US;
            if i % 2 == 0 {
                wire.ack(false, t + 100 * US);
            }
        }
        let ack_at = t + 100 * US + 200 * MS;
        wire.ack(false, ack_at);
        let tail_at = ack_at + 100 * US;
        wire.data(true, tail_at, 88);
        let reply_at = tail_at + 200 * US;
        wire.data(false, reply_at, 1);
        t = reply_at + 200 * US;
    }
    let d = wire.only();
    assert_eq!(d.stall_count, 3, "{:#?}", d.events);
    assert_eq!(d.pattern, Some(Pattern::BulkOddTail { full_segments: 69 }));
    assert!(d.classic_nagle_evidence);
    assert_eq!(d.delayed_ack.as_ref().unwrap().timer, TimerGuess::Fixed200);
    let first = d.fixes().next().expect("a fix");
    assert!(first.action.to_string().contains("double buffering"));
}

#[test]
fn bulk_block_with_even_segment_count_does_not_stall() {
    let mut wire = Wire::new(7, 9);
    let mut t = wire.handshake(0, 50 * US, 50 * US) + MS;
    for _ in 0..3 {
        for i in 1..=68u32 {
            wire.data(true, t, 1448);
            t += 12 * US;
            if i % 2 == 0 {
                wire.ack(false, t + 100 * US);
            }
        }
        let tail_at = t + 300 * US;
        wire.data(true, tail_at, 1436);
        // The receiver replies at once, its ACK riding on the reply.
        let reply_at = tail_at + 200 * US;
        wire.data(false, reply_at, 1);
        t = reply_at + 200 * US;
    }
    let d = wire.only();
    assert_eq!(d.verdict, Verdict::NoStall, "{:#?}", d.events);
}

#[test]
fn full_segment_released_by_a_delayed_ack_is_delayed_ack() {
    let mut wire = Wire::new(1, 2);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    // One full segment in flight; the next full one waits (a window or cwnd limit) for
    // an ACK the receiver's timer holds.
    wire.data(true, t, 1448);
    wire.ack(false, t + 40 * MS);
    wire.data(true, t + 40 * MS + 30 * US, 1448);
    wire.data(false, t + 41 * MS, 10);
    let d = wire.only();
    assert_eq!(d.verdict, Verdict::DelayedAckStalls, "{:#?}", d.events);
    assert_eq!(d.events[0].class, StallClass::DelayedAck);
}

#[test]
fn a_burst_released_by_a_delayed_ack_names_where_the_release_ends() {
    let mut wire = Wire::new(1, 2);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    // Packets 1 to 3: the handshake; 4: a full segment; 5: the delayed ACK; 6 to 8: the
    // burst it lets go; 9: the reply.
    wire.data(true, t, 1448);
    wire.ack(false, t + 40 * MS);
    for i in 0..3 {
        wire.data(true, t + 40 * MS + (30 + i) * US, 1448);
    }
    wire.data(false, t + 41 * MS, 10);
    let d = wire.only();
    let e = &d.events[0];
    assert_eq!(e.class, StallClass::DelayedAck, "{:#?}", d.events);
    assert_eq!(e.held_bytes, 3 * 1448);
    let ev = &e.evidence;
    assert_eq!(
        (ev.data_before_packet, ev.ack_packet, ev.data_after_packet),
        (4, Some(5), 6)
    );
    assert_eq!(ev.released_last_packet, 8);
}

#[test]
fn repeated_data_after_silence_is_a_retransmission_timeout() {
    let mut wire = Wire::new(1, 2);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(true, t, 100);
    // Lost: resend the same bytes 200 ms later.
    wire.client_next = wire.client_next.wrapping_sub(100);
    wire.data(true, t + 200 * MS, 100);
    wire.ack(false, t + 200 * MS + 40 * US);
    let d = wire.only();
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.events[0].class, StallClass::RetransmissionTimeout);
    assert_eq!(d.verdict, Verdict::RetransmissionTimeouts);
    assert_eq!(d.retransmitted_segments, 1);
}

#[test]
fn zero_window_then_update_is_receiver_window() {
    let mut wire = Wire::new(1, 2);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(true, t, 1448);
    // The receiver ACKs with a closed window, then opens it 100 ms later.
    let zero = Segment {
        time: t + 100 * US,
        src: wire.server,
        dst: wire.client,
        seq: wire.server_next,
        ack: wire.client_next,
        flags: TcpFlags(TcpFlags::ACK),
        window: 0,
        payload_len: 0,
        options: TcpOptions::default(),
        tunnel: 0,
    };
    wire.packet += 1;
    wire.table.observe(&zero, wire.packet);
    wire.ack(false, t + 100 * MS);
    wire.data(true, t + 100 * MS + 30 * US, 1448);
    let d = wire.only();
    assert_eq!(d.events.len(), 1, "{:#?}", d.events);
    assert_eq!(d.events[0].class, StallClass::ReceiverWindow);
    assert_eq!(d.stall_count, 0);
}

#[test]
fn capture_without_handshake_and_with_sequence_wraparound() {
    let mut wire = Wire::new(u32::MAX - 20, u32::MAX - 3);
    let mut t = 0;
    // No handshake: the capture starts mid-connection, and both sequence spaces wrap.
    for _ in 0..4 {
        wire.data(true, t, 6);
        wire.ack(false, t + 40 * MS);
        wire.data(true, t + 40 * MS + 20 * US, 6);
        wire.data(false, t + 40 * MS + 60 * US, 12);
        t += 41 * MS;
    }
    let d = wire.only();
    assert!(!d.handshake_seen);
    // The guess: the ephemeral (higher) port is the client.
    assert_eq!(d.client, "10.0.0.1:40000".parse().unwrap());
    assert_eq!(d.stall_count, 4, "{:#?}", d.events);
    assert_eq!(d.bytes_client_to_server, 48);
    assert_eq!(d.bytes_server_to_client, 48);
}

#[test]
fn ack_that_came_promptly_over_a_long_path_is_no_stall() {
    // 100 ms round trip, no delayed ACK: the second write waits one round trip, which is
    // the path's, not a timer's.
    let mut wire = Wire::new(1, 2);
    write_write_read(&mut wire, 3, 50 * MS, 50 * MS, 0);
    let d = wire.only();
    assert_eq!(d.stall_count, 0, "{:#?}", d.events);
}

#[test]
fn gaps_below_the_threshold_are_ignored() {
    let mut wire = Wire::new(1, 2);
    write_write_read(&mut wire, 3, 10 * US, 10 * US, 5 * MS);
    let d = wire.only();
    assert!(d.events.is_empty(), "{:#?}", d.events);
}

#[test]
fn open_connections_stay_bounded_and_late_segments_are_counted() {
    let mut table = FlowTable::with_limit(DetectConfig::default(), 100);
    let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
    let mut ended = 0;
    for i in 0..1_000u32 {
        let client = SocketAddr::new([10, 1, (i >> 8) as u8, i as u8].into(), 40_000);
        let syn = Segment {
            time: i64::from(i) * MS,
            src: client,
            dst: server,
            seq: 1,
            ack: 0,
            flags: TcpFlags(TcpFlags::SYN),
            window: 1000,
            payload_len: 0,
            options: TcpOptions::default(),
            tunnel: 0,
        };
        table.observe(&syn, u64::from(i) + 1);
        assert!(table.open_connections() <= 100);
        ended += table.take_ended().count();
    }
    let connections = table.into_connections();
    assert_eq!(ended + connections.len(), 1_000);

    // The last ACK after both FINs belongs to the closed connection.
    let mut wire = Wire::new(1, 2);
    let t = wire.handshake(0, 10 * US, 10 * US) + MS;
    wire.data(true, t, 10);
    wire.emit(
        true,
        t + MS,
        0,
        TcpFlags::FIN | TcpFlags::ACK,
        TcpOptions::default(),
    );
    wire.emit(
        false,
        t + 2 * MS,
        0,
        TcpFlags::FIN | TcpFlags::ACK,
        TcpOptions::default(),
    );
    wire.ack(true, t + 3 * MS);
    assert_eq!(wire.table.late_segments, 1);
    assert_eq!(wire.table.into_connections().len(), 1);
}

/// A connection that stalls both ways: the client's request held by its Nagle behind a
/// first small write, the server's reply tail held behind its full segments. Each
/// direction names its own holder, delayer, timer, pattern and fixes; no endpoint is
/// both the holder and the delayer of one direction.
#[test]
fn stalls_both_ways_are_told_apart_per_direction() {
    let mut wire = Wire::new(1000, 5000);
    let mut t = wire.handshake(0, 10 * US, 10 * US) + MS;
    for _ in 0..3 {
        // The client writes 100 + 95 bytes; the server's 40 ms ACK releases the rest.
        wire.data(true, t, 100);
        wire.ack(false, t + 40 * MS);
        wire.data(true, t + 40 * MS + 20 * US, 95);
        // The server answers with 3 full segments and a tail; the client's ACK for the
        // odd third segment waits for its 200 ms timer, and Nagle holds the tail.
        let mut s = t + 40 * MS + 100 * US;
        for i in 1..=3 {
            wire.data(false, s, 1448);
            s += 12 * US;
            if i == 2 {
                wire.ack(true, s + 50 * US);
            }
        }
        let ack_at = s + 200 * MS;
        wire.ack(true, ack_at);
        wire.data(false, ack_at + 20 * US, 300);
        t = ack_at + MS;
    }
    let d = wire.only();
    assert_eq!(d.directions.len(), 2, "{:#?}", d.events);
    let client_held = d
        .directions
        .iter()
        .find(|x| x.holder == Role::Client)
        .unwrap();
    let server_held = d
        .directions
        .iter()
        .find(|x| x.holder == Role::Server)
        .unwrap();
    for direction in &d.directions {
        assert_ne!(direction.holder, direction.delayer);
        assert_eq!(direction.stall_count, 3);
        assert!(direction.fixes.iter().any(|f| f.role == direction.holder));
        assert!(direction.fixes.iter().any(|f| f.role == direction.delayer));
    }
    assert_eq!(client_held.pattern, Some(Pattern::WriteWriteRead));
    assert_eq!(
        client_held.delayed_ack.as_ref().unwrap().timer,
        TimerGuess::Linux40
    );
    assert_eq!(
        server_held.pattern,
        Some(Pattern::BulkOddTail { full_segments: 3 })
    );
    assert_eq!(
        server_held.delayed_ack.as_ref().unwrap().timer,
        TimerGuess::Fixed200
    );
    // The direction that lost the most comes first.
    assert_eq!(d.directions[0].holder, Role::Server);
    assert_eq!(d.stall_count, 6);
}
