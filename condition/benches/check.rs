//! One condition check against its floor, in the same run.
//!
//! - `condition/fresh_context` (the baseline): what isolation alone costs a check
//!   (`outpost_condition::fresh_sandbox_only`) — a new QuickJS runtime and a context with the
//!   intrinsics the engine gives a condition, and nothing run in it. No check can cost less
//!   while each gets a heap of its own.
//! - `condition/one_check`: one whole check of a trivial condition, `async ({ ctx }) =>
//!   false` (the sandbox installed, the condition compiled, run and its promise settled).
//!
//! Printed after both: the check's time against the floor. Run with `cargo bench -p
//! outpost-condition --bench check`.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outpost_condition::{
    CallError, Cancel, ExecOutput, ExecRequest, FetchRequest, FetchResponse, Host, Identity,
    Limits, Observation, ReadRequest, Verdict,
};
struct NoMachine;

impl Host for NoMachine {
    fn read(&self, _: ReadRequest, _: &Cancel) -> Result<Observation, CallError> {
        Err(CallError::new("read_unavailable", "no machine here"))
    }
    fn fetch(&self, _: FetchRequest, _: &Cancel) -> Result<FetchResponse, CallError> {
        Err(CallError::new("fetch_unavailable", "no network here"))
    }
    fn exec(&self, _: ExecRequest, _: &Cancel) -> Result<ExecOutput, CallError> {
        Err(CallError::new("exec_not_allowed", "host commands are off"))
    }
}

fn fresh_context(limits: &Limits) {
    outpost_condition::fresh_sandbox_only(limits).expect("a runtime and a context");
}

fn one_check(host: &Arc<dyn Host>, limits: &Limits) {
    let verdict = outpost_condition::check(
        "async ({ ctx }) => false",
        &Identity::default(),
        1_767_225_600_000,
        host.clone(),
        limits,
        &Cancel::new(),
    );
    assert_eq!(verdict, Ok(Verdict::NotYet));
}

/// The mean of `f` over `n` calls, in µs.
fn mean_us(n: u32, mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        f();
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn checks(c: &mut Criterion) {
    let host: Arc<dyn Host> = Arc::new(NoMachine);
    let limits = Limits::default();
    let mut group = c.benchmark_group("condition");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("fresh_context", |b| b.iter(|| fresh_context(&limits)));
    group.bench_function("one_check", |b| b.iter(|| one_check(&host, &limits)));
    group.finish();
    // Alternated blocks, so both figures share the machine's moments.
    let (mut floor, mut check) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        floor.push(mean_us(200, || fresh_context(&limits)));
        check.push(mean_us(200, || one_check(&host, &limits)));
    }
    let mid = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (floor, check) = (mid(&mut floor), mid(&mut check));
    eprintln!(
        "condition: one check {check:.0} µs against a fresh context's {floor:.0} µs: {:.2}x (medians of 5 alternated blocks of 200)",
        check / floor
    );
}

criterion_group!(benches, checks);
criterion_main!(benches);
