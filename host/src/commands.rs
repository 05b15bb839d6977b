//! Host commands: commands a run asks the machine to execute, outside any capability.
//!
//! Two switches must both be on — the machine owner's local opt-in and the server's grant —
//! else every call is refused with `commands_off`; turning either off kills every job.
//! Commands run as argv (no shell interpolation) in their own process groups and inherit the
//! daemon's environment minus every `OUTPOST_*` variable and the configured secrets. The
//! working directory is checked against the credential denylist, symlinks resolved.
//!
//! `run` waits for the command; `start` leaves a background job that outlives the run; `poll`
//! and `kill` act on a job, and only its requester may: anyone else gets `command_not_found`.
//! Every start and finish is an [`AuditEvent`] (command cut to 1000 characters, cwd, env
//! *keys* only, run id, background flag, exit, signal, duration, reason). Either switch off,
//! revoke and shutdown kill every job's process group, foreground `run`s included (theirs is
//! SIGKILLed and the waiting caller gets the outcome, audited with that reason).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outpost_core::executor::{Ending, ExecError, Outcome, RunHandle};
use outpost_core::grant::CredentialDenylist;
use outpost_core::ids::RunId;

use crate::process::{ProcessRun, Sandboxing, Spawn};

/// How host commands run.
#[derive(Debug, Clone)]
pub struct CommandsConfig {
    /// Between SIGTERM and SIGKILL when a command is stopped.
    pub grace: Duration,
    /// Host variables that must never reach a command, beyond every `OUTPOST_*` one.
    pub secret_vars: Vec<String>,
}

impl Default for CommandsConfig {
    /// Two seconds of grace, no secret beyond `OUTPOST_*`: what the shell executor uses.
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(2),
            secret_vars: Vec::new(),
        }
    }
}

/// The most characters of a command kept in an audit event.
pub const AUDIT_COMMAND_CHARS: usize = 1000;

/// A command to execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRequest {
    /// Who asks (the run's requester).
    pub requester: String,
    /// The id of the committed run whose program asked; its audit events and `command.finished`
    /// name it.
    pub run_id: RunId,
    /// The id the server gave this command in the authorize hop (carried into
    /// [`AuditEvent::CommandFinished`] so the daemon can report `command.finished`).
    pub command_id: String,
    /// The program and its arguments (no shell).
    pub argv: Vec<String>,
    /// Where to run (default: the daemon's working directory).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// For `run`: how long to wait before stopping it.
    pub timeout: Duration,
    /// `None` for a host command proper (unsandboxed: the owner's explicit opt-in); a wait's
    /// `exec` runs in the sandbox, within these bounds.
    pub sandbox: Option<CommandSandbox>,
}

/// Where a sandboxed command runs: its bounds (the operator's folders, the grant's egress)
/// and how the sandbox starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSandbox {
    /// What it may use.
    pub bounds: crate::sandbox::Bounds,
    /// The helper and the kernel's support.
    pub config: crate::sandbox::SandboxConfig,
}

/// A job's id.
pub type JobId = u64;

/// What happened, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditEvent {
    /// A command started.
    CommandStarted {
        /// The command line, cut to [`AUDIT_COMMAND_CHARS`].
        command: String,
        /// Its working directory.
        cwd: String,
        /// The names (never the values) of the extra variables.
        env_keys: Vec<String>,
        /// The run that asked.
        run_id: RunId,
        /// Whether it is a background job.
        background: bool,
    },
    /// A command ended.
    CommandFinished {
        /// The command's id from the authorize hop.
        command_id: String,
        /// The command line, cut.
        command: String,
        /// The run that asked.
        run_id: RunId,
        /// Whether it was a background job.
        background: bool,
        /// Its exit code.
        exit_code: Option<i32>,
        /// The signal that ended it.
        signal: Option<i32>,
        /// How long it ran.
        duration_ms: u64,
        /// `exited`, `timed_out`, `killed`, `commands_off`, `revoked` or `shutdown`.
        reason: String,
    },
}

/// Why a command call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The local opt-in or the grant is off.
    #[error("host commands are off: both the machine owner's opt-in and the grant must allow them")]
    CommandsOff,
    /// No such job for this requester.
    #[error("no such command")]
    NotFound,
    /// The command could not start.
    #[error(transparent)]
    Exec(ExecError),
}

impl CommandError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::CommandsOff => "commands_off",
            CommandError::NotFound => "command_not_found",
            CommandError::Exec(e) => e.code(),
        }
    }
}

/// A job's state as its requester sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStatus {
    /// Still running; output so far.
    Running {
        /// Standard output so far (capped).
        stdout: Vec<u8>,
        /// Standard error so far (capped).
        stderr: Vec<u8>,
    },
    /// Ended.
    Finished(Outcome),
}

struct Job {
    owner: String,
    command_id: String,
    run_id: RunId,
    command: String,
    started: Instant,
    run: ProcessRun,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    outcome: Option<Outcome>,
}

struct State {
    local_opt_in: bool,
    granted: bool,
    jobs: BTreeMap<JobId, Job>,
    /// Foreground `run`s in flight: their process group, and why they were killed if a
    /// switch, revoke or shutdown did (their caller waits on them without the lock).
    foreground: BTreeMap<u64, (u32, Option<String>)>,
    /// Numbers foreground runs (job ids count background jobs only).
    next_foreground: u64,
    next_id: JobId,
    audit: Vec<AuditEvent>,
    /// Called when a background job ends ([`HostCommands::notify_job_end`]).
    job_end: Option<outpost_core::executor::WaitWaker>,
}

/// The daemon's host commands. Lives as long as the daemon, not a run.
pub struct HostCommands {
    config: CommandsConfig,
    denylist: CredentialDenylist,
    /// The daemon's environment, which commands inherit (less `OUTPOST_*` and secrets).
    inherited: Vec<(OsString, OsString)>,
    output_cap: usize,
    state: Mutex<State>,
}

fn cut(command: &str) -> String {
    command.chars().take(AUDIT_COMMAND_CHARS).collect()
}

fn finished_event(job: &Job, outcome: &Outcome, reason: &str) -> AuditEvent {
    AuditEvent::CommandFinished {
        command_id: job.command_id.clone(),
        command: job.command.clone(),
        run_id: job.run_id.clone(),
        background: true,
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        duration_ms: job.started.elapsed().as_millis() as u64,
        reason: reason.to_owned(),
    }
}

impl HostCommands {
    /// Host commands with both switches off, inheriting `inherited` (the daemon's
    /// environment), refusing working directories in `denylist`.
    pub fn new(
        config: CommandsConfig,
        denylist: CredentialDenylist,
        inherited: Vec<(OsString, OsString)>,
    ) -> Self {
        Self {
            config,
            denylist,
            inherited,
            output_cap: 1024 * 1024,
            state: Mutex::new(State {
                local_opt_in: false,
                granted: false,
                jobs: BTreeMap::new(),
                foreground: BTreeMap::new(),
                next_foreground: 1,
                next_id: 1,
                audit: Vec::new(),
                job_end: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The machine owner's switch. Turning it off kills every job.
    pub fn set_local_opt_in(&self, on: bool) {
        let mut s = self.lock();
        s.local_opt_in = on;
        if !on {
            kill_all(&mut s, "commands_off");
        }
    }

    /// The server's switch (`grant.commands.enabled`). Turning it off kills every job.
    pub fn set_granted(&self, on: bool) {
        let mut s = self.lock();
        s.granted = on;
        if !on {
            kill_all(&mut s, "commands_off");
        }
    }

    /// Whether both switches are on now (a command may be asked for).
    pub fn is_on(&self) -> bool {
        let s = self.lock();
        s.local_opt_in && s.granted
    }

    /// Notices background jobs that ended on their own since the last look (their
    /// `exited` [`AuditEvent::CommandFinished`] is queued), without reading their output:
    /// a later `poll` still returns it.
    pub fn reap(&self) {
        let mut s = self.lock();
        let State { jobs, audit, .. } = &mut *s;
        for job in jobs.values_mut().filter(|j| j.outcome.is_none()) {
            if let Ok(Some(outcome)) = job.run.wait(Duration::ZERO) {
                audit.push(finished_event(job, &outcome, "exited"));
                job.outcome = Some(outcome);
            }
        }
    }

    /// The machine was revoked: kill every job.
    pub fn revoke(&self) {
        kill_all(&mut self.lock(), "revoked");
    }

    /// The daemon is shutting down: kill every job.
    pub fn shutdown(&self) {
        kill_all(&mut self.lock(), "shutdown");
    }

    /// Audit events since the last call.
    pub fn drain_audit(&self) -> Vec<AuditEvent> {
        std::mem::take(&mut self.lock().audit)
    }

    fn spawn(
        &self,
        s: &mut State,
        req: &CommandRequest,
        background: bool,
    ) -> Result<ProcessRun, CommandError> {
        if !(s.local_opt_in && s.granted) {
            return Err(CommandError::CommandsOff);
        }
        let Some(program) = req.argv.first() else {
            return Err(CommandError::Exec(ExecError::InvalidCapability(
                "an empty command".into(),
            )));
        };
        let cwd = match &req.cwd {
            Some(dir) => dir.clone(),
            None => std::env::current_dir()
                .map_err(|e| CommandError::Exec(ExecError::Spawn(e.to_string())))?,
        };
        let (cwd, canonical) = crate::resolve(&cwd).map_err(|e| CommandError::Exec(e.into()))?;
        if let Some(entry) = self.denylist.denying(&canonical) {
            return Err(CommandError::Exec(ExecError::PathRefused {
                path: cwd.display().to_string(),
                reason: format!("inside the credential denylist ({})", entry.as_str()),
            }));
        }
        let mut env: Vec<(OsString, OsString)> = self
            .inherited
            .iter()
            .filter(|(k, _)| {
                k.to_str().is_some_and(|k| {
                    !k.starts_with("OUTPOST_") && !self.config.secret_vars.iter().any(|s| s == k)
                })
            })
            .cloned()
            .collect();
        env.extend(
            req.env
                .iter()
                .filter(|(k, _)| !k.starts_with("OUTPOST_"))
                .map(|(k, v)| (k.into(), v.into())),
        );
        // Host commands are the owner's explicit opt-in and run unsandboxed by design; a
        // wait's `exec` runs in the sandbox.
        let program = PathBuf::from(program);
        let args: Vec<OsString> = req.argv[1..].iter().map(Into::into).collect();
        let refusals: Arc<Mutex<Vec<crate::GateEvent>>> = Arc::default();
        let sandbox = req.sandbox.as_ref().map(|sandbox| {
            let kept = refusals.clone();
            let report: crate::sandbox::EgressReport = Arc::new(move |event| {
                if let Ok(mut kept) = kept.lock() {
                    kept.push(event);
                }
            });
            Sandboxing {
                bounds: sandbox.bounds.clone(),
                config: sandbox.config.clone(),
                report,
            }
        });
        let run = ProcessRun::spawn(Spawn {
            sandbox,
            refusals,
            run_id: req.run_id.clone(),
            program,
            args,
            cwd: cwd.clone(),
            env,
            timeout: if background {
                Duration::MAX
            } else {
                req.timeout
            },
            output_cap: self.output_cap,
            grace: self.config.grace,
            started: Instant::now(),
        })
        .map_err(CommandError::Exec)?;
        s.audit.push(AuditEvent::CommandStarted {
            command: cut(&req.argv.join(" ")),
            cwd: cwd.display().to_string(),
            env_keys: req.env.keys().cloned().collect(),
            run_id: req.run_id.clone(),
            background,
        });
        Ok(run)
    }

    /// Runs a command in the foreground and waits for it (at most `req.timeout`).
    pub fn run(&self, req: &CommandRequest) -> Result<Outcome, CommandError> {
        let started = Instant::now();
        let (mut run, id) = {
            let mut s = self.lock();
            let run = self.spawn(&mut s, req, false)?;
            let id = s.next_foreground;
            s.next_foreground += 1;
            s.foreground.insert(id, (run.pid(), None));
            (run, id)
        };
        let waited = loop {
            match run.wait(Duration::from_secs(3600)) {
                Ok(Some(o)) => break Ok(o),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        let killed_for = self.lock().foreground.remove(&id).and_then(|(_, why)| why);
        let outcome = waited.map_err(CommandError::Exec)?;
        let reason = killed_for.unwrap_or_else(|| {
            match outcome.ending {
                Ending::Exited => "exited",
                Ending::TimedOut => "timed_out",
                Ending::Cancelled => "killed",
            }
            .to_owned()
        });
        self.lock().audit.push(AuditEvent::CommandFinished {
            command_id: req.command_id.clone(),
            command: cut(&req.argv.join(" ")),
            run_id: req.run_id.clone(),
            background: false,
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            duration_ms: started.elapsed().as_millis() as u64,
            reason,
        });
        Ok(outcome)
    }

    /// From now on, `waker` is called (from another thread) whenever a background job ends,
    /// so its keeper calls [`HostCommands::reap`] then instead of looking on a timer.
    pub fn notify_job_end(&self, waker: outpost_core::executor::WaitWaker) {
        self.lock().job_end = Some(waker);
    }

    /// Starts a background job that outlives the run; returns its id.
    pub fn start(&self, req: &CommandRequest) -> Result<JobId, CommandError> {
        let mut s = self.lock();
        let run = self.spawn(&mut s, req, true)?;
        if let Some(waker) = &s.job_end {
            run.notify_exit(waker.clone());
        }
        let id = s.next_id;
        s.next_id += 1;
        s.jobs.insert(
            id,
            Job {
                owner: req.requester.clone(),
                command_id: req.command_id.clone(),
                run_id: req.run_id.clone(),
                command: cut(&req.argv.join(" ")),
                started: Instant::now(),
                run,
                stdout: Vec::new(),
                stderr: Vec::new(),
                outcome: None,
            },
        );
        Ok(id)
    }

    /// A job's state, for its requester only.
    pub fn poll(&self, requester: &str, id: JobId) -> Result<JobStatus, CommandError> {
        let mut s = self.lock();
        let (job, audit) = owned_job(&mut s, requester, id)?;
        if let Some(done) = &job.outcome {
            return Ok(JobStatus::Finished(done.clone()));
        }
        for chunk in job.run.read_output() {
            match chunk.stream {
                outpost_core::executor::Stream::Stdout => job.stdout.extend(chunk.bytes),
                outpost_core::executor::Stream::Stderr => job.stderr.extend(chunk.bytes),
            }
        }
        match job.run.wait(Duration::ZERO).map_err(CommandError::Exec)? {
            Some(outcome) => {
                audit.push(finished_event(job, &outcome, "exited"));
                job.outcome = Some(outcome.clone());
                Ok(JobStatus::Finished(outcome))
            }
            None => Ok(JobStatus::Running {
                stdout: job.stdout.clone(),
                stderr: job.stderr.clone(),
            }),
        }
    }

    /// Kills a job (its whole process group), for its requester only.
    pub fn kill(&self, requester: &str, id: JobId) -> Result<Outcome, CommandError> {
        let mut s = self.lock();
        let (job, audit) = owned_job(&mut s, requester, id)?;
        if let Some(done) = &job.outcome {
            return Ok(done.clone());
        }
        let outcome = stop(job).map_err(CommandError::Exec)?;
        audit.push(finished_event(job, &outcome, "killed"));
        Ok(outcome)
    }

    /// Background jobs still running (a drain waits for them; foreground runs belong to runs,
    /// which a drain already waits for).
    pub fn jobs_running(&self) -> usize {
        self.lock()
            .jobs
            .values()
            .filter(|j| j.outcome.is_none())
            .count()
    }

    /// Process (group) ids of commands still running, background jobs and foreground runs
    /// (for tests and status).
    pub fn running_pids(&self) -> Vec<u32> {
        let s = self.lock();
        s.jobs
            .values()
            .filter(|j| j.outcome.is_none())
            .map(|j| j.run.pid())
            .chain(
                s.foreground
                    .values()
                    .filter(|(_, why)| why.is_none())
                    .map(|(pid, _)| *pid),
            )
            .collect()
    }
}

/// The job `id` if commands are on and `requester` owns it, with the audit log beside it.
fn owned_job<'a>(
    s: &'a mut State,
    requester: &str,
    id: JobId,
) -> Result<(&'a mut Job, &'a mut Vec<AuditEvent>), CommandError> {
    if !(s.local_opt_in && s.granted) {
        return Err(CommandError::CommandsOff);
    }
    let State { jobs, audit, .. } = s;
    let job = jobs
        .get_mut(&id)
        .filter(|j| j.owner == requester)
        .ok_or(CommandError::NotFound)?;
    Ok((job, audit))
}

fn stop(job: &mut Job) -> Result<Outcome, ExecError> {
    job.run.cancel()?;
    let outcome = loop {
        if let Some(o) = job.run.wait(Duration::from_secs(60))? {
            break o;
        }
    };
    job.outcome = Some(outcome.clone());
    Ok(outcome)
}

fn kill_all(s: &mut State, reason: &str) {
    // Foreground runs: SIGKILL their group; the waiting `run` reports it with `reason`.
    for (pgid, why) in s.foreground.values_mut().filter(|(_, why)| why.is_none()) {
        if let Ok(raw) = i32::try_from(*pgid)
            && raw > 1
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(raw),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        *why = Some(reason.to_owned());
    }
    let State { jobs, audit, .. } = s;
    for job in jobs.values_mut().filter(|j| j.outcome.is_none()) {
        if let Ok(outcome) = stop(job) {
            audit.push(finished_event(job, &outcome, reason));
        }
    }
}

impl Drop for HostCommands {
    fn drop(&mut self) {
        self.shutdown();
    }
}
