//! Condition waits on one daemon: 10,000 active waits, each figure beside its baseline from
//! the same run.
//!
//! A real `outpost daemon` process (so its CPU time, `utime + stime` of `/proc/<pid>/stat`,
//! and its memory, `VmRSS` of `/proc/<pid>/status`, are its alone) joins a server running in
//! this process. Waits are registered through `POST /v1/waits`, each with its own condition
//! text (identical active registrations would deduplicate into one), `async ({ ctx }) =>
//! { /* wait N */ return false; }`: a check that never matches and makes no call, so what is measured is the daemon's
//! cost of scheduling, evaluating, saving and reporting a check.
//!
//! - `waits/engine/one_check`: the baseline — one evaluation of the same condition in the
//!   engine (`outpost_condition::check`) on this thread, nothing else.
//! - `waits/daemon_1s/10000` (criterion): 10,000 waits at a 1 s interval on one daemon; one
//!   iteration is one check the server heard of (`wait.status`, counted as the sum of the
//!   server's `checks` column, read from its SQLite file). Throughput: checks per second
//!   (demand: 10,000/s). Printed beside it: the daemon's CPU time per check against the
//!   engine's, the share of the demand it keeps up with, its CPU in cores, and the fewest and
//!   most checks any wait had (the schedule starts the earliest due check first, so a daemon
//!   that cannot keep up stretches every wait's interval alike).
//! - idle: 10,000 waits at a 1 h interval on a second daemon, after each had its first check
//!   (checks begin at registration): the daemon's CPU per second over a 10 s window against
//!   the same daemon before any wait (the baseline), per wait; its RSS against its RSS with no
//!   wait, per wait (printed: criterion times, it does not weigh bytes).
//!
//! The kernel counts CPU time in clock ticks (10 ms at `CLK_TCK` 100): the windows are long
//! enough for that to matter little. `OUTPOST_BENCH_WAITS` sets the wait count (10,000 by
//! default); `OUTPOST_BENCH_BINARY` runs the daemons from another build of `outpost` (an A/B of
//! the daemon in one session). Run with `cargo bench -p outpost --bench waits`.
#![allow(missing_docs)]

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outpost_condition::{
    CallError, Cancel, ExecOutput, ExecRequest, FetchRequest, FetchResponse, Host, Identity,
    Limits, Observation, ReadRequest,
};
use outpost_core::executor::Registry;
use outpost_server::{BlockingServer, RateLimits, ServeConfig};
use serde_json::{Value, json};

/// The wait count (default 10,000).
const COUNT_ENV: &str = "OUTPOST_BENCH_WAITS";
/// How long the idle window and the busy windows last.
const WINDOW: Duration = Duration::from_secs(10);
/// Threads registering waits at once.
const REGISTERING: usize = 8;

/// The `outpost` binary the daemons run: this build's, or `OUTPOST_BENCH_BINARY` (another
/// build's, for an A/B of the daemon alone).
fn binary() -> PathBuf {
    std::env::var_os("OUTPOST_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_outpost")))
}

fn condition(n: usize) -> String {
    format!("async ({{ ctx }}) => {{ /* wait {n} */ return false; }}")
}

/// A machine with nothing on it, for the engine baseline.
struct NoMachine;

impl Host for NoMachine {
    fn read(&self, _: ReadRequest, _: &Cancel) -> Result<Observation, CallError> {
        Err(CallError::new("unavailable", "the baseline reads nothing"))
    }
    fn fetch(&self, _: FetchRequest, _: &Cancel) -> Result<FetchResponse, CallError> {
        Err(CallError::new(
            "unavailable",
            "the baseline fetches nothing",
        ))
    }
    fn exec(&self, _: ExecRequest, _: &Cancel) -> Result<ExecOutput, CallError> {
        Err(CallError::new("unavailable", "the baseline runs nothing"))
    }
}

/// CPU seconds (user + system) and resident bytes of a process.
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    (ticks as f64 / 100.0, rss_kb * 1024)
}

/// The server's HTTP API, as the admin.
struct Api {
    url: String,
    admin: String,
    agent: ureq::Agent,
}

impl Api {
    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("authorization", &format!("Bearer {}", self.admin))
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap();
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

struct Bench {
    server: Option<BlockingServer>,
    api: Api,
    join: String,
    dir: PathBuf,
    db: rusqlite::Connection,
    daemons: Vec<Child>,
}

impl Bench {
    fn new() -> Bench {
        let dir = common::temp_dir("waits");
        let server = BlockingServer::start(
            ServeConfig {
                // Registering 10,000 waits from one address is this bench's setup, not what it
                // measures.
                rate_limits: RateLimits::new(1_000_000.0, 1_000_000.0),
                ..common::serve_config(dir.join("server"), Vec::new())
            },
            Registry::new(),
            2,
        )
        .unwrap();
        let r = server.running();
        let db = rusqlite::Connection::open_with_flags(
            dir.join("server").join("outpost.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        Bench {
            api: Api {
                url: r.url.clone(),
                admin: r.admin_token.clone(),
                agent: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build()
                    .new_agent(),
            },
            join: r.join.clone(),
            server: Some(server),
            dir,
            db,
            daemons: Vec::new(),
        }
    }

    /// Starts `outpost daemon` as machine `name`; returns its pid once it is connected.
    fn daemon(&mut self, name: &str) -> u32 {
        let home = self.dir.join(name);
        let mut child = Command::new(binary())
            .args(["daemon", "--home"])
            .arg(&home)
            .args(["--join", &self.join, "--name", name])
            .env("OUTPOST_LOG", "info")
            .env("OUTPOST_KEYRING", "off")
            .env("OUTPOST_DAEMON_AUTO_UPDATE", "0")
            .env_remove("OUTPOST_KEY_PASSPHRASE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref() {
            if line.unwrap().contains(" connected session=") {
                break;
            }
        }
        // Keep reading its log so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let pid = child.id();
        self.daemons.push(child);
        pid
    }

    /// Registers `count` waits on `context` at `interval_ms`, from several threads.
    fn register(&self, context: &str, count: usize, interval_ms: u64) {
        let started = Instant::now();
        let api = &self.api;
        std::thread::scope(|s| {
            for t in 0..REGISTERING {
                s.spawn(move || {
                    for n in (t..count).step_by(REGISTERING) {
                        let body = json!({
                            "context": context,
                            "condition": condition(n),
                            "intervalMs": interval_ms,
                        });
                        let (status, answer) = api.post("/v1/waits", &body);
                        assert!(status == 200 || status == 201, "{status}: {answer}");
                    }
                });
            }
        });
        eprintln!(
            "waits: {count} waits registered on {context} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    /// Checks the server heard of on `context`, and its waits with at least one.
    fn checks(&self, context: &str) -> (u64, u64) {
        self.db
            .query_row(
                "SELECT COALESCE(SUM(checks), 0), COUNT(*) FILTER (WHERE checks > 0)
                 FROM waits WHERE context_name = ?1",
                [context],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .unwrap()
    }

    /// The fewest and the most checks any wait on `context` had: how evenly the daemon
    /// shares its checks out when it cannot keep up.
    fn spread(&self, context: &str) -> (u64, u64) {
        self.db
            .query_row(
                "SELECT MIN(checks), MAX(checks) FROM waits WHERE context_name = ?1",
                [context],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .unwrap()
    }

    /// Waits until every one of `count` waits on `context` was checked once.
    fn all_checked(&self, context: &str, count: u64) {
        let started = Instant::now();
        while self.checks(context).1 < count {
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "only {:?} of {count} waits on {context} were checked in 10 minutes",
                self.checks(context)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        for child in &mut self.daemons {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn waits(c: &mut Criterion) {
    let count: usize = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        .max(10);
    let mut group = c.benchmark_group("waits");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));

    // The baseline: the engine alone.
    let source = condition(0);
    let host: Arc<dyn Host> = Arc::new(NoMachine);
    let limits = Limits::default();
    let one_check = || {
        let verdict = outpost_condition::check(
            &source,
            &Identity::default(),
            1_767_225_600_000,
            host.clone(),
            &limits,
            &Cancel::new(),
        );
        assert!(verdict.is_ok(), "{verdict:?}");
    };
    group.bench_function("engine/one_check", |b| b.iter(one_check));
    let engine = {
        let started = Instant::now();
        for _ in 0..200 {
            one_check();
        }
        started.elapsed().as_secs_f64() / 200.0
    };

    let mut bench = Bench::new();

    // Idle: long intervals, measured against the same daemon before any wait.
    let idle_pid = bench.daemon("idle");
    let window = |pid: u32| {
        let (cpu0, _) = usage(pid);
        std::thread::sleep(WINDOW);
        let (cpu1, rss) = usage(pid);
        ((cpu1 - cpu0) / WINDOW.as_secs_f64(), rss)
    };
    let (cpu_none, rss_none) = window(idle_pid);
    bench.register("idle", count, 3_600_000);
    bench.all_checked("idle", count as u64);
    let (cpu_idle, rss_idle) = window(idle_pid);
    let n = count as f64;
    eprintln!(
        "waits: idle daemon: {:.4} cores with no wait, {:.4} cores with {count} waits at 1 h: \
         {:.2} µs of CPU per wait per second",
        cpu_none,
        cpu_idle,
        (cpu_idle - cpu_none).max(0.0) / n * 1e6
    );
    eprintln!(
        "waits: idle daemon: RSS {:.1} MiB with no wait, {:.1} MiB with {count} waits: \
         {:.2} KiB per wait",
        rss_none as f64 / 1048576.0,
        rss_idle as f64 / 1048576.0,
        (rss_idle as f64 - rss_none as f64) / n / 1024.0
    );

    // Busy: a 1 s interval.
    let busy_pid = bench.daemon("busy");
    bench.register("busy", count, 1_000);
    bench.all_checked("busy", count as u64);
    let (checks0, _) = bench.checks("busy");
    let (cpu0, _) = usage(busy_pid);
    let started = Instant::now();
    std::thread::sleep(WINDOW);
    let (checks1, _) = bench.checks("busy");
    let (cpu1, rss_busy) = usage(busy_pid);
    let secs = started.elapsed().as_secs_f64();
    let (fewest, most) = bench.spread("busy");
    let done = (checks1 - checks0) as f64;
    let per_check = (cpu1 - cpu0) / done.max(1.0);
    eprintln!(
        "waits: {count} waits at 1 s: {:.0} checks/s = {:.3} of the {count}/s demanded; \
         daemon {:.2} cores, {:.0} µs CPU per check = {:.2}x the engine's {:.0} µs; RSS {:.1} MiB; \
         checks per wait so far {fewest} to {most}",
        done / secs,
        done / secs / n,
        (cpu1 - cpu0) / secs,
        per_check * 1e6,
        per_check / engine,
        engine * 1e6,
        rss_busy as f64 / 1048576.0
    );
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("daemon_1s/{count}"), |b| {
        b.iter_custom(|iters| {
            let (from, _) = bench.checks("busy");
            let started = Instant::now();
            while bench.checks("busy").0 < from + iters {
                std::thread::sleep(Duration::from_millis(5));
            }
            started.elapsed()
        })
    });
    group.finish();
    drop(bench);
}

criterion_group!(benches, waits);
criterion_main!(benches);
