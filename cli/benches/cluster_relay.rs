//! A terminal relayed between two nodes against the same terminal reached directly
//! (docs/CLUSTER.md §3, *Relaying terminals and live output*): two nodes over one PostgreSQL
//! database, a daemon with the pty executor connected to node B, and two terminals on it —
//! one opened through B with its viewer on B (`direct`), one opened through A with its viewer
//! on A (`through_another_node`: A relays the opening and joins the viewer's WebSocket to B's
//! byte for byte).
//!
//! - `cluster_relay/keystroke_echo/{direct,through_another_node}`: one byte sent by the viewer
//!   until the kernel's echo of it (`stty raw`, echo on, `cat > /dev/null`) comes back.
//!   Criterion benches the mean; p50 and p99 over 1,000 keystrokes each, taken in alternating
//!   blocks so the machine's drift falls on both, and their ratios are printed.
//! - `cluster_relay/output_20mb/{direct,through_another_node}`: 20 MB written on each terminal
//!   (`head -c 20000000 /dev/zero` after `stty raw -echo`), from the keystrokes until the
//!   viewer has every byte.
//!
//! Each node, the daemon, the viewers and PostgreSQL share this machine's cores. Run with
//! `cargo bench -p outpost --bench cluster_relay` (about a minute).
#![allow(missing_docs)]

mod common;

#[path = "../../server/tests/common/postgres.rs"]
mod postgres;

use std::time::{Duration, Instant};

use common::{Daemon, World, keystroke};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outpost_core::executor::Registry;
use outpost_core::grant::{ConfinementPolicy, LocalPolicy};
use outpost_daemon::HostKind;
use outpost_exec_pty::PtyExecutor;
use outpost_server::Database;
use serde_json::{Value, json};
use tungstenite::Message;
use tungstenite::stream::MaybeTlsStream;

type Socket = common::ViewerSocket;

/// Raw mode with the kernel's echo on, and a program that reads the keys.
const ECHO_SETUP: &str = "stty raw; echo ready-$((6*7)); cat > /dev/null\r";
/// Raw mode with no echo, then the bytes `output_20mb` reads.
const WRITER: &str = "stty raw -echo; exec head -c 20000000 /dev/zero\r";
const OUTPUT_BYTES: u64 = 20_000_000;
/// Keystrokes per variant for the percentiles.
const KEYSTROKES: usize = 1_000;
/// A read that waits longer than this fails the bench instead of hanging it.
const READ_LIMIT: Duration = Duration::from_secs(60);

/// Node A, node B (box is connected to it) and the daemon.
struct Cluster {
    a: World,
    b: World,
    _daemon: Daemon,
}

impl Cluster {
    fn new() -> Cluster {
        let database = Database::Postgres(
            postgres::shared().database(&format!("relay_bench_{}", std::process::id())),
        );
        let a = World::new_on("relay-bench-a", database);
        let b = a.another_node("relay-bench-b");
        let mut registry = Registry::new();
        registry.register(Box::new(PtyExecutor::default()));
        // The operator's terminals run as the owner, unsandboxed (the owner's policy allows
        // it): what is measured is the relay, and the sandbox's helper is the `outpost`
        // binary, not this bench's.
        let daemon = Daemon::start_with_policy(
            HostKind::Tokio,
            b.dir.join("home"),
            "box",
            &b.join,
            8,
            registry,
            LocalPolicy {
                confinement: ConfinementPolicy::OperatorMayOptOut,
                ..LocalPolicy::default()
            },
        );
        b.online("box");
        // Node A learns from B's heartbeat (every 2 s) where box is connected.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !a.get("/v1/nodes")["nodes"].as_array().is_some_and(|nodes| {
            nodes.iter().any(|n| {
                n["this"] == false
                    && n["sessions"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| s["name"] == "box"))
            })
        }) {
            assert!(Instant::now() < deadline, "A never learnt where box is");
            std::thread::sleep(Duration::from_millis(50));
        }
        Cluster {
            a,
            b,
            _daemon: daemon,
        }
    }
}

/// A terminal on box opened through `node`, its viewer on `node`, past `live`.
fn terminal(node: &World) -> Socket {
    let opened = node.post_to(
        "/v1/execution-contexts/box/terminals",
        &json!({"cols": 80, "rows": 24}),
    );
    let field = |k: &str| {
        opened[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k}: {opened}"))
    };
    let base = node.url.strip_prefix("http").expect("an http URL");
    let url = format!(
        "ws{base}/v1/terminals/{}/connect?ticket={}",
        field("terminalId"),
        field("ticket")
    );
    let (mut socket, _) = tungstenite::connect(url).expect("the viewer socket opens");
    if let MaybeTlsStream::Plain(tcp) = socket.get_ref() {
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(READ_LIMIT)).unwrap();
    }
    loop {
        if let Message::Text(text) = socket.read().expect("the viewer's messages") {
            let said: Value = serde_json::from_str(&text).expect("JSON");
            if said["type"] == "live" {
                return socket;
            }
        }
    }
}

fn type_keys(socket: &mut Socket, keys: &str) {
    socket
        .send(Message::Binary(keys.as_bytes().to_vec().into()))
        .expect("keys sent");
}

/// Reads until `needle` was shown.
fn until_shown(socket: &mut Socket, needle: &[u8]) {
    let mut seen = Vec::new();
    let mut said = Vec::new();
    while !seen.windows(needle.len()).any(|w| w == needle) {
        match socket.read() {
            Ok(Message::Binary(bytes)) => seen.extend_from_slice(&bytes),
            Ok(Message::Text(text)) => said.push(text.to_string()),
            Ok(_) => {}
            Err(e) => panic!(
                "the terminal's bytes: {e}; shown {:?}; said {said:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
}

/// From the keystrokes until [`OUTPUT_BYTES`] NUL bytes were read (a new terminal each time:
/// `head` ends its shell).
fn output_once(node: &World) -> Duration {
    let mut socket = terminal(node);
    let start = Instant::now();
    type_keys(&mut socket, WRITER);
    let mut zeros = 0u64;
    while zeros < OUTPUT_BYTES {
        if let Message::Binary(bytes) = socket.read().expect("the output") {
            zeros += bytes.iter().filter(|b| **b == 0).count() as u64;
        }
    }
    start.elapsed()
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    (at(50).as_secs_f64() * 1e6, at(99).as_secs_f64() * 1e6)
}

fn relay(c: &mut Criterion) {
    let cluster = Cluster::new();
    let mut direct = terminal(&cluster.b);
    let mut relayed = terminal(&cluster.a);
    for (name, socket) in [("direct", &mut direct), ("relayed", &mut relayed)] {
        println!("cluster_relay: setting up the {name} terminal");
        type_keys(socket, ECHO_SETUP);
        until_shown(socket, b"ready-42");
    }
    let mut group = c.benchmark_group("cluster_relay");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("keystroke_echo/direct", |b| {
        b.iter(|| keystroke(&mut direct))
    });
    group.bench_function("keystroke_echo/through_another_node", |b| {
        b.iter(|| keystroke(&mut relayed))
    });
    let (mut direct_samples, mut relayed_samples) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        direct_samples.extend((0..KEYSTROKES / 10).map(|_| keystroke(&mut direct)));
        relayed_samples.extend((0..KEYSTROKES / 10).map(|_| keystroke(&mut relayed)));
    }
    let (direct50, direct99) = percentiles(direct_samples);
    let (relayed50, relayed99) = percentiles(relayed_samples);
    println!(
        "cluster_relay/keystroke_echo ({KEYSTROKES} each, alternating blocks): direct p50 \
         {direct50:.0} us p99 {direct99:.0} us; through another node p50 {relayed50:.0} us \
         p99 {relayed99:.0} us; relayed/direct p50 {:.2}x p99 {:.2}x",
        relayed50 / direct50,
        relayed99 / direct99
    );
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Bytes(OUTPUT_BYTES));
    group.bench_function("output_20mb/direct", |b| b.iter(|| output_once(&cluster.b)));
    group.bench_function("output_20mb/through_another_node", |b| {
        b.iter(|| output_once(&cluster.a))
    });
    group.finish();
    // Pairs back to back, in alternating order.
    let (mut direct_total, mut relayed_total) = (Duration::ZERO, Duration::ZERO);
    for pair in 0..6 {
        if pair % 2 == 0 {
            direct_total += output_once(&cluster.b);
            relayed_total += output_once(&cluster.a);
        } else {
            relayed_total += output_once(&cluster.a);
            direct_total += output_once(&cluster.b);
        }
    }
    let mb_s = |d: Duration| 6.0 * OUTPUT_BYTES as f64 / d.as_secs_f64() / 1e6;
    println!(
        "cluster_relay/output_20mb (6 alternating pairs): direct {:.0} MB/s, through another \
         node {:.0} MB/s, relayed/direct {:.2}x",
        mb_s(direct_total),
        mb_s(relayed_total),
        mb_s(relayed_total) / mb_s(direct_total)
    );
}

criterion_group!(benches, relay);
criterion_main!(benches);
