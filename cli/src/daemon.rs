//! `outpost daemon`: joins a server and runs capabilities for it until stopped, revoked or
//! replaced.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_adapters::daemon::{
    DaemonError, DaemonExit, DaemonOptions, HostKind, OwnedHost, ServerChoice, StopSignal,
    run_daemon,
};
use outpost_core::grant::LocalPolicy;
use outpost_core::join::Join;
use outpost_core::keyset::RootKey;
use outpost_host::{HOME_VAR, OwnerFolders};

use crate::executors;

/// Exit status for a configuration the owner must fix (bad join, bad home, key mode).
const EXIT_CONFIG: u8 = 78;
/// Exit status when the server cannot be reached or refuses the registration.
const EXIT_UNAVAILABLE: u8 = 69;

/// What `outpost daemon` was given.
pub struct DaemonArgs {
    pub join: Option<String>,
    pub name: Option<String>,
    pub home: Option<PathBuf>,
    pub max_concurrent: u32,
    pub server: Option<String>,
    pub root: Option<String>,
    pub ca: Option<PathBuf>,
    pub host: HostKind,
}

/// The owner's folders: `--home DIR` holds them all (as `OUTPOST_HOME` does).
fn folders(home: Option<&Path>) -> anyhow::Result<OwnerFolders> {
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

fn server_choice(args: &DaemonArgs) -> anyhow::Result<ServerChoice> {
    match (&args.join, &args.server, &args.root) {
        (Some(join), None, None) => Ok(ServerChoice::Join(
            Join::parse(join).map_err(|e| anyhow::anyhow!("--join: {e}"))?,
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

/// A stop request per SIGINT or SIGTERM.
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
        }
    });
    Ok(stop)
}

fn local_policy(folders: &OwnerFolders) -> anyhow::Result<LocalPolicy> {
    let path = folders.local_policy_file();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("the local policy {} does not read", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LocalPolicy::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
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

pub fn daemon(args: DaemonArgs) -> anyhow::Result<ExitCode> {
    let server = server_choice(&args)?;
    let folders = folders(args.home.as_deref())?;
    let local = local_policy(&folders)?;
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
        features: Vec::new(),
        seed: 0,
    };
    let registry = executors::registry(&executors::DAEMON_ENVIRONMENTS, Some(folders.wasm_cache()));
    let host = OwnedHost::new(args.host).map_err(|e| anyhow::anyhow!("{e}"))?;
    let stop = stop_on_signals()?;
    match run_daemon(options, registry, host.host.clone(), stop) {
        Ok(exit) => {
            eprintln!(
                "outpost: {}",
                match exit {
                    DaemonExit::Drained => "stopped; every result was delivered",
                    DaemonExit::Interrupted =>
                        "stopped at once; undelivered results stay in the outbox for the next start",
                    DaemonExit::Replaced =>
                        "replaced: another daemon connected with this machine's key; this one will not reconnect",
                    DaemonExit::Revoked =>
                        "revoked by the server's operator; this daemon will not reconnect",
                }
            );
            Ok(ExitCode::from(exit.code()))
        }
        Err(e) => {
            eprintln!("outpost: {e} [{}]", e.code());
            Ok(ExitCode::from(exit_status(&e)))
        }
    }
}

fn exit_status(e: &DaemonError) -> u8 {
    match e {
        DaemonError::Keys { .. } | DaemonError::Register { .. } => EXIT_UNAVAILABLE,
        DaemonError::Home { .. }
        | DaemonError::HomeLocked(_)
        | DaemonError::KeyExposed { .. }
        | DaemonError::BadKey { .. }
        | DaemonError::BadServerFile { .. }
        | DaemonError::NotJoined
        | DaemonError::OtherServer { .. }
        | DaemonError::Join(_)
        | DaemonError::Tls(_)
        | DaemonError::Unregistered { .. } => EXIT_CONFIG,
        _ => 1,
    }
}
