//! Programs as people write them, run as they are: seed 002's Java client and echo
//! server (the request "hello " + "world\n" in two writes, then a read), and an HTTP
//! keep-alive server that writes each response's headers and body in two calls (seed
//! 004) with a client in the manner of `ab -k`. Their sources ship in
//! `crates/tcpstall-lab/java/`; the lab compiles them with `javac` into a directory of
//! its own and runs each server in the server's namespace and each client in the
//! client's.
//!
//! The programs time themselves: each client prints one line per round trip,
//! `RTT:<ms> ,receive:<reply> ,start:<epoch ns>`, as seed 002's client does (to the
//! nanosecond instead of the millisecond, with the start on the wall clock so the round
//! trip can be placed in a capture). The lab reads those lines; it measures nothing of
//! its own here.

use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use tcpstall_core::output;

use crate::capture::{Capture, Packet, Point};
use crate::exchange::Measured;
use crate::net::Net;
use crate::netns::{Namespace, run_in};
use crate::{LabError, Result};

const SOURCES: [(&str, &str); 4] = [
    ("Server.java", include_str!("../java/Server.java")),
    ("Client.java", include_str!("../java/Client.java")),
    (
        "KeepAliveServer.java",
        include_str!("../java/KeepAliveServer.java"),
    ),
    (
        "KeepAliveClient.java",
        include_str!("../java/KeepAliveClient.java"),
    ),
];
/// The port seed 002's programs use.
pub const PORT: u16 = 8000;
/// Compiling the four sources takes a few seconds on two cores; this is far above.
const COMPILE_LIMIT: Duration = Duration::from_secs(180);
/// A server prints its first line once listening, after the JVM starts (under a second).
const STARTUP_LIMIT: Duration = Duration::from_secs(60);
/// How often a wait for a process looks at it.
const POLL: Duration = Duration::from_millis(10);
/// Lines kept of a program's output at most.
const MAX_LINES: usize = 100_000;
/// JVM options for short runs on a small machine: the serial collector and the first
/// compiler tier only, so the JVM's own threads take little CPU from the exchange.
pub const JVM_OPTIONS: [&str; 2] = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"];

/// Which pair of programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// Seed 002's client (two writes, then a read) and echo server.
    Seed002,
    /// The HTTP keep-alive server (headers, then body) and its `ab -k`-like client.
    KeepAlive,
}

impl Program {
    pub const ALL: [Program; 2] = [Program::Seed002, Program::KeepAlive];

    pub fn name(self) -> &'static str {
        match self {
            Program::Seed002 => "seed 002 client (two writes) and echo server",
            Program::KeepAlive => "HTTP keep-alive server (headers, body) and client",
        }
    }

    fn server(self, address: IpAddr, connections: u32) -> Vec<String> {
        self.server_args(address, PORT, connections)
    }

    fn client(self, server: IpAddr, round_trips: u32) -> Vec<String> {
        self.client_args(server, PORT, round_trips)
    }

    /// The server's class and arguments (after `java -cp DIR`): it listens on
    /// `address:port`, serves `connections` one after the other, then exits.
    pub fn server_args(self, address: IpAddr, port: u16, connections: u32) -> Vec<String> {
        let class = match self {
            Program::Seed002 => "Server",
            Program::KeepAlive => "KeepAliveServer",
        };
        vec![
            class.into(),
            address.to_string(),
            port.to_string(),
            connections.to_string(),
        ]
    }

    /// The client's class and arguments (after `java -cp DIR`): `round_trips` exchanges
    /// with `server:port`, each printed as a `RTT:` line ([`parse_round_trips`]).
    pub fn client_args(self, server: IpAddr, port: u16, round_trips: u32) -> Vec<String> {
        match self {
            Program::Seed002 => vec![
                "Client".into(),
                server.to_string(),
                "true".into(),
                port.to_string(),
                round_trips.to_string(),
            ],
            Program::KeepAlive => vec![
                "KeepAliveClient".into(),
                server.to_string(),
                port.to_string(),
                round_trips.to_string(),
            ],
        }
    }
}

/// Why the Java programs cannot run here; `None` when `java` and `javac` are found.
pub fn why_not_java() -> Option<String> {
    let missing: Vec<&str> = ["java", "javac"]
        .into_iter()
        .filter(|p| find_in_path(p).is_none())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "needs {} (a JDK, such as apt-get install default-jdk-headless)",
            missing.join(" and ")
        )
    })
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The compiled programs, in a directory removed when this is dropped.
pub struct Java {
    dir: PathBuf,
}

impl Drop for Java {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new directory of this process's own for the sources and classes: created by
/// mkdtemp(3) under an unguessable name, mode 0700, so that no one else can put a file
/// or a link in it (a name known in advance in a shared /tmp could be taken first).
fn private_dir() -> Result<PathBuf> {
    let template = std::env::temp_dir().join("tcpstall-lab-java-XXXXXX");
    let mut bytes = template.into_os_string().into_vec();
    bytes.push(0);
    // SAFETY: a NUL-terminated buffer that mkdtemp rewrites in place, of the same length.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        let e = std::io::Error::last_os_error();
        return Err(LabError::io(std::env::temp_dir().display().to_string(), e));
    }
    bytes.pop();
    Ok(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

/// A child process that is killed and reaped if still running when dropped.
struct Running {
    child: Child,
    what: &'static str,
}

impl Running {
    /// Waits for the process to end, at most until `deadline`, then kills it.
    fn wait(&mut self, deadline: Instant) -> Result<std::process::ExitStatus> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(LabError::Failed(format!(
                        "the {} did not finish within the time limit",
                        self.what
                    )));
                }
                Err(e) => return Err(LabError::io(format!("waiting for the {}", self.what), e)),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A program's standard output, line by line, read on a thread of its own.
fn lines_of(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().take(MAX_LINES) {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// What one run of a pair of programs gave.
pub struct ProgramRun {
    pub program: Program,
    /// The client's round trips, as it timed them.
    pub round_trips: Vec<Measured>,
    /// The client's output, as printed.
    pub client_output: Vec<String>,
    /// Each capture point's packets.
    pub captures: Vec<(Point, Vec<Packet>)>,
}

impl Java {
    /// Writes the sources into a new directory and compiles them.
    pub fn compile() -> Result<Java> {
        if let Some(why) = why_not_java() {
            return Err(LabError::Unsupported(format!(
                "the lab's Java programs: {why}"
            )));
        }
        let java = Java {
            dir: private_dir()?,
        };
        let mut files = Vec::new();
        for (name, text) in SOURCES {
            let path = java.dir.join(name);
            output::write(&path, text.as_bytes())
                .map_err(|e| LabError::io(path.display().to_string(), e))?;
            files.push(path);
        }
        let child = Command::new("javac")
            .arg("-d")
            .arg(&java.dir)
            .args(&files)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| LabError::io("javac", e))?;
        let mut running = Running {
            child,
            what: "Java compiler",
        };
        let stderr = running.child.stderr.take().map(lines_of);
        let status = running.wait(Instant::now() + COMPILE_LIMIT)?;
        if !status.success() {
            let detail = stderr
                .and_then(|rx| rx.recv_timeout(Duration::from_secs(1)).ok())
                .unwrap_or_default();
            return Err(LabError::Failed(format!(
                "javac failed ({status}): {detail}"
            )));
        }
        Ok(java)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The whole command line that runs a class of this directory (`args` from
    /// [`Program::server_args`] or [`Program::client_args`]) as the lab runs it, for a
    /// caller that starts it itself, behind a prefix of its own (`tcpstall watch --`).
    pub fn command_line(&self, args: &[String]) -> Vec<String> {
        let mut line = vec!["java".to_string()];
        line.extend(JVM_OPTIONS.map(String::from));
        line.push("-cp".into());
        line.push(self.dir.display().to_string());
        line.extend(args.iter().cloned());
        line
    }

    /// Starts `java ARGS` in `namespace` (the child joins the namespace of the thread
    /// that starts it), its output piped.
    fn spawn(
        &self,
        namespace: Option<&Arc<Namespace>>,
        args: &[String],
        what: &'static str,
    ) -> Result<Running> {
        let child = run_in(namespace, || {
            Command::new("java")
                .args(JVM_OPTIONS)
                .arg("-cp")
                .arg(&self.dir)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| LabError::io(format!("starting the {what}"), e))
        })?;
        Ok(Running { child, what })
    }

    /// Runs the pair once over `net`: the server, then captures at `points`, then the
    /// client for `round_trips`; everything ends within `time_limit`.
    pub fn run(
        &self,
        program: Program,
        net: &Net,
        round_trips: u32,
        points: &[Point],
        time_limit: Duration,
    ) -> Result<ProgramRun> {
        let deadline = Instant::now() + time_limit;
        let mut server = self.spawn(
            net.server_ns.as_ref(),
            &program.server(net.server_ip, 1),
            "server program",
        )?;
        let server_lines = server
            .child
            .stdout
            .take()
            .map(lines_of)
            .ok_or_else(|| LabError::Failed("the server program has no output".into()))?;
        match server_lines.recv_timeout(STARTUP_LIMIT.min(time_limit)) {
            Ok(line) if line.contains("startup") => {}
            Ok(line) => {
                return Err(LabError::Failed(format!(
                    "the server program said {line:?} instead of starting"
                )));
            }
            Err(_) => {
                return Err(LabError::Failed(
                    "the server program did not start listening".into(),
                ));
            }
        }
        let mut captures = Vec::new();
        for &point in points {
            let ns = net.capture_ns_at(point)?.cloned();
            captures.push((point, Capture::start_at(ns, point)?));
        }
        let mut client = self.spawn(
            net.client_ns.as_ref(),
            &program.client(net.server_ip, round_trips),
            "client program",
        )?;
        let client_lines = client
            .child
            .stdout
            .take()
            .map(lines_of)
            .ok_or_else(|| LabError::Failed("the client program has no output".into()))?;
        let mut output = Vec::new();
        // Bounded: one line per round trip and a header; the deadline ends a silent client.
        while output.len() < MAX_LINES {
            let left = deadline.saturating_duration_since(Instant::now());
            match client_lines.recv_timeout(left.max(POLL)) {
                Ok(line) => output.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        let client_status = client.wait(deadline)?;
        server.wait(deadline)?;
        // The last FIN and ACK cross the path after the programs end.
        let settle = net
            .line
            .as_ref()
            .map_or(Duration::ZERO, |l| l.max_round_trip());
        std::thread::sleep(settle);
        let mut captured = Vec::new();
        for (point, capture) in captures {
            captured.push((point, capture.finish()?));
        }
        if !client_status.success() {
            return Err(LabError::Failed(format!(
                "the client program failed ({client_status}): {}",
                output.join(" / ")
            )));
        }
        let round_trips_measured = parse_round_trips(&output)?;
        if round_trips_measured.len() != round_trips as usize {
            return Err(LabError::Failed(format!(
                "the client program timed {} round trips of {round_trips}: {}",
                round_trips_measured.len(),
                output.join(" / ")
            )));
        }
        Ok(ProgramRun {
            program,
            round_trips: round_trips_measured,
            client_output: output,
            captures: captured,
        })
    }
}

/// The round trips in a client's output: `RTT:<ms> ,receive:<reply> ,start:<epoch ns>`.
pub fn parse_round_trips(lines: &[String]) -> Result<Vec<Measured>> {
    let mut out = Vec::new();
    for line in lines.iter().filter(|l| l.starts_with("RTT:")) {
        let bad = || LabError::Failed(format!("a client line the lab cannot read: {line:?}"));
        let ms: f64 = line[4..]
            .split(" ,")
            .next()
            .and_then(|v| v.trim().parse().ok())
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(bad)?;
        let start: i64 = line
            .rsplit(" ,start:")
            .next()
            .filter(|_| line.contains(" ,start:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(bad)?;
        let latency = Duration::from_secs_f64(ms / 1e3);
        out.push(Measured {
            index: out.len() as u32,
            start,
            end: start.saturating_add(latency.as_nanos() as i64),
            latency,
            client_port: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_lines_are_read_as_printed() {
        let lines: Vec<String> = [
            "WriteSplit:true",
            "RTT:2.795910 ,receive:hello world ,start:1700000000000000000",
            "RTT:40.752702 ,receive:HTTP/1.1 200 OK 320 bytes ,start:1700000000003000000",
        ]
        .map(String::from)
        .to_vec();
        let rts = parse_round_trips(&lines).unwrap();
        assert_eq!(rts.len(), 2);
        assert_eq!(rts[1].index, 1);
        assert_eq!(rts[1].latency, Duration::from_nanos(40_752_702));
        assert_eq!(rts[1].end - rts[1].start, 40_752_702);
        assert!(parse_round_trips(&["RTT:x ,start:1".to_string()]).is_err());
        assert!(parse_round_trips(&["RTT:1.0 ,receive:a".to_string()]).is_err());
    }

    #[test]
    fn the_shipped_sources_are_the_programs_named() {
        for (name, text) in SOURCES {
            let class = name.trim_end_matches(".java");
            assert!(
                text.contains(&format!("public class {class} ")),
                "{name} does not declare {class}"
            );
        }
    }
}
