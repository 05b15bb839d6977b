//! outpost's condition-wait engine: one sandboxed evaluation (a *check*) of a wait's condition.
//!
//! A condition is a JavaScript program whose source is an expression evaluating to a function,
//! `async ({ ctx }) => false | { resumeText, payload? }` (SPEC "Condition waits"). [`check`]
//! runs it once in an embedded QuickJS (the `rquickjs` crate) and returns a [`Verdict`] or a
//! [`CheckError`]. Scheduling the checks, counting consecutive errors and committing a match
//! are the daemon's; this crate owns one check and must never do I/O of its own: every effect
//! goes through the [`Host`] the daemon passes in.
//!
//! # Usage
//!
//! ```
//! # use std::sync::Arc;
//! # use outpost_condition::*;
//! struct NoMachine;
//! impl Host for NoMachine {
//!     fn read(&self, _: ReadRequest, _: &Cancel) -> Result<Observation, CallError> {
//!         Ok(Observation { value: serde_json::json!([]), observed_at_unix_ms: 0 })
//!     }
//!     fn fetch(&self, _: FetchRequest, _: &Cancel) -> Result<FetchResponse, CallError> {
//!         Err(CallError::new("fetch_unavailable", "no network here"))
//!     }
//!     fn exec(&self, _: ExecRequest, _: &Cancel) -> Result<ExecOutput, CallError> {
//!         Err(CallError::new("exec_not_allowed", "host commands are off"))
//!     }
//! }
//! let source = "async ({ ctx }) => {
//!     const { value } = await ctx.read('runs');
//!     return value.length === 0 ? { resumeText: 'all runs ended' } : false;
//! }";
//! let verdict = check(source, &Identity::default(), 1_767_225_600_000, Arc::new(NoMachine),
//!     &Limits::default(), &Cancel::new());
//! assert_eq!(verdict, Ok(Verdict::Matched { resume_text: "all runs ended".into(), payload: None }));
//! ```
//!
//! # What the program sees
//!
//! The function's one argument is `{ ctx }`, frozen, with:
//! - `ctx.waitId`, `ctx.contextId`, `ctx.requester`: the [`Identity`] strings;
//! - `ctx.now`: the check's time in milliseconds since the Unix epoch (a number), and
//!   `ctx.nowIso`: the same as an ISO-8601 UTC string (`2026-01-01T00:00:00.000Z`);
//! - `ctx.read(resource, params?)` → `{ value, observedAt }` (`observedAt` in ms since the
//!   epoch), resources `runs`, `services`, `files` (`{path, read?}`) and `events`
//!   (`{since?, limit?}`, limit 1–100, default 100);
//! - `ctx.fetch(url, {method?, headers?})` → `{ status, headers, body }`: http(s) only, no URL
//!   credentials, GET or HEAD, only `accept` / `accept-language`, no redirects followed, body at
//!   most [`Limits::max_fetch_body`] bytes;
//! - `ctx.exec({command, args?, cwd?})` → `{ exitCode, stdout, stderr }`, never through a shell.
//!
//! Every call returns a promise; calls run on their own threads, so
//! `Promise.all([ctx.read('runs'), ctx.read('services')])` runs both at once. A refused or
//! failed call rejects with an `Error` whose `.code` is the [`CallError`] code.
//!
//! # The sandbox
//!
//! No Node, no `console`, no timers, no module loader (`import()` rejects), no `Proxy`, no I/O.
//! `Error.prepareStackTrace` is fixed to `undefined`: QuickJS would pass it call sites whose
//! `getFunction()` hands out every function on the stack, the originals the guard wraps and
//! the real `Date` among them.
//! The only clock is the check's `now`: `Date.now()`, `new Date()` and `Date()` give it (a
//! `Date` built from arguments works as usual), `performance` does not exist and `Math.random`
//! is seeded from the wait id and `now`. Limits ([`Limits`]) are enforced by the engine, not
//! by the program: once one is broken the check fails with its error whatever the program
//! catches.
//!
//! # How hard the deadline is
//!
//! QuickJS asks its interrupt handler (deadline, cancel) only every 10 000 backward jumps or
//! calls, and many of its builtins loop natively without asking. The engine therefore wraps the
//! builtins whose cost grows with their input (`WRAPPED` in `engine/native.rs`): each checks
//! for a stop first, and the generic Array methods refuse lengths that no dense array fits in
//! [`Limits::memory_bytes`] (only sparse arrays and array-likes are that long, and walking
//! their holes natively would never be interrupted). `Iterator.prototype.drop`, whose native
//! version skips its count in one call without asking (billions of steps, from an array
//! iterator over a length raised after it was made), and `Array.prototype.flat` / `flatMap`
//! are replaced by versions written in JavaScript, whose loops ask like any other. Every
//! other native builtin a condition can reach is listed in `engine/unwrapped.tsv` with the
//! reason it needs no wrapper (constant cost, a loop that asks, or no more than an operator
//! costs), and a test fails on any builtin in neither list.
//!
//! What remains is work one call or operator does natively before the next check:
//! - operators, which cannot be wrapped (a loop of arithmetic on near-maximum BigInts, 1 Mbit,
//!   or of comparisons of multi-megabyte strings may run up to 10 000 such operations past the
//!   deadline or a cancel);
//! - wrapped builtins whose one call is long on the largest inputs a program can build:
//!   `String.prototype.indexOf` and its kin compare in time that grows with the product of
//!   the two strings' lengths; `Array.prototype.includes` / `indexOf` compare long strings
//!   element by element; `Map` and `Set` hash a key string whole (a rope of 2^30 characters
//!   takes most of a second in a small heap); `Math.max`, `min` and `hypot` convert every
//!   argument natively (each may be a numeric string of megabytes); the `Set` methods that
//!   take a set-like, `Iterator.prototype.includes` / `join` and `Math.sumPrecise` step a
//!   builtin iterator natively, without asking (seconds to minutes, not forever);
//! - the builtins `unwrapped.tsv` marks `open`: the compiler (`eval`, `Function`), the
//!   `RegExp` constructor (its compiling is quadratic in some patterns), the typed array,
//!   `ArrayBuffer` and `AggregateError` constructors (they copy an array-like natively,
//!   converting each element) and the `RegExp.prototype.source` getter.
//!
//! A daemon that needs a hard bound must run checks in a process it can kill.
//!
//! # Panics, errors and unwraps
//!
//! Nothing here panics on any source, return value or host answer; a panic would be a bug. A
//! panicking [`Host`] method rejects its call with [`CallError::HOST_PANICKED`].
// Two places may use `unsafe`: the loading of the sandbox's own bytecode, which this crate
// compiled itself (`engine/bytecode.rs` says why that is sound), and the guard's native
// wrappers (`engine/native.rs`), which call QuickJS's C API directly.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod cancel;
mod engine;
mod error;
mod host;
mod limits;
mod validate;

use std::sync::Arc;

pub use cancel::Cancel;
pub use error::CheckError;
pub use host::{
    CallError, ExecOutput, ExecRequest, FetchMethod, FetchRequest, FetchResponse, Host,
    Observation, ReadRequest,
};
pub use limits::{Identity, Limits};

/// What isolation alone costs a check: a new QuickJS runtime, with the memory limit of
/// `limits`, and a context with the intrinsics a condition gets, made and dropped with
/// nothing run in them. No check costs less while each gets a heap of its own; benchmarks
/// measure [`check`] against it.
pub fn fresh_sandbox_only(limits: &Limits) -> Result<(), CheckError> {
    engine::fresh_sandbox_only(limits)
}

/// What one check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The program returned `false`: check again later.
    NotYet,
    /// The program returned `{ resumeText, payload? }`: the wait matched.
    Matched {
        /// `resumeText`, at most [`Limits::max_payload_bytes`] bytes.
        resume_text: String,
        /// `payload` as JSON (at most [`Limits::max_payload_bytes`] serialized); `None` when it
        /// was absent or `undefined`.
        payload: Option<serde_json::Value>,
    },
}

/// Evaluates the condition `source` once, at wall time `now_unix_ms` (ms since the Unix epoch:
/// the only time the program sees), with `host` answering its `ctx` calls.
///
/// Blocks the calling thread until the program's promise settles, a limit is broken, the
/// deadline passes or `cancel` is set (from any thread). Whatever the outcome, `check` first
/// cancels the host calls still in flight and joins their threads: when it returns, nothing
/// of the check is still running. So a daemon that sets `cancel` and then waits for `check`
/// to return knows the check has stopped, its cleanup included.
///
/// The calling thread needs [`Limits::max_stack_bytes`] of stack plus some 256 KiB.
pub fn check(
    source: &str,
    identity: &Identity,
    now_unix_ms: u64,
    host: Arc<dyn Host>,
    limits: &Limits,
    cancel: &Cancel,
) -> Result<Verdict, CheckError> {
    engine::run(source, identity, now_unix_ms, host, limits, cancel)
}
