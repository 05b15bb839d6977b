//! The executor interface: one trait that shell processes, wasmtime instances, Docker
//! containers and interactive PTYs all implement, and the routing of a capability to the
//! executor of its declared environment.
//!
//! The interface names no async runtime: [`RunHandle::wait`] blocks for at most the time it
//! is given, so a plain thread, a tokio `spawn_blocking` or a smol `unblock` can drive it.
//! An executor whose backend is missing says so in [`Executor::probe`] and refuses to launch
//! with [`ExecError::Unavailable`]; [`run_capability`] never hands a capability to another
//! environment.
//!
//! This module owns the trait, the output caps and the permission check with its trust
//! ceiling. It never starts anything itself.

mod output;
mod registry;
mod terminal;
mod text;

pub use output::{CappedBuffer, CapturedOutput, FinishedOutput, TRUNCATION_MARKER};
pub use registry::{Allowlists, Registry, RunRefused, Scope, TrustCeiling, run_capability};
pub use terminal::{Terminal, TerminalInput, TerminalOutput, TerminalSize};
pub use text::{OutputPiece, OutputText};

use crate::ids::RunId;
use std::path::PathBuf;
use std::time::Duration;

use crate::grant::{CredentialDenylist, Mount};
use crate::manifest::Manifest;
use crate::wire::{Egress, Environment, ErrorBody, RunResult, RunStatus, Timing};

/// Whether an executor's backend can run capabilities here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// It can.
    Available {
        /// What it runs on (`/bin/sh`, `wasmtime 36 (pooling)`, `Docker Engine 28.2 (API 1.50)`).
        description: String,
    },
    /// It cannot.
    Unavailable {
        /// What is missing, for people (no Docker daemon answers, no pseudo-terminal opens, …).
        reason: String,
        /// How the machine's owner can fix it.
        remedy: String,
    },
}

/// Everything an executor needs to start one run.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The run's id (for logs and the service table).
    pub run_id: RunId,
    /// The capability folder, canonical. It does not exist when [`Launch::entry_bytes`] is
    /// set.
    pub dir: PathBuf,
    /// The entry's bytes, when the host kept the capability in memory instead of writing its
    /// folder. A host does that only for a capability whose executor reads nothing of the
    /// folder but its entry (wasm without volumes); every other executor is given the folder
    /// on disk and `None` here.
    pub entry_bytes: Option<std::sync::Arc<[u8]>>,
    /// Its validated manifest.
    pub manifest: Manifest,
    /// Arguments appended after the manifest's `args`.
    pub extra_args: Vec<String>,
    /// Folders the run may use (grant ∩ local policy), canonical.
    pub mounts: Vec<Mount>,
    /// Paths never exposed, even inside a mount.
    pub denylist: CredentialDenylist,
    /// Where the run starts (default: the capability folder). Must be inside the folder or a
    /// mount, and outside the denylist.
    pub cwd: Option<PathBuf>,
    /// The run's time budget (the manifest's `timeout_ms`, or less when the lease is shorter).
    pub timeout: Duration,
    /// Who the run may reach (the grant's egress). Executors that can isolate the network
    /// (docker; wasm has none) give a run no network unless its manifest asks for it with a
    /// `connect:` permission and this allows it.
    pub egress: Egress,
    /// Whether the run is sandboxed (see `docs/CAPABILITIES.md`): the shell and pty executors
    /// honour it; docker and wasm isolate every run by their own means. The host decides it
    /// with [`crate::grant::must_confine`] from the owner's policy and the run's kind; the
    /// manifest's `confine: false` counts only where the owner lets the operator opt out.
    pub confined: bool,
    /// The context's name or id, quoted in the owner's fix when the egress gate refuses a
    /// destination (`outpost context grant CONTEXT --egress …`); empty outside a context
    /// (`outpost run`).
    pub context: String,
}

/// Which output stream a chunk came from (the wire's `stdout` / `stderr`).
pub use crate::wire::OutputStream as Stream;

/// Output as it arrives, within the caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Which stream the bytes come from: `stdout` or `stderr`.
    pub stream: Stream,
    /// The bytes as the program wrote them; a chunk may end inside a UTF-8 character.
    pub bytes: Vec<u8>,
}

/// How a run that started ended: [`RunStatus`] without `failed`. A run that never started has
/// no [`Outcome`], only an [`ExecError`], so an executor cannot report a failure as an ending;
/// [`RunStatus::from`] gives the status `run.result` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It exited (any code) or was ended by a signal it did not get from us.
    Exited,
    /// Its time budget ran out; it was stopped.
    TimedOut,
    /// It was cancelled and stopped.
    Cancelled,
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// How it ended.
    pub ending: Ending,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Captured standard output, capped (with [`TRUNCATION_MARKER`] when cut).
    pub stdout: Vec<u8>,
    /// Captured standard error, capped.
    pub stderr: Vec<u8>,
    /// Whether either stream was cut.
    pub truncated: bool,
    /// Preparing (resolving, spawning, creating).
    pub setup: Duration,
    /// Running.
    pub execute: Duration,
    /// Destinations (`host:port`) the run's egress gate refused (`egress_denied`), in order.
    pub egress_denied: Vec<String>,
}

impl Outcome {
    /// The run's status as `run.result` reports it.
    pub fn status(&self) -> RunStatus {
        RunStatus::from(self.ending)
    }
}

impl From<Ending> for RunStatus {
    fn from(ending: Ending) -> Self {
        match ending {
            Ending::Exited => RunStatus::Exited,
            Ending::TimedOut => RunStatus::TimedOut,
            Ending::Cancelled => RunStatus::Cancelled,
        }
    }
}

/// What the daemon's host reports for a finished run: the streams as lossy UTF-8, and
/// `setup_ms` / `execute_ms` in the timing (the daemon fills in the rest).
impl From<Outcome> for RunResult {
    fn from(outcome: Outcome) -> Self {
        RunResult {
            status: outcome.status(),
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            stdout: String::from_utf8_lossy(&outcome.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&outcome.stderr).into_owned(),
            truncated: outcome.truncated,
            timing: Timing {
                setup_ms: millis(outcome.setup),
                execute_ms: millis(outcome.execute),
                ..Timing::default()
            },
            error: None,
            egress_denied: outcome.egress_denied,
        }
    }
}

/// What the daemon's host reports for a run its executor refused: status `failed`, with
/// the error's code and message.
impl From<&ExecError> for RunResult {
    fn from(error: &ExecError) -> Self {
        RunResult::failed(ErrorBody {
            code: error.code().into(),
            message: error.to_string(),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A run in progress.
pub trait RunHandle: Send {
    /// The run's id.
    fn run_id(&self) -> &str;

    /// Waits at most `timeout` for the run to end; `Ok(None)` if it is still running. Enforces
    /// the run's own deadline: once it passes, the run is stopped and reported
    /// [`Ending::TimedOut`]. Call it until it returns `Some`.
    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError>;

    /// Stops the run and cleans up after it (processes, containers, instances). Idempotent.
    /// The next [`RunHandle::wait`] reports [`Ending::Cancelled`].
    fn cancel(&mut self) -> Result<(), ExecError>;

    /// Output that arrived since the last call, within the caps.
    fn read_output(&mut self) -> Vec<OutputChunk>;

    /// What a running-service table records to find the run on the machine: a process id,
    /// a container id, or nothing (a wasm instance lives on a thread of the daemon).
    fn service_id(&self) -> Option<String> {
        None
    }

    /// What another thread can call to end a [`RunHandle::wait`] in progress early (that wait
    /// returns `Ok(None)`), so a cancel is acted on at once instead of at the wait's timeout.
    /// `None` where a wait cannot be woken: its waiter then waits in short slices.
    fn wait_waker(&self) -> Option<WaitWaker> {
        None
    }

    /// What another thread can call to cancel the run at once, as [`RunHandle::cancel`] does,
    /// where cancelling is a flag the run itself watches (a wasm store's epoch callback, a
    /// container's driver task): a [`RunHandle::wait`] in progress then ends with
    /// [`Ending::Cancelled`] without being polled. `None` where cancelling needs the handle
    /// itself (killing processes): its waiter uses [`RunHandle::wait_waker`] or short slices.
    fn canceller(&self) -> Option<WaitWaker> {
        None
    }

    /// From now on, call `waker` whenever output arrives (so [`RunHandle::read_output`] has
    /// some), which ends a [`RunHandle::wait`] in progress when `waker` is this handle's
    /// [`RunHandle::wait_waker`]. Returns false where output cannot wake anyone: whoever
    /// streams it then reads it in short slices.
    fn notify_output(&mut self, waker: WaitWaker) -> bool {
        let _ = waker;
        false
    }

    /// A terminal run's keystroke and output halves, the first time it is asked; `None` for
    /// every other environment and on every later call. Once taken, the run's output arrives
    /// only through [`Terminal::output`], never through [`RunHandle::read_output`].
    fn take_terminal(&mut self) -> Option<Terminal> {
        None
    }
}

/// Ends a [`RunHandle::wait`] in progress early; callable from any thread, any number of
/// times.
pub type WaitWaker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// One environment's executor.
pub trait Executor: Send + Sync {
    /// The environment it runs.
    fn environment(&self) -> Environment;

    /// Whether it can run here, and on what.
    fn probe(&self) -> Probe;

    /// Starts one run of a capability of this executor's environment. A oneshot or ondemand
    /// run is held to [`Launch::timeout`]; a persistent one runs until it exits or is
    /// cancelled.
    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError>;
}

/// Why a run could not start or be driven.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The backend is missing.
    #[error(
        "{backend} is unavailable; the capability cannot be executed: {reason}; {remedy}",
        backend = backend_name(*.environment)
    )]
    Unavailable {
        /// The environment whose backend is missing; it names the backend in the message.
        environment: Environment,
        /// What is missing, for people; the message follows it with `remedy`.
        reason: String,
        /// How to fix it.
        remedy: String,
    },
    /// The capability cannot run as declared (wrong environment, missing entry, …).
    #[error("invalid capability: {0}")]
    InvalidCapability(String),
    /// A path the run would use is not allowed.
    #[error("path {path} refused: {reason}")]
    PathRefused {
        /// The refused path as the run gave it (a mount's host path or a working directory).
        path: String,
        /// Why (`outside the capability folder`, `credential denylist`, …).
        reason: String,
    },
    /// The run asks for network access the grant's egress does not give, or that the
    /// environment cannot hold to the grant.
    #[error("{0}")]
    EgressRefused(String),
    /// The container image the capability names is not on this machine (outpost never pulls
    /// one on its own).
    #[error("image {image} is not on this machine: {remedy}")]
    ImageMissing {
        /// The image reference, as the manifest names it.
        image: String,
        /// How the machine's owner can provide it.
        remedy: String,
    },
    /// The run must be sandboxed and this machine's kernel cannot enforce a rule the sandbox
    /// needs (no Landlock, no namespaces for a network rule): it is refused, never run with
    /// less.
    #[error("confinement unavailable: {missing}; {remedy}")]
    ConfinementUnavailable {
        /// What the kernel lacks, as the probe found it.
        missing: String,
        /// How the machine's owner fixes it.
        remedy: String,
    },
    /// Starting failed.
    #[error("could not start: {0}")]
    Spawn(String),
    /// Driving the run failed.
    #[error("run failed: {0}")]
    Failed(String),
}

/// The backend an environment runs on, as a person names it.
fn backend_name(environment: Environment) -> &'static str {
    match environment {
        Environment::Shell => "The shell",
        Environment::Wasm => "WebAssembly",
        Environment::Docker => "Docker",
        Environment::Pty => "The PTY",
    }
}

impl ExecError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ExecError::Unavailable { .. } => "environment_unavailable",
            ExecError::InvalidCapability(_) => "invalid_capability",
            ExecError::PathRefused { .. } => "path_refused",
            ExecError::EgressRefused(_) => "egress_denied",
            ExecError::ImageMissing { .. } => "image_missing",
            ExecError::ConfinementUnavailable { .. } => "confinement_unavailable",
            ExecError::Spawn(_) => "spawn_failed",
            ExecError::Failed(_) => "run_failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_reports_as_a_run_result_with_the_executor_s_times() {
        let outcome = Outcome {
            ending: Ending::TimedOut,
            exit_code: None,
            signal: Some(9),
            stdout: b"caf\xc3\xa9 \xff".to_vec(),
            stderr: b"e".to_vec(),
            truncated: true,
            setup: Duration::from_micros(3_900),
            execute: Duration::from_secs(2),
            egress_denied: Vec::new(),
        };
        let result = RunResult::from(outcome);
        assert_eq!(result.status, RunStatus::TimedOut);
        assert_eq!((result.exit_code, result.signal), (None, Some(9)));
        assert_eq!(result.stdout, "café \u{fffd}", "lossy UTF-8");
        assert_eq!(result.stderr, "e");
        assert!(result.truncated);
        assert_eq!(
            result.timing,
            Timing {
                setup_ms: 3,
                execute_ms: 2_000,
                ..Timing::default()
            }
        );
        assert_eq!(result.error, None);
    }

    #[test]
    fn a_refused_launch_reports_failed_with_the_error_s_code() {
        let refused = ExecError::InvalidCapability("no entry".into());
        let result = RunResult::from(&refused);
        assert_eq!(result.status, RunStatus::Failed);
        let error = result.error.unwrap();
        assert_eq!(error.code, "invalid_capability");
        assert_eq!(error.message, "invalid capability: no entry");
    }
}
