//! A line-echo server and its client on loopback, in one process: the seed 002 exchange
//! (and its variants) that the shipped captures were recorded from.
//!
//!     cargo run --release --example echo_pair -- two-writes [ROUNDS] [PORT]
//!
//! Modes: two-writes ("hello " then "world\n", then read the echo), one-write,
//! nodelay (two writes with TCP_NODELAY), server-sleep (one write; the server waits
//! 40 ms before its one-write reply), bulk (the client sends BYTES, the server answers
//! one byte; ROUNDS is the byte count in that mode). The two ends of two-writes also run
//! apart, as two processes: serve (the echo server alone, for one connection; it prints
//! "listening" once it accepts) and client (the two-writes client alone).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// One line on standard error and exit status 1.
fn fail(message: &str) -> ! {
    eprintln!("echo_pair: {message}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args
        .first()
        .map(String::as_str)
        .unwrap_or("two-writes")
        .to_string();
    let count: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let port: u16 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8000);
    let known = [
        "two-writes",
        "one-write",
        "nodelay",
        "server-sleep",
        "bulk",
        "serve",
        "client",
    ];
    if !known.contains(&mode.as_str()) {
        eprintln!(
            "echo_pair: unknown mode {mode:?}; one of {}",
            known.join(", ")
        );
        std::process::exit(2);
    }

    if mode == "client" {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| fail(&format!("cannot connect to 127.0.0.1:{port}: {e}")));
        exchange_lines(stream, "two-writes", count);
        return;
    }
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap_or_else(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            fail(&format!(
                "port {port} is in use; give another as the third argument: echo_pair {mode} {count} PORT"
            ))
        }
        fail(&format!("cannot listen on 127.0.0.1:{port}: {e}"))
    });
    if mode == "serve" {
        println!("listening on 127.0.0.1:{port}");
        std::io::stdout().flush().expect("flush");
        let (stream, _) = listener.accept().expect("accept");
        serve_lines(stream, false);
        return;
    }
    let server_mode = mode.clone();
    let server = thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        if server_mode == "bulk" {
            serve_bulk(stream);
        } else {
            serve_lines(stream, server_mode == "server-sleep");
        }
    });

    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    if mode == "bulk" {
        let started = Instant::now();
        send_bulk(&mut stream, count);
        println!(
            "bulk: {count} bytes in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        drop(stream);
    } else {
        exchange_lines(stream, &mode, count);
    }
    server.join().expect("server thread");
}

/// The client: `count` lines sent as the mode says, each echo read back and timed.
fn exchange_lines(mut stream: TcpStream, mode: &str, count: u64) {
    if mode == "nodelay" {
        stream.set_nodelay(true).expect("TCP_NODELAY");
    }
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    for _ in 0..count {
        let started = Instant::now();
        if mode == "one-write" || mode == "server-sleep" {
            stream.write_all(b"hello world\n").expect("write");
        } else {
            stream.write_all(b"hello ").expect("write");
            stream.write_all(b"world\n").expect("write");
        }
        let mut line = String::new();
        reader.read_line(&mut line).expect("read");
        println!(
            "RTT: {:.3} ms, receive: {}",
            started.elapsed().as_secs_f64() * 1e3,
            line.trim_end()
        );
    }
}

fn serve_lines(stream: TcpStream, sleep_first: bool) {
    let mut out = stream.try_clone().expect("clone");
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let Ok(line) = line else { break };
        if sleep_first {
            thread::sleep(Duration::from_millis(40));
        }
        if out.write_all(format!("{line}\n").as_bytes()).is_err() {
            break;
        }
    }
}

fn send_bulk(stream: &mut TcpStream, bytes: u64) {
    let chunk = vec![0x5a; 1 << 16];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        stream.write_all(&chunk[..n]).expect("write");
        left -= n as u64;
    }
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let mut reply = [0u8; 1];
    stream.read_exact(&mut reply).expect("reply");
}

fn serve_bulk(mut stream: TcpStream) {
    let mut buf = vec![0; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let _ = stream.write_all(b"k");
}
