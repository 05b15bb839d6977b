//! A sandboxed shell oneshot against the same oneshot unsandboxed, in the same run: a script
//! that runs `true` under `sh`, through the shell executor, with the sandbox's namespaces and
//! Landlock set up anew for every run (egress `all`: user, mount and PID namespaces; egress
//! `none`: a network namespace too; an allowlist: the gate and its bridge as well).
//!
//! The helper is this bench's own executable, which dispatches the `confine` subcommand to
//! `outpost_host::sandbox::helper_main` as an embedder's binary does (the `outpost` binary is
//! larger, so its two extra execs cost somewhat more).
//!
//! `shell_oneshot_warm` runs the same oneshots through an executor that keeps a warm helper
//! ready (as the daemon does): `ready_*` waits, untimed, until the warm helper is ready before
//! each run (a run that arrives at a daemon not busy making one), `back_to_back` runs one
//! after the other, so most runs find the next warm helper still being made and start their
//! own (every run's set-up is paid, on a second core where one is free).
//!
//! A second group runs a short real job (a Python interpreter that starts and imports a
//! module), where the sandbox's fixed set-up is a share of the run rather than all of it.
//!
//! Run with `cargo bench -p outpost-exec-shell --bench confined`. Target: ≤ 1.3×.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

use criterion::Criterion;
use outpost_core::executor::{Executor, Launch};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Manifest;
use outpost_core::wire::Egress;
use outpost_exec_shell::{ShellConfig, ShellExecutor};
use outpost_host::sandbox as confine;
use outpost_host::sandbox::SandboxConfig;

fn capability(tag: &str, script: &str) -> (PathBuf, Manifest) {
    let dir = std::env::temp_dir().join(format!(
        "outpost-bench-confined-{tag}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.sh"), script).unwrap();
    let manifest =
        Manifest::parse("name: truth\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n")
            .unwrap();
    (dir.canonicalize().unwrap(), manifest)
}

fn oneshot(
    executor: &ShellExecutor,
    dir: &std::path::Path,
    manifest: &Manifest,
    confined: bool,
    egress: Egress,
) {
    let mut handle = executor
        .launch(Launch {
            run_id: "bench".into(),
            dir: dir.to_path_buf(),
            entry_bytes: None,
            manifest: manifest.clone(),
            extra_args: Vec::new(),
            mounts: Vec::new(),
            denylist: CredentialDenylist::empty(),
            cwd: None,
            timeout: Duration::from_secs(10),
            egress,
            confined,
            context: "bench".into(),
        })
        .unwrap();
    let outcome = loop {
        if let Some(o) = handle.wait(Duration::from_secs(10)).unwrap() {
            break o;
        }
    };
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&outcome.stderr)
    );
}

fn bench(c: &mut Criterion) {
    let (dir, manifest) = capability("true", "true\n");
    let executor = ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(std::env::current_exe().unwrap()),
            support: None,
            warm: false,
        },
        ..ShellConfig::default()
    });
    let mut g = c.benchmark_group("shell_oneshot");
    g.bench_function("unconfined", |b| {
        b.iter(|| oneshot(&executor, &dir, &manifest, false, Egress::All))
    });
    g.bench_function("confined_egress_all", |b| {
        b.iter(|| oneshot(&executor, &dir, &manifest, true, Egress::All))
    });
    g.bench_function("confined_egress_none", |b| {
        b.iter(|| oneshot(&executor, &dir, &manifest, true, Egress::None))
    });
    let allowlist = Egress::Allowlist {
        hosts: vec!["example.com:443".into()],
    };
    g.bench_function("confined_allowlist", |b| {
        b.iter(|| oneshot(&executor, &dir, &manifest, true, allowlist.clone()))
    });
    g.finish();
    let helper = std::env::current_exe().unwrap();
    let warm = ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(helper.clone()),
            support: None,
            warm: true,
        },
        ..ShellConfig::default()
    });
    let mut g = c.benchmark_group("shell_oneshot_warm");
    for (name, egress) in [
        ("ready_egress_all", Egress::All),
        ("ready_egress_none", Egress::None),
        ("ready_allowlist", allowlist.clone()),
    ] {
        // One run of this kind first: it makes the first warm helper ready.
        oneshot(&warm, &dir, &manifest, true, egress.clone());
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    while !confine::warm_helper_ready(&helper, &egress) {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let started = std::time::Instant::now();
                    oneshot(&warm, &dir, &manifest, true, egress.clone());
                    total += started.elapsed();
                }
                total
            })
        });
    }
    g.bench_function("back_to_back_egress_all", |b| {
        b.iter(|| oneshot(&warm, &dir, &manifest, true, Egress::All))
    });
    g.finish();
    // A short job of the kind a shell oneshot runs: a Python interpreter that starts, imports
    // a module and ends (tens of milliseconds), where the sandbox's fixed set-up is a share.
    let (dir, manifest) = capability("python", "/usr/bin/python3 -c 'import json'\n");
    let mut g = c.benchmark_group("shell_oneshot_python");
    g.bench_function("unconfined", |b| {
        b.iter(|| oneshot(&executor, &dir, &manifest, false, Egress::All))
    });
    g.bench_function("confined_egress_none", |b| {
        b.iter(|| oneshot(&executor, &dir, &manifest, true, Egress::None))
    });
    g.finish();
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(confine::SUBCOMMAND)) {
        return confine::helper_main(args);
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    // The warm helpers left ready, and their private folders.
    confine::retire_warm_helpers();
    std::process::ExitCode::SUCCESS
}
