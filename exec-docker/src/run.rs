//! One container's life after it started: streaming its output under the caps, waiting for
//! it with the deadline, stopping it on timeout or cancel, and removing it — on every path.
//!
//! A driver task on the executor's runtime owns the container from start to removal. The
//! [`DockerRun`] handle talks to it through a cancel flag, a shared output buffer and a
//! channel that carries the one [`Outcome`]. The outcome is sent only after the container is
//! removed, so a caller that saw it can rely on `docker ps -a` no longer listing it.
//!
//! The same channel carries the wakes of [`RunHandle::wait_waker`], which the output buffer
//! calls on every push once [`RunHandle::notify_output`] asked it to: the handle's waiter
//! sleeps until the container has output or its outcome is in, never in slices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{
    InspectContainerOptions, StopContainerOptions, WaitContainerOptions,
};
use futures_util::{Stream, StreamExt};
use outpost_core::executor::{
    CapturedOutput, Ending, ExecError, FinishedOutput, Outcome, OutputChunk, RunHandle,
    Stream as OutStream, WaitWaker,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The exit status the engine reports for a container killed by SIGKILL (the OOM killer's).
const EXIT_KILLED: i64 = 137;

/// How long the output stream may lag behind the container's exit.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);
/// How many times a 137 exit asks the engine whether it was an OOM kill (see `oom_killed`).
const OOM_FLAG_ASKS: u32 = 10;
/// The pause between those asks: together at most about a second after such an exit.
const OOM_FLAG_PAUSE: Duration = Duration::from_millis(100);

/// The attach connection's output.
pub(crate) type OutputStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

use crate::Live;

/// What a [`DockerRun`]'s waiter hears.
pub(crate) enum Heard {
    /// The driver's outcome: the container is removed.
    Ended(Result<Outcome, ExecError>),
    /// [`RunHandle::wait_waker`]'s waker was called (output arrived, or a cancel was raised):
    /// the wait in progress returns early.
    Woken,
}

/// The sending end of a run's [`Heard`] channel. The driver task holds it, and wakers only a
/// [`Weak`] of it, so a driver dropped unfinished (the executor's runtime shut down) still
/// disconnects the channel and its waiter hears of it.
pub(crate) type Report = Arc<mpsc::Sender<Heard>>;

/// Everything the driver task needs.
pub(crate) struct Driver {
    pub docker: Docker,
    pub id: String,
    pub streams: Arc<Mutex<CapturedOutput>>,
    pub deadline: Option<tokio::time::Instant>,
    pub cancel: watch::Receiver<bool>,
    pub grace_secs: i32,
    pub memory_mb: u64,
    pub started: Instant,
    pub setup: Duration,
    pub live: Live,
    pub relay: Option<JoinHandle<()>>,
    /// The run's egress gate and the holder of its network, for an allowlist.
    pub gate: Option<crate::egress::RunGate>,
}

impl Driver {
    /// Runs the container to its end, removes it, then reports.
    pub(crate) async fn drive(mut self, output: OutputStream, report: Report) {
        let reader = tokio::spawn(read_output(output, self.streams.clone()));
        let mut notes = Vec::new();
        // Losing the engine mid-run still ends the run (a service is then marked failed), with
        // what happened on stderr.
        let (ending, code) = self.wait_for_end().await.unwrap_or_else(|e| {
            notes.push(e.to_string());
            (Ending::Exited, None)
        });
        let execute = self.started.elapsed();
        if let Some(relay) = self.relay.take() {
            // Awaited, so the port is closed before the outcome is reported.
            relay.abort();
            let _ = relay.await;
        }
        let drained = tokio::time::timeout(OUTPUT_DRAIN, reader).await.is_ok();
        if !drained {
            notes.push("output written after the container ended was not collected".to_owned());
        }
        if ending == Ending::Exited && code == Some(EXIT_KILLED) {
            notes.push(self.kill_note().await);
        }
        match crate::cleanup::remove(&self.docker, &self.id).await {
            Ok(()) => {
                if let Ok(mut live) = self.live.lock() {
                    live.remove(&self.id);
                }
            }
            // Still listed as live: the executor tries again when it is dropped.
            Err(e) => notes.push(format!("{e}; it is removed again when the executor stops")),
        }
        let mut egress_denied = Vec::new();
        if let Some(gate) = self.gate.take() {
            egress_denied = gate.refused.lock().map(|r| r.clone()).unwrap_or_default();
            let holder = gate.holder.clone();
            match gate.close(&self.docker).await {
                Ok(()) => {
                    if let Ok(mut live) = self.live.lock() {
                        live.remove(&holder);
                    }
                }
                Err(e) => notes.push(format!("{e}; it is removed again when the executor stops")),
            }
        }
        let outcome = self
            .streams
            .lock()
            .map_err(|_| ExecError::Failed("the output buffer lock was poisoned".into()))
            .map(|mut streams| {
                let FinishedOutput {
                    stdout,
                    mut stderr,
                    truncated,
                } = streams.finish_output();
                let truncated = truncated || !drained;
                for note in &notes {
                    stderr.extend_from_slice(format!("\n[outpost: {note}]\n").as_bytes());
                }
                Outcome {
                    ending,
                    exit_code: code.map(|c| i32::try_from(c).unwrap_or(i32::MAX)),
                    signal: None,
                    stdout,
                    stderr,
                    truncated,
                    setup: self.setup,
                    execute,
                    egress_denied,
                }
            });
        let _ = report.send(Heard::Ended(outcome));
    }

    /// Waits for the container to exit, stopping it at the deadline or on cancel. Returns how
    /// it ended and the exit status the engine reports (none if a stopped container did not
    /// report one in time; it is then killed by its removal).
    async fn wait_for_end(&mut self) -> Result<(Ending, Option<i64>), ExecError> {
        let options = WaitContainerOptions {
            condition: "not-running".to_owned(),
        };
        let mut wait = self.docker.wait_container(&self.id, Some(options));
        let deadline = self.deadline;
        let timed_out = async move {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let mut cancel = self.cancel.clone();
        let ending = tokio::select! {
            status = wait.next() => {
                return exit_status(status).map(|code| (Ending::Exited, Some(code)));
            }
            () = timed_out => Ending::TimedOut,
            _ = cancel.wait_for(|c| *c) => Ending::Cancelled,
        };
        let stop = StopContainerOptions {
            t: Some(self.grace_secs),
            signal: None,
        };
        // A container that exited meanwhile answers 304; the wait below reports its status.
        let _ = self.docker.stop_container(&self.id, Some(stop)).await;
        let bound = Duration::from_secs(u64::try_from(self.grace_secs).unwrap_or(0) + 10);
        match tokio::time::timeout(bound, wait.next()).await {
            Ok(status) => exit_status(status).map(|code| (ending, Some(code))),
            Err(_) => Ok((ending, None)),
        }
    }

    /// What stderr says about a 137 exit this executor did not cause (it neither timed the
    /// container out nor cancelled it). The container's first process ignores a SIGKILL sent
    /// from inside its PID namespace, so such an exit is nearly always the kernel's OOM killer.
    /// The engine's OOM flag confirms that; under cgroup v2 the engine can miss the OOM event
    /// altogether, so without the flag the note names the memory limit as the likely cause and
    /// says it was not confirmed.
    async fn kill_note(&self) -> String {
        if self.oom_killed().await {
            format!(
                "the container was killed: it went over its memory limit of {} MiB",
                self.memory_mb
            )
        } else {
            format!(
                "the container was killed by SIGKILL (exit 137), most likely for going over its \
                 memory limit of {} MiB; the engine did not confirm an OOM kill",
                self.memory_mb
            )
        }
    }

    /// Whether the engine says the kernel's OOM killer ended the container. The engine learns
    /// of an OOM kill from an event that can come after the exit it reports, so a 137 exit
    /// without the flag is asked about again a few times before it counts as a plain kill.
    async fn oom_killed(&self) -> bool {
        for attempt in 0..OOM_FLAG_ASKS {
            if attempt > 0 {
                tokio::time::sleep(OOM_FLAG_PAUSE).await;
            }
            let flag = self
                .docker
                .inspect_container(&self.id, None::<InspectContainerOptions>)
                .await
                .ok()
                .and_then(|c| c.state)
                .and_then(|s| s.oom_killed);
            match flag {
                Some(true) => return true,
                Some(false) => {}
                // The engine could not say: asking again will not help.
                None => return false,
            }
        }
        false
    }
}

/// The exit status from the wait stream (bollard reports a non-zero one as an error).
fn exit_status(
    status: Option<Result<bollard::models::ContainerWaitResponse, bollard::errors::Error>>,
) -> Result<i64, ExecError> {
    match status {
        Some(Ok(response)) => Ok(response.status_code),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(e)) => Err(ExecError::Failed(format!(
            "waiting for the container failed: {e}"
        ))),
        None => Err(ExecError::Failed(
            "the engine ended the wait without an exit status".into(),
        )),
    }
}

/// Copies the attach stream into the capped buffers until the container's streams close.
async fn read_output(mut output: OutputStream, streams: Arc<Mutex<CapturedOutput>>) {
    while let Some(Ok(item)) = output.next().await {
        let (stream, bytes) = match item {
            LogOutput::StdErr { message } => (OutStream::Stderr, message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (OutStream::Stdout, message)
            }
            LogOutput::StdIn { .. } => continue,
        };
        if let Ok(mut streams) = streams.lock() {
            streams.push(stream, &bytes);
        }
    }
}

/// A container run in progress. See the module docs. Dropping it stops and removes the
/// container, as a cancel does: nobody could read its outcome any more.
pub struct DockerRun {
    pub(crate) run_id: String,
    pub(crate) container_id: String,
    pub(crate) streams: Arc<Mutex<CapturedOutput>>,
    pub(crate) heard: mpsc::Receiver<Heard>,
    /// Feeds `heard` for [`RunHandle::wait_waker`]'s wakers, while the driver holds it.
    pub(crate) tell: Weak<mpsc::Sender<Heard>>,
    /// A wake was sent and its wait has not returned yet: later wakes are folded into it, so
    /// a container writing line by line does not queue a wake per line.
    pub(crate) unheard: Arc<AtomicBool>,
    pub(crate) cancel: Arc<watch::Sender<bool>>,
    pub(crate) outcome: Option<Result<Outcome, ExecError>>,
}

impl DockerRun {
    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.container_id
    }
}

impl Drop for DockerRun {
    /// Stops the container as a cancel does, unless it ended: the cancel's sender is also held
    /// by whoever took [`RunHandle::canceller`], so dropping it alone would not say so.
    fn drop(&mut self) {
        if self.outcome.is_none() {
            self.cancel.send_replace(true);
        }
    }
}

impl RunHandle for DockerRun {
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
        if self.outcome.is_none() {
            self.outcome = match self.heard.recv_timeout(timeout) {
                Ok(Heard::Ended(outcome)) => Some(outcome),
                Ok(Heard::Woken) => {
                    // Cleared before returning: a wake from now on ends the next wait.
                    self.unheard.store(false, Ordering::SeqCst);
                    return Ok(None);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => Some(Err(ExecError::Failed(
                    "the container's driver stopped without reporting (the executor was dropped)"
                        .into(),
                ))),
            };
        }
        match &self.outcome {
            Some(outcome) => outcome.clone().map(Some),
            None => Ok(None),
        }
    }

    fn cancel(&mut self) -> Result<(), ExecError> {
        self.cancel.send_replace(true);
        Ok(())
    }

    /// Tells the container's driver task to stop it, as a cancel does: the task's `select!`
    /// wakes on it, so nobody polls.
    fn canceller(&self) -> Option<WaitWaker> {
        let cancel = self.cancel.clone();
        Some(Arc::new(move || {
            cancel.send_replace(true);
        }))
    }

    /// Ends a wait in progress, unless a wake it has not heard yet will.
    fn wait_waker(&self) -> Option<WaitWaker> {
        Some(outpost_host::folded_weak_waker(
            self.unheard.clone(),
            self.tell.clone(),
            || Heard::Woken,
        ))
    }

    /// The output buffer calls `waker` after every push that kept something.
    fn notify_output(&mut self, waker: WaitWaker) -> bool {
        match self.streams.lock() {
            Ok(mut streams) => {
                streams.notify_with(waker);
                true
            }
            Err(_) => false,
        }
    }

    fn read_output(&mut self) -> Vec<OutputChunk> {
        self.streams
            .lock()
            .map(|mut s| s.take_fresh())
            .unwrap_or_default()
    }

    fn service_id(&self) -> Option<String> {
        Some(self.container_id.clone())
    }
}
