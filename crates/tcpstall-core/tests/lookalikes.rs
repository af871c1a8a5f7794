//! The look-alikes of a Nagle x delayed-ACK stall, built by hand from what real captures
//! showed: each test fails if the detector calls one a stall, and checks the class and
//! the evidence it names instead.

mod common;

use common::{MS, US, Wire};
use tcpstall_core::basis::Link;
use tcpstall_core::detect::{StallClass, StallEvent};
use tcpstall_core::diagnosis::{ConnectionDiagnosis, Verdict};
use tcpstall_core::segment::{TcpFlags, TcpOptions};

fn assert_no_stall(d: &ConnectionDiagnosis) {
    assert_eq!(d.stall_count, 0, "{:#?}", d.events);
    assert!(
        d.events.iter().all(|e| !e.class.is_tcp_stall()),
        "{:#?}",
        d.events
    );
}

/// The gap that the data segment `packet` ended.
fn gap_ending_at(d: &ConnectionDiagnosis, packet: u64) -> &StallEvent {
    d.events
        .iter()
        .find(|e| e.evidence.data_after_packet == packet)
        .unwrap_or_else(|| panic!("no gap ends at packet {packet}: {:#?}", d.events))
}

/// An HMI that writes 7 bytes then 67 without waiting for any ACK: no Nagle. Once, the
/// 67 bytes happen to leave right after a late ACK; that is its own timing.
#[test]
fn a_sender_seen_without_nagle_is_not_held_by_a_late_ack() {
    let mut wire = Wire::new(10, 20);
    let mut t = wire.handshake(0, 20 * US, 2 * MS) + MS;
    for _ in 0..5 {
        wire.data(true, t, 7);
        wire.data(true, t + 200 * US, 67);
        wire.ack(false, t + 2300 * US);
        wire.data(false, t + 3 * MS, 20);
        t += 100 * MS;
    }
    wire.data(true, t, 7);
    wire.ack(false, t + 2 * MS + 60 * MS);
    let released = wire.packet + 1;
    wire.data(true, t + 62 * MS + 40 * US, 67);
    let d = wire.only();
    assert_no_stall(&d);
    let gap = gap_ending_at(&d, released);
    assert_eq!(gap.class, StallClass::AppThinkTime);
    assert!(gap.evidence.basis.contains(Link::SenderNotUsingNagle));
}

/// A meter sending a 54-byte reading every 20 ms, whatever the ACKs do. The receiver
/// first acknowledges each at once (quick-ack mode), then delays its ACKs 16 to 17 ms, so
/// each later reading follows an ACK by about the round trip. The readings keep time;
/// the ACKs change theirs.
#[test]
fn a_sender_on_its_own_clock_is_not_held_by_the_acks() {
    let mut wire = Wire::new(10, 20);
    // Captured near the receiver: the meter is 1.5 ms away.
    let start = wire.handshake(0, 3 * MS, 20 * US) + MS;
    for k in 0..16 {
        let sent = start + k * 20 * MS;
        wire.data(true, sent, 54);
        let ack_delay = if k < 6 {
            50 * US
        } else {
            16 * MS + (k % 3) * 500 * US
        };
        wire.ack(false, sent + ack_delay);
    }
    let d = wire.only();
    assert_no_stall(&d);
    assert!(!d.events.is_empty());
    for e in &d.events {
        assert_eq!(e.class, StallClass::AppThinkTime, "{e:#?}");
    }
}

/// A printer whose window each burst fills exactly (ACK win 6144 -> 4 x 1460): the
/// window, not the ACK's timer, holds the sender.
#[test]
fn a_burst_that_fills_the_window_is_receiver_window() {
    let mut wire = Wire::new(10, 20);
    let mut t = wire.handshake(0, 20 * US, 100 * US) + MS;
    for _ in 0..4 {
        for i in 0..4 {
            wire.data(true, t + i * 10 * US, 1460);
        }
        // 6144 bytes: room for 4 segments and 304 bytes more (window scale 7).
        wire.window = 48;
        wire.ack(false, t + 60 * MS);
        wire.window = 512;
        t += 60 * MS + 40 * US;
    }
    let d = wire.only();
    assert_no_stall(&d);
    assert!(
        d.events
            .iter()
            .any(|e| e.class == StallClass::ReceiverWindow
                && e.evidence.basis.contains(Link::BurstFillsWindow)),
        "{:#?}",
        d.events
    );
}

/// Two full segments acknowledged together, one round trip plus a queue later: RFC 1122
/// receivers send that ACK at once; the sender waited for the path.
#[test]
fn an_ack_for_two_full_segments_is_not_a_held_ack() {
    let mut wire = Wire::new(10, 20);
    let mut t = wire.handshake(0, 300 * MS, 100 * US) + MS;
    for _ in 0..6 {
        wire.data(false, t, 1460);
        wire.data(false, t + 12 * US, 1460);
        // 300 ms path and 13 ms of queue.
        wire.ack(true, t + 313 * MS);
        t += 313 * MS + 400 * US;
    }
    let d = wire.only();
    assert_no_stall(&d);
}

/// Flights of three full segments behind a slow bottleneck: they reach the receiver 12 ms
/// apart, and it acknowledges each at once. The last ACK of each flight, one segment
/// alone, comes 12 ms after the one before it: the link's pace, not a timer.
#[test]
fn acks_paced_by_a_bottleneck_are_not_held_acks() {
    let mut wire = Wire::new(10, 20);
    let mut t = wire.handshake(0, 20 * US, 60 * MS) + MS;
    for _ in 0..6 {
        let mut acked = 0;
        for i in 0..3 {
            wire.data(true, t + i * 12 * US, 1448);
        }
        for i in 0..3 {
            // Each ACK covers one segment: the client's counter moves one at a time.
            let sent = wire.client_next;
            wire.client_next = sent.wrapping_sub(1448 * (2 - i as u32));
            wire.ack(false, t + 60 * MS + i * 12 * MS);
            wire.client_next = sent;
            acked = i;
        }
        t += 60 * MS + acked * 12 * MS + 40 * US;
    }
    let d = wire.only();
    assert_no_stall(&d);
}

/// A FIN without data after a delayed ACK: nothing was held.
#[test]
fn a_bare_fin_is_never_the_held_segment() {
    let mut wire = Wire::new(10, 20);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(true, t, 100);
    wire.ack(false, t + 40 * MS);
    wire.emit(
        true,
        t + 40 * MS + 30 * US,
        0,
        TcpFlags::FIN | TcpFlags::ACK,
        TcpOptions::default(),
    );
    let d = wire.only();
    assert_no_stall(&d);
}

/// Data that reaches the capture point sooner after the ACK than the round trip to its
/// sender, and whose TSecr is older than the ACK: it was on its way before the ACK.
#[test]
fn data_sent_before_the_ack_could_arrive_was_not_released_by_it() {
    let mut wire = Wire::new(10, 20);
    // Captured at the client; the server is 17 ms away.
    let t = wire.handshake(0, 20 * US, 17 * MS) + MS;
    wire.data(false, t, 1348);
    wire.ack(true, t + 37 * MS);
    let echo = wire.last_tsval_of(true) - 30;
    wire.echo_once = Some(echo);
    let released = wire.packet + 1;
    wire.data(false, t + 48 * MS, 600);
    let d = wire.only();
    assert_no_stall(&d);
    let gap = gap_ending_at(&d, released);
    assert!(
        gap.evidence.basis.contains(Link::TsecrPredatesAck)
            || gap.evidence.basis.contains(Link::LeftBeforeAckCouldArrive),
        "{gap:#?}"
    );
}

/// An ACK a second after the data is no delayed ACK (RFC 1122: less than 0.5 s).
#[test]
fn an_ack_later_than_any_timer_is_unexplained() {
    let mut wire = Wire::new(10, 20);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(true, t, 100);
    wire.ack(false, t + 1000 * MS);
    wire.data(true, t + 1000 * MS + 30 * US, 200);
    let d = wire.only();
    assert_no_stall(&d);
    assert_eq!(d.events[0].class, StallClass::Unexplained);
    assert!(
        d.events[0]
            .evidence
            .basis
            .contains(Link::AckLaterThanAnyTimer)
    );
}

/// A receiver that stops reading: its window stays zero until the capture ends, and
/// the sender only probes. The wait is reported, as the window's.
#[test]
fn a_window_closed_until_the_end_is_reported() {
    let mut wire = Wire::new(10, 20);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(true, t, 1448);
    wire.window = 0;
    wire.ack(false, t + 100 * US);
    for probe in 1..=4 {
        wire.ack(true, t + probe * 3_000 * MS);
        wire.ack(false, t + probe * 3_000 * MS + 100 * US);
    }
    let d = wire.only();
    assert_no_stall(&d);
    assert_eq!(d.verdict, Verdict::ReceiverWindowLimited);
    let e = &d.events[0];
    assert_eq!(e.class, StallClass::ReceiverWindow);
    assert!(e.duration() >= 11_900 * MS, "{e:#?}");
    assert!(e.evidence.basis.contains(Link::StillClosedAtEnd));
}

/// Data that leaves some milliseconds after a delayed ACK could have reached its sender,
/// beyond the round trips the connection showed and a host's turnaround: TSecr echoing
/// the ACK proves the order, not that the ACK released it (a release driven by an ACK
/// leaves while the ACK is processed), so it is no stall either way.
#[test]
fn a_release_later_than_the_path_allows_is_no_stall_whatever_tsecr_says() {
    for timestamps in [false, true] {
        let mut wire = Wire::new(10, 20);
        wire.timestamps = timestamps;
        let mut t = wire.handshake(0, 20 * US, 20 * US) + MS;
        for _ in 0..3 {
            wire.data(true, t, 16);
            wire.ack(false, t + 40 * MS);
            wire.data(true, t + 48 * MS, 44);
            wire.data(false, t + 48 * MS + 100 * US, 44);
            t += 60 * MS;
        }
        let d = wire.only();
        assert_no_stall(&d);
        let late: Vec<&StallEvent> = d
            .events
            .iter()
            .filter(|e| e.evidence.released_segment_bytes == 44 && e.sender == 0)
            .collect();
        assert_eq!(late.len(), 3, "{:#?}", d.events);
        assert!(
            late.iter()
                .all(|e| e.evidence.basis.contains(Link::LeftLongAfterAck)),
            "{late:#?}"
        );
    }
}

/// A capture taken before segmentation offload: the release is one 2,896-byte record.
/// Nagle never holds a full segment, let alone two.
#[test]
fn a_record_larger_than_the_mss_is_never_held_by_nagle() {
    let mut wire = Wire::new(10, 20);
    let t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(true, t, 100);
    wire.ack(false, t + 40 * MS);
    wire.data(true, t + 40 * MS + 30 * US, 2896);
    let d = wire.only();
    assert!(
        d.events
            .iter()
            .all(|e| e.class != StallClass::NagleDelayedAck),
        "{:#?}",
        d.events
    );
}

/// Urgent data goes out past Nagle (Linux tcp_nagle_test, BSD tcp_output): a small
/// segment behind it in urgent mode does not show that the sender turned Nagle off, so
/// its later holds are still stalls.
#[test]
fn urgent_data_does_not_count_against_nagle() {
    let mut wire = Wire::new(10, 20);
    let mut t = wire.handshake(0, 20 * US, 20 * US) + MS;
    wire.data(false, t, 3);
    wire.emit(
        false,
        t + 100 * US,
        1,
        TcpFlags::ACK | TcpFlags::PSH | TcpFlags::URG,
        TcpOptions::default(),
    );
    wire.data(false, t + 200 * US, 1);
    wire.ack(true, t + 10 * MS);
    t += 20 * MS;
    for _ in 0..2 {
        wire.data(false, t, 69);
        wire.ack(true, t + 40 * MS);
        wire.data(false, t + 40 * MS + 30 * US, 2);
        wire.ack(true, t + 41 * MS);
        t += 100 * MS;
    }
    let d = wire.only();
    assert_eq!(d.stall_count, 2, "{:#?}", d.events);
}

/// A reply over a slow path: the server acknowledges the request 1.15 s after it left
/// (the round trip, not a timer) and answers 16 ms later. The wait is the path; only the
/// 16 ms are the server's own.
#[test]
fn path_latency_is_not_think_time() {
    let mut wire = Wire::new(10, 20);
    let t = wire.handshake(0, 16 * MS, 878 * MS) + MS;
    wire.data(true, t, 627);
    wire.ack(false, t + 1155 * MS);
    wire.data(false, t + 1171 * MS, 1406);
    let d = wire.only();
    let e = &d.events[0];
    assert_eq!(e.class, StallClass::AppThinkTime);
    let idle = e.idle.unwrap();
    assert!((15 * MS..=17 * MS).contains(&idle), "idle {idle}");
}
