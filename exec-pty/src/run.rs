//! One terminal run: the program in its session on the PTY, its waiter, its limits.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outpost_core::executor::{
    Ending, ExecError, Outcome, OutputChunk, RunHandle, Stream, TRUNCATION_MARKER, Terminal,
};
use outpost_host::{StopSchedule, StopStep};
use portable_pty::{CommandBuilder, MasterPty, PtyPair};

use crate::pump::{PtyInput, PtyOutput, Shared, spawn_drain};
use crate::session;

/// After the remains of an ended program are killed, how long the output may still take to
/// reach end-of-file before the run is reported anyway (a host not reading its terminal).
const EOF_BOUND: Duration = Duration::from_secs(2);

pub(crate) struct Spawn {
    pub run_id: String,
    /// The terminal's sandbox (private folders, gate), kept until the run is dropped.
    pub sandbox: Option<outpost_host::sandbox::SandboxGuard>,
    /// Destinations its egress gate refused.
    pub refusals: Arc<Mutex<Vec<String>>>,
    pub pair: PtyPair,
    pub command: CommandBuilder,
    pub program: PathBuf,
    pub timeout: Duration,
    pub idle: Option<Duration>,
    pub output_cap: usize,
    pub grace: Duration,
    pub drain: Duration,
    pub started: Instant,
}

/// What the waiter of a terminal run hears.
enum Heard {
    /// The program exited (and its session is gone), or waiting for it failed.
    Exited(std::io::Result<ExitStatus>),
    /// [`RunHandle::wait_waker`]'s waker was called.
    Woken,
}

/// A running terminal. Dropping it kills its session and whatever holds the terminal.
pub struct PtyRun {
    run_id: String,
    sid: i32,
    tty: Option<PathBuf>,
    shared: Arc<Shared>,
    master: Arc<Mutex<Box<dyn MasterPty + Send>>>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    taken: bool,
    /// The waiter thread's word that the program and its session are gone, and the wakes of
    /// [`RunHandle::wait_waker`] (a cancel), which end a wait in progress early.
    heard: Receiver<Heard>,
    /// The sending end `wait_waker` hands out.
    tell: Sender<Heard>,
    spawned_at: Instant,
    setup: Duration,
    idle: Option<Duration>,
    /// When it is hung up and killed, and why.
    schedule: StopSchedule,
    idled: bool,
    outcome: Option<Outcome>,
    _sandbox: Option<outpost_host::sandbox::SandboxGuard>,
    refusals: Arc<Mutex<Vec<String>>>,
    /// A wake was sent and its wait has not heard it yet (`outpost_host::folded_waker`).
    unheard: Arc<std::sync::atomic::AtomicBool>,
}

impl PtyRun {
    pub(crate) fn spawn(s: Spawn) -> Result<Self, ExecError> {
        let PtyPair { slave, master } = s.pair;
        let child = slave
            .spawn_command(s.command)
            .map_err(|e| ExecError::Spawn(format!("{}: {e:#}", s.program.display())))?;
        // The slave must not stay open here, or the master never reads end-of-file.
        drop(slave);
        let spawned_at = Instant::now();
        let child: Box<dyn portable_pty::Child> = child;
        let mut child = child
            .downcast::<std::process::Child>()
            .map_err(|mut other| {
                let _ = other.kill();
                ExecError::Spawn("the pseudo-terminal started an unknown kind of process".into())
            })?;
        let sid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        let tty = master.tty_name();
        let (reader, writer) = match (master.try_clone_reader(), master.take_writer()) {
            (Ok(reader), Ok(writer)) => (reader, writer),
            (Err(e), _) | (_, Err(e)) => {
                session::kill_remains(sid, tty.as_deref());
                let _ = child.wait();
                return Err(ExecError::Spawn(format!(
                    "the ends of the pseudo-terminal: {e}"
                )));
            }
        };
        let shared = Shared::new(s.output_cap);
        spawn_drain(reader, shared.clone());
        let (tell, heard) = mpsc::channel();
        let exit_tx = tell.clone();
        {
            let shared = shared.clone();
            let tty = tty.clone();
            let drain = s.drain;
            std::thread::spawn(move || {
                let status = child.wait();
                // The program is gone; whatever still holds the terminal has `drain` to
                // finish, then it and the rest of the session are killed.
                shared.wait_eof(drain);
                session::kill_remains(sid, tty.as_deref());
                shared.wait_eof(EOF_BOUND);
                let _ = exit_tx.send(Heard::Exited(status));
            });
        }
        Ok(Self {
            run_id: s.run_id,
            sid,
            tty,
            shared,
            master: Arc::new(Mutex::new(master)),
            writer: Arc::new(Mutex::new(writer)),
            taken: false,
            heard,
            tell,
            spawned_at,
            setup: spawned_at.saturating_duration_since(s.started),
            idle: s.idle,
            schedule: StopSchedule::new(spawned_at, s.timeout, s.grace),
            idled: false,
            unheard: Arc::default(),
            outcome: None,
            _sandbox: s.sandbox,
            refusals: s.refusals,
        })
    }

    /// The program's process id (also its session and process group id).
    pub fn pid(&self) -> u32 {
        u32::try_from(self.sid).unwrap_or(0)
    }

    /// The terminal's device (`/dev/pts/N`), when the system names it.
    pub fn tty(&self) -> Option<&std::path::Path> {
        self.tty.as_deref()
    }

    /// Every byte read from the terminal so far, by the executor or the host.
    pub fn bytes_read(&self) -> u64 {
        self.shared.lock().bytes_read()
    }

    /// Hangs the session up now, SIGKILL after the grace period.
    fn stop(&mut self, why: Ending) {
        if self.outcome.is_none() && self.schedule.ask(why, Instant::now()) {
            session::hang_up(self.sid);
        }
    }

    fn kill(&mut self) {
        session::kill_remains(self.sid, self.tty.as_deref());
        self.schedule.mark_killed();
    }

    /// Hangs up or kills the program if its schedule says so by `now`: its deadline or its
    /// idle limit passed, or the grace after its hang-up did.
    fn enforce_schedule(&mut self, now: Instant) {
        let idle_passed = self.idle_deadline().is_some_and(|at| now >= at);
        match self.schedule.due(now, idle_passed) {
            Some(StopStep::Deadline) => self.stop(Ending::TimedOut),
            Some(StopStep::Limit) => {
                self.idled = true;
                self.stop(Ending::TimedOut);
            }
            Some(StopStep::Kill) => self.kill(),
            None => {}
        }
    }

    fn idle_deadline(&self) -> Option<Instant> {
        let idle = self.idle?;
        self.shared.lock().last_activity().checked_add(idle)
    }

    fn finish(&mut self, status: std::io::Result<ExitStatus>) -> Result<Outcome, ExecError> {
        let execute = self.spawned_at.elapsed();
        let status =
            status.map_err(|e| ExecError::Failed(format!("waiting for the program: {e}")))?;
        let (tail, bytes_read) = {
            let state = self.shared.lock();
            (state.tail(), state.bytes_read())
        };
        let truncated = bytes_read > tail.len() as u64;
        let stdout = if truncated {
            [TRUNCATION_MARKER.as_bytes(), &tail].concat()
        } else {
            tail
        };
        let stderr = match (self.idled, self.idle) {
            (true, Some(idle)) => format!(
                "[outpost: stopped after {} ms without input or output]\n",
                idle.as_millis()
            )
            .into_bytes(),
            _ => Vec::new(),
        };
        Ok(Outcome {
            ending: self.schedule.ending(),
            exit_code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            truncated,
            setup: self.setup,
            execute,
            egress_denied: self.refusals.lock().map(|r| r.clone()).unwrap_or_default(),
        })
    }
}

impl RunHandle for PtyRun {
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
            let wake = self.schedule.next_look(until, self.idle_deadline());
            match self.heard.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(Heard::Exited(status)) => {
                    let outcome = self.finish(status)?;
                    self.outcome = Some(outcome.clone());
                    return Ok(Some(outcome));
                }
                // A cancel was raised or output came: its caller acts on it and waits again.
                // A program whose output keeps waking its waiter still meets its deadline.
                Ok(Heard::Woken) => {
                    self.unheard
                        .store(false, std::sync::atomic::Ordering::SeqCst);
                    self.enforce_schedule(Instant::now());
                    return Ok(None);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    self.enforce_schedule(now);
                    if now >= until {
                        return Ok(None);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ExecError::Failed("the program's waiter stopped".into()));
                }
            }
        }
    }

    fn cancel(&mut self) -> Result<(), ExecError> {
        self.stop(Ending::Cancelled);
        Ok(())
    }

    fn wait_waker(&self) -> Option<outpost_core::executor::WaitWaker> {
        let tell = self.tell.clone();
        Some(outpost_host::folded_waker(
            self.unheard.clone(),
            move || {
                let _ = tell.send(Heard::Woken);
            },
        ))
    }

    /// The drain thread calls `waker` when it read output nobody took yet, and at the end.
    fn notify_output(&mut self, waker: outpost_core::executor::WaitWaker) -> bool {
        self.shared.notify_with(waker);
        true
    }

    fn read_output(&mut self) -> Vec<OutputChunk> {
        let bytes = self.shared.take_pending();
        if bytes.is_empty() {
            return Vec::new();
        }
        vec![OutputChunk {
            stream: Stream::Stdout,
            bytes,
        }]
    }

    fn service_id(&self) -> Option<String> {
        Some(self.pid().to_string())
    }

    fn take_terminal(&mut self) -> Option<Terminal> {
        if self.taken {
            return None;
        }
        self.taken = true;
        self.shared.take();
        Some(Terminal {
            input: Box::new(PtyInput {
                shared: self.shared.clone(),
                writer: self.writer.clone(),
                master: self.master.clone(),
            }),
            output: Box::new(PtyOutput {
                shared: self.shared.clone(),
                reader: None,
                done: false,
            }),
        })
    }
}

impl Drop for PtyRun {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            self.kill();
        }
    }
}
