//! Slow clients cannot hold the server: a request body has a deadline (408
//! `request_timeout`, its connection closed), one source address has at most so many bodies
//! in progress (429 `rate_limited` before any of one more is read), and a request head that
//! does not arrive in time closes its connection (PROTOCOL §11.6).

mod common;

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{TestServer, connect_from, http, parse_answer, temp_dir};
use outpost_server::Limits;

/// A signed route: it reads the body before it can check the signature.
const TICKET: &str = "/v1/execution-contexts/connect-ticket";

/// Sends a head announcing a body of `declared` bytes from `source`, then one byte.
fn slow_body(source: Ipv4Addr, addr: SocketAddr, path: &str, declared: u64) -> TcpStream {
    let mut stream = connect_from(source, addr);
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n{{"
    );
    stream
        .write_all(head.as_bytes())
        .expect("the head goes out");
    stream
}

/// Writes `byte` to `stream` every `every` until stopped or refused.
fn drip(stream: &TcpStream, byte: u8, every: Duration) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut stream = stream.try_clone().expect("a second handle");
    let stopped = stop.clone();
    let thread = std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            if stream.write_all(&[byte]).is_err() {
                return;
            }
            // Time itself: a slow client, a byte every `every`.
            std::thread::sleep(every);
        }
    });
    (stop, thread)
}

/// Reads until the server closes the connection (or `limit` passes): the bytes, and
/// whether it was closed.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    stream.set_read_timeout(Some(limit)).expect("a timeout");
    let mut raw = Vec::new();
    let closed = match stream.read_to_end(&mut raw) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    (raw, closed)
}

/// The server's count of request bodies still arriving.
fn bodies_in_progress(server: &TestServer) -> u64 {
    let answer = http(server.addr(), "GET", "/metrics", &[], b"");
    String::from_utf8_lossy(&answer.body)
        .lines()
        .find_map(|l| l.strip_prefix("outpost_request_bodies_in_progress "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the gauge is shown")
}

/// Polls until the server counts `n` bodies in progress.
fn await_bodies(server: &TestServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = bodies_in_progress(server);
        if now == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} bodies in progress, not {n}"
        );
        // The poll's pace: the gauge is read again.
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_body_sent_a_byte_at_a_time_is_answered_408_and_its_connection_closed() {
    let limits = Limits {
        body_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = TestServer::start_limited(&temp_dir("slow-body"), limits);
    let addr = server.addr();
    let started = Instant::now();
    let mut stream = slow_body(Ipv4Addr::new(127, 0, 0, 2), addr, TICKET, 100_000);
    let (stop, dripper) = drip(&stream, b' ', Duration::from_millis(200));
    // 1 s, and a second for the declared length at 1 MiB/s.
    let (raw, closed) = read_until_closed(&mut stream, Duration::from_secs(8));
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    dripper.join().expect("the dripper ends");
    let answer = parse_answer(&raw);
    assert_eq!(answer.status, 408, "{}", String::from_utf8_lossy(&raw));
    assert_eq!(answer.code(), "request_timeout");
    assert!(answer.json()["error"]["message"].is_string());
    assert!(closed, "the connection stays open after the 408");
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(6),
        "answered after {waited:?}"
    );
    await_bodies(&server, 0);
    // The server goes on serving.
    assert_eq!(http(addr, "GET", "/healthz", &[], b"").status, 200);
    server.stop();
}

#[test]
fn one_address_holds_at_most_its_bodies_in_progress_and_others_are_not_held_up() {
    let limits = Limits {
        body_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let cap = limits.bodies_per_address;
    let server = TestServer::start_limited(&temp_dir("slow-bodies"), limits);
    let addr = server.addr();
    let source = Ipv4Addr::new(127, 0, 0, 3);
    // The probe of issue 29: a hundred connections from one address, each announcing
    // 100,000 bytes and trickling them.
    let started = Instant::now();
    let mut streams: Vec<TcpStream> = (0..100)
        .map(|_| slow_body(source, addr, TICKET, 100_000))
        .collect();
    let drips: Vec<_> = streams
        .iter()
        .map(|s| drip(s, b' ', Duration::from_millis(300)))
        .collect();
    // Another address is not held up by them.
    let other = common::http_from(
        Ipv4Addr::new(127, 0, 0, 4),
        addr,
        "POST",
        TICKET,
        &[],
        b"{}",
    );
    assert_ne!(
        other.status,
        429,
        "{}",
        String::from_utf8_lossy(&other.body)
    );
    let mut statuses = Vec::new();
    for stream in &mut streams {
        let (raw, closed) = read_until_closed(stream, Duration::from_secs(10));
        let answer = parse_answer(&raw);
        assert!(
            closed,
            "a connection stays open after its {}",
            answer.status
        );
        if answer.status == 429 {
            assert_eq!(answer.code(), "rate_limited");
            assert!(answer.header("retry-after").is_some());
        } else {
            assert_eq!(answer.code(), "request_timeout");
        }
        statuses.push(answer.status);
    }
    let waited = started.elapsed();
    for (stop, dripper) in drips {
        stop.store(true, Ordering::Relaxed);
        dripper.join().expect("the dripper ends");
    }
    // At most `cap` bodies were read (the route's own rate limit may refuse a few of those
    // too, also as 429 `rate_limited`, before reading them); every other was refused unread.
    let timed_out = statuses.iter().filter(|s| **s == 408).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert!((1..=cap).contains(&timed_out), "{statuses:?}");
    assert_eq!(timed_out + refused, 100, "{statuses:?}");
    assert!(
        waited < Duration::from_secs(8),
        "all answered after {waited:?}"
    );
    await_bodies(&server, 0);
    server.stop();
}

#[test]
fn a_body_in_progress_is_counted_until_its_client_goes() {
    let limits = Limits {
        bodies_per_address: 2,
        ..Limits::default()
    };
    let server = TestServer::start_limited(&temp_dir("slow-count"), limits);
    let addr = server.addr();
    let source = Ipv4Addr::new(127, 0, 0, 5);
    let first = slow_body(source, addr, TICKET, 1000);
    let second = slow_body(source, addr, TICKET, 1000);
    await_bodies(&server, 2);
    // A third from the same address is refused at once, before its body.
    let started = Instant::now();
    let mut third = slow_body(source, addr, TICKET, 1000);
    let (raw, closed) = read_until_closed(&mut third, Duration::from_secs(5));
    let answer = parse_answer(&raw);
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (429, "rate_limited")
    );
    assert!(closed && started.elapsed() < Duration::from_secs(3));
    drop(first);
    drop(second);
    await_bodies(&server, 0);
    // The address's bodies are its own again.
    let fourth = slow_body(source, addr, TICKET, 1000);
    await_bodies(&server, 1);
    drop(fourth);
    await_bodies(&server, 0);
    server.stop();
}

#[test]
fn a_head_sent_a_byte_at_a_time_has_its_connection_closed() {
    let limits = Limits {
        head_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = TestServer::start_limited(&temp_dir("slow-head"), limits);
    let addr = server.addr();
    let started = Instant::now();
    let mut stream = connect_from(Ipv4Addr::new(127, 0, 0, 6), addr);
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .expect("the head starts");
    let (stop, dripper) = drip(&stream, b'a', Duration::from_millis(200));
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(8));
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    dripper.join().expect("the dripper ends");
    assert!(closed, "the connection stays open");
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
    // An idle kept-alive connection goes too.
    let mut idle = TcpStream::connect(addr).expect("connect");
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
        .expect("a request");
    let started = Instant::now();
    let (raw, closed) = read_until_closed(&mut idle, Duration::from_secs(8));
    assert_eq!(parse_answer(&raw).status, 200);
    assert!(closed && started.elapsed() < Duration::from_secs(5));
    server.stop();
}
