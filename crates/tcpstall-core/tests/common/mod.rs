//! A capture point built by hand: both directions of one connection, segment by segment.

#![allow(dead_code)]

use std::net::SocketAddr;

use tcpstall_core::detect::DetectConfig;
use tcpstall_core::diagnosis::{ConnectionDiagnosis, diagnose};
use tcpstall_core::flow::FlowTable;
use tcpstall_core::segment::{NANOS_PER_MILLI, Nanos, Segment, TcpFlags, TcpOptions};
use tcpstall_core::seq::SeqNumber;
use tcpstall_core::side::{PerSide, Side};

pub const MS: Nanos = NANOS_PER_MILLI;
pub const US: Nanos = 1_000;

/// Builds both directions of one connection as a capture point would see them.
/// `client_path` and `server_path` are the one-way delays from the capture point to each
/// endpoint; segments are logged at the time they pass the capture point.
pub struct Wire {
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub client_next: u32,
    pub server_next: u32,
    pub timestamps: bool,
    pub mss: u16,
    pub table: FlowTable,
    pub packet: u64,
    clock_ms: u32,
    /// The raw window field every segment carries (scale 7 after the handshake).
    pub window: u16,
    /// The newest TSval each side (the client first) has sent: the other side echoes it.
    last_tsval: PerSide<u32>,
}

impl Wire {
    pub fn new(client_isn: u32, server_isn: u32) -> Wire {
        Wire {
            client: "10.0.0.1:40000".parse().unwrap(),
            server: "10.0.0.2:6379".parse().unwrap(),
            client_next: client_isn,
            server_next: server_isn,
            timestamps: true,
            mss: 1460,
            table: FlowTable::new(DetectConfig::default()),
            packet: 0,
            clock_ms: 1000,
            last_tsval: PerSide::default(),
            window: 512,
        }
    }

    pub fn emit(
        &mut self,
        from_client: bool,
        time: Nanos,
        len: u32,
        flags: u8,
        options: TcpOptions,
    ) {
        let (src, dst) = if from_client {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        };
        let (seq, ack) = if from_client {
            (self.client_next, self.server_next)
        } else {
            (self.server_next, self.client_next)
        };
        let mut options = options;
        if self.timestamps {
            // TSval follows the time (1 ms clock); TSecr echoes the newest TSval of the
            // other side seen at the capture point (a capture on the sender's host).
            self.clock_ms = 1000 + (time / MS) as u32;
            let own = Side::second_if(!from_client);
            options.timestamps = Some((self.clock_ms, self.last_tsval[own.other()]));
            self.last_tsval[own] = self.clock_ms;
        }
        let segment = Segment {
            time,
            src,
            dst,
            seq: SeqNumber(seq),
            ack: SeqNumber(ack),
            flags: TcpFlags(flags),
            window: self.window,
            payload_len: len,
            ip_id: 0,
            ttl: 0,
            options,
            tunnel: 0,
        };
        self.packet += 1;
        self.table.observe(&segment, self.packet);
        let advance =
            len + u32::from(flags & TcpFlags::SYN != 0) + u32::from(flags & TcpFlags::FIN != 0);
        if from_client {
            self.client_next = self.client_next.wrapping_add(advance);
        } else {
            self.server_next = self.server_next.wrapping_add(advance);
        }
    }

    pub fn handshake(&mut self, t: Nanos, client_rtt: Nanos, server_rtt: Nanos) -> Nanos {
        let syn = TcpOptions {
            mss: Some(self.mss),
            window_scale: Some(7),
            sack_permitted: true,
            ..TcpOptions::default()
        };
        self.emit(true, t, 0, TcpFlags::SYN, syn);
        self.emit(false, t + server_rtt, 0, TcpFlags::SYN | TcpFlags::ACK, syn);
        self.emit(
            true,
            t + server_rtt + client_rtt,
            0,
            TcpFlags::ACK,
            TcpOptions::default(),
        );
        t + server_rtt + client_rtt
    }

    pub fn data(&mut self, from_client: bool, t: Nanos, len: u32) {
        self.emit(
            from_client,
            t,
            len,
            TcpFlags::ACK | TcpFlags::PSH,
            TcpOptions::default(),
        );
    }

    pub fn ack(&mut self, from_client: bool, t: Nanos) {
        self.emit(from_client, t, 0, TcpFlags::ACK, TcpOptions::default());
    }

    pub fn only(self) -> ConnectionDiagnosis {
        let mut connections = self.table.into_connections();
        assert_eq!(connections.len(), 1);
        diagnose(&mut connections.remove(0))
    }
}
