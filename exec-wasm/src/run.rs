//! One wasm run: a store on its own thread (or, for a short ondemand run, on its waiter's),
//! stopped by epoch interruption.
//!
//! The run's waiter sleeps on one channel that hears both how the store ended and the wakes of
//! [`RunHandle::wait_waker`], which the output pipes call on every write once
//! [`RunHandle::notify_output`] asked them to: a streamed run is waited on until it has
//! output or ends, never looked at in slices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use outpost_core::executor::{
    Ending, ExecError, Outcome, OutputChunk, RunHandle, Stream, WaitWaker,
};

use crate::pipe::CappedPipe;
use crate::pool::RunPool;

/// A run not yet started: it starts on the caller's thread when a `wait` covers its whole
/// deadline and that deadline is at most [`INLINE_AT_MOST`] away (no thread hop: an ondemand
/// call costs microseconds), else on the pool, which bounds how many run at once.
pub(crate) struct Pending {
    pub(crate) job: Box<dyn FnOnce() -> Finish + Send>,
    pub(crate) report: Report,
    pub(crate) pool: RunPool,
}

/// What a run's waiter hears.
pub(crate) enum Heard {
    /// The store is done with.
    Finished(Finish),
    /// [`RunHandle::wait_waker`]'s waker was called (output arrived, or a cancel was raised):
    /// the wait in progress returns early.
    Woken,
}

/// The sending end of a run's [`Heard`] channel. Whoever runs the store holds it, and wakers
/// only a [`Weak`] of it, so a store thread that dies without reporting still disconnects the
/// channel and its waiter hears of it.
pub(crate) type Report = Arc<Sender<Heard>>;

/// How a store's `_start` ended, as the run thread reports it.
pub(crate) enum Finish {
    /// `_start` returned.
    Returned,
    /// `proc_exit(code)`.
    Exit(i32),
    /// Interrupted by us (cancel or deadline).
    Interrupted,
    /// A trap or another error, with its message.
    Trap(String),
}

/// The longest deadline a run may have to start on its waiter's thread instead of the pool:
/// longer runs share the pool's bound, however long their waiter is willing to wait.
pub(crate) const INLINE_AT_MOST: Duration = Duration::from_millis(200);

/// Exit status `wasmtime run` reports for a trap on Unix (128 + SIGABRT).
pub const TRAP_EXIT_CODE: i32 = 134;

/// A wasm run in progress.
pub struct WasmRun {
    pub(crate) run_id: String,
    pub(crate) module_name: String,
    pub(crate) cancelled: Arc<AtomicBool>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) heard: Receiver<Heard>,
    /// Feeds `heard` for [`RunHandle::wait_waker`]'s wakers, while the store's runner holds it.
    pub(crate) tell: Weak<Sender<Heard>>,
    /// A wake was sent and its wait has not returned yet: later wakes are folded into it, so
    /// a module writing byte by byte does not queue a wake per byte.
    pub(crate) unheard: Arc<AtomicBool>,
    pub(crate) pending: Option<Pending>,
    pub(crate) stdout: CappedPipe,
    pub(crate) stderr: CappedPipe,
    pub(crate) started: Instant,
    pub(crate) setup: Duration,
    pub(crate) outcome: Option<Outcome>,
}

impl WasmRun {
    /// Hands a not-yet-started run to the pool.
    fn start_on_pool(&mut self) {
        if let Some(p) = self.pending.take() {
            let (job, report) = (p.job, p.report);
            p.pool.spawn(Box::new(move || {
                let _ = report.send(Heard::Finished(job()));
            }));
        }
    }

    fn finish(&mut self, how: Finish) -> Outcome {
        let execute = self.started.elapsed();
        let timed_out = self.deadline.is_some_and(|d| Instant::now() >= d);
        let (ending, exit_code, trap) = match how {
            Finish::Returned => (Ending::Exited, Some(0), None),
            Finish::Exit(code) => (Ending::Exited, Some(code), None),
            Finish::Interrupted if self.cancelled.load(Ordering::Relaxed) && !timed_out => {
                (Ending::Cancelled, None, None)
            }
            Finish::Interrupted => (Ending::TimedOut, None, None),
            Finish::Trap(message) => (Ending::Exited, Some(TRAP_EXIT_CODE), Some(message)),
        };
        if let Some(message) = trap {
            // What `wasmtime run` prints for a trap.
            let text = format!(
                "Error: failed to run main module `{}`\n\nCaused by:\n    {message}\n",
                self.module_name
            );
            let _ = write_to_pipe(&self.stderr, text.as_bytes());
        }
        let (stdout, out_cut) = self.stdout.take();
        let (stderr, err_cut) = self.stderr.take();
        Outcome {
            ending,
            exit_code,
            signal: None,
            stdout,
            stderr,
            truncated: out_cut || err_cut,
            setup: self.setup,
            execute,
            egress_denied: Vec::new(),
        }
    }
}

fn write_to_pipe(pipe: &CappedPipe, bytes: &[u8]) -> Option<()> {
    use wasmtime_wasi::p2::OutputStream;
    let mut p = pipe.clone();
    p.write(bytes::Bytes::copy_from_slice(bytes)).ok()
}

impl RunHandle for WasmRun {
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
        if let Some(done) = &self.outcome {
            return Ok(Some(done.clone()));
        }
        if self.pending.is_some() {
            let covers_deadline = self.deadline.is_some_and(|d| {
                timeout.min(INLINE_AT_MOST) >= d.saturating_duration_since(Instant::now())
            });
            if covers_deadline && !self.cancelled.load(Ordering::Relaxed) {
                // The deadline ends the run before `timeout` runs out: run it right here.
                if let Some(p) = self.pending.take() {
                    let how = (p.job)();
                    let outcome = self.finish(how);
                    self.outcome = Some(outcome.clone());
                    return Ok(Some(outcome));
                }
            }
            if self.cancelled.load(Ordering::Relaxed) {
                // Cancelled before it ever started.
                self.pending = None;
                let outcome = self.finish(Finish::Interrupted);
                self.outcome = Some(outcome.clone());
                return Ok(Some(outcome));
            }
            self.start_on_pool();
        }
        match self.heard.recv_timeout(timeout) {
            Ok(Heard::Finished(how)) => {
                let outcome = self.finish(how);
                self.outcome = Some(outcome.clone());
                Ok(Some(outcome))
            }
            Ok(Heard::Woken) => {
                // Cleared before returning: a wake from now on ends the next wait.
                self.unheard.store(false, Ordering::SeqCst);
                Ok(None)
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                Err(ExecError::Failed("the wasm run thread stopped".into()))
            }
        }
    }

    fn cancel(&mut self) -> Result<(), ExecError> {
        self.cancelled.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Raises the flag the store's epoch callback reads: the run stops at the next tick,
    /// whichever thread runs it (the pool, or the waiter itself for a short run).
    fn canceller(&self) -> Option<WaitWaker> {
        let flag = self.cancelled.clone();
        Some(Arc::new(move || flag.store(true, Ordering::Relaxed)))
    }

    /// Ends a wait in progress, unless a wake it has not heard yet will. A short run its
    /// waiter runs itself is not ended early: its waiter is busy running it (a cancel reaches
    /// it through [`RunHandle::canceller`]).
    fn wait_waker(&self) -> Option<WaitWaker> {
        Some(outpost_host::folded_weak_waker(
            self.unheard.clone(),
            self.tell.clone(),
            || Heard::Woken,
        ))
    }

    /// Both output pipes call `waker` after every write that kept something.
    fn notify_output(&mut self, waker: WaitWaker) -> bool {
        self.stdout.notify_with(waker.clone()) && self.stderr.notify_with(waker)
    }

    fn read_output(&mut self) -> Vec<OutputChunk> {
        // Someone watches the output: the run must make progress on its own.
        self.start_on_pool();
        let mut chunks = Vec::new();
        for (stream, pipe) in [
            (Stream::Stdout, &self.stdout),
            (Stream::Stderr, &self.stderr),
        ] {
            let bytes = pipe.fresh();
            if !bytes.is_empty() {
                chunks.push(OutputChunk { stream, bytes });
            }
        }
        chunks
    }
}

impl Drop for WasmRun {
    fn drop(&mut self) {
        // An abandoned run stops at the next epoch tick.
        self.cancelled.store(true, Ordering::Relaxed);
    }
}
