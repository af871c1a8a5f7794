//! A path delay without netem: a user-space delay line.
//!
//! Each namespace has a TUN device that holds the lab's addresses. Every IP packet the
//! kernel routes into a TUN device is read by the line, kept for the direction's one-way
//! delay, and sent over the veth pair to the other namespace inside a UDP datagram,
//! where it is written into that namespace's TUN device and delivered. The delay is
//! constant per direction, so packets keep their order, as on a wire. The TUN devices
//! have an MTU of 1500 and no offloads: every TCP segment crosses as its own packet.
//!
//! Its accuracy is measured, not assumed: every packet's lateness (sent after its due
//! time) is recorded, and [`crate::suites::delay_accuracy`] compares requested round
//! trips with round trips measured through TCP.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::{LabError, Result};

/// How often every forwarding thread looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(20);
/// Largest packet the line carries (the TUN MTU is 1500).
const MAX_PACKET: usize = 65_536;
/// Packets queued in one direction before the line drops (a bounded queue).
const MAX_QUEUED: u64 = 100_000;
/// Lateness samples kept for the accuracy report.
const MAX_SAMPLES: usize = 1_000_000;
pub const TUN_MTU: u32 = 1500;

/// `struct ifreq` as TUNSETIFF reads it (linux/if.h): a name and the flags.
#[repr(C)]
struct InterfaceRequest {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

nix::ioctl_write_ptr_bad!(tun_set_iff, libc::TUNSETIFF, InterfaceRequest);

/// Creates a TUN device (no packet-info header) in the calling thread's namespace.
pub fn open_tun(name: &str) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| LabError::io("/dev/net/tun", e))?;
    let mut request = InterfaceRequest {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    let bytes = name.as_bytes();
    let n = bytes.len().min(15);
    request.name[..n].copy_from_slice(&bytes[..n]);
    // SAFETY: the fd is an open /dev/net/tun and `request` is a valid ifreq for the call.
    unsafe { tun_set_iff(std::os::fd::AsRawFd::as_raw_fd(&file), &request) }
        .map_err(|e| LabError::Failed(format!("TUNSETIFF {name}: {e}")))?;
    Ok(file)
}

/// What the line measured about itself.
#[derive(Default)]
pub struct LineStats {
    pub packets: AtomicU64,
    pub dropped: AtomicU64,
    lateness_nanos: Mutex<Vec<u32>>,
}

/// Lateness percentiles of packets sent after their due time, in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lateness {
    pub packets: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl LineStats {
    fn record(&self, late: Duration) {
        self.packets.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut samples) = self.lateness_nanos.lock()
            && samples.len() < MAX_SAMPLES
        {
            samples.push(late.as_nanos().min(u128::from(u32::MAX)) as u32);
        }
    }

    /// Percentiles of the lateness recorded since the last call (which clears them).
    pub fn take_lateness(&self) -> Lateness {
        let mut samples = match self.lateness_nanos.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => Vec::new(),
        };
        samples.sort_unstable();
        let at = |p: f64| -> f64 {
            if samples.is_empty() {
                return 0.0;
            }
            let i = ((samples.len() - 1) as f64 * p).round() as usize;
            f64::from(samples[i]) / 1e3
        };
        Lateness {
            packets: samples.len() as u64,
            p50_us: at(0.5),
            p99_us: at(0.99),
            max_us: at(1.0),
        }
    }
}

/// A running delay line: two directions, each with its own one-way delay.
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    /// One-way delay, client to server and server to client, in nanoseconds.
    delays: [Arc<AtomicU64>; 2],
    pub stats: Arc<LineStats>,
    threads: Vec<JoinHandle<()>>,
}

/// One namespace's end of the line: its TUN device and its UDP socket on the veth.
pub struct LineEnd {
    pub tun: File,
    pub udp: UdpSocket,
    /// The other end's UDP address on the veth.
    pub peer: SocketAddr,
}

impl DelayLine {
    /// Starts forwarding between the two ends; `client` is index 0 of the delays.
    pub fn start(client: LineEnd, server: LineEnd) -> Result<DelayLine> {
        let stop = Arc::new(AtomicBool::new(false));
        let delays = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        let stats = Arc::new(LineStats::default());
        let mut threads = Vec::new();
        let clone_err = |e| LabError::io("delay line", e);
        for (from, to, delay) in [
            (&client, &server, &delays[0]),
            (&server, &client, &delays[1]),
        ] {
            let (tx, rx) = channel();
            let queued = Arc::new(AtomicU64::new(0));
            let tun = from.tun.try_clone().map_err(clone_err)?;
            let (stop1, q1, stats1) = (stop.clone(), queued.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                read_tun(tun, tx, &stop1, &q1, &stats1)
            }));
            let udp = from.udp.try_clone().map_err(clone_err)?;
            let (stop2, delay2, stats2, peer) =
                (stop.clone(), delay.clone(), stats.clone(), from.peer);
            threads.push(std::thread::spawn(move || {
                send_when_due(rx, udp, peer, &delay2, &stop2, &queued, &stats2)
            }));
            let udp = to.udp.try_clone().map_err(clone_err)?;
            let tun = to.tun.try_clone().map_err(clone_err)?;
            let stop3 = stop.clone();
            threads.push(std::thread::spawn(move || deliver(udp, tun, &stop3)));
        }
        Ok(DelayLine {
            stop,
            delays,
            stats,
            threads,
        })
    }

    /// Sets the one-way delays (client to server, server to client).
    pub fn set_delays(&self, client_to_server: Duration, server_to_client: Duration) {
        self.delays[0].store(client_to_server.as_nanos() as u64, Ordering::Relaxed);
        self.delays[1].store(server_to_client.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn round_trip(&self) -> Duration {
        Duration::from_nanos(
            self.delays[0].load(Ordering::Relaxed) + self.delays[1].load(Ordering::Relaxed),
        )
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Reads every packet the kernel routes into the TUN device, stamped on arrival.
fn read_tun(
    mut tun: File,
    queue: Sender<(Instant, Vec<u8>)>,
    stop: &AtomicBool,
    queued: &AtomicU64,
    stats: &LineStats,
) {
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [PollFd::new(tun.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(STOP_CHECK.as_millis() as u16));
        if !matches!(ready, Ok(n) if n > 0) {
            continue;
        }
        // Bounded: a non-blocking read drains what is there, at most this many packets.
        for _ in 0..1024 {
            match tun.read(&mut buf) {
                Ok(n) if n > 0 => {
                    let arrived = Instant::now();
                    if queued.load(Ordering::Relaxed) >= MAX_QUEUED {
                        stats.dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    queued.fetch_add(1, Ordering::Relaxed);
                    if queue.send((arrived, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    }
}

/// Sends each packet over the veth once its one-way delay has passed.
fn send_when_due(
    queue: Receiver<(Instant, Vec<u8>)>,
    udp: UdpSocket,
    peer: SocketAddr,
    delay: &AtomicU64,
    stop: &AtomicBool,
    queued: &AtomicU64,
    stats: &LineStats,
) {
    // The default 50 us timer slack would make every packet late by that much more.
    let _ = nix::sys::prctl::set_timerslack(1);
    while !stop.load(Ordering::Relaxed) {
        let (arrived, packet) = match queue.recv_timeout(STOP_CHECK) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        queued.fetch_sub(1, Ordering::Relaxed);
        let due = arrived + Duration::from_nanos(delay.load(Ordering::Relaxed));
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let _ = udp.send_to(&packet, peer);
        stats.record(Instant::now().saturating_duration_since(due));
    }
}

/// Writes every packet that arrives over the veth into this namespace's TUN device.
fn deliver(udp: UdpSocket, mut tun: File, stop: &AtomicBool) {
    let _ = udp.set_read_timeout(Some(STOP_CHECK));
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        match udp.recv(&mut buf) {
            Ok(n) => {
                let _ = tun.write(&buf[..n]);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
