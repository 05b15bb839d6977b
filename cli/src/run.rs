//! `outpost run DIR [--json] [--egress none|all] [-- ARGS]`: runs one capability on this machine.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outpost_core::executor::{
    Allowlists, Ending, Launch, Outcome, Registry, RunRefused, Scope, Stream, run_capability,
};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Lifecycle;
use outpost_core::manifest::{MANIFEST_FILE, Manifest};
use outpost_core::wire::{Egress, Environment};
use outpost_exec_docker::{DockerConfig, DockerExecutor};
use outpost_exec_shell::{ServiceState, ServiceTable, ShellExecutor};
use outpost_exec_wasm::{WasmConfig, WasmExecutor};

/// Exit status of a run stopped at its deadline (as `timeout(1)` reports it).
const EXIT_TIMED_OUT: u8 = 124;

/// Exit status of a run stopped by Ctrl-C or SIGTERM (as a shell reports SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

/// What `--egress` lets a capability reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EgressArg {
    /// No network.
    None,
    /// Any destination.
    All,
}

/// Set by SIGINT or SIGTERM. A second one while the flag is set exits at once (130), for a
/// cleanup that hangs.
fn interrupt_flag() -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(
            signal,
            i32::from(EXIT_INTERRUPTED),
            flag.clone(),
        )?;
        signal_hook::flag::register(signal, flag.clone())?;
    }
    Ok(flag)
}

/// The credential denylist under the owner's home (SSH, GPG, cloud and package-manager
/// credentials, outpost's own config). Executors refuse these paths as volumes and working
/// directories; docker also hides them inside read-only volumes and refuses read-write volumes
/// that hold them. Without an absolute `HOME` there is none, and `outpost run` says so.
fn owner_denylist() -> CredentialDenylist {
    let canonical = |p: &Path| {
        let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        outpost_core::grant::CanonicalPath::new(p.to_string_lossy().into_owned()).ok()
    };
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let Some(home) = home.as_deref().and_then(canonical) else {
        eprintln!("outpost: HOME is not an absolute path: no credential denylist applies");
        return CredentialDenylist::empty();
    };
    // A relative XDG_CONFIG_HOME is invalid and ignored, as the XDG spec says.
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| Path::new(home.as_str()).join(".config"))
        .join("outpost");
    let config = canonical(&config).unwrap_or_else(|| home.clone());
    CredentialDenylist::for_home(&home, &config)
}

/// The executor of `environment`, the only one a run needs. Environments without one are
/// refused, never run elsewhere; an executor whose backend is missing (no Docker engine)
/// refuses with the reason and fix. Before a docker run, containers that killed outpost
/// processes left behind are removed.
fn registry(environment: Environment) -> anyhow::Result<Registry> {
    let mut registry = Registry::new();
    match environment {
        Environment::Shell => registry.register(Box::new(ShellExecutor::default())),
        Environment::Wasm => registry.register(Box::new(WasmExecutor::new(WasmConfig {
            cache_dir: wasm_cache_dir(),
            ..WasmConfig::default()
        }))),
        Environment::Docker => {
            let docker =
                DockerExecutor::new(DockerConfig::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
            // An unreachable engine is reported by the launch itself.
            let _ = docker.remove_orphans();
            registry.register(Box::new(docker));
        }
        Environment::Pty => {}
    }
    Ok(registry)
}

/// A refused run, with the flag that lifts an egress refusal here.
fn refusal(e: RunRefused) -> anyhow::Error {
    if e.code() == "egress_denied" {
        anyhow::anyhow!("{e} (here: `outpost run --egress all`)")
    } else {
        anyhow::anyhow!("{e}")
    }
}

/// The machine's owner running a capability by hand grants the folders its manifest
/// declares, with their modes; the credential denylist still applies inside the executor.
fn owner_mounts(
    dir: &Path,
    manifest: &Manifest,
) -> anyhow::Result<Vec<outpost_core::grant::Mount>> {
    manifest
        .volumes
        .iter()
        .map(|v| {
            let host = Path::new(&v.host);
            let host = if host.is_absolute() {
                host.to_path_buf()
            } else {
                dir.join(host)
            };
            let host = host
                .canonicalize()
                .with_context(|| format!("volume {}", host.display()))?;
            let path = outpost_core::grant::CanonicalPath::new(host.to_string_lossy().into_owned())
                .map_err(|e| anyhow::anyhow!("volume {}: {e}", host.display()))?;
            Ok(outpost_core::grant::Mount {
                path,
                mode: v.mode,
                excluded: Vec::new(),
            })
        })
        .collect()
}

/// `$XDG_CACHE_HOME/outpost/wasm`, else `~/.cache/outpost/wasm`.
fn wasm_cache_dir() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?;
    Some(base.join("outpost").join("wasm"))
}

pub fn run(
    dir: &Path,
    json: bool,
    egress: EgressArg,
    args: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let dir = dir
        .canonicalize()
        .with_context(|| format!("capability folder {}", dir.display()))?;
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&manifest_path)
        .with_context(|| format!("reading {}", manifest_path.display()))?;
    let manifest =
        Manifest::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", manifest_path.display()))?;
    // `outpost run` is the machine owner's own command: it allows this one run's environment
    // for its session, as the owner typing it means to.
    let mut allowlists = Allowlists::new();
    allowlists
        .allow(manifest.run_permission(), Scope::Session)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (environment, lifecycle) = (manifest.environment, manifest.lifecycle);
    let timeout = Duration::from_millis(manifest.limits.timeout_ms);
    let mounts = owner_mounts(&dir, &manifest)?;
    let launch = Launch {
        run_id: format!("local-{}", std::process::id()),
        dir,
        manifest,
        extra_args: args,
        mounts,
        denylist: owner_denylist(),
        cwd: None,
        timeout,
        egress: match egress {
            EgressArg::None => Egress::None,
            EgressArg::All => Egress::All,
        },
    };
    if lifecycle == Lifecycle::Persistent {
        return serve(launch);
    }
    let registry = registry(environment)?;
    let interrupted = interrupt_flag()?;
    let mut handle = run_capability(&registry, &allowlists, launch).map_err(refusal)?;
    let mut cancelled = false;
    let outcome = loop {
        if !cancelled && interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            // Ctrl-C or SIGTERM: stop the run and clean up after it (its process group, its
            // container) before exiting.
            handle.cancel().map_err(|e| anyhow::anyhow!("{e}"))?;
            cancelled = true;
        }
        let done = handle
            .wait(Duration::from_millis(50))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if !json {
            for chunk in handle.read_output() {
                let _ = match chunk.stream {
                    Stream::Stdout => std::io::stdout().write_all(&chunk.bytes),
                    Stream::Stderr => std::io::stderr().write_all(&chunk.bytes),
                };
            }
        }
        if let Some(outcome) = done {
            break outcome;
        }
    };
    if json {
        print_json(
            &outcome,
            environment.as_str(),
            lifecycle.as_str(),
            started.elapsed(),
        )?;
    } else if outcome.truncated {
        eprintln!("outpost: output was cut at the manifest's output_max_bytes");
    }
    Ok(exit_code(&outcome))
}

fn print_json(
    o: &Outcome,
    environment: &str,
    lifecycle: &str,
    total: Duration,
) -> anyhow::Result<()> {
    let value = serde_json::json!({
        "exit_code": o.exit_code,
        "signal": o.signal,
        "stdout": String::from_utf8_lossy(&o.stdout),
        "stderr": String::from_utf8_lossy(&o.stderr),
        "truncated": o.truncated,
        "timed_out": o.ending == Ending::TimedOut,
        "environment": environment,
        "lifecycle": lifecycle,
        "timing": {
            "setup_ms": o.setup.as_millis() as u64,
            "execute_ms": o.execute.as_millis() as u64,
            "total_ms": total.as_millis() as u64,
        },
    });
    println!("{}", serde_json::to_string(&value)?);
    Ok(())
}

fn exit_code(o: &Outcome) -> ExitCode {
    match (&o.ending, o.exit_code, o.signal) {
        (Ending::TimedOut, _, _) => ExitCode::from(EXIT_TIMED_OUT),
        (Ending::Cancelled, _, _) => ExitCode::from(EXIT_INTERRUPTED),
        (_, Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (_, None, Some(signal)) => {
            ExitCode::from(128u8.saturating_add(u8::try_from(signal).unwrap_or(0)))
        }
        _ => ExitCode::FAILURE,
    }
}

/// A persistent capability runs in the foreground: its output streams here until it
/// exits (a crash is reported, never restarted) or SIGINT/SIGTERM stops it.
fn serve(launch: Launch) -> anyhow::Result<ExitCode> {
    let registry = registry(launch.manifest.environment)?;
    let environment = launch.manifest.environment;
    let executor = registry.get(environment).ok_or_else(|| {
        anyhow::anyhow!(
            "persistent {} services cannot run here: no executor is installed",
            environment.as_str()
        )
    })?;
    let stop = interrupt_flag()?;
    let name = launch.manifest.name.clone();
    let table = ServiceTable::new();
    let info = table
        .start(executor, launch)
        .map_err(|e| refusal(e.into()))?;
    eprintln!(
        "outpost: {name} running{}{}; Ctrl-C stops it",
        info.id.map(|id| format!(" as {id}")).unwrap_or_default(),
        info.port
            .map(|p| format!(" on port {p}"))
            .unwrap_or_default()
    );
    loop {
        for chunk in table.read_output(&name) {
            let _ = match chunk.stream {
                Stream::Stdout => std::io::stdout().write_all(&chunk.bytes),
                Stream::Stderr => std::io::stderr().write_all(&chunk.bytes),
            };
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            table.stop(&name).map_err(|e| anyhow::anyhow!("{e}"))?;
            eprintln!("outpost: {name} stopped");
            return Ok(ExitCode::SUCCESS);
        }
        let state = table
            .list()
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.state);
        if let Some(ServiceState::Failed { exit_code, signal }) = state {
            eprintln!(
                "outpost: {name} exited (code {exit_code:?}, signal {signal:?}); services are not restarted"
            );
            return Ok(ExitCode::FAILURE);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
