//! Connection tracking: both directions of every TCP connection in a segment stream.
//!
//! Each direction keeps its sequence space (unwrapped to 64 bits), what is in flight,
//! the receiver's window, the MSS, and the round trip between the capture point and its
//! endpoint. Gaps in a connection's data are handed to [`crate::detect`] as they end.

use std::collections::VecDeque;
use std::net::SocketAddr;

use rustc_hash::FxHashMap;

use crate::acks::{AckHistory, PureAck, SAME_FLIGHT};
use crate::detect::{DetectConfig, GapContext, PeerSegment, StallEvent, classify_gap, window};
use crate::detect::{SenderClock, sender_clock};
use crate::path::PathSide;
use crate::path::{CLOCK_SAMPLE_PACKETS, ClockStep, RoundTrips};
use crate::segment::{Nanos, Segment};
use crate::sender::{SenderEvidence, SentData, TimestampClock};

/// Unacknowledged data segments remembered per direction; beyond this the oldest are
/// forgotten (their ACK-delay samples are lost, nothing else).
const MAX_TRACKED_IN_FLIGHT: usize = 1024;

/// Room made for a direction's segments in flight when its first data is sent.
const INITIAL_IN_FLIGHT: usize = 16;

/// Gaps kept unclassified per connection, waiting for better round-trip estimates.
const MAX_PENDING_GAPS: usize = 32;

/// TCP timestamps take 12 option bytes (RFC 7323: 10 bytes, padded to 12) in every segment.
const TIMESTAMP_OPTION_BYTES: u32 = 12;

/// MSS assumed when no SYN was captured: Ethernet's 1460 less timestamps when in use.
const DEFAULT_ETHERNET_MSS: u32 = 1460;

/// Position of a direction's first sequence number in its 64-bit space.
const SEQ_ORIGIN: u64 = 1 << 32;

/// One data segment still waiting for its ACK.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    end: u64,
    time: Nanos,
    len: u32,
    small: bool,
    began_message: bool,
    retransmitted: bool,
}

/// The state of the data one side sends. The fields are laid out by when they are used,
/// so that a segment touches as few cache lines as it can: first 64 bytes of what every
/// segment reads of either side, then what every segment writes of its sender, then its
/// sender's last segment, then what its ACKs update, then what data segments update. (Not aligned to 64 bytes:
/// aligned allocations left glibc's heap fragmented, 40% more peak RSS on large captures.)
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct Direction {
    /// Highest sequence number sent plus one, unwrapped to 64 bits.
    snd_max: u64,
    /// Highest cumulative ACK received from the other side.
    snd_una: u64,
    in_flight: VecDeque<InFlight>,
    /// The first sequence number seen; positions are relative to it.
    base: u32,
    /// How many of them are smaller than the MSS.
    small_in_flight: u32,
    pub window_scale_option: Option<u8>,
    started: bool,
    /// This side's SYN options.
    pub syn_seen: bool,
    /// Timestamps seen on any segment of this side.
    pub timestamps_seen: bool,
    zero_window_in_gap: bool,
    peer_spoke_since_data: bool,
    pub fin_seen: bool,

    // What every segment of this side writes.
    last_raw_time: Nanos,
    pub packets: u64,
    /// The window this side advertises, scaled when the scale is known.
    window: Option<u64>,
    /// The shift of the window this side advertises, once both SYNs are seen
    /// ([`Connection::window_scale`], kept here as it is read on every segment).
    window_shift: Option<u8>,
    last_raw: RawHeader,
    pub mss_option: Option<u16>,
    /// The window it advertises is zero (since `zero_window_since`).
    window_closed: bool,
    /// What its TSvals show: its clock's rate, the path's least transit.
    timestamps: TimestampClock,

    /// The last segment this side sent, as seen by a gap in the other side's data.
    last: LastSegment,

    // What an ACK from this side updates.
    /// Round trips from the capture point to this side and back.
    round_trips: RoundTrips,
    /// Its full segment size as of its last data segment (read by the other side's ACKs).
    full_size: u32,
    /// What its pure ACKs showed: the path's round trips, whether it acknowledges every
    /// segment.
    acks: AckHistory,

    // What a data segment of this side updates.
    pub data_bytes: u64,
    pub data_segments: u64,
    /// Data segments since the other side last sent data.
    message_full_segments: u32,
    message_segments: u32,
    /// Messages: runs of data segments between two of the other side's data.
    pub messages: u32,
    pub max_payload: u32,
    /// The TSval of its last data segment.
    last_data_tsval: Option<u32>,
    /// The TSval of its last pure ACK, and when the capture saw it.
    last_bare_tsval: Option<(u32, Nanos)>,
    /// What this side's own data segments prove about how it sends.
    pub sender: SenderEvidence,
    /// Urgent mode lasts until the data up to here is acknowledged.
    urgent_until: u64,

    // Rarely used.
    pub retransmitted_segments: u64,
    pub timestamps_option: bool,
    /// Since when the window this side advertises has been zero, and the packet.
    zero_window_since: (Nanos, u64),
    /// The newest TSval of this side, and whether only pure ACKs carried it so far.
    newest_tsval: u32,
    newest_tsval_pure_ack_only: bool,
    /// This side echoed a TSval that only a pure ACK of the other side carried: it
    /// updates TS.Recent from pure ACKs (RFC 7323 4.3, not RFC 1323 3.4's strict rule).
    pub echoes_pure_acks: bool,
    /// The latest stretch of this side's sequence space that the capture never saw
    /// (start, end): data sent past it was captured, it was not.
    uncaptured: (u64, u64),
    /// The furthest the peer acknowledged beyond what the capture had seen this side send
    /// (0: never): data the capture missed, already acknowledged by a captured ACK.
    acked_beyond_captured: u64,
    /// This side's last pure ACK, kept when data of its own followed it: the ACK a
    /// release that crossed that data was answering.
    last_pure_ack: LastSegment,
}

/// The header fields that tell a packet captured twice: sequence and acknowledgement
/// numbers, payload length, and window with flags (and a bit that marks it set: the
/// default, all zero, is no segment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RawHeader([u32; 4]);

impl RawHeader {
    fn of(segment: &Segment) -> RawHeader {
        let window_and_flags =
            u32::from(segment.window) | u32::from(segment.flags.0) << 16 | 1 << 24;
        RawHeader([
            segment.seq,
            segment.ack,
            segment.payload_len,
            window_and_flags,
        ])
    }
}

/// The last segment a side sent, as a gap in the other side's data will see it
/// ([`Direction::last_segment`]). Written for every segment, read only when such a gap
/// ends: its fields are kept as they come, and turned into a [`PeerSegment`] only then.
/// Windows and byte counts take 32 bits (a scaled window is at most 1 GiB); the window
/// after it is its side's current one, which only its side's next segment changes. In
/// one cache line.
#[derive(Clone, Copy, Debug, Default)]
struct LastSegment {
    packet: u64,
    time: Nanos,
    /// When this side's previous segment, and the newest data it acknowledged, were
    /// seen ([`LastSegment::NO_TIME`]: none).
    previous_time: Nanos,
    acked_data_time: Nanos,
    snd_una_before: u64,
    outstanding_before: u32,
    newly_acked: u32,
    window_before: u32,
    acked_data_len: u32,
    tsval: u32,
    flags: u16,
}

impl LastSegment {
    const SEEN: u16 = 1;
    const ACK_ADVANCED: u16 = 2;
    const OUTSTANDING_SMALL: u16 = 4;
    const ACKED_DATA_SMALL: u16 = 8;
    const ACKED_DATA_BEGAN_MESSAGE: u16 = 16;
    const HAS_TSVAL: u16 = 32;
    const TSVAL_IS_NEW: u16 = 64;
    const SMALL_AFTER: u16 = 128;
    const SENDER_OWED_ACK: u16 = 256;
    const ACKED_UNCAPTURED: u16 = 512;
    const CARRIES_DATA: u16 = 1024;
    const NONE: u32 = u32::MAX;
    const NO_TIME: Nanos = Nanos::MIN;

    /// A value in 32 bits, [`LastSegment::NONE`] kept for none.
    fn small(value: u64) -> u32 {
        value.min(u64::from(Self::NONE - 1)) as u32
    }

    /// Segment `packet`, seen at `time` (its side's previous one at `previous_time`);
    /// what its ACK field did, its TSval and the window before it are set after.
    fn begin(packet: u64, time: Nanos, previous_time: Option<Nanos>) -> LastSegment {
        LastSegment {
            packet,
            time,
            previous_time: previous_time.unwrap_or(Self::NO_TIME),
            acked_data_time: Self::NO_TIME,
            snd_una_before: 0,
            outstanding_before: 0,
            newly_acked: 0,
            window_before: Self::NONE,
            acked_data_len: 0,
            tsval: 0,
            flags: Self::SEEN,
        }
    }

    /// Its ACK field found the other side's first unacknowledged byte at
    /// `snd_una_before`, with `outstanding_before` bytes unacknowledged.
    fn ack_field(&mut self, snd_una_before: u64, outstanding_before: u64) {
        self.snd_una_before = snd_una_before;
        self.outstanding_before = Self::small(outstanding_before);
    }

    /// It acknowledged `newly_acked` new bytes, `newest` the newest segment among them;
    /// `small_before` and `small_after`: a sub-MSS segment was unacknowledged before
    /// and after it.
    fn acked(
        &mut self,
        newly_acked: u64,
        newest: Option<&InFlight>,
        small_before: bool,
        small_after: bool,
    ) {
        self.newly_acked = Self::small(newly_acked);
        self.set(Self::ACK_ADVANCED, true);
        self.set(Self::OUTSTANDING_SMALL, small_before);
        self.set(Self::SMALL_AFTER, small_after);
        if let Some(newest) = newest {
            self.acked_data_time = newest.time;
            self.acked_data_len = newest.len;
            self.set(Self::ACKED_DATA_SMALL, newest.small);
            self.set(Self::ACKED_DATA_BEGAN_MESSAGE, newest.began_message);
        }
    }

    /// The window its side advertised before it, and its TSval (`is_new`: newer than
    /// any its side sent before).
    fn window_and_tsval(&mut self, window_before: Option<u64>, tsval: Option<u32>, is_new: bool) {
        self.window_before = window_before.map_or(Self::NONE, Self::small);
        self.tsval = tsval.unwrap_or(0);
        self.set(Self::HAS_TSVAL, tsval.is_some());
        self.set(Self::TSVAL_IS_NEW, is_new);
    }

    fn set(&mut self, bit: u16, on: bool) {
        if on {
            self.flags |= bit;
        }
    }

    fn has(&self, bit: u16) -> bool {
        self.flags & bit != 0
    }

    /// An earlier time as gaps judge it: a whole number of microseconds before this
    /// segment (rounded towards it, at most `u32::MAX - 1`), and never after it.
    fn earlier(&self, earlier: Nanos) -> Option<Nanos> {
        (earlier != Self::NO_TIME).then(|| {
            let age = ((self.time - earlier).max(0) / 1_000).min(i64::from(Self::NONE - 1));
            self.time - age * 1_000
        })
    }

    /// The segment, given the window its side advertises now (the one after it).
    fn get(&self, window_after: Option<u64>) -> Option<PeerSegment> {
        self.has(Self::SEEN).then(|| PeerSegment {
            packet: self.packet,
            time: self.time,
            previous_time: self.earlier(self.previous_time),
            ack_advanced: self.has(Self::ACK_ADVANCED),
            snd_una_before: self.snd_una_before,
            outstanding_before: u64::from(self.outstanding_before),
            newly_acked: u64::from(self.newly_acked),
            acked_data_len: self.acked_data_len,
            outstanding_small_segment: self.has(Self::OUTSTANDING_SMALL),
            small_outstanding_after: self.has(Self::SMALL_AFTER),
            acked_data_time: self.earlier(self.acked_data_time),
            acked_data_small: self.has(Self::ACKED_DATA_SMALL),
            acked_data_began_message: self.has(Self::ACKED_DATA_BEGAN_MESSAGE),
            tsval: self.has(Self::HAS_TSVAL).then_some(self.tsval),
            tsval_is_new: self.has(Self::TSVAL_IS_NEW),
            sender_owed_ack: self.has(Self::SENDER_OWED_ACK),
            acked_uncaptured: self.has(Self::ACKED_UNCAPTURED),
            carries_data: self.has(Self::CARRIES_DATA),
            window_before: (self.window_before != Self::NONE).then_some(self.window_before),
            window_after: window_after.map(Self::small),
        })
    }
}

impl Direction {
    /// The last segment this side sent, as a gap in the other side's data sees it.
    fn last_segment(&self) -> Option<PeerSegment> {
        self.last.get(self.window)
    }

    /// Places a 32-bit sequence number near `reference` in the 64-bit space (RFC 9293
    /// sequence arithmetic: numbers within 2^31 of each other compare correctly).
    fn unwrap(reference: u64, relative: u32) -> u64 {
        let delta = relative.wrapping_sub(reference as u32) as i32;
        (reference as i64 + i64::from(delta)).max(0) as u64
    }

    /// The 64-bit position of a sequence (or acknowledgement) number of this direction.
    fn position(&self, seq: u32) -> u64 {
        Direction::unwrap(self.snd_max, seq.wrapping_sub(self.base))
    }

    /// A round-trip sample. `bare` when nothing but the path is in it (the handshake,
    /// a pure ACK); an ACK riding on data also holds the application's own time.
    fn record_rtt_sample(&mut self, sample: Nanos, bare: bool) {
        self.round_trips.record(sample, bare);
    }

    /// The least round trip from the capture point to this side and back, if measured.
    pub fn path_rtt(&self) -> Option<Nanos> {
        self.round_trips.least()
    }
}

/// A TCP connection and what was found in it. Laid out like [`Direction`]: first what
/// every segment uses, then the two directions, then the rest.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Connection {
    pub packets: u64,
    pub last_time: Nanos,
    synack_time: Option<Nanos>,
    /// The side that sent the SYN, if the handshake was captured.
    pub syn_sender: Option<usize>,
    pub reset: bool,
    /// The gap whose released data may continue in the next segments.
    /// (gap index, sender, release time, the release's ACK field).
    open_release: Option<(usize, usize, Nanos, u32)>,
    clock: ClockStep,
    /// The last data-bearing segment: time, side, packet number.
    last_data: Option<(Nanos, usize, u64)>,
    /// By sender, the newest data acknowledged inside a gap waiting to be classified
    /// ([`Nanos::MIN`]: none): a later ACK of data far newer concerns none of them.
    pending_acked_data_time: [Nanos; 2],
    pub dirs: [Direction; 2],
    /// Gaps waiting to be classified when the connection's round trips are known.
    gaps: Vec<PendingGap>,
    pub duplicates: u64,
    /// The two endpoints; side 0 and side 1.
    pub endpoints: [SocketAddr; 2],
    /// The overlay network the connection runs in ([`Segment::tunnel`]), 0 when none.
    pub tunnel: u32,
    pub first_time: Nanos,
    pub first_packet: u64,
    syn_time: Option<Nanos>,
    pub events: Vec<StallEvent>,
    /// Gaps beyond each class's listing limit: (count, total duration), by class index.
    pub unlisted: [(u64, Nanos); 6],
    listed: [usize; 6],
}

impl Connection {
    /// A connection opened by `segment`, sent by side `x`.
    fn new(segment: &Segment, x: usize, packet: u64) -> Connection {
        let mut endpoints = [segment.src, segment.dst];
        endpoints.swap(0, x);
        Connection {
            endpoints,
            tunnel: segment.tunnel,
            syn_sender: None,
            first_time: segment.time,
            last_time: segment.time,
            first_packet: packet,
            packets: 0,
            dirs: [Direction::default(), Direction::default()],
            events: Vec::new(),
            unlisted: [(0, 0); 6],
            listed: [0; 6],
            reset: false,
            syn_time: None,
            synack_time: None,
            last_data: None,
            gaps: Vec::new(),
            pending_acked_data_time: [Nanos::MIN; 2],
            open_release: None,
            duplicates: 0,
            clock: ClockStep::default(),
        }
    }

    pub fn side_of(&self, addr: &SocketAddr) -> usize {
        usize::from(self.endpoints[0] != *addr)
    }

    /// The side that opened the connection, or the best guess: the side with the
    /// ephemeral-looking (higher) port when the handshake was not captured.
    pub fn client_side(&self) -> usize {
        if let Some(side) = self.syn_sender {
            return side;
        }
        let ports = [self.endpoints[0].port(), self.endpoints[1].port()];
        usize::from(ports[1] > ports[0])
    }

    pub fn handshake_seen(&self) -> bool {
        self.syn_sender.is_some()
    }

    /// The largest segment `side` may send: the MSS the other side announced, less the
    /// timestamp option when both sides use it; inferred when the SYNs were not captured.
    pub fn send_mss(&self, side: usize) -> (u32, MssSource) {
        let mss = self.segment_mss(side);
        let largest = self.dirs[side].max_payload;
        if self.dirs[1 - side].mss_option.is_some() {
            (mss, MssSource::Syn)
        } else if largest > mss {
            (largest, MssSource::Inferred)
        } else {
            (mss, MssSource::Assumed)
        }
    }

    /// The size from which `side`'s segments are full-sized: the MSS its peer announced,
    /// or the smaller segment limit it was seen keeping to.
    fn full_size(&self, side: usize) -> u32 {
        self.dirs[side].sender.full_size(self.segment_mss(side))
    }

    /// The MSS `side`'s segments are judged by: the one its peer announced (less the
    /// timestamp option when both sides use it), or Ethernet's when no SYN was captured
    /// (a capture taken before segmentation offload shows larger records, which are no
    /// bigger segments).
    fn segment_mss(&self, side: usize) -> u32 {
        let timestamps = self.dirs[side].timestamps_seen && self.dirs[1 - side].timestamps_seen;
        let overhead = if timestamps {
            TIMESTAMP_OPTION_BYTES
        } else {
            0
        };
        match self.dirs[1 - side].mss_option {
            Some(mss) => u32::from(mss).saturating_sub(overhead).max(1),
            None => DEFAULT_ETHERNET_MSS - overhead,
        }
    }

    pub fn path_rtt(&self, side: usize) -> Nanos {
        self.dirs[side].path_rtt().unwrap_or(0)
    }

    fn window_scale(&self, side: usize) -> Option<u8> {
        let (own, peer) = (&self.dirs[side], &self.dirs[1 - side]);
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
    fn observe(&mut self, segment: &Segment, x: usize, packet: u64, config: &DetectConfig) {
        let y = 1 - x;
        let t = segment.time;

        let raw = RawHeader::of(segment);
        if segment.payload_len > 0
            && self.dirs[x].last_raw == raw
            && t - self.dirs[x].last_raw_time < 100_000
        {
            // The same packet captured twice (two interfaces, or "any"): count, skip.
            self.duplicates += 1;
            return;
        }
        // This side's previous segment, for the ACK it may be.
        let previous_time = (self.dirs[x].packets > 0).then_some(self.dirs[x].last_raw_time);
        self.dirs[x].last_raw = raw;
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

        let dir = &mut self.dirs[x];
        if !dir.started {
            // Sequence numbers are kept relative to the first one seen, from an origin far
            // enough above zero that older bytes (retransmitted, or acknowledged before the
            // capture began) still have a place.
            dir.started = true;
            dir.base = segment.seq;
            dir.snd_max = SEQ_ORIGIN + u64::from(segment.flags.syn());
            dir.snd_una = SEQ_ORIGIN;
        }
        // A SYN takes the first sequence number; its payload (TCP Fast Open) follows it.
        let seq_start = dir.position(segment.seq) + u64::from(segment.flags.syn());
        let seq_end = seq_start + u64::from(segment.payload_len) + u64::from(segment.flags.fin());
        let carries_data = segment.payload_len > 0 || segment.flags.fin();
        let is_retransmission =
            carries_data && seq_end <= self.dirs[x].snd_max && !segment.flags.syn();

        // This side's previous segment: when it acknowledged new data of the other side,
        // if it did (the gap this segment may end may have been waiting for it).
        let own = &self.dirs[x].last;
        let previous_own_ack = own.has(LastSegment::ACK_ADVANCED).then_some(own.time);
        if carries_data && !own.has(LastSegment::CARRIES_DATA) && own.has(LastSegment::SEEN) {
            // Its last segment was a pure ACK, and data follows it: a release that crosses
            // this data was answering that ACK.
            self.dirs[x].last_pure_ack = *own;
        }
        if own.has(LastSegment::SEEN)
            && own.has(LastSegment::HAS_TSVAL)
            && !own.has(LastSegment::CARRIES_DATA)
        {
            self.dirs[x].last_bare_tsval = Some((own.tsval, own.time));
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
    fn note_echo(&mut self, x: usize, tsval: u32, tsecr: u32, is_new: bool, not_pure_ack: bool) {
        let y = 1 - x;
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

    fn observe_syn(&mut self, segment: &Segment, x: usize, y: usize) {
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
        for side in [0, 1] {
            self.dirs[side].window_shift = self.window_scale(side);
        }
    }

    /// What the ACK field of `segment` (from side `x`) did, recorded in its last segment.
    fn observe_ack(&mut self, segment: &Segment, x: usize, y: usize, t: Nanos) {
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
        }
        if ack <= snd_una || ack > snd_max {
            return;
        }
        let peer = &mut self.dirs[y];
        let newly_acked = ack - peer.snd_una;
        let small_before = peer.small_in_flight > 0;
        let mut newest: Option<InFlight> = None;
        let mut acked_segments = 0u32;
        while let Some(&done) = peer.in_flight.front() {
            if done.end > ack {
                break;
            }
            acked_segments += 1;
            peer.in_flight.pop_front();
            peer.small_in_flight -= u32::from(done.small);
            newest = Some(done);
        }
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
            (Some((_, ecr)), Some(seen)) => (ecr.wrapping_sub(seen) as i32) > 0,
            _ => false,
        };
        let last = &mut self.dirs[x].last;
        last.acked(newly_acked, newest.as_ref(), small_before, small_after);
        last.set(
            LastSegment::ACKED_UNCAPTURED,
            covers_hole || echoes_uncaptured,
        );
        // Karn's rule: no round-trip sample from retransmitted data.
        let Some(newest) = newest.filter(|done| !done.retransmitted) else {
            return;
        };
        let sample = t - newest.time;
        let pure_ack = segment.payload_len == 0;
        self.dirs[x].record_rtt_sample(sample, pure_ack && !segment.flags.fin());
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

    /// A later ACK for data `sender` sent at `data_time` measured `round_trip`: gaps
    /// waiting to be classified whose releasing ACK covered earlier data of the same
    /// flight met the same path (a FIFO queue serves that data first).
    fn note_prompt_ack(&mut self, sender: usize, data_time: Nanos, round_trip: Nanos) {
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

    #[allow(clippy::too_many_arguments)]
    fn observe_data(
        &mut self,
        segment: &Segment,
        packet: u64,
        x: usize,
        (seq_start, seq_end): (u64, u64),
        is_retransmission: bool,
        previous_own_ack: Option<Nanos>,
        config: &DetectConfig,
    ) {
        let y = 1 - x;
        let t = segment.time;
        let mss = self.segment_mss(x);

        if let Some((gap_start, before_side, before_packet)) = self.last_data
            && t - gap_start >= config.min_gap
        {
            let peer = &self.dirs[y];
            let in_gap = |p: &PeerSegment| p.time > gap_start && p.time <= t;
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
            // The round trip of the peer's last prompt ACK, if it covered the same
            // flight of data as the candidate release.
            let prompt_round_trip = last_from_peer
                .as_ref()
                .and_then(|ack| self.dirs[y].acks.path_reference_for(ack));
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
                segment_is_retransmission: is_retransmission,
                segment_tsecr: segment.options.timestamps.map(|(_, ecr)| ecr),
                data_before_from_sender: before_side == x,
                sender_previous_data: self.dirs[x].sender.last_data_time(),
                sender_previous_message: self.dirs[x].sender.last_message_end(mss),
                segment_tsval: segment.options.timestamps.map(|(val, _)| val),
                sender_previous_tsval: self.dirs[x].last_data_tsval,
                sender_previous_bare: self.dirs[x].last_bare_tsval,
                sender_tsval_hz: None,
                sender_echoes_pure_acks: false,
                release_after_hole: !is_retransmission && seq_start > self.dirs[x].snd_max,
                sender_acked_peer_at,
                path: [PathSide::default(); 2],
                clock_step: 0,
                prompt_round_trip,
                peer_acks_every_segment,
                peer_paced_by_delivery,
                peer_large_data_rtt: self.dirs[y].acks.large_round_trip(),
                last_from_peer,
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
        self.dirs[y].peer_spoke_since_data = true;

        let dir = &mut self.dirs[x];
        if is_retransmission {
            dir.retransmitted_segments += 1;
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
        let sent = SentData {
            time: t,
            packet,
            start: seq_start,
            end: seq_end,
            payload: segment.payload_len,
            pushed_past_nagle: segment.flags.fin() || urgent_mode,
            same_message: !dir.peer_spoke_since_data,
        };
        // A TSecr newer than any TSval of the peer the capture saw: the capture missed a
        // segment of the peer, perhaps the ACK that cleared the small segment in flight.
        // So does an ACK of peer data the capture never saw.
        let echoes_unseen = match (segment.options.timestamps, self.dirs[y].timestamps.newest()) {
            (Some((_, ecr)), Some(seen)) => (ecr.wrapping_sub(seen) as i32) > 0,
            _ => false,
        };
        let peer = &self.dirs[y];
        let acks_unseen =
            segment.flags.ack() && peer.started && peer.position(segment.ack) > peer.snd_max;
        let missed_peer_segment = echoes_unseen || acks_unseen;
        let dir = &mut self.dirs[x];
        let small_unacked = dir.small_in_flight > 0 && !missed_peer_segment;
        if dir.sender.observe(sent, mss, small_unacked) {
            // A smaller segment limit: segments in flight of that size are full-sized.
            let full_size = dir.sender.full_size(mss);
            for f in dir.in_flight.iter_mut().filter(|f| f.small) {
                f.small = f.len < full_size;
            }
            dir.small_in_flight = dir.in_flight.iter().filter(|f| f.small).count() as u32;
        }
        let full_size = dir.sender.full_size(mss);
        dir.full_size = full_size;
        dir.last_data_tsval = segment.options.timestamps.map(|(val, _)| val);
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
        if seq_start > dir.snd_max {
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
    }

    /// Classifies the gaps with the connection's final round-trip estimates and what
    /// each sender's own segments proved by then.
    fn classify_gaps(&mut self, config: &DetectConfig) {
        let path = [0, 1].map(|side| self.dirs[side].round_trips.side());
        let full_size = [0, 1].map(|side| self.full_size(side));
        let clock = [0, 1].map(|side| self.sender_clock(side));
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
            if let Some(event) = classify_gap(context, config) {
                let class = event.class;
                if self.listed[class.index()] < class.listing_limit() {
                    self.listed[class.index()] += 1;
                    self.events.push(event);
                } else {
                    event.count_in(&mut self.unlisted);
                }
            }
        }
        self.gaps.clear();
        self.pending_acked_data_time = [Nanos::MIN; 2];
        self.open_release = None;
    }

    /// Whether `side`'s data, over its pending gaps that ended after an ACK of the other
    /// side, follows its own clock rather than those ACKs.
    fn sender_clock(&self, side: usize) -> SenderClock {
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

    /// A window still closed when the connection ends
    /// ([`crate::detect::window::still_closed_at_end`]).
    fn window_closed_at_end(&mut self, config: &DetectConfig) {
        for holder in [0, 1] {
            let receiver = 1 - holder;
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
            let class = event.class;
            if self.listed[class.index()] < class.listing_limit() {
                self.listed[class.index()] += 1;
                self.events.push(event);
            } else {
                event.count_in(&mut self.unlisted);
            }
        }
    }

    /// Frees what only an open connection needs.
    fn release_tracking(&mut self) {
        self.gaps = Vec::new();
        for dir in &mut self.dirs {
            dir.in_flight = VecDeque::new();
            dir.small_in_flight = 0;
        }
    }

    fn is_finished(&self) -> bool {
        self.reset || (self.dirs[0].fin_seen && self.dirs[1].fin_seen)
    }
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

#[derive(Clone, Debug)]
struct PendingGap {
    context: GapContext,
    /// Payload of the last segment of the burst that ended the gap.
    last_burst_segment: u32,
}

/// A connection's two endpoints, lower first, packed into machine words so that
/// hashing and comparing them is cheap: IPv4 takes the first two words (address and port
/// in each), IPv6 all five, the last marking it IPv6 and holding the ports. The overlay
/// network ([`Segment::tunnel`], 29 bits) takes the third word for IPv4 and the free
/// bits of the last for IPv6.
#[derive(Clone, Copy, Debug, Eq)]
struct FlowKey([u64; 5]);

impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for word in self.0 {
            state.write_u64(word);
        }
    }
}

impl PartialEq for FlowKey {
    fn eq(&self, other: &FlowKey) -> bool {
        // Word by word, with no early exit: cheaper than a call to compare bytes.
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |differ, (a, b)| differ | (a ^ b))
            == 0
    }
}

/// Marks a [`FlowKey`] as holding IPv6 (or mixed) endpoints.
const V6_KEY: u64 = 1 << 63;

impl FlowKey {
    /// The key of the connection between `src` and `dst`, and the side `src` is: 0 for
    /// the lower endpoint in the order of [`SocketAddr`] (IPv4 first, then address, then
    /// port), whose IPv6 flow label and scope are always zero here.
    fn of(src: &SocketAddr, dst: &SocketAddr, tunnel: u32) -> (FlowKey, usize) {
        let tunnel = u64::from(tunnel & crate::segment::MAX_TUNNEL_ID);
        if let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) {
            let word = |a: &std::net::SocketAddrV4| {
                u64::from(a.ip().to_bits()) << 16 | u64::from(a.port())
            };
            let (src, dst) = (word(src), word(dst));
            return if src <= dst {
                (FlowKey([src, dst, tunnel, 0, 0]), 0)
            } else {
                (FlowKey([dst, src, tunnel, 0, 0]), 1)
            };
        }
        let side = usize::from(src > dst);
        let (lower, upper) = if side == 0 { (src, dst) } else { (dst, src) };
        let bits = |addr: &SocketAddr| match addr.ip() {
            std::net::IpAddr::V4(ip) => (u128::from(ip.to_bits()), 0),
            std::net::IpAddr::V6(ip) => (ip.to_bits(), 1),
        };
        let ((a, a_v6), (b, b_v6)) = (bits(lower), bits(upper));
        let tail = V6_KEY
            | tunnel << 34
            | a_v6 << 33
            | b_v6 << 32
            | u64::from(lower.port()) << 16
            | u64::from(upper.port());
        (
            FlowKey([(a >> 64) as u64, a as u64, (b >> 64) as u64, b as u64, tail]),
            side,
        )
    }
}

/// Which of `buckets` the connection `segment` belongs to falls in, by a hash of its
/// endpoints: both directions of a connection land in the same one.
pub fn bucket_of(segment: &Segment, buckets: usize) -> usize {
    let fold = |addr: &SocketAddr| {
        let address = match addr.ip() {
            std::net::IpAddr::V4(ip) => u64::from(u32::from(ip)),
            std::net::IpAddr::V6(ip) => {
                let bits = u128::from(ip);
                bits as u64 ^ (bits >> 64) as u64
            }
        };
        address ^ (u64::from(addr.port()) << 32)
    };
    // XOR makes it the same both ways; the multiply (Fibonacci hashing) mixes it.
    let mixed = (fold(&segment.src) ^ fold(&segment.dst)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((mixed >> 32) % buckets as u64) as usize
}

/// Connections tracked at once. Beyond this the least recently active quarter is
/// ended as idle: memory follows open connections, never the capture's size.
pub const MAX_OPEN_CONNECTIONS: usize = 200_000;
/// A connection silent this long (capture time) is ended as idle.
pub const IDLE_TIMEOUT: Nanos = 300 * crate::segment::NANOS_PER_SEC;
/// Segments of a closed connection that arrive this soon after its close (the last ACK,
/// a retransmitted FIN) belong to it, not to a new connection.
const LATE_SEGMENT_WINDOW: Nanos = 2 * crate::segment::NANOS_PER_SEC;
/// How often (in segments) idle connections are looked for.
const IDLE_SWEEP_EVERY: u32 = 1 << 20;

/// All connections of a segment stream. Ended connections (closed, reset, or idle) are
/// handed over through [`FlowTable::take_ended`] as they end.
pub struct FlowTable {
    config: DetectConfig,
    index: FxHashMap<FlowKey, u32>,
    slots: Vec<Option<Box<Connection>>>,
    free_slots: Vec<u32>,
    /// Boxed as they were tracked: a connection is large, and moving it by value costs
    /// more than the pointer.
    #[allow(clippy::vec_box)]
    ended: Vec<Box<Connection>>,
    closed_recently: FxHashMap<FlowKey, Nanos>,
    closed_order: VecDeque<(Nanos, FlowKey)>,
    now: Nanos,
    segments_since_sweep: u32,
    max_open: usize,
    /// Segments that arrived just after their connection closed.
    pub late_segments: u64,
    /// Connections ended because they were idle, or because too many were open.
    pub ended_idle: u64,
}

impl FlowTable {
    pub fn new(config: DetectConfig) -> FlowTable {
        FlowTable::with_limit(config, MAX_OPEN_CONNECTIONS)
    }

    /// A table that tracks at most `max_open` connections at once.
    pub fn with_limit(config: DetectConfig, max_open: usize) -> FlowTable {
        FlowTable {
            config,
            index: FxHashMap::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            ended: Vec::new(),
            closed_recently: FxHashMap::default(),
            closed_order: VecDeque::new(),
            now: Nanos::MIN,
            segments_since_sweep: 0,
            max_open: max_open.max(4),
            late_segments: 0,
            ended_idle: 0,
        }
    }

    /// Feeds one segment; `packet` is its number in the capture (for evidence).
    pub fn observe(&mut self, segment: &Segment, packet: u64) {
        self.now = self.now.max(segment.time);
        let (key, side) = FlowKey::of(&segment.src, &segment.dst, segment.tunnel);
        let opening = segment.flags.syn() && !segment.flags.ack();
        let mut slot = self.index.get(&key).copied();
        if let Some(i) = slot
            && opening
            && self.slots[i as usize]
                .as_ref()
                .is_some_and(|c| c.reuse_by(side))
        {
            self.end(i, false);
            slot = None;
        }
        let i = match slot {
            Some(i) => i,
            None => {
                if !opening && self.closed_recently.contains_key(&key) {
                    self.late_segments += 1;
                    return;
                }
                self.open(key, segment, side, packet)
            }
        };
        let Some(connection) = self.slots[i as usize].as_deref_mut() else {
            return;
        };
        connection.observe(segment, side, packet, &self.config);
        if connection.is_finished() {
            self.end(i, true);
        }
        self.segments_since_sweep += 1;
        if self.segments_since_sweep >= IDLE_SWEEP_EVERY {
            self.segments_since_sweep = 0;
            self.end_idle(self.now - IDLE_TIMEOUT);
        }
    }

    fn open(&mut self, key: FlowKey, segment: &Segment, side: usize, packet: u64) -> u32 {
        if self.index.len() >= self.max_open {
            self.end_least_recent_quarter();
        }
        let connection = Box::new(Connection::new(segment, side, packet));
        let i = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(connection);
                i
            }
            None => {
                self.slots.push(Some(connection));
                (self.slots.len() - 1) as u32
            }
        };
        self.closed_recently.remove(&key);
        self.index.insert(key, i);
        i
    }

    /// Ends the connection in slot `i`: classifies its gaps and hands it over.
    fn end(&mut self, i: u32, closed: bool) {
        let Some(mut connection) = self.slots[i as usize].take() else {
            return;
        };
        self.free_slots.push(i);
        let (key, _) = FlowKey::of(
            &connection.endpoints[0],
            &connection.endpoints[1],
            connection.tunnel,
        );
        self.index.remove(&key);
        if closed {
            self.closed_recently.insert(key, connection.last_time);
            self.closed_order.push_back((connection.last_time, key));
            while let Some(&(time, old)) = self.closed_order.front() {
                if self.now - time <= LATE_SEGMENT_WINDOW {
                    break;
                }
                self.closed_order.pop_front();
                if self.closed_recently.get(&old) == Some(&time) {
                    self.closed_recently.remove(&old);
                }
            }
        }
        connection.classify_gaps(&self.config);
        connection.window_closed_at_end(&self.config);
        // Kept until the report: without the room its growth left.
        connection.events.shrink_to_fit();
        connection.release_tracking();
        self.ended.push(connection);
    }

    /// Ends every connection silent since `before`.
    fn end_idle(&mut self, before: Nanos) {
        let idle: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.as_ref()
                    .filter(|c| c.last_time < before)
                    .map(|_| i as u32)
            })
            .collect();
        self.ended_idle += idle.len() as u64;
        for i in idle {
            self.end(i, false);
        }
    }

    /// Too many open connections: ends the least recently active quarter.
    fn end_least_recent_quarter(&mut self) {
        let mut last_times: Vec<Nanos> = self.slots.iter().flatten().map(|c| c.last_time).collect();
        if last_times.is_empty() {
            return;
        }
        let quarter = last_times.len() / 4;
        let (_, threshold, _) = last_times.select_nth_unstable(quarter);
        let threshold = *threshold;
        self.end_idle(threshold + 1);
    }

    /// Connections open right now.
    pub fn open_connections(&self) -> usize {
        self.index.len()
    }

    /// Takes the connections that ended since the last call.
    pub fn take_ended(&mut self) -> std::vec::Drain<'_, Box<Connection>> {
        self.ended.drain(..)
    }

    pub fn has_ended(&self) -> bool {
        !self.ended.is_empty()
    }

    /// Ends the stream: every connection still open ends, and all are handed over.
    pub fn into_connections(mut self) -> Vec<Box<Connection>> {
        for i in 0..self.slots.len() as u32 {
            if self.slots[i as usize].is_some() {
                self.end(i, false);
            }
        }
        std::mem::take(&mut self.ended)
    }
}

impl Connection {
    /// A new SYN from `side` on this 4-tuple starts a new connection when this one has
    /// ended, or when it is a different SYN from the one already seen.
    fn reuse_by(&self, side: usize) -> bool {
        if self.is_finished() {
            return true;
        }
        let dir = &self.dirs[side];
        dir.syn_seen && dir.data_segments > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwrap_follows_sequence_numbers_across_the_32_bit_wrap() {
        let reference = SEQ_ORIGIN + u64::from(u32::MAX) - 10;
        let relative_after_wrap = (reference as u32).wrapping_add(20);
        assert_eq!(
            Direction::unwrap(reference, relative_after_wrap),
            reference + 20
        );
        let relative_before = (reference as u32).wrapping_sub(5);
        assert_eq!(Direction::unwrap(reference, relative_before), reference - 5);
    }

    #[test]
    fn the_last_segment_gives_back_what_it_was_given() {
        assert!(LastSegment::default().get(None).is_none());
        let time = 1_767_225_600_123_456_789;
        // Earlier times a whole number of microseconds before, byte counts and windows
        // within 32 bits: what the compact form keeps exactly.
        let full = PeerSegment {
            packet: u64::MAX,
            time,
            previous_time: Some(time - 123_456_000),
            snd_una_before: 1 << 33,
            newly_acked: 1 << 29,
            small_outstanding_after: true,
            ack_advanced: true,
            outstanding_before: 1 << 30,
            outstanding_small_segment: true,
            acked_data_time: Some(time - 3_600_000_000_000),
            acked_data_small: true,
            acked_data_len: 65_535,
            acked_data_began_message: true,
            tsval: Some(0),
            tsval_is_new: true,
            sender_owed_ack: true,
            acked_uncaptured: true,
            carries_data: true,
            window_before: Some(0),
            window_after: Some(65_535 << 14),
        };
        let empty = PeerSegment {
            packet: 0,
            time: -5,
            previous_time: None,
            snd_una_before: 0,
            newly_acked: 0,
            small_outstanding_after: false,
            ack_advanced: false,
            outstanding_before: 0,
            outstanding_small_segment: false,
            acked_data_time: None,
            acked_data_small: false,
            acked_data_len: 0,
            acked_data_began_message: false,
            tsval: None,
            tsval_is_new: false,
            sender_owed_ack: false,
            acked_uncaptured: false,
            carries_data: false,
            window_before: None,
            window_after: None,
        };
        for segment in [full, empty] {
            let mut last = LastSegment::begin(segment.packet, segment.time, segment.previous_time);
            last.set(LastSegment::SENDER_OWED_ACK, segment.sender_owed_ack);
            last.set(LastSegment::CARRIES_DATA, segment.carries_data);
            last.ack_field(segment.snd_una_before, segment.outstanding_before);
            if segment.ack_advanced {
                let newest = segment.acked_data_time.map(|time| InFlight {
                    end: 0,
                    time,
                    len: segment.acked_data_len,
                    small: segment.acked_data_small,
                    began_message: segment.acked_data_began_message,
                    retransmitted: false,
                });
                last.acked(
                    segment.newly_acked,
                    newest.as_ref(),
                    segment.outstanding_small_segment,
                    segment.small_outstanding_after,
                );
                last.set(LastSegment::ACKED_UNCAPTURED, segment.acked_uncaptured);
            }
            last.window_and_tsval(
                segment.window_before.map(u64::from),
                segment.tsval,
                segment.tsval_is_new,
            );
            let back = last.get(segment.window_after.map(u64::from));
            assert_eq!(format!("{back:?}"), format!("{:?}", Some(segment)));
        }
    }

    #[test]
    fn the_last_segment_takes_one_cache_line() {
        assert!(std::mem::size_of::<LastSegment>() <= 64);
    }

    #[test]
    fn earlier_times_are_whole_microseconds_before_and_never_after() {
        let last = LastSegment {
            time: 10_000_000,
            ..LastSegment::default()
        };
        assert_eq!(last.earlier(9_998_999), Some(9_999_000));
        assert_eq!(last.earlier(10_000_500), Some(10_000_000));
        assert_eq!(last.earlier(LastSegment::NO_TIME), None);
    }

    #[test]
    fn positions_are_relative_to_the_first_sequence_number() {
        let dir = Direction {
            started: true,
            base: u32::MAX - 2,
            snd_max: SEQ_ORIGIN,
            ..Direction::default()
        };
        assert_eq!(dir.position(u32::MAX - 2), SEQ_ORIGIN);
        assert_eq!(dir.position(5), SEQ_ORIGIN + 8);
    }
}
