//! A oneshot `true` through the shell executor against a bare `std::process::Command` spawn
//! and wait of the same binary, in the same run.
//!
//! Run with `cargo bench -p outpost-exec-shell --bench oneshot`. Target: ≤ 1.15×.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use outpost_core::executor::{Executor, Launch};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Manifest;
use outpost_exec_shell::ShellExecutor;

/// A capability folder holding a copy of `true`, run directly (`interpreter: none`).
fn capability() -> (PathBuf, Manifest) {
    let dir = std::env::temp_dir().join(format!("outpost-bench-true-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truth = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a `true` binary");
    std::fs::copy(truth, dir.join("true")).unwrap();
    let manifest = Manifest::parse(
        "name: truth\nenvironment: shell\nlifecycle: oneshot\nentry: true\ninterpreter: none\n",
    )
    .unwrap();
    (dir.canonicalize().unwrap(), manifest)
}

fn oneshot(c: &mut Criterion) {
    let (dir, manifest) = capability();
    let entry = dir.join("true");
    let executor = ShellExecutor::default();
    let mut g = c.benchmark_group("oneshot_true");
    g.bench_function("bare_command_spawn_wait", |b| {
        b.iter(|| {
            let status = Command::new(&entry)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
                .wait()
                .unwrap();
            assert!(status.success());
        })
    });
    g.bench_function("bare_command_output", |b| {
        b.iter(|| {
            let out = Command::new(&entry).stdin(Stdio::null()).output().unwrap();
            assert!(out.status.success());
        })
    });
    g.bench_function("shell_executor", |b| {
        b.iter(|| {
            let mut handle = executor
                .launch(Launch {
                    run_id: "bench".into(),
                    dir: dir.clone(),
                    entry_bytes: None,
                    manifest: manifest.clone(),
                    extra_args: Vec::new(),
                    mounts: Vec::new(),
                    denylist: CredentialDenylist::empty(),
                    cwd: None,
                    timeout: Duration::from_secs(10),
                    egress: outpost_core::wire::Egress::None,
                    confined: false,
                    context: String::new(),
                })
                .unwrap();
            let outcome = loop {
                if let Some(o) = handle.wait(Duration::from_secs(10)).unwrap() {
                    break o;
                }
            };
            assert_eq!(outcome.exit_code, Some(0));
        })
    });
    g.finish();
}

criterion_group!(benches, oneshot);
criterion_main!(benches);
