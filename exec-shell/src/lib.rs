//! # outpost-exec-shell
//!
//! The shell executor: runs a capability's entry as `sh <entry> <args…>` (or, with
//! `interpreter: none`, the entry itself, without any shell interpolation) in the capability
//! folder, in a process group of its own.
//!
//! - **Stopping.** A timeout or a cancel sends SIGTERM to the whole group, then SIGKILL after a
//!   grace period. When the entry exits, whatever it left running in its group is killed too:
//!   no orphans survive a run.
//! - **Output** is captured up to the manifest's `output_max_bytes` per stream, with a marker
//!   when it was cut. Exit code and signal are reported.
//! - **Environment.** The process starts from an empty environment plus a short list of
//!   harmless host variables (`PATH`, `HOME`, `LANG`, …) and the manifest's `env`; `OUTPOST_*`
//!   variables and anything the daemon marks secret never reach it.
//! - **Paths.** The entry must resolve (symlinks followed) inside the capability folder; the
//!   working directory must resolve inside the folder or a granted mount and outside the
//!   credential denylist.
//!
//! Oneshot and ondemand capabilities both start a fresh process per launch; persistent ones
//! run in `outpost_host::RunningServiceTable`.
//!
//! **The sandbox.** A run whose [`Launch::confined`] is set (every run, unless the owner lets
//! the operator opt out) starts through the `outpost` binary's hidden `confine` subcommand
//! (`outpost_host::sandbox::helper_main`): Landlock, namespaces, a private `HOME` and `TMPDIR`, the
//! network the grant's egress allows (see [`outpost_host::sandbox`]). The binary is the
//! current executable unless [`ShellConfig::sandbox`] names another that dispatches it.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outpost_core::executor::{ExecError, Executor, Launch, Probe, RunHandle};
use outpost_core::manifest::{Interpreter, Lifecycle};
use outpost_core::wire::Environment;
use outpost_host::sandbox::{self, SandboxConfig};
use outpost_host::{GateEvent, check_cwd, resolve_entry};

use outpost_host::process::{self, ProcessRun};
pub use outpost_host::{PASSTHROUGH_VARS, run_environment};

/// How the shell executor behaves.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// The shell for `interpreter: sh`.
    pub shell: PathBuf,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Host variables that must never reach a run, beyond every `OUTPOST_*` one.
    pub secret_vars: Vec<String>,
    /// How sandboxed runs start: the helper binary (default: this executable) and what the
    /// kernel can enforce (default: probed once).
    pub sandbox: SandboxConfig,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            shell: PathBuf::from("/bin/sh"),
            grace: Duration::from_secs(2),
            secret_vars: Vec::new(),
            sandbox: SandboxConfig::default(),
        }
    }
}

/// Runs shell capabilities. See the crate docs.
#[derive(Debug, Clone, Default)]
pub struct ShellExecutor {
    config: ShellConfig,
}

impl ShellExecutor {
    /// A shell executor with `config`.
    pub fn new(config: ShellConfig) -> Self {
        Self { config }
    }
}

impl Executor for ShellExecutor {
    fn environment(&self) -> Environment {
        Environment::Shell
    }

    fn probe(&self) -> Probe {
        match std::fs::metadata(&self.config.shell) {
            Ok(m) if m.is_file() => Probe::Available {
                description: format!("{}", self.config.shell.display()),
            },
            _ => Probe::Unavailable {
                reason: format!("no shell at {}", self.config.shell.display()),
                remedy: "install a POSIX shell or point the shell executor at one".into(),
            },
        }
    }

    /// Oneshot and ondemand runs are held to `launch.timeout`; a persistent one runs until
    /// it exits or is cancelled (`outpost_host::RunningServiceTable` keeps such handles).
    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError> {
        let service = launch.manifest.lifecycle == Lifecycle::Persistent;
        Ok(Box::new(self.spawn(launch, service)?))
    }
}

impl ShellExecutor {
    /// Checks and starts a shell capability. A `service` has no deadline and learns its port
    /// from `PORT`.
    pub(crate) fn spawn(&self, launch: Launch, service: bool) -> Result<ProcessRun, ExecError> {
        let started = Instant::now();
        let manifest = &launch.manifest;
        if manifest.environment != Environment::Shell {
            return Err(ExecError::InvalidCapability(format!(
                "a {} capability cannot run on the shell executor",
                manifest.environment.as_str()
            )));
        }
        let entry = resolve_entry(&launch.dir, &manifest.entry)?;
        let cwd = check_cwd(
            &launch.dir,
            launch.cwd.as_deref(),
            &launch.mounts,
            &launch.denylist,
        )?;
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        let program = match manifest.interpreter {
            Interpreter::Sh => {
                argv.push(entry.into_os_string());
                self.config.shell.clone()
            }
            Interpreter::None => entry,
        };
        argv.extend(manifest.args.iter().map(Into::into));
        argv.extend(launch.extra_args.iter().map(Into::into));
        let mut env = run_environment(std::env::vars_os(), &manifest.env, &self.config.secret_vars);
        if let (true, Some(port)) = (service, manifest.port) {
            env.retain(|(k, _)| k != "PORT");
            env.push(("PORT".into(), port.to_string().into()));
        }
        let refusals: Arc<Mutex<Vec<GateEvent>>> = Arc::default();
        let sandbox = launch.confined.then(|| {
            let kept = refusals.clone();
            let report: sandbox::EgressReport = Arc::new(move |event| {
                if let (GateEvent::Refused { .. }, Ok(mut kept)) = (&event, kept.lock()) {
                    kept.push(event);
                }
            });
            process::Sandboxing {
                bounds: sandbox::Bounds::of(&launch),
                config: self.config.sandbox.clone(),
                report,
            }
        });
        ProcessRun::spawn(process::Spawn {
            run_id: launch.run_id.clone(),
            sandbox,
            refusals,
            program,
            args: argv,
            cwd,
            env,
            timeout: if service {
                Duration::MAX
            } else {
                launch.timeout
            },
            output_cap: usize::try_from(manifest.limits.output_max_bytes).unwrap_or(usize::MAX),
            grace: self.config.grace,
            started,
        })
    }
}
