//! `outpost run DIR [--json] [--egress none|all] [--fs PATH:ro|rw]… [--no-confine] [-- ARGS]`:
//! runs one capability on this machine, sandboxed like a daemon's run (seeing the folders
//! `--fs` names) unless `--no-confine` says otherwise.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outpost_core::executor::{
    Allowlists, Ending, Launch, Outcome, OutputChunk, Registry, RunRefused, Scope, Stream,
    run_capability,
};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Lifecycle;
use outpost_core::manifest::{MANIFEST_FILE, Manifest};
use outpost_core::wire::Egress;
use outpost_host::{OwnerError, OwnerFolders, RunningServiceTable, ServiceState, owner_mounts};

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

/// The owner's folders and the credential denylist under the owner's home (SSH, GPG, cloud
/// and package-manager credentials, outpost's own config). Executors refuse these paths as
/// volumes and working directories; docker also hides them inside read-only volumes and
/// refuses read-write volumes that hold them. Without an absolute `HOME` there is no home to
/// guard, and `outpost run` says so; a home whose path is not UTF-8 is an error, never a
/// rewritten denylist.
fn owner() -> anyhow::Result<(Option<OwnerFolders>, CredentialDenylist)> {
    let folders = match OwnerFolders::from_env() {
        Ok(folders) => folders,
        Err(OwnerError::NoHome) => {
            eprintln!("outpost: HOME is not an absolute path: no credential denylist applies");
            return Ok((None, CredentialDenylist::empty()));
        }
        Err(e) => return Err(anyhow::anyhow!("the owner's folders: {e}")),
    };
    if folders.home.is_none() {
        eprintln!(
            "outpost: HOME is not an absolute path: only {} is denylisted",
            folders.config.display()
        );
    }
    let denylist = folders
        .denylist()
        .map_err(|e| anyhow::anyhow!("the credential denylist: {e}"))?;
    Ok((Some(folders), denylist))
}

/// A refused run, with the flag that lifts an egress refusal here.
fn refusal(e: RunRefused) -> anyhow::Error {
    if e.code() == "egress_denied" {
        anyhow::anyhow!("{e} (here: `outpost run --egress all`)")
    } else if e.code() == "confinement_unavailable" {
        anyhow::anyhow!("{e} (here: `outpost run --no-confine` runs it outside the sandbox)")
    } else {
        anyhow::anyhow!("{e}")
    }
}

/// What the owner's `outpost run` lets the run see.
pub struct Sandbox {
    /// `--egress`.
    pub egress: EgressArg,
    /// Not `--no-confine`.
    pub confined: bool,
    /// `--fs PATH:MODE`, as typed.
    pub folders: Vec<(String, String)>,
}

pub fn run(
    dir: &Path,
    json: bool,
    sandbox: Sandbox,
    args: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let Sandbox {
        egress,
        confined,
        folders: typed,
    } = sandbox;
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
    let (folders, denylist) = owner()?;
    // The owner typing the command grants, and allows locally, the folders the manifest
    // declares; the daemon's intersection and denylist apply as to any run.
    let mut mounts =
        owner_mounts(&dir, &manifest, &denylist).map_err(|e| anyhow::anyhow!("volume {e}"))?;
    // `--fs`: the owner typing it grants, and allows locally, these folders for this run.
    let mut granted = Vec::new();
    for (path, mode) in &typed {
        let (_, canonical) = outpost_host::resolve(Path::new(path))
            .map_err(|e| anyhow::anyhow!("--fs {path}: {e} [{}]", e.code()))?;
        let mode = if mode == "rw" {
            outpost_core::wire::FolderMode::Rw
        } else {
            outpost_core::wire::FolderMode::Ro
        };
        granted.push((canonical, mode));
    }
    let local = outpost_core::grant::LocalPolicy {
        folders: granted
            .iter()
            .map(|(path, mode)| outpost_core::grant::LocalFolder {
                path: path.clone(),
                mode: *mode,
            })
            .collect(),
        ..Default::default()
    };
    mounts.extend(outpost_core::grant::effective_mounts(
        &granted, &local, &denylist,
    ));
    let launch = Launch {
        run_id: format!("local-{}", std::process::id()).into(),
        dir,
        entry_bytes: None,
        manifest,
        extra_args: args,
        mounts,
        denylist,
        cwd: None,
        timeout,
        egress: match egress {
            EgressArg::None => Egress::None,
            EgressArg::All => Egress::All,
        },
        // The owner's own run is sandboxed like any other unless they say `--no-confine`.
        confined,
        context: String::new(),
    };
    // The executor of this run's environment alone. One whose backend is missing (no Docker
    // engine) refuses with the reason and the fix; nothing runs elsewhere.
    let registry = crate::executors::registry(
        &[environment],
        folders.as_ref().map(OwnerFolders::wasm_cache),
        false,
    );
    if lifecycle == Lifecycle::Persistent {
        return serve(&registry, &allowlists, launch);
    }
    let interrupted = interrupt_flag()?;
    let mut handle = run_capability(&registry, &allowlists, launch).map_err(refusal)?;
    let mut cancelled = false;
    // Nobody reads the output any more (EPIPE): the run is stopped as on Ctrl-C, and the
    // command ends quietly with `stdout::BROKEN_PIPE`.
    let mut unread = false;
    let outcome = loop {
        let stop = unread || interrupted.load(std::sync::atomic::Ordering::Relaxed);
        if !cancelled && stop {
            // Ctrl-C or SIGTERM: stop the run and clean up after it (its process group, its
            // container) before exiting.
            handle.cancel().map_err(|e| anyhow::anyhow!("{e}"))?;
            cancelled = true;
        }
        let done = handle
            .wait(Duration::from_millis(50))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if !json {
            unread |= write_chunks(handle.read_output(), unread);
        }
        if let Some(outcome) = done {
            break outcome;
        }
    };
    if unread {
        return Ok(ExitCode::from(crate::stdout::BROKEN_PIPE));
    }
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

/// Writes a run's output to this process's stdout and stderr (stdout's chunks dropped once
/// `unread`); whether stdout's reader is gone (EPIPE).
fn write_chunks(chunks: Vec<OutputChunk>, unread: bool) -> bool {
    let mut gone = false;
    for chunk in chunks {
        match chunk.stream {
            Stream::Stdout if unread || gone => {}
            Stream::Stdout => {
                let mut out = std::io::stdout().lock();
                let written = out.write_all(&chunk.bytes).and_then(|()| out.flush());
                gone = written.is_err_and(|e| crate::stdout::is_broken_pipe(&e));
            }
            Stream::Stderr => {
                let _ = std::io::stderr().write_all(&chunk.bytes);
            }
        }
    }
    gone
}

fn print_json(
    o: &Outcome,
    environment: &str,
    lifecycle: &str,
    total: Duration,
) -> anyhow::Result<()> {
    let value = serde_json::json!({
        "exitCode": o.exit_code,
        "signal": o.signal,
        "stdout": String::from_utf8_lossy(&o.stdout),
        "stderr": String::from_utf8_lossy(&o.stderr),
        "truncated": o.truncated,
        "timedOut": o.ending == Ending::TimedOut,
        "environment": environment,
        "lifecycle": lifecycle,
        "timing": {
            "setupMs": o.setup.as_millis() as u64,
            "executeMs": o.execute.as_millis() as u64,
            "totalMs": total.as_millis() as u64,
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
fn serve(registry: &Registry, allowlists: &Allowlists, launch: Launch) -> anyhow::Result<ExitCode> {
    let stop = interrupt_flag()?;
    let name = launch.manifest.name.clone();
    let table = RunningServiceTable::new();
    // The same permission check, trust ceiling and probe as every other run.
    let info = table.start(registry, allowlists, launch).map_err(refusal)?;
    eprintln!(
        "outpost: {name} running{}{}; Ctrl-C stops it",
        info.id.map(|id| format!(" as {id}")).unwrap_or_default(),
        info.port
            .map(|p| format!(" on port {p}"))
            .unwrap_or_default()
    );
    let mut unread = false;
    loop {
        unread |= write_chunks(table.read_output(&name), unread);
        if unread {
            table.stop(&name).map_err(|e| anyhow::anyhow!("{e}"))?;
            return Ok(ExitCode::from(crate::stdout::BROKEN_PIPE));
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            table.stop(&name).map_err(|e| anyhow::anyhow!("{e}"))?;
            eprintln!("outpost: {name} stopped");
            return Ok(ExitCode::SUCCESS);
        }
        let state = table.get(&name).map(|s| s.state);
        if let Some(ServiceState::Failed { exit_code, signal }) = state {
            eprintln!(
                "outpost: {name} exited (code {exit_code:?}, signal {signal:?}); services are not restarted"
            );
            return Ok(ExitCode::FAILURE);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
