//! # outpost-daemon
//!
//! The machine-side application: what `outpost daemon` runs. It joins a server (first start:
//! a machine key, a signed registration), then drives the core's [`Daemon`] over a real
//! WebSocket on the chosen [`HostKind`], carrying out its commands with the executors it was
//! given, and writing every record to the result outbox before the output that depends on it.
//!
//! - [`home`]: the files in the owner's folders (key, server, outbox, lock, runs).
//! - [`lock`]: one runner per home, `daemon.lock` naming its holder.
//! - [`key`]: the machine key at rest (keyring, passphrase or file key), `os_keyring` the
//!   OS keyring's side of it.
//! - [`status`]: `daemon.json` while it runs, `stopped.json` once stopped for good.
//! - [`store`]: the durable records (result outbox, seen runs, waits) in SQLite.
//! - `bootstrap`: the start before the loop (key, join, key set, registration, outbox).
//! - `driver`: one loop over the core's `handle_input` / `poll_output`; `ctx` the context the
//!   loop's handlers share.
//! - `runner`: runs on blocking threads, cancel flags, reaping after a crash; `terminals`
//!   the PTY runs' output and input.
//! - `checks`: condition waits checked on the machine (in `outpost-condition`'s sandbox), on
//!   the threads of `pool`, made when a check finds none idle and kept for the next.
//! - [`owner`]: the machine owner's commands speaking for the machine.
//! - [`update`]: signed self-update (check, stage, prove, hand over, fall back).
//! - `patience`: start-up requests retried while the server is unreachable or busy.
//! - `policy`: the owner's local policy, read again when its file changes.
//! - `bridge`: host commands for a live operator's run, on a socket in its folder
//!   ([`COMMANDS_SOCKET`]), one [`BridgeRequest`] line and one [`BridgeAnswer`] line per
//!   connection; the daemon keeps one `HostCommands` for its life, its local switch from the
//!   policy's `commandsEnabled`, its server switch from the grant.
//! - [`service`]: the daemon as a service of the owner's service manager (`outpost daemon
//!   install | status | logs | restart | uninstall`).
//!
//! - `process`: the process around [`run_daemon`]: [`hand_over_at_start`] to a proven update,
//!   and [`after_stop`] (a service stopped for good is disabled, a drained daemon hands over
//!   to its update).
//! - `leftovers`: what ended runs left, cleaned up once their results are delivered.
//! - `trim`: an idle daemon's code given back (the clean pages of its binary and its C
//!   libraries dropped after a quiet spell, and again after each heartbeat's work).
//!
//! The CLI uses only the crate's root: [`run_daemon`] with [`DaemonOptions`], an executor
//! [`Registry`] and an [`OwnedHost`]'s host, [`hand_over_at_start`] and [`after_stop`] around
//! it, [`run_service_action`] for the service commands, [`machine_client`] for the owner's
//! commands, and the names it shares ([`PASSPHRASE_VAR`], [`SERVICE_VAR`], [`LOG_FILE`],
//! [`COMMANDS_SOCKET`] with its [`BridgeRequest`] and [`BridgeAnswer`], [`DRAIN_LIMIT`],
//! [`running_version`]).
//!
//! This crate owns the daemon's process lifecycle: start, reconnects, drain, exit, and every
//! file in the owner's folders. It never decides what the protocol allows (the core does),
//! never picks an executor for an environment the registry does not hold (it imports no
//! executor: the CLI gives it the registry), and never starts an async
//! runtime itself: the host it is given (`outpost-adapters`) does.
//!
//! [`Daemon`]: outpost_core::daemon::Daemon

mod bootstrap;
mod bridge;
mod checks;
mod ctx;
mod driver;
pub mod home;
pub mod key;
mod leftovers;
mod os_keyring;
pub mod owner;
mod patience;
mod policy;
mod pool;
mod process;
mod recent_log;
mod runner;
pub mod service;
mod standing;
pub mod store;
mod terminals;
mod trim;
pub mod update;
mod watch;

pub use bridge::SOCKET_NAME as COMMANDS_SOCKET;
pub use bridge::{BridgeAnswer, BridgeEnded, BridgeEnding, BridgeOp, BridgeRequest};
pub use home::{lock, status};
// The surface the CLI uses, at the crate's root.
pub use driver::control::{PAUSED_FILE, Paused, paused_at_start};
pub use key::PASSPHRASE_VAR;
pub use lock::SERVICE_VAR;
pub use owner::machine_client;
pub use process::{after_stop, hand_over_at_start};
pub use recent_log::RecentLog;
pub use service::{LOG_FILE, ServiceAction, run as run_service_action};
pub use update::running_version;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outpost_core::executor::Registry;
use outpost_core::grant::LocalPolicy;
use outpost_core::join::{Join, JoinError};
use outpost_core::keyset::RootKey;
use outpost_host::OwnerFolders;

use outpost_adapters::http::HttpError;
use outpost_adapters::runtime::{Host, LinkEvent};
pub use outpost_adapters::runtime::{HostKind, OwnedHost};

pub use driver::MAX_OUTPUTS_PER_WAKE;
pub use lock::{Holder, Launcher};
pub use status::{StopReason, Stopped};

/// Where the daemon finds its server the first time.
#[derive(Debug, Clone)]
pub enum ServerChoice {
    /// A join string (`outpost-join-v1.…`).
    Join(Join),
    /// A server URL, the root key to pin, and a token that may register machines.
    Explicit {
        /// The server's base URL.
        url: String,
        /// The root key to pin: it must sign the server's key set, and `server.json` keeps it.
        root: RootKey,
        /// A token with `execution_context:create`.
        token: String,
    },
    /// What `config/server.json` recorded at an earlier start.
    Saved,
}

/// How one daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The server (on later starts [`ServerChoice::Saved`] is enough).
    pub server: ServerChoice,
    /// The machine's name on the server (`[a-z0-9-]`, 1–64).
    pub name: String,
    /// The owner's folders (the daemon's home).
    pub folders: OwnerFolders,
    /// Runs held at once.
    pub max_concurrent: u32,
    /// An extra CA to trust for the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// The owner's local policy (folders runs may use).
    pub local: LocalPolicy,
    /// Optional features to announce.
    pub features: Vec<String>,
    /// Seeds the reconnect jitter (0: from the OS).
    pub seed: u64,
    /// The passphrase that seals the machine key (`OUTPOST_KEY_PASSPHRASE`); none: a file key.
    pub passphrase: Option<String>,
    /// Who started the daemon: a service waits for a held lock, a terminal daemon is refused.
    pub launcher: Launcher,
}

/// Why the daemon stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonExit {
    /// The owner asked it to stop (SIGTERM / SIGINT): runs in flight finished and their
    /// results were delivered.
    Drained,
    /// A second stop request arrived while draining; runs in flight were cancelled and
    /// undelivered results stay in the outbox.
    Interrupted,
    /// The server closed with 1012: another daemon with this key connected. Never reconnects.
    Replaced,
    /// The operator revoked this machine (4001 or `context_revoked`). Never reconnects.
    Revoked,
    /// A signed update was staged and proven; runs in flight finished and their results
    /// were delivered. The caller hands over to it ([`update::at_start`] names the binary).
    Updated,
    /// An operator asked for a restart from afar: runs in flight finished and their results
    /// were delivered. Exit [`RESTART_EXIT_CODE`], which the service manager restarts.
    Restart,
}

/// The exit code of [`DaemonExit::Restart`] (`EX_TEMPFAIL`): not 0, so the generated systemd
/// unit (`Restart=always`, `RestartPreventExitStatus=0`) and LaunchAgent
/// (`KeepAlive: {SuccessfulExit: false}`) start the daemon again.
pub const RESTART_EXIT_CODE: u8 = 75;

impl DaemonExit {
    /// The process exit code: 0 for every planned end, 130 for an interrupt.
    pub fn code(self) -> u8 {
        match self {
            DaemonExit::Drained
            | DaemonExit::Replaced
            | DaemonExit::Revoked
            | DaemonExit::Updated => 0,
            DaemonExit::Interrupted => 130,
            DaemonExit::Restart => RESTART_EXIT_CODE,
        }
    }
}

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A folder or file of the home cannot be used.
    #[error("the daemon's home: {}: {source}", .path.display())]
    Home {
        /// The folder or file of the home that failed.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Another daemon runs on this home.
    #[error("another outpost daemon is running with the state folder {} ({}); stop it first or pass another --home", .state.display(), .holder.as_ref().map_or_else(|| "it has not named itself yet".to_owned(), ToString::to_string))]
    HomeLocked {
        /// The state folder whose `daemon.lock` another daemon holds.
        state: PathBuf,
        /// The daemon holding it, as its lock line names it.
        holder: Option<Holder>,
    },
    /// A file the daemon keeps in its state folder (`daemon.json`, `stopped.json`) does not
    /// read.
    #[error("{} does not read: {reason}", .path.display())]
    BadStateFile {
        /// The state file that does not read (`daemon.json` or `stopped.json`).
        path: PathBuf,
        /// What the parser said is wrong with it.
        reason: String,
    },
    /// This home's daemon was stopped for good (revoked, replaced, unregistered): it does
    /// not start again while `stopped.json` is there.
    #[error("this machine's daemon was stopped for good ({}): {advice}", .stopped.reason.as_str())]
    StoppedForGood {
        /// What `stopped.json` says.
        stopped: Stopped,
        /// What the owner can do.
        advice: String,
    },
    /// The machine key file is readable by others.
    #[error("the machine key {} has mode {mode:o}: it must be 0600 (chmod 600 it, or remove it to make a new machine)", .path.display())]
    KeyExposed {
        /// The file key (`config/key.file`) whose mode lets others read it.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The machine key file does not read.
    #[error(
        "the machine key {} does not read: {reason}; nothing was changed (restore the file from a backup, or move the config folder aside and join again as a new machine)",
        .path.display()
    )]
    BadKey {
        /// The file that does not read: the sealed key (`key.enc`), its file key, or a clear key an
        /// earlier build wrote.
        path: PathBuf,
        /// What is wrong with it (cut, altered, not base64url, its file key missing, …).
        reason: String,
    },
    /// `server.json` does not read.
    #[error("{} does not read: {reason}", .path.display())]
    BadServerFile {
        /// The `server.json` in the config folder.
        path: PathBuf,
        /// What is wrong with it (not JSON, a root key that does not decode, …).
        reason: String,
    },
    /// The key is sealed with a passphrase and none was given.
    #[error("the machine key {} is sealed with a passphrase: set OUTPOST_KEY_PASSPHRASE", .0.display())]
    PassphraseRequired(PathBuf),
    /// The passphrase does not open the key.
    #[error(
        "OUTPOST_KEY_PASSPHRASE does not open the machine key {}: the passphrase is wrong, or the file was altered; nothing was changed",
        .0.display()
    )]
    WrongPassphrase(PathBuf),
    /// The machine key is sealed with the OS keyring, which does not answer here.
    #[error(
        "the machine key {} is sealed with the OS keyring, which does not answer ({reason}): start the daemon in the login session that holds that keyring; nothing was changed",
        .path.display()
    )]
    KeyringUnavailable {
        /// The sealed key file.
        path: PathBuf,
        /// What the keyring said.
        reason: String,
    },
    /// The OS random source failed.
    #[error("the OS random source failed: {0}")]
    Random(String),
    /// No server is known: this home never joined one.
    #[error(
        "this machine has not joined a server: pass --join JOIN (printed by `outpost serve`), or --server URL --root KEY with OUTPOST_TOKEN"
    )]
    NotJoined,
    /// The home joined another server than the one given.
    #[error("this home already joined {saved}; pass another --home to join {given}")]
    OtherServer {
        /// The server in `server.json`.
        saved: String,
        /// The server given now.
        given: String,
    },
    /// The join string or server URL is refused.
    #[error(transparent)]
    Join(#[from] JoinError),
    /// The TLS configuration (an extra CA) does not load.
    #[error(transparent)]
    Tls(#[from] outpost_adapters::tls::TlsError),
    /// Registering failed.
    #[error("registering with {server}: {source}")]
    Register {
        /// The server's base URL, as joined or given.
        server: String,
        /// The HTTP failure: the server's refusal with its code, or a transport error.
        source: HttpError,
    },
    /// The server's key set cannot be fetched or does not verify against the pinned root.
    #[error("the server's key set ({server}/v1/execution-contexts/server-keys): {source}")]
    Keys {
        /// The server's base URL, as joined or given.
        server: String,
        /// Why the fetch failed, or why the set did not verify against the pinned root.
        source: HttpError,
    },
    /// The server no longer knows this machine (its context was deleted).
    #[error("the server no longer knows this machine ({code}): remove {} and join again", .server_file.display())]
    Unregistered {
        /// The refusal's code.
        code: String,
        /// The file that names the server.
        server_file: PathBuf,
    },
    /// The result outbox failed: the daemon stops rather than lose a result.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The clock cannot be read.
    #[error(transparent)]
    Clock(#[from] outpost_adapters::clock::ClockError),
    /// The async runtime cannot start.
    #[error("the async runtime cannot start: {0}")]
    Runtime(#[source] std::io::Error),
    /// The host misused the core (a bug in this crate).
    #[error("the daemon state machine refused an input: {0}")]
    Core(#[from] outpost_core::daemon::DaemonError),
    /// One wake produced more outputs than any input can (a bug, stopped loudly).
    #[error("one wake produced more than {MAX_OUTPUTS_PER_WAKE} outputs")]
    RunawayOutputs,
}

impl DaemonError {
    pub(crate) fn home(path: &Path, source: std::io::Error) -> Self {
        DaemonError::Home {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The stable `snake_case` code (`home_locked`, `not_joined`, …), or the wrapped error's code.
    pub fn code(&self) -> &str {
        match self {
            DaemonError::Home { .. } => "home_unusable",
            DaemonError::HomeLocked { .. } => "home_locked",
            DaemonError::BadStateFile { .. } => "state_file_unreadable",
            DaemonError::StoppedForGood { .. } => "stopped_for_good",
            DaemonError::KeyExposed { .. } => "key_exposed",
            DaemonError::BadKey { .. } => "key_unreadable",
            DaemonError::BadServerFile { .. } => "server_file_unreadable",
            DaemonError::PassphraseRequired(_) => "passphrase_required",
            DaemonError::WrongPassphrase(_) => "wrong_passphrase",
            DaemonError::KeyringUnavailable { .. } => "keyring_unavailable",
            DaemonError::Random(_) => "random_unavailable",
            DaemonError::NotJoined => "not_joined",
            DaemonError::OtherServer { .. } => "joined_elsewhere",
            DaemonError::Join(e) => e.code(),
            DaemonError::Tls(e) => e.code(),
            DaemonError::Register { source, .. } => source.code(),
            DaemonError::Keys { .. } => "server_keys_unavailable",
            DaemonError::Unregistered { .. } => "unregistered",
            DaemonError::Store(e) => e.code(),
            DaemonError::Clock(e) => e.code(),
            DaemonError::Runtime(_) => "runtime_unavailable",
            DaemonError::Core(_) | DaemonError::RunawayOutputs => "internal",
        }
    }
}

/// What a [`StopSignal`] calls after a raise.
type Waker = Box<dyn Fn() + Send>;

/// Asks a running daemon to stop: the first request drains (runs in flight finish, results
/// are delivered), the second stops at once. Cheap to clone; a raise wakes the daemon's
/// driver at once (it never polls for it).
#[derive(Clone, Default)]
pub struct StopSignal {
    requests: Arc<AtomicU32>,
    /// Called after every raise: the driver's wake-up (an event on its channel).
    wakers: Arc<Mutex<Vec<Waker>>>,
}

impl std::fmt::Debug for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopSignal")
            .field("requests", &self.count())
            .finish_non_exhaustive()
    }
}

impl StopSignal {
    /// A signal nobody has raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises it once more, and wakes whoever waits for it. Takes a lock: call it from a
    /// thread (as `signal_hook`'s iterator does), never from inside a signal handler.
    pub fn raise(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
        for wake in self.wakers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            wake();
        }
    }

    /// How many times it was raised.
    pub fn count(&self) -> u32 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Calls `wake` after every later raise.
    pub(crate) fn on_raise(&self, wake: impl Fn() + Send + 'static) {
        self.wakers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(wake));
    }
}

/// What the driver hears from the threads and sockets it started.
pub(crate) enum Event {
    /// A WebSocket event of connection number `conn`.
    Link {
        /// Which connection attempt.
        conn: u64,
        /// Opened, a message, a sign of life, failed or closed, as the connection reported it.
        event: LinkEvent,
    },
    /// The signed requests before a connect: a fresh key set (if it verified) and a ticket.
    Ticket {
        /// Which connection attempt.
        conn: u64,
        /// The key set, or why it was not fetched.
        keys: Result<outpost_core::keyset::KeySet, HttpError>,
        /// The single-use ticket with its session id, or why the signed ticket request failed.
        ticket: Result<outpost_adapters::http::ConnectTicket, HttpError>,
    },
    /// An input for the core, from a thread the driver started: a run's end
    /// (`RunFinished`), a terminal run's exit (`TerminalExit`), a bundle fetched or not
    /// (`CapabilityFetched`, `CapabilityFetchFailed`), a condition check's outcome
    /// (`WaitChecked`). The driver keeps its own books from the input, then feeds it.
    Input(outpost_core::daemon::Input),
    /// A host command was asked for, ended or was refused: the driver drains the audit
    /// events and reports each finished command with `command.finished`.
    CommandsAudit,
    /// An update check came back.
    UpdateChecked(Result<update::Checked, update::UpdateError>),
    /// A terminal run's program wrote bytes: they wait in `pending`, with whatever it wrote
    /// before the driver takes them (one event for all of them).
    TerminalOutput {
        /// The terminal run's id (its `ptyId`).
        run_id: outpost_core::ids::RunId,
        /// Where the bytes wait.
        pending: std::sync::Arc<terminals::Pending>,
    },
    /// The [`StopSignal`] was raised.
    Stop,
    /// The owner's policy file changed (or its folder did).
    PolicyChanged,
    /// A verified `control.request` the core passed on ([`driver`]'s `control`).
    Control {
        /// The request's id.
        control_id: String,
        /// The action as sent.
        action: String,
        /// For `logs`: how many lines (0: the default).
        lines: u32,
    },
}

/// The longest a drain waits for runs in flight and host commands before it stops at once
/// (their results stay in the outbox for the next start). The service units
/// ([`service::systemd`], [`service::launchd`]) give the daemon this long and 30 s more.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// How long the start-up waits (for another daemon's lock, before a request is tried again)
/// sleep at most before they look at the [`StopSignal`] again. A connected daemon's driver
/// never polls: a raise wakes it.
pub const STOP_POLL: Duration = Duration::from_millis(100);

/// Runs a daemon until it stops: takes the home's lock (a service waits for it), refuses to
/// start when `stopped.json` is there, joins (first start), restores the outbox, connects and
/// serves runs with `registry`'s executors on `host`. Returns why it stopped; an error names
/// what must be fixed. A stop for good (revoked, replaced, unregistered) writes
/// `stopped.json` first.
pub fn run_daemon(
    options: DaemonOptions,
    registry: Registry,
    host: Arc<dyn Host>,
    stop: StopSignal,
) -> Result<DaemonExit, DaemonError> {
    let Some(home) = home::Home::open(options.folders.clone(), options.launcher, &stop)? else {
        // Stopped while waiting for another daemon's lock: nothing ran, nothing is owed.
        return Ok(DaemonExit::Drained);
    };
    if let Some(stopped) = status::read_stopped(&home.folders.state)? {
        return Err(DaemonError::StoppedForGood {
            advice: stopped.advice(&home.folders.state, &home.folders.config),
            stopped,
        });
    }
    let result = driver::run(options, &home, registry, host, stop);
    let reason = match &result {
        Ok(DaemonExit::Revoked) => Some(StopReason::Revoked),
        Ok(DaemonExit::Replaced) => Some(StopReason::Replaced),
        Err(DaemonError::Unregistered { .. }) => Some(StopReason::Unregistered),
        _ => None,
    };
    if let Some(reason) = reason {
        let stopped = Stopped {
            reason,
            at: status::now_rfc3339(),
            context_id: home.server().ok().flatten().map(|s| s.context_id),
        };
        match status::write_stopped(&home.folders.state, &stopped) {
            Ok(()) => tracing::info!(
                reason = reason.as_str(),
                "stopped for good: no daemon starts on this home while state/stopped.json is there"
            ),
            Err(e) => tracing::warn!("stopped for good, but stopped.json cannot be written: {e}"),
        }
    }
    result
}
