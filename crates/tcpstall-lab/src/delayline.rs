//! A path delay without netem: a user-space delay line.
//!
//! Each namespace has a TUN device that holds the lab's addresses. Every IP packet the
//! kernel routes into a TUN device is read by the line and carried to the other namespace
//! in two stages: held for the first half of the direction's one-way delay and sent over
//! the veth pair inside a UDP datagram, then, on the far side, held for the second half
//! and written into that namespace's TUN device and delivered. The veth is thus the
//! middle of the path: a capture there sees each packet halfway, in time, between the
//! two ends. The TUN devices have an MTU of 1500 and no offloads: every TCP segment
//! crosses as its own packet.
//!
//! The delay is constant per direction unless a variation is set: then each stage also
//! waits behind cross traffic in a [`Queue`] of its own (seeded), adding up to half the
//! variation of the one-way delay, so a one-way delay of `d` with variation `v` takes
//! `d` to `d * (1 + v)`. Either way packets keep their order, as on a wire: a stage never
//! sends a packet before the one ahead of it.
//!
//! Its accuracy is measured, not assumed: every packet's lateness (sent after its due
//! time) is recorded at each stage, and [`crate::suites::delay_accuracy`] compares
//! requested round trips with round trips measured through TCP.

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

use crate::queue::{Queue, SplitMix64};
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
/// The UDP port the line's two ends send the packets they carry to each other on.
pub const LINE_PORT: u16 = 47_000;

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
    /// Packets sent on by a stage (each packet passes two).
    pub packets: AtomicU64,
    pub dropped: AtomicU64,
    lateness_nanos: Mutex<Vec<u32>>,
    waits_nanos: Mutex<Vec<u32>>,
}

/// Percentiles of per-stage times, in microseconds: how late packets were sent after
/// their due time, or how long they waited in a queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lateness {
    pub packets: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

fn push_sample(samples: &Mutex<Vec<u32>>, d: Duration) {
    if let Ok(mut samples) = samples.lock()
        && samples.len() < MAX_SAMPLES
    {
        samples.push(d.as_nanos().min(u128::from(u32::MAX)) as u32);
    }
}

fn take_percentiles(samples: &Mutex<Vec<u32>>) -> Lateness {
    let mut samples = match samples.lock() {
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

impl LineStats {
    fn record(&self, late: Duration, wait: Duration) {
        self.packets.fetch_add(1, Ordering::Relaxed);
        push_sample(&self.lateness_nanos, late);
        push_sample(&self.waits_nanos, wait);
    }

    /// Percentiles of the lateness recorded since the last call (which clears them).
    pub fn take_lateness(&self) -> Lateness {
        take_percentiles(&self.lateness_nanos)
    }

    /// Percentiles of the queue waits recorded since the last call (which clears them).
    pub fn take_waits(&self) -> Lateness {
        take_percentiles(&self.waits_nanos)
    }
}

/// The real-time priority of the line's threads (SCHED_FIFO, sched(7): 1 to 99, any of
/// which runs before every ordinary thread). The lowest is enough: the line's threads
/// only wait and forward, and must not wait behind a build or a JVM for the CPU.
const LINE_PRIORITY: libc::c_int = 1;

/// Moves the calling thread to SCHED_FIFO at [`LINE_PRIORITY`]. Without CAP_SYS_NICE it
/// stays an ordinary thread; the line's measured lateness shows the difference.
fn run_before_ordinary_threads() {
    let param = libc::sched_param {
        sched_priority: LINE_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
}

/// Locks the pages mapped now (the program's code among them) in memory, so a host that
/// reclaims idle file pages (DAMON's `pageout`, for one) does not make a line thread wait
/// for its own code to be read back. Without CAP_IPC_LOCK nothing changes.
fn keep_code_in_memory() {
    // SAFETY: mlockall takes flags only.
    let _ = unsafe { libc::mlockall(libc::MCL_CURRENT) };
}

/// How a direction's delay varies: up to `fraction` of the one-way delay more, from
/// the line's queues, whose cross traffic is drawn from `seed`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Variation {
    pub fraction: f64,
    pub seed: u64,
}

/// The largest variation the line takes: a queue may double the one-way delay.
pub const MAX_VARIATION: f64 = 1.0;

/// One stage of one direction: half the one-way delay and one queue.
struct Stage {
    /// Nanoseconds every packet is held before its queue's wait.
    base: u64,
    queue: Queue,
    /// When the last packet is due: none is sent before it (order kept).
    last_due: Option<Instant>,
}

impl Stage {
    fn new() -> Stage {
        Stage {
            base: 0,
            queue: Queue::new(0, 0),
            last_due: None,
        }
    }

    /// When a packet that arrived at `arrived` is due, and its queue wait.
    fn due(&mut self, epoch: Instant, arrived: Instant) -> (Instant, Duration) {
        let on_clock = arrived.saturating_duration_since(epoch).as_nanos() as u64;
        let wait = Duration::from_nanos(self.queue.wait(on_clock));
        let mut due = arrived + Duration::from_nanos(self.base) + wait;
        if let Some(last) = self.last_due {
            due = due.max(last);
        }
        self.last_due = Some(due);
        (due, wait)
    }
}

/// A running delay line: two directions, each with its own one-way delay.
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    /// One-way delay, client to server and server to client, in nanoseconds.
    delays: [Arc<AtomicU64>; 2],
    /// Per direction, the stage before the veth and the stage after it.
    stages: [[Arc<Mutex<Stage>>; 2]; 2],
    variation: Mutex<Variation>,
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

/// Where a stage sends a packet once it is due.
enum Sink {
    /// Over the veth to the other end's UDP socket.
    Veth(UdpSocket, SocketAddr),
    /// Into this namespace's TUN device, to be delivered.
    Tun(File),
}

impl Sink {
    fn send(&mut self, packet: &[u8]) {
        let _ = match self {
            Sink::Veth(udp, peer) => udp.send_to(packet, *peer),
            Sink::Tun(tun) => tun.write(packet),
        };
    }
}

type Queued = (Instant, Vec<u8>);

impl DelayLine {
    /// Starts forwarding between the two ends; `client` is index 0 of the delays.
    pub fn start(client: LineEnd, server: LineEnd) -> Result<DelayLine> {
        keep_code_in_memory();
        let stop = Arc::new(AtomicBool::new(false));
        let delays = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        let stages = [
            [
                Arc::new(Mutex::new(Stage::new())),
                Arc::new(Mutex::new(Stage::new())),
            ],
            [
                Arc::new(Mutex::new(Stage::new())),
                Arc::new(Mutex::new(Stage::new())),
            ],
        ];
        let stats = Arc::new(LineStats::default());
        let epoch = Instant::now();
        let mut threads = Vec::new();
        let clone_err = |e| LabError::io("delay line", e);
        for (from, to, [first, second]) in [
            (&client, &server, &stages[0]),
            (&server, &client, &stages[1]),
        ] {
            // First stage: the TUN device of the sending end, held, then over the veth.
            let (tx, rx) = channel();
            let queued = Arc::new(AtomicU64::new(0));
            let tun = from.tun.try_clone().map_err(clone_err)?;
            let (stop1, q1, stats1) = (stop.clone(), queued.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                read_tun(tun, tx, &stop1, &q1, &stats1)
            }));
            let sink = Sink::Veth(from.udp.try_clone().map_err(clone_err)?, from.peer);
            let (stop2, stage, stats2) = (stop.clone(), first.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                send_when_due(rx, sink, epoch, &stage, &stop2, &queued, &stats2)
            }));
            // Second stage: the veth at the receiving end, held, then into its TUN device.
            let (tx, rx) = channel();
            let queued = Arc::new(AtomicU64::new(0));
            let udp = to.udp.try_clone().map_err(clone_err)?;
            let (stop3, q3, stats3) = (stop.clone(), queued.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                read_veth(udp, tx, &stop3, &q3, &stats3)
            }));
            let sink = Sink::Tun(to.tun.try_clone().map_err(clone_err)?);
            let (stop4, stage, stats4) = (stop.clone(), second.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                send_when_due(rx, sink, epoch, &stage, &stop4, &queued, &stats4)
            }));
        }
        Ok(DelayLine {
            stop,
            delays,
            stages,
            variation: Mutex::new(Variation::default()),
            stats,
            threads,
        })
    }

    /// Sets the one-way delays (client to server, server to client); the variation, if
    /// any, scales with them.
    pub fn set_delays(&self, client_to_server: Duration, server_to_client: Duration) {
        self.delays[0].store(client_to_server.as_nanos() as u64, Ordering::Relaxed);
        self.delays[1].store(server_to_client.as_nanos() as u64, Ordering::Relaxed);
        self.configure();
    }

    /// Sets how much each packet's delay varies (0 for a constant delay); the queues
    /// start again from the seed.
    pub fn set_variation(&self, variation: Variation) {
        if let Ok(mut v) = self.variation.lock() {
            *v = variation;
        }
        self.configure();
    }

    pub fn variation(&self) -> Variation {
        self.variation.lock().map(|v| *v).unwrap_or_default()
    }

    /// Each stage's base (half the one-way delay, the odd nanosecond to the first) and its
    /// queue (up to half the variation), seeded per stage from the line's seed.
    fn configure(&self) {
        let variation = self.variation();
        let mut seeds = SplitMix64::new(variation.seed);
        for (direction, stages) in self.stages.iter().enumerate() {
            let one_way = self.delays[direction].load(Ordering::Relaxed);
            let halves = [one_way - one_way / 2, one_way / 2];
            let max_wait = (one_way as f64 * variation.fraction.clamp(0.0, MAX_VARIATION) / 2.0)
                .round() as u64;
            for (stage, base) in stages.iter().zip(halves) {
                let seed = seeds.next_u64();
                if let Ok(mut s) = stage.lock() {
                    s.base = base;
                    s.queue = Queue::new(max_wait, seed);
                }
            }
        }
    }

    /// The requested round trip (both one-way delays, without variation).
    pub fn round_trip(&self) -> Duration {
        Duration::from_nanos(
            self.delays[0].load(Ordering::Relaxed) + self.delays[1].load(Ordering::Relaxed),
        )
    }

    /// The longest round trip the line gives: the requested one with every queue full.
    pub fn max_round_trip(&self) -> Duration {
        let fraction = self.variation().fraction.clamp(0.0, MAX_VARIATION);
        self.round_trip().mul_f64(1.0 + fraction)
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

/// Queues a packet for its stage, stamped on arrival; false when the stage is gone.
fn enqueue(queue: &Sender<Queued>, packet: &[u8], queued: &AtomicU64, stats: &LineStats) -> bool {
    let arrived = Instant::now();
    if queued.load(Ordering::Relaxed) >= MAX_QUEUED {
        stats.dropped.fetch_add(1, Ordering::Relaxed);
        return true;
    }
    queued.fetch_add(1, Ordering::Relaxed);
    queue.send((arrived, packet.to_vec())).is_ok()
}

/// Reads every packet the kernel routes into the TUN device.
fn read_tun(
    mut tun: File,
    queue: Sender<Queued>,
    stop: &AtomicBool,
    queued: &AtomicU64,
    stats: &LineStats,
) {
    run_before_ordinary_threads();
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
                    if !enqueue(&queue, &buf[..n], queued, stats) {
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

/// Reads every packet that arrives over the veth.
fn read_veth(
    udp: UdpSocket,
    queue: Sender<Queued>,
    stop: &AtomicBool,
    queued: &AtomicU64,
    stats: &LineStats,
) {
    run_before_ordinary_threads();
    let _ = udp.set_read_timeout(Some(STOP_CHECK));
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        match udp.recv(&mut buf) {
            Ok(n) => {
                if !enqueue(&queue, &buf[..n], queued, stats) {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Sends each packet on once its stage's delay (and queue wait) has passed, in order.
fn send_when_due(
    queue: Receiver<Queued>,
    mut sink: Sink,
    epoch: Instant,
    stage: &Mutex<Stage>,
    stop: &AtomicBool,
    queued: &AtomicU64,
    stats: &LineStats,
) {
    run_before_ordinary_threads();
    // The default 50 us timer slack would make every packet late by that much more.
    let _ = nix::sys::prctl::set_timerslack(1);
    while !stop.load(Ordering::Relaxed) {
        let (arrived, packet) = match queue.recv_timeout(STOP_CHECK) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        queued.fetch_sub(1, Ordering::Relaxed);
        let Ok((due, wait)) = stage.lock().map(|mut s| s.due(epoch, arrived)) else {
            return;
        };
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        sink.send(&packet);
        stats.record(Instant::now().saturating_duration_since(due), wait);
    }
}
