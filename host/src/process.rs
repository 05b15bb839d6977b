//! One process run to its end: a process group (sandboxed or not), its output readers and its
//! waiter, stopped on the deadline → SIGTERM → grace → SIGKILL path of [`crate::StopSchedule`]
//! (which the pty's terminal runs keep too). Every piped run goes through it: the shell
//! executor's runs, host commands, a wait's `exec`.
//!
//! This module owns the group's signals and the captured output. It never decides whether a
//! run may start (the caller checked its manifest, grant and folders) and never reads what
//! the output says.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::StopStep;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use outpost_core::executor::{
    CapturedOutput, Ending, ExecError, FinishedOutput, Outcome, OutputChunk, RunHandle, Stream,
};

/// How long to wait for the output pipes to close once the group is gone. A process that
/// left the group (`setsid`) and kept a pipe open cannot hold the run hostage longer.
const PIPE_DRAIN: Duration = Duration::from_secs(1);

/// How a sandboxed run is held: within these bounds, by this helper, its gate's refusals
/// reported here.
pub struct Sandboxing {
    /// What the run may use (folders, egress).
    pub bounds: crate::sandbox::Bounds,
    /// The helper binary and what the kernel can enforce.
    pub config: crate::sandbox::SandboxConfig,
    /// Called with every connection the run's egress gate allowed or refused.
    pub report: crate::sandbox::EgressReport,
}

/// What [`ProcessRun::spawn`] starts.
pub struct Spawn {
    /// The run this process belongs to (a host command: the run that asked for it).
    pub run_id: outpost_core::ids::RunId,
    /// Sandboxed so, or not at all.
    pub sandbox: Option<Sandboxing>,
    /// Where the refusals of the run's egress gate are kept (the caller's `report` pushes
    /// them); read back in the outcome's `egress_denied`.
    pub refusals: Arc<Mutex<Vec<crate::GateEvent>>>,
    /// The program (an absolute path, or a name looked up in the run's `PATH`).
    pub program: PathBuf,
    /// Its arguments, after the program.
    pub args: Vec<OsString>,
    /// Its working directory (already checked against the grant and the denylist).
    pub cwd: PathBuf,
    /// Its whole environment: nothing else is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// From the spawn to SIGTERM; `Duration::MAX` for none.
    pub timeout: Duration,
    /// Output kept, stdout and stderr together; what is over it is counted as truncated.
    pub output_cap: usize,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// When the caller began preparing the run: the outcome's `setup` is measured from it.
    pub started: Instant,
}

/// What a [`ProcessRun`]'s waiter hears.
enum Heard {
    /// The entry process ended.
    Exited(std::io::Result<ExitStatus>),
    /// A sandboxed run's PID 1 reported how the program ended.
    Reported(ExitStatus),
    /// [`RunHandle::wait_waker`] was called: the wait in progress returns early.
    Woken,
}

/// A running process group. Dropping it kills the group.
pub struct ProcessRun {
    run_id: outpost_core::ids::RunId,
    pgid: Pid,
    heard: Receiver<Heard>,
    /// Feeds `heard`: the exit waiter thread, and the waker.
    tell: mpsc::Sender<Heard>,
    pipes_closed: Receiver<()>,
    captured: Arc<Mutex<CapturedOutput>>,
    spawned_at: Instant,
    setup: Duration,
    /// When it is stopped and killed, and why.
    schedule: crate::StopSchedule,
    outcome: Option<Outcome>,
    /// Dropped with the run: its private `HOME` and `TMPDIR` go, its gate stops.
    _sandbox: Option<crate::sandbox::SandboxGuard>,
    /// The sandbox's report FIFO, whose reader waits on a thread of its own: written to when
    /// the run is dropped, so a reader the helper never answered ends too.
    report: Option<std::fs::File>,
    refusals: Arc<Mutex<Vec<crate::GateEvent>>>,
    /// The sandbox holds itself until the run is dropped
    /// ([`crate::sandbox::SandboxGuard::holds_until_dropped`]): its group is stopped then.
    held: bool,
    /// Who to call when the run ends ([`ProcessRun::notify_exit`]).
    exit_notify: Arc<Mutex<ExitNotify>>,
    /// A wake was sent and its wait has not heard it yet ([`crate::folded_waker`]).
    unheard: Arc<std::sync::atomic::AtomicBool>,
}

/// Whether a run ended, and who to call when it does.
enum ExitNotify {
    /// Still running: call this, if set, when it ends.
    Running(Option<outpost_core::executor::WaitWaker>),
    /// It ended: a notifier set from now on is called at once.
    Ended,
}

impl ExitNotify {
    /// The run ended: the notifier to call, if one was set and not called yet.
    fn ended(slot: &Mutex<ExitNotify>) -> Option<outpost_core::executor::WaitWaker> {
        let mut slot = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match std::mem::replace(&mut *slot, ExitNotify::Ended) {
            ExitNotify::Running(waker) => waker,
            ExitNotify::Ended => None,
        }
    }
}

impl ProcessRun {
    /// Starts `s.program` in a process group of its own (in the sandbox when `s.sandbox` says
    /// so), its stdin empty and its output captured.
    pub fn spawn(s: Spawn) -> Result<Self, ExecError> {
        let (mut child, mut guard) = match s.sandbox {
            Some(b) => {
                let (child, guard) = crate::sandbox::spawn_piped(
                    &b.bounds, s.program, s.args, &s.cwd, s.env, &b.config, b.report,
                )?;
                (child, Some(guard))
            }
            None => {
                let child = Command::new(&s.program)
                    .args(&s.args)
                    .current_dir(&s.cwd)
                    .env_clear()
                    .envs(s.env)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .spawn()
                    .map_err(|e| ExecError::Spawn(format!("{}: {e}", s.program.display())))?;
                (child, None)
            }
        };
        let spawned_at = Instant::now();
        let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let captured = Arc::new(Mutex::new(CapturedOutput::new(s.output_cap)));
        let (closed_tx, pipes_closed) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            spawn_reader(out, Stream::Stdout, captured.clone(), closed_tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            spawn_reader(err, Stream::Stderr, captured.clone(), closed_tx);
        }
        let (tell, heard) = mpsc::channel();
        let exit_tx = tell.clone();
        // A sandboxed run's end comes first from its PID 1's report; the helper's own exit,
        // which relays the same end, still comes (and is reaped) when that report never does.
        let report = guard
            .as_mut()
            .and_then(crate::sandbox::SandboxGuard::take_report);
        let exit_notify = Arc::new(Mutex::new(ExitNotify::Running(None)));
        let waker = match report.as_ref().map(std::fs::File::try_clone) {
            Some(Ok(mut reader)) => {
                let report_tx = tell.clone();
                let notify = exit_notify.clone();
                std::thread::spawn(move || {
                    if let Some(status) = read_report(&mut reader) {
                        let _ = report_tx.send(Heard::Reported(status));
                        if let Some(notify) = ExitNotify::ended(&notify) {
                            notify();
                        }
                    }
                });
                report
            }
            _ => None,
        };
        let notify = exit_notify.clone();
        std::thread::spawn(move || {
            let _ = exit_tx.send(Heard::Exited(child.wait()));
            if let Some(notify) = ExitNotify::ended(&notify) {
                notify();
            }
        });
        let held = guard
            .as_ref()
            .is_some_and(crate::sandbox::SandboxGuard::holds_until_dropped);
        Ok(Self {
            run_id: s.run_id,
            pgid,
            heard,
            tell,
            pipes_closed,
            captured,
            spawned_at,
            setup: spawned_at.saturating_duration_since(s.started),
            schedule: crate::StopSchedule::new(spawned_at, s.timeout, s.grace),
            outcome: None,
            _sandbox: guard,
            held,
            report: waker,
            refusals: s.refusals,
            exit_notify,
            unheard: Arc::default(),
        })
    }

    /// Stops or kills the run if its schedule says so by `now` (its deadline passed, or the
    /// grace after its stop did).
    fn enforce_schedule(&mut self, now: Instant) {
        match self.schedule.due(now, false) {
            Some(StopStep::Deadline | StopStep::Limit) => self.stop(Ending::TimedOut),
            Some(StopStep::Kill) => self.kill_group(),
            None => {}
        }
    }

    /// Calls `waker` once, when the run ends (at once if it already did), from the thread
    /// that saw the end: whoever keeps runs it does not wait on (background host commands)
    /// hears of an end without looking.
    pub fn notify_exit(&self, waker: outpost_core::executor::WaitWaker) {
        let ended = {
            let mut slot = self
                .exit_notify
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match &mut *slot {
                ExitNotify::Running(set) => {
                    *set = Some(waker.clone());
                    false
                }
                ExitNotify::Ended => true,
            }
        };
        if ended {
            waker();
        }
    }

    /// The process id of the entry (also its process group id).
    pub fn pid(&self) -> u32 {
        u32::try_from(self.pgid.as_raw()).unwrap_or(0)
    }

    /// The destinations the run's egress gate refused so far (`egress_denied`), each as the
    /// gate reported it.
    pub fn egress_refusals(&self) -> Vec<crate::GateEvent> {
        self.refusals.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// SIGTERM to the group now, SIGKILL after the grace period.
    fn stop(&mut self, why: Ending) {
        if self.outcome.is_none() && self.schedule.ask(why, Instant::now()) {
            let _ = killpg(self.pgid, Signal::SIGTERM);
        }
    }

    fn kill_group(&mut self) {
        let _ = killpg(self.pgid, Signal::SIGKILL);
        self.schedule.mark_killed();
    }

    /// How the run ended, from the entry's exit or (`reported`) its sandbox's PID 1. The
    /// group is stopped now, unless the sandbox holds itself until the run is dropped (its
    /// PID 1 ended what the run left): its teardown waits for that.
    fn finish(
        &mut self,
        status: std::io::Result<ExitStatus>,
        reported: bool,
    ) -> Result<Outcome, ExecError> {
        if !(reported && self.held) {
            self.kill_group();
        }
        let execute = self.spawned_at.elapsed();
        let drain_until = Instant::now() + PIPE_DRAIN;
        for _ in 0..2 {
            let left = drain_until.saturating_duration_since(Instant::now());
            if self.pipes_closed.recv_timeout(left).is_err() {
                break;
            }
        }
        let status =
            status.map_err(|e| ExecError::Failed(format!("waiting for the process: {e}")))?;
        let FinishedOutput {
            stdout,
            stderr,
            truncated,
        } = self
            .captured
            .lock()
            .map_err(|_| ExecError::Failed("output capture panicked".into()))?
            .finish_output();
        Ok(Outcome {
            ending: self.schedule.ending(),
            exit_code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            truncated,
            setup: self.setup,
            execute,
            egress_denied: self
                .egress_refusals()
                .into_iter()
                .filter_map(|event| match event {
                    crate::GateEvent::Refused { destination, .. } => Some(destination),
                    crate::GateEvent::Connected { .. } => None,
                })
                .collect(),
        })
    }
}

fn spawn_reader(
    mut pipe: impl Read + Send + 'static,
    stream: Stream,
    captured: Arc<Mutex<CapturedOutput>>,
    closed: mpsc::Sender<()>,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                // A signal's handler ran meanwhile: read again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let Ok(mut c) = captured.lock() else {
                        break;
                    };
                    c.push(stream, &buf[..n]);
                }
            }
        }
        let _ = closed.send(());
    });
}

impl RunHandle for ProcessRun {
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
        if let Some(done) = &self.outcome {
            return Ok(Some(done.clone()));
        }
        let until = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            let wake = self.schedule.next_look(until, None);
            match self.heard.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(heard) => {
                    let (status, reported) = match heard {
                        Heard::Woken => {
                            self.unheard
                                .store(false, std::sync::atomic::Ordering::SeqCst);
                            // A program whose output keeps waking its waiter still meets its
                            // deadline and its kill.
                            self.enforce_schedule(Instant::now());
                            return Ok(None);
                        }
                        Heard::Exited(status) => (status, false),
                        Heard::Reported(status) => (Ok(status), true),
                    };
                    let outcome = self.finish(status, reported)?;
                    self.outcome = Some(outcome.clone());
                    return Ok(Some(outcome));
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    self.enforce_schedule(now);
                    if now >= until {
                        return Ok(None);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ExecError::Failed("the process waiter stopped".into()));
                }
            }
        }
    }

    fn cancel(&mut self) -> Result<(), ExecError> {
        self.stop(Ending::Cancelled);
        Ok(())
    }

    fn service_id(&self) -> Option<String> {
        Some(self.pid().to_string())
    }

    /// Folded: output that comes faster than the waiter wakes queues one wake.
    fn wait_waker(&self) -> Option<outpost_core::executor::WaitWaker> {
        let tell = self.tell.clone();
        Some(crate::folded_waker(self.unheard.clone(), move || {
            let _ = tell.send(Heard::Woken);
        }))
    }

    fn notify_output(&mut self, waker: outpost_core::executor::WaitWaker) -> bool {
        match self.captured.lock() {
            Ok(mut c) => {
                c.notify_with(waker);
                true
            }
            Err(_) => false,
        }
    }

    fn read_output(&mut self) -> Vec<OutputChunk> {
        match self.captured.lock() {
            Ok(mut c) => c.take_fresh(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for ProcessRun {
    fn drop(&mut self) {
        if self.outcome.is_none() || self.held {
            self.kill_group();
        }
        if let Some(mut report) = self.report.take() {
            use std::io::Write as _;
            // Not a report (the first byte is neither 0 nor 1): the reader ends, sending nothing.
            let _ = report.write_all(&[WAKE_READER, 0]);
        }
    }
}

/// What [`ProcessRun`]'s drop writes to the report FIFO to end a reader still waiting.
const WAKE_READER: u8 = 0xff;

/// How a sandboxed run ended, from its PID 1's report: `0, CODE` an exit, `1, SIGNAL` a fatal
/// signal; none for anything else (the reader was woken, or the FIFO failed).
fn read_report(reader: &mut impl Read) -> Option<ExitStatus> {
    let mut ended = [0u8; 2];
    reader.read_exact(&mut ended).ok()?;
    match ended {
        [0, code] => Some(ExitStatus::from_raw(i32::from(code) << 8)),
        [1, signal] => Some(ExitStatus::from_raw(i32::from(signal))),
        _ => None,
    }
}
