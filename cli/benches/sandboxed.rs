//! A shell oneshot through the whole system, sandboxed against the same oneshot unsandboxed,
//! in the same run: `POST /v1/executions` with `wait` through the real server to a daemon on
//! the tokio host and back, for a script that runs `true` — the wall a user's `outpost
//! execute` sees. The owner's policy lets the operator opt out, so the capability whose
//! manifest says `confine: false` runs unsandboxed and the other runs in the sandbox (user,
//! mount and PID namespaces, its own root, Landlock; the context's grant keeps egress `all`,
//! so no network namespace).
//!
//! Printed at the end: the medians of both, measured interleaved (one of each per round), and
//! their ratio (target ≤ 1.3×), and the same for a short real job (a Python interpreter that
//! starts and imports a module). `cargo bench -p outpost-exec-shell --bench confined` measures
//! the executor alone, where the sandbox's fixed set-up is the whole difference.
//!
//! The helper is this bench's own executable, which dispatches the `confine` subcommand to
//! `outpost_host::sandbox::helper_main` as the `outpost` binary does.
//!
//! Run with `cargo bench -p outpost --bench sandboxed`.
#![allow(missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, World};
use criterion::Criterion;
use outpost_core::executor::Registry;
use outpost_core::grant::{ConfinementPolicy, LocalPolicy};
use outpost_daemon::HostKind;
use outpost_exec_shell::{ShellConfig, ShellExecutor};
use outpost_host::sandbox::{self, SandboxConfig};
use serde_json::{Value, json};

/// The allocator the `outpost` binary runs with, so the bench measures the system as it ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An inline shell capability running `script`; `confine: false` asks to run unsandboxed.
fn capability(script: &str, confine: bool) -> Value {
    use base64::Engine as _;
    json!({
        "kind": "inline",
        "manifest": format!("name: job\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: {confine}\n"),
        "files": [{"path": "run.sh", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script)}],
    })
}

/// How a run is held: unsandboxed, or sandboxed by a daemon that keeps a warm helper ready
/// (as `outpost daemon` does) or by one that starts each run's helper when the run comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Unsandboxed,
    Warm,
    Cold,
}

impl Held {
    const ALL: [Held; 3] = [Held::Unsandboxed, Held::Warm, Held::Cold];

    /// The context (daemon) and whether the manifest leaves the sandbox on.
    fn context(self) -> (&'static str, bool) {
        match self {
            Held::Unsandboxed => ("warm", false),
            Held::Warm => ("warm", true),
            Held::Cold => ("cold", true),
        }
    }
}

/// Runs `script` once, held so, and returns its stdout.
fn execute(world: &World, script: &str, held: Held) -> String {
    let (context, confine) = held.context();
    let body = json!({"capability": capability(script, confine), "context": context, "wait": true, "waitSecs": 60});
    let e = world.post(&body);
    assert_eq!(e["status"], "exited", "{e}");
    assert_eq!(e["exitCode"], 0, "{e}");
    e["stdout"].as_str().unwrap_or_default().to_owned()
}

/// The medians of `rounds` rounds of `script`, one run held each way per round, in an order
/// that rotates, each run `gap` after the one before (untimed): with no gap, a warm helper
/// made after a run competes with the runs that follow it; 20 ms apart, it is made in the
/// idle time between runs, as a daemon that is not saturated makes it.
fn interleaved(world: &World, script: &str, rounds: usize, gap: Duration) -> [Duration; 3] {
    let mut times: [Vec<Duration>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            std::thread::sleep(gap);
            let i = (round + k) % 3;
            let started = Instant::now();
            execute(world, script, Held::ALL[i]);
            times[i].push(started.elapsed());
        }
    }
    times.map(|mut t| {
        t.sort();
        t[t.len() / 2]
    })
}

/// A daemon joined as `name` with the shell executor, its sandbox warm or not, under a
/// policy that lets the operator's runs opt out.
fn daemon(world: &World, name: &str, warm: bool) -> Daemon {
    let mut registry = Registry::new();
    registry.register(Box::new(ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(std::env::current_exe().unwrap()),
            support: None,
            warm,
        },
        ..ShellConfig::default()
    })));
    let daemon = Daemon::start_with_policy(
        HostKind::Tokio,
        world.dir.join(name),
        name,
        &world.join,
        2,
        registry,
        LocalPolicy {
            confinement: ConfinementPolicy::OperatorMayOptOut,
            ..LocalPolicy::default()
        },
    );
    world.online(name);
    daemon
}

fn bench(c: &mut Criterion) {
    let world = World::new("sandboxed");
    let _daemons = [daemon(&world, "warm", true), daemon(&world, "cold", false)];
    // Each run is what it claims: a sandboxed shell is PID 2 under the sandbox's PID 1, and
    // a warm helper's run has the warm helper's private folder.
    assert_ne!(execute(&world, "echo $$\n", Held::Unsandboxed).trim(), "2");
    assert_eq!(execute(&world, "echo $$\n", Held::Cold).trim(), "2");
    assert_eq!(execute(&world, "echo $$\n", Held::Warm).trim(), "2");
    let home = |held| execute(&world, "echo $HOME\n", held);
    let warm_home = (0..1000)
        .map(|_| home(Held::Warm))
        .find(|h| h.contains("outpost-run-warm-"));
    assert!(warm_home.is_some(), "no run was served by a warm helper");
    assert!(!home(Held::Cold).contains("outpost-run-warm-"));

    let mut g = c.benchmark_group("shell_execute");
    g.sample_size(50).measurement_time(Duration::from_secs(8));
    for held in Held::ALL {
        let name = format!("{held:?}").to_lowercase();
        g.bench_function(name, |b| b.iter(|| execute(&world, "true\n", held)));
    }
    g.finish();

    for (what, script, rounds) in [
        ("true", "true\n", 300),
        (
            "python3 -c 'import json'",
            "/usr/bin/python3 -c 'import json'\n",
            100,
        ),
    ] {
        for gap in [Duration::ZERO, Duration::from_millis(20)] {
            let [open, warm, cold] = interleaved(&world, script, rounds, gap);
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "shell_execute/interleaved_medians `{what}`, {rounds} rounds {gap:?} apart: \
                 unsandboxed {:.2} ms, sandboxed warm {:.2} ms ({:.2}×), cold {:.2} ms ({:.2}×); \
                 target ≤ 1.3×",
                ms(open),
                ms(warm),
                ms(warm) / ms(open),
                ms(cold),
                ms(cold) / ms(open),
            );
        }
    }
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(sandbox::SUBCOMMAND)) {
        return sandbox::helper_main(args);
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    // The warm helpers left ready, and their private folders.
    sandbox::retire_warm_helpers();
    std::process::ExitCode::SUCCESS
}
