//! `outpost daemon`: joins a server and runs capabilities for it until stopped, revoked or
//! replaced; `outpost daemon install | status | logs | restart | uninstall` (see `service`)
//! run it as a service instead of in this terminal.
//!
//! SIGTERM or SIGINT drains (new runs are refused with `draining`, runs in flight and
//! background host commands finish, results are acknowledged); a second signal, or a drain
//! longer than [`DRAIN_LIMIT`], stops at once. A daemon stopped for good (revoked, replaced,
//! unregistered, or started again with `stopped.json` there) exits 0 and, run as a service,
//! disables its service.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::join::Join;
use outpost_core::keyset::RootKey;
use outpost_daemon::{
    DRAIN_LIMIT, DaemonError, DaemonExit, DaemonOptions, HostKind, LOG_FILE, Launcher, OwnedHost,
    PASSPHRASE_VAR, SERVICE_VAR, ServerChoice, ServiceAction, StopSignal, after_stop,
    hand_over_at_start, run_daemon, run_service_action,
};
use outpost_host::{HOME_VAR, OwnerFolders};

use crate::executors;

/// Exit status for a configuration the owner must fix (bad join, bad home, key mode).
const EXIT_CONFIG: u8 = 78;
/// Exit status when the server cannot be reached or refuses the registration.
const EXIT_UNAVAILABLE: u8 = 69;

/// What `outpost daemon` takes.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DaemonArgs {
    /// Run the daemon as a service instead (none: run it here, in this terminal).
    #[command(subcommand)]
    pub action: Option<ServiceAction>,
    /// The join string `outpost serve` printed (first start only). It holds a credential:
    /// prefer --join-file or OUTPOST_JOIN, which keep it out of the process list.
    #[arg(long)]
    pub join: Option<String>,
    /// A file holding the join string (`-`: read it from standard input).
    #[arg(long, value_name = "FILE", conflicts_with = "join")]
    pub join_file: Option<PathBuf>,
    /// This machine's name on the server (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// One folder for the daemon's key, outbox and runs (default: the XDG folders).
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
    /// Runs held at once (1–8).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub max_concurrent: u32,
    /// The server's URL, instead of --join (with --root and OUTPOST_TOKEN).
    #[arg(long)]
    pub server: Option<String>,
    /// The server's root public key (base64url), with --server. A key may begin with `-`
    /// (base64url's 63rd digit): it is still read as the key.
    #[arg(long, allow_hyphen_values = true)]
    pub root: Option<String>,
    /// An extra CA certificate (PEM) to trust for the server: the global `--ca` (default:
    /// OUTPOST_CA_FILE).
    #[arg(skip)]
    pub ca: Option<PathBuf>,
    /// The host the daemon runs on: tokio, smol, or blocking (std threads only).
    #[arg(long, default_value = "tokio", value_parser = host_kind)]
    pub host: HostKind,
}

fn host_kind(name: &str) -> Result<HostKind, String> {
    HostKind::parse(name)
        .ok_or_else(|| format!("{name:?} is not a host: use tokio, smol or blocking"))
}

/// The owner's folders: `--home DIR` holds them all (as `OUTPOST_HOME` does).
pub fn folders(home: Option<&Path>) -> anyhow::Result<OwnerFolders> {
    let folders = match home {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the home {}", dir.display()))?;
            let dir = dir
                .canonicalize()
                .with_context(|| format!("the home {}", dir.display()))?;
            OwnerFolders::from_vars(|name| {
                if name == HOME_VAR {
                    Some(dir.clone().into_os_string())
                } else {
                    std::env::var_os(name)
                }
            })
        }
        None => OwnerFolders::from_env(),
    };
    folders.map_err(|e| anyhow::anyhow!("the daemon's folders: {e} (pass --home DIR)"))
}

/// The root key of `--root`: its base64url public key (the id is derived as the server
/// derives it, `root-` and the key's first 12 characters).
fn root_key(text: &str) -> anyhow::Result<RootKey> {
    let bytes = outpost_core::b64::decode_array::<32>(text.trim())
        .map_err(|e| anyhow::anyhow!("--root is not a base64url Ed25519 key: {e}"))?;
    let public_key = ed25519_dalek::VerifyingKey::from_bytes(&bytes)
        .map_err(|_| anyhow::anyhow!("--root is not an Ed25519 public key"))?;
    Ok(RootKey {
        id: format!("root-{}", &text.trim()[..12]),
        public_key,
    })
}

/// The join string, from --join, --join-file (`-`: standard input) or `OUTPOST_JOIN`, and
/// where it came from (for errors).
fn join_text(args: &DaemonArgs) -> anyhow::Result<Option<(String, &'static str)>> {
    if let Some(join) = &args.join {
        return Ok(Some((join.clone(), "--join")));
    }
    if let Some(path) = &args.join_file {
        let text = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| anyhow::anyhow!("--join-file -: reading standard input: {e}"))?;
            text
        } else {
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--join-file {}: {e}", path.display()))?
        };
        return Ok(Some((text, "--join-file")));
    }
    Ok(std::env::var("OUTPOST_JOIN")
        .ok()
        .filter(|j| !j.trim().is_empty())
        .map(|j| (j, "OUTPOST_JOIN")))
}

fn server_choice(args: &DaemonArgs) -> anyhow::Result<ServerChoice> {
    let join = join_text(args)?;
    match (&join, &args.server, &args.root) {
        (Some((join, from)), None, None) => Ok(ServerChoice::Join(
            Join::parse(join).map_err(|e| anyhow::anyhow!("{from}: {e}"))?,
        )),
        (None, Some(url), Some(root)) => Ok(ServerChoice::Explicit {
            url: url.clone(),
            root: root_key(root)?,
            token: std::env::var("OUTPOST_TOKEN").unwrap_or_default(),
        }),
        (None, None, None) => Ok(ServerChoice::Saved),
        (Some(_), _, _) => {
            anyhow::bail!("--join replaces --server and --root: pass one or the other")
        }
        _ => anyhow::bail!("--server and --root go together"),
    }
}

/// A stop request per SIGINT or SIGTERM; a drain still going after [`DRAIN_LIMIT`] gets a
/// second one.
fn stop_on_signals() -> anyhow::Result<StopSignal> {
    let stop = StopSignal::new();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])?;
    let raise = stop.clone();
    std::thread::spawn(move || {
        for _ in signals.forever() {
            raise.raise();
            if raise.count() == 1 {
                let late = raise.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(DRAIN_LIMIT);
                    if late.count() == 1 {
                        tracing::warn!(
                            "runs or host commands outlasted the drain's {} s: stopping at once",
                            DRAIN_LIMIT.as_secs()
                        );
                        late.raise();
                    }
                });
            }
        }
    });
    Ok(stop)
}

fn default_name() -> String {
    let raw = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let name: String = raw
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(64)
        .collect();
    if name.is_empty() {
        "machine".into()
    } else {
        name
    }
}

pub fn daemon(mut args: DaemonArgs) -> anyhow::Result<ExitCode> {
    if let Some(action) = args.action.take() {
        return Ok(run_service_action(
            action,
            args.home.as_deref(),
            &mut crate::stdout::lock(),
        ));
    }
    let launcher = match Launcher::from_var(std::env::var(SERVICE_VAR).ok().as_deref()) {
        Ok(launcher) => launcher,
        Err(why) => {
            eprintln!("outpost: {why} [bad_service_var]");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let server = server_choice(&args)?;
    let folders = folders(args.home.as_deref())?;
    // A daemon in a terminal keeps its own log for `outpost daemon logs` (a service's log
    // is the journal's, or the file launchd writes its stderr to).
    if launcher == Launcher::Terminal {
        let path = folders.state.join(LOG_FILE);
        if let Err(e) =
            std::fs::create_dir_all(&folders.state).and_then(|()| crate::log_file::keep(&path))
        {
            eprintln!(
                "outpost: cannot keep the log in {}: {e}; logging to stderr only",
                path.display()
            );
        }
    }
    // An older binary runs the newest proven update instead (a staged one on its trial).
    if let Some(failed) = hand_over_at_start(&folders) {
        eprintln!("outpost: {failed}");
    }
    let local = crate::policy::read(&folders.local_policy_file())?;
    let swept = outpost_host::sandbox::sweep_leftovers();
    if swept > 0 {
        tracing::info!(
            swept,
            "removed the private folders of runs whose daemon is gone"
        );
    }
    // `fs` tells the server this machine can mount folders at all (its owner allows some);
    // `host-operator-only` that a shared run gets none of them (the runner mounts nothing
    // for a `sharedRun`), so the server may send shared runs while the grant lists folders.
    let mut features = vec![outpost_core::routing::HOST_OPERATOR_ONLY_FEATURE.to_owned()];
    if !local.folders.is_empty() {
        features.push("fs".to_owned());
    }
    // What the sandbox can enforce here, probed once, and the owner's rule for it: the
    // server shows them with the context (`sandbox:*`, `confinement:*`).
    features.extend(crate::sandbox_view::features(
        &local,
        &crate::sandbox_view::kernel(),
    ));
    // The owner lets the server record what operators type into terminals here.
    if local.record_terminal_input {
        features.push(outpost_core::terminal::cast::FEATURE_RECORD_INPUT.to_owned());
    }
    let options = DaemonOptions {
        server,
        name: args.name.clone().unwrap_or_else(default_name),
        folders: folders.clone(),
        max_concurrent: args.max_concurrent,
        ca_file: args
            .ca
            .clone()
            .or_else(|| std::env::var_os("OUTPOST_CA_FILE").map(PathBuf::from)),
        local,
        features,
        seed: 0,
        passphrase: std::env::var(PASSPHRASE_VAR).ok(),
        launcher,
    };
    let registry = executors::registry(
        &executors::DAEMON_ENVIRONMENTS,
        Some(folders.wasm_cache()),
        true,
    );
    let host = OwnedHost::new(args.host).map_err(DaemonError::Runtime)?;
    let stop = stop_on_signals()?;
    let ended = run_daemon(options, registry, host.host.clone(), stop);
    outpost_host::sandbox::retire_warm_helpers();
    // Said before a hand-over replaces this process; acted on after what ended is said.
    let said = ended_line(&ended);
    eprintln!("{said}");
    crate::log_file::line(&said);
    if let Some(failed) = after_stop(&ended, launcher, &folders) {
        eprintln!("outpost: {failed}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::from(match &ended {
        Ok(exit) => exit.code(),
        // Stopped for good: exit 0, which no service manager restarts.
        Err(DaemonError::Unregistered { .. } | DaemonError::StoppedForGood { .. }) => 0,
        Err(e) => exit_status(e),
    }))
}

/// What the daemon says when it stops, as `ended` says it stopped.
fn ended_line(ended: &Result<DaemonExit, DaemonError>) -> String {
    match ended {
        Ok(exit) => format!(
            "outpost: {}",
            match exit {
                DaemonExit::Drained => "stopped; every result was delivered",
                DaemonExit::Interrupted =>
                    "stopped at once; undelivered results stay in the outbox for the next start",
                DaemonExit::Replaced =>
                    "replaced: another daemon connected with this machine's key; this one will not reconnect",
                DaemonExit::Revoked =>
                    "revoked by the server's operator; this daemon will not reconnect",
                DaemonExit::Updated =>
                    "every result was delivered; handing over to the verified update",
                DaemonExit::Restart =>
                    "restarting at an operator's request: every result was delivered; the service manager starts the daemon again",
            }
        ),
        Err(e) => format!("outpost: {e} [{}]", e.code()),
    }
}

fn exit_status(e: &DaemonError) -> u8 {
    match e {
        DaemonError::Keys { .. } | DaemonError::Register { .. } => EXIT_UNAVAILABLE,
        DaemonError::Home { .. }
        | DaemonError::HomeLocked { .. }
        | DaemonError::BadStateFile { .. }
        | DaemonError::KeyExposed { .. }
        | DaemonError::BadKey { .. }
        | DaemonError::KeyringUnavailable { .. }
        | DaemonError::PassphraseRequired(_)
        | DaemonError::WrongPassphrase(_)
        | DaemonError::BadServerFile { .. }
        | DaemonError::NotJoined
        | DaemonError::OtherServer { .. }
        | DaemonError::Join(_)
        | DaemonError::Tls(_) => EXIT_CONFIG,
        _ => 1,
    }
}
