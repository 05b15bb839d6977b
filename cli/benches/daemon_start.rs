//! Daemon start to `ready` — the process starts, unwraps its machine key, fetches the key set,
//! takes a ticket, opens the WebSocket and verifies `welcome` — against a bare start of the
//! same binary (`outpost version`), measured in the same run:
//!
//! - `bare_process/outpost_version`: spawn and wait for exit (the baseline);
//! - `daemon_ready/file_key`: a joined home sealed with the 0600 file key;
//! - `daemon_ready/passphrase`: a home sealed under an Argon2id passphrase key.
//!
//! Each daemon is killed once ready; the next start takes its home again. The server runs in
//! this process (the blocking host), with its connect rate limits raised so that no restart
//! waits out a 429. At the end it prints the medians of every start it timed (warm-up
//! included) and the ratio ready ÷ bare start for each wrapper. Run with
//! `cargo bench -p outpost --bench daemon_start`.
#![allow(missing_docs)]

use std::cell::RefCell;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outpost_core::executor::Registry;
use outpost_server::{BlockingServer, RateLimits, ServeConfig};

const PASSPHRASE: &str = "a bench passphrase";

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_outpost"))
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-bench-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts `outpost daemon` on `home` and returns it once it logged `connected` (ready).
fn ready(home: &Path, join: Option<&str>, passphrase: Option<&str>) -> Child {
    let mut command = Command::new(binary());
    command
        .args(["daemon", "--home"])
        .arg(home)
        .env("OUTPOST_LOG", "info")
        .env("OUTPOST_KEYRING", "off")
        .env("OUTPOST_DAEMON_AUTO_UPDATE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(join) = join {
        // Each home is its own machine, named after its folder.
        let name = home.file_name().and_then(|n| n.to_str()).unwrap_or("box");
        command.args(["--join", join, "--name", name]);
    }
    match passphrase {
        Some(p) => command.env("OUTPOST_KEY_PASSPHRASE", p),
        None => command.env_remove("OUTPOST_KEY_PASSPHRASE"),
    };
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.contains(" connected session=") {
            return child;
        }
        said.push(line);
    }
    let status = child.wait();
    panic!(
        "the daemon exited before it was ready: {status:?}\n{}",
        said.join("\n")
    );
}

/// The median of `times`, in milliseconds (NaN when there are none).
fn median_ms(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times
        .get(times.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn start(c: &mut Criterion) {
    let dir = temp_dir();
    let server = BlockingServer::start(
        ServeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            state_dir: dir.join("server"),
            tls: None,
            cloud: Vec::new(),
            public_url: None,
            node_url: None,
            // A restart loop from one address is this bench's whole job: limits high enough
            // that no start waits on a 429, so the figure is the start's own cost.
            rate_limits: RateLimits::new(10_000.0, 10_000.0),
            terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
            heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
            limits: Default::default(),
            xterm_dir: None,
            database: outpost_server::Database::Sqlite,
        },
        Registry::new(),
        2,
    )
    .unwrap();
    let join = server.running().join.clone();
    let file_home = dir.join("file");
    let pass_home = dir.join("pass");
    stop(ready(&file_home, Some(&join), None));
    stop(ready(&pass_home, Some(&join), Some(PASSPHRASE)));

    let mut group = c.benchmark_group("daemon_start");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    // Every single start, by what was started, for the ratio printed at the end.
    let starts: RefCell<[Vec<Duration>; 3]> = RefCell::default();
    group.bench_function("bare_process/outpost_version", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                let status = Command::new(binary())
                    .arg("version")
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                let took = started.elapsed();
                assert!(status.success());
                starts.borrow_mut()[0].push(took);
                total += took;
            }
            total
        })
    });
    // Only start to ready is timed; killing the daemon afterwards is not.
    let timed = |home: &Path, passphrase: Option<&str>, iters: u64, slot: usize| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let started = Instant::now();
            let child = ready(home, None, passphrase);
            let took = started.elapsed();
            starts.borrow_mut()[slot].push(took);
            total += took;
            stop(child);
        }
        total
    };
    group.bench_function("daemon_ready/file_key", |b| {
        b.iter_custom(|iters| timed(&file_home, None, iters, 1))
    });
    group.bench_function("daemon_ready/passphrase", |b| {
        b.iter_custom(|iters| timed(&pass_home, Some(PASSPHRASE), iters, 2))
    });
    group.finish();
    server.shutdown();
    let [bare, file, pass] = starts.into_inner().map(median_ms);
    println!(
        "daemon_start medians: bare start {bare:.2} ms; ready with the file key {file:.2} ms = {:.1}x bare; ready with the passphrase {pass:.2} ms = {:.1}x bare",
        file / bare,
        pass / bare
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, start);
criterion_main!(benches);
