//! Idle connected daemons: the server's memory per connection and its CPU per heartbeat.
//!
//! The server runs in a process of its own (this binary re-executed with
//! `OUTPOST_IDLE_SERVER=<state folder>`), so its memory (`VmRSS`, `RssAnon` of
//! `/proc/<pid>/status`) and CPU time (`utime + stime` of `/proc/<pid>/stat`) are its alone.
//! The bench process holds the fake daemons: each has its own machine key and does what a
//! real daemon does up to idle (register, connect ticket, WebSocket, `welcome`, `hello`,
//! then a `status` every `heartbeatSecs`), over its own loopback source address (127.X.Y.Z)
//! so the per-address rate limits see one machine per address, as in a real fleet.
//!
//! Measured in one run, with 0, 1,000 and 10,000 daemons connected (`OUTPOST_IDLE_DAEMONS`
//! sets the larger count, 10,000 by default; the smaller is a tenth of it):
//!
//! - memory: RSS after start, after registering, after connecting; per connection as
//!   `(RSS(10k) − RSS(0)) / 10k` and `(RSS(10k) − RSS(1k)) / 9k` (printed: criterion times,
//!   it does not weigh bytes);
//! - heartbeat CPU over two natural heartbeat periods: server CPU divided by the `status`
//!   frames sent in the window (printed);
//! - heartbeat CPU in criterion (`idle_daemons/heartbeat_batch/N`): one iteration is one
//!   `status` from every daemon; the time is the server's CPU time, read after every daemon
//!   saw a pong sent after its `status` and a request through the dispatcher's queue (an
//!   empty `PUT /v1/chain`, its cost printed apart) was answered behind them, so a batch
//!   also carries one ping per daemon and that one request. The throughput is heartbeats
//!   per server CPU second.
//!
//! With `OUTPOST_IDLE_DATABASE=postgres` the server keeps its records in a PostgreSQL
//! database of a throwaway cluster the bench starts (`initdb` in a temporary folder), as a
//! node of a cluster does: the same figures, for one node over PostgreSQL.
//!
//! The kernel counts CPU time in clock ticks (10 ms at `CLK_TCK` 100): the windows are long
//! enough (tenths of a second of server CPU and more) for that to matter little. The bench
//! never changes the server's limits: the source addresses keep it under them.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use outpost_core::httpsig::HttpRequest;
use tokio::sync::watch;

#[path = "idle/daemon.rs"]
mod daemon;
#[path = "idle/node.rs"]
mod node;
#[path = "../../server/tests/common/postgres.rs"]
mod postgres;

use daemon::{Ctx, IO_TIMEOUT, Machine, Tally, Target, error_code, http, idle, in_flight};
use node::{Memory, Server, kib, per};

/// `postgres`: the server keeps its records in a PostgreSQL database the bench starts.
const DATABASE_ENV: &str = "OUTPOST_IDLE_DATABASE";
/// The larger daemon count (default 10,000).
const COUNT_ENV: &str = "OUTPOST_IDLE_DAEMONS";

fn main() {
    if node::serve_if_asked() {
        return;
    }
    let large: usize = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        .max(10);
    let small = large / 10;
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    run(&mut criterion, small, large);
    criterion.final_summary();
}

/// What one [`Fleet::grow`] did.
struct Grown {
    registered: usize,
    registering: Duration,
    /// The server's memory once they were registered, before they connected.
    registered_memory: Memory,
    connected: usize,
    connecting: Duration,
}

/// The fake daemons and the runtime they run on.
struct Fleet {
    rt: tokio::runtime::Runtime,
    ctx: Arc<Ctx>,
    target: Target,
    beat: watch::Sender<u64>,
    next_index: usize,
    heartbeat: Duration,
}

impl Fleet {
    fn new(server: &Server) -> Fleet {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let ctx = Arc::new(Ctx {
            token: server.join.token.clone(),
            admin: server.admin.clone(),
            tally: Arc::new(Tally::default()),
        });
        let (beat, _) = watch::channel(0);
        Fleet {
            rt,
            ctx,
            target: Target {
                addr: server.addr,
                url: server.url.clone(),
            },
            beat,
            next_index: 0,
            heartbeat: Duration::from_secs(15),
        }
    }

    fn tally(&self) -> &Tally {
        &self.ctx.tally
    }

    /// Registers `count` more machines, then connects them.
    fn grow(&mut self, count: usize, server: &Server) -> Grown {
        let machines: Vec<Arc<Machine>> = (self.next_index..self.next_index + count)
            .map(|i| Arc::new(Machine::new(i)))
            .collect();
        self.next_index += count;
        let ctx = self.ctx.clone();
        let target = self.target.clone();
        let started = Instant::now();
        let registered: Vec<Arc<Machine>> =
            self.rt.block_on(in_flight(machines, "registered", |m| {
                let (ctx, target) = (ctx.clone(), target.clone());
                async move { m.register(&ctx, &target).await.then_some(m) }
            }));
        let registering = started.elapsed();
        let mem = server.memory();
        eprintln!(
            "idle_daemons: {} registered in {:.1} s; server RSS {} KiB (anon {} KiB)",
            registered.len(),
            registering.as_secs_f64(),
            mem.rss,
            mem.anon
        );
        let started = Instant::now();
        let beat = self.beat.clone();
        let periods: Vec<Duration> =
            self.rt
                .block_on(in_flight(registered.clone(), "connected", |m| {
                    let (ctx, target) = (ctx.clone(), target.clone());
                    let beat = beat.subscribe();
                    async move {
                        let (ws, heartbeat) = m.connect(&ctx, &target).await?;
                        ctx.tally.open.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(idle(ws, heartbeat, beat, ctx.tally.clone()));
                        Some(heartbeat)
                    }
                }));
        if let Some(max) = periods.iter().max() {
            self.heartbeat = *max;
        }
        Grown {
            registered: registered.len(),
            registering,
            registered_memory: mem,
            connected: periods.len(),
            connecting: started.elapsed(),
        }
    }

    /// `outpost_connected_daemons` from `/metrics`.
    fn connected(&self) -> Option<u64> {
        self.rt.block_on(daemon::connected(self.target.addr))
    }

    /// Waits until the server counts `count` daemons connected (at most 60 s).
    fn await_connected(&self, count: usize) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let seen = self.connected();
            if seen == Some(count as u64) || Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An empty `PUT /v1/chain`: answered once the dispatcher took it, so after every frame
    /// queued before it.
    async fn barrier(ctx: &Ctx, server: SocketAddr) {
        let req = HttpRequest {
            method: "PUT".into(),
            url: String::new(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"chain":[]}"#.to_vec(),
        };
        match http(
            Ipv4Addr::LOCALHOST,
            server,
            "/v1/chain",
            &req,
            Some(&ctx.admin),
        )
        .await
        {
            Ok(answer) if answer.status == 200 => {}
            Ok(answer) => ctx.tally.note(format!(
                "barrier: HTTP {} {}",
                answer.status,
                error_code(&answer.body)
            )),
            Err(e) => ctx.tally.note(format!("barrier: {e}")),
        }
    }

    /// The server's CPU per [`Fleet::barrier`], over `count` of them.
    fn barrier_cost(&self, server: &Server, count: u32) -> Duration {
        let cpu = server.cpu();
        self.rt.block_on(async {
            for _ in 0..count {
                Self::barrier(&self.ctx, self.target.addr).await;
            }
        });
        (server.cpu() - cpu) / count
    }

    /// One `status` from every open daemon, then waits until each saw its pong and a request
    /// went through the dispatcher's queue behind the frames.
    fn batch(&mut self) {
        let open = self.tally().open.load(Ordering::Relaxed) as u64;
        let target = self.tally().pongs.load(Ordering::Relaxed) + open;
        self.beat.send_modify(|g| *g += 1);
        let tally = self.ctx.tally.clone();
        let ctx = self.ctx.clone();
        let server = self.target.addr;
        self.rt.block_on(async move {
            let deadline = tokio::time::Instant::now() + IO_TIMEOUT;
            while tally.pongs.load(Ordering::Relaxed) < target {
                if tokio::time::timeout_at(deadline, tally.pong.notified())
                    .await
                    .is_err()
                {
                    tally.note("batch: pongs missing after 60 s".to_owned());
                    break;
                }
            }
            Self::barrier(&ctx, server).await;
        });
    }
}

/// Server CPU per `status` over `periods` natural heartbeat periods.
fn natural_heartbeats(fleet: &Fleet, server: &Server, periods: u32) -> (Duration, u64) {
    let sent = fleet.tally().statuses.load(Ordering::Relaxed);
    let cpu = server.cpu();
    std::thread::sleep(fleet.heartbeat * periods);
    let cpu = server.cpu() - cpu;
    let sent = fleet.tally().statuses.load(Ordering::Relaxed) - sent;
    (cpu, sent)
}

/// Criterion: server CPU per batch of one `status` from every daemon, normalised to the
/// frames actually sent (a natural heartbeat can fall in the window). The CPU clock counts
/// in ticks (10 ms); a batch measured as zero counts as 1 ns so criterion can analyse a
/// small fleet.
fn bench_batches(criterion: &mut Criterion, fleet: &mut Fleet, server: &Server, open: usize) {
    let mut group = criterion.benchmark_group("idle_daemons");
    // Room for 10 batches at about 100 µs of server CPU per heartbeat.
    let room = Duration::from_micros(1_000 * open as u64).max(Duration::from_secs(4));
    group
        .sample_size(10)
        .measurement_time(room)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(open as u64));
    group.bench_function(BenchmarkId::new("heartbeat_batch", open), |b| {
        b.iter_custom(|iters| {
            let sent = fleet.tally().statuses.load(Ordering::Relaxed);
            let cpu = server.cpu();
            for _ in 0..iters {
                fleet.batch();
            }
            let cpu = server.cpu() - cpu;
            let sent = fleet.tally().statuses.load(Ordering::Relaxed) - sent;
            let nominal = iters * open as u64;
            cpu.mul_f64(nominal as f64 / sent.max(1) as f64)
                .max(Duration::from_nanos(1))
        })
    });
    group.finish();
}

fn run(criterion: &mut Criterion, small: usize, large: usize) {
    let state = std::env::temp_dir().join(format!("outpost-idle-daemons-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let started = Instant::now();
    let database = (std::env::var(DATABASE_ENV).as_deref() == Ok("postgres"))
        .then(|| postgres::shared().database(&format!("idle_{}", std::process::id())));
    let server = Server::start(&state, database.as_deref());
    let mut fleet = Fleet::new(&server);
    let base = server.memory();
    eprintln!(
        "idle_daemons: server pid {} at {}; RSS with 0 daemons {} KiB (anon {} KiB)",
        server.pid, server.addr, base.rss, base.anon
    );
    let (idle_cpu, _) = natural_heartbeats(&fleet, &server, 1);
    eprintln!(
        "idle_daemons: server CPU with 0 daemons over {} s: {:.3} s",
        fleet.heartbeat.as_secs(),
        idle_cpu.as_secs_f64()
    );

    let mut figures = Vec::new();
    let mut memory = Vec::new();
    let mut grown = 0;
    for target in [small, large] {
        let setup = Instant::now();
        let before = memory.last().copied().unwrap_or((0, base));
        let step = fleet.grow(target - grown, &server);
        grown = target;
        let open = fleet.tally().open.load(Ordering::Relaxed);
        let seen = fleet.await_connected(open);
        let mem = server.memory();
        eprintln!(
            "idle_daemons: {target} daemons: {} registered ({:.1} s), {} connected \
             ({:.1} s); {open} open here, server counts {seen:?}; set-up {:.1} s; \
             server RSS {} KiB (anon {} KiB)",
            step.registered,
            step.registering.as_secs_f64(),
            step.connected,
            step.connecting.as_secs_f64(),
            setup.elapsed().as_secs_f64(),
            mem.rss,
            mem.anon,
        );
        let reg = step.registered_memory;
        eprintln!(
            "idle_daemons: from {} to {open}: registering {:.1} KiB per context (anon {:.1}), \
             connecting {:.1} KiB per connection (anon {:.1})",
            before.0,
            kib(reg.rss, before.1.rss, step.registered),
            kib(reg.anon, before.1.anon, step.registered),
            kib(mem.rss, reg.rss, step.connected),
            kib(mem.anon, reg.anon, step.connected),
        );
        memory.push((open, mem));
        let (cpu, sent) = natural_heartbeats(&fleet, &server, 2);
        eprintln!(
            "idle_daemons: {open} idle daemons, 2 heartbeat periods ({} s): server CPU {:.3} s \
             for {sent} status frames = {:.1} µs per heartbeat",
            (fleet.heartbeat * 2).as_secs(),
            cpu.as_secs_f64(),
            per(cpu, sent)
        );
        let barrier = fleet.barrier_cost(&server, 50);
        eprintln!(
            "idle_daemons: {open} idle daemons: one barrier request costs the server {:.1} µs \
             of CPU",
            barrier.as_secs_f64() * 1e6
        );
        let before = (server.cpu(), fleet.tally().statuses.load(Ordering::Relaxed));
        bench_batches(criterion, &mut fleet, &server, open);
        let burst_cpu = server.cpu() - before.0;
        let burst_sent = fleet.tally().statuses.load(Ordering::Relaxed) - before.1;
        figures.push((open, per(cpu, sent), per(burst_cpu, burst_sent)));
    }

    let still = fleet.connected();
    let total = started.elapsed();
    let [(n0, m1), (n1, m2)] = [memory[0], memory[1]];
    eprintln!("idle_daemons: ---- summary ----");
    eprintln!(
        "idle_daemons: RSS 0: {} KiB, {n0}: {} KiB, {n1}: {} KiB (anon {} / {} / {} KiB)",
        base.rss, m1.rss, m2.rss, base.anon, m1.anon, m2.anon
    );
    eprintln!(
        "idle_daemons: per connection (RSS({n1}) - RSS(0)) / {n1} = {:.1} KiB (anon {:.1} KiB)",
        kib(m2.rss, base.rss, n1),
        kib(m2.anon, base.anon, n1)
    );
    eprintln!(
        "idle_daemons: per connection (RSS({n1}) - RSS({n0})) / {} = {:.1} KiB (anon {:.1} KiB)",
        n1 - n0,
        kib(m2.rss, m1.rss, n1 - n0),
        kib(m2.anon, m1.anon, n1 - n0)
    );
    let [(a, natural_a, burst_a), (b, natural_b, burst_b)] = [figures[0], figures[1]];
    eprintln!(
        "idle_daemons: CPU per heartbeat, natural: {a}: {natural_a:.1} µs, {b}: {natural_b:.1} µs, \
         ratio {:.2}",
        natural_b / natural_a
    );
    eprintln!(
        "idle_daemons: CPU per heartbeat, batches: {a}: {burst_a:.1} µs, {b}: {burst_b:.1} µs, \
         ratio {:.2}",
        burst_b / burst_a
    );
    eprintln!(
        "idle_daemons: at the end {} open here, server counts {still:?}; whole run {:.1} s",
        fleet.tally().open.load(Ordering::Relaxed),
        total.as_secs_f64()
    );
    let events = fleet.tally().events();
    if events.is_empty() {
        eprintln!("idle_daemons: the server refused nothing and closed nothing");
    }
    for (what, count) in events {
        eprintln!("idle_daemons: {count} × {what}");
    }
    let Fleet { rt, beat, .. } = fleet;
    drop(beat);
    rt.shutdown_timeout(Duration::from_secs(5));
    server.stop();
    let _ = std::fs::remove_dir_all(&state);
}
