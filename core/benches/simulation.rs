//! Simulation speed: one seed (3 machines, 24 executions, 8 minutes of faults, then the
//! liveness phase) per iteration, reported as seeds per second.
//!
//! Run with `cargo bench -p outpost-core --bench simulation`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outpost_core::sim::{SimConfig, simulate};

fn simulation(c: &mut Criterion) {
    let mut g = c.benchmark_group("simulation");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    let mut seed = 0u64;
    g.bench_function("one_seed", |b| {
        b.iter(|| {
            seed += 1;
            let report = simulate(black_box(&SimConfig::new(seed)));
            assert!(report.violation.is_none());
        })
    });
    g.finish();
}

criterion_group!(benches, simulation);
criterion_main!(benches);
