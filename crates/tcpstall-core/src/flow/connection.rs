//! A connection: what each segment does to the state of its two directions (handshake,
//! ACKs, data), and what the connection found; its gaps are assembled in `gap.rs`.

use crate::detect::StallClass;
use std::collections::VecDeque;
use std::net::SocketAddr;

use super::acks::{PureAck, SAME_FLIGHT};
use super::copies::CaptureCopies;
use super::direction::{
    Direction, INITIAL_IN_FLIGHT, InFlight, LastSegment, MAX_TRACKED_IN_FLIGHT,
};
use super::sender::SentData;
use crate::detect::{DetectConfig, GapContext, StallEvent};
use crate::path::{CLOCK_SAMPLE_PACKETS, ClockStep};
use crate::segment::{Nanos, Segment};
use crate::seq::{ORIGIN, SeqNumber};
use crate::side::{PerSide, Side};

/// TCP timestamps take 12 option bytes (RFC 7323: 10 bytes, padded to 12) in every segment.
pub(super) const TIMESTAMP_OPTION_BYTES: u32 = 12;

/// MSS assumed when no SYN was captured: Ethernet's 1460 less timestamps when in use.
pub(super) const DEFAULT_ETHERNET_MSS: u32 = 1460;

/// Gaps kept unclassified per connection, waiting for better round-trip estimates.
pub(super) const MAX_PENDING_GAPS: usize = 32;

#[derive(Clone, Debug)]
pub(super) struct PendingGap {
    pub(super) context: GapContext,
    /// Payload of the last segment of the burst that ended the gap.
    pub(super) last_burst_segment: u32,
}

/// A TCP connection and what was found in it. Laid out like [`Direction`]: first what
/// every segment uses, then the two directions, then the rest.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Connection {
    pub packets: u64,
    pub last_time: Nanos,
    pub(super) synack_time: Option<Nanos>,
    /// The side that sent the SYN, if the handshake was captured.
    pub syn_sender: Option<Side>,
    pub reset: bool,
    /// The capture showed it missed a segment of this connection: data past a stretch
    /// of sequence it never saw, or an ACK or TSecr of something it never saw. Until
    /// then it is taken to have seen every ACK.
    pub(super) capture_missed: bool,
    /// The gap whose released data may continue in the next segments.
    /// (gap index, sender, release time, the release's ACK field).
    pub(super) open_release: Option<(usize, Side, Nanos, SeqNumber)>,
    pub(super) clock: ClockStep,
    /// The last data-bearing segment: time, side, packet number.
    pub(super) last_data: Option<(Nanos, Side, u64)>,
    /// By sender, the newest data acknowledged inside a gap waiting to be classified
    /// ([`Nanos::MIN`]: none): a later ACK of data far newer concerns none of them.
    pub(super) pending_acked_data_time: PerSide<Nanos>,
    pub dirs: PerSide<Direction>,
    /// Gaps waiting to be classified when the connection's round trips are known.
    pub(super) gaps: Vec<PendingGap>,
    pub duplicates: u64,
    copies: CaptureCopies,
    /// The two endpoints, by side.
    pub endpoints: PerSide<SocketAddr>,
    /// The overlay network the connection runs in ([`Segment::tunnel`]), 0 when none.
    pub tunnel: u32,
    pub first_time: Nanos,
    pub first_packet: u64,
    pub(super) syn_time: Option<Nanos>,
    pub events: Vec<StallEvent>,
    /// Gaps beyond each class's listing limit: (count, total duration), by class index.
    pub unlisted: [(u64, Nanos); StallClass::COUNT],
    pub(super) listed: [usize; StallClass::COUNT],
}

impl Connection {
    /// A connection opened by `segment`, sent by side `x`.
    pub(super) fn new(segment: &Segment, x: Side, packet: u64) -> Connection {
        let mut endpoints = PerSide::new(segment.src, segment.dst);
        if x == Side::Second {
            endpoints.swap();
        }
        Connection {
            endpoints,
            tunnel: segment.tunnel,
            syn_sender: None,
            first_time: segment.time,
            last_time: segment.time,
            first_packet: packet,
            packets: 0,
            dirs: PerSide::default(),
            events: Vec::new(),
            unlisted: [(0, 0); StallClass::COUNT],
            listed: [0; StallClass::COUNT],
            reset: false,
            capture_missed: false,
            syn_time: None,
            synack_time: None,
            last_data: None,
            gaps: Vec::new(),
            pending_acked_data_time: PerSide::new(Nanos::MIN, Nanos::MIN),
            open_release: None,
            duplicates: 0,
            copies: CaptureCopies::default(),
            clock: ClockStep::default(),
        }
    }

    pub fn side_of(&self, addr: &SocketAddr) -> Side {
        Side::second_if(self.endpoints[Side::First] != *addr)
    }

    /// The side that opened the connection, or the best guess: the side with the
    /// ephemeral-looking (higher) port when the handshake was not captured.
    pub fn client_side(&self) -> Side {
        if let Some(side) = self.syn_sender {
            return side;
        }
        let ports = self.endpoints.map(|endpoint| endpoint.port());
        Side::second_if(ports[Side::Second] > ports[Side::First])
    }

    pub fn handshake_seen(&self) -> bool {
        self.syn_sender.is_some()
    }

    /// The largest segment `side` may send: the MSS the other side announced, less the
    /// timestamp option when both sides use it; inferred when the SYNs were not captured.
    pub fn send_mss(&self, side: Side) -> (u32, MssSource) {
        let mss = self.segment_mss(side);
        let largest = self.dirs[side].max_payload;
        if self.dirs[side.other()].mss_option.is_some() {
            (mss, MssSource::Syn)
        } else if largest > mss {
            (largest, MssSource::Inferred)
        } else {
            (mss, MssSource::Assumed)
        }
    }

    /// The size from which `side`'s segments are full-sized: the MSS its peer announced,
    /// or the smaller segment limit it was seen keeping to.
    pub(super) fn full_size(&self, side: Side) -> u32 {
        self.dirs[side].sender.full_size(self.segment_mss(side))
    }

    /// The MSS `side`'s segments are judged by: the one its peer announced (less the
    /// timestamp option when both sides use it), or Ethernet's when no SYN was captured
    /// (a capture taken before segmentation offload shows larger records, which are no
    /// bigger segments).
    pub(super) fn segment_mss(&self, side: Side) -> u32 {
        let timestamps = self.dirs[side].timestamps_seen && self.dirs[side.other()].timestamps_seen;
        let overhead = if timestamps {
            TIMESTAMP_OPTION_BYTES
        } else {
            0
        };
        match self.dirs[side.other()].mss_option {
            Some(mss) => u32::from(mss).saturating_sub(overhead).max(1),
            None => DEFAULT_ETHERNET_MSS - overhead,
        }
    }

    pub fn path_rtt(&self, side: Side) -> Nanos {
        self.dirs[side].path_rtt().unwrap_or(0)
    }

    pub(super) fn window_scale(&self, side: Side) -> Option<u8> {
        let (own, peer) = (&self.dirs[side], &self.dirs[side.other()]);
        if own.syn_seen && peer.syn_seen {
            // RFC 7323 2.2: scaling is on only when both SYNs carry the option.
            match (own.window_scale_option, peer.window_scale_option) {
                (Some(shift), Some(_)) => Some(shift.min(14)),
                _ => Some(0),
            }
        } else {
            None
        }
    }

    /// Feeds `segment`, sent by side `x`.
    pub(super) fn observe(
        &mut self,
        segment: &Segment,
        x: Side,
        packet: u64,
        config: &DetectConfig,
    ) {
        let y = x.other();
        let t = segment.time;

        if self.copies.is_copy(segment, x) {
            // The same packet captured again (mirrored links, two interfaces, or "any"):
            // count, skip.
            self.duplicates += 1;
            return;
        }
        // This side's previous segment, for the ACK it may be.
        let previous_time = (self.dirs[x].packets > 0).then_some(self.dirs[x].last_raw_time);
        self.dirs[x].last_raw_time = t;
        if self.packets < CLOCK_SAMPLE_PACKETS {
            self.clock.observe(t);
        }
        self.packets += 1;
        self.dirs[x].packets += 1;
        self.last_time = self.last_time.max(t);

        if segment.flags.rst() {
            self.reset = true;
        }
        if segment.flags.syn() {
            self.observe_syn(segment, x, y);
        }
        if segment.options.timestamps.is_some() {
            self.dirs[x].timestamps_seen = true;
        }
        self.dirs[x].highest_ttl = self.dirs[x].highest_ttl.max(segment.ttl);

        let dir = &mut self.dirs[x];
        if !dir.started {
            // Sequence numbers are kept relative to the first one seen, from an origin far
            // enough above zero that older bytes (retransmitted, or acknowledged before the
            // capture began) still have a place.
            dir.started = true;
            dir.base = segment.seq;
            dir.snd_max = ORIGIN + u64::from(segment.flags.syn());
            dir.snd_una = ORIGIN;
        }
        // A SYN takes the first sequence number; its payload (TCP Fast Open) follows it.
        let seq_start = dir.position(segment.seq) + u64::from(segment.flags.syn());
        let seq_end = seq_start + u64::from(segment.payload_len) + u64::from(segment.flags.fin());
        let carries_data = segment.payload_len > 0 || segment.flags.fin();
        let is_retransmission =
            carries_data && seq_end <= self.dirs[x].snd_max && !segment.flags.syn();

        // This side's previous segment: when it acknowledged new data of the other side,
        // if it did (the gap this segment may end may have been waiting for it).
        let dir = &mut self.dirs[x];
        let own = &dir.last;
        let previous_own_ack = own.has(LastSegment::ACK_ADVANCED).then_some(own.time);
        if carries_data && !own.has(LastSegment::CARRIES_DATA) && own.has(LastSegment::SEEN) {
            // Its last segment was a pure ACK, and data follows it: a release that crosses
            // this data was answering that ACK.
            dir.last_pure_ack = *own;
        }
        if own.has(LastSegment::SEEN)
            && own.has(LastSegment::HAS_TSVAL)
            && !own.has(LastSegment::CARRIES_DATA)
        {
            dir.last_bare_tsval = Some((own.tsval, own.time));
        }
        let pure_ack_before =
            own.has(LastSegment::ACK_ADVANCED) && !own.has(LastSegment::CARRIES_DATA);
        if pure_ack_before {
            dir.previous_ack = *own;
        } else {
            dir.previous_ack.flags = 0;
        }
        // Recorded in place: this runs on every segment.
        self.dirs[x].last = LastSegment::begin(packet, t, previous_time);
        // RFC 7323 4.3: the other side updates TS.Recent from this segment only if it
        // has acknowledged everything before it (SEG.SEQ <= Last.ACK.sent).
        let owed = self.dirs[x].snd_una < seq_start.min(self.dirs[x].snd_max);
        self.dirs[x].last.set(LastSegment::SENDER_OWED_ACK, owed);
        self.dirs[x]
            .last
            .set(LastSegment::CARRIES_DATA, carries_data);
        // The ACK field acknowledges the other side's data.
        if segment.flags.ack() && self.dirs[y].started {
            self.observe_ack(segment, x, y, t);
        }

        // The window this side advertises limits the other side.
        let window_before = self.dirs[x].window;
        if !segment.flags.syn() {
            let scaled = self.dirs[x]
                .window_shift
                .map(|shift| u64::from(segment.window) << shift);
            self.dirs[x].window = match scaled {
                Some(w) => Some(w),
                None if segment.window == 0 => Some(0),
                None => None,
            };
            if segment.window == 0 {
                let dir = &mut self.dirs[x];
                dir.zero_window_in_gap = true;
                if !dir.window_closed {
                    dir.window_closed = true;
                    dir.zero_window_since = (t, packet);
                }
            } else if self.dirs[x].window_closed {
                self.dirs[x].window_closed = false;
            }
        }

        let tsval = segment.options.timestamps.map(|(val, _)| val);
        let tsval_is_new = tsval.is_some_and(|val| self.dirs[x].timestamps.observe(t, val));
        if let Some((val, ecr)) = segment.options.timestamps {
            self.note_echo(
                x,
                val,
                ecr,
                tsval_is_new,
                carries_data || segment.flags.syn(),
            );
        }
        self.dirs[x]
            .last
            .window_and_tsval(window_before, tsval, tsval_is_new);
        let last = &self.dirs[x].last;
        if last.has(LastSegment::ACK_ADVANCED)
            && !carries_data
            && last.acked_data_time != LastSegment::NO_TIME
            && last.time - last.acked_data_time >= self.path_rtt(x) + config.min_gap
        {
            let dir = &mut self.dirs[x];
            let (last, window) = (dir.last, dir.window);
            dir.late_acks.get_or_insert_default().push(last, window);
        }
        if let Some((_, sender, _, _)) = self.open_release
            && sender == y
        {
            self.open_release = None;
        }

        if carries_data {
            self.observe_data(
                segment,
                packet,
                x,
                (seq_start, seq_end),
                is_retransmission,
                previous_own_ack,
                config,
            );
        }
    }

    /// What side `x`'s timestamps show about TS.Recent: whether it echoes a TSval that
    /// only a pure ACK of the other side carried, and which of its own TSvals only pure
    /// ACKs carried.
    pub(super) fn note_echo(
        &mut self,
        x: Side,
        tsval: u32,
        tsecr: u32,
        is_new: bool,
        not_pure_ack: bool,
    ) {
        let y = x.other();
        if !self.dirs[x].echoes_pure_acks
            && self.dirs[y].newest_tsval_pure_ack_only
            && self.dirs[y].newest_tsval == tsecr
        {
            self.dirs[x].echoes_pure_acks = true;
        }
        let dir = &mut self.dirs[x];
        if is_new {
            dir.newest_tsval = tsval;
            dir.newest_tsval_pure_ack_only = !not_pure_ack;
        } else if not_pure_ack && tsval == dir.newest_tsval {
            dir.newest_tsval_pure_ack_only = false;
        }
    }

    pub(super) fn observe_syn(&mut self, segment: &Segment, x: Side, y: Side) {
        let dir = &mut self.dirs[x];
        dir.syn_seen = true;
        dir.mss_option = segment.options.mss;
        dir.window_scale_option = segment.options.window_scale;
        dir.timestamps_option = segment.options.timestamps.is_some();
        if !segment.flags.ack() {
            self.syn_sender = Some(x);
            self.syn_time = Some(segment.time);
        } else if let Some(syn_time) = self.syn_time
            && self.syn_sender == Some(y)
            && self.synack_time.is_none()
        {
            // SYN seen, then SYN-ACK: the round trip from the capture point to this side.
            self.synack_time = Some(segment.time);
            self.dirs[x].record_rtt_sample(segment.time - syn_time, true);
        }
        for side in Side::BOTH {
            self.dirs[side].window_shift = self.window_scale(side);
        }
    }

    /// What the ACK field of `segment` (from side `x`) did, recorded in its last segment.
    pub(super) fn observe_ack(&mut self, segment: &Segment, x: Side, y: Side, t: Nanos) {
        let peer = &mut self.dirs[y];
        let ack = peer.position(segment.ack);
        if let Some(synack) = self.synack_time
            && self.syn_sender == Some(x)
            && peer.syn_seen
            && self.dirs[x].path_rtt().is_none()
            && segment.flags.ack()
            && !segment.flags.syn()
        {
            // The handshake's third segment: the round trip from the capture point to the client.
            self.dirs[x].record_rtt_sample(t - synack, true);
        }
        let (snd_una, snd_max) = (self.dirs[y].snd_una, self.dirs[y].snd_max);
        self.dirs[x].last.ack_field(snd_una, snd_max - snd_una);
        if ack > snd_max {
            let peer = &mut self.dirs[y];
            peer.acked_beyond_captured = peer.acked_beyond_captured.max(ack);
            // One byte beyond is a keep-alive's: it is sent one below the next sequence
            // number (RFC 9293 3.8.4), and acknowledged as that next one.
            self.capture_missed |= ack > snd_max + 1;
        }
        if ack <= snd_una || ack > snd_max {
            return;
        }
        let peer = &mut self.dirs[y];
        let newly_acked = ack - peer.snd_una;
        let small_before = peer.small_in_flight > 0;
        let mut newest: Option<InFlight> = None;
        // The retransmission the ACK answers, if any: it is timed from it, and measures
        // no round trip of the newest data (Karn). One that filled a hole below the
        // newest data: the receiver acknowledges at once when a segment fills a gap
        // (RFC 5681 4.2).
        let mut answered_resend = Nanos::MIN;
        let mut acked_segments = 0u32;
        while let Some(&done) = peer.in_flight.front() {
            if done.end > ack {
                break;
            }
            acked_segments += 1;
            peer.in_flight.pop_front();
            peer.small_in_flight -= u32::from(done.small);
            if newest.is_some_and(|below| below.retransmitted) {
                // The latest retransmission is the one that completed the fill.
                answered_resend = peer.last_resent;
            }
            newest = Some(done);
        }
        if newest.is_some_and(|done| done.retransmitted) {
            // The newest data itself was sent again: an ACK a round trip or more after
            // the retransmission answers it; one sooner left before the retransmission
            // could reach the receiver, and answers the first copy (Karn's ambiguity,
            // RFC 6298 3).
            let least = self.dirs[x].path_rtt().unwrap_or(0);
            let resent = self.dirs[y].last_resent;
            if t - resent >= least {
                answered_resend = answered_resend.max(resent);
            }
        }
        let peer = &mut self.dirs[y];
        let snd_una_before = peer.snd_una;
        peer.snd_una = ack;
        let small_after = peer.small_in_flight > 0;
        // The bytes it newly covers were not all captured: a stretch of sequence space
        // the capture never saw, or its TSecr (RFC 7323 4.3: the TSval of the segment it
        // answers) names a segment newer than any the capture saw from that side (a
        // retransmission the capture missed).
        let (hole_start, hole_end) = peer.uncaptured;
        let covers_hole = hole_start < hole_end && hole_end > snd_una_before && hole_start < ack;
        let echoes_uncaptured = match (segment.options.timestamps, peer.timestamps.newest()) {
            (Some((_, ecr)), Some(seen)) => SeqNumber(ecr).is_after(SeqNumber(seen)),
            _ => false,
        };
        self.capture_missed |= echoes_uncaptured;
        let last = &mut self.dirs[x].last;
        last.acked(
            newly_acked,
            newest.as_ref(),
            answered_resend,
            small_before,
            small_after,
        );
        last.set(
            LastSegment::ACKED_UNCAPTURED,
            covers_hole || echoes_uncaptured,
        );
        // Karn's rule: no round-trip sample from retransmitted data.
        let Some(newest) =
            newest.filter(|done| !done.retransmitted && answered_resend == Nanos::MIN)
        else {
            return;
        };
        let sample = t - newest.time;
        let pure_ack = segment.payload_len == 0;
        self.dirs[x].record_rtt_sample(sample, pure_ack && !segment.flags.fin());
        if !pure_ack {
            self.dirs[x].acks.note_reply(sample, t);
        }
        if pure_ack {
            // A pure ACK (a reply carrying the ACK measures the application too). Any
            // later ACK for the same flight measures the path its data met,
            // serialization and queue included.
            self.note_prompt_ack(y, newest.time, sample);
            let full_size = self.dirs[y].full_size;
            let path = self.path_rtt(x);
            self.dirs[x].acks.observe(
                PureAck {
                    time: t,
                    data_time: newest.time,
                    data_len: newest.len,
                    newly_acked,
                    segments: acked_segments,
                    newest_full: !newest.small,
                },
                full_size,
                path,
            );
        }
    }

    /// A later pure ACK for data `sender` sent at `data_time` measured `round_trip`. Gaps
    /// waiting to be classified whose releasing ACK covered earlier data of the same
    /// flight met the same path (a FIFO queue serves that data first); the latest gap, when
    /// this is the first segment of the peer since its release and acknowledges it, learns
    /// what the path took just after its candidate ACK.
    pub(super) fn note_prompt_ack(&mut self, sender: Side, data_time: Nanos, round_trip: Nanos) {
        // The latest gap's released data (its burst leaves within SAME_FLIGHT); any other
        // segment of the peer since the release has ended `open_release`.
        if let Some((index, released_by, released_at, _)) = self.open_release
            && released_by == sender
            && (0..=SAME_FLIGHT).contains(&(data_time - released_at))
        {
            let reply_bound = self.dirs[sender.other()].acks.last_reply_round_trip();
            let ctx = &mut self.gaps[index].context;
            if ctx.release_round_trip.is_none() {
                ctx.release_round_trip = Some(round_trip);
                ctx.release_reply_bound = reply_bound;
            }
        }
        if self.pending_acked_data_time[sender] < data_time - SAME_FLIGHT {
            return;
        }
        // Newest first: a gap that ended before the flight was sent acknowledged no
        // data of it, nor did any before it.
        for gap in self.gaps.iter_mut().rev() {
            if gap.context.gap_end < data_time - SAME_FLIGHT {
                break;
            }
            let ctx = &mut gap.context;
            let same_flight = ctx.sender == sender
                && ctx
                    .last_from_peer
                    .as_ref()
                    .and_then(|ack| ack.acked_data_time)
                    .is_some_and(|t| (t - data_time).abs() <= SAME_FLIGHT);
            if same_flight {
                ctx.prompt_round_trip = Some(
                    ctx.prompt_round_trip
                        .map_or(round_trip, |r| r.max(round_trip)),
                );
            }
        }
    }

    /// Whether side `x`'s small segment in flight was still unacknowledged when its data
    /// `segment` left, as far as the capture can tell.
    fn small_unacked(&mut self, segment: &Segment, x: Side) -> bool {
        let y = x.other();
        // A TSecr newer than any TSval of the peer the capture saw: the capture missed a
        // segment of the peer, perhaps the ACK that cleared the small segment in flight.
        // So does an ACK of peer data the capture never saw.
        let echoes_unseen = match (segment.options.timestamps, self.dirs[y].timestamps.newest()) {
            (Some((_, ecr)), Some(seen)) => SeqNumber(ecr).is_after(SeqNumber(seen)),
            _ => false,
        };
        let peer = &self.dirs[y];
        let acks_unseen =
            segment.flags.ack() && peer.started && peer.position(segment.ack) > peer.snd_max;
        if echoes_unseen || acks_unseen {
            return false;
        }
        // Without timestamps a pure ACK the capture missed leaves no trace: a small segment
        // behind one in flight proves Nagle off when sent sooner than any ACK for that one
        // could have come back (the least round trip through the capture point).
        let round_trip = self.path_rtt(x) + self.path_rtt(y);
        let before_any_ack = self.dirs[x]
            .in_flight
            .iter()
            .find(|f| f.small)
            .is_some_and(|f| segment.time - f.time < round_trip);
        if segment.options.timestamps.is_some() || before_any_ack {
            return true;
        }
        if self.capture_missed {
            return false;
        }
        // Later, only as often as a capture missing ACKs cannot explain. It missed none of
        // the connection's `n` segments so far: its miss rate is below 3/n (95%, the rule
        // of three). A Nagle sender shows this only behind an ACK the capture missed, so
        // over its `s` data segments about as often as Poisson(3s/n) says: seen more often
        // than that leaves 5% or less, it is the sender's own doing.
        let dir = &mut self.dirs[x];
        dir.unproven_violations = dir.unproven_violations.saturating_add(1);
        let expected_misses = 3.0 * dir.data_segments as f64 / self.packets.max(1) as f64;
        poisson_tail(expected_misses, dir.unproven_violations) < 0.05
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn observe_data(
        &mut self,
        segment: &Segment,
        packet: u64,
        x: Side,
        (seq_start, seq_end): (u64, u64),
        is_retransmission: bool,
        previous_own_ack: Option<Nanos>,
        config: &DetectConfig,
    ) {
        let y = x.other();
        let t = segment.time;
        let mss = self.segment_mss(x);

        self.assemble_gap(
            segment,
            packet,
            x,
            (seq_start, seq_end),
            is_retransmission,
            previous_own_ack,
            config,
        );
        if !self.dirs[y].peer_spoke_since_data {
            self.dirs[y].peer_spoke_at = t;
        }
        self.dirs[y].peer_spoke_since_data = true;
        let peer_last = self.dirs[y].last_raw_time;

        let dir = &mut self.dirs[x];
        if is_retransmission {
            dir.retransmitted_segments = dir.retransmitted_segments.saturating_add(1);
            dir.last_resent = t;
            for f in dir
                .in_flight
                .iter_mut()
                .filter(|f| f.end > seq_start && f.end <= seq_end)
            {
                f.retransmitted = true;
            }
            return;
        }
        if segment.payload_len == 0 {
            // A FIN alone: it occupies sequence space but is no message data.
            dir.snd_max = dir.snd_max.max(seq_end);
            dir.fin_seen = true;
            return;
        }
        if segment.flags.fin() {
            dir.fin_seen = true;
        }
        if segment.flags.urg() {
            dir.urgent_until = dir.urgent_until.max(seq_end);
        }
        // Nagle does not hold a FIN, nor anything sent in urgent mode (Linux
        // tcp_nagle_test; BSD tcp_output sends while snd_up is ahead of snd_una).
        let urgent_mode = dir.snd_una < dir.urgent_until;
        let path_rtt = dir.path_rtt();
        let sent = SentData {
            time: t,
            packet,
            start: seq_start,
            end: seq_end,
            payload: segment.payload_len,
            pushed_past_nagle: segment.flags.fin() || urgent_mode,
            // Data of the peer that cannot have reached this side before the segment
            // left (seen less than a round trip through the capture point before it)
            // is nothing the segment answers: it is still the write before.
            same_message: !dir.peer_spoke_since_data
                || path_rtt.is_some_and(|rtt| t - dir.peer_spoke_at < rtt),
            before_peer_could_release: path_rtt.is_some_and(|rtt| t - peer_last < rtt),
        };
        let small_unacked = self.dirs[x].small_in_flight > 0 && self.small_unacked(segment, x);
        let peer_sent = self.dirs[y].snd_max;
        let round_trip = self.dirs[x]
            .path_rtt()
            .zip(self.dirs[y].path_rtt())
            .map(|(to_sender, to_peer)| to_sender + to_peer);
        let dir = &mut self.dirs[x];
        if dir.sender.observe(sent, mss, small_unacked, round_trip) {
            // A smaller segment limit: segments in flight of that size are full-sized.
            let full_size = dir.sender.full_size(mss);
            for f in dir.in_flight.iter_mut().filter(|f| f.small) {
                f.small = f.len < full_size;
            }
            dir.small_in_flight = dir.in_flight.iter().filter(|f| f.small).count() as u32;
        }
        let full_size = dir.sender.full_size(mss);
        dir.full_size = full_size;
        dir.last_data_timestamps = segment.options.timestamps;
        if dir.peer_spoke_since_data || dir.data_segments == 0 {
            dir.message_full_segments = 0;
            dir.message_segments = 0;
            dir.peer_spoke_since_data = false;
            dir.messages = dir.messages.saturating_add(1);
        }
        dir.message_segments += 1;
        let small = segment.payload_len < full_size;
        if !small {
            dir.message_full_segments += 1;
        }
        if dir.in_flight.len() == MAX_TRACKED_IN_FLIGHT
            && let Some(oldest) = dir.in_flight.pop_front()
        {
            dir.small_in_flight -= u32::from(oldest.small);
        }
        dir.small_in_flight += u32::from(small);
        if dir.in_flight.capacity() == 0 {
            // Room for a typical flight at once, rather than growing through 4 and 8.
            dir.in_flight.reserve_exact(INITIAL_IN_FLIGHT);
        }
        dir.in_flight.push_back(InFlight {
            end: seq_end,
            time: t,
            len: segment.payload_len,
            small,
            began_message: dir.message_segments == 1,
            retransmitted: false,
        });
        let past_a_hole = seq_start > dir.snd_max;
        dir.last_data_packet = packet;
        dir.peer_sent_at_last_data = peer_sent;
        let (first_data, snd_max_before) = (dir.data_segments == 0, dir.snd_max);
        if past_a_hole {
            // What a captured ACK already covered is no hole for a later ACK: that ACK
            // newly covers only what came after it.
            let start = dir.snd_max.max(dir.acked_beyond_captured.min(seq_start));
            dir.uncaptured = (start, seq_start);
            dir.snd_una = dir.snd_una.max(start);
        }
        dir.data_bytes += seq_end.saturating_sub(dir.snd_max.max(seq_start));
        dir.snd_max = dir.snd_max.max(seq_end);
        dir.data_segments += 1;
        dir.max_payload = dir.max_payload.max(segment.payload_len);
        // A side first seen in a segment without data may have been sending a keep-alive,
        // one below its next sequence number (RFC 9293 3.8.4): its first data then begins
        // one byte above, and nothing was missed.
        let after_keep_alive = first_data && seq_start == snd_max_before + 1;
        self.capture_missed |= past_a_hole && !after_keep_alive;
    }

    /// Frees what only an open connection needs.
    pub(super) fn release_tracking(&mut self) {
        self.gaps = Vec::new();
        for dir in &mut self.dirs {
            dir.in_flight = VecDeque::new();
            dir.small_in_flight = 0;
        }
    }

    pub(super) fn is_finished(&self) -> bool {
        self.reset || (self.dirs[Side::First].fin_seen && self.dirs[Side::Second].fin_seen)
    }
}

/// The chance that a count with Poisson mean `mean` reaches `at_least`.
fn poisson_tail(mean: f64, at_least: u32) -> f64 {
    let mut term = (-mean).exp();
    let mut below = 0.0;
    for k in 0..at_least {
        below += term;
        if below >= 1.0 {
            return 0.0;
        }
        term *= mean / f64::from(k + 1);
    }
    (1.0 - below).max(0.0)
}

/// Where the MSS of a direction comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MssSource {
    /// The MSS option of the captured SYN.
    Syn,
    /// The largest segment seen, larger than the Ethernet default.
    Inferred,
    /// No SYN: Ethernet's 1460 (1448 with timestamps) is assumed.
    Assumed,
}

impl MssSource {
    pub fn name(self) -> &'static str {
        match self {
            MssSource::Syn => "syn",
            MssSource::Inferred => "inferred",
            MssSource::Assumed => "assumed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::poisson_tail;

    #[test]
    fn the_poisson_tail_is_the_chance_of_so_many_or_more() {
        assert_eq!(poisson_tail(0.6, 0), 1.0);
        assert!((poisson_tail(0.6, 1) - (1.0 - (-0.6f64).exp())).abs() < 1e-12);
        // 1 - e^-0.6 (1 + 0.6 + 0.18)
        assert!((poisson_tail(0.6, 3) - 0.023_12).abs() < 1e-4);
        assert!(poisson_tail(0.01, 50) < 1e-12);
    }
}
