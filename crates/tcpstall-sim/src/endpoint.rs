//! One TCP endpoint: the sending machinery (Nagle, cork, congestion and receive windows,
//! retransmission) and the receiving machinery (delayed ACKs in each stack's flavour).
//! Each rule is a small function with its source in a one-line comment.

use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos};
use tcpstall_core::seq::SeqNumber;
use tcpstall_core::side::Side;

use crate::profile::{DelayedAckTimer, NagleMode, RtoRule, SlowStart, StackProfile};
use crate::scenario::SocketOptions;
use crate::window::{
    ReceiveBuffer, WindowRules, persist_interval, read_opens_window, sender_may_use_window,
};

pub use crate::window::{UNLIMITED_WINDOW as RECEIVE_WINDOW, WINDOW_SCALE};

const TIMESTAMP_OPTION_BYTES: u32 = 12;
const MAX_RTO: Nanos = 60_000 * NANOS_PER_MILLI;

/// Why a segment was sent: what the ground truth needs to name a gap it ends or a hold
/// it releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// New data (or a FIN) as the sending rules allowed.
    Data,
    /// Data sent again after the retransmission timer (`true`) or three duplicate ACKs.
    Retransmission { by_timer: bool },
    /// A zero-window probe sent by the persist timer (data or a bare ACK below snd_una).
    WindowProbe,
    /// A pure ACK the delayed-ACK timer sent (`ack_delay` says how long it waited).
    DelayedAck,
    /// A pure ACK sent at once on arrival (every second segment, quick-ack mode, out of
    /// order, a FIN, TCP_QUICKACK).
    PromptAck,
    /// A pure ACK sent because the application read (a window update, or a pending ACK
    /// that the read made due).
    ReadAck,
    /// A pure ACK answering an unacceptable segment (a window probe, data beyond the window).
    ProbeAnswer,
    /// The handshake.
    Handshake,
}

/// A segment on the simulated wire, with what the simulator knows about it.
#[derive(Clone, Debug)]
pub struct WireSegment {
    /// Set by the engine when the segment is sent: names it in the ground truth.
    pub id: u64,
    pub from: Side,
    /// Sequence and acknowledgement numbers relative to each side's ISN (SYN = 0).
    pub seq: u64,
    pub ack: u64,
    pub len: u32,
    pub syn: bool,
    pub fin: bool,
    pub ack_flag: bool,
    pub psh: bool,
    /// URG: the segment starts before the urgent pointer.
    pub urg: bool,
    pub window: u64,
    pub timestamps: Option<(u32, u32)>,
    pub mss_option: Option<u32>,
    pub window_scale: Option<u8>,
    /// The receiver's out-of-order blocks (RFC 2018 SACK), lowest first; empty ones are
    /// (0, 0).
    pub sack: [(u64, u64); SACK_BLOCKS],
    /// This pure ACK was held by the delayed-ACK timer for this long after the data.
    pub ack_delay: Option<Nanos>,
    pub retransmission: bool,
    pub kind: SegmentKind,
    /// This segment's data had been held, for this reason and this long.
    pub held: Option<(HoldReason, Nanos)>,
    /// The segment whose arrival released that hold (its id), if one did.
    pub released_by: Option<u64>,
    /// Segments sent by one call of the sending rules share this number (one TSO burst).
    pub burst: u64,
    /// When the endpoint sent it.
    pub sent: Nanos,
}

/// SACK blocks an ACK carries: three fit beside the timestamp option (RFC 2018 3).
pub const SACK_BLOCKS: usize = 3;

/// Sorts sequence ranges and joins those that touch or overlap.
fn coalesce(blocks: &mut Vec<(u64, u64)>) {
    blocks.sort_unstable();
    let mut joined: Vec<(u64, u64)> = Vec::with_capacity(blocks.len());
    for &(start, end) in blocks.iter() {
        match joined.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => joined.push((start, end)),
        }
    }
    *blocks = joined;
}

/// Why a sender could not send what the application had written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldReason {
    Nagle,
    Cork,
    Autocork,
    CongestionWindow,
    /// The peer's window, open to its full size, was filled by data in flight.
    ReceiveWindow,
    /// The peer's window was closed or smaller than its largest: its application had not
    /// read what arrived.
    PeerWindow,
    /// The send buffer (SO_SNDBUF) was full of unacknowledged data: the application's
    /// write waited for an ACK to free room.
    SendBuffer,
}

impl HoldReason {
    pub fn name(self) -> &'static str {
        match self {
            HoldReason::Nagle => "nagle",
            HoldReason::Cork => "cork",
            HoldReason::Autocork => "autocork",
            HoldReason::CongestionWindow => "congestion-window",
            HoldReason::ReceiveWindow => "receive-window",
            HoldReason::PeerWindow => "peer-window",
            HoldReason::SendBuffer => "send-buffer",
        }
    }
}

/// A hold that ended: the simulator's ground truth for the sending side.
#[derive(Clone, Debug)]
pub struct ReleasedHold {
    pub reason: HoldReason,
    pub since: Nanos,
    pub released: Nanos,
    pub bytes: u32,
    /// The delay of the timer-delayed ACK that released it, if one did.
    pub released_by_delayed_ack: Option<Nanos>,
    /// The released segment, by the engine's count of this side's segments in `Output`.
    pub segment_index: usize,
}

/// What an endpoint wants the engine to do after an input.
#[derive(Default, Debug)]
pub struct Output {
    pub segments: Vec<WireSegment>,
    pub released: Vec<ReleasedHold>,
    /// Arm (or re-arm) the delayed-ACK timer at this time.
    pub delack_at: Option<Nanos>,
    pub rto_at: Option<Nanos>,
    pub cork_flush_at: Option<Nanos>,
    /// Arm the persist timer at this time (`Nanos::MAX`: stop it).
    pub persist_at: Option<Nanos>,
    /// A write waits for this side's data to leave the host: try again when it has.
    pub autocorked: bool,
    /// Bytes newly queued in order for the application to read.
    pub delivered: u64,
    pub peer_closed: bool,
}

pub struct Endpoint {
    pub side: Side,
    pub profile: StackProfile,
    pub options: SocketOptions,
    pub send_mss: u32,
    rcv_mss: u32,
    timestamps: bool,
    ts_clock_origin: Nanos,
    ts_recent: u32,
    /// The ACK field of the last segment this side sent (RFC 7323 Last.ACK.sent; Linux
    /// rcv_wup).
    last_ack_sent: u64,
    // Sending.
    snd_una: u64,
    snd_nxt: u64,
    /// Bytes the application has written (sequence space, SYN excluded: data starts at 1).
    written: u64,
    /// Data up to here was written without MSG_MORE / outside TCP_CORK.
    push_point: u64,
    /// SO_SNDBUF: bytes written and not yet acknowledged that the socket holds at most.
    /// None: no limit.
    pub send_buffer: Option<u64>,
    /// Bytes the application is blocked writing (the send buffer is full), and whether
    /// they end a message (pushed as they are taken).
    app_pending: u64,
    pending_push: bool,
    snd_sml: u64,
    /// The urgent pointer: the end of the last urgent write (0: none). The sender is in
    /// urgent mode until it is acknowledged.
    snd_up: u64,
    cwnd: u64,
    ssthresh: u64,
    /// The right edge of the peer's window (SND.UNA + SND.WND), and the largest window
    /// it offered.
    peer_right_edge: u64,
    peer_window: u64,
    max_peer_window: u64,
    /// Persist timer: armed, and how many probes it has sent since the window last opened.
    persist_armed: bool,
    persist_backoff: u32,
    /// The end of an outstanding one-byte probe sent beyond the window (BSD).
    probe_end: u64,
    bursts: u64,
    srtt: Option<Nanos>,
    rttvar: Nanos,
    rto: Nanos,
    rtt_probe: Option<(u64, Nanos)>,
    dupacks: u32,
    /// Loss recovery runs until this is acknowledged (RFC 6582 "recover").
    recover: Option<u64>,
    /// In loss recovery, where the next resend starts.
    resend_next: u64,
    /// What the peer's SACK blocks say it holds above `snd_una`.
    sacked: Vec<(u64, u64)>,
    hold: Option<(HoldReason, Nanos)>,
    cork_deadline: Option<Nanos>,
    /// When this side's last data segment has left the host (set by the link).
    pub data_in_host_until: Nanos,
    pub fin_sent: bool,
    close_requested: bool,
    // Receiving.
    rcv_nxt: u64,
    out_of_order: Vec<(u64, u64)>,
    unacked_bytes: u64,
    unacked_segments: u32,
    /// A one-byte segment arrived that the profile answers at once.
    one_byte_arrived: bool,
    first_unacked_at: Option<Nanos>,
    delack_pending: bool,
    quick: u32,
    pingpong: bool,
    ato: Nanos,
    last_receive: Option<Nanos>,
    jiffy_phase: Nanos,
    pub peer_fin: bool,
    /// Small pushed segments arrived since the last ACK (Linux ICSK_ACK_PUSHED, PUSHED2).
    pushed: u8,
    pub receive_buffer: ReceiveBuffer,
    /// When the newest in-order data arrived.
    pub last_in_order_arrival: Nanos,
}

impl Endpoint {
    pub fn new(
        side: Side,
        profile: StackProfile,
        options: SocketOptions,
        jiffy_phase: Nanos,
        receive_buffer: ReceiveBuffer,
    ) -> Endpoint {
        Endpoint {
            side,
            profile,
            options,
            send_mss: 536,
            rcv_mss: 536,
            timestamps: false,
            ts_clock_origin: 0,
            ts_recent: 0,
            last_ack_sent: 0,
            snd_una: 0,
            snd_nxt: 0,
            written: 1,
            push_point: 1,
            send_buffer: None,
            app_pending: 0,
            pending_push: false,
            snd_sml: 0,
            snd_up: 0,
            cwnd: 0,
            ssthresh: u64::MAX,
            peer_right_edge: 1 + RECEIVE_WINDOW,
            peer_window: RECEIVE_WINDOW,
            max_peer_window: RECEIVE_WINDOW,
            persist_armed: false,
            persist_backoff: 0,
            probe_end: 0,
            bursts: 0,
            srtt: None,
            rttvar: 0,
            rto: 1000 * NANOS_PER_MILLI,
            rtt_probe: None,
            dupacks: 0,
            recover: None,
            resend_next: 0,
            sacked: Vec::new(),
            hold: None,
            cork_deadline: None,
            data_in_host_until: 0,
            fin_sent: false,
            close_requested: false,
            rcv_nxt: 0,
            out_of_order: Vec::new(),
            unacked_bytes: 0,
            unacked_segments: 0,
            one_byte_arrived: false,
            first_unacked_at: None,
            delack_pending: false,
            quick: 0,
            pingpong: false,
            ato: 0,
            last_receive: None,
            jiffy_phase,
            peer_fin: false,
            pushed: 0,
            receive_buffer,
            last_in_order_arrival: 0,
        }
    }

    /// Settles what the handshake negotiated: the MSS each way (less the timestamp option
    /// when both sides use it) and the initial window (RFC 6928: IW segments).
    pub fn establish(&mut self, own_mss: u32, peer_mss: u32, timestamps: bool, peer_window: u64) {
        let overhead = if timestamps {
            TIMESTAMP_OPTION_BYTES
        } else {
            0
        };
        self.timestamps = timestamps;
        self.send_mss = peer_mss - overhead;
        self.rcv_mss = own_mss - overhead;
        self.cwnd = u64::from(self.profile.initial_window) * u64::from(self.send_mss);
        self.snd_una = 1;
        self.snd_nxt = 1;
        self.snd_sml = 1;
        self.rcv_nxt = 1;
        self.last_ack_sent = 1;
        self.rto = self.profile.min_rto.max(self.rto);
        self.peer_window = peer_window;
        self.peer_right_edge = 1 + peer_window;
        self.max_peer_window = peer_window;
        self.receive_buffer.advertised_at = 1;
    }

    fn window_rules(&self) -> WindowRules {
        self.profile.window_rules
    }

    /// The window this side offers in its SYN (unscaled, at most 65,535).
    pub fn syn_window(&self) -> u64 {
        self.receive_buffer.capacity.min(65_535)
    }

    pub fn timestamps_on(&self) -> bool {
        self.timestamps
    }

    /// The TSval clock at `now`: the profile's ticks per second (RFC 7323 5.4).
    pub fn tsval(&self, now: Nanos) -> u32 {
        let ticks = (now - self.ts_clock_origin) as f64 * self.profile.ts_hz / 1e9;
        ticks.floor() as u64 as u32 + 1
    }

    /// The SYN (or SYN-ACK) this side sends.
    pub fn syn(
        &self,
        now: Nanos,
        announced_mss: u32,
        with_timestamps: bool,
        ack: bool,
    ) -> WireSegment {
        WireSegment {
            from: self.side,
            seq: 0,
            ack: if ack { 1 } else { 0 },
            len: 0,
            syn: true,
            fin: false,
            ack_flag: ack,
            psh: false,
            urg: false,
            window: self.syn_window(),
            timestamps: with_timestamps
                .then(|| (self.tsval(now), if ack { self.ts_recent } else { 0 })),
            mss_option: Some(announced_mss),
            window_scale: Some(WINDOW_SCALE),
            sack: [(0, 0); SACK_BLOCKS],
            ack_delay: None,
            retransmission: false,
            kind: SegmentKind::Handshake,
            held: None,
            released_by: None,
            burst: 0,
            id: 0,
            sent: now,
        }
    }

    /// The peer's SYN (or SYN-ACK) sets TS.Recent (RFC 7323 3.2).
    pub fn note_peer_tsval(&mut self, tsval: u32) {
        self.ts_recent = tsval;
    }

    /// The TSecr this side's next segment carries.
    pub fn ts_recent(&self) -> u32 {
        self.ts_recent
    }

    /// RFC 7323 4.3 (RFC 1323 4.3 for a strict stack): an arriving segment's TSval
    /// becomes TS.Recent only as the profile's rule allows, and never an older one (PAWS,
    /// Linux tcp_paws_check).
    fn update_ts_recent(&mut self, segment: &WireSegment) {
        let Some((tsval, _)) = segment.timestamps else {
            return;
        };
        let len = u64::from(segment.len) + u64::from(segment.fin) + u64::from(segment.syn);
        let newer = SeqNumber(tsval).is_at_or_after(SeqNumber(self.ts_recent));
        if newer
            && self
                .profile
                .ts_recent
                .updates(segment.seq, len, self.last_ack_sent)
        {
            self.ts_recent = tsval;
        }
    }

    /// A segment from this side; every one carries the window it offers now.
    fn segment(&mut self, now: Nanos, seq: u64, len: u32, kind: SegmentKind) -> WireSegment {
        let window = self
            .receive_buffer
            .advertise(self.window_rules(), self.rcv_nxt, self.rcv_mss);
        self.last_ack_sent = self.rcv_nxt;
        WireSegment {
            id: 0,
            from: self.side,
            seq,
            ack: self.rcv_nxt,
            len,
            syn: false,
            fin: false,
            ack_flag: true,
            psh: false,
            // Linux __tcp_transmit_skb (v6.6): URG on every segment that starts before
            // snd_up while in urgent mode.
            urg: seq < self.snd_up,
            window,
            timestamps: self.timestamps.then(|| (self.tsval(now), self.ts_recent)),
            mss_option: None,
            window_scale: None,
            sack: self.sack_blocks(),
            ack_delay: None,
            retransmission: false,
            kind,
            held: None,
            released_by: None,
            burst: self.bursts,
            sent: now,
        }
    }

    /// The window this side offers now (for the handshake's last ACK).
    pub fn current_window(&mut self) -> u64 {
        self.receive_buffer
            .advertise(self.window_rules(), self.rcv_nxt, self.rcv_mss)
    }

    // ---- The application's side of the socket. ----

    /// A write() of `bytes`; `more` marks it as not the last of its message (MSG_MORE, or
    /// inside TCP_CORK).
    pub fn app_write(&mut self, now: Nanos, bytes: u32, more: bool, out: &mut Output) {
        self.app_pending += u64::from(bytes);
        self.pending_push = !more;
        self.take_pending(false);
        self.try_send(now, None, out);
    }

    /// A send() with MSG_OOB: the write's last byte is urgent, and the sender is in urgent
    /// mode until it is acknowledged (Linux v6.6 tcp_sendmsg_locked and tcp_mark_urg:
    /// snd_up = write_seq; FreeBSD tcp_usr_send with PRUS_OOB: snd_up = snd_una + the
    /// bytes queued).
    pub fn app_write_urgent(&mut self, now: Nanos, bytes: u32, out: &mut Output) {
        self.app_pending += u64::from(bytes);
        self.pending_push = true;
        self.take_pending(false);
        self.snd_up = self.written();
        self.try_send(now, None, out);
    }

    /// The socket takes what the application is writing, as far as the send buffer has
    /// room. A blocked writer wakes only when enough room is free (`waking`): Linux
    /// sk_stream_write_space, when the free space is at least half of what is queued;
    /// BSD sowwakeup, at the send buffer's low-water mark (SO_SNDLOWAT, 2048 bytes).
    fn take_pending(&mut self, waking: bool) {
        if self.app_pending == 0 {
            return;
        }
        let queued = self.written.saturating_sub(self.snd_una.max(1));
        let room = match self.send_buffer {
            None => u64::MAX,
            Some(capacity) => capacity.saturating_sub(queued),
        };
        if waking && let Some(capacity) = self.send_buffer {
            let enough = match self.window_rules() {
                WindowRules::Linux => 2 * room >= queued,
                WindowRules::Bsd => room >= capacity.min(2048),
            };
            if !enough {
                return;
            }
        }
        let taken = self.app_pending.min(room);
        if taken == 0 {
            return;
        }
        self.written += taken;
        self.app_pending -= taken;
        // Linux tcp_sendmsg pushes what it queued before it sleeps for memory.
        if self.pending_push {
            self.push_point = self.written;
            self.cork_deadline = None;
        }
    }

    /// close(): a FIN after the written data, as soon as all of it has been sent.
    pub fn app_close(&mut self, now: Nanos, out: &mut Output) {
        if self.fin_sent || self.close_requested {
            return;
        }
        self.close_requested = true;
        self.pending_push = true;
        self.push_point = self.written;
        self.try_send(now, None, out);
    }

    /// Bytes the application has written (sequence space: data starts at 1), those a
    /// full send buffer has not taken yet included.
    pub fn written(&self) -> u64 {
        self.written + self.app_pending
    }

    fn send_fin_when_all_sent(&mut self, now: Nanos, out: &mut Output) {
        if self.close_requested
            && !self.fin_sent
            && self.snd_nxt == self.written
            && self.app_pending == 0
        {
            let mut fin = self.segment(now, self.snd_nxt, 0, SegmentKind::Data);
            fin.fin = true;
            self.fin_sent = true;
            self.snd_nxt += 1;
            self.clear_delayed_ack();
            out.segments.push(fin);
        }
    }

    pub fn all_sent_and_acked(&self) -> bool {
        self.snd_una == self.snd_nxt && self.snd_nxt >= self.written && self.app_pending == 0
    }

    // ---- Sending rules. ----

    /// Nagle (RFC 896; RFC 1122 4.2.3.4): a sub-MSS segment waits while data is
    /// unacknowledged; Minshall's variant (Linux tcp_minshall_check) only while a sub-MSS
    /// segment is.
    fn nagle_holds(&self) -> bool {
        // Urgent mode goes past Nagle: Linux v6.6 tcp_nagle_test (tcp_urg_mode: snd_up !=
        // snd_una), FreeBSD tcp_output (SEQ_GT(snd_up, snd_una): send).
        if self.snd_up > self.snd_una {
            return false;
        }
        let mode = if self.options.nodelay {
            NagleMode::Off
        } else {
            self.profile.nagle
        };
        match mode {
            NagleMode::Off => false,
            NagleMode::Classic => self.snd_nxt > self.snd_una,
            NagleMode::Minshall => self.snd_sml > self.snd_una,
        }
    }

    /// TCP_CORK / MSG_MORE: a sub-MSS tail of a message not yet complete waits, until
    /// the flush timer where the stack has one (Linux: 200 ms).
    fn cork_holds(&self, now: Nanos, segment_end: u64) -> bool {
        let message_incomplete = segment_end > self.push_point;
        let flushed = matches!(self.cork_deadline, Some(deadline) if now >= deadline);
        message_incomplete && !flushed
    }

    /// Linux tcp_should_autocork: a sub-MSS write waits while earlier data of this socket
    /// is still queued in the host; more writes then join it.
    fn autocork_holds(&self, now: Nanos, sent_data_now: bool) -> bool {
        self.profile.autocork
            && !self.options.nodelay
            && (sent_data_now || now < self.data_in_host_until)
    }

    /// Sends what the rules allow. `trigger` is the ACK being processed, if any, so a
    /// released hold can name it.
    pub fn try_send(&mut self, now: Nanos, trigger: Option<&WireSegment>, out: &mut Output) {
        let mut sent_data_now = false;
        self.bursts += 1;
        loop {
            let available = self.written.saturating_sub(self.snd_nxt);
            if available == 0 && self.app_pending > 0 && !self.fin_sent {
                // All the socket took has been sent; the rest waits for room.
                if !matches!(self.hold, Some((HoldReason::SendBuffer, _))) {
                    self.hold = Some((
                        HoldReason::SendBuffer,
                        self.hold.map_or(now, |(_, since)| since),
                    ));
                }
                break;
            }
            if available == 0 || self.fin_sent {
                self.hold = None;
                break;
            }
            let in_flight = self.snd_nxt - self.snd_una;
            let mut len = available.min(u64::from(self.send_mss)) as u32;
            let usable = self.peer_right_edge.saturating_sub(self.snd_nxt);
            let window_fit = sender_may_use_window(
                self.window_rules(),
                u64::from(len),
                usable,
                available,
                self.max_peer_window,
                in_flight == 0,
            );
            let reason = match window_fit {
                None => Some(self.window_hold_reason()),
                Some(fits) => {
                    len = fits as u32;
                    let partial = len < self.send_mss;
                    if in_flight + u64::from(len) > self.cwnd.max(u64::from(self.send_mss))
                        && in_flight > 0
                    {
                        Some(HoldReason::CongestionWindow)
                    } else if partial && self.cork_holds(now, self.snd_nxt + u64::from(len)) {
                        Some(HoldReason::Cork)
                    } else if partial && self.nagle_holds() {
                        Some(HoldReason::Nagle)
                    } else if partial && self.autocork_holds(now, sent_data_now) {
                        Some(HoldReason::Autocork)
                    } else {
                        None
                    }
                }
            };
            if let Some(reason) = reason {
                match self.hold {
                    Some((held, _)) if held == reason => {}
                    _ => self.hold = Some((reason, self.hold.map_or(now, |(_, since)| since))),
                }
                if reason == HoldReason::Cork
                    && self.cork_deadline.is_none()
                    && let Some(flush) = self.profile.cork_flush
                {
                    self.cork_deadline = Some(now + flush);
                    out.cork_flush_at = Some(now + flush);
                }
                if reason == HoldReason::Autocork {
                    out.autocorked = true;
                }
                break;
            }
            let partial = len < self.send_mss;
            let mut segment = self.segment(now, self.snd_nxt, len, SegmentKind::Data);
            if let Some((reason, since)) = self.hold.take() {
                segment.held = Some((reason, now - since));
                segment.released_by = trigger.map(|t| t.id);
                out.released.push(ReleasedHold {
                    reason,
                    since,
                    released: now,
                    bytes: len,
                    released_by_delayed_ack: trigger.and_then(|t| t.ack_delay),
                    segment_index: out.segments.len(),
                });
            }
            segment.psh = self.snd_nxt + u64::from(len) == self.written;
            self.snd_nxt += u64::from(len);
            if partial {
                self.snd_sml = self.snd_nxt;
            }
            if self.rtt_probe.is_none() {
                self.rtt_probe = Some((self.snd_nxt, now));
            }
            self.note_data_sent(now);
            sent_data_now = true;
            out.segments.push(segment);
            // RFC 6298 5.1: data sent with the timer stopped (or being stopped) starts it.
            if out.rto_at.is_none_or(|at| at == Nanos::MAX) {
                out.rto_at = Some(now + self.rto);
            }
        }
        self.send_fin_when_all_sent(now, out);
        self.check_persist_timer(now, out);
    }

    /// Which window held the sender: the peer's window below its largest means its
    /// application has not read what arrived; at its largest, data in flight filled it.
    fn window_hold_reason(&self) -> HoldReason {
        if self.peer_window < self.max_peer_window {
            HoldReason::PeerWindow
        } else {
            HoldReason::ReceiveWindow
        }
    }

    /// RFC 9293 3.8.6.1 (Linux tcp_check_probe_timer, BSD tcp_setpersist): with data
    /// waiting for the window and nothing in flight to bring an ACK, the persist timer
    /// runs; once the window lets data go it stops and its backoff resets.
    fn check_persist_timer(&mut self, now: Nanos, out: &mut Output) {
        let window_blocked = matches!(
            self.hold,
            Some((HoldReason::ReceiveWindow | HoldReason::PeerWindow, _))
        );
        let nothing_in_flight = self.snd_una == self.snd_nxt;
        if window_blocked && nothing_in_flight && !self.fin_sent {
            if !self.persist_armed {
                self.persist_armed = true;
                out.persist_at = Some(
                    now + persist_interval(self.window_rules(), self.rto, self.persist_backoff),
                );
            }
        } else if self.persist_armed || self.persist_backoff > 0 {
            self.persist_armed = false;
            if !window_blocked {
                self.persist_backoff = 0;
            }
            out.persist_at = Some(Nanos::MAX);
        }
    }

    /// The persist timer fired: probe the window (Linux tcp_send_probe0 and
    /// tcp_write_wakeup: what fits of the next segment, or a bare segment below snd_una when
    /// nothing fits; BSD: one byte forced past a closed window), then back off.
    pub fn persist_timer(&mut self, now: Nanos, out: &mut Output) {
        self.persist_armed = false;
        let available = self.written.saturating_sub(self.snd_nxt);
        if available == 0 || self.snd_una != self.snd_nxt || self.fin_sent {
            return;
        }
        let usable = self.peer_right_edge.saturating_sub(self.snd_nxt);
        if usable > 0 {
            let len = usable.min(available).min(u64::from(self.send_mss)) as u32;
            let mut segment = self.segment(now, self.snd_nxt, len, SegmentKind::WindowProbe);
            if let Some((reason, since)) = self.hold.take() {
                segment.held = Some((reason, now - since));
                out.released.push(ReleasedHold {
                    reason,
                    since,
                    released: now,
                    bytes: len,
                    released_by_delayed_ack: None,
                    segment_index: out.segments.len(),
                });
            }
            segment.psh = true;
            self.snd_nxt += u64::from(len);
            self.note_data_sent(now);
            out.segments.push(segment);
            out.rto_at = Some(now + self.rto);
        } else if self.window_rules() == WindowRules::Linux {
            let probe = self.segment(now, self.snd_una - 1, 0, SegmentKind::WindowProbe);
            out.segments.push(probe);
        } else {
            let mut probe = self.segment(now, self.snd_nxt, 1, SegmentKind::WindowProbe);
            probe.psh = true;
            self.probe_end = self.snd_nxt + 1;
            out.segments.push(probe);
        }
        self.persist_backoff += 1;
        if self.snd_una == self.snd_nxt {
            self.persist_armed = true;
            out.persist_at =
                Some(now + persist_interval(self.window_rules(), self.rto, self.persist_backoff));
        }
    }

    /// Linux ping-pong mode (tcp_event_data_sent): sending soon after receiving marks the
    /// connection interactive, so its ACKs wait to ride on replies. Data carries the ACK.
    fn note_data_sent(&mut self, now: Nanos) {
        if self.profile.pingpong
            && let Some(last) = self.last_receive
            && now - last < self.ato.max(self.profile_ato_min())
        {
            self.pingpong = true;
        }
        self.clear_delayed_ack();
    }

    fn clear_delayed_ack(&mut self) {
        self.pushed = 0;
        self.unacked_bytes = 0;
        self.unacked_segments = 0;
        self.first_unacked_at = None;
        self.delack_pending = false;
    }

    pub fn cork_flush(&mut self, now: Nanos, out: &mut Output) {
        if matches!(self.cork_deadline, Some(deadline) if now >= deadline) {
            self.try_send(now, None, out);
        }
    }

    /// RTO (RFC 6298): resend the first unacknowledged segment, back off, restart from
    /// one segment of congestion window.
    pub fn retransmission_timeout(&mut self, now: Nanos, out: &mut Output) {
        if self.snd_una >= self.snd_nxt {
            return;
        }
        self.ssthresh = ((self.snd_nxt - self.snd_una) / 2).max(2 * u64::from(self.send_mss));
        self.cwnd = u64::from(self.send_mss);
        self.rto = (self.rto * 2).min(MAX_RTO);
        self.rtt_probe = None;
        self.recover = Some(self.snd_nxt);
        // RFC 2018 8: after a timeout the SACK scoreboard is not trusted.
        self.sacked.clear();
        self.resend_next = self.snd_una;
        self.resend_lost(now, true, None, out);
        out.rto_at = Some(now + self.rto);
    }

    /// Resends, from `resend_next` up to `recover`, what the peer has not SACKed, as the
    /// congestion window allows: at least one segment, the first unacknowledged one, when
    /// nothing has been resent past it. After a timeout this is slow start from one
    /// segment going back over everything outstanding (RFC 5681 3.1; BSD tcp_timer_rexmt
    /// sets snd_nxt to snd_una, Linux tcp_enter_loss marks all of it lost); on a partial
    /// ACK it is the rest of what was sent before the resend that ACK covers (RFC 8985 6.2:
    /// a segment sent before one since delivered is lost). `trigger` is the ACK that
    /// called for it.
    fn resend_lost(
        &mut self,
        now: Nanos,
        by_timer: bool,
        trigger: Option<&WireSegment>,
        out: &mut Output,
    ) {
        let end = self
            .recover
            .unwrap_or(self.snd_nxt)
            .min(self.snd_nxt)
            .min(self.written);
        let mss = u64::from(self.send_mss);
        let mut next = self.resend_next.max(self.snd_una);
        let must_send_head = next == self.snd_una;
        while next < end {
            if let Some(&(_, block_end)) = self.sacked.iter().find(|&&(s, e)| s <= next && next < e)
            {
                next = block_end;
                continue;
            }
            let sacked_below: u64 = self
                .sacked
                .iter()
                .map(|&(s, e)| e.min(next).saturating_sub(s.max(self.snd_una)))
                .sum();
            let pipe = (next - self.snd_una).saturating_sub(sacked_below);
            if !(must_send_head && next == self.snd_una) && pipe + mss > self.cwnd.max(mss) {
                break;
            }
            let next_block = self
                .sacked
                .iter()
                .map(|&(s, _)| s)
                .filter(|&s| s > next)
                .min()
                .unwrap_or(end);
            let len = (end.min(next_block) - next).min(mss) as u32;
            let mut segment =
                self.segment(now, next, len, SegmentKind::Retransmission { by_timer });
            segment.retransmission = true;
            segment.released_by = trigger.map(|t| t.id);
            segment.psh = true;
            self.clear_delayed_ack();
            out.segments.push(segment);
            next += u64::from(len);
        }
        self.resend_next = next;
    }

    /// Resends the first unacknowledged segment; `trigger` is the ACK that called for it.
    fn retransmit_head(
        &mut self,
        now: Nanos,
        by_timer: bool,
        trigger: Option<&WireSegment>,
        out: &mut Output,
    ) {
        let data_end = self.snd_nxt.min(self.written);
        if self.snd_una >= data_end {
            return;
        }
        let len = (data_end - self.snd_una).min(u64::from(self.send_mss)) as u32;
        let mut segment = self.segment(
            now,
            self.snd_una,
            len,
            SegmentKind::Retransmission { by_timer },
        );
        segment.retransmission = true;
        segment.released_by = trigger.map(|t| t.id);
        segment.psh = true;
        self.clear_delayed_ack();
        out.segments.push(segment);
    }

    /// The ACK field of an arriving segment (RFC 5681: slow start, congestion avoidance,
    /// fast retransmit on the third duplicate ACK; RFC 6298 round-trip estimates).
    fn process_ack(&mut self, now: Nanos, segment: &WireSegment, out: &mut Output) {
        // A one-byte probe past the window that the peer accepted after all.
        if segment.ack > self.snd_nxt && segment.ack <= self.probe_end {
            self.snd_nxt = segment.ack;
        }
        // RFC 5681 2: a duplicate ACK leaves the window as it was; a window update is none.
        let window_unchanged = segment.ack + segment.window == self.peer_right_edge;
        self.note_peer_window(segment);
        self.note_sack(segment);
        if segment.ack > self.snd_una && segment.ack <= self.snd_nxt {
            let acked = segment.ack - self.snd_una;
            self.snd_una = segment.ack;
            self.dupacks = 0;
            if self.cwnd < self.ssthresh {
                self.cwnd += match self.profile.slow_start {
                    SlowStart::ByteCounting => acked,
                    // RFC 2581 3.1: "at most SMSS bytes for each ACK", taken as exactly.
                    SlowStart::PerAck => u64::from(self.send_mss),
                };
            } else {
                self.cwnd +=
                    (u64::from(self.send_mss) * u64::from(self.send_mss) / self.cwnd.max(1)).max(1);
            }
            if let Some((end, sent)) = self.rtt_probe
                && segment.ack >= end
            {
                self.rtt_sample(now - sent);
                self.rtt_probe = None;
            }
            out.rto_at = Some(if self.snd_una < self.snd_nxt {
                now + self.rto
            } else {
                Nanos::MAX
            });
            self.partial_ack(now, segment, out);
            self.take_pending(true);
        } else if segment.ack == self.snd_una
            && window_unchanged
            && segment.len == 0
            && self.snd_nxt > self.snd_una
            && !segment.fin
        {
            self.dupacks += 1;
            if self.dupacks == 3 {
                self.ssthresh =
                    ((self.snd_nxt - self.snd_una) / 2).max(2 * u64::from(self.send_mss));
                self.cwnd = self.ssthresh;
                self.recover = Some(self.snd_nxt);
                self.retransmit_head(now, false, Some(segment), out);
                self.resend_next = self.snd_una + u64::from(self.send_mss);
            }
        }
        self.try_send(now, Some(segment), out);
    }

    /// NewReno (RFC 6582 3.2): during loss recovery, an ACK that covers only part of what
    /// was outstanding means the next segment was lost too: resend it, and with it what
    /// else the window allows of what the peer has not SACKed.
    fn partial_ack(&mut self, now: Nanos, ack: &WireSegment, out: &mut Output) {
        match self.recover {
            Some(recover) if self.snd_una < recover => self.resend_lost(now, false, Some(ack), out),
            _ => self.recover = None,
        }
    }

    /// The peer's SACK blocks join the scoreboard; what is acknowledged leaves it.
    fn note_sack(&mut self, segment: &WireSegment) {
        let acked = segment.ack.max(self.snd_una);
        self.sacked
            .extend(segment.sack.iter().filter(|(s, e)| s < e));
        self.sacked.retain(|&(_, e)| e > acked);
        for block in &mut self.sacked {
            block.0 = block.0.max(acked);
        }
        // Disjoint, so that what lies below a point is counted once.
        coalesce(&mut self.sacked);
    }

    /// The receiver's SACK blocks (RFC 2018): its out-of-order data, lowest first.
    fn sack_blocks(&self) -> [(u64, u64); SACK_BLOCKS] {
        let mut blocks = [(0, 0); SACK_BLOCKS];
        for (slot, &block) in blocks.iter_mut().zip(&self.out_of_order) {
            *slot = block;
        }
        blocks
    }

    /// RFC 9293 3.10.7.4: the window a segment offers starts at its ACK; the link keeps
    /// order, so every segment's window is the newest.
    fn note_peer_window(&mut self, segment: &WireSegment) {
        self.peer_window = segment.window;
        self.peer_right_edge = segment.ack + segment.window;
        self.max_peer_window = self.max_peer_window.max(segment.window);
    }

    fn rtt_sample(&mut self, sample: Nanos) {
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + (srtt - sample).abs()) / 4;
                self.srtt = Some((7 * srtt + sample) / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(sample);
        self.rto = match self.profile.rto_rule {
            RtoRule::Rfc6298 => srtt + (4 * self.rttvar).max(NANOS_PER_MILLI),
            RtoRule::LinuxVarianceFloor => srtt + self.rttvar.max(self.profile.min_rto),
            RtoRule::FreeBsdSlop { slop } => {
                (srtt + 4 * self.rttvar).max(self.profile.min_rto) + slop
            }
        }
        .clamp(self.profile.min_rto, MAX_RTO);
    }

    // ---- Receiving rules. ----

    /// A segment arrives from the peer.
    pub fn receive(&mut self, now: Nanos, segment: &WireSegment, out: &mut Output) {
        self.update_ts_recent(segment);
        let carries = u64::from(segment.len) + u64::from(segment.fin);
        if carries > 0 {
            self.receive_data(now, segment, out);
        } else if segment.kind == SegmentKind::WindowProbe && segment.seq < self.rcv_nxt {
            // RFC 9293 3.10.7.4: an unacceptable segment (a zero-window probe below
            // rcv_nxt) is answered with an ACK at once.
            self.send_ack_now(now, None, SegmentKind::ProbeAnswer, out);
        }
        if segment.ack_flag {
            self.process_ack(now, segment, out);
        }
    }

    fn receive_data(&mut self, now: Nanos, segment: &WireSegment, out: &mut Output) {
        let mut end = segment.seq + u64::from(segment.len) + u64::from(segment.fin);
        let right_edge = self.receive_buffer.right_edge().max(self.rcv_nxt);
        if segment.len > 0 && segment.seq >= right_edge {
            // RFC 9293 3.10.7.4: data past a closed window is not accepted; the ACK
            // carries the window as it is (the answer to a window probe).
            self.send_ack_now(now, None, SegmentKind::ProbeAnswer, out);
            return;
        }
        if end > right_edge && segment.len > 0 {
            end = right_edge;
        }
        if segment.seq > self.rcv_nxt {
            // RFC 5681 4.2: out-of-order data is acknowledged at once (a duplicate ACK).
            self.hold_out_of_order(segment.seq, end);
            self.send_ack_now(now, None, SegmentKind::PromptAck, out);
            return;
        }
        if end <= self.rcv_nxt {
            // A retransmission of what arrived already: acknowledge at once.
            self.send_ack_now(now, None, SegmentKind::PromptAck, out);
            return;
        }
        let before = self.rcv_nxt;
        self.rcv_nxt = end;
        let filled_hole = !self.out_of_order.is_empty();
        self.merge_out_of_order();
        let data_end = if segment.fin {
            self.rcv_nxt - 1
        } else {
            self.rcv_nxt
        };
        let queued = data_end.saturating_sub(before);
        out.delivered += queued;
        self.receive_buffer.unread += queued;
        self.last_in_order_arrival = now;
        self.note_pushed(segment);
        if segment.fin {
            self.peer_fin = true;
            out.peer_closed = true;
        }
        self.unacked_bytes += self.rcv_nxt - before;
        if !self.profile.ack_full_segments_only || segment.len >= self.rcv_mss {
            self.unacked_segments += 1;
        }
        if self.profile.ack_one_byte_at_once && segment.len == 1 {
            self.one_byte_arrived = true;
        }
        if self.first_unacked_at.is_none() {
            self.first_unacked_at = Some(now);
        }
        self.update_ato(now);
        if filled_hole || segment.fin || self.must_ack_now() {
            self.send_ack_now(now, None, SegmentKind::PromptAck, out);
        } else if !self.delack_pending {
            self.delack_pending = true;
            out.delack_at = Some(self.delayed_ack_deadline(now));
        }
    }

    /// Keeps the out-of-order data as sorted, disjoint blocks (what SACK reports).
    fn hold_out_of_order(&mut self, start: u64, end: u64) {
        self.out_of_order.push((start, end));
        coalesce(&mut self.out_of_order);
    }

    /// The out-of-order blocks the in-order data now reaches join it; they are sorted
    /// and disjoint ([`Endpoint::hold_out_of_order`]), so only the first ones can.
    fn merge_out_of_order(&mut self) {
        while let Some(&(start, end)) = self.out_of_order.first()
            && start <= self.rcv_nxt
        {
            self.rcv_nxt = self.rcv_nxt.max(end);
            self.out_of_order.remove(0);
        }
    }

    /// Linux tcp_event_data_recv: the ATO follows the gaps between arriving segments,
    /// and a gap longer than the RTO (or the first data) re-enters quick-ack mode.
    fn update_ato(&mut self, now: Nanos) {
        let DelayedAckTimer::LinuxAto { min, .. } = self.profile.delayed_ack else {
            self.last_receive = Some(now);
            return;
        };
        match self.last_receive {
            None => {
                self.quick = self.profile.quickack_segments;
                self.ato = min;
            }
            Some(last) => {
                let gap = now - last;
                if gap <= min / 2 {
                    self.ato = self.ato / 2 + min / 2;
                } else if gap < self.ato {
                    self.ato = (self.ato / 2 + gap).min(self.rto);
                } else if gap > self.rto {
                    self.quick = self.quick.max(self.profile.quickack_segments);
                }
            }
        }
        self.last_receive = Some(now);
    }

    fn profile_ato_min(&self) -> Nanos {
        match self.profile.delayed_ack {
            DelayedAckTimer::LinuxAto { min, .. } => min,
            DelayedAckTimer::PerConnection { delay } => delay,
            DelayedAckTimer::GlobalTick { period, .. } => period,
        }
    }

    /// Whether the arriving data must be acknowledged at once.
    fn must_ack_now(&mut self) -> bool {
        // TCP_QUICKACK, set again after every read.
        if self.options.quickack {
            return true;
        }
        // INET: a one-byte segment may be a window probe, so it is answered at once.
        if std::mem::take(&mut self.one_byte_arrived) {
            return true;
        }
        match self.profile.delayed_ack {
            DelayedAckTimer::LinuxAto { .. } => {
                // __tcp_ack_snd_check: more than one full frame unacknowledged...
                if self.unacked_bytes > u64::from(self.rcv_mss) {
                    return true;
                }
                // ...or quick-ack mode, which ping-pong mode suspends.
                if self.quick > 0 && !self.pingpong {
                    self.quick -= 1;
                    return true;
                }
                false
            }
            // RFC 1122 4.2.3.2: at least every second segment.
            _ => self.unacked_segments >= self.profile.ack_every_segments,
        }
    }

    /// When the delayed ACK for data arriving now goes out.
    fn delayed_ack_deadline(&self, now: Nanos) -> Nanos {
        match self.profile.delayed_ack {
            DelayedAckTimer::PerConnection { delay } => now + delay,
            DelayedAckTimer::GlobalTick { period, ticks } => {
                // The next tick of a global clock (its phase is this endpoint's), or the
                // one `ticks` after it.
                let since_phase = now - self.jiffy_phase;
                self.jiffy_phase + (since_phase.div_euclid(period) + Nanos::from(ticks)) * period
            }
            DelayedAckTimer::LinuxAto { min, max, jiffy } => {
                // tcp_send_delayed_ack: an ATO above the minimum is bounded by the RTT
                // and by TCP_DELACK_MAX; the timer wheel fires one jiffy after expiry.
                let mut ato = self.ato.max(min);
                if ato > min {
                    let bound = if self.pingpong {
                        max
                    } else {
                        500 * NANOS_PER_MILLI
                    };
                    let rtt_bound = self.srtt.map_or(bound, |s| s.max(min));
                    ato = ato.min(bound).min(rtt_bound);
                }
                let ato_jiffies = (ato + jiffy - 1) / jiffy;
                let now_jiffy = (now - self.jiffy_phase).div_euclid(jiffy);
                self.jiffy_phase + (now_jiffy + ato_jiffies + 1) * jiffy
            }
        }
    }

    /// The delayed-ACK timer (or tick) fired.
    pub fn delayed_ack_timer(&mut self, now: Nanos, out: &mut Output) {
        if !self.delack_pending {
            return;
        }
        if let DelayedAckTimer::LinuxAto { min, .. } = self.profile.delayed_ack {
            // tcp_delack_timer_handler: a missed delayed ACK leaves ping-pong mode and
            // deflates the ATO; outside ping-pong mode it inflates it.
            if self.pingpong {
                self.pingpong = false;
                self.ato = min;
            } else {
                self.ato = (self.ato * 2).min(self.rto);
            }
        }
        let delay = self.first_unacked_at.map(|t| now - t);
        self.send_ack_now(now, delay, SegmentKind::DelayedAck, out);
    }

    fn send_ack_now(
        &mut self,
        now: Nanos,
        delay: Option<Nanos>,
        kind: SegmentKind,
        out: &mut Output,
    ) {
        let mut ack = self.segment(now, self.snd_nxt, 0, kind);
        ack.ack_delay = delay;
        self.clear_delayed_ack();
        out.segments.push(ack);
    }

    /// Linux tcp_measure_rcv_mss: a segment smaller than a full one marks the pending ACK
    /// as pushed (ICSK_ACK_PUSHED), a second one as pushed twice (ICSK_ACK_PUSHED2).
    fn note_pushed(&mut self, segment: &WireSegment) {
        if segment.len > 0 && segment.len < self.rcv_mss {
            self.pushed = (self.pushed + 1).min(2);
        }
    }

    // ---- The application reads. ----

    /// Bytes waiting for the application.
    pub fn unread(&self) -> u64 {
        self.receive_buffer.unread
    }

    /// A read() of at most `max` bytes; returns how many it took. What it frees may be
    /// worth an ACK (`cleanup_after_read`).
    pub fn app_read(&mut self, now: Nanos, max: u64, out: &mut Output) -> u64 {
        let copied = self.receive_buffer.unread.min(max);
        if copied == 0 {
            return 0;
        }
        self.receive_buffer.unread -= copied;
        self.cleanup_after_read(now, out);
        copied
    }

    /// Linux `__tcp_cleanup_rbuf`, BSD tcp_usr_rcvd: after a read, Linux sends a pending ACK
    /// when more than one MSS arrived since the last window was offered, or when the read
    /// emptied the queue of pushed small segments outside ping-pong mode (or of two); and
    /// any stack sends a window update when the read opened the window enough.
    fn cleanup_after_read(&mut self, now: Nanos, out: &mut Output) {
        let arrived_since_window = self.rcv_nxt - self.receive_buffer.advertised_at;
        let pending_due = self.profile.ack_on_read
            && self.delack_pending
            && (arrived_since_window > u64::from(self.rcv_mss)
                || (self.receive_buffer.unread == 0
                    && (self.pushed >= 2 || (self.pushed == 1 && !self.pingpong))));
        let window_opens = read_opens_window(
            self.window_rules(),
            &self.receive_buffer,
            self.rcv_nxt,
            self.rcv_mss,
        );
        if pending_due || window_opens {
            self.send_ack_now(now, None, SegmentKind::ReadAck, out);
        }
    }
}
