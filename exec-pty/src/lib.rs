//! # outpost-exec-pty
//!
//! The PTY executor: runs an `environment: pty` capability — a shell or any program, with
//! its arguments and environment — on a real pseudo-terminal opened through `portable-pty`,
//! in a session of its own, and hands the host the terminal's two halves
//! ([`outpost_core::executor::RunHandle::take_terminal`]) to relay.
//!
//! - **Entry.** A file in the capability folder (symlinks resolved, it must stay inside and be
//!   executable), or — when the folder has no such file and the name has no `/` — a program
//!   found on the run's `PATH` (`bash`, `python3`). The working directory must be inside the
//!   folder or a granted mount and outside the credential denylist (`outpost-host` decides).
//! - **Environment.** The shell executor's: the harmless host variables plus the manifest's
//!   `env` ([`outpost_host::run_environment`]), with `TERM` set to [`PtyConfig::term`] unless
//!   the manifest sets it.
//! - **Size.** The manifest's `terminal: {cols, rows}` (80 × 24 by default);
//!   [`outpost_core::executor::TerminalInput::resize`] changes it and the program gets
//!   `SIGWINCH`.
//! - **Ending.** When the program exits, whatever else still holds the terminal gets
//!   [`PtyConfig::drain`] to finish writing; then everything left in its session, and every
//!   process that still has the terminal open (a `nohup … &` or `setsid` grandchild), is
//!   killed, so the output reaches end-of-file. A timeout, a cancel or an idle terminal
//!   (`limits.idle_ms` without input or output) hangs the session up (`SIGHUP`), then kills
//!   it after [`PtyConfig::grace`]; dropping the run kills it at once.
//! - **Output.** Every byte read is counted; the outcome's `stdout` is the *last*
//!   `output_max_bytes` of the terminal's output (with [`TRUNCATION_MARKER`] in front when
//!   earlier output was dropped), so a non-interactive run still shows its screen. Until the
//!   terminal is taken the executor reads the output itself (and
//!   [`outpost_core::executor::RunHandle::read_output`] hands it out), so a program never
//!   blocks on a full terminal; what was read and not handed out is given to the terminal's
//!   first reads.
//! - **Availability.** [`PtyExecutor::probe`] opens [`PtyConfig::ptmx`] and a pseudo-terminal;
//!   when either fails, every launch is refused with `environment_unavailable` — nothing falls
//!   back to another environment.
//!
//! Trust is the shell's: `run_capability:pty` is allowed for a session only (core's
//! `Allowlists`). This crate never imports another executor.
//!
//! [`TRUNCATION_MARKER`]: outpost_core::executor::TRUNCATION_MARKER
#![forbid(unsafe_code)]

mod program;
mod pump;
mod run;
mod session;

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use outpost_core::executor::{ExecError, Executor, Launch, Probe, RunHandle, TerminalSize};
use outpost_core::manifest::Lifecycle;
use outpost_core::wire::Environment;
use outpost_host::sandbox::{self, SandboxConfig};
use outpost_host::{check_cwd, run_environment};
use portable_pty::{CommandBuilder, PtyPair, PtySize, native_pty_system};

pub use run::PtyRun;

/// How the PTY executor behaves.
#[derive(Debug, Clone)]
pub struct PtyConfig {
    /// The pseudo-terminal multiplexer that must open before any terminal is opened
    /// (`/dev/ptmx`, which `openpty` uses). A machine without it — or a config naming a device
    /// that does not exist — has no PTY: the probe says so and every launch is refused.
    pub ptmx: PathBuf,
    /// Between the hang-up (`SIGHUP`) of a stopped run and `SIGKILL`.
    pub grace: Duration,
    /// After the program exits, how long other processes may keep the terminal open (and
    /// write to it) before they are killed.
    pub drain: Duration,
    /// `TERM` for the program, unless its manifest sets one.
    pub term: String,
    /// Host variables that must never reach a run, beyond every `OUTPOST_*` one.
    pub secret_vars: Vec<String>,
    /// How sandboxed terminals start (the helper binary, what the kernel can enforce); a
    /// terminal is sandboxed as a shell run is ([`outpost_host::sandbox`]).
    pub sandbox: SandboxConfig,
}

impl Default for PtyConfig {
    fn default() -> Self {
        Self {
            ptmx: PathBuf::from("/dev/ptmx"),
            grace: Duration::from_secs(2),
            drain: Duration::from_millis(500),
            term: "xterm-256color".into(),
            secret_vars: Vec::new(),
            sandbox: SandboxConfig::default(),
        }
    }
}

/// Runs pty capabilities. See the crate docs.
#[derive(Debug, Clone, Default)]
pub struct PtyExecutor {
    config: PtyConfig,
}

impl PtyExecutor {
    /// A PTY executor with `config`.
    pub fn new(config: PtyConfig) -> Self {
        Self { config }
    }

    /// Opens a pseudo-terminal of `size`, or says why none can be opened here.
    fn open(&self, size: TerminalSize) -> Result<PtyPair, ExecError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOCTTY.bits())
            .open(&self.config.ptmx)
            .map_err(|e| {
                self.unavailable(format!("cannot open {}: {e}", self.config.ptmx.display()))
            })?;
        native_pty_system()
            .openpty(pty_size(size))
            .map_err(|e| self.unavailable(format!("cannot open a pseudo-terminal: {e}")))
    }

    fn unavailable(&self, reason: String) -> ExecError {
        ExecError::Unavailable {
            environment: Environment::Pty,
            reason,
            remedy: format!(
                "mount devpts and let the daemon's user read and write {} (or run the daemon \
                 where pseudo-terminals exist)",
                self.config.ptmx.display()
            ),
        }
    }

    /// Checks and starts a pty capability, as [`Executor::launch`] does, returning the run
    /// itself (its process id, terminal device and byte count).
    pub fn start(&self, launch: Launch) -> Result<PtyRun, ExecError> {
        let started = Instant::now();
        let manifest = &launch.manifest;
        if manifest.environment != Environment::Pty {
            return Err(ExecError::InvalidCapability(format!(
                "a {} capability cannot run on the pty executor",
                manifest.environment.as_str()
            )));
        }
        let cwd = check_cwd(
            &launch.dir,
            launch.cwd.as_deref(),
            &launch.mounts,
            &launch.denylist,
        )?;
        let mut env = run_environment(std::env::vars_os(), &manifest.env, &self.config.secret_vars);
        if !manifest.env.iter().any(|(k, _)| k == "TERM") {
            env.retain(|(k, _)| k != "TERM");
            env.push(("TERM".into(), self.config.term.clone().into()));
        }
        let path: Option<OsString> = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let program = program::resolve(&launch.dir, &manifest.entry, path.as_deref())?;
        let size = manifest.terminal.unwrap_or(TerminalSize::DEFAULT);
        let pair = self.open(size)?;
        let mut args: Vec<OsString> = manifest.args.iter().map(Into::into).collect();
        args.extend(launch.extra_args.iter().map(Into::into));
        let (mut started_program, mut guard) = (program.clone(), None);
        let refusals: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        if launch.confined {
            // The person at the terminal reads each refusal from their client; the run's
            // result carries them to the audit log.
            let kept = refusals.clone();
            let report: sandbox::EgressReport = std::sync::Arc::new(move |event| {
                if let (outpost_host::GateEvent::Refused { destination, .. }, Ok(mut kept)) =
                    (event, kept.lock())
                {
                    kept.push(destination);
                }
            });
            let boxed =
                sandbox::prepare(&launch, program.clone(), args, &self.config.sandbox, report)?;
            for (key, value) in boxed.env {
                env.retain(|(k, _)| *k != key);
                env.push((key, value));
            }
            (started_program, args, guard) = (boxed.program, boxed.args, Some(boxed.guard));
        }
        let mut command = CommandBuilder::new(&started_program);
        command.args(&args);
        command.env_clear();
        for (k, v) in &env {
            command.env(k, v);
        }
        command.cwd(&cwd);
        let service = manifest.lifecycle == Lifecycle::Persistent;
        PtyRun::spawn(run::Spawn {
            run_id: launch.run_id.to_string(),
            sandbox: guard,
            refusals,
            pair,
            command,
            program,
            timeout: if service {
                Duration::MAX
            } else {
                launch.timeout
            },
            idle: manifest.limits.idle_ms.map(Duration::from_millis),
            output_cap: usize::try_from(manifest.limits.output_max_bytes).unwrap_or(usize::MAX),
            grace: self.config.grace,
            drain: self.config.drain,
            started,
        })
    }
}

fn pty_size(size: TerminalSize) -> PtySize {
    let size = TerminalSize::clamped(size.cols, size.rows);
    PtySize {
        rows: size.rows,
        cols: size.cols,
        pixel_width: 0,
        pixel_height: 0,
    }
}

impl Executor for PtyExecutor {
    fn environment(&self) -> Environment {
        Environment::Pty
    }

    fn probe(&self) -> Probe {
        match self.open(TerminalSize::DEFAULT) {
            Ok(_) => Probe::Available {
                description: format!("{} (portable-pty)", self.config.ptmx.display()),
            },
            Err(ExecError::Unavailable { reason, remedy, .. }) => {
                Probe::Unavailable { reason, remedy }
            }
            Err(other) => Probe::Unavailable {
                reason: other.to_string(),
                remedy: "check the machine's pseudo-terminals".into(),
            },
        }
    }

    /// Oneshot and ondemand runs are held to `launch.timeout`; a persistent one runs until it
    /// exits, is cancelled or goes idle past `limits.idle_ms`.
    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError> {
        Ok(Box::new(self.start(launch)?))
    }
}
