//! How an application reads, as the scenario's reader says: from a receive buffer of a
//! given size, so many bytes per call, no more often than a given interval, waking some
//! time after data arrives. A slow or small reader lets the kernel's receive window
//! close: the look-alikes of a delayed ACK (zero windows, persist probes, window updates
//! sent when the application reads).

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tcpstall_sim::scenario::Reader;

use crate::{LabError, Result};

/// No single read waits longer: far above any delayed-ACK timer (at most 500 ms, RFC
/// 1122 4.2.3.2), Linux's 200 ms cork flush and the delay line's round trips.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One side's reading habits, taken from the scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadPace {
    /// SO_RCVBUF, bytes (Linux doubles it for its own bookkeeping, socket(7)).
    pub rcvbuf: Option<u32>,
    /// At most this many bytes per read call.
    pub read_bytes: Option<u32>,
    /// At least this long between two read calls.
    pub interval: Duration,
    /// The application wakes this long after data arrives, then reads what is there.
    pub wake_delay: Duration,
}

impl ReadPace {
    pub fn from_scenario(reader: &Reader) -> ReadPace {
        let nanos = |n: i64| Duration::from_nanos(n.max(0) as u64);
        ReadPace {
            rcvbuf: reader.rcvbuf,
            read_bytes: reader.read_bytes,
            interval: nanos(reader.read_interval),
            wake_delay: nanos(reader.read_delay),
        }
    }
}

/// An application's reads on one socket, paced.
pub struct PacedReader {
    pace: ReadPace,
    last_read: Option<Instant>,
}

impl PacedReader {
    pub fn new(pace: ReadPace) -> PacedReader {
        PacedReader {
            pace,
            last_read: None,
        }
    }

    /// One read call, after the pause the pace asks for. Returns 0 at the end of the stream.
    pub fn read(&mut self, stream: &mut TcpStream, buf: &mut [u8], who: &str) -> Result<usize> {
        if let Some(last) = self.last_read {
            sleep_until(last + self.pace.interval);
        }
        // Data already waiting arrived earlier: the late wake-up has passed for it.
        if !self.pace.wake_delay.is_zero() && !poll_readable(stream, Duration::ZERO)? {
            if !poll_readable(stream, READ_TIMEOUT)? {
                return Err(stuck(who));
            }
            std::thread::sleep(self.pace.wake_delay);
        }
        let limit = self
            .pace
            .read_bytes
            .map_or(buf.len(), |b| (b as usize).clamp(1, buf.len()));
        let n = read_some(stream, &mut buf[..limit], who)?;
        self.last_read = Some(Instant::now());
        Ok(n)
    }
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Waits up to `timeout` for the socket to have data (or its end) to read.
fn poll_readable(stream: &TcpStream, timeout: Duration) -> Result<bool> {
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut fd, 1, ms) };
        if ready >= 0 {
            return Ok(ready > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(LabError::io("poll", e));
        }
    }
}

fn stuck(who: &str) -> LabError {
    LabError::Failed(format!(
        "the {who} waited {} s for data: the exchange is stuck",
        READ_TIMEOUT.as_secs()
    ))
}

/// One read; SO_RCVTIMEO bounds it.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], who: &str) -> Result<usize> {
    loop {
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(stuck(who));
            }
            Err(e) => return Err(LabError::io(format!("{who} read"), e)),
        }
    }
}
