//! Deterministic simulation: one server, or `--nodes N` nodes over a shared fenced store (a
//! cluster: nodes killed, stopped and cut off from the store, notices lost and late), several
//! daemons, seeded faults, invariants checked after every step.
//!
//! ```text
//! cargo run --release -p outpost-core --example simulate -- --seeds 2000 [--start 0] [--threads 2]
//! cargo run --release -p outpost-core --example simulate -- --nodes 3 --seeds 2000
//! cargo run --release -p outpost-core --example simulate -- [--nodes 3] --transcript 42
//! ```
//!
//! Before it, a line with the total time, seeds per second, and the slowest seed's time
//! against the median (a seed that spins shows here even if no invariant caught it). The last
//! line is `N seeds, 0 violations`, or the first failing seed and the violated invariant (with
//! a non-zero exit).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outpost_core::sim::{ClusterCounts, SimConfig, SimReport, WaitCounts, simulate};

struct Args {
    seeds: u64,
    start: u64,
    threads: usize,
    nodes: usize,
    transcript: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seeds: 100,
        start: 0,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        nodes: 1,
        transcript: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--seeds" => args.seeds = value()?,
            "--start" => args.start = value()?,
            "--threads" => args.threads = value()?.max(1) as usize,
            "--nodes" => args.nodes = value()?.clamp(1, 16) as usize,
            "--transcript" => args.transcript = Some(value()?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulate: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = args.transcript {
        let report = simulate(&SimConfig {
            keep_transcript: true,
            nodes: args.nodes,
            ..SimConfig::new(seed)
        });
        for line in &report.transcript {
            println!("{line}");
        }
        return finish(1, report.violation.map(|v| (seed, v)));
    }

    let start = args.start;
    let next = Arc::new(AtomicU64::new(start));
    let end = args.start + args.seeds;
    let failure: Arc<Mutex<Option<(u64, String)>>> = Arc::new(Mutex::new(None));
    let totals = Arc::new(Mutex::new((0usize, 0usize, 0usize, 0usize, 0usize)));
    let wait_totals = Arc::new(Mutex::new(WaitCounts::default()));
    let cluster_totals = Arc::new(Mutex::new(ClusterCounts::default()));
    let times: Arc<Mutex<Vec<(Duration, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.threads)
        .map(|_| {
            let (next, failure, totals) = (next.clone(), failure.clone(), totals.clone());
            let wait_totals = wait_totals.clone();
            let cluster_totals = cluster_totals.clone();
            let times = times.clone();
            let nodes = args.nodes;
            std::thread::spawn(move || {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end || failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                        return;
                    }
                    let one = Instant::now();
                    let report: SimReport = simulate(&SimConfig {
                        nodes,
                        ..SimConfig::new(seed)
                    });
                    if let Ok(mut t) = times.lock() {
                        t.push((one.elapsed(), seed));
                    }
                    let done = seed + 1 - start;
                    if done % 10_000 == 0 {
                        eprintln!("{done} seeds done");
                    }
                    if let Ok(mut t) = totals.lock() {
                        t.0 += report.executed;
                        t.1 += report.finished;
                        t.2 += report.faults;
                        t.3 += report.restarts;
                        t.4 += report.records;
                    }
                    if let Ok(mut w) = wait_totals.lock() {
                        w.registered += report.waits.registered;
                        w.checks += report.waits.checks;
                        w.matched += report.waits.matched;
                        w.failed += report.waits.failed;
                        w.revoked += report.waits.revoked;
                    }
                    if let Ok(mut c) = cluster_totals.lock() {
                        c.add(&report.cluster);
                    }
                    if let Some(v) = report.violation
                        && let Ok(mut f) = failure.lock()
                    {
                        // Keep the lowest failing seed.
                        if f.as_ref().is_none_or(|(s, _)| seed < *s) {
                            *f = Some((seed, v));
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let secs = started.elapsed().as_secs_f64();
    let (executed, finished, faults, restarts, records) =
        totals.lock().map(|t| *t).unwrap_or_default();
    println!("{executed} runs executed, {finished} executions finished, {faults} faults injected");
    if args.nodes > 1 {
        let c = cluster_totals.lock().map(|c| *c).unwrap_or_default();
        println!(
            "{} nodes over one shared store: {} hand-offs, {} machines taken on connect, {} taken over from dead nodes, {} writes refused by their fence, {} notices lost",
            args.nodes, c.handoffs, c.takes, c.taken_from_dead, c.fenced, c.notices_lost
        );
    }
    println!("{restarts} restarts restored from their disks, {records} records written");
    let waits = wait_totals.lock().map(|w| *w).unwrap_or_default();
    println!(
        "{} waits registered, {} checks, {} matched, {} failed or cancelled, {} ended by a revoke",
        waits.registered, waits.checks, waits.matched, waits.failed, waits.revoked
    );
    let mut times = times.lock().map(|t| t.clone()).unwrap_or_default();
    println!("{}", timing_line(&mut times, secs));
    let failure = failure.lock().ok().and_then(|f| f.clone());
    finish(args.seeds, failure)
}

/// Total time, seeds per second, and the slowest seed against the median.
fn timing_line(times: &mut [(Duration, u64)], secs: f64) -> String {
    let ran = times.len();
    let mut line = format!(
        "{ran} seeds in {secs:.1} s, {:.1} seeds/s",
        ran as f64 / secs.max(1e-9)
    );
    times.sort_unstable();
    if let (Some((median, _)), Some((slowest, seed))) = (times.get(ran / 2), times.last()) {
        let ratio = slowest.as_secs_f64() / median.as_secs_f64().max(1e-9);
        line.push_str(&format!(
            "; slowest seed {seed}: {:.1} ms, median {:.2} ms ({ratio:.0}x)",
            slowest.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e3
        ));
    }
    line
}

fn finish(seeds: u64, failure: Option<(u64, String)>) -> ExitCode {
    match failure {
        None => {
            println!("{seeds} seeds, 0 violations");
            ExitCode::SUCCESS
        }
        Some((seed, violation)) => {
            println!("seed {seed} violated: {violation}");
            ExitCode::FAILURE
        }
    }
}
