//! `ctx` and its calls: the only way a condition reaches the machine.
//!
//! Owns the `ctx` object, the call limits (count, concurrency, size), the threads that run
//! host calls and the promises they settle. Must never block the engine thread on a host call
//! and must never leave a host thread running once [`Calls::shutdown`] returned.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use rquickjs::function::Rest;
use rquickjs::{Array, Ctx, Exception, Function, Object, Value};
use serde_json::json;

use super::Stop;
use super::values::{self, Phase};
use crate::host::{
    CallError, ExecOutput, ExecRequest, FetchRequest, FetchResponse, Observation, ReadRequest,
};
use crate::{Cancel, CheckError, Host, Identity, Limits, validate};

/// A host call's completion, or the daemon's cancel, sent to the engine thread.
pub(super) enum Event {
    /// Host call `id` returned.
    Done {
        id: u64,
        outcome: Result<Response, CallError>,
    },
    /// The check's cancel was set.
    Cancelled,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Read,
    Fetch,
    Exec,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Fetch => "fetch",
            Kind::Exec => "exec",
        }
    }
}

enum Request {
    Read(ReadRequest),
    Fetch(FetchRequest),
    Exec(ExecRequest),
}

/// A host call's answer, before it becomes JSON for the program.
pub(super) enum Response {
    Read(Observation),
    Fetch(FetchResponse),
    Exec(ExecOutput),
}

impl Response {
    fn to_json(&self) -> serde_json::Value {
        match self {
            Response::Read(observation) => json!({
                "value": observation.value,
                "observedAt": observation.observed_at_unix_ms,
            }),
            Response::Fetch(response) => {
                let mut headers = serde_json::Map::new();
                for (name, value) in &response.headers {
                    let name = name.to_ascii_lowercase();
                    let joined = match headers.get(&name) {
                        Some(serde_json::Value::String(before)) => format!("{before}, {value}"),
                        _ => value.clone(),
                    };
                    headers.insert(name, joined.into());
                }
                json!({"status": response.status, "headers": headers, "body": response.body})
            }
            Response::Exec(output) => json!({
                "exitCode": output.exit_code,
                "stdout": output.stdout,
                "stderr": output.stderr,
            }),
        }
    }
}

/// The check's calls: limits, in-flight host calls and their promises.
pub(super) struct Calls<'js> {
    host: Arc<dyn Host>,
    limits: Limits,
    /// Given to every host call; set by the daemon's cancel and by [`Calls::shutdown`].
    cancel: Cancel,
    tx: Sender<Event>,
    stop: Stop,
    state: RefCell<State<'js>>,
}

struct State<'js> {
    made: u32,
    next_id: u64,
    in_flight: HashMap<u64, InFlight<'js>>,
    /// The limit the program broke, if it broke one; the check ends with it.
    fatal: Option<CheckError>,
}

struct InFlight<'js> {
    resolve: Function<'js>,
    reject: Function<'js>,
    thread: JoinHandle<()>,
}

impl<'js> Calls<'js> {
    pub(super) fn new(
        host: Arc<dyn Host>,
        limits: &Limits,
        cancel: Cancel,
        tx: Sender<Event>,
        stop: Stop,
    ) -> Self {
        Calls {
            host,
            limits: limits.clone(),
            cancel,
            tx,
            stop,
            state: RefCell::new(State {
                made: 0,
                next_id: 0,
                in_flight: HashMap::new(),
                fatal: None,
            }),
        }
    }

    /// Host calls not yet completed (their completion may be waiting in the channel).
    pub(super) fn in_flight(&self) -> usize {
        self.state.borrow().in_flight.len()
    }

    /// The limit the program broke, if any.
    pub(super) fn fatal(&self) -> Option<CheckError> {
        self.state.borrow().fatal.clone()
    }

    /// Ends the check's calls: cancels the host calls still running, joins their threads and
    /// drops their promise functions. Returns only when no host call of this check runs.
    pub(super) fn shutdown(&self) {
        self.cancel.cancel();
        let in_flight = std::mem::take(&mut self.state.borrow_mut().in_flight);
        for (_, call) in in_flight {
            let _ = call.thread.join();
        }
    }

    /// Settles the promise of host call `id` with its outcome.
    pub(super) fn complete(
        &self,
        ctx: &Ctx<'js>,
        id: u64,
        outcome: Result<Response, CallError>,
    ) -> Result<(), CheckError> {
        let Some(call) = self.state.borrow_mut().in_flight.remove(&id) else {
            return Ok(());
        };
        // The thread sent its outcome as its last act; this join is short.
        let _ = call.thread.join();
        let settled = match outcome {
            Ok(response) => {
                let json = response.to_json().to_string();
                if json.len() > self.limits.max_call_bytes {
                    return Err(self.break_limit(CheckError::CallTooLarge {
                        what: "result",
                        limit: self.limits.max_call_bytes,
                    }));
                }
                ctx.json_parse(json)
                    .and_then(|value| call.resolve.call::<_, ()>((value,)))
            }
            Err(error) => call_error(ctx, &error).and_then(|e| call.reject.call::<_, ()>((e,))),
        };
        settled.map_err(|e| values::failure(ctx, e, Phase::Run, &self.limits))
    }

    fn break_limit(&self, error: CheckError) -> CheckError {
        let mut state = self.state.borrow_mut();
        let error = state.fatal.get_or_insert(error).clone();
        self.stop.fatal.store(true, Ordering::SeqCst);
        error
    }

    /// One `ctx.read` / `ctx.fetch` / `ctx.exec` call from the program.
    fn call(
        &self,
        ctx: &Ctx<'js>,
        kind: Kind,
        args: Vec<Value<'js>>,
    ) -> rquickjs::Result<Value<'js>> {
        {
            let mut state = self.state.borrow_mut();
            if let Some(fatal) = &state.fatal {
                let message = fatal.to_string();
                drop(state);
                return Err(Exception::throw_internal(ctx, &message));
            }
            state.made = state.made.saturating_add(1);
            let broken = if state.made > self.limits.max_calls {
                Some(CheckError::CallLimit {
                    limit: self.limits.max_calls,
                })
            } else if state.in_flight.len() >= self.limits.max_concurrent as usize {
                Some(CheckError::ConcurrencyLimit {
                    limit: self.limits.max_concurrent,
                })
            } else {
                None
            };
            drop(state);
            if let Some(broken) = broken {
                let message = self.break_limit(broken).to_string();
                return Err(Exception::throw_internal(ctx, &message));
            }
        }

        let (promise, resolve, reject) = ctx.promise()?;
        let request = match self.arguments(ctx, kind, args)? {
            Ok(request) => request,
            Err(error) => {
                reject.call::<_, ()>((call_error(ctx, &error)?,))?;
                return Ok(promise.into_value());
            }
        };

        // Checked again: the arguments' toJSON may have made calls of its own.
        if self.in_flight() >= self.limits.max_concurrent as usize {
            let message = self
                .break_limit(CheckError::ConcurrencyLimit {
                    limit: self.limits.max_concurrent,
                })
                .to_string();
            return Err(Exception::throw_internal(ctx, &message));
        }
        let id = {
            let mut state = self.state.borrow_mut();
            state.next_id += 1;
            state.next_id
        };
        let host = self.host.clone();
        let cancel = self.cancel.clone();
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("condition-ctx-{}", kind.name()))
            .spawn(move || {
                let outcome = catch_unwind(AssertUnwindSafe(|| run(&*host, request, &cancel)))
                    .unwrap_or_else(|_| {
                        Err(CallError::new(
                            CallError::HOST_PANICKED,
                            "the host panicked while answering the call",
                        ))
                    });
                let _ = tx.send(Event::Done { id, outcome });
            });
        let thread = match spawned {
            Ok(thread) => thread,
            Err(e) => {
                let message = self
                    .break_limit(CheckError::Engine {
                        message: format!("could not start a thread for a ctx call: {e}"),
                    })
                    .to_string();
                return Err(Exception::throw_internal(ctx, &message));
            }
        };
        self.state.borrow_mut().in_flight.insert(
            id,
            InFlight {
                resolve,
                reject,
                thread,
            },
        );
        Ok(promise.into_value())
    }

    /// The call's arguments as JSON, size-checked and validated. The outer `Err` is a JS
    /// exception to propagate; the inner one a refusal to reject the call's promise with.
    fn arguments(
        &self,
        ctx: &Ctx<'js>,
        kind: Kind,
        args: Vec<Value<'js>>,
    ) -> rquickjs::Result<Result<Request, CallError>> {
        let array = Array::new(ctx.clone())?;
        for (i, arg) in args.into_iter().enumerate() {
            array.set(i, arg)?;
        }
        let json = match ctx.json_stringify(array) {
            Ok(Some(json)) => json.to_string()?,
            Ok(None) => "[]".to_owned(),
            Err(rquickjs::Error::Exception) => {
                let thrown = ctx.catch();
                if self.stop.interrupt() || values::is_resource_error(&thrown) {
                    return Err(ctx.throw(thrown));
                }
                let message = values::describe(ctx, &thrown).message;
                return Ok(Err(CallError::new(
                    CallError::INVALID_PARAMS,
                    format!("{}'s arguments are not JSON: {message}", kind.name()),
                )));
            }
            Err(e) => return Err(e),
        };
        if json.len() > self.limits.max_call_bytes {
            let message = self
                .break_limit(CheckError::CallTooLarge {
                    what: "argument",
                    limit: self.limits.max_call_bytes,
                })
                .to_string();
            return Err(Exception::throw_internal(ctx, &message));
        }
        let args: Vec<serde_json::Value> = match serde_json::from_str(&json) {
            Ok(args) => args,
            Err(e) => {
                return Ok(Err(CallError::new(
                    CallError::INVALID_PARAMS,
                    format!("{}'s arguments are not usable JSON: {e}", kind.name()),
                )));
            }
        };
        Ok(match kind {
            Kind::Read => validate::read(&args).map(Request::Read),
            Kind::Fetch => validate::fetch(&args, self.limits.max_fetch_body).map(Request::Fetch),
            Kind::Exec => validate::exec(&args).map(Request::Exec),
        })
    }
}

fn run(host: &dyn Host, request: Request, cancel: &Cancel) -> Result<Response, CallError> {
    match request {
        Request::Read(req) => host.read(req, cancel).map(Response::Read),
        Request::Fetch(req) => host.fetch(req, cancel).map(Response::Fetch),
        Request::Exec(req) => host.exec(req, cancel).map(Response::Exec),
    }
}

/// A JS `Error` with `.code`, made from the engine's own intrinsic (never the program's
/// `globalThis.Error`).
fn call_error<'js>(ctx: &Ctx<'js>, error: &CallError) -> rquickjs::Result<Value<'js>> {
    let exception = Exception::from_message(ctx.clone(), &error.message)?;
    exception.as_object().set("code", error.code.as_str())?;
    Ok(exception.into_value())
}

/// The `ctx` the program gets: its identity, `now`, `nowIso` and the three calls. Frozen.
pub(super) fn ctx_object<'js>(
    ctx: &Ctx<'js>,
    calls: &Rc<Calls<'js>>,
    identity: &Identity,
    now_unix_ms: u64,
    now_iso: &str,
) -> rquickjs::Result<Object<'js>> {
    let object = Object::new(ctx.clone())?;
    object.set("waitId", identity.wait_id.as_str())?;
    object.set("contextId", identity.context_id.as_str())?;
    object.set("requester", identity.requester.as_str())?;
    object.set("now", now_unix_ms as f64)?;
    object.set("nowIso", now_iso)?;
    for kind in [Kind::Read, Kind::Fetch, Kind::Exec] {
        let calls = calls.clone();
        let function = Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, Rest(args): Rest<Value<'js>>| calls.call(&ctx, kind, args),
        )?
        .with_name(kind.name())?;
        object.set(kind.name(), function)?;
    }
    Ok(object)
}
