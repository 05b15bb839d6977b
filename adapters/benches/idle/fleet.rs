//! A fleet process of the cluster bench: the fake daemons whose home is one node, in a
//! process of their own (one process may hold only so many sockets), told what to do over
//! stdin and reporting over stdout, one line each:
//!
//! - it prints `connected N` once its daemons have connected to their home node;
//! - `dead K` (stdin): node K was killed — from now on the load balancer sends nobody there,
//!   and each daemon's time back is counted from this line; it answers `ok`;
//! - `report` (stdin): it prints `back SECONDS` for each daemon back since, `failed N` (the
//!   connect attempts that failed since), `event N WHAT` for what the nodes did besides
//!   succeed, then `end`;
//! - stdin closing ends it.
//!
//! It owns the daemons' lives: idle, then back as the daemon comes back (its backoff, its
//! jitter). It never measures a node: the bench reads the nodes.

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use outpost_adapters::tls::ServerUrl;
use outpost_core::daemon::Backoff;
use outpost_core::rng::SplitMix64;
use tokio::sync::watch;

use super::daemon::{Ctx, Machine, Tally, Target, Ws, idle, in_flight};
use super::{NODES, seed_of};

/// What the daemons share with their fleet about the kill.
#[derive(Default)]
struct Storm {
    /// When the fleet heard of the kill.
    killed_at: OnceLock<Instant>,
    /// The node killed: the load balancer sends nobody there.
    dead: OnceLock<usize>,
    /// Each daemon's time from the kill to its `welcome` on a live node.
    back_after: Mutex<Vec<Duration>>,
    /// Connect attempts that failed since the kill.
    failed: AtomicUsize,
    /// Set when the fleet ends: sockets closing then are not a storm.
    stopping: AtomicBool,
}

/// The spec of a fleet, as the bench passes it: `HOME RUN COUNT ADDR=URL,…`.
pub fn spec(home: usize, run: u64, count: usize, targets: &[Target]) -> String {
    let nodes: Vec<String> = targets
        .iter()
        .map(|t| format!("{}={}", t.addr, t.url.http_url("")))
        .collect();
    format!("{home} {run} {count} {}", nodes.join(","))
}

/// The fleet process: runs until its stdin closes.
pub fn run(spec: &str) {
    let fields: Vec<&str> = spec.split(' ').collect();
    let [home, run, count, nodes] = fields[..] else {
        panic!("a fleet spec is HOME RUN COUNT ADDR=URL,…: {spec:?}");
    };
    let home: usize = home.parse().expect("HOME");
    let run: u64 = run.parse().expect("RUN");
    let count: usize = count.parse().expect("COUNT");
    let targets: Arc<Vec<Target>> = Arc::new(
        nodes
            .split(',')
            .map(|node| {
                let (addr, url) = node.split_once('=').expect("ADDR=URL");
                Target {
                    addr: addr.parse::<SocketAddr>().expect("ADDR"),
                    url: ServerUrl::parse(url).expect("URL"),
                }
            })
            .collect(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let ctx = Arc::new(Ctx {
        token: String::new(),
        admin: String::new(),
        tally: Arc::new(Tally::default()),
    });
    let storm = Arc::new(Storm::default());
    let (beat, _) = watch::channel(0u64);
    let machines: Vec<Arc<Machine>> = (0..count)
        .filter(|i| i % NODES == home)
        .map(|i| Arc::new(Machine::with_seed(i, seed_of(run, i))))
        .collect();
    let connected = rt.block_on(in_flight(machines, "connected", |m| {
        let (ctx, targets, storm) = (ctx.clone(), targets.clone(), storm.clone());
        let beat = beat.subscribe();
        async move {
            let opened = m.connect(&ctx, &targets[home]).await?;
            tokio::spawn(live(m, ctx, targets, storm, opened, beat));
            Some(())
        }
    }));
    say(&format!("connected {}", connected.len()));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["dead", node] => {
                let _ = storm.killed_at.set(Instant::now());
                let _ = storm.dead.set(node.parse().expect("a node's number"));
                say("ok");
            }
            ["report"] => report(&storm, &ctx.tally),
            _ => panic!("a fleet hears `dead K` or `report`, not {line:?}"),
        }
    }
    storm.stopping.store(true, Ordering::Relaxed);
    drop(beat);
    rt.shutdown_timeout(Duration::from_secs(1));
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

fn report(storm: &Storm, tally: &Tally) {
    let back = storm
        .back_after
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut out = std::io::stdout().lock();
    for after in back {
        writeln!(out, "back {}", after.as_secs_f64()).expect("stdout");
    }
    writeln!(out, "failed {}", storm.failed.load(Ordering::Relaxed)).expect("stdout");
    let events: BTreeMap<String, u64> = tally.events();
    for (what, count) in events {
        writeln!(out, "event {count} {what}").expect("stdout");
    }
    writeln!(out, "end").expect("stdout");
    out.flush().expect("stdout");
}

/// A fake daemon for its whole life: idle on `open` until its socket closes, then back as
/// the daemon comes back (its backoff, its jitter), through the load balancer, to a live
/// node.
async fn live(
    machine: Arc<Machine>,
    ctx: Arc<Ctx>,
    targets: Arc<Vec<Target>>,
    storm: Arc<Storm>,
    mut open: (Ws, Duration),
    beat: watch::Receiver<u64>,
) {
    let backoff = Backoff::default();
    let mut rng = SplitMix64::new(machine.index as u64 ^ 0x5eed);
    loop {
        ctx.tally.open.fetch_add(1, Ordering::Relaxed);
        idle(open.0, open.1, beat.clone(), ctx.tally.clone()).await;
        if storm.stopping.load(Ordering::Relaxed) {
            return;
        }
        let mut failures = 0u32;
        open = loop {
            tokio::time::sleep(backoff.delay(failures, &mut rng)).await;
            if storm.stopping.load(Ordering::Relaxed) {
                return;
            }
            // The load balancer: the live nodes, half of the daemons starting at each.
            let dead = storm.dead.get().copied();
            let live: Vec<&Target> = (0..targets.len())
                .filter(|n| Some(*n) != dead)
                .map(|n| &targets[n])
                .collect();
            let target = live[(machine.index / NODES + failures as usize) % live.len()];
            match machine.connect(&ctx, target).await {
                Some(opened) => {
                    if let Some(at) = storm.killed_at.get() {
                        storm
                            .back_after
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(at.elapsed());
                    }
                    break opened;
                }
                None => {
                    storm.failed.fetch_add(1, Ordering::Relaxed);
                    failures += 1;
                }
            }
        };
    }
}
