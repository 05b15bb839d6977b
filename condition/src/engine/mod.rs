//! One evaluation of a condition in QuickJS: the runtime, its limits and the event loop.
//!
//! Owns the sandbox (which intrinsics exist, the replaced clock in `prelude.js`, the guarded
//! builtins in `guard.js`, no module loader), the interrupt handler (deadline, cancel, broken
//! limits) and the loop that runs jobs and waits for host calls. Must never return while a host call of the check is still running, and
//! must never let the program see a time other than the check's `now`.

mod bytecode;
mod calls;
#[cfg(test)]
mod guard_tests;
mod native;
mod values;

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Instant;

use rquickjs::context::EvalOptions;
use rquickjs::context::intrinsic::{
    Date, Eval, Json, MapSet, Promise as PromiseIntrinsic, RegExp, RegExpCompiler, TypedArrays,
    WeakRef,
};
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Exception, Function, Object, Promise, Runtime, Value};

use self::calls::{Calls, Event};
use self::values::Phase;
use crate::{Cancel, CheckError, Host, Identity, Limits, Verdict};

/// The builtins a condition gets: the language, JSON, RegExp, collections, typed arrays,
/// promises and weak references. Left out: `Proxy` (a builtin given a proxy runs program code
/// at points the guards in `guard.js` cannot see), `performance` (a clock), `DOMException`,
/// and everything of an embedder (no `console`, `setTimeout`, `require`, module loader, I/O).
/// `Eval` is needed to compile the source. `Atomics.wait` cannot block: QuickJS only lets a
/// runtime block when it is told to, and this one never is.
type Intrinsics = (
    Date,
    Eval,
    RegExpCompiler,
    RegExp,
    Json,
    MapSet,
    TypedArrays,
    PromiseIntrinsic,
    WeakRef,
);

/// The greatest time a JavaScript `Date` holds, in ms since the epoch.
const MAX_DATE_MS: u64 = 8_640_000_000_000_000;

/// When the program must stop; read by the interrupt handler and the loop.
#[derive(Clone)]
struct Stop {
    /// The daemon's cancel.
    cancel: Cancel,
    /// Set when the program broke a limit ([`Calls`] holds which).
    fatal: Arc<AtomicBool>,
    /// `None` when the deadline is too far to represent.
    deadline: Option<Instant>,
}

impl Stop {
    /// Whether the interpreter must stop now.
    fn interrupt(&self) -> bool {
        self.cancel.is_cancelled()
            || self.fatal.load(Ordering::SeqCst)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// See [`crate::check`].
pub(crate) fn run(
    source: &str,
    identity: &Identity,
    now_unix_ms: u64,
    host: Arc<dyn Host>,
    limits: &Limits,
    cancel: &Cancel,
) -> Result<Verdict, CheckError> {
    if source.len() > limits.max_source_bytes {
        return Err(CheckError::SourceTooLarge {
            limit: limits.max_source_bytes,
        });
    }
    if now_unix_ms > MAX_DATE_MS {
        return Err(CheckError::Engine {
            message: format!("now ({now_unix_ms} ms) is past the last date JavaScript holds"),
        });
    }
    if cancel.is_cancelled() {
        return Err(CheckError::Cancelled);
    }
    let stop = Stop {
        cancel: cancel.clone(),
        fatal: Arc::new(AtomicBool::new(false)),
        deadline: Instant::now().checked_add(limits.deadline),
    };

    // Host calls get their own cancel: set by the daemon's (through this watch) and by the
    // end of the check, which must not set the daemon's.
    let calls_cancel = Cancel::new();
    let (tx, rx) = mpsc::channel();
    let _watch = {
        let calls_cancel = calls_cancel.clone();
        let tx = tx.clone();
        cancel.on_cancel(move || {
            calls_cancel.cancel();
            let _ = tx.send(Event::Cancelled);
        })
    };

    bytecode::compiled().map_err(|e| CheckError::Engine {
        message: format!("could not compile the sandbox's own JavaScript: {e}"),
    })?;
    let engine = |e: rquickjs::Error| CheckError::Engine {
        message: format!("could not start QuickJS: {e}"),
    };
    let runtime = Runtime::new().map_err(engine)?;
    runtime.set_memory_limit(limits.memory_bytes);
    runtime.set_max_stack_size(limits.max_stack_bytes);
    runtime.set_interrupt_handler(Some(Box::new({
        let stop = stop.clone();
        move || stop.interrupt()
    })));
    let context = Context::custom::<Intrinsics>(&runtime).map_err(|e| match e {
        rquickjs::Error::Allocation => CheckError::MemoryLimit {
            limit: limits.memory_bytes,
        },
        other => engine(other),
    })?;

    context.with(|ctx| {
        let calls = Rc::new(Calls::new(host, limits, calls_cancel, tx, stop.clone()));
        let loop_ = Loop {
            ctx: &ctx,
            calls: &calls,
            stop: &stop,
            limits,
        };
        let result = loop_.evaluate(source, identity, now_unix_ms, &rx);
        // Any outcome: no host call of this check runs past this point, and no JS value is
        // left in Rust hands (the `ctx` functions hold `calls`).
        calls.shutdown();
        result
    })
}

/// See [`crate::fresh_sandbox_only`].
pub(crate) fn fresh_sandbox_only(limits: &Limits) -> Result<(), CheckError> {
    let engine = |e: rquickjs::Error| CheckError::Engine {
        message: format!("could not start QuickJS: {e}"),
    };
    let runtime = Runtime::new().map_err(engine)?;
    runtime.set_memory_limit(limits.memory_bytes);
    let context = Context::custom::<Intrinsics>(&runtime).map_err(|e| match e {
        rquickjs::Error::Allocation => CheckError::MemoryLimit {
            limit: limits.memory_bytes,
        },
        other => engine(other),
    })?;
    drop(context);
    Ok(())
}

struct Loop<'a, 'js> {
    ctx: &'a Ctx<'js>,
    calls: &'a Rc<Calls<'js>>,
    stop: &'a Stop,
    limits: &'a Limits,
}

impl<'js> Loop<'_, 'js> {
    /// Why the check must end now, if it must: cancel, then a broken limit, then the deadline.
    fn stopped(&self) -> Option<CheckError> {
        if self.stop.cancel.is_cancelled() {
            return Some(CheckError::Cancelled);
        }
        if let Some(fatal) = self.calls.fatal() {
            return Some(fatal);
        }
        if self.stop.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(self.deadline());
        }
        None
    }

    fn deadline(&self) -> CheckError {
        CheckError::DeadlineExceeded {
            limit: self.limits.deadline,
        }
    }

    /// An engine error, unless the check was stopped (which is then the reason).
    fn fail(&self, error: rquickjs::Error, phase: Phase) -> CheckError {
        let failure = values::failure(self.ctx, error, phase, self.limits);
        self.stopped().unwrap_or(failure)
    }

    fn evaluate(
        &self,
        source: &str,
        identity: &Identity,
        now_unix_ms: u64,
        rx: &Receiver<Event>,
    ) -> Result<Verdict, CheckError> {
        let ctx = self.ctx;
        let setup = |e: rquickjs::Error| {
            let failure = match values::failure(ctx, e, Phase::Run, self.limits) {
                memory @ CheckError::MemoryLimit { .. } => memory,
                other => CheckError::Engine {
                    message: format!("could not set up the sandbox: {other}"),
                },
            };
            self.stopped().unwrap_or(failure)
        };

        let now_iso = self.prelude(identity, now_unix_ms).map_err(setup)?;
        let ctx_object =
            calls::ctx_object(ctx, self.calls, identity, now_unix_ms, &now_iso).map_err(setup)?;
        let argument = Object::new(ctx.clone()).map_err(setup)?;
        argument.set("ctx", ctx_object.clone()).map_err(setup)?;
        let freeze: Function = ctx
            .globals()
            .get::<_, Object>("Object")
            .and_then(|object| object.get("freeze"))
            .map_err(setup)?;
        freeze.call::<_, Value>((ctx_object,)).map_err(setup)?;
        freeze
            .call::<_, Value>((argument.clone(),))
            .map_err(setup)?;

        let mut options = EvalOptions::default();
        options.filename = Some("condition.js".into());
        let program: Value = ctx
            .eval_with_options(format!("(\n{source}\n)"), options)
            .map_err(|e| self.fail(e, Phase::Compile))?;
        let Some(function) = program.as_function() else {
            return Err(self.stopped().unwrap_or(CheckError::NotAFunction {
                found: values::kind(&program).to_owned(),
            }));
        };

        let returned: Value = function
            .call((argument,))
            .map_err(|e| self.fail(e, Phase::Run))?;
        let settled = match returned.as_promise() {
            Some(promise) => self.drive(promise, rx)?,
            None => returned,
        };
        if let Some(stop) = self.stopped() {
            return Err(stop);
        }
        let verdict = values::verdict(ctx, settled, self.limits);
        // Reading the return may run program code (getters, toJSON) that hit a limit.
        match self.stopped() {
            Some(stop) => Err(stop),
            None => verdict,
        }
    }

    /// Installs the replaced `Date` and `Math.random` and the guarded builtins; returns `now`
    /// as ISO-8601.
    fn prelude(&self, identity: &Identity, now_unix_ms: u64) -> rquickjs::Result<String> {
        let ctx = self.ctx;
        let (install, guard) = bytecode::functions(ctx)?;
        let now_iso = install.call((now_unix_ms as f64, seed(identity, now_unix_ms)))?;

        let stop = self.stop.clone();
        let checkpoint = Function::new(ctx.clone(), move |ctx: Ctx<'js>| {
            if stop.interrupt() {
                Err(Exception::throw_internal(&ctx, "the check is stopping"))
            } else {
                Ok(())
            }
        })?;
        let is_proxy = Function::new(ctx.clone(), |value: Value<'js>| value.is_proxy())?;
        // No dense array of more elements fits in the heap (each takes at least 8 bytes).
        let max_length = match self.limits.memory_bytes {
            0 => 1 << 24,
            bytes => (bytes / 8).max(1 << 10),
        };
        let wrap_builtins = native::builtins_wrapper(ctx, &checkpoint)?;
        guard.call::<_, ()>((checkpoint, is_proxy, max_length as f64, wrap_builtins))?;
        Ok(now_iso)
    }

    /// Runs jobs and settles host calls until the program's promise settles.
    fn drive(
        &self,
        promise: &Promise<'js>,
        rx: &Receiver<Event>,
    ) -> Result<Value<'js>, CheckError> {
        loop {
            loop {
                if let Some(stop) = self.stopped() {
                    return Err(stop);
                }
                if !self.ctx.execute_pending_job() {
                    break;
                }
            }
            match promise.state() {
                PromiseState::Resolved => {
                    return promise
                        .result::<Value>()
                        .unwrap_or(Err(rquickjs::Error::Unknown))
                        .map_err(|e| self.fail(e, Phase::Run));
                }
                PromiseState::Rejected => {
                    let error = match promise.result::<Value>() {
                        Some(Err(e)) => e,
                        _ => rquickjs::Error::Unknown,
                    };
                    return Err(self.fail(error, Phase::Run));
                }
                PromiseState::Pending => {}
            }
            if self.calls.in_flight() == 0 {
                return Err(CheckError::Stalled);
            }
            let event = match self.stop.deadline {
                Some(deadline) => {
                    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                }
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Done { id, outcome }) => {
                    if let Err(error) = self.calls.complete(self.ctx, id, outcome) {
                        return Err(self.stopped().unwrap_or(error));
                    }
                }
                // The top of the loop reports it.
                Ok(Event::Cancelled) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.stopped().unwrap_or_else(|| self.deadline()));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CheckError::Engine {
                        message: "the ctx call channel closed".into(),
                    });
                }
            }
        }
    }
}

/// `Math.random`'s seed: FNV-1a of the wait id and `now`, so one check's randomness is fixed
/// by its inputs and reveals no clock.
fn seed(identity: &Identity, now_unix_ms: u64) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in identity
        .wait_id
        .as_bytes()
        .iter()
        .chain(&now_unix_ms.to_le_bytes())
    {
        hash = (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193);
    }
    i32::from_ne_bytes(hash.to_ne_bytes())
}
