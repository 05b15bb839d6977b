//! Runs the daemon's [`Execute`] commands on the machine: each on a blocking thread of the
//! host, through [`launch_from_execute`] and [`run_capability`], waiting in short slices so a
//! [`Command::Cancel`](outpost_core::daemon::Command::Cancel) stops it promptly; the result
//! comes back to the driver as [`Input::RunFinished`] (as an [`Event::Input`]).
//!
//! While a run lives, the process it started is recorded next to its folder
//! (`runs/<run id>.service`), so that a daemon killed mid-run can reap it after a restart
//! ([`reap`]). This module owns those files. It never talks to the server and never decides
//! whether a run may start: the core accepted it and the grant in the command bounds it.
//!
//! An operator's run (not `shared_run`) gets the host-commands socket in its folder once the
//! folder is written, for as long as its capability runs ([`super::bridge`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Instant as StdInstant;

use outpost_core::daemon::{Execute, Input};
use outpost_core::executor::{Allowlists, Registry, Scope, run_capability};
use outpost_core::grant::{CredentialDenylist, LocalPolicy};
use outpost_core::ids::RunId;
use outpost_core::manifest::Permission;
use outpost_core::wire::{Environment, RunResult};
use outpost_host::{Cancel, LaunchContext, launch_from_execute};
use serde::{Deserialize, Serialize};

use super::Event;
use super::bridge::{Bridge, CommandsShared};
use super::leftovers::{Janitor, Leftovers};
use super::policy::PolicySource;
use super::terminals::{Reserved, Terminals};
use outpost_adapters::clock::Clock;
use outpost_adapters::runtime::Host;

/// What a run started on the machine, recorded while it lives.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceFile {
    environment: Environment,
    /// The executor's id for it: a process (group) id for shell, a container id for docker.
    id: String,
    /// For a process: its start time in clock ticks since boot (`/proc/PID/stat` field 22),
    /// so a recycled pid is never killed.
    start_ticks: Option<u64>,
}

/// The machine's side of runs: executors, folders, cancel flags.
pub(crate) struct Runner {
    /// The machine's context id, named in the egress gate's refusals.
    context: Arc<str>,
    registry: Arc<Registry>,
    host: Arc<dyn Host>,
    runs_dir: PathBuf,
    policy: Arc<PolicySource>,
    denylist: Arc<CredentialDenylist>,
    clock: Arc<Clock>,
    cancels: HashMap<RunId, Cancel>,
    events: Sender<Event>,
    commands: CommandsShared,
    terminals: Terminals,
    /// Holds what ended runs left until their results are delivered.
    janitor: Arc<Janitor>,
}

/// What a run needs on its thread.
struct Job {
    execute: Execute,
    context: Arc<str>,
    registry: Arc<Registry>,
    runs_dir: PathBuf,
    local: Arc<LocalPolicy>,
    denylist: Arc<CredentialDenylist>,
    clock: Arc<Clock>,
    cancel: Cancel,
    commands: CommandsShared,
    terminals: Terminals,
    /// The terminal's place in the table, for a pty run.
    terminal: Option<Reserved>,
    events: Sender<Event>,
}

impl Runner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        context: String,
        registry: Arc<Registry>,
        host: Arc<dyn Host>,
        runs_dir: PathBuf,
        policy: Arc<PolicySource>,
        denylist: CredentialDenylist,
        clock: Arc<Clock>,
        events: Sender<Event>,
        commands: CommandsShared,
    ) -> Self {
        Self {
            context: context.into(),
            registry,
            host,
            runs_dir,
            policy,
            denylist: Arc::new(denylist),
            clock,
            cancels: HashMap::new(),
            events,
            commands,
            terminals: Terminals::default(),
            janitor: Arc::new(Janitor::start()),
        }
    }

    /// The server has run `run_id`'s result: what the run left is cleaned up now.
    pub(crate) fn delivered(&self, run_id: &RunId) {
        self.janitor.delivered(run_id);
    }

    /// The live terminals of this daemon's runs, for the relay's keystrokes and credit.
    pub(crate) fn terminals(&self) -> &Terminals {
        &self.terminals
    }

    /// Starts `execute` on a blocking thread; [`Input::RunFinished`] (as an [`Event::Input`]) reports its end.
    pub(crate) fn start(&mut self, execute: Execute) {
        let execute_is_pty = execute.environment == Environment::Pty;
        let cancel = Cancel::new();
        self.cancels.insert(execute.run_id.clone(), cancel.clone());
        let terminal = execute_is_pty.then(|| self.terminals.reserve(&execute.run_id));
        let job = Job {
            execute,
            context: self.context.clone(),
            registry: self.registry.clone(),
            runs_dir: self.runs_dir.clone(),
            local: self.policy.current(),
            denylist: self.denylist.clone(),
            clock: self.clock.clone(),
            cancel,
            commands: self.commands.clone(),
            terminals: self.terminals.clone(),
            terminal,
            events: self.events.clone(),
        };
        let events = self.events.clone();
        let janitor = self.janitor.clone();
        self.host.spawn_blocking(Box::new(move || {
            let run_id = job.execute.run_id.clone();
            let (result, leftovers) = job.run();
            // What the run left goes once its result is delivered (parked first: the
            // delivery cannot come before).
            janitor.park(&run_id, leftovers);
            tracing::trace!(target: "outpost::timeline", stage = "run.finished");
            let _ = events.send(Event::Input(Input::RunFinished { run_id, result }));
        }));
    }

    /// Stops a run this process started. A run it does not know is one a crashed
    /// predecessor started: its process is reaped and its folder removed.
    pub(crate) fn cancel(&mut self, run_id: &RunId) {
        match self.cancels.get(run_id) {
            Some(cancel) => cancel.raise(),
            None => reap(&self.runs_dir, run_id),
        }
    }

    /// Stops every run (the daemon is stopping for good).
    pub(crate) fn cancel_all(&mut self) {
        for cancel in self.cancels.values() {
            cancel.raise();
        }
    }

    /// A run's thread reported its end.
    pub(crate) fn finished(&mut self, run_id: &RunId) {
        self.cancels.remove(run_id);
    }

    /// How many runs are on threads now.
    pub(crate) fn running(&self) -> usize {
        self.cancels.len()
    }

    /// The owner's local host-commands switch as the policy file says now.
    pub(crate) fn commands_opted_in(&self) -> bool {
        self.policy.current().commands_enabled
    }

    /// The owner's `confinement` rule as the policy says it now.
    pub(crate) fn confinement(&self) -> outpost_core::grant::ConfinementPolicy {
        self.policy.current().confinement
    }

    /// Whether the owner's policy as it is now lets the server record terminal input.
    pub(crate) fn records_terminal_input(&self) -> bool {
        self.policy.current().record_terminal_input
    }

    /// Whether the owner's policy as it is now mounts any of `granted` for an operator's run.
    /// The folders a run sees now under `granted`: where the grant and the owner's local
    /// policy meet, in the narrower mode, the credential denylist applied.
    pub(crate) fn visible_mounts(
        &self,
        granted: &[outpost_core::wire::FolderGrant],
    ) -> Vec<outpost_core::grant::Mount> {
        let policy = self.policy.current();
        outpost_host::grant_mounts(granted, &policy, &self.denylist).0
    }
}

impl Job {
    /// Runs the execute to its end: its result, and what is left to clean up after it is sent.
    fn run(mut self) -> (RunResult, Leftovers) {
        tracing::trace!(target: "outpost::timeline", stage = "run.start");
        let started = StdInstant::now();
        let run_id = self.execute.run_id.clone();
        let mut leftovers = Leftovers {
            handle: None,
            bridge: None,
            run_dir: self.runs_dir.join(run_id.as_str()),
            service_file: service_path(&self.runs_dir, &run_id),
        };
        let mut result = self.execute_once(&mut leftovers);
        // The daemon's share of the time: from the command to the result, setup included.
        result.timing.daemon_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        (result, leftovers)
    }

    fn execute_once(&mut self, leftovers: &mut Leftovers) -> RunResult {
        let cx = LaunchContext {
            runs_dir: &self.runs_dir,
            local: &self.local,
            denylist: &self.denylist,
            now: self.clock.instant(),
            context: &self.context,
        };
        let prepared = match launch_from_execute(&self.execute, &cx) {
            Ok(prepared) => prepared,
            Err(e) => return RunResult::failed_with(e.code(), e.to_string()),
        };
        for skipped in &prepared.skipped {
            tracing::warn!(run = %self.execute.run_id, path = %skipped.path, reason = %skipped.reason,
                "a granted folder is not mounted");
        }
        // The grant in the command allows this environment (launch_from_execute checked):
        // that is the permission, for this run only.
        let mut allowlists = Allowlists::new();
        if let Err(e) = allowlists.allow(
            Permission::run_capability(self.execute.environment),
            Scope::Session,
        ) {
            return RunResult::failed_with("not_permitted", e.to_string());
        }
        // Held while the capability runs; dropping it removes the socket. Only a process on
        // this host can call `outpost command` (a shell or a terminal): a wasm module has no
        // sockets and a container no outpost binary, so they get none (no socket file, no
        // accept thread per run).
        let can_call = matches!(
            self.execute.environment,
            Environment::Shell | Environment::Pty
        );
        leftovers.bridge = if self.execute.shared_run || !can_call {
            None
        } else {
            match Bridge::serve(
                &prepared.launch.dir,
                &self.execute.run_id,
                prepared.launch.timeout,
                self.commands.clone(),
            ) {
                Ok(bridge) => Some(bridge),
                Err(e) => {
                    tracing::warn!(run = %self.execute.run_id, "cannot serve host commands to this run: {e}");
                    None
                }
            }
        };
        tracing::trace!(target: "outpost::timeline", stage = "run.prepared");
        let mut handle = match run_capability(&self.registry, &allowlists, prepared.launch) {
            Ok(handle) => handle,
            Err(e) => return RunResult::failed_with(e.code(), e.to_string()),
        };
        tracing::trace!(target: "outpost::timeline", stage = "run.launched");
        if let Some(id) = handle.service_id() {
            record_service(&self.runs_dir, &self.execute, id);
        }
        let run_id = &self.execute.run_id;
        let reserved = self.terminal.take();
        let mut attached = handle
            .take_terminal()
            .zip(reserved)
            .and_then(|(terminal, reserved)| {
                match self
                    .terminals
                    .attach(reserved, terminal, self.events.clone())
                {
                    Ok(attached) => Some(attached),
                    Err(e) => {
                        tracing::warn!(run = %run_id, "cannot relay the run's terminal: {e}");
                        None
                    }
                }
            });
        // A terminal's output goes out as `pty.output`; any other run's as `run.output`.
        let mut text = outpost_core::executor::OutputText::new();
        let events = self.events.clone();
        let send = |pieces: Vec<outpost_core::executor::OutputPiece>| {
            if !pieces.is_empty() {
                let _ = events.send(Event::Input(Input::RunOutput {
                    run_id: run_id.clone(),
                    pieces,
                }));
            }
        };
        let ended = if attached.is_some() {
            outpost_host::run_to_end(&mut *handle, &self.cancel)
        } else {
            let streamed =
                outpost_host::run_to_end_streaming(&mut *handle, &self.cancel, &mut |chunks| {
                    for chunk in chunks {
                        send(text.push(chunk.stream, &chunk.bytes));
                    }
                });
            send(text.finish());
            streamed
        };
        tracing::trace!(target: "outpost::timeline", stage = "run.ended");
        let result = match ended {
            Ok(outcome) => {
                if let Some(attached) = attached.take() {
                    // Every byte goes out before `pty.exit`, and that before the result.
                    attached.finish();
                    let _ = self.events.send(Event::Input(Input::TerminalExit {
                        run_id: run_id.clone(),
                        exit_code: outcome.exit_code,
                    }));
                }
                RunResult::from(outcome)
            }
            Err(e) => RunResult::from(&e),
        };
        leftovers.handle = Some(handle);
        result
    }
}

/// Where the process run `run_id` started is recorded while it lives, beside its folder.
fn service_path(runs_dir: &Path, run_id: &RunId) -> PathBuf {
    runs_dir.join(format!("{run_id}.service"))
}

fn record_service(runs_dir: &Path, execute: &Execute, id: String) {
    let start_ticks = match execute.environment {
        Environment::Shell => id.parse().ok().and_then(process_start_ticks),
        _ => None,
    };
    let file = ServiceFile {
        environment: execute.environment,
        id,
        start_ticks,
    };
    let path = service_path(runs_dir, &execute.run_id);
    let bytes = serde_json::to_vec(&file).unwrap_or_default();
    if let Err(e) = super::home::write_private(&path, &bytes) {
        tracing::warn!(run = %execute.run_id, "cannot record the run's process: {e}");
    }
}

/// `/proc/PID/stat` field 22: when the process started, in clock ticks since boot.
fn process_start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Ends what a crashed daemon's run left on the machine: the process group of a shell run
/// (only if the recorded process is still the same one), and the run's folder. Containers
/// are removed by the docker executor's own orphan sweep at start.
pub(crate) fn reap(runs_dir: &Path, run_id: &RunId) {
    let path = service_path(runs_dir, run_id);
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(file) = serde_json::from_slice::<ServiceFile>(&bytes)
        && file.environment == Environment::Shell
        && let Ok(pid) = file.id.parse::<i32>()
        && pid > 1
        && file.start_ticks.is_some()
        && process_start_ticks(pid) == file.start_ticks
    {
        let group = nix::unistd::Pid::from_raw(pid);
        match nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL) {
            Ok(()) => {
                tracing::info!(run = %run_id, pgid = pid, "reaped the process group a crashed daemon left")
            }
            Err(e) => {
                tracing::warn!(run = %run_id, pgid = pid, "cannot reap the process group: {e}")
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(runs_dir.join(run_id.as_str()));
}
