//! What the `watch` tests share: whether this host can watch, the echo_pair example as a
//! workload, free loopback ports, retries for timing noise.

use std::path::PathBuf;
use std::process::Command;

/// Effective root (CAP_SYS_ADMIN in CapEff).
pub fn is_root() -> bool {
    super::effective_capabilities() & (1 << 21) != 0
}

/// `Some(())` when `tcpstall watch` can run here; otherwise prints why `what` is skipped.
pub fn can_watch(what: &str) -> Option<()> {
    if !is_root() {
        super::skipped(format_args!("skipped {what}: needs root"));
        return None;
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        super::skipped(format_args!("skipped {what}: the kernel has no BTF"));
        return None;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    if !kallsyms.contains(" __traceiter_sock_send_length\n") {
        super::skipped(format_args!(
            "skipped {what}: the kernel lacks sock:sock_send_length (Linux 6.3+)"
        ));
        return None;
    }
    Some(())
}

/// The echo_pair example beside the tcpstall binary (cargo test builds the examples);
/// built when a narrower test command did not.
pub fn echo_pair() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tcpstall"));
    let path = bin
        .parent()
        .expect("target directory")
        .join("examples")
        .join("echo_pair");
    if !path.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "tcpstall-cli", "--example", "echo_pair"]);
        if bin.components().any(|c| c.as_os_str() == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo");
        assert!(status.success(), "building the echo_pair example");
    }
    path
}

/// A loopback port free at the time of asking, below the kernel's ephemeral range
/// (`ip_local_port_range`): the kernel hands ports in that range to every socket that
/// connects without binding (a Prometheus scrape, say), which may take one between this
/// choice and its use. Each call gives another port; processes start apart by their id.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static TAKEN: AtomicU32 = AtomicU32::new(0);
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768)
        .clamp(2048, 65535);
    let span = ephemeral_start - 1024;
    let start = std::process::id() * 97 % span;
    for _ in 0..span {
        let offset = (start + TAKEN.fetch_add(1, Ordering::Relaxed)) % span;
        let port = (1024 + offset) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below {ephemeral_start}");
}

/// The reply_server example of the watch crate (a server that stalls as the holder),
/// built when it is not there yet.
pub fn reply_server() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tcpstall"));
    let path = bin
        .parent()
        .expect("target directory")
        .join("examples")
        .join("reply_server");
    if !path.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "tcpstall-watch", "--example", "reply_server"]);
        if bin.components().any(|c| c.as_os_str() == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo");
        assert!(status.success(), "building the reply_server example");
    }
    path
}

/// Where cgroup v2 is mounted (/proc/self/mountinfo), when it is.
pub fn cgroup2_root() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        (fs.split_whitespace().next()? == "cgroup2")
            .then(|| mount.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// A cgroup a test made (nested directories under the cgroup v2 root, named as systemd
/// or a container runtime names them), with the processes it started in it; on drop
/// they are killed and the directories removed.
pub struct TestCgroup {
    /// The directories made, outermost first.
    made: Vec<PathBuf>,
    pub path: PathBuf,
    /// The path as /proc/PID/cgroup shows it.
    pub relative: String,
    children: Vec<std::process::Child>,
}

impl TestCgroup {
    pub fn create(relative: &str) -> TestCgroup {
        let root = cgroup2_root().expect("cgroup v2 mounted");
        let mut made = Vec::new();
        let mut path = root.clone();
        for part in relative.split('/').filter(|p| !p.is_empty()) {
            path.push(part);
            if !path.exists() {
                std::fs::create_dir(&path).expect("create a cgroup");
                made.push(path.clone());
            }
        }
        TestCgroup {
            made,
            path,
            relative: relative.to_string(),
            children: Vec::new(),
        }
    }

    /// Starts a program inside the cgroup (it moves there before exec) and returns its
    /// standard output.
    pub fn spawn(&mut self, program: &std::path::Path, args: &[&str]) -> std::process::ChildStdout {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("echo $$ > \"$0\"/cgroup.procs && exec \"$@\"")
            .arg(&self.path)
            .arg(program)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start a program in the cgroup");
        let out = child.stdout.take().expect("stdout");
        self.children.push(child);
        out
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in self.made.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// Round trips (ms) of `reply_server client PORT CONNECTIONS ROUNDS`.
pub fn reply_client(port: u16, connections: u32, rounds: u32) -> Vec<f64> {
    let out = Command::new(reply_server())
        .args([
            "client",
            &port.to_string(),
            &connections.to_string(),
            &rounds.to_string(),
        ])
        .output()
        .expect("run the reply_server client");
    round_trips_ms(&out.stdout)
}

/// The round trips (ms) a workload timed itself, from its `RTT: MS ...` lines (echo_pair,
/// reply_server's client).
pub fn round_trips_ms(stdout: &[u8]) -> Vec<f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            l.strip_prefix("RTT: ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The capabilities (as setpriv names them) each mode of `watch` needs, documented in
/// docs/watch.md and granted by deploy/: watching the whole host loads and attaches the
/// tracepoint programs (CAP_BPF, CAP_PERFMON), reads tcp_delack_timer's address in
/// /proc/kallsyms (CAP_SYSLOG), and names the delayer's process through /proc/PID/fd of
/// processes holding more capabilities than watch (CAP_SYS_PTRACE).
pub const WATCH: [&str; 4] = ["bpf", "perfmon", "syslog", "sys_ptrace"];
/// `-- CMD` adds making the command's cgroup under the cgroup root and moving it there.
pub const COMMAND: &str = "dac_override";
/// `--fix` adds loading the sockops program.
pub const FIX: &str = "net_admin";
/// Not root: listing other users' /proc/PID/fd adds this.
pub const NOT_ROOT: &str = "dac_read_search";

/// GET over HTTP/1.0 from a loopback port: the body of a 200 answer, or `None` when the
/// server does not answer (yet) or answers otherwise.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    conn.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_string())
}

/// Half the host turnaround `watch` allows the answer of a delayed ACK, as the delayer
/// alone judges it (docs/watch.md): a host that took longer than this to send what the
/// ACK released (a loaded host's softirq late) is past what the test holds it to.
pub const LAGGED_ANSWER_NS: i64 = tcpstall_core::path::HOST_TURNAROUND / 2;

/// In a loopback capture of the connection to `port`, the delayed ACKs of the server (a
/// pure ACK at least `timer_ms` after the client's data before it), and those whose
/// answer, the client's next data segment, left more than [`LAGGED_ANSWER_NS`] after them.
pub fn delayed_and_lagged_answers(
    packets: &[tcpstall_lab::capture::Packet],
    port: u16,
    timer_ms: f64,
) -> Result<(usize, usize), String> {
    use tcpstall_lab::held;
    let (client, server) = held::client_of(packets, Some(port))
        .ok_or_else(|| format!("no SYN to port {port} in the loopback capture"))?;
    let seen = held::connection(packets, client, server);
    let timer_ns = (timer_ms * 1e6) as i64;
    let (mut delayed, mut lagged) = (0, 0);
    let mut last_data: Option<i64> = None;
    for (i, s) in seen.iter().enumerate() {
        if s.outbound && s.payload > 0 {
            last_data = Some(s.time);
            continue;
        }
        let pure_ack = !s.outbound && s.payload == 0 && s.flags & (held::SYN | held::FIN) == 0;
        if !pure_ack || last_data.is_none_or(|t| s.time - t < timer_ns) {
            continue;
        }
        delayed += 1;
        let answer = seen[i + 1..].iter().find(|n| n.outbound && n.payload > 0);
        if answer.is_some_and(|a| a.time - s.time > LAGGED_ANSWER_NS) {
            lagged += 1;
        }
    }
    Ok((delayed, lagged))
}
