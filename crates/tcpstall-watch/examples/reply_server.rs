//! A service that stalls as a holder, and its client, on loopback: the server answers
//! each request line with two writes ("ok " then "reply\n"), so Nagle holds its second
//! write until the client's delayed ACK of the first. Every connection is new, so a
//! sockops program on the server's cgroup reaches the next one.
//!
//!     reply_server serve PORT [CONNECTIONS]      (prints "listening" when ready)
//!     reply_server client PORT CONNECTIONS ROUNDS
//!
//! The client opens CONNECTIONS connections one after the other, ROUNDS requests each,
//! and prints each round trip as `RTT: MS ms`. The server serves CONNECTIONS connections
//! (default 100000) one at a time and exits.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn usage() -> ! {
    eprintln!(
        "usage: reply_server serve PORT [CONNECTIONS] | reply_server client PORT CONNECTIONS ROUNDS"
    );
    std::process::exit(2);
}

fn number<T: std::str::FromStr>(args: &[String], at: usize, default: Option<T>) -> T {
    match args.get(at) {
        Some(text) => text.parse().unwrap_or_else(|_| usage()),
        None => default.unwrap_or_else(|| usage()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port: u16 = number(&args, 1, None);
    match args.first().map(String::as_str) {
        Some("serve") => serve(port, number(&args, 2, Some(100_000))),
        Some("client") => client(port, number(&args, 2, None), number(&args, 3, None)),
        _ => usage(),
    }
}

fn serve(port: u16, connections: u64) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
    println!("listening on 127.0.0.1:{port}");
    std::io::stdout().flush().expect("flush");
    for _ in 0..connections {
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let mut writer = stream.try_clone().expect("clone the stream");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            // Two small writes: the second waits for the ACK of the first (Nagle).
            if writer.write_all(b"ok ").is_err() || writer.write_all(b"reply\n").is_err() {
                break;
            }
            line.clear();
        }
    }
}

fn client(port: u16, connections: u64, rounds: u64) {
    for _ in 0..connections {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut writer = stream.try_clone().expect("clone the stream");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        for _ in 0..rounds {
            let start = Instant::now();
            writer.write_all(b"request\n").expect("write");
            line.clear();
            if reader.read_line(&mut line).expect("read") == 0 {
                eprintln!("reply_server: the server closed the connection");
                std::process::exit(1);
            }
            println!("RTT: {:.3} ms", start.elapsed().as_secs_f64() * 1e3);
        }
    }
}
