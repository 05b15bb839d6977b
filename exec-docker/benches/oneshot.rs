//! A oneshot `true` container through the executor, side by side with the docker CLI's
//! `docker run --rm` of the same image in the same run.
//!
//! The executor's run is the whole cycle: create (no network, limits, no privileges), attach,
//! start, wait, remove — the outcome is only reported once the container is gone. The CLI
//! baselines are `docker run --rm outpost-test/busybox true` as a person types it (default
//! bridge network) and with `--network none`, the executor's own network setting.

use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use outpost_core::executor::RunHandle;

#[path = "../tests/common/mod.rs"]
mod common;

fn cli(args: &[&str]) {
    let status = Command::new("docker")
        .args(args)
        .status()
        .expect("the docker CLI runs");
    assert!(status.success());
}

fn bench(c: &mut Criterion) {
    let executor = common::executor();
    let dir = common::folder("bench");
    let manifest = format!(
        "name: truth\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {}\nentry: \"true\"\n",
        common::TEST_IMAGE
    );
    let mut group = c.benchmark_group("docker_oneshot_true");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(15))
        .warm_up_time(Duration::from_secs(2));
    group.bench_function("executor", |b| {
        b.iter(|| {
            let mut run = executor
                .start(common::launch(&dir, "bench", &manifest))
                .expect("starts");
            let outcome = run
                .wait(Duration::from_secs(30))
                .expect("runs")
                .expect("ends");
            assert_eq!(outcome.exit_code, Some(0));
        })
    });
    group.bench_function("docker_run_rm_cli", |b| {
        b.iter(|| cli(&["run", "--rm", common::TEST_IMAGE, "true"]))
    });
    group.bench_function("docker_run_rm_cli_network_none", |b| {
        b.iter(|| {
            cli(&[
                "run",
                "--rm",
                "--network",
                "none",
                common::TEST_IMAGE,
                "true",
            ])
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
