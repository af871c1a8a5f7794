//! The packet comments of an annotated capture (`analyze --annotate`): for each gap of
//! the report, what a Wireshark user should read on which packet.
//!
//! Every comment starts with `tcpstall:` and names the gap's class, its number in the
//! connection (as `--stalls` numbers it) and the connection's (its place in the report,
//! `connections[N-1]` in the JSON). A TCP stall marks the data before the gap, the
//! delayed ACK, the held segment the ACK let go, and, when more data left in the same
//! burst, the end of that release; any other gap marks the packet that ended it.

use std::fmt::Write;

use crate::analyze::Analysis;
use crate::detect::{StallClass, StallEvent};
use crate::diagnosis::{ConnectionDiagnosis, TimerGuess};
use crate::segment::{NANOS_PER_MILLI, Nanos};

/// (packet number, comment) for every packet a gap of `analysis` names, in packet order;
/// a packet named by several gaps, or twice by one, has its comments in report order.
pub fn packet_comments(analysis: &Analysis) -> Vec<(u64, String)> {
    let mut comments = Vec::new();
    for (c, connection) in analysis.connections.iter().enumerate() {
        for (n, event) in connection.events.iter().enumerate() {
            event_comments(connection, c + 1, n + 1, event, &mut comments);
        }
    }
    // Stable: the comments of one packet stay in report order.
    comments.sort_by_key(|(packet, _)| *packet);
    comments
}

/// The comments of one gap, the `n`th of connection `conn`.
fn event_comments(
    c: &ConnectionDiagnosis,
    conn: usize,
    n: usize,
    e: &StallEvent,
    out: &mut Vec<(u64, String)>,
) {
    let class = e.class.name();
    let ev = &e.evidence;
    let gap = ms(e.duration());
    let sender = c.role_of_side(e.sender).name();
    let mut push = |packet: u64, text: String| {
        if packet > 0 {
            out.push((packet, text));
        }
    };
    if !e.class.is_tcp_stall() {
        let label = format!("tcpstall: {class} gap {n} of conn {conn}");
        push(
            ev.data_after_packet,
            format!("{label}: {}", gap_ending(c, e)),
        );
        return;
    }
    let label = format!("tcpstall: {class} stall {n} of conn {conn}");
    let Some(ack) = ev.ack_packet else {
        // A stall always has its ACK; without one, only the gap's end can be named.
        push(ev.data_after_packet, format!("{label}: {gap} ms gap ends"));
        return;
    };
    let holder = e.holder.map_or(sender, |side| c.role_of_side(side).name());
    let delayer = e
        .delayer
        .map_or("receiver", |side| c.role_of_side(side).name());
    let waiting = match e.class {
        StallClass::NagleDelayedAck => "Nagle held its next data",
        _ => "its next data waited",
    };
    push(
        ev.data_before_packet,
        format!(
            "{label}: data before the {gap} ms gap; {waiting} for the ACK in packet {ack}, which the {delayer} delayed"
        ),
    );
    let delay = e
        .ack_delay
        .map_or_else(|| "held".to_string(), |d| format!("held {} ms", ms(d)));
    push(
        ack,
        format!(
            "{label}: delayed ACK, {delay} by the {delayer}'s timer ({}); it released packet {}",
            timer_of(c, e),
            ev.data_after_packet
        ),
    );
    let mut held = match e.class {
        StallClass::NagleDelayedAck => format!(
            "{label}: held segment, released by the ACK in packet {ack}: Nagle held {} bytes of the {holder} for {gap} ms",
            e.held_bytes
        ),
        _ => format!(
            "{label}: held segment, released by the ACK in packet {ack}: {} bytes of the {holder} waited {gap} ms for it",
            e.held_bytes
        ),
    };
    let burst = ev.released_last_packet > ev.data_after_packet;
    if burst {
        let _ = write!(
            held,
            "; the release goes on to packet {}",
            ev.released_last_packet
        );
    }
    let _ = write!(held, " (confidence {})", ev.confidence.name());
    push(ev.data_after_packet, held);
    if burst {
        push(
            ev.released_last_packet,
            format!(
                "{label}: end of the release: {} bytes in all let go by the ACK in packet {ack}",
                e.held_bytes
            ),
        );
    }
}

/// What ended a gap other than a TCP stall, and how long it was.
fn gap_ending(c: &ConnectionDiagnosis, e: &StallEvent) -> String {
    let gap = ms(e.duration());
    let sender = c.role_of_side(e.sender).name();
    match e.class {
        StallClass::AppThinkTime => match e.idle {
            Some(idle) => format!(
                "ends a {gap} ms gap: the {sender} had nothing to send for {} ms",
                ms(idle)
            ),
            None => format!("ends a {gap} ms gap: the {sender} had nothing to send"),
        },
        StallClass::ReceiverWindow => {
            let receiver = e
                .delayer
                .map_or("receiver", |side| c.role_of_side(side).name());
            format!("ends a {gap} ms gap: the {receiver}'s window held the {sender}")
        }
        StallClass::RetransmissionTimeout => {
            format!("ends a {gap} ms gap: the {sender} retransmitted")
        }
        _ => format!(
            "ends a {gap} ms gap: the {sender}'s data followed an ACK, but the capture cannot show what held it"
        ),
    }
}

/// The delayed-ACK timer the stall's delayer showed over the connection, e.g. "Linux
/// 40 ms".
fn timer_of(c: &ConnectionDiagnosis, e: &StallEvent) -> String {
    let holder = e.holder.map(|side| c.role_of_side(side));
    let profile = c
        .directions
        .iter()
        .find(|d| Some(d.holder) == holder)
        .and_then(|d| d.delayed_ack.as_ref());
    let Some(profile) = profile else {
        return "timer not read".to_string();
    };
    let stacks = profile.reading.timer.stacks().join(" or ");
    match profile.reading.timer {
        TimerGuess::Linux40 => format!("{stacks} 40 ms"),
        TimerGuess::FreeBsd100 => format!("{stacks} 100 ms"),
        TimerGuess::Fixed200 => format!("{stacks} 200 ms"),
        TimerGuess::WindowsTicks => format!("{stacks} 100 to 200 ms"),
        TimerGuess::PhasedTick200 => format!("a 200 ms tick: {stacks}"),
        TimerGuess::Other => profile.reading.describe(),
    }
}

fn ms(n: Nanos) -> String {
    format!("{:.1}", n as f64 / NANOS_PER_MILLI as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::{AnalyzeOptions, analyze};

    fn seed002() -> Analysis {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../captures/seed002-two-writes.pcap"
        );
        let file = std::fs::File::open(path).expect("the shipped capture");
        analyze(file, "seed002", &AnalyzeOptions::default()).expect("analysed")
    }

    #[test]
    fn each_nagle_stall_names_its_data_ack_and_held_segment() {
        let analysis = seed002();
        let comments = packet_comments(&analysis);
        let c = &analysis.connections[0];
        let stalls: Vec<&StallEvent> = c.events.iter().filter(|e| e.class.is_tcp_stall()).collect();
        assert_eq!(stalls.len(), 9);
        assert!(comments.windows(2).all(|w| w[0].0 <= w[1].0));
        for e in stalls {
            let ev = &e.evidence;
            let on = |packet: u64| -> Vec<&str> {
                comments
                    .iter()
                    .filter(|(p, _)| *p == packet)
                    .map(|(_, t)| t.as_str())
                    .collect()
            };
            let ack = ev.ack_packet.expect("a stall's ACK");
            for packet in [ev.data_before_packet, ack, ev.data_after_packet] {
                let texts = on(packet);
                assert_eq!(texts.len(), 1, "packet {packet}: {texts:?}");
                assert!(texts[0].starts_with("tcpstall: nagle-delayed-ack stall "));
                assert!(texts[0].contains(" of conn 1: "), "{}", texts[0]);
            }
            let delayed = on(ack)[0];
            assert!(delayed.contains("delayed ACK, held 4"), "{delayed}");
            assert!(
                delayed.contains("by the server's timer (Linux 40 ms)"),
                "{delayed}"
            );
            let held = on(ev.data_after_packet)[0];
            assert!(
                held.contains(&format!(
                    "held segment, released by the ACK in packet {ack}: Nagle held 6 bytes of the client for "
                )),
                "{held}"
            );
        }
        // Nothing but the gaps' packets.
        let named: usize = c
            .events
            .iter()
            .map(|e| if e.class.is_tcp_stall() { 3 } else { 1 })
            .sum();
        assert_eq!(comments.len(), named);
    }
}
