//! The egress gate against a direct connection to the same loopback server, in the same run:
//! connection set-up (connect, one request, its answer) and a 100 MB download.
//!
//! Run with `cargo bench -p outpost-host --bench gate`. Targets: set-up through the gate
//! ≤ +1 ms at p50; download ≥ 0.8× the direct throughput. Both are printed at the end, the
//! download twice: from a server as fast as loopback allows (the gate's CPU is the limit:
//! every byte crosses two more sockets) and from one paced at 1 Gbit/s (a network is the
//! limit, as on a real download).
#![allow(missing_docs)]

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outpost_core::wire::Egress;
use outpost_host::{Gate, GatePolicy};

const DOWNLOAD: usize = 100 * 1000 * 1000;

/// How fast `GET /paced` sends: 1 Gbit/s.
const PACED_BYTES_PER_SEC: usize = 125_000_000;

/// A server that answers `GET /small` with 2 bytes, `GET /big` with [`DOWNLOAD`] bytes as
/// fast as it can, and `GET /paced` with them at [`PACED_BYTES_PER_SEC`].
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for stream in listener.incoming().flatten() {
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let _ = stream.set_nodelay(true);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let paced = head.windows(6).any(|w| w == b"/paced");
                let big = paced || head.windows(4).any(|w| w == b"/big");
                let len = if big { DOWNLOAD } else { 2 };
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                if big {
                    let started = Instant::now();
                    let mut sent = 0;
                    while sent < len {
                        let n = (len - sent).min(chunk.len());
                        if stream.write_all(&chunk[..n]).is_err() {
                            return;
                        }
                        sent += n;
                        if paced {
                            let due =
                                Duration::from_secs_f64(sent as f64 / PACED_BYTES_PER_SEC as f64);
                            if let Some(wait) = due.checked_sub(started.elapsed()) {
                                std::thread::sleep(wait);
                            }
                        }
                    }
                } else {
                    let _ = stream.write_all(b"ok");
                }
            });
        }
    });
    port
}

/// Opens a connection to the server, through the gate (a CONNECT tunnel) or not.
fn open(port: u16, gate: Option<&Gate>) -> TcpStream {
    match gate {
        None => {
            let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_nodelay(true).unwrap();
            s
        }
        Some(gate) => {
            let mut s = TcpStream::connect(gate.addr()).unwrap();
            s.set_nodelay(true).unwrap();
            write!(s, "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").unwrap();
            let mut answer = [0u8; 39];
            s.read_exact(&mut answer).unwrap();
            assert!(answer.starts_with(b"HTTP/1.1 200"));
            s
        }
    }
}

/// One request on a new connection, its whole answer read.
fn fetch(port: u16, gate: Option<&Gate>, path: &str) -> usize {
    let mut s = open(port, gate);
    write!(s, "GET {path} HTTP/1.1\r\n\r\n").unwrap();
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 16];
    let mut head_end = None;
    let mut want = usize::MAX;
    let mut head = Vec::new();
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
        if head_end.is_none() {
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                head_end = Some(i + 4);
                let text = String::from_utf8_lossy(&head[..i]).to_lowercase();
                let len: usize = text
                    .split("content-length: ")
                    .nth(1)
                    .and_then(|r| r.split("\r\n").next())
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap();
                want = i + 4 + len;
            }
        }
        if total >= want {
            break;
        }
    }
    total
}

fn gate() -> Gate {
    Gate::start(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        GatePolicy {
            egress: Egress::Allowlist {
                hosts: vec!["127.0.0.1".into()],
            },
            context: "bench".into(),
        },
        Arc::new(|_| {}),
    )
    .unwrap()
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn bench(c: &mut Criterion) {
    let port = server();
    let gate = gate();
    let mut g = c.benchmark_group("gate_setup");
    g.bench_function("direct", |b| b.iter(|| fetch(port, None, "/small")));
    g.bench_function("through_gate", |b| {
        b.iter(|| fetch(port, Some(&gate), "/small"))
    });
    g.finish();
    let mut g = c.benchmark_group("gate_download_100MB");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(DOWNLOAD as u64));
    g.bench_function("direct", |b| b.iter(|| fetch(port, None, "/big")));
    g.bench_function("through_gate", |b| {
        b.iter(|| fetch(port, Some(&gate), "/big"))
    });
    g.finish();
    // The figures the targets speak of, measured interleaved in this run.
    let (mut direct, mut gated) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        direct.push(median(200, || {
            fetch(port, None, "/small");
        }));
        gated.push(median(200, || {
            fetch(port, Some(&gate), "/small");
        }));
    }
    direct.sort();
    gated.sort();
    let (d, g) = (direct[2], gated[2]);
    println!(
        "set-up p50: direct {d:?}, through the gate {g:?}, +{:?} (target ≤ +1 ms)",
        g.saturating_sub(d)
    );
    for (path, what) in [
        ("/big", "as fast as loopback allows"),
        ("/paced", "paced at 1 Gbit/s"),
    ] {
        let time = |via: Option<&Gate>| {
            let t = Instant::now();
            fetch(port, via, path);
            t.elapsed()
        };
        let (mut d, mut g) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            d.push(time(None));
            g.push(time(Some(&gate)));
        }
        d.sort();
        g.sort();
        println!(
            "100 MB download, {what}: direct {:?}, through the gate {:?}: {:.2}× the direct throughput (target ≥ 0.8×)",
            d[1],
            g[1],
            d[1].as_secs_f64() / g[1].as_secs_f64()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
