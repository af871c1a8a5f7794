//! The metrics endpoint of `tcpstall watch --prometheus` against hostile peers, through
//! the real binary: idle connections past its open-file limit, request lines of
//! hundreds of megabytes, a request dripped a byte at a time, while it is scraped; a
//! listener that cannot accept any more; a web config file that cannot be used. The
//! tests that start watching need root and BTF, are ignored by default and run by
//! .ci/run.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::TempDir;
use common::watch::{can_watch, free_port, http_get};

/// Kills (SIGKILL) and reaps a child this test started, whatever the test's outcome.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What systemd gives a service unless told otherwise (LimitNOFILE's soft default).
const SERVICE_OPEN_FILES: libc::rlim_t = 1024;
/// The most resident memory watch may reach under the attack.
const RSS_LIMIT_KB: u64 = 64 * 1024;
/// The most threads watch may run under the attack: the main one, the endpoint's, and
/// room for the runtime's one blocking thread.
const THREAD_LIMIT: u64 = 8;

/// `tcpstall watch --prometheus PORT` watching no real traffic (a port nothing uses),
/// at `open_files` descriptors; its standard error piped.
fn start_watch(metrics_port: u16, open_files: libc::rlim_t) -> Reaped {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tcpstall"));
    command
        .args([
            "watch",
            "--duration",
            "600",
            "--port",
            &free_port().to_string(),
        ])
        .args(["--prometheus", &metrics_port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: open_files,
                rlim_max: open_files,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let watch = Reaped(command.spawn().expect("start tcpstall watch"));
    for _ in 0..200 {
        if http_get(metrics_port, "/metrics").is_some() {
            return watch;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("watch does not serve /metrics");
}

/// A field of /proc/PID/status, as its first number (kB for the memory fields).
fn status_field(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This test's own open-file limit raised to hold `at_least` sockets.
fn raise_own_open_files(at_least: libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on this process's own limit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        if limit.rlim_cur < at_least {
            limit.rlim_cur = at_least;
            limit.rlim_max = limit.rlim_max.max(at_least);
            assert_eq!(
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit),
                0,
                "raise the test's open-file limit"
            );
        }
    }
}

/// Streams a request line of `bytes` 'a's in 64 KiB writes until the server stops
/// taking it; the bytes written.
fn stream_a_long_request_line(port: u16, bytes: u64) -> u64 {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = conn.set_write_timeout(Some(Duration::from_secs(30)));
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0;
    if conn.write_all(b"GET /").is_err() {
        return 0;
    }
    while sent < bytes {
        match conn.write(&chunk) {
            Ok(n) if n > 0 => sent += n as u64,
            _ => break,
        }
    }
    sent
}

/// Sends a request head a byte every 250 ms, up to `bytes`; whether the server closed
/// the connection first.
fn drip_a_request(port: u16, bytes: usize) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let mut head = b"GET /metrics HTTP/1.1\r\nX-Drip: ".to_vec();
    head.resize(bytes, b'a');
    for byte in head {
        if conn.write_all(&[byte]).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

/// The value of one sample line of an exposition (0 when it is not there).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
#[ignore = "needs root and BTF (watch); .ci/run runs it"]
fn hostile_peers_leave_the_endpoint_serving_in_bounded_memory_and_threads() {
    let Some(()) = can_watch("the endpoint attack test") else {
        return;
    };
    const IDLE_CONNECTIONS: usize = 1100;
    const LONG_LINE: u64 = 600 * 1024 * 1024;
    raise_own_open_files(IDLE_CONNECTIONS as libc::rlim_t + 512);
    let port = free_port();
    let mut watch = start_watch(port, SERVICE_OPEN_FILES);
    let pid = watch.0.id();

    // Watch's threads and memory, sampled through the attack; scrapes beside it.
    let done = Arc::new(AtomicBool::new(false));
    let most_threads = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (done, most_threads) = (Arc::clone(&done), Arc::clone(&most_threads));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(threads) = status_field(pid, "Threads") {
                    most_threads.fetch_max(threads, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let scrapes = Arc::new(AtomicU64::new(0));
    let scraper = {
        let (done, scrapes) = (Arc::clone(&done), Arc::clone(&scrapes));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if http_get(port, "/metrics").is_some() {
                    scrapes.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };

    // Idle connections past the open-file limit: those past the cap are closed at once.
    let idle: Vec<TcpStream> = (0..IDLE_CONNECTIONS)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    drop(idle);
    // Then the long lines and the drip, side by side, with the scrapes.
    let long_lines: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || stream_a_long_request_line(port, LONG_LINE)))
        .collect();
    let dripped_closed = drip_a_request(port, 400);
    let long_lines: Vec<u64> = long_lines.into_iter().map(|t| t.join().unwrap()).collect();

    // Served after it all.
    let mut metrics = None;
    for _ in 0..100 {
        metrics = http_get(port, "/metrics");
        if metrics.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    done.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    scraper.join().unwrap();
    let peak_rss_kb = status_field(pid, "VmHWM").expect("watch's VmHWM");
    let threads = most_threads.load(Ordering::Relaxed);
    let still_running = watch.0.try_wait().expect("watch's status").is_none();
    let mut report = std::io::stderr();
    let _ = writeln!(
        report,
        "endpoint attack: {} idle connections, long lines cut at {long_lines:?} bytes, peak RSS {peak_rss_kb} kB, most threads {threads}, {} scrapes served during it",
        IDLE_CONNECTIONS,
        scrapes.load(Ordering::Relaxed)
    );

    assert!(still_running, "watch ended under the attack");
    let metrics = metrics.expect("a scrape after the attack");
    assert!(
        long_lines.iter().all(|&sent| sent < LONG_LINE),
        "a 600 MB request line was read whole: {long_lines:?}"
    );
    assert!(dripped_closed, "the dripped request was never cut off");
    assert!(
        peak_rss_kb < RSS_LIMIT_KB,
        "watch's peak RSS {peak_rss_kb} kB"
    );
    assert!(threads <= THREAD_LIMIT, "watch ran {threads} threads");
    // Each long line is cut (above); one that comes while every slot is taken is refused
    // at accept and counted as too_many_connections instead of header_too_large. On a
    // busy machine both can come while the idle connections still hold the slots: then
    // one more, sent once a scrape has been served (a slot is free), must be cut as too
    // large.
    let header_too_large = "tcpstall_scrape_errors_total{reason=\"header_too_large\"}";
    let metrics = if sample(&metrics, header_too_large) == 0.0 {
        let _ = writeln!(
            report,
            "endpoint attack: both long lines came while every slot was taken; one more"
        );
        let sent = stream_a_long_request_line(port, LONG_LINE);
        assert!(sent < LONG_LINE, "a 600 MB request line was read whole");
        http_get(port, "/metrics").expect("a scrape after the last long line")
    } else {
        metrics
    };
    for (reason, at_least) in [
        ("too_many_connections", 1.0),
        ("header_too_large", 1.0),
        ("timeout", 1.0),
    ] {
        let counted = sample(
            &metrics,
            &format!("tcpstall_scrape_errors_total{{reason=\"{reason}\"}}"),
        );
        assert!(counted >= at_least, "{reason}: {counted}\n{metrics}");
    }
    assert_eq!(sample(&metrics, "tcpstall_programs_attached"), 4.0);
    let _ = watch.0.kill();
}

#[test]
#[ignore = "needs root and BTF (watch); .ci/run runs it"]
fn running_out_of_descriptors_is_counted_and_survived() {
    let Some(()) = can_watch("the out-of-descriptors test") else {
        return;
    };
    let port = free_port();
    let mut watch = start_watch(port, SERVICE_OPEN_FILES);
    let pid = watch.0.id();
    // Watch left 8 descriptors to spare (prlimit(2) on the running process), far fewer
    // than the connections it serves at once: accept(2) fails with EMFILE.
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("watch's descriptors")
        .count() as libc::rlim_t;
    let limit = libc::rlimit {
        rlim_cur: open + 8,
        rlim_max: SERVICE_OPEN_FILES,
    };
    // SAFETY: prlimit on the child this test started.
    let set = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
    let idle: Vec<TcpStream> = (0..40)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    drop(idle);
    // The descriptors come back as the connections close: served again, the failures
    // counted.
    let mut metrics = None;
    for _ in 0..300 {
        metrics = http_get(port, "/metrics");
        if metrics.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        watch.0.try_wait().expect("watch's status").is_none(),
        "watch ended out of descriptors"
    );
    let metrics = metrics.expect("a scrape after the descriptors came back");
    let emfile = sample(
        &metrics,
        "tcpstall_scrape_errors_total{reason=\"accept_emfile\"}",
    );
    assert!(emfile >= 1.0, "accept_emfile: {emfile}\n{metrics}");
}

/// The descriptor number of `pid`'s listening TCP socket on `port`.
fn listening_descriptor(pid: u32, port: u16) -> Option<i32> {
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            text.lines().skip(1).find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let local_port =
                    u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
                // State 0A: TCP_LISTEN.
                (local_port == port && *fields.get(3)? == "0A")
                    .then(|| fields.get(9).map(|s| s.to_string()))?
            })
        })?;
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .find(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == socket.as_str())
        })?
        .file_name()
        .to_str()?
        .parse()
        .ok()
}

#[test]
#[ignore = "needs root and BTF (watch); .ci/run runs it"]
fn a_listener_that_cannot_accept_ends_watch_with_a_failure() {
    let Some(()) = can_watch("the endpoint failure test") else {
        return;
    };
    let port = free_port();
    let mut watch = start_watch(port, SERVICE_OPEN_FILES);
    let pid = watch.0.id();
    let fd = listening_descriptor(pid, port).expect("watch's listening socket");
    // shutdown(2) through a copy of watch's descriptor (pidfd_getfd(2)) stops the socket
    // listening: accept(2) fails from then on, as on a listener gone bad for good.
    // SAFETY: system calls on descriptors this test owns.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        assert!(
            copy >= 0,
            "pidfd_getfd: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::shutdown(copy, libc::SHUT_RD), 0);
        libc::close(copy);
        libc::close(pidfd);
    }
    let mut status = None;
    for _ in 0..600 {
        status = watch.0.try_wait().expect("watch's status");
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = status.expect("watch still runs without its endpoint");
    let mut stderr = String::new();
    let _ = watch.0.stderr.take().unwrap().read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let about_it: Vec<&str> = stderr.lines().filter(|l| l.contains("endpoint")).collect();
    assert_eq!(about_it.len(), 1, "{stderr}");
    assert!(
        about_it[0].starts_with(
            "tcpstall watch: --prometheus: the metrics endpoint stopped: accepting connections: "
        ),
        "{stderr}"
    );
}

#[test]
fn an_unusable_web_config_file_is_one_line_and_exit_2() {
    let dir = TempDir::new("watch_endpoint", "web_config");
    let missing_key = dir.write("web.yml", b"tls_server_config:\n  cert_file: cert.pem\n");
    let bad_hash = dir.write("users.yml", b"basic_auth_users:\n  prometheus: secret\n");
    let absent = dir.0.join("absent.yml");
    for (file, needle) in [
        (&missing_key, "missing key_file"),
        (&bad_hash, "not a bcrypt hash"),
        (&absent, "absent.yml"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["watch", "--duration", "1", "--prometheus", "0"])
            .arg("--web.config.file")
            .arg(file)
            .output()
            .expect("run tcpstall");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        // Refused before anything is loaded or watched: the one line is all.
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("tcpstall watch: --web.config.file ") && stderr.contains(needle),
            "{stderr}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(["watch", "--duration", "1", "--web.config.file"])
        .arg(&missing_key)
        .output()
        .expect("run tcpstall");
    assert_eq!(
        out.status.code(),
        Some(2),
        "--web.config.file without --prometheus"
    );
}
