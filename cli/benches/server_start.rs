//! A server's start against the history its store holds: the same server restarted over a
//! store where [`HISTORY`] executions have ended, against one where [`BASELINE_RUNS`] have
//! (the baseline), measured in the same run:
//!
//! - `server_start/baseline`: eight machines registered, 64 executions ended;
//! - `server_start/history`: eight machines registered, [`HISTORY`] executions ended.
//!
//! Each figure is one start, from `BlockingServer::start` until it serves (the store opened,
//! the records restored, the socket bound); the old server is shut down first, untimed. A
//! start must not grow with the history: it reads the live records, and an ended execution
//! leaves none (its end is its `executions` row). After criterion's figures the two starts
//! alternate [`ROUNDS`] times and the medians' ratio is printed (history ÷ baseline, about 1
//! when a start is independent of the history).
//! Run with `cargo bench -p outpost --bench server_start`.
#![allow(missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{World, eight_daemons, run_batch};
use criterion::{Criterion, criterion_group, criterion_main};

/// The executions the store of `server_start/history` holds, ended.
const HISTORY: usize = 20_000;

/// The executions the baseline's store holds, ended.
const BASELINE_RUNS: usize = 64;

/// Alternated starts of each store after criterion's figures.
const ROUNDS: usize = 30;

/// A server whose store holds `runs` ended executions of eight machines, their daemons gone.
fn world_with(tag: &str, runs: usize) -> World {
    let world = Arc::new(World::new(tag));
    let daemons = eight_daemons(&world);
    run_batch(&world, runs, 64);
    drop(daemons);
    Arc::try_unwrap(world).unwrap_or_else(|_| panic!("the batch's clients are done"))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn starts(c: &mut Criterion) {
    let mut baseline = world_with("start-baseline", BASELINE_RUNS);
    let mut history = world_with("start-history", HISTORY);
    let mut group = c.benchmark_group("server_start");
    group.sample_size(20);
    for (name, world) in [("baseline", &mut baseline), ("history", &mut history)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| world.restart()).sum())
        });
    }
    group.finish();
    let (mut short, mut long) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        short.push(baseline.restart());
        long.push(history.restart());
    }
    let (short, long) = (median(short), median(long));
    println!(
        "server_start/interleaved_medians over {ROUNDS} rounds: baseline ({BASELINE_RUNS} ended) \
         {} µs, history ({HISTORY} ended) {} µs = {:.2}× the baseline",
        short.as_micros(),
        long.as_micros(),
        long.as_secs_f64() / short.as_secs_f64()
    );
}

criterion_group!(benches, starts);
criterion_main!(benches);
