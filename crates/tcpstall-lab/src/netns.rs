//! Network namespaces the lab creates for itself, and how its threads enter them.
//!
//! A namespace is made with `ip netns add`, configured with `ip -n`, and its name is
//! removed (`ip netns del`) as soon as it is configured: from then on it lives only as
//! long as the lab holds it open, so it disappears with the process however that ends
//! (normal exit, error, panic, Ctrl-C, even SIGKILL). While a name exists it is listed
//! here, and [`remove_on_interrupt`] deletes the listed names on Ctrl-C.

use std::fs::File;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use nix::sched::{CloneFlags, setns};

use crate::{LabError, Result};

/// Every namespace name this process has created and not yet removed.
static LIVE_NAMES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static SEQUENCE: AtomicU32 = AtomicU32::new(0);
const NAME_PREFIX: &str = "tcpstall-lab-";
const NETNS_DIR: &str = "/run/netns";

/// A network namespace held open by the lab.
#[derive(Debug)]
pub struct Namespace {
    /// The name it was created under (already removed once configured).
    pub label: String,
    handle: File,
}

impl Namespace {
    /// Moves the calling thread into this namespace: sockets and devices it creates from
    /// now on belong to it. Only the calling thread changes (setns(2) on a thread).
    pub fn enter(&self) -> Result<()> {
        setns(&self.handle, CloneFlags::CLONE_NEWNET)
            .map_err(|e| LabError::Failed(format!("cannot enter namespace {}: {e}", self.label)))
    }
}

/// Namespaces being set up: their names are deleted when this is dropped, whether the
/// set-up finished or failed half-way.
pub struct Setup {
    names: Vec<String>,
}

impl Setup {
    pub fn new() -> Setup {
        remove_stale_names();
        Setup { names: Vec::new() }
    }

    /// Creates a namespace and opens it; `role` ends its name ("c", "s", "lo").
    pub fn create(&mut self, role: &str) -> Result<Arc<Namespace>> {
        let name = format!(
            "{NAME_PREFIX}{}-{}-{role}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        register(&name);
        self.names.push(name.clone());
        ip(&["netns", "add", &name])?;
        let path = format!("{NETNS_DIR}/{name}");
        let handle = File::open(&path).map_err(|e| LabError::io(path, e))?;
        Ok(Arc::new(Namespace {
            label: name,
            handle,
        }))
    }
}

impl Default for Setup {
    fn default() -> Self {
        Setup::new()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for name in self.names.drain(..) {
            delete_name(&name);
        }
    }
}

fn register(name: &str) {
    if let Ok(mut names) = LIVE_NAMES.lock() {
        names.push(name.to_string());
    }
}

fn delete_name(name: &str) {
    let _ = Command::new("ip").args(["netns", "del", name]).output();
    if let Ok(mut names) = LIVE_NAMES.lock() {
        names.retain(|n| n != name);
    }
}

/// Deletes names left by a lab process that no longer runs (one killed during set-up).
fn remove_stale_names() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten().take(10_000) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        let alive = std::path::Path::new("/proc").join(pid).exists();
        if !pid.is_empty() && !alive {
            delete_name(&name);
        }
    }
}

/// On Ctrl-C: delete the names of namespaces still being set up, then exit 130. The
/// configured namespaces need nothing: they vanish with the process.
pub fn remove_on_interrupt() {
    let result = ctrlc::set_handler(|| {
        let names = LIVE_NAMES.lock().map(|n| n.clone()).unwrap_or_default();
        for name in names {
            delete_name(&name);
        }
        tcpstall_core::output::remove_unfinished();
        eprintln!("tcpstall: interrupted: lab namespaces removed");
        std::process::exit(130);
    });
    if let Err(e) = result {
        eprintln!("tcpstall: warning: cannot handle Ctrl-C: {e}");
    }
}

/// Runs `ip ARGS`; its stderr becomes the error.
pub fn ip(args: &[&str]) -> Result<()> {
    let command = args.join(" ");
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| LabError::io("cannot run `ip` (iproute2)", e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LabError::Ip {
            command,
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// Runs `f` on a new thread inside `namespace` (or the current one), and waits for it.
pub fn run_in<T: Send>(
    namespace: Option<&Arc<Namespace>>,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(ns) = namespace {
                    ns.enter()?;
                }
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(LabError::Failed("a lab thread panicked".into())))
    })
}
