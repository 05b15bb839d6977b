//! Issue 29's probes, all at once, against the real `outpost serve` with its default limits:
//! a hundred clients trickling request bodies from one address, six 63 MiB bundle uploads in
//! parallel, and a few thousand queued executions (a hundred of them 480 KiB inline
//! capabilities) for two offline machines. The server's resident memory is read from
//! `/proc/PID/status` all the while; its peak stays under [`CEILING_MIB`] (with a wide
//! margin: the figures measured are printed).

mod common;

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Daemon, Server, shell_capability, temp_dir};
use serde_json::json;
use sha2::Digest as _;

/// The most resident memory the server may reach while every probe runs, in MiB.
const CEILING_MIB: u64 = 384;

/// The size of each uploaded bundle.
const UPLOAD_BYTES: usize = 63 << 20;

/// A status line's field from `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A TCP connection to `addr` from the loopback address `source`.
fn connect_from(source: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("a socket");
    bind(&fd, &SocketAddrV4::new(source, 0)).expect("bind to the source address");
    connect(&fd, &addr).expect("connect");
    TcpStream::from(fd)
}

/// The status code of a raw answer (0 when there is none).
fn status_of(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// How a hundred slow bodies ended.
#[derive(Debug, Default)]
struct SlowEnds {
    timed_out: usize,
    refused: usize,
    closed_unanswered: usize,
    still_open: usize,
}

/// A hundred connections from 127.0.0.2, each announcing a 100,000-byte body and sending a
/// byte a second for 13 s, then waiting 10 s more for the server to end them.
fn slow_bodies(addr: SocketAddr) -> SlowEnds {
    let source = Ipv4Addr::new(127, 0, 0, 2);
    let mut streams: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = connect_from(source, addr);
            let head = format!(
                "POST /v1/execution-contexts/connect-ticket HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{{"
            );
            s.write_all(head.as_bytes()).expect("a head");
            s
        })
        .collect();
    // 10 s for a body and a second for its declared length: trickle a little longer. Time
    // itself: these clients must be slow, a byte a second.
    for _ in 0..13 {
        for s in &mut streams {
            let _ = s.write_all(b" ");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let mut ends = SlowEnds::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    for mut s in streams {
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .expect("a timeout");
        let mut raw = Vec::new();
        match s.read_to_end(&mut raw) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(_) => {
                ends.still_open += 1;
                continue;
            }
        }
        match status_of(&raw) {
            408 => ends.timed_out += 1,
            429 => ends.refused += 1,
            0 => ends.closed_unanswered += 1,
            other => panic!("a slow body was answered {other}"),
        }
    }
    ends
}

/// The bytes of an upload's bundle: a 63 MiB data file of `fill` (base64url text), written to
/// `out` in pieces.
fn write_bundle(fill: u8, mut out: impl FnMut(&[u8]) -> bool) {
    let head = b"{\"type\":\"outpost.bundle\",\"version\":1,\"manifest\":\"name: big\\nenvironment: shell\\nlifecycle: oneshot\\nentry: run.sh\\n\",\"files\":[{\"path\":\"run.sh\",\"contentB64\":\"ZWNobyBoaQo\"},{\"path\":\"data.bin\",\"contentB64\":\"";
    let tail = b"\"}]}";
    let mut left = (UPLOAD_BYTES - head.len() - tail.len()) / 4 * 4;
    if !out(head) {
        return;
    }
    let piece = vec![fill; 1 << 20];
    while left > 0 {
        let n = left.min(piece.len());
        if !out(&piece[..n]) {
            return;
        }
        left -= n;
    }
    out(tail);
}

/// Uploads the bundle of `fill` until it is stored (a busy server answers 503 first); returns
/// how many tries it took.
fn upload(addr: SocketAddr, admin: &str, fill: u8) -> u32 {
    let mut hasher = sha2::Sha256::new();
    let mut size = 0;
    write_bundle(fill, |piece| {
        hasher.update(piece);
        size += piece.len();
        true
    });
    let sha = hex::encode(hasher.finalize());
    let deadline = Instant::now() + Duration::from_secs(300);
    for tries in 1.. {
        assert!(
            Instant::now() < deadline,
            "the upload of {fill} never got in"
        );
        let mut s = TcpStream::connect(addr).expect("connect");
        let head = format!(
            "PUT /v1/bundles/{sha} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {admin}\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n"
        );
        if s.write_all(head.as_bytes()).is_ok() {
            write_bundle(fill, |piece| s.write_all(piece).is_ok());
        }
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("a timeout");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        match status_of(&raw) {
            201 => return tries,
            // Busy (or the refusal lost to the reset of a body it did not read): again, after
            // a retry's pause (the next try is the check; a 503 names no event to wait on).
            503 | 0 => std::thread::sleep(Duration::from_millis(500)),
            other => panic!(
                "an upload was answered {other}: {}",
                String::from_utf8_lossy(&raw)
            ),
        }
    }
    unreachable!()
}

/// A 480 KiB inline capability.
fn big_capability(i: usize) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut capability = shell_capability("big", "echo big");
    let data = vec![(i % 251) as u8; 360 * 1024];
    capability["files"]
        .as_array_mut()
        .expect("files")
        .push(json!({"path": "data.bin", "contentB64": b64.encode(data)}));
    capability
}

/// Queues executions for the offline machines: a hundred big ones, then small ones, until
/// 3,000 were asked. Returns (accepted, refused with queue_full).
fn queue(server: &Server) -> (usize, usize) {
    let (mut accepted, mut refused) = (0, 0);
    let mut ask = |capability: serde_json::Value, context: &str| {
        let (status, answer) = server.api(
            "POST",
            "/v1/executions",
            Some(json!({"capability": capability, "context": context,
                        "whenOffline": "queue", "queueMinutes": 60})),
        );
        match (status, answer["error"]["code"].as_str()) {
            (201, _) => accepted += 1,
            (429, Some("queue_full")) => refused += 1,
            other => panic!("an execute was answered {other:?}: {answer}"),
        }
    };
    for i in 0..100 {
        ask(big_capability(i), "box-a");
    }
    for i in 0..2900 {
        let context = if i % 2 == 0 { "box-a" } else { "box-b" };
        ask(shell_capability("small", &format!("echo {i}")), context);
    }
    (accepted, refused)
}

/// Removes a folder when dropped (the uploads leave a few hundred MiB).
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_servers_memory_stays_bounded_while_every_probe_runs_at_once() {
    let dir = temp_dir("resources");
    // Dropped after the server (declared before it), so its files are closed first.
    let _removed = Removed(dir.clone());
    let server = Server::start(&dir.join("server"), 0);
    for name in ["box-a", "box-b"] {
        let mut daemon = Daemon::start(&dir.join(name), name, Some(&server.join), "tokio");
        server.wait_context(name, "the daemon to come online", |c| c["online"] == true);
        daemon.kill();
        server.wait_context(name, "the daemon to go", |c| c["online"] == false);
    }
    let pid = server.child.id();
    let addr: SocketAddr = server
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("an address");
    let baseline = status_kib(pid, "VmRSS:");

    let peak = Arc::new(AtomicU64::new(baseline));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(status_kib(pid, "VmRSS:"), Ordering::Relaxed);
                // The sampling rate: time itself, the RSS is read every 20 ms.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let started = Instant::now();
    let slow = std::thread::spawn(move || slow_bodies(addr));
    let uploads: Vec<_> = (0..6u8)
        .map(|i| {
            let admin = server.admin.clone();
            std::thread::spawn(move || upload(addr, &admin, b"ABCDEF"[usize::from(i)]))
        })
        .collect();
    let (accepted, refused) = queue(&server);
    let tries: Vec<u32> = uploads
        .into_iter()
        .map(|u| u.join().expect("an upload"))
        .collect();
    let slow = slow.join().expect("the slow bodies");
    sampling.store(false, Ordering::Relaxed);
    sampler.join().expect("the sampler");
    let peak = peak.load(Ordering::Relaxed);
    let high_water = status_kib(pid, "VmHWM:");
    println!(
        "server RSS: {} MiB at rest, {} MiB at the peak sampled, VmHWM {} MiB (ceiling {CEILING_MIB} MiB); \
         {:?} for all probes; executions queued {accepted}, refused {refused}; uploads' tries {tries:?}; \
         slow bodies: {slow:?}",
        baseline / 1024,
        peak / 1024,
        high_water / 1024,
        started.elapsed(),
    );
    assert_eq!((accepted, refused), (1000, 2000));
    assert_eq!(slow.still_open, 0, "{slow:?}");
    assert!(slow.timed_out <= 32, "{slow:?}");
    assert!(
        high_water / 1024 < CEILING_MIB,
        "the server reached {} MiB",
        high_water / 1024
    );
}
