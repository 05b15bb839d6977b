//! One check end to end: a real `Host` in the test, the program in QuickJS.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use outpost_condition::{
    CallError, Cancel, CheckError, ExecOutput, ExecRequest, FetchMethod, FetchRequest,
    FetchResponse, Host, Identity, Limits, Observation, ReadRequest, Verdict, check,
};
use serde_json::{Value, json};

const NOW: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// How the test host answers `read`.
enum Mode {
    /// At once, with a value describing the request.
    Answer,
    /// Holds each call until `n` are in flight together (or the call is cancelled).
    Gate(usize),
    /// Holds each call until it is cancelled.
    BlockUntilCancelled,
    /// Answers with a string value of this many bytes.
    Big(usize),
    /// Fails `files` with `not_found`.
    NotFound,
    /// Panics.
    Panic,
}

struct TestHost {
    mode: Mode,
    reads: AtomicUsize,
    fetches: Mutex<Vec<FetchRequest>>,
    execs: Mutex<Vec<ExecRequest>>,
    in_flight: Mutex<usize>,
    changed: Condvar,
    max_in_flight: AtomicUsize,
    /// Told when a blocking call has started.
    entered: Mutex<Option<Sender<()>>>,
    /// Blocking calls that returned.
    finished: AtomicUsize,
}

impl TestHost {
    fn new(mode: Mode) -> Arc<Self> {
        Arc::new(TestHost {
            mode,
            reads: AtomicUsize::new(0),
            fetches: Mutex::new(Vec::new()),
            execs: Mutex::new(Vec::new()),
            in_flight: Mutex::new(0),
            changed: Condvar::new(),
            max_in_flight: AtomicUsize::new(0),
            entered: Mutex::new(None),
            finished: AtomicUsize::new(0),
        })
    }

    /// A host whose blocking calls report on the returned channel when they start.
    fn blocking() -> (Arc<Self>, Receiver<()>) {
        let host = Self::new(Mode::BlockUntilCancelled);
        let (tx, rx) = mpsc::channel();
        *host.entered.lock().unwrap() = Some(tx);
        (host, rx)
    }

    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    fn gate(&self, n: usize, cancel: &Cancel) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *in_flight += 1;
        self.max_in_flight.fetch_max(*in_flight, Ordering::SeqCst);
        self.changed.notify_all();
        // Waits for the others; the timeout only lets a cancel (which has no way to notify
        // this condvar) be seen.
        while *in_flight < n && self.max_in_flight.load(Ordering::SeqCst) < n {
            if cancel.is_cancelled() {
                break;
            }
            in_flight = self
                .changed
                .wait_timeout(in_flight, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *in_flight -= 1;
    }
}

impl Host for TestHost {
    fn read(&self, req: ReadRequest, cancel: &Cancel) -> Result<Observation, CallError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let value = match (&self.mode, &req) {
            (Mode::Gate(n), _) => {
                self.gate(*n, cancel);
                json!("through the gate")
            }
            (Mode::BlockUntilCancelled, _) => {
                if let Some(tx) = &*self.entered.lock().unwrap() {
                    tx.send(()).unwrap();
                }
                cancel.wait();
                self.finished.fetch_add(1, Ordering::SeqCst);
                return Err(CallError::new("cancelled", "the call was cancelled"));
            }
            (Mode::Big(n), _) => json!("x".repeat(*n)),
            (Mode::NotFound, ReadRequest::Files { path, .. }) => {
                return Err(CallError::new(
                    "not_found",
                    format!("{path} does not exist"),
                ));
            }
            (Mode::Panic, _) => panic!("the test host panics on purpose"),
            (_, ReadRequest::Runs) => json!([{"id": "run-1", "state": "running"}]),
            (_, ReadRequest::Services) => json!(["web"]),
            (_, ReadRequest::Files { path, read }) => json!({"path": path, "read": read}),
            (_, ReadRequest::Events { since, limit }) => json!({"since": since, "limit": limit}),
        };
        Ok(Observation {
            value,
            observed_at_unix_ms: NOW - 5,
        })
    }

    fn fetch(&self, req: FetchRequest, _: &Cancel) -> Result<FetchResponse, CallError> {
        self.fetches.lock().unwrap().push(req);
        Ok(FetchResponse {
            status: 302,
            headers: vec![
                ("Location".into(), "https://elsewhere.example/".into()),
                ("Set-Cookie".into(), "a=1".into()),
                ("set-cookie".into(), "b=2".into()),
            ],
            body: "moved".into(),
        })
    }

    fn exec(&self, req: ExecRequest, _: &Cancel) -> Result<ExecOutput, CallError> {
        self.execs.lock().unwrap().push(req);
        Ok(ExecOutput {
            exit_code: Some(3),
            stdout: "out".into(),
            stderr: "err".into(),
        })
    }
}

fn identity() -> Identity {
    Identity {
        wait_id: "wait-1".into(),
        context_id: "ctx-1".into(),
        requester: "alice".into(),
    }
}

fn run_with(source: &str, host: Arc<TestHost>, limits: &Limits) -> Result<Verdict, CheckError> {
    check(source, &identity(), NOW, host, limits, &Cancel::new())
}

fn run(source: &str) -> Result<Verdict, CheckError> {
    run_with(source, TestHost::new(Mode::Answer), &Limits::default())
}

/// The payload of a match, or a panic naming what came back instead.
fn payload(result: Result<Verdict, CheckError>) -> Value {
    match result {
        Ok(Verdict::Matched {
            payload: Some(payload),
            ..
        }) => payload,
        other => panic!("expected a match with a payload, got {other:?}"),
    }
}

/// A source that reports the code and message of what `expr` rejects with.
fn rejection_of(expr: &str) -> String {
    format!(
        "async ({{ ctx }}) => {{
            try {{ await {expr}; return {{ resumeText: 'resolved' }}; }}
            catch (e) {{ return {{ resumeText: 'rejected', payload: {{ code: e.code, message: e.message }} }}; }}
        }}"
    )
}

fn short_deadline() -> Limits {
    Limits {
        deadline: Duration::from_millis(300),
        ..Limits::default()
    }
}

#[test]
fn false_is_not_yet() {
    assert_eq!(run("async () => false"), Ok(Verdict::NotYet));
    assert_eq!(
        run("() => false"),
        Ok(Verdict::NotYet),
        "a plain function works too"
    );
}

#[test]
fn a_match_carries_resume_text_and_payload() {
    let result = run("async ({ ctx }) => {
            const runs = await ctx.read('runs');
            return { resumeText: 'run ended', payload: { runs: runs.value, at: runs.observedAt } };
        }");
    assert_eq!(
        result,
        Ok(Verdict::Matched {
            resume_text: "run ended".into(),
            payload: Some(json!({"runs": [{"id": "run-1", "state": "running"}], "at": NOW - 5})),
        })
    );
    assert_eq!(
        run("async () => ({ resumeText: '' })"),
        Ok(Verdict::Matched {
            resume_text: String::new(),
            payload: None
        })
    );
}

#[test]
fn ctx_shows_identity_and_now() {
    let got = payload(run("async ({ ctx }) => ({ resumeText: 'x', payload: {
            waitId: ctx.waitId, contextId: ctx.contextId, requester: ctx.requester,
            now: ctx.now, nowIso: ctx.nowIso, frozen: Object.isFrozen(ctx),
        } })"));
    assert_eq!(
        got,
        json!({
            "waitId": "wait-1", "contextId": "ctx-1", "requester": "alice",
            "now": NOW, "nowIso": "2026-01-01T00:00:00.000Z", "frozen": true,
        })
    );
}

#[test]
fn the_only_clock_is_the_checks_now() {
    let got = payload(run("async ({ ctx }) => ({ resumeText: 'x', payload: {
            dateNow: Date.now(),
            newDate: new Date().getTime(),
            iso: new Date().toISOString(),
            fromArgs: new Date(0).toISOString(),
            fromParts: new Date(Date.UTC(2020, 1, 3)).toISOString(),
            called: Date() === new Date().toString(),
            instance: new Date() instanceof Date,
            ctor: Object.getPrototypeOf(new Date()).constructor === Date,
            performance: typeof performance,
            random: Math.random(),
        } })"));
    assert_eq!(got["dateNow"], json!(NOW));
    assert_eq!(got["newDate"], json!(NOW));
    assert_eq!(got["iso"], json!("2026-01-01T00:00:00.000Z"));
    assert_eq!(got["fromArgs"], json!("1970-01-01T00:00:00.000Z"));
    assert_eq!(got["fromParts"], json!("2020-02-03T00:00:00.000Z"));
    assert_eq!(got["called"], json!(true));
    assert_eq!(got["instance"], json!(true));
    assert_eq!(got["ctor"], json!(true), "the real Date is not reachable");
    assert_eq!(got["performance"], json!("undefined"));
    let again = payload(run(
        "async () => ({ resumeText: 'x', payload: { random: Math.random() } })",
    ));
    assert_eq!(
        got["random"], again["random"],
        "Math.random is seeded by the check, not the time of day"
    );
}

#[test]
fn there_is_no_module_loading_no_timers_and_no_console() {
    let got = payload(run(&rejection_of("import('x')")));
    assert_eq!(
        got["message"].as_str().map(|m| m.contains('x')),
        Some(true),
        "{got}"
    );
    assert!(matches!(
        run("async () => { await import('node:fs'); return false; }"),
        Err(CheckError::Threw { .. })
    ));
    let got = payload(run(
        "async () => ({ resumeText: 'x', payload: [typeof setTimeout, typeof console, typeof require, typeof process] })",
    ));
    assert_eq!(
        got,
        json!(["undefined", "undefined", "undefined", "undefined"])
    );
    // The sandbox's own module is loaded in every context under its name: importing it
    // finds nothing to call, so the prelude and the guard cannot be run again.
    let got = payload(run(
        "async () => { const m = await import('outpost:sandbox'); \
         return { resumeText: 'x', payload: [typeof m.prelude, typeof m.guard, Date.now()] }; }",
    ));
    assert_eq!(got, json!(["undefined", "undefined", NOW]));
}

#[test]
fn thirty_two_calls_succeed_and_the_thirty_third_fails() {
    let host = TestHost::new(Mode::Answer);
    let result = run_with(
        "async ({ ctx }) => {
            for (let i = 0; i < 32; i++) await ctx.read('runs');
            return { resumeText: 'done' };
        }",
        host.clone(),
        &Limits::default(),
    );
    assert!(matches!(result, Ok(Verdict::Matched { .. })), "{result:?}");
    assert_eq!(host.reads(), 32);

    let host = TestHost::new(Mode::Answer);
    let err = run_with(
        "async ({ ctx }) => {
            for (let i = 0; i < 33; i++) { try { await ctx.read('runs'); } catch (e) {} }
            return { resumeText: 'the program caught the limit' };
        }",
        host.clone(),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(err, CheckError::CallLimit { limit: 32 });
    assert_eq!(err.code(), "ctx_call_limit");
    assert!(err.to_string().contains("more than 32 ctx calls"), "{err}");
    assert_eq!(host.reads(), 32, "the 33rd call never reached the host");
}

#[test]
fn four_calls_run_at_once() {
    let host = TestHost::new(Mode::Gate(4));
    let result = run_with(
        "async ({ ctx }) => {
            const all = await Promise.all([1, 2, 3, 4].map(() => ctx.read('runs')));
            return { resumeText: 'x', payload: all.map(r => r.value) };
        }",
        host.clone(),
        &Limits::default(),
    );
    assert_eq!(
        payload(result),
        json!([
            "through the gate",
            "through the gate",
            "through the gate",
            "through the gate"
        ])
    );
    assert_eq!(
        host.max_in_flight.load(Ordering::SeqCst),
        4,
        "the host saw four calls in flight at once"
    );
}

#[test]
fn a_fifth_concurrent_call_fails_the_check() {
    let (host, _entered) = TestHost::blocking();
    let err = run_with(
        "async ({ ctx }) => {
            await Promise.all([1, 2, 3, 4, 5].map(() => ctx.read('runs').catch(() => null)));
            return { resumeText: 'x' };
        }",
        host.clone(),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(err, CheckError::ConcurrencyLimit { limit: 4 });
    assert_eq!(err.code(), "ctx_concurrency_limit");
    assert_eq!(host.reads(), 4);
    assert_eq!(
        host.finished.load(Ordering::SeqCst),
        4,
        "the four in flight were cancelled and joined"
    );
}

#[test]
fn an_oversized_result_or_argument_fails_the_check() {
    let err = run_with(
        "async ({ ctx }) => { try { await ctx.read('runs'); } catch (e) {} return false; }",
        TestHost::new(Mode::Big(200 * 1024)),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        CheckError::CallTooLarge {
            what: "result",
            limit: 128 * 1024
        }
    );
    assert_eq!(err.code(), "ctx_call_too_large");

    let host = TestHost::new(Mode::Answer);
    let err = run_with(
        "async ({ ctx }) => { await ctx.read('files', { path: 'x'.repeat(200000) }); return false; }",
        host.clone(),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        CheckError::CallTooLarge {
            what: "argument",
            limit: 128 * 1024
        }
    );
    assert_eq!(host.reads(), 0);
}

#[test]
fn an_endless_loop_stops_at_the_deadline() {
    let started = Instant::now();
    let err = run_with(
        "async () => { while (true) {} }",
        TestHost::new(Mode::Answer),
        &short_deadline(),
    )
    .unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        err,
        CheckError::DeadlineExceeded {
            limit: Duration::from_millis(300)
        }
    );
    assert_eq!(err.code(), "check_deadline");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");

    let err = run_with(
        "async () => { for (;;) { try { while (true) {} } catch (e) {} } }",
        TestHost::new(Mode::Answer),
        &short_deadline(),
    )
    .unwrap_err();
    assert_eq!(
        err.code(),
        "check_deadline",
        "the interrupt cannot be caught"
    );
}

#[test]
fn loops_over_expensive_builtins_stop_at_the_deadline() {
    for source in [
        "async () => { const a = new Uint8Array(1 << 20); for (;;) a.sort(); }",
        "async () => { const s = 'ab'.repeat(1 << 22); for (;;) s.indexOf('zz'); }",
        "async () => { for (;;) { try { 'ab'.repeat(1 << 20).indexOf('z'); } catch (e) {} } }",
        "async () => /(a+)+$/.test('a'.repeat(40) + 'b')",
        "async () => { const x = { a: 'x'.repeat(1 << 20) }; for (;;) JSON.stringify(x); }",
        "async () => [new Array(2 ** 32 - 1)].flat()",
        "async () => [1].flatMap(() => new Array(2 ** 32 - 1))",
    ] {
        let started = Instant::now();
        let err = run_with(source, TestHost::new(Mode::Answer), &short_deadline()).unwrap_err();
        assert_eq!(err.code(), "check_deadline", "{source}: {err:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{source}");
    }
}

#[test]
fn builtins_that_would_walk_huge_sparse_lengths_natively_refuse() {
    for (source, needle) in [
        (
            "async () => Array.prototype.reverse.call({ length: 2 ** 53 - 1 })",
            "over the condition sandbox's 2097152",
        ),
        (
            "async () => new Array(2 ** 32 - 1).join()",
            "length 4294967295",
        ),
        (
            "async () => '' + new Array(2 ** 32 - 1)",
            "length 4294967295",
        ),
        (
            "async () => Array.prototype.sort.call(Object.create({ length: 2 ** 53 - 1 }))",
            "over the condition",
        ),
        (
            "async () => [].concat({ length: 2 ** 53 - 1, [Symbol.isConcatSpreadable]: true })",
            "an argument has length",
        ),
        (
            "async () => { let n = 0; return Array.prototype.copyWithin.call({ get length() { return n++ ? 2 ** 53 - 1 : 0; } }, 1); }",
            "getter for length",
        ),
        (
            "async () => { let n = 0; return Array.prototype.unshift.call({ length: { valueOf() { return n++ ? 2 ** 53 - 1 : 0; } } }, 1); }",
            "not a number",
        ),
    ] {
        match run(source) {
            Err(CheckError::Threw { message, .. }) => {
                assert!(message.contains(needle), "{source}: {message}");
            }
            other => panic!("{source}: {other:?}"),
        }
    }
    let got = payload(run("async () => ({ resumeText: 'x', payload: [
            [[1, [2]], [3]].flat(Infinity).concat([4].flatMap((x) => [x, x * 2])).join(),
            [3, 1, 2].sort().map((x) => x * 2).filter(Boolean).reverse().toString(),
            Array.prototype.reverse.call(new Uint8Array([1, 2, 3])).join(),
            Array.prototype.slice.call({ length: 2, 0: 'a', 1: 'b' }).join(''),
            [].reverse.name + [].reverse.length,
        ] })"));
    assert_eq!(
        got,
        json!(["1,2,3,4,8", "6,4,2", "3,2,1", "ab", "reverse0"])
    );
}

#[test]
fn wrapped_builtins_look_and_behave_as_the_originals() {
    let got = payload(run("async () => { \
        const map = [].map; \
        const d = Object.getOwnPropertyDescriptor(Array.prototype, 'map'); \
        let notConstructor = ''; try { new map(() => 0); } catch (e) { notConstructor = e.name; } \
        let thrown = ''; try { 'x'.repeat(-1); } catch (e) { thrown = e.name; } \
        return { resumeText: 'x', payload: [ \
          map.name, map.length, 'prototype' in map, notConstructor, \
          [d.writable, d.enumerable, d.configurable].join(), \
          Function.prototype.toString.call(map).includes('[native code]'), \
          [1, 2, 3].splice(1).join(), [1, 2, 3].splice(1, undefined).join(), \
          String.prototype.padStart.call(7, 3, '0'), \
          [1, 2, 3].map(function (x) { return x * this.k; }, { k: 2 }).join(), \
          thrown, [][Symbol.iterator].name, 'a-b'.split('-').length, \
          Object.keys({ a: 1, b: 2 }).join(), JSON.stringify({ a: [1] }), \
        ] }; }"));
    assert_eq!(
        got,
        json!([
            "map",
            1,
            false,
            "TypeError",
            "true,false,true",
            true,
            "2,3",
            "",
            "007",
            "2,4,6",
            "RangeError",
            "values",
            2,
            "a,b",
            "{\"a\":[1]}"
        ])
    );
}

#[test]
fn a_stack_trace_hands_the_program_no_function() {
    // With `Error.prepareStackTrace` set, QuickJS passes call sites whose `getFunction()`
    // returns each frame's function: an original builtin the guard wraps, or the prelude's
    // real `Date`, while a getter or `valueOf` of the program runs beneath it.
    let got = payload(run("async () => { \
        let raw = null, date = null; \
        try { Error.prepareStackTrace = (e, sites) => { \
            for (const s of sites) { const f = s.getFunction(); \
              if (f && f.name === 'reverse' && f !== Array.prototype.reverse) raw = f; \
              if (f && f.name === 'Date' && f !== Date) date = f; } \
            return ''; }; } catch (e) {} \
        Array.prototype.reverse.call({ length: 2, get 0() { new Error().stack; return 1; } }); \
        new Date({ valueOf() { new Error().stack; return 0; } }); \
        const d = Object.getOwnPropertyDescriptor(Error, 'prepareStackTrace'); \
        return { resumeText: 'x', payload: [raw === null, date === null, \
          typeof Error.prepareStackTrace, d.configurable, d.writable] }; }"));
    assert_eq!(got, json!([true, true, "undefined", false, false]));
}

#[test]
fn an_iterator_told_to_skip_billions_of_values_stops_at_the_deadline() {
    // `arguments` iterates with the native array iterator, which re-reads the length it may
    // be given after the iterator was made; the native `drop` skipped it all in one call.
    let limits = Limits {
        deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let verdict = run_with(
        "async () => { \
           const it = (function () { arguments.length = 2 ** 32 - 1; return arguments[Symbol.iterator](); })(); \
           it.drop(2 ** 32 - 2).next(); return false; }",
        TestHost::new(Mode::Answer),
        &limits,
    );
    assert!(
        matches!(verdict, Err(CheckError::DeadlineExceeded { .. })),
        "{verdict:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped near its deadline, not after the skipping: {:?}",
        started.elapsed()
    );
    // It still drops as `drop` does, and closes what it took over when closed early.
    let got = payload(run("async () => { \
           const dropped = [1, 2, 3, 4].values().drop(2).toArray(); \
           let closed = false; \
           const source = { i: 0, next() { return { value: this.i++, done: false }; }, return() { closed = true; return {}; } }; \
           const it = Iterator.prototype.drop.call(source, 1); \
           const first = it.next().value; it.return(); \
           let refused = ''; try { [].values().drop(-1); } catch (e) { refused = e.name; } \
           return { resumeText: 'x', payload: [dropped, first, closed, refused, [].values().drop.name, [].values().drop.length] }; }"));
    assert_eq!(got, json!([[3, 4], 1, true, "RangeError", "drop", 1]));
}

#[test]
fn the_default_limits_are_the_specs() {
    let limits = Limits::default();
    assert_eq!(limits.deadline, Duration::from_secs(30));
    assert_eq!(limits.max_calls, 32);
    assert_eq!(limits.max_concurrent, 4);
    assert_eq!(limits.max_call_bytes, 128 * 1024);
    assert_eq!(limits.max_fetch_body, 64 * 1024);
}

#[test]
fn the_deadline_stops_a_wait_on_a_host_call_and_joins_it() {
    let (host, _entered) = TestHost::blocking();
    let err = run_with(
        "async ({ ctx }) => { await ctx.read('runs'); return false; }",
        host.clone(),
        &short_deadline(),
    )
    .unwrap_err();
    assert_eq!(err.code(), "check_deadline");
    assert_eq!(host.finished.load(Ordering::SeqCst), 1);
}

#[test]
fn cancel_returns_only_after_the_host_call_returned() {
    let (host, entered) = TestHost::blocking();
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            entered.recv().unwrap();
            cancel.cancel();
        })
    };
    let result = check(
        "async ({ ctx }) => { await ctx.read('runs'); return { resumeText: 'x' }; }",
        &identity(),
        NOW,
        host.clone(),
        &Limits::default(),
        &cancel,
    );
    assert_eq!(
        host.finished.load(Ordering::SeqCst),
        1,
        "the host call's thread finished before check returned"
    );
    assert_eq!(result, Err(CheckError::Cancelled));
    assert_eq!(CheckError::Cancelled.code(), "check_cancelled");
    canceller.join().unwrap();
}

#[test]
fn cancel_interrupts_running_code() {
    let (host, entered) = TestHost::blocking();
    let cancel = Cancel::new();
    let canceller = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            entered.recv().unwrap();
            cancel.cancel();
        })
    };
    // The call tells the test the program is running; the loop never awaits it.
    let result = check(
        "async ({ ctx }) => { ctx.read('runs'); while (true) {} }",
        &identity(),
        NOW,
        host.clone(),
        &Limits::default(),
        &cancel,
    );
    assert_eq!(result, Err(CheckError::Cancelled));
    assert_eq!(host.finished.load(Ordering::SeqCst), 1);
    canceller.join().unwrap();
    assert_eq!(
        check(
            "async () => false",
            &identity(),
            NOW,
            host,
            &Limits::default(),
            &cancel
        ),
        Err(CheckError::Cancelled),
        "an already cancelled check does not start"
    );
}

#[test]
fn a_call_still_running_when_the_program_returns_is_cancelled_and_joined() {
    let (host, _entered) = TestHost::blocking();
    let result = run_with(
        "async ({ ctx }) => { ctx.read('runs').catch(() => {}); return false; }",
        host.clone(),
        &Limits::default(),
    );
    assert_eq!(result, Ok(Verdict::NotYet));
    assert_eq!(host.reads(), 1);
    assert_eq!(host.finished.load(Ordering::SeqCst), 1);
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 8 * 1024 * 1024,
        ..Limits::default()
    };
    for bomb in [
        "async () => { const a = []; while (true) a.push('x'.repeat(65536) + a.length); }",
        "async () => { let s = 'xy'; while (true) s = s.repeat(2); }",
        "async () => { const a = []; for (;;) a.push({ i: a.length }); }",
    ] {
        let err = run_with(bomb, TestHost::new(Mode::Answer), &limits).unwrap_err();
        assert_eq!(
            err,
            CheckError::MemoryLimit {
                limit: 8 * 1024 * 1024
            },
            "{bomb}"
        );
        assert_eq!(err.code(), "condition_memory");
    }
    // Documented limitation: a program that catches the error goes on, still capped.
    let caught = run_with(
        "async () => { const a = []; try { for (;;) a.push('x'.repeat(65536) + a.length); } catch (e) {} return a.length < 200 ? false : { resumeText: 'grew past the cap' }; }",
        TestHost::new(Mode::Answer),
        &limits,
    );
    assert_eq!(
        caught,
        Ok(Verdict::NotYet),
        "8 MiB holds fewer than 200 strings of 64 KiB"
    );
}

#[test]
fn deep_recursion_is_an_error_not_a_crash() {
    let err = run("async () => { const f = (n) => f(n + 1) + 1; return f(0); }").unwrap_err();
    assert_eq!(err, CheckError::StackOverflow { limit: 256 * 1024 });
    assert_eq!(err.code(), "condition_stack");
    let limits = Limits {
        max_source_bytes: 1 << 20,
        ..Limits::default()
    };
    let nested = format!(
        "async () => {}1{}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let err = run_with(&nested, TestHost::new(Mode::Answer), &limits).unwrap_err();
    assert!(
        matches!(
            err,
            CheckError::StackOverflow { .. } | CheckError::Syntax { .. }
        ),
        "deeply nested source: {err:?}"
    );
}

#[test]
fn every_fetch_rule_refuses_with_fetch_refused() {
    let host = TestHost::new(Mode::Answer);
    for (call, rule) in [
        (
            "ctx.fetch('https://example.com/', { method: 'POST' })",
            "only GET and HEAD",
        ),
        ("ctx.fetch('https://user:pw@example.com/')", "credentials"),
        ("ctx.fetch('ftp://example.com/file')", "only http and https"),
        (
            "ctx.fetch('https://example.com/', { headers: { Authorization: 'x' } })",
            "only accept and accept-language",
        ),
        (
            "ctx.fetch('https://example.com/', { headers: { accept: 1 } })",
            "must be a string",
        ),
        (
            "ctx.fetch('https://example.com/', { redirect: 'follow' })",
            "'redirect' is not allowed",
        ),
    ] {
        let got = payload(run_with(
            &rejection_of(call),
            host.clone(),
            &Limits::default(),
        ));
        assert_eq!(got["code"], json!("fetch_refused"), "{call}: {got}");
        let message = got["message"].as_str().unwrap_or_default();
        assert!(message.contains(rule), "{call}: {message}");
    }
    assert!(
        host.fetches.lock().unwrap().is_empty(),
        "no refused fetch reached the host"
    );
}

#[test]
fn an_allowed_fetch_reaches_the_host_validated() {
    let host = TestHost::new(Mode::Answer);
    let got = payload(run_with(
        "async ({ ctx }) => {
            const r = await ctx.fetch('https://Example.com/a?b=1#frag', { method: 'head', headers: { 'Accept-Language': 'en' } });
            return { resumeText: 'x', payload: r };
        }",
        host.clone(),
        &Limits::default(),
    ));
    assert_eq!(
        got,
        json!({"status": 302, "body": "moved", "headers": {
            "location": "https://elsewhere.example/", "set-cookie": "a=1, b=2"
        }})
    );
    assert_eq!(
        *host.fetches.lock().unwrap(),
        vec![FetchRequest {
            url: "https://example.com/a?b=1".into(),
            method: FetchMethod::Head,
            headers: vec![("accept-language".into(), "en".into())],
            max_body: 64 * 1024,
        }]
    );
}

#[test]
fn reads_are_validated_here() {
    let host = TestHost::new(Mode::Answer);
    for (call, code, needle) in [
        ("ctx.read('secrets')", "unknown_resource", "read('secrets')"),
        (
            "ctx.read('events', { limit: 0 })",
            "invalid_params",
            "limit",
        ),
        (
            "ctx.read('events', { limit: 101 })",
            "invalid_params",
            "limit",
        ),
        ("ctx.read('files', {})", "invalid_params", "path"),
        (
            "ctx.read('files', { path: 7 })",
            "invalid_params",
            "path must be a string",
        ),
        (
            "ctx.read('runs', { all: true })",
            "invalid_params",
            "takes no params",
        ),
        ("ctx.read()", "invalid_params", "resource"),
    ] {
        let got = payload(run_with(
            &rejection_of(call),
            host.clone(),
            &Limits::default(),
        ));
        assert_eq!(got["code"], json!(code), "{call}: {got}");
        let message = got["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{call}: {message}");
    }
    assert_eq!(host.reads(), 0, "no refused read reached the host");

    let got = payload(run_with(
        "async ({ ctx }) => ({ resumeText: 'x', payload: [
            (await ctx.read('events', { since: 3, limit: 100 })).value,
            (await ctx.read('events')).value,
            (await ctx.read('files', { path: '/out/log', read: true })).value,
        ] })",
        host.clone(),
        &Limits::default(),
    ));
    assert_eq!(
        got,
        json!([{"since": 3, "limit": 100}, {"since": null, "limit": 100}, {"path": "/out/log", "read": true}])
    );
}

#[test]
fn exec_is_validated_and_takes_no_shell() {
    let host = TestHost::new(Mode::Answer);
    let got = payload(run_with(
        "async ({ ctx }) => ({ resumeText: 'x', payload: await ctx.exec({ command: 'ls', args: ['-l', '$(id)'], cwd: '/tmp' }) })",
        host.clone(),
        &Limits::default(),
    ));
    assert_eq!(
        got,
        json!({"exitCode": 3, "stdout": "out", "stderr": "err"})
    );
    assert_eq!(
        *host.execs.lock().unwrap(),
        vec![ExecRequest {
            command: "ls".into(),
            args: vec!["-l".into(), "$(id)".into()],
            cwd: Some("/tmp".into()),
        }]
    );
    for call in [
        "ctx.exec('ls -l')",
        "ctx.exec({ command: '' })",
        "ctx.exec({ command: 'ls', args: '-l' })",
        "ctx.exec({ command: 'ls', shell: true })",
    ] {
        let got = payload(run_with(
            &rejection_of(call),
            host.clone(),
            &Limits::default(),
        ));
        assert_eq!(got["code"], json!("invalid_params"), "{call}: {got}");
    }
    assert_eq!(host.execs.lock().unwrap().len(), 1);
}

#[test]
fn a_caught_call_error_lets_the_program_go_on() {
    let got = payload(run_with(
        "async ({ ctx }) => {
            let missing;
            try { await ctx.read('files', { path: '/out/done' }); }
            catch (e) { missing = { code: e.code, message: e.message, isError: e instanceof Error }; }
            const runs = await ctx.read('runs');
            return { resumeText: 'x', payload: { missing, runs: runs.value.length } };
        }",
        TestHost::new(Mode::NotFound),
        &Limits::default(),
    ));
    assert_eq!(
        got,
        json!({"missing": {"code": "not_found", "message": "/out/done does not exist", "isError": true}, "runs": 1})
    );
}

#[test]
fn an_uncaught_call_error_is_threw_with_its_code() {
    let err = run_with(
        "async ({ ctx }) => { await ctx.read('files', { path: '/nope' }); return false; }",
        TestHost::new(Mode::NotFound),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        CheckError::Threw {
            message: "/nope does not exist".into(),
            code: Some("not_found".into())
        }
    );
    assert_eq!(err.code(), "condition_threw");
}

#[test]
fn a_panicking_host_rejects_the_call() {
    let got = payload(run_with(
        &rejection_of("ctx.read('runs')"),
        TestHost::new(Mode::Panic),
        &Limits::default(),
    ));
    assert_eq!(got["code"], json!("host_panicked"));
}

#[test]
fn bad_returns_say_what_was_expected() {
    for (source, needle) in [
        ("async () => true", "return an object with resumeText"),
        ("async () => undefined", "got undefined"),
        ("async () => 'yes'", "got a string"),
        ("async () => [1]", "got an array"),
        (
            "async () => ({})",
            "resumeText must be a string, got undefined",
        ),
        (
            "async () => ({ resumeText: 5 })",
            "resumeText must be a string, got a number",
        ),
        (
            "async () => ({ get resumeText() { throw new Error('boom'); } })",
            "reading resumeText threw: boom",
        ),
        (
            "async () => { const p = {}; p.p = p; return { resumeText: 'x', payload: p }; }",
            "payload must be JSON",
        ),
        (
            "async () => ({ resumeText: 'x', payload: () => 1 })",
            "payload must be JSON",
        ),
        (
            "async () => ({ resumeText: 'x', payload: 'x'.repeat(70000) })",
            "at most 65536",
        ),
        (
            "async () => ({ resumeText: 'x'.repeat(70000) })",
            "at most 65536",
        ),
        (
            "async () => ({ resumeText: 'x', payload: { toJSON() { throw new Error('no'); } } })",
            "payload must be JSON: no",
        ),
        (
            "async () => ({ resumeText: 'x', payload: 1n })",
            "payload must be JSON",
        ),
    ] {
        match run(source) {
            Err(err @ CheckError::BadReturn { .. }) => {
                assert_eq!(err.code(), "bad_return");
                assert!(err.to_string().contains(needle), "{source}: {err}");
            }
            other => panic!("{source}: expected a bad return, got {other:?}"),
        }
    }
}

#[test]
fn bad_sources_are_named() {
    let err = run("async ({ ctx }) => {").unwrap_err();
    assert!(matches!(err, CheckError::Syntax { .. }), "{err:?}");
    assert_eq!(err.code(), "condition_syntax");
    assert_eq!(
        run("42").unwrap_err(),
        CheckError::NotAFunction {
            found: "a number".into()
        }
    );
    let limits = Limits {
        max_source_bytes: 16,
        ..Limits::default()
    };
    assert_eq!(
        run_with(
            "async () => false // padding",
            TestHost::new(Mode::Answer),
            &limits
        ),
        Err(CheckError::SourceTooLarge { limit: 16 })
    );
    assert!(matches!(
        run("async () => false\0"),
        Err(CheckError::Syntax { .. })
    ));
    assert_eq!(
        run("async () => new Promise(() => {})"),
        Err(CheckError::Stalled)
    );
    let err = run("async () => { throw { code: 'mine', message: 'custom' }; }").unwrap_err();
    assert_eq!(
        err,
        CheckError::Threw {
            message: "custom".into(),
            code: Some("mine".into())
        }
    );
    let err = run("async () => { throw { get message() { throw 1; }, code: 7 }; }").unwrap_err();
    assert_eq!(
        err,
        CheckError::Threw {
            message: "an object without a message".into(),
            code: None
        },
        "a throwing getter and a non-string code are skipped"
    );
}

#[test]
fn error_codes_are_stable() {
    let codes: Vec<&str> = [
        CheckError::SourceTooLarge { limit: 1 },
        CheckError::Syntax {
            message: String::new(),
        },
        CheckError::NotAFunction {
            found: String::new(),
        },
        CheckError::Threw {
            message: String::new(),
            code: None,
        },
        CheckError::DeadlineExceeded {
            limit: Duration::ZERO,
        },
        CheckError::Cancelled,
        CheckError::CallLimit { limit: 1 },
        CheckError::ConcurrencyLimit { limit: 1 },
        CheckError::CallTooLarge {
            what: "result",
            limit: 1,
        },
        CheckError::MemoryLimit { limit: 1 },
        CheckError::StackOverflow { limit: 1 },
        CheckError::Stalled,
        CheckError::BadReturn {
            problem: String::new(),
        },
        CheckError::Engine {
            message: String::new(),
        },
    ]
    .iter()
    .map(CheckError::code)
    .collect();
    assert_eq!(
        codes,
        [
            "condition_too_large",
            "condition_syntax",
            "condition_not_a_function",
            "condition_threw",
            "check_deadline",
            "check_cancelled",
            "ctx_call_limit",
            "ctx_concurrency_limit",
            "ctx_call_too_large",
            "condition_memory",
            "condition_stack",
            "condition_stalled",
            "bad_return",
            "condition_engine",
        ]
    );
}

#[test]
fn the_sandboxs_own_functions_show_no_source() {
    // `flat`, `flatMap` and `Iterator.prototype.drop` are the guard's JavaScript, and `Date`
    // the prelude's: their text is not the condition's to read (the bytecode keeps none).
    let got = payload(run("async () => ({ resumeText: 'x', payload: [ \
        [].flat.toString(), [].flatMap.toString(), Date.toString(), \
        Iterator.prototype.drop.toString() ] })"));
    for shown in got.as_array().expect("four strings") {
        let shown = shown.as_str().expect("a string");
        assert!(
            !shown.contains("checkpoint")
                && !shown.contains("flattenInto")
                && !shown.contains("RealDate")
                && !shown.contains("dropping"),
            "{shown}"
        );
    }
}
