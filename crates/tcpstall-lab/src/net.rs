//! Where the lab's client and server run.
//!
//! - **loopback**: 127.0.0.1 in the current namespace; no privileges needed.
//! - **private loopback**: 127.0.0.1 inside a namespace of the lab's own, so a capture
//!   sees nothing but the lab's traffic (root).
//! - **delay line**: two namespaces joined by a veth pair, the client at 198.19.0.1 and
//!   the server at 198.19.0.2, with the [`delayline`](crate::delayline) between them (root);
//!   its delay may vary per packet ([`Net::set_variation`]).
//!   The addresses come from 198.18.0.0/15, the range set aside for benchmarking
//!   (RFC 2544, RFC 6890): they exist only inside the lab's namespaces.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use crate::capture::Point;
use crate::delayline::{
    DelayLine, LINE_PORT, LineEnd, MAX_VARIATION, TUN_MTU, Variation, open_tun,
};
use crate::netns::{Namespace, Setup, ip, run_in};
use crate::{LabError, Result};

pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
const CLIENT_VETH_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const SERVER_VETH_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const VETH: &str = "veth-lab";
const TUN: &str = "tun-lab";
/// Longest one-way delay the line accepts.
pub const MAX_ONE_WAY: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    Loopback,
    PrivateLoopback,
    DelayLine,
}

/// The network a run uses.
pub struct Net {
    pub kind: PathKind,
    pub client_ns: Option<Arc<Namespace>>,
    pub server_ns: Option<Arc<Namespace>>,
    pub client_ip: IpAddr,
    pub server_ip: IpAddr,
    pub line: Option<DelayLine>,
}

impl Net {
    pub fn loopback() -> Net {
        Net {
            kind: PathKind::Loopback,
            client_ns: None,
            server_ns: None,
            client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            line: None,
        }
    }

    /// One namespace with only its loopback up.
    pub fn private_loopback() -> Result<Net> {
        let mut setup = Setup::new();
        let ns = setup.create("lo")?;
        ip(&["-n", &ns.label, "link", "set", "lo", "up"])?;
        drop(setup);
        Ok(Net {
            kind: PathKind::PrivateLoopback,
            client_ns: Some(ns.clone()),
            server_ns: Some(ns),
            client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            server_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            line: None,
        })
    }

    /// Two namespaces, a veth pair, a TUN device in each, and the delay line.
    pub fn delay_line(client_to_server: Duration, server_to_client: Duration) -> Result<Net> {
        if client_to_server > MAX_ONE_WAY || server_to_client > MAX_ONE_WAY {
            return Err(LabError::Unsupported(
                "the delay line takes one-way delays of at most 1000 ms".into(),
            ));
        }
        let mut setup = Setup::new();
        let client_ns = setup.create("c")?;
        let server_ns = setup.create("s")?;
        ip(&[
            "-n",
            &client_ns.label,
            "link",
            "add",
            VETH,
            "type",
            "veth",
            "peer",
            "name",
            VETH,
            "netns",
            &server_ns.label,
        ])?;
        let client = configure_end(&client_ns, CLIENT_VETH_ADDR, CLIENT_ADDR, SERVER_ADDR)?;
        let server = configure_end(&server_ns, SERVER_VETH_ADDR, SERVER_ADDR, CLIENT_ADDR)?;
        // Configured: the names go, the namespaces live as long as the lab holds them.
        drop(setup);
        let line = DelayLine::start(
            LineEnd {
                peer: SocketAddr::from((SERVER_VETH_ADDR, LINE_PORT)),
                ..client
            },
            LineEnd {
                peer: SocketAddr::from((CLIENT_VETH_ADDR, LINE_PORT)),
                ..server
            },
        )?;
        line.set_delays(client_to_server, server_to_client);
        Ok(Net {
            kind: PathKind::DelayLine,
            client_ns: Some(client_ns),
            server_ns: Some(server_ns),
            client_ip: IpAddr::V4(CLIENT_ADDR),
            server_ip: IpAddr::V4(SERVER_ADDR),
            line: Some(line),
        })
    }

    /// Changes the delay line's one-way delays; an error on other paths.
    pub fn set_delays(&self, client_to_server: Duration, server_to_client: Duration) -> Result<()> {
        if client_to_server > MAX_ONE_WAY || server_to_client > MAX_ONE_WAY {
            return Err(LabError::Unsupported(
                "the delay line takes one-way delays of at most 1000 ms".into(),
            ));
        }
        match &self.line {
            Some(line) => {
                line.set_delays(client_to_server, server_to_client);
                Ok(())
            }
            None => Err(LabError::Unsupported(
                "a path delay needs the delay line (root)".into(),
            )),
        }
    }

    /// Sets how much the delay line's delay varies per packet; an error on other paths
    /// or out of range.
    pub fn set_variation(&self, variation: Variation) -> Result<()> {
        if !(variation.fraction.is_finite() && (0.0..=MAX_VARIATION).contains(&variation.fraction))
        {
            return Err(LabError::Unsupported(format!(
                "the delay line varies a delay by 0 to {:.0}%",
                MAX_VARIATION * 100.0
            )));
        }
        match &self.line {
            Some(line) => {
                line.set_variation(variation);
                Ok(())
            }
            None => Err(LabError::Unsupported(
                "a varying delay needs the delay line (root)".into(),
            )),
        }
    }

    /// The namespace a capture runs in: the client's.
    pub fn capture_ns(&self) -> Option<&Arc<Namespace>> {
        self.client_ns.as_ref()
    }

    /// The namespace a capture at `point` runs in: the client's for the client and the
    /// middle (its end of the veth), the server's for the server. The middle exists only
    /// on the delay line.
    pub fn capture_ns_at(&self, point: Point) -> Result<Option<&Arc<Namespace>>> {
        match point {
            Point::Client => Ok(self.client_ns.as_ref()),
            Point::Server => Ok(self.server_ns.as_ref()),
            Point::Middle if self.line.is_some() => Ok(self.client_ns.as_ref()),
            Point::Middle => Err(LabError::Unsupported(
                "a capture in the middle of the path needs the delay line (root)".into(),
            )),
        }
    }

    /// The MTU the lab's packets see, for the simulator's link.
    pub fn mtu(&self) -> u32 {
        match self.kind {
            PathKind::DelayLine => TUN_MTU,
            // Linux's loopback MTU is 65536; the simulator's limit is 65535.
            _ => 65_535,
        }
    }

    pub fn describe(&self) -> String {
        match (&self.kind, &self.line) {
            (PathKind::Loopback, _) => "loopback (127.0.0.1)".into(),
            (PathKind::PrivateLoopback, _) => "loopback in a private namespace".into(),
            (PathKind::DelayLine, Some(line)) => {
                let mut text = format!(
                    "two namespaces, veth pair, user-space delay line, requested RTT {:.1} ms",
                    line.round_trip().as_secs_f64() * 1e3
                );
                let v = line.variation();
                if v.fraction > 0.0 {
                    text.push_str(&format!(
                        " + up to {:.0}% from its queues (seed {})",
                        v.fraction * 100.0,
                        v.seed
                    ));
                }
                text
            }
            (PathKind::DelayLine, None) => "two namespaces".into(),
        }
    }
}

/// Brings up one namespace's veth end, TUN device and the line's UDP socket.
fn configure_end(
    ns: &Arc<Namespace>,
    veth_addr: Ipv4Addr,
    own: Ipv4Addr,
    peer: Ipv4Addr,
) -> Result<LineEnd> {
    let label = ns.label.as_str();
    ip(&["-n", label, "link", "set", "lo", "up"])?;
    ip(&[
        "-n",
        label,
        "addr",
        "add",
        &format!("{veth_addr}/30"),
        "dev",
        VETH,
    ])?;
    ip(&["-n", label, "link", "set", VETH, "up"])?;
    let tun = run_in(Some(ns), || open_tun(TUN))?;
    ip(&[
        "-n",
        label,
        "addr",
        "add",
        &own.to_string(),
        "peer",
        &format!("{peer}/32"),
        "dev",
        TUN,
    ])?;
    ip(&[
        "-n",
        label,
        "link",
        "set",
        TUN,
        "mtu",
        &TUN_MTU.to_string(),
        "up",
    ])?;
    let udp = run_in(Some(ns), || {
        UdpSocket::bind((veth_addr, LINE_PORT)).map_err(|e| LabError::io("delay line socket", e))
    })?;
    Ok(LineEnd {
        tun,
        udp,
        peer: SocketAddr::from((peer, LINE_PORT)),
    })
}
