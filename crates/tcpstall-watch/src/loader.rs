//! Loads the watch programs and attaches them to their tracepoints; loads the sockops
//! fix onto a command's cgroup. Dropping either detaches its programs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

use aya::maps::{Array, MapData, RingBuf};
use aya::programs::{BtfTracePoint, CgroupAttachMode, SockOps};
use aya::{Btf, Ebpf, EbpfLoader};

use crate::event::{DecodeError, WatchEvent, decode};
use crate::objects;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading the kernel's BTF: {0}")]
    Btf(String),
    #[error("loading the eBPF object: {0}")]
    Object(String),
    #[error("program {program}: {detail}")]
    Program {
        program: &'static str,
        detail: String,
    },
    #[error("map {0} missing from the eBPF object")]
    Map(&'static str),
    #[error("waiting for events: {0}")]
    Poll(std::io::Error),
}

/// The tracepoint programs of `bpf/watch.bpf.c`, with the tracepoint each attaches to.
const WATCH_PROGRAMS: [(&str, &str); 4] = [
    ("on_send", "sock_send_length"),
    ("on_segment_in", "tcp_probe"),
    ("on_timer_fire", "timer_expire_entry"),
    ("on_destroy", "tcp_destroy_sock"),
];

/// What the programs are told before they load.
#[derive(Clone, Copy, Debug)]
pub struct WatchConfig {
    /// Only sends from this cgroup v2 (its id) start a hold; `None`: every process.
    pub cgroup: Option<u64>,
    /// The address of tcp_delack_timer, from /proc/kallsyms.
    pub delack_timer_address: u64,
    /// Holds shorter than this are not reported by the kernel side at all.
    pub min_hold: Duration,
}

/// The attached watch programs and their event ring buffer.
pub struct Watcher {
    ebpf: Ebpf,
    events: RingBuf<MapData>,
}

fn program_error(program: &'static str) -> impl Fn(aya::programs::ProgramError) -> LoadError {
    move |e| LoadError::Program {
        program,
        detail: error_chain(&e),
    }
}

/// An error with its causes, on one line (the kernel's verifier log is in a cause).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

impl Watcher {
    pub fn attach(config: WatchConfig) -> Result<Watcher, LoadError> {
        let btf = Btf::from_sys_fs().map_err(|e| LoadError::Btf(error_chain(&e)))?;
        let cgroup = config.cgroup.unwrap_or(0);
        let min_hold_ns = config.min_hold.as_nanos() as u64;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("target_cgroup", &cgroup, true)
            .override_global("delack_timer_fn", &config.delack_timer_address, true)
            .override_global("min_hold_ns", &min_hold_ns, true)
            .load(objects::watch_object())
            .map_err(|e| LoadError::Object(error_chain(&e)))?;
        for (program, tracepoint) in WATCH_PROGRAMS {
            let error = program_error(program);
            let tp: &mut BtfTracePoint = ebpf
                .program_mut(program)
                .ok_or_else(|| LoadError::Program {
                    program,
                    detail: "missing from the eBPF object".into(),
                })?
                .try_into()
                .map_err(&error)?;
            tp.load(tracepoint, &btf).map_err(&error)?;
            tp.attach().map_err(&error)?;
        }
        let events = ebpf.take_map("events").ok_or(LoadError::Map("events"))?;
        let events = RingBuf::try_from(events).map_err(|_| LoadError::Map("events"))?;
        Ok(Watcher { ebpf, events })
    }

    /// How many programs are attached.
    pub fn programs(&self) -> usize {
        WATCH_PROGRAMS.len()
    }

    /// Waits up to `timeout` for events, then hands every one available to `sink`.
    /// Records that cannot be decoded are counted, not fatal.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut sink: impl FnMut(Result<WatchEvent, DecodeError>),
    ) -> Result<usize, LoadError> {
        let mut fd = libc::pollfd {
            fd: self.events.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut fd, 1, ms) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(LoadError::Poll(error));
            }
        }
        let mut count = 0;
        while let Some(record) = self.events.next() {
            sink(decode(&record));
            count += 1;
        }
        Ok(count)
    }

    /// Events the kernel side dropped because the ring buffer was full.
    pub fn lost_events(&self) -> u64 {
        self.ebpf
            .map("lost")
            .and_then(|map| Array::<_, u64>::try_from(map).ok())
            .and_then(|lost| lost.get(&0, 0).ok())
            .unwrap_or(0)
    }
}

/// A fix a sockops program applies to every connection of a cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// TCP_NODELAY: Nagle off (the holder's fix).
    NoDelay,
    /// TCP_BPF_DELACK_MAX: the delayed-ACK timer at most this long (the delayer's fix).
    DelayedAckMax(Duration),
}

impl Fix {
    pub fn name(self) -> String {
        match self {
            Fix::NoDelay => "nodelay".into(),
            Fix::DelayedAckMax(max) => format!("delack-max={}", max.as_millis()),
        }
    }

    pub fn describe(self) -> String {
        match self {
            Fix::NoDelay => "TCP_NODELAY".into(),
            Fix::DelayedAckMax(max) => {
                format!("TCP_BPF_DELACK_MAX {} ms", max.as_secs_f64() * 1e3)
            }
        }
    }
}

/// The sockops fix, attached to a cgroup.
pub struct FixProgram {
    ebpf: Ebpf,
}

impl FixProgram {
    /// Attaches to the cgroup, which applies it to the cgroup's descendants too. The
    /// program is held by a BPF link (Linux 5.7; aya uses one where the kernel has it):
    /// a link runs beside the programs other tools attached there (the kernel attaches
    /// cgroup links with BPF_F_ALLOW_MULTI, kernel/bpf/cgroup.c cgroup_bpf_link_attach),
    /// and is released when its file descriptor closes, so even a `watch` killed with
    /// SIGKILL leaves nothing attached.
    pub fn attach(fix: Fix, cgroup_directory: &File) -> Result<FixProgram, LoadError> {
        let (kind, delack_max_us): (u32, u32) = match fix {
            Fix::NoDelay => (1, 0),
            Fix::DelayedAckMax(max) => (2, max.as_micros().min(u32::MAX as u128) as u32),
        };
        let mut ebpf = EbpfLoader::new()
            .override_global("fix_kind", &kind, true)
            .override_global("delack_max_us", &delack_max_us, true)
            .load(objects::fix_object())
            .map_err(|e| LoadError::Object(error_chain(&e)))?;
        let error = program_error("apply_fix");
        let program: &mut SockOps = ebpf
            .program_mut("apply_fix")
            .ok_or_else(|| LoadError::Program {
                program: "apply_fix",
                detail: "missing from the eBPF object".into(),
            })?
            .try_into()
            .map_err(&error)?;
        program.load().map_err(&error)?;
        program
            .attach(cgroup_directory, CgroupAttachMode::Single)
            .map_err(&error)?;
        Ok(FixProgram { ebpf })
    }

    /// Connections the option was set on, and connections where the kernel refused it.
    pub fn counts(&self) -> (u64, u64) {
        let Some(fixed) = self
            .ebpf
            .map("fixed")
            .and_then(|map| Array::<_, u64>::try_from(map).ok())
        else {
            return (0, 0);
        };
        (fixed.get(&0, 0).unwrap_or(0), fixed.get(&1, 0).unwrap_or(0))
    }
}
