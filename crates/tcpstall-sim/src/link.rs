//! The path between the endpoints: each host's interface (serialization at the link
//! bandwidth), the propagation delay with jitter, a varying queue-like delay and loss,
//! and an optional bottleneck with a FIFO queue and tail drop, placed just beyond the
//! capture point, as is an optional outage (the path stops forwarding for a while).
//!
//! The capture point sits at a fraction of each one-way delay. The bottleneck sits on
//! its far side: between the capture point and the server for a client or tap capture,
//! between it and the client for a server capture. What the near endpoint sends is
//! captured before it queues; what the far endpoint sends is captured after it queued,
//! so a growing queue shows at the capture point as data and ACKs arriving late.

use std::collections::VecDeque;

use tcpstall_core::segment::Nanos;
use tcpstall_core::side::{PerSide, Side};

use crate::scenario::LinkConfig;

/// A small deterministic generator (xorshift64*) for jitter, loss and timer phases.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One direction of the path: its host interface and the order it keeps.
#[derive(Default)]
struct Lane {
    free_at: Nanos,
    last_arrival: Nanos,
    /// When its last packet passed the capture point: a varying delay keeps the order.
    last_captured: Nanos,
    /// Where the varying delay stands, 0 (the floor) to 1 (the floor times 1 + spread).
    level: f64,
}

/// How far the varying delay's level moves from one packet to the next, at most.
const VARIATION_STEP: f64 = 0.25;

/// A delay that follows a bounded random walk between the floor and the floor times
/// `1 + spread`, one step per packet (a queue on the path that fills and drains): a
/// packet never overtakes the one before it, so the delay varies without reordering.
fn vary(lane: &mut Lane, floor: Nanos, spread: f64, rng: &mut Rng) -> Nanos {
    let step = (2.0 * rng.unit() - 1.0) * VARIATION_STEP;
    let mut level = lane.level + step;
    // Reflected at the bounds, so the walk stays spread over the whole range.
    if level < 0.0 {
        level = -level;
    }
    if level > 1.0 {
        level = 2.0 - level;
    }
    lane.level = level.clamp(0.0, 1.0);
    floor + (floor as f64 * spread * lane.level) as Nanos
}

/// The bottleneck's queue in one direction: when each queued packet leaves it.
#[derive(Default)]
struct BottleneckQueue {
    departures: VecDeque<Nanos>,
    free_at: Nanos,
}

/// What the path did with one packet.
#[derive(Clone, Copy, Debug)]
pub struct Transit {
    /// When it finished leaving the sender's interface.
    pub departed_host: Nanos,
    /// When it passed the capture point, if it got that far.
    pub captured_at: Option<Nanos>,
    /// When it reaches the other endpoint; None when it was lost.
    pub arrival: Option<Nanos>,
    /// Time it spent queued at the bottleneck.
    pub queued: Nanos,
}

pub struct Link {
    config: LinkConfig,
    /// One-way delays, client to server and server to client.
    pub delays: PerSide<Nanos>,
    /// The capture point's fraction of the path from the client.
    capture_fraction: f64,
    lanes: PerSide<Lane>,
    bottleneck: PerSide<BottleneckQueue>,
    /// The varying delay's own generator, so that it leaves the runs' other draws alone.
    variation_rng: Rng,
}

/// Ethernet, IPv4 and TCP header bytes on the wire per segment (no options).
pub const FRAME_OVERHEAD: u64 = 14 + 20 + 20;

impl Link {
    pub fn new(config: &LinkConfig, capture_fraction: f64) -> Link {
        let half = config.rtt_ms / 2.0;
        let to_nanos = |ms: f64| (ms * 1e6).round() as Nanos;
        let mut variation_rng = Rng::new(config.seed ^ 0x5eed_de1a);
        let mut lane = || Lane {
            level: variation_rng.unit(),
            ..Lane::default()
        };
        let lanes = PerSide::new(lane(), lane());
        Link {
            config: config.clone(),
            delays: PerSide::new(
                to_nanos(config.client_to_server_ms.unwrap_or(half)),
                to_nanos(config.server_to_client_ms.unwrap_or(half)),
            ),
            capture_fraction,
            lanes,
            bottleneck: PerSide::default(),
            variation_rng,
        }
    }

    /// The share of a packet's one-way delay from its sender to the capture point.
    pub fn share_to_capture(&self, from: Side) -> f64 {
        if from == Side::First {
            self.capture_fraction
        } else {
            1.0 - self.capture_fraction
        }
    }

    /// When a packet reaching the far side of the capture point at `at` goes on: at once,
    /// or when the outage it meets ends.
    fn outage_end(&self, at: Nanos) -> Nanos {
        let Some(start) = self.config.outage_at_ms else {
            return at;
        };
        let to_nanos = |ms: f64| (ms * 1e6).round() as Nanos;
        let (start, end) = (to_nanos(start), to_nanos(start + self.config.outage_ms));
        if (start..end).contains(&at) { end } else { at }
    }

    /// The endpoint on the capture point's side of the bottleneck.
    fn near_side(&self) -> Side {
        Side::second_if(self.capture_fraction >= 1.0)
    }

    fn serialization(bytes: u64, bps: f64) -> Nanos {
        (bytes as f64 * 8.0 / bps * 1e9) as Nanos
    }

    /// Carries one packet of `bytes` from `from`, sent at `now`.
    pub fn carry(
        &mut self,
        from: Side,
        now: Nanos,
        bytes: u64,
        syn: bool,
        rng: &mut Rng,
    ) -> Transit {
        let lane = &mut self.lanes[from];
        let start = now.max(lane.free_at);
        let departed_host = start + Self::serialization(bytes, self.config.bandwidth_bps);
        lane.free_at = departed_host;
        let jitter = if self.config.jitter_ms > 0.0 {
            (rng.unit() * self.config.jitter_ms * 1e6) as Nanos
        } else {
            0
        };
        let lost_on_path = self.config.loss > 0.0 && !syn && rng.unit() < self.config.loss;
        let share = self.share_to_capture(from);
        let base = if self.config.delay_variation > 0.0 {
            vary(
                &mut self.lanes[from],
                self.delays[from],
                self.config.delay_variation,
                &mut self.variation_rng,
            )
        } else {
            self.delays[from]
        };
        let delay = base + jitter;
        let nominal_to_capture = (delay as f64 * share) as Nanos;
        let mut to_capture = nominal_to_capture;
        if self.config.delay_variation > 0.0 || self.config.jitter_ms > 0.0 {
            // FIFO: no packet passes the capture point before the one sent ahead of it.
            let lane = &mut self.lanes[from];
            to_capture = to_capture.max(lane.last_captured.saturating_sub(departed_host));
            lane.last_captured = departed_host + to_capture;
        }
        let at_capture = departed_host + to_capture;
        // A packet reaching an outage beyond the capture point waits for its end, in order.
        let past_point = self.outage_end(at_capture);
        let (captured_at, leaves_point, queued, dropped_in_queue) = match self.config.bottleneck_bps
        {
            None => {
                let seen = if from == self.near_side() {
                    at_capture
                } else {
                    past_point
                };
                (seen, past_point, past_point - at_capture, false)
            }
            Some(bps) => {
                let queue = &mut self.bottleneck[from];
                match enqueue(
                    queue,
                    past_point,
                    bytes,
                    bps,
                    self.config.bottleneck_queue_packets,
                ) {
                    None => (at_capture, at_capture, 0, true),
                    Some(left) => {
                        // The near endpoint's packets are captured before the queue, the far
                        // endpoint's after it.
                        let seen = if from == self.near_side() {
                            at_capture
                        } else {
                            left
                        };
                        (seen, left, left - at_capture, false)
                    }
                }
            }
        };
        // A packet lost on the path is lost half way: a capture point on the sender's half
        // sees it. A packet dropped by the queue is seen only if captured before it.
        let seen = if dropped_in_queue {
            from == self.near_side()
        } else {
            !lost_on_path || share < 0.5
        };
        let lane = &mut self.lanes[from];
        let arrival = (leaves_point + delay - nominal_to_capture).max(lane.last_arrival);
        let delivered = !lost_on_path && !dropped_in_queue;
        if delivered {
            lane.last_arrival = arrival;
        }
        Transit {
            departed_host,
            captured_at: seen.then_some(captured_at.min(arrival)),
            arrival: delivered.then_some(arrival),
            queued,
        }
    }
}

/// FIFO with tail drop (a bottleneck of `bps` holding at most `limit` packets): when the
/// packet arriving at `at` leaves, or None when the queue is full.
fn enqueue(
    queue: &mut BottleneckQueue,
    at: Nanos,
    bytes: u64,
    bps: f64,
    limit: u32,
) -> Option<Nanos> {
    while queue.departures.front().is_some_and(|&d| d <= at) {
        queue.departures.pop_front();
    }
    if queue.departures.len() >= limit as usize {
        return None;
    }
    let leaves = at.max(queue.free_at) + Link::serialization(bytes, bps);
    queue.free_at = leaves;
    queue.departures.push_back(leaves);
    Some(leaves)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(bottleneck_bps: Option<f64>, queue: u32, capture: f64) -> Link {
        let config = LinkConfig {
            rtt_ms: 10.0,
            bottleneck_bps,
            bottleneck_queue_packets: queue,
            ..LinkConfig::default()
        };
        Link::new(&config, capture)
    }

    #[test]
    fn a_queue_delays_what_follows_a_burst_and_drops_past_its_limit() {
        let mut link = link(Some(1e6), 3, 0.0);
        let mut rng = Rng::new(1);
        // 1,500-byte frames at 1 Mbit/s take 12 ms each through the bottleneck.
        let first = link.carry(Side::First, 0, 1500, false, &mut rng);
        let second = link.carry(Side::First, 0, 1500, false, &mut rng);
        let third = link.carry(Side::First, 0, 1500, false, &mut rng);
        let fourth = link.carry(Side::First, 0, 1500, false, &mut rng);
        assert!(first.arrival.is_some() && third.arrival.is_some());
        let spacing = second.arrival.unwrap() - first.arrival.unwrap();
        assert!((11_900_000..12_100_000).contains(&spacing), "{spacing}");
        assert!(third.queued > 20_000_000, "{:?}", third);
        assert_eq!(fourth.arrival, None, "the fourth is dropped at the tail");
        // Captured at the client, before the queue: all four are seen, at once.
        assert!(fourth.captured_at.is_some());
    }

    #[test]
    fn the_far_sides_packets_are_captured_after_the_queue() {
        let mut link = link(Some(1e6), 100, 0.0);
        let mut rng = Rng::new(1);
        let data = link.carry(Side::Second, 0, 1500, false, &mut rng);
        let ack = link.carry(Side::Second, 0, 54, false, &mut rng);
        // The ACK queued behind the data: it passes the capture point 12 ms later than
        // it would on an idle path.
        let ack_at = ack.captured_at.unwrap();
        assert!(ack_at > data.captured_at.unwrap());
        assert!(ack.queued > 11_000_000, "{:?}", ack);
    }

    /// Packet `i` (`transit`) neither reached its endpoint nor passed the capture point
    /// before the one sent ahead of it (`last`: when that one did each), nor was captured
    /// after it arrived.
    fn assert_in_order(i: Nanos, transit: &Transit, last: &mut (Nanos, Nanos)) {
        let (arrival, captured) = (transit.arrival.unwrap(), transit.captured_at.unwrap());
        assert!(arrival >= last.0, "packet {i} overtook the one before it");
        assert!(
            captured >= last.1,
            "packet {i} passed the capture point early"
        );
        assert!(
            captured <= arrival,
            "packet {i} was captured after it arrived"
        );
        *last = (arrival, captured);
    }

    #[test]
    fn jitter_keeps_the_order_at_every_capture_point() {
        // Segments 12 us apart on a gigabit link, with up to 100 us of jitter each: at the
        // receiver, and at a tap, they pass in the order they were sent.
        let config = LinkConfig {
            rtt_ms: 300.0,
            jitter_ms: 0.1,
            ..LinkConfig::default()
        };
        for capture in [0.5, 1.0] {
            let mut link = Link::new(&config, capture);
            let mut rng = Rng::new(1);
            let mut last = (0, 0);
            for i in 0..1000 {
                let transit = link.carry(Side::First, i * 12_000, 1514, false, &mut rng);
                assert_in_order(i, &transit, &mut last);
            }
        }
    }

    #[test]
    fn a_varying_delay_stays_between_its_bounds_and_keeps_the_order() {
        let config = LinkConfig {
            rtt_ms: 80.0,
            delay_variation: 0.3,
            ..LinkConfig::default()
        };
        let mut link = Link::new(&config, 0.5);
        let mut rng = Rng::new(1);
        let (floor, top) = (40_000_000, 52_000_000);
        let mut delays = Vec::new();
        let mut last = (0, 0);
        for i in 0..2000 {
            // Pairs sent back to back, then a millisecond apart.
            let now = (i / 2) * 1_000_000;
            let transit = link.carry(Side::First, now, 100, false, &mut rng);
            assert_in_order(i, &transit, &mut last);
            let delay = transit.arrival.unwrap() - transit.departed_host;
            assert!((floor..=top + 1_000_000).contains(&delay), "{delay}");
            delays.push(delay);
        }
        let low = delays.iter().filter(|&&d| d < floor + 2_000_000).count();
        let high = delays.iter().filter(|&&d| d > top - 2_000_000).count();
        assert!(
            low > 50 && high > 50,
            "the walk spans the range: {low} low, {high} high"
        );
        // Seeded: the same scenario, the same delays.
        let mut again = Link::new(&config, 0.5);
        let first = again.carry(Side::First, 0, 100, false, &mut Rng::new(1));
        assert_eq!(first.arrival.unwrap() - first.departed_host, delays[0]);
    }
}
