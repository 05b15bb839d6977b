//! Wasm benchmarks, each side by side in one run:
//! - an ondemand cycle of a hello module through the executor vs the same cycle written
//!   directly against wasmtime with the pooling allocator (new store, WASI context,
//!   instantiate from `InstancePre`, `_start`);
//! - that executor cycle vs a bare `std::process::Command` spawn and wait of `true` (the
//!   cheapest process a shell run could be; the same cycle against the shell executor itself
//!   is `cargo bench -p outpost --bench executors`, where both executors may meet);
//! - the first run from the on-disk cache vs the first run with compilation.
//!
//! Run with `cargo bench -p outpost-exec-wasm --bench ondemand`.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use outpost_core::executor::{Executor, Launch, RunHandle};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Manifest;
use outpost_exec_wasm::{WasmConfig, WasmExecutor, engine_config};
use wasmtime::{Engine, Linker, Module, Store};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;

#[path = "../tests/common/mod.rs"]
mod common;

use common::HELLO;

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-wasm-bench-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn launch_of(dir: &std::path::Path, manifest: &Manifest) -> Launch {
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

fn ondemand(c: &mut Criterion) {
    let dir = folder("hello");
    std::fs::write(dir.join("hello.wat"), HELLO).unwrap();
    let manifest =
        Manifest::parse("name: hello\nenvironment: wasm\nlifecycle: ondemand\nentry: hello.wat\n")
            .unwrap();
    let executor = WasmExecutor::new(WasmConfig::default());
    finish(executor.launch(launch_of(&dir, &manifest)).unwrap());

    // The same cycle, written directly against wasmtime.
    struct State {
        wasi: WasiP1Ctx,
    }
    let engine = Engine::new(&engine_config(64)).unwrap();
    let mut linker: Linker<State> = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut State| &mut s.wasi).unwrap();
    let module = Module::new(&engine, HELLO).unwrap();
    let pre = linker.instantiate_pre(&module).unwrap();

    let truth = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a `true` binary");

    let mut g = c.benchmark_group("ondemand_hello");
    g.bench_function("direct_wasmtime", |b| {
        b.iter(|| {
            let wasi = WasiCtxBuilder::new()
                .arg("hello.wat")
                .stdout(wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(1 << 20))
                .build_p1();
            let mut store = Store::new(&engine, State { wasi });
            store.set_epoch_deadline(1 << 40);
            let instance = pre.instantiate(&mut store).unwrap();
            let start = instance
                .get_typed_func::<(), ()>(&mut store, "_start")
                .unwrap();
            start.call(&mut store, ()).unwrap();
        })
    });
    g.bench_function("executor", |b| {
        b.iter(|| finish(executor.launch(launch_of(&dir, &manifest)).unwrap()))
    });
    g.bench_function("bare_spawn_true", |b| {
        b.iter(|| {
            let status = std::process::Command::new(truth)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        })
    });
    g.finish();

    let cache = folder("cache");
    let mut g = c.benchmark_group("first_run");
    g.sample_size(10);
    g.bench_function("compile", |b| {
        b.iter_batched(
            || {
                let _ = std::fs::remove_dir_all(&cache);
                WasmExecutor::new(WasmConfig {
                    cache_dir: Some(cache.clone()),
                    ..WasmConfig::default()
                })
            },
            |executor| finish(executor.launch(launch_of(&dir, &manifest)).unwrap()),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("disk_cache", |b| {
        // Warm the disk cache once; every iteration is a fresh executor reading it.
        finish(
            WasmExecutor::new(WasmConfig {
                cache_dir: Some(cache.clone()),
                ..WasmConfig::default()
            })
            .launch(launch_of(&dir, &manifest))
            .unwrap(),
        );
        b.iter_batched(
            || {
                WasmExecutor::new(WasmConfig {
                    cache_dir: Some(cache.clone()),
                    ..WasmConfig::default()
                })
            },
            |executor| finish(executor.launch(launch_of(&dir, &manifest)).unwrap()),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, ondemand);
criterion_main!(benches);
