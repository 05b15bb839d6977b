//! One run driven to its end, the same for every waiter (the daemon's runner, the server's
//! `cloud` executor): wait for the run, stop it once its [`Cancel`] is raised, and hand back
//! how it ended.
//!
//! A raise reaches the run at once: it cancels it directly where the run watches a flag
//! ([`RunHandle::canceller`]), and wakes the waiter, who cancels it, where the run's handle
//! can be woken ([`RunHandle::wait_waker`]). A streamed run's output wakes the waiter the same
//! way where the handle offers it ([`RunHandle::notify_output`]). The waiter then sleeps until
//! something wakes it; which waits it makes follows from what the handle offers, never from
//! its executor. Only a handle that can be neither woken nor cancelled from afar is looked at
//! every [`SLICE`], and only a streamed one whose output cannot wake its waiter every
//! [`STREAM_SLICE`]. This module owns that loop; it never decides whether a run may start or
//! what its result means.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outpost_core::executor::{ExecError, Outcome, OutputChunk, RunHandle, WaitWaker};

/// How often a waiter whose run can neither be woken nor cancelled from afar looks at its
/// cancel.
const SLICE: Duration = Duration::from_millis(200);

/// How long one wait lasts when a raise reaches it (the run's own deadline still ends it in
/// time: the handle enforces it).
const WOKEN_WAIT: Duration = Duration::from_secs(3600);

/// A run's cancel: raised from any thread, once or more; the run's waiter acts on the first.
#[derive(Clone, Default)]
pub struct Cancel {
    state: Arc<CancelState>,
}

#[derive(Default)]
struct CancelState {
    raised: AtomicBool,
    waker: Mutex<Option<WaitWaker>>,
    canceller: Mutex<Option<WaitWaker>>,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("raised", &self.is_raised())
            .finish()
    }
}

impl Cancel {
    /// A cancel nobody raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to stop: cancels it directly where it can be, and wakes its waiter if it
    /// waits.
    pub fn raise(&self) {
        self.state.raised.store(true, Ordering::SeqCst);
        for slot in [&self.state.canceller, &self.state.waker] {
            let call = slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(call) = call {
                call();
            }
        }
    }

    /// Whether it was raised.
    pub fn is_raised(&self) -> bool {
        self.state.raised.load(Ordering::SeqCst)
    }

    fn wake_with(&self, waker: WaitWaker) {
        *self.state.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(waker);
    }

    fn cancel_with(&self, canceller: WaitWaker) {
        *self
            .state
            .canceller
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(canceller);
    }
}

/// Waits for `handle`'s run to end, cancelling it (once) when `cancel` is raised, and returns
/// how it ended: cancelled, timed out (the handle enforces its deadline) or on its own.
pub fn run_to_end(handle: &mut dyn RunHandle, cancel: &Cancel) -> Result<Outcome, ExecError> {
    drive(handle, cancel, None)
}

/// [`run_to_end`], handing the run's output to `on_output` as it arrives (within the caps,
/// the last of it before this returns). A handle that can wake its waiter on output
/// ([`RunHandle::notify_output`] to its own [`RunHandle::wait_waker`]) is waited on until it
/// has some or ends; any other is looked at every [`STREAM_SLICE`].
pub fn run_to_end_streaming(
    handle: &mut dyn RunHandle,
    cancel: &Cancel,
    on_output: &mut dyn FnMut(Vec<OutputChunk>),
) -> Result<Outcome, ExecError> {
    drive(handle, cancel, Some(on_output))
}

/// How often a streamed run whose output cannot wake its waiter is looked at.
pub const STREAM_SLICE: Duration = Duration::from_millis(50);

/// A [`RunHandle::wait_waker`] for a handle whose waiter sleeps on one channel that hears
/// both the run's end and its wakes: `wake` sends the wake, and wakes are folded — none is
/// sent while an earlier one is unheard — so a program that prints byte by byte queues one
/// wake, not one per byte. The waiter clears `unheard` when it hears a wake, before it looks
/// at the output and returns.
pub fn folded_waker(
    unheard: Arc<AtomicBool>,
    wake: impl Fn() + Send + Sync + 'static,
) -> WaitWaker {
    Arc::new(move || {
        if !unheard.swap(true, Ordering::SeqCst) {
            wake();
        }
    })
}

/// A [`folded_waker`] that sends `woken()` on `tell` while the run's runner still holds the
/// sender: a waker keeps only a [`std::sync::Weak`], so a runner that dies still disconnects
/// its waiter.
pub fn folded_weak_waker<T: Send + 'static>(
    unheard: Arc<AtomicBool>,
    tell: std::sync::Weak<std::sync::mpsc::Sender<T>>,
    woken: fn() -> T,
) -> WaitWaker {
    folded_waker(unheard, move || {
        if let Some(tell) = tell.upgrade() {
            let _ = tell.send(woken());
        }
    })
}

fn drive(
    handle: &mut dyn RunHandle,
    cancel: &Cancel,
    mut on_output: Option<&mut dyn FnMut(Vec<OutputChunk>)>,
) -> Result<Outcome, ExecError> {
    // Registered before the first look at the cancel below: a raise either finds it or is
    // seen by that look.
    let reachable = match handle.canceller() {
        Some(canceller) => {
            cancel.cancel_with(canceller);
            true
        }
        None => false,
    };
    let slice = match handle.wait_waker() {
        Some(waker) => {
            cancel.wake_with(waker.clone());
            match on_output {
                Some(_) if !handle.notify_output(waker) => STREAM_SLICE,
                _ => WOKEN_WAIT,
            }
        }
        None if on_output.is_some() => STREAM_SLICE,
        None if reachable => WOKEN_WAIT,
        None => SLICE,
    };
    let mut cancelled = false;
    loop {
        // Looked at before every wait: a raise before the waker was set is not missed, and
        // one during a wait ends that wait.
        if !cancelled && cancel.is_raised() {
            cancelled = true;
            handle.cancel()?;
        }
        // Read before every wait too: what came before the output could wake anyone (the
        // notifier is set after the run started) is not left until the run's end.
        if let Some(sink) = on_output.as_mut() {
            pass_on(handle, sink);
        }
        if let Some(outcome) = handle.wait(slice)? {
            if let Some(sink) = on_output.as_mut() {
                pass_on(handle, sink);
            }
            return Ok(outcome);
        }
    }
}

fn pass_on(handle: &mut dyn RunHandle, sink: &mut &mut dyn FnMut(Vec<OutputChunk>)) {
    let fresh = handle.read_output();
    if !fresh.is_empty() {
        sink(fresh);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::time::Instant;

    use outpost_core::executor::{Ending, Outcome};

    use super::*;

    /// A run that ends only when its cancel flag is raised, and that a canceller reaches
    /// (as a wasm store or a container does); it counts the waits it was asked for.
    struct FlagRun {
        cancelled: Arc<AtomicBool>,
        wake: Sender<()>,
        woken: Receiver<()>,
        waits: Arc<AtomicUsize>,
        /// Told when a wait begins.
        waiting: Option<Sender<()>>,
    }

    impl FlagRun {
        fn new() -> Self {
            let (wake, woken) = channel();
            Self {
                cancelled: Arc::default(),
                wake,
                woken,
                waits: Arc::default(),
                waiting: None,
            }
        }
    }

    impl RunHandle for FlagRun {
        fn run_id(&self) -> &str {
            "run_flag"
        }

        fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
            self.waits.fetch_add(1, Ordering::SeqCst);
            if let Some(waiting) = &self.waiting {
                let _ = waiting.send(());
            }
            if !self.cancelled.load(Ordering::SeqCst) {
                let _ = self.woken.recv_timeout(timeout);
            }
            Ok(self.cancelled.load(Ordering::SeqCst).then(|| Outcome {
                ending: Ending::Cancelled,
                exit_code: None,
                signal: None,
                stdout: Vec::new(),
                stderr: Vec::new(),
                truncated: false,
                setup: Duration::ZERO,
                execute: Duration::ZERO,
                egress_denied: Vec::new(),
            }))
        }

        fn cancel(&mut self) -> Result<(), ExecError> {
            self.cancelled.store(true, Ordering::SeqCst);
            Ok(())
        }

        fn read_output(&mut self) -> Vec<OutputChunk> {
            Vec::new()
        }

        fn canceller(&self) -> Option<WaitWaker> {
            let (flag, wake) = (self.cancelled.clone(), self.wake.clone());
            let wake = Mutex::new(wake);
            Some(Arc::new(move || {
                flag.store(true, Ordering::SeqCst);
                let _ = wake.lock().map(|w| w.send(()));
            }))
        }
    }

    #[test]
    fn a_raise_reaches_a_run_through_its_canceller_without_polling() {
        let mut run = FlagRun::new();
        let waits = run.waits.clone();
        let (waiting, began) = channel();
        run.waiting = Some(waiting);
        let cancel = Cancel::new();
        let raiser = cancel.clone();
        let started = Instant::now();
        std::thread::spawn(move || {
            // Raised while the run's waiter waits.
            let _ = began.recv();
            raiser.raise();
        });
        let outcome = run_to_end(&mut run, &cancel).unwrap();
        assert_eq!(outcome.ending, Ending::Cancelled);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the raise ended the wait, not its timeout"
        );
        assert_eq!(
            waits.load(Ordering::SeqCst),
            1,
            "one wait, woken by the raise: nobody looked every {SLICE:?}"
        );
    }

    /// A run that ends only when cancelled, that writes `first` as its first wait begins,
    /// and whose cancels (and output, when it offers that) wake its waiter; it records the
    /// waits it was asked for and how many ran out unwoken (each lasts at most 30 s, so a
    /// wake that never comes fails the test instead of hanging it).
    struct StreamRun {
        cancelled: bool,
        tell: Sender<()>,
        woken: Receiver<()>,
        output: Vec<OutputChunk>,
        notify: Option<WaitWaker>,
        /// Whether [`RunHandle::notify_output`] is honoured.
        notifies: bool,
        waits: Vec<Duration>,
        ran_out: usize,
    }

    impl StreamRun {
        fn new(notifies: bool) -> Self {
            let (tell, woken) = channel();
            Self {
                cancelled: false,
                tell,
                woken,
                output: Vec::new(),
                notify: None,
                notifies,
                waits: Vec::new(),
                ran_out: 0,
            }
        }
    }

    impl RunHandle for StreamRun {
        fn run_id(&self) -> &str {
            "run_stream"
        }

        fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
            self.waits.push(timeout);
            if self.cancelled {
                return Ok(Some(Outcome {
                    ending: Ending::Cancelled,
                    exit_code: None,
                    signal: None,
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    truncated: false,
                    setup: Duration::ZERO,
                    execute: Duration::ZERO,
                    egress_denied: Vec::new(),
                }));
            }
            if self.waits.len() == 1 {
                self.output.push(OutputChunk {
                    stream: outpost_core::executor::Stream::Stdout,
                    bytes: b"first".to_vec(),
                });
                if let Some(wake) = &self.notify {
                    wake();
                }
            }
            if self
                .woken
                .recv_timeout(timeout.min(Duration::from_secs(30)))
                .is_err()
            {
                self.ran_out += 1;
            }
            Ok(None)
        }

        fn cancel(&mut self) -> Result<(), ExecError> {
            self.cancelled = true;
            Ok(())
        }

        fn read_output(&mut self) -> Vec<OutputChunk> {
            std::mem::take(&mut self.output)
        }

        fn wait_waker(&self) -> Option<WaitWaker> {
            let tell = Mutex::new(self.tell.clone());
            Some(Arc::new(move || {
                let _ = tell.lock().map(|t| t.send(()));
            }))
        }

        fn notify_output(&mut self, waker: WaitWaker) -> bool {
            if self.notifies {
                self.notify = Some(waker);
            }
            self.notifies
        }
    }

    /// Streams `run`, raising its cancel once output was handed out; returns what was.
    fn stream_to_cancel(run: &mut StreamRun) -> Vec<Vec<u8>> {
        let cancel = Cancel::new();
        let raiser = cancel.clone();
        let mut handed_out = Vec::new();
        let outcome = run_to_end_streaming(run, &cancel, &mut |chunks| {
            handed_out.extend(chunks.into_iter().map(|c| c.bytes));
            raiser.raise();
        })
        .unwrap();
        assert_eq!(outcome.ending, Ending::Cancelled);
        handed_out
    }

    #[test]
    fn output_that_wakes_its_waiter_is_streamed_without_slices() {
        let mut run = StreamRun::new(true);
        assert_eq!(stream_to_cancel(&mut run), [b"first".to_vec()]);
        assert_eq!(run.ran_out, 0, "the write woke the first wait");
        assert_eq!(
            run.waits.len(),
            3,
            "the write ended the first wait, the raise the second, the third saw the end: {:?}",
            run.waits
        );
        assert!(
            run.waits.iter().all(|w| *w == WOKEN_WAIT),
            "every wait lasts until something wakes it: {:?}",
            run.waits
        );
    }

    #[test]
    fn output_that_cannot_wake_its_waiter_is_looked_at_in_slices() {
        let mut run = StreamRun::new(false);
        assert_eq!(stream_to_cancel(&mut run), [b"first".to_vec()]);
        assert_eq!(
            run.ran_out, 1,
            "the write was found when the first slice ran out"
        );
        assert!(
            run.waits.iter().all(|w| *w == STREAM_SLICE),
            "{:?}",
            run.waits
        );
    }

    #[test]
    fn a_raise_before_the_wait_began_is_not_missed() {
        let mut run = FlagRun::new();
        let cancel = Cancel::new();
        cancel.raise();
        let outcome = run_to_end(&mut run, &cancel).unwrap();
        assert_eq!(outcome.ending, Ending::Cancelled);
    }
}
