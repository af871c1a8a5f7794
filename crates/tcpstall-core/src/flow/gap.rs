//! Gap assembly: a pause in a connection's data becomes a [`GapContext`] when the data
//! that ends it arrives, gathers the burst released with it, and is classified by
//! [`crate::detect`] with the connection's final round trips when the connection ends.

use super::connection::{Connection, MAX_PENDING_GAPS, PendingGap};
use crate::detect::{
    DetectConfig, GapContext, PeerSegment, SenderClock, StallClass, StallEvent, ack_timer,
    classify_gap, sender_clock, window,
};
use crate::segment::{Nanos, Segment};
use crate::side::{PerSide, Side};

impl Connection {
    /// Opens a gap when `segment`, data of side `x`, ends a pause in the connection's data,
    /// or adds it to the burst the last gap released.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble_gap(
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

        let gap_before = self
            .last_data
            .filter(|&(start, _, _)| t - start >= config.min_gap)
            .or_else(|| self.crossing_wait(segment, x, config));
        if let Some((gap_start, before_side, before_packet)) = gap_before {
            let mss = self.segment_mss(x);
            let peer = &self.dirs[y];
            // Captured after the data before the gap: later, or at the same time (a clock
            // too coarse to part them, or a host that answered within its step) and later
            // in the capture.
            let in_gap =
                |p: &PeerSegment| (p.time, p.packet) > (gap_start, before_packet) && p.time <= t;
            let mut last_from_peer = peer.last_segment().filter(in_gap);
            // The release's own ACK field says whether it was built before the peer's
            // latest data reached its sender: if it does not cover that data, the data
            // crossed it, and the pure ACK before that data is what it answered.
            let crossed = segment.flags.ack()
                && peer
                    .last_segment()
                    .is_some_and(|p| p.carries_data && p.time <= t)
                && peer.position(segment.ack) < peer.snd_max;
            if crossed {
                // The crossing data may itself have opened the gap (both ends held data at
                // once): the pure ACK before it may precede the gap, but not the sender's
                // own last data, which it must have followed to release anything.
                let since_own_data = self.dirs[x].sender.last_data_time().unwrap_or(gap_start);
                last_from_peer = peer
                    .last_pure_ack
                    .get(peer.window)
                    .filter(|p| p.time > since_own_data.min(gap_start) && p.time <= t);
            }
            // Its TSecr names the ACK it answered (RFC 7323 4.3: TSecr echoes TS.Recent):
            // the peer's late ACK from before the gap that first carried that TSval. Seen
            // near the receiver of a flight, an ACK leaves one round trip before the data
            // it releases comes back (the chain takes it where the candidate in the gap
            // had not reached the sender, `release::answered_instead`).
            let named_late_ack = segment
                .options
                .timestamps
                .filter(|_| last_from_peer.is_some())
                .and_then(|(_, ecr)| peer.late_acks.as_ref()?.carrying(ecr))
                .filter(|ack| ack.time <= gap_start);
            // Without such an echo, the peer's latest late ACK from before the gap, where
            // no other segment of the peer came between it and the gap, the sender's data
            // before the gap does not echo it (that data was its release), and the capture
            // saw all the sender's data past what it acknowledged (a release only when no
            // hole precedes it). The chain judges its timing.
            let previous_echo = self.dirs[x].last_data_timestamps.map(|(_, ecr)| ecr);
            let (hole_start, hole_end) = self.dirs[x].uncaptured;
            let latest_late_ack = || {
                let late = peer.late_acks.as_ref()?.latest_until(gap_start)?;
                let peer_last = peer.last_segment()?;
                let released_before = late.tsval.is_some() && late.tsval == previous_echo;
                let hole_after =
                    hole_start < hole_end && hole_end > late.snd_una_before + late.newly_acked;
                ((last_from_peer.is_some() || peer_last.packet == late.packet)
                    && !released_before
                    && !hole_after)
                    .then_some(late)
            };
            let late_ack_before_gap = named_late_ack.or_else(latest_late_ack).map(Box::new);
            // The peer's pure ACK before its last one, if it came inside the gap too.
            let earlier_ack_in_gap = last_from_peer
                .as_ref()
                .filter(|_| !crossed)
                .and_then(|last| peer.previous_ack.get(last.window_before.map(u64::from)))
                .filter(in_gap)
                .map(Box::new);
            // The round trip of the peer's last prompt ACK, if it covered the same
            // flight of data as the candidate release.
            let prompt_round_trip = last_from_peer
                .as_ref()
                .and_then(|ack| self.dirs[y].acks.path_reference_for(ack, config.min_gap));
            let round_trip_before = last_from_peer
                .as_ref()
                .and_then(|ack| self.dirs[y].acks.round_trip_before(ack));
            let peer_acks_every_segment = last_from_peer
                .as_ref()
                .is_some_and(|ack| self.dirs[y].acks.acks_every_segment(ack));
            let peer_paced_by_delivery = last_from_peer
                .as_ref()
                .is_some_and(|ack| self.dirs[y].acks.paced_by_delivery(ack));
            let sender_acked_peer_at = previous_own_ack.filter(|&time| time > gap_start);
            let ctx = GapContext {
                gap_start,
                gap_end: t,
                data_before_packet: before_packet,
                data_after_packet: packet,
                burst_last_packet: packet,
                sender: x,
                sender_mss: mss,
                sender_full_size: mss,
                segment_bytes: segment.payload_len,
                sender_largest_segment: self.dirs[x].max_payload,
                sender_previous_bytes: self.dirs[x].sender.last_payload(),
                segment_is_retransmission: is_retransmission,
                segment_tsecr: segment.options.timestamps.map(|(_, ecr)| ecr),
                data_before_from_sender: before_side == x,
                sender_previous_data: self.dirs[x].sender.last_data_time(),
                sender_previous_message: self.dirs[x].sender.last_message_end(mss),
                segment_tsval: segment.options.timestamps.map(|(val, _)| val),
                sender_previous_tsval: self.dirs[x].last_data_timestamps.map(|(val, _)| val),
                sender_previous_bare: self.dirs[x].last_bare_tsval,
                sender_tsval_hz: None,
                sender_echoes_pure_acks: false,
                release_after_hole: !is_retransmission && seq_start > self.dirs[x].snd_max,
                sender_opened: self.syn_sender == Some(x),
                sender_acked_peer_at,
                path: PerSide::default(),
                clock_step: 0,
                prompt_round_trip,
                release_round_trip: None,
                release_reply_bound: None,
                round_trip_before,
                peer_acks_every_segment,
                peer_paced_by_delivery,
                peer_acks_at_once: None,
                peer_large_data_rtt: None,
                sender_full_segment_serialization: 0,
                last_from_peer,
                late_ack_before_gap,
                earlier_ack_in_gap,
                peer_zero_window: self.dirs[y].zero_window_in_gap,
                block_full_segments: self.dirs[x].message_full_segments,
                burst_bytes: 0,
                burst_end: seq_end,
                burst_ends_with_small: false,
                sender_nagle_off: false,
                sender_clock: SenderClock::Unknown,
            };
            if let Some(acked) = ctx.last_from_peer.as_ref().and_then(|a| a.acked_data_time) {
                let newest = &mut self.pending_acked_data_time[x];
                *newest = (*newest).max(acked);
            }
            // Classified when the connection ends, with the round-trip estimates of the
            // whole connection: an early estimate may still include a delayed ACK.
            self.gaps.push(PendingGap {
                context: ctx,
                last_burst_segment: segment.payload_len,
            });
            self.open_release = Some((self.gaps.len() - 1, x, t, segment.ack));
            if self.gaps.len() >= MAX_PENDING_GAPS {
                // A long connection's round trips are settled by now.
                self.classify_gaps(config);
            }
        } else if let Some((index, sender, released_at, release_ack)) = self.open_release
            && sender == x
            // The same ACK field: the sender received nothing from its peer in between
            // (even what the capture may have missed).
            && segment.ack == release_ack
            && !is_retransmission
            && t - released_at <= config.burst_slack
        {
            // Data that left in the same burst as the released segment was held too.
            let gap = &mut self.gaps[index];
            gap.context.burst_bytes += u64::from(segment.payload_len);
            gap.context.burst_end = gap.context.burst_end.max(seq_end);
            gap.context.burst_last_packet = packet;
            gap.last_burst_segment = segment.payload_len;
        }
        self.last_data = Some((t, x, packet));
        self.dirs[y].zero_window_in_gap = false;
        self.dirs[x].zero_window_in_gap = false;
    }

    /// Both ends held data at once: the other side's data just before this segment ended
    /// that side's wait, and this segment's ACK field covers nothing the other side sent
    /// after this side's previous data (it left before that data reached its sender, RFC
    /// 9293 3.4): it answers nothing, and this side's own wait runs from its previous
    /// data. (The data just before is too recent to open a gap of the connection.)
    fn crossing_wait(
        &self,
        segment: &Segment,
        x: Side,
        config: &DetectConfig,
    ) -> Option<(Nanos, Side, u64)> {
        let (last_time, last_side, _) = self.last_data?;
        let own = &self.dirs[x];
        let own_time = own.sender.last_data_time()?;
        let peer = &self.dirs[x.other()];
        let t = segment.time;
        let answers_nothing = segment.flags.ack()
            && peer.position(segment.ack) <= own.peer_sent_at_last_data
            && own.peer_sent_at_last_data < peer.snd_max;
        let crossed = last_side != x && t - last_time < config.min_gap;
        let waited = t - own_time >= config.min_gap;
        (crossed && waited && answers_nothing).then_some((own_time, x, own.last_data_packet))
    }

    /// Classifies the gaps with the connection's final round-trip estimates and what
    /// each sender's own segments proved by then.
    pub(super) fn classify_gaps(&mut self, config: &DetectConfig) {
        let path = PerSide::from_fn(|side| self.dirs[side].round_trips.side());
        let full_size = PerSide::from_fn(|side| self.full_size(side));
        let clock = PerSide::from_fn(|side| self.sender_clock(side));
        // The least round trip for large data over the connection: an ACK after a gap
        // measures it as well as an ACK before it.
        let large_data_rtt = PerSide::from_fn(|side| self.dirs[side].acks.large_round_trip());
        // A full segment's serialization on the links before the capture point: the
        // sender's segments arrive no closer together than that, and the peer's ACKs for
        // two segments or more come no faster than the slowest link delivers them. Two
        // segments the sender did not send back to back arrive further apart than that,
        // so the spacing counts only up to the pace the ACKs measured. Where they
        // measured none and the capture point is nearer the receiver than the sender
        // (there each ACK for two leaves as the second arrives), the spacing of two
        // segments of one flight is the link's own: a FIFO link sends each one
        // serialization after the one before while it holds both.
        let serialization = PerSide::from_fn(|side| {
            let sender = &self.dirs[side].sender;
            let near_receiver = path[side.other()].least < path[side].least;
            match self.dirs[side.other()].acks.least_delivery_per_segment() {
                Some(delivery) => sender
                    .full_segment_spacing()
                    .map_or(0, |spacing| spacing.min(delivery)),
                None if near_receiver => sender.full_segment_spacing_in_flight().unwrap_or(0),
                None => 0,
            }
        });
        // Whether each side's peer acknowledges at once, over its gaps' releasing ACKs.
        let acks_at_once = PerSide::from_fn(|sender| {
            let least = path[sender.other()].least;
            let readings = self
                .gaps
                .iter()
                .filter(|gap| gap.context.sender == sender)
                .filter_map(|gap| {
                    ack_timer::at_once_reading(&gap.context, full_size[sender], least, config)
                });
            ack_timer::acks_at_once(readings, least, config)
        });

        for gap in &mut self.gaps {
            let context = &mut gap.context;
            let sender = context.sender;
            context.path = path;
            context.clock_step = self.clock.step();
            context.sender_full_size = full_size[sender];
            context.burst_ends_with_small = gap.last_burst_segment < full_size[sender];
            context.sender_nagle_off = self.dirs[sender].sender.nagle_off_by(context.gap_end);
            context.sender_clock = clock[sender];
            context.sender_tsval_hz = self.dirs[sender].timestamps.rate();
            context.sender_echoes_pure_acks = self.dirs[sender].echoes_pure_acks;
            context.peer_large_data_rtt = large_data_rtt[sender.other()];
            context.sender_full_segment_serialization = serialization[sender];
            context.peer_acks_at_once = acks_at_once[sender];
            if let Some(event) = classify_gap(context, config) {
                Self::record(
                    &mut self.events,
                    &mut self.listed,
                    &mut self.unlisted,
                    event,
                );
            }
        }
        self.gaps.clear();
        self.pending_acked_data_time = PerSide::new(Nanos::MIN, Nanos::MIN);
        self.open_release = None;
    }

    /// Whether `side`'s data, over its pending gaps that ended after an ACK of the other
    /// side, follows its own clock rather than those ACKs. A side that takes turns with
    /// its peer keeps the exchange's rhythm, not a clock of its own, however steady: a
    /// request in two writes after each reply pauses once after the peer's data and once
    /// after its own.
    pub(super) fn sender_clock(&self, side: Side) -> SenderClock {
        let (after_peer, after_own) = self
            .gaps
            .iter()
            .filter(|gap| gap.context.sender == side)
            .fold((0, 0), |(peer, own), gap| {
                if gap.context.data_before_from_sender {
                    (peer, own + 1)
                } else {
                    (peer + 1, own)
                }
            });
        if after_peer * 2 >= after_own && after_peer > 0 {
            return SenderClock::Unknown;
        }
        let (mut intervals, mut reactions): (Vec<Nanos>, Vec<Nanos>) = self
            .gaps
            .iter()
            .map(|gap| &gap.context)
            .filter(|ctx| ctx.sender == side && !ctx.segment_is_retransmission)
            .filter_map(|ctx| {
                let previous = ctx.sender_previous_message?;
                let ack = ctx.last_from_peer.as_ref().filter(|a| a.time > previous)?;
                Some((ctx.gap_end - previous, ctx.gap_end - ack.time))
            })
            .unzip();
        sender_clock(&mut intervals, &mut reactions)
    }

    /// Lists `event` while its class is under its listing limit, and counts it unlisted
    /// beyond. (Takes the fields apart so that it can run while a gap is borrowed.)
    fn record(
        events: &mut Vec<StallEvent>,
        listed: &mut [usize; StallClass::COUNT],
        unlisted: &mut [(u64, Nanos); StallClass::COUNT],
        event: StallEvent,
    ) {
        let class = event.class.index();
        if listed[class] < event.class.listing_limit() {
            listed[class] += 1;
            events.push(event);
        } else {
            event.count_in(unlisted);
        }
    }

    /// A window still closed when the connection ends
    /// ([`crate::detect::window::still_closed_at_end`]).
    pub(super) fn window_closed_at_end(&mut self, config: &DetectConfig) {
        for holder in Side::BOTH {
            let receiver = holder.other();
            if !self.dirs[receiver].window_closed {
                continue;
            }
            let closed = self.dirs[receiver].zero_window_since;
            let Some(last) = self.dirs[holder].last_segment() else {
                continue;
            };
            let Some(event) = window::still_closed_at_end(holder, closed, &last, config) else {
                continue;
            };
            Self::record(
                &mut self.events,
                &mut self.listed,
                &mut self.unlisted,
                event,
            );
        }
    }
}
