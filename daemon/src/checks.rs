//! The daemon's condition checks: each [`Command::CheckWait`] evaluates a wait's condition
//! once in the sandboxed engine (`outpost-condition`) on a thread of the check [`Pool`], with a
//! [`Ctx`] answering its `ctx` calls, and its outcome comes back to the driver as
//! [`Input::WaitChecked`] (as an [`Event::Input`]). [`Command::StopCheck`] sets the check's cancel: the engine joins
//! its calls before it returns, so the outcome arrives only once the check has stopped, its
//! cleanup included.
//!
//! This module owns the checks running now; when a wait is checked and how it ends are the core's
//! schedule's, and the observations the calls read are [`Seen`]'s — the wait's history of
//! checks started and ended included, which [`Seen`] takes from the same command and input.
//!
//! [`Command::CheckWait`]: outpost_core::daemon::Command::CheckWait
//! [`Command::StopCheck`]: outpost_core::daemon::Command::StopCheck
//! [`Seen`]: super::ctx::Seen

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use outpost_condition::{Cancel, Identity, Limits, Verdict};
use outpost_core::daemon::Input;
use outpost_core::ids::WaitId;
use outpost_core::wait::{CheckError, CheckOutcome};

use super::Event;
use super::ctx::{Ctx, CtxShared, now_ms};
use super::pool::Pool;

/// Stack for a check's thread beyond the engine's own limit.
const STACK_MARGIN: usize = 1024 * 1024;

/// How long a stopping daemon waits for its checks to stop.
pub(crate) const STOP_BOUND: Duration = Duration::from_secs(5);

/// One check the daemon started.
struct Running {
    check: u64,
    cancel: Cancel,
    /// Set once the check has sent its outcome: nothing of it runs any more.
    done: Arc<AtomicBool>,
}

/// The checks running now.
pub(crate) struct Checks {
    shared: CtxShared,
    context_id: String,
    events: Sender<Event>,
    limits: Limits,
    running: BTreeMap<WaitId, Running>,
    pool: Pool,
}

impl Checks {
    pub(crate) fn new(shared: CtxShared, context_id: String, events: Sender<Event>) -> Self {
        let limits = Limits::default();
        let pool = Pool::new(limits.max_stack_bytes + STACK_MARGIN);
        Self {
            shared,
            context_id,
            events,
            limits,
            running: BTreeMap::new(),
            pool,
        }
    }

    /// No check runs now.
    pub(crate) fn is_idle(&self) -> bool {
        self.running.is_empty()
    }

    /// The observations conditions read.
    pub(crate) fn seen(&self) -> &super::ctx::Seen {
        &self.shared.seen
    }

    /// Starts check `check` of `wait_id`; [`Input::WaitChecked`] (as an [`Event::Input`]) brings its outcome.
    pub(crate) fn start(
        &mut self,
        wait_id: WaitId,
        check: u64,
        requester: String,
        operator: bool,
        source: String,
    ) {
        let cancel = Cancel::new();
        let ctx = Arc::new(Ctx::new(
            self.shared.clone(),
            wait_id.clone(),
            requester.clone(),
            operator,
            check,
        ));
        // The engine knows no core types: the wait's id crosses as its text.
        let identity = Identity {
            wait_id: wait_id.as_str().to_owned(),
            context_id: self.context_id.clone(),
            requester,
        };
        let (limits, events, stop) = (self.limits.clone(), self.events.clone(), cancel.clone());
        let done = Arc::new(AtomicBool::new(false));
        let id = wait_id.clone();
        let finished = done.clone();
        let started = self.pool.run(Box::new(move || {
            // A panic (a bug) fails the check instead of leaving its wait running for good
            // and its thread gone.
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let now = now_ms();
                let verdict =
                    outpost_condition::check(&source, &identity, now, ctx.clone(), &limits, &stop);
                outcome_of(verdict, &ctx)
            }))
            .unwrap_or_else(|_| {
                CheckOutcome::Failed(CheckError {
                    code: "condition_engine".into(),
                    message: "the check's engine panicked (a bug in outpost)".into(),
                    at_ms: now_ms(),
                })
            });
            // Nothing of the check outlives its outcome's arrival.
            drop(ctx);
            Box::new(move || {
                let _ = events.send(Event::Input(Input::WaitChecked {
                    wait_id: id,
                    check,
                    outcome,
                }));
                finished.store(true, Ordering::Release);
            })
        }));
        if let Err(e) = started {
            done.store(true, Ordering::Release);
            let _ = self.events.send(Event::Input(Input::WaitChecked {
                wait_id: wait_id.clone(),
                check,
                outcome: CheckOutcome::Failed(CheckError {
                    code: "check_unstartable".into(),
                    message: format!("no thread for the check: {e}"),
                    at_ms: now_ms(),
                }),
            }));
        }
        self.running.insert(
            wait_id,
            Running {
                check,
                cancel,
                done,
            },
        );
    }

    /// Interrupts check `check` of `wait_id`; its outcome still comes (as `Stopped` or
    /// whatever it reached), once it has stopped.
    pub(crate) fn stop(&self, wait_id: &WaitId, check: u64) {
        if let Some(r) = self.running.get(wait_id).filter(|r| r.check == check) {
            r.cancel.cancel();
        }
    }

    /// Check `check` of `wait_id` reported its outcome to the driver: it has ended, and its
    /// thread is back in the pool.
    pub(crate) fn finished(&mut self, wait_id: &WaitId, check: u64) {
        if self.running.get(wait_id).is_some_and(|r| r.check == check) {
            self.running.remove(wait_id);
        }
    }

    /// Stops every check and waits up to [`STOP_BOUND`] for them (the daemon is stopping; the
    /// waits resume from the store on its next start).
    pub(crate) fn stop_all(&mut self) {
        for r in self.running.values() {
            r.cancel.cancel();
        }
        let deadline = std::time::Instant::now() + STOP_BOUND;
        for (_, r) in std::mem::take(&mut self.running) {
            while !r.done.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// What the schedule hears of one check.
fn outcome_of(verdict: Result<Verdict, outpost_condition::CheckError>, ctx: &Ctx) -> CheckOutcome {
    if let Some(breach) = ctx.breach() {
        return CheckOutcome::Failed(CheckError {
            code: breach.code,
            message: breach.message,
            at_ms: now_ms(),
        });
    }
    match verdict {
        Ok(Verdict::NotYet) => CheckOutcome::NotYet,
        Ok(Verdict::Matched {
            resume_text,
            payload,
        }) => CheckOutcome::Matched {
            resume_text,
            payload: payload.map(|p| p.to_string()),
            evidence: ctx.evidence(),
        },
        Err(outpost_condition::CheckError::Cancelled) => CheckOutcome::Stopped,
        Err(e) => CheckOutcome::Failed(CheckError {
            code: e.code().to_owned(),
            message: e.to_string(),
            at_ms: now_ms(),
        }),
    }
}
