//! The executors side by side, in the one crate that may depend on all of them: an ondemand
//! cycle of a hello wasm module through the wasm executor vs a oneshot shell `true` through
//! the shell executor (`sh run.sh`, as a shell capability runs).
//!
//! Run with `cargo bench -p outpost --bench executors`.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use outpost_core::executor::{Executor, Launch, RunHandle};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Manifest;
use outpost_exec_shell::ShellExecutor;
use outpost_exec_wasm::{WasmConfig, WasmExecutor};

/// Writes `hello\n` to stdout (the wasm executor's own benchmark module).
const HELLO: &str = include_str!("hello.wat");

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-exec-bench-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn launch_of(dir: &Path, manifest: &Manifest) -> Launch {
    Launch {
        run_id: "bench".into(),
        dir: dir.to_path_buf(),
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
    }
}

fn finish(mut handle: Box<dyn RunHandle>) {
    loop {
        if let Some(o) = handle.wait(Duration::from_secs(10)).unwrap() {
            assert_eq!(o.exit_code, Some(0));
            return;
        }
    }
}

fn executors(c: &mut Criterion) {
    let wasm_dir = folder("hello");
    std::fs::write(wasm_dir.join("hello.wat"), HELLO).unwrap();
    let wasm_manifest =
        Manifest::parse("name: hello\nenvironment: wasm\nlifecycle: ondemand\nentry: hello.wat\n")
            .unwrap();
    let wasm = WasmExecutor::new(WasmConfig::default());
    finish(wasm.launch(launch_of(&wasm_dir, &wasm_manifest)).unwrap());

    let shell_dir = folder("true");
    std::fs::write(shell_dir.join("run.sh"), "true\n").unwrap();
    let shell_manifest =
        Manifest::parse("name: truth\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n")
            .unwrap();
    let shell = ShellExecutor::default();

    let mut g = c.benchmark_group("ondemand_hello");
    g.bench_function("wasm_executor", |b| {
        b.iter(|| finish(wasm.launch(launch_of(&wasm_dir, &wasm_manifest)).unwrap()))
    });
    g.bench_function("shell_true_oneshot", |b| {
        b.iter(|| {
            finish(
                shell
                    .launch(launch_of(&shell_dir, &shell_manifest))
                    .unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, executors);
criterion_main!(benches);
