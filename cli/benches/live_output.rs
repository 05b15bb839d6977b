//! A run's output, live, through the running system over loopback (a server and a daemon in
//! this process, a shell capability, followers on `GET /v1/executions/{id}/output`), each
//! figure beside its baseline from the same run:
//!
//! - `first_byte`: from the run's first write to the follower holding it. The run writes its
//!   own wall-clock time (`date +%s%N`) as its first line; a follower connected before the
//!   run starts reads it and takes the difference from its own clock. The baseline is the same
//!   line read by a parent straight from a child's pipe (`sh -c 'date +%s%N'`): what any
//!   program pays to see a child's write. Target: p50 ≤ 10 ms. Criterion reports the mean;
//!   p50 and p99 over 200 runs each, and their ratio, are printed.
//! - `stalled_follower`: a run writing 900 kB in 9 bursts 20 ms apart, timed by the machine
//!   (`timing.executeMs`), with no follower against with one follower that connects and then
//!   never reads: the server never waits for a follower, so the ratio should be 1.
//!
//! Run with `cargo bench -p outpost --bench live_output` (about a minute).
#![allow(missing_docs)]

mod common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Daemon, World};
use criterion::{Criterion, criterion_group, criterion_main};
use outpost_core::executor::Registry;
use outpost_core::grant::{ConfinementPolicy, LocalPolicy};
use outpost_daemon::HostKind;
use outpost_exec_shell::{ShellConfig, ShellExecutor};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs per variant for the percentiles.
const SAMPLES: usize = 200;

fn capability(name: &str, script: &str) -> Value {
    use base64::Engine as _;
    json!({
        "kind": "inline",
        "manifest": format!("name: {name}\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\n"),
        "files": [{"path": "run.sh", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script)}],
    })
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A follower of `id`'s output over a plain socket: the response's lines as they come.
fn follow(world: &World, id: &str) -> BufReader<TcpStream> {
    let address = world.url.trim_start_matches("http://");
    let mut socket = TcpStream::connect(address).unwrap();
    socket.set_nodelay(true).unwrap();
    let request = format!(
        "GET /v1/executions/{id}/output HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {}\r\naccept: text/event-stream\r\nconnection: close\r\n\r\n",
        world.admin
    );
    std::io::Write::write_all(&mut socket, request.as_bytes()).unwrap();
    BufReader::new(socket)
}

/// The first `output` event's text, read from `stream`.
fn first_output(stream: &mut BufReader<TcpStream>) -> String {
    let mut event = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stream.read_line(&mut line).unwrap() > 0, "the stream ended");
        let line = line.trim_end();
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ")
            && event == "output"
        {
            let piece: Value = serde_json::from_str(data).unwrap();
            return piece["text"].as_str().unwrap().to_owned();
        }
    }
}

/// One run through the system: nanoseconds from its first write to the follower having it.
fn relayed(world: &World) -> u128 {
    let started = world.post(&json!({
        "capability": capability("first-byte", "date +%s%N\n"),
        "context": "box",
    }));
    let id = started["executionId"].as_str().unwrap().to_owned();
    let mut stream = follow(world, &id);
    let text = first_output(&mut stream);
    let seen = now_ns();
    let written: u128 = text.trim().parse().unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    seen.saturating_sub(written)
}

/// The baseline: a child's first write read from its pipe.
fn piped() -> u128 {
    let mut child = std::process::Command::new("sh")
        .args(["-c", "date +%s%N"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let seen = now_ns();
    child.wait().unwrap();
    seen.saturating_sub(line.trim().parse().unwrap())
}

/// The machine's `executeMs` of one run writing 900 kB, with a stalled follower or none.
fn burst_run(world: &World, stalled: bool) -> u64 {
    let script = "i=0; while [ $i -lt 9 ]; do head -c 100000 /dev/zero | tr '\\0' x; sleep 0.02; i=$((i+1)); done\n";
    let started = world.post(&json!({
        "capability": capability("bursts", script),
        "context": "box",
    }));
    let id = started["executionId"].as_str().unwrap().to_owned();
    // Connected and never read: its socket's buffers fill and stay full.
    let follower = stalled.then(|| follow(world, &id));
    let ended = world.get(&format!("/v1/executions/{id}?waitSecs=60"));
    assert_eq!(ended["status"], "exited", "{ended}");
    drop(follower);
    ended["timing"]["executeMs"].as_u64().unwrap()
}

fn percentile(sorted: &[u128], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1e6
}

fn bench(c: &mut Criterion) {
    let world = World::new("live-output");
    let mut registry = Registry::new();
    registry.register(Box::new(ShellExecutor::new(ShellConfig::default())));
    let _daemon = Daemon::start_with_policy(
        HostKind::Tokio,
        world.dir.join("box"),
        "box",
        &world.join,
        2,
        registry,
        LocalPolicy {
            confinement: ConfinementPolicy::OperatorMayOptOut,
            ..LocalPolicy::default()
        },
    );
    world.online("box");

    let mut group = c.benchmark_group("first_byte");
    group.sample_size(30);
    group.bench_function("relayed", |b| {
        b.iter_custom(|n| Duration::from_nanos((0..n).map(|_| relayed(&world) as u64).sum()))
    });
    group.bench_function("piped", |b| {
        b.iter_custom(|n| Duration::from_nanos((0..n).map(|_| piped() as u64).sum()))
    });
    group.finish();

    // Alternating, so the machine's load falls on both alike.
    let (mut through, mut pipe) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        through.push(relayed(&world));
        pipe.push(piped());
    }
    through.sort_unstable();
    pipe.sort_unstable();
    let (r50, r99) = (percentile(&through, 0.5), percentile(&through, 0.99));
    let (p50, p99) = (percentile(&pipe, 0.5), percentile(&pipe, 0.99));
    println!(
        "first_byte over {SAMPLES} runs: relayed p50 {r50:.2} ms p99 {r99:.2} ms; piped p50 {p50:.3} ms p99 {p99:.3} ms; p50 ratio {:.1}× (target p50 ≤ 10 ms: {})",
        r50 / p50,
        if r50 <= 10.0 { "met" } else { "NOT met" }
    );

    let mut group = c.benchmark_group("stalled_follower");
    group.sample_size(10);
    for stalled in [false, true] {
        let name = if stalled { "one_stalled" } else { "none" };
        group.bench_function(name, |b| {
            b.iter_custom(|n| {
                Duration::from_millis((0..n).map(|_| burst_run(&world, stalled)).sum())
            })
        });
    }
    group.finish();
    let (mut none, mut one) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        none.push(u128::from(burst_run(&world, false)));
        one.push(u128::from(burst_run(&world, true)));
    }
    none.sort_unstable();
    one.sort_unstable();
    let (n50, s50) = (percentile(&none, 0.5) * 1e6, percentile(&one, 0.5) * 1e6);
    println!(
        "stalled_follower: the run's executeMs median {n50:.0} ms with no follower, {s50:.0} ms with one that never reads: ratio {:.2}×",
        s50 / n50
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
