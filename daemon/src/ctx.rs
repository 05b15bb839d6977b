//! What a condition's `ctx` calls see on this machine: the daemon's side of the
//! [`outpost_condition::Host`] trait, answering `read`, `fetch` and `exec` for one check.
//!
//! Every call is checked against the wait's owner and the machine's policy when it is made:
//! `read('runs')` shows only the requester's runs; `read('files')` only paths inside the
//! mounts an operator's run would get (grant ∩ local policy, minus the credential denylist),
//! and only for the operator's waits; `fetch` only destinations the grant's egress allows,
//! without following redirects, at most the engine's body limit; `exec` only under
//! host-command trust (both switches on, the operator's wait), never through a shell, in the
//! sandbox an operator's run gets (its working folder inside the mounts), and stopped when
//! the check is. Each call and its answer are kept as the check's evidence.
//!
//! This module owns those answers and the machine's observations ([`Seen`]), a projection of
//! what the core is fed and outputs (the driver shows it each input and output, nothing else
//! feeds it); it never schedules a check and never writes the store.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outpost_condition::{
    CallError, Cancel, ExecOutput, ExecRequest, FetchMethod, FetchRequest, FetchResponse,
    Observation, ReadRequest,
};
use outpost_core::daemon::{Command, Execute, Input, Output};
use outpost_core::grant::{Access, CredentialDenylist, check_egress, check_path};
use outpost_core::ids::{RunId, WaitId};
use outpost_core::manifest::{Lifecycle, Manifest};
use outpost_core::wait::CheckOutcome;
use outpost_core::wire::{CapabilitySource, Grant, RunResult, RunStatus};
use outpost_host::{CommandRequest, CommandSandbox, HostCommands, JobStatus};
use serde_json::{Value, json};

use super::policy::PolicySource;
use crate::store::{WaitEventRow, WaitWrite};

#[cfg(test)]
mod tests;

/// Ended runs a condition can still read (the most recent ones).
const ENDED_RUNS_KEPT: usize = 200;

/// Events kept per wait for `read('events')` (as many as the store keeps).
const EVENTS_KEPT: usize = crate::store::WAIT_EVENTS_KEPT;

/// The most bytes of a file `read('files', {read: true})` returns.
pub const FILE_READ_LIMIT: usize = 64 * 1024;

/// The code of a fetch whose body was over the limit: a breach that fails the check.
pub(crate) const FETCH_BODY_LIMIT: &str = "fetch_body_limit";

/// How long one fetch may take at most (the check's own deadline is 30 s).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one `exec` may run at most.
const EXEC_TIMEOUT: Duration = Duration::from_secs(25);

/// How often a running `exec` is looked at for its end or the check's cancel.
const EXEC_LOOK: Duration = Duration::from_millis(10);

/// One run as conditions see it.
#[derive(Debug, Clone)]
struct RunSeen {
    requester: String,
    environment: &'static str,
    name: String,
    lifecycle: Option<Lifecycle>,
    started_ms: u64,
    /// When (Unix ms) and how it ended, and its exit code; none while it runs.
    ended: Option<(u64, RunStatus, Option<i32>)>,
}

/// One event of a wait's own history (`read('events')`). Its detail is kept as the JSON
/// text the store holds and read only when a condition asks: a wait keeps
/// [`EVENTS_KEPT`] of these, so a parsed object (a map node of some 600 bytes) for each would
/// cost ten times as much memory as the text.
#[derive(Debug, Clone)]
struct WaitEvent {
    seq: u64,
    at_ms: u64,
    kind: Box<str>,
    detail: Box<str>,
}

/// What [`Seen`] holds behind its lock: runs and their end order (oldest first, for
/// dropping past [`ENDED_RUNS_KEPT`]), the grant, and each wait's events.
#[derive(Default)]
struct SeenInner {
    runs: BTreeMap<RunId, RunSeen>,
    ended_order: VecDeque<RunId>,
    grant: Option<Grant>,
    events: BTreeMap<WaitId, VecDeque<WaitEvent>>,
    next_seq: u64,
    /// Events not yet in the store: the driver commits them with its next wait rows.
    unsaved: Vec<WaitEventRow>,
    /// Events that left a wait's history (past [`EVENTS_KEPT`]) and may be in the store: the
    /// driver deletes them, by number, in the same commit.
    dropped: Vec<u64>,
}

/// What the store has not been told yet: events to add and events to delete, by number.
#[derive(Debug, Default)]
pub(crate) struct UnsavedEvents {
    /// New events, oldest first.
    pub(crate) added: Vec<WaitEventRow>,
    /// The numbers of events no longer in their wait's history (some may be in `added`).
    pub(crate) dropped: Vec<u64>,
}

impl UnsavedEvents {
    /// The store's writes for these, in the order that keeps each wait's last
    /// [`EVENTS_KEPT`]: every addition before any drop, so that an event added and dropped in
    /// one batch goes too. The driver commits them with its wait rows, after them.
    pub(crate) fn writes(&self) -> impl Iterator<Item = WaitWrite<'_>> {
        let added = self.added.iter().map(WaitWrite::Event);
        added.chain(self.dropped.iter().map(|&seq| WaitWrite::DropEvent(seq)))
    }
}

/// The machine's observations the driver keeps for conditions: runs (with their requester and
/// lifecycle) since this daemon started, the grant in force, each wait's recent events (kept
/// in the store too, so they survive a restart).
#[derive(Default)]
pub(crate) struct Seen {
    inner: Mutex<SeenInner>,
}

/// Wall-clock milliseconds since the Unix epoch (what conditions and their events see).
pub(crate) use outpost_adapters::clock::wall_now_ms as now_ms;

impl Seen {
    fn lock(&self) -> std::sync::MutexGuard<'_, SeenInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes what conditions read from one output of the core, as it is carried out: a run
    /// handed to an executor, the grant applied, a check started (its wait's
    /// `check_started` event), a wait's history dropped once the server has its end. The
    /// driver shows it every output as it carries it out (a command just before running it);
    /// nothing else feeds these.
    pub(crate) fn observe(&self, output: &Output) {
        match output {
            Output::Command(Command::Execute(execute)) => self.run_started(execute),
            Output::Command(Command::ApplyGrant { grant, .. }) => self.set_grant(grant),
            Output::Command(Command::CheckWait { wait_id, check, .. }) => {
                self.wait_event(wait_id, "check_started", json!({ "check": check }));
            }
            Output::ForgetWait { wait_id } => self.forget_wait(wait_id),
            _ => {}
        }
    }

    /// Takes what conditions read from one input the core is fed, before the core has it: a
    /// run's end, a check's end (its wait's `check_ended` event).
    pub(crate) fn observe_input(&self, input: &Input) {
        match input {
            Input::RunFinished { run_id, result } => self.run_ended(run_id, result),
            Input::WaitChecked {
                wait_id,
                check,
                outcome,
            } => self.check_ended(wait_id, *check, outcome),
            _ => {}
        }
    }

    /// A run was handed to an executor.
    fn run_started(&self, execute: &Execute) {
        let (name, lifecycle) = manifest_of(&execute.capability)
            .map_or((String::new(), None), |m| (m.name, Some(m.lifecycle)));
        self.lock().runs.insert(
            execute.run_id.clone(),
            RunSeen {
                requester: execute.requester.clone(),
                environment: execute.environment.as_str(),
                name,
                lifecycle,
                started_ms: now_ms(),
                ended: None,
            },
        );
    }

    /// A run ended with `result`.
    fn run_ended(&self, run_id: &RunId, result: &RunResult) {
        let mut s = self.lock();
        let Some(run) = s.runs.get_mut(run_id) else {
            return;
        };
        if run.ended.is_some() {
            return;
        }
        run.ended = Some((now_ms(), result.status, result.exit_code));
        s.ended_order.push_back(run_id.clone());
        while s.ended_order.len() > ENDED_RUNS_KEPT {
            if let Some(old) = s.ended_order.pop_front() {
                s.runs.remove(&old);
            }
        }
    }

    /// The grant now in force.
    fn set_grant(&self, grant: &Grant) {
        self.lock().grant = Some(grant.clone());
    }

    /// Check `check` of `wait_id` ended with `outcome`: the `check_ended` event names the
    /// outcome (`not_yet`, `matched`, `failed`, `stopped`) and a failure's code and message.
    fn check_ended(&self, wait_id: &WaitId, check: u64, outcome: &CheckOutcome) {
        let kind = match outcome {
            CheckOutcome::NotYet => "not_yet",
            CheckOutcome::Matched { .. } => "matched",
            CheckOutcome::Failed(_) => "failed",
            CheckOutcome::Stopped => "stopped",
        };
        let mut detail = json!({ "check": check, "outcome": kind });
        if let CheckOutcome::Failed(e) = outcome {
            detail["error"] = json!({ "code": e.code, "message": e.message });
        }
        self.wait_event(wait_id, "check_ended", detail);
    }

    /// Adds an event to a wait's history, numbered and timed now, for `read('events')` and
    /// for the store's next commit (oldest dropped past [`EVENTS_KEPT`]).
    fn wait_event(&self, wait_id: &WaitId, kind: &'static str, detail: Value) {
        let mut s = self.lock();
        s.next_seq += 1;
        let seq = s.next_seq;
        let at_ms = now_ms();
        let detail = detail.to_string();
        let SeenInner {
            events, dropped, ..
        } = &mut *s;
        let event = WaitEvent {
            seq,
            at_ms,
            kind: kind.into(),
            detail: detail.as_str().into(),
        };
        push_event(events.entry(wait_id.clone()).or_default(), dropped, event);
        s.unsaved.push(WaitEventRow {
            seq,
            wait_id: wait_id.clone(),
            at_ms,
            kind: kind.to_owned(),
            detail,
        });
    }

    /// The events added and dropped since the last call, for the store: deleting each
    /// dropped one by its number keeps a wait's stored history as long as its history here
    /// without reading the store.
    pub(crate) fn take_unsaved(&self) -> UnsavedEvents {
        let mut s = self.lock();
        UnsavedEvents {
            added: std::mem::take(&mut s.unsaved),
            dropped: std::mem::take(&mut s.dropped),
        }
    }

    /// The events a restarted daemon's store held, oldest first; numbering goes on after them.
    pub(crate) fn restore_events(&self, rows: Vec<WaitEventRow>) {
        let mut s = self.lock();
        for row in rows {
            s.next_seq = s.next_seq.max(row.seq);
            let SeenInner {
                events, dropped, ..
            } = &mut *s;
            let event = WaitEvent {
                seq: row.seq,
                at_ms: row.at_ms,
                kind: row.kind.into(),
                detail: row.detail.into(),
            };
            // A store holding more than the limit (a build that kept more): the oldest go.
            push_event(events.entry(row.wait_id).or_default(), dropped, event);
        }
    }

    /// The wait ended and the server has it: its history goes.
    fn forget_wait(&self, wait_id: &WaitId) {
        let mut s = self.lock();
        s.events.remove(wait_id);
        s.unsaved.retain(|e| e.wait_id != *wait_id);
    }

    fn grant(&self) -> Option<Grant> {
        self.lock().grant.clone()
    }
}

/// Appends `event` to one wait's `history` and names in `dropped` each event that leaves it,
/// oldest first, once it holds more than [`EVENTS_KEPT`].
fn push_event(history: &mut VecDeque<WaitEvent>, dropped: &mut Vec<u64>, event: WaitEvent) {
    history.push_back(event);
    while history.len() > EVENTS_KEPT {
        dropped.extend(history.pop_front().map(|e| e.seq));
    }
}

/// The manifest of an inline capability or a fetched bundle, if it reads.
fn manifest_of(capability: &outpost_core::daemon::Capability) -> Option<Manifest> {
    let decoded;
    let source = match capability {
        outpost_core::daemon::Capability::Inline(source) => source,
        outpost_core::daemon::Capability::Bundle { bytes, .. } => {
            decoded = outpost_core::wire::decode_bundle(bytes).ok()?;
            &decoded
        }
    };
    match source {
        CapabilitySource::Inline { manifest, .. } => outpost_host::parse_manifest(manifest).ok(),
        CapabilitySource::Digest { .. } => None,
    }
}

/// What every check's [`Ctx`] shares for the daemon's life.
#[derive(Clone)]
pub(crate) struct CtxShared {
    pub(crate) seen: Arc<Seen>,
    pub(crate) policy: Arc<PolicySource>,
    pub(crate) denylist: CredentialDenylist,
    pub(crate) commands: Arc<HostCommands>,
    pub(crate) agent: ureq::Agent,
    /// How a wait's `exec` is sandboxed: the daemon always says; `None` (an embedding with no
    /// `outpost` binary to start the sandbox through, such as this crate's own tests) runs it
    /// as a host command.
    pub(crate) exec_sandbox: Option<outpost_host::sandbox::SandboxConfig>,
}

impl CtxShared {
    /// The agent conditions fetch with: no redirects followed (a 3xx is the answer), public
    /// roots for HTTPS, statuses as answers rather than errors.
    pub(crate) fn fetch_agent() -> ureq::Agent {
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::WebPki)
            .build();
        ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(FETCH_TIMEOUT))
            .build()
            .new_agent()
    }
}

/// One check's host: the wait's owner, the shared observations, and the evidence so far.
pub(crate) struct Ctx {
    shared: CtxShared,
    wait_id: WaitId,
    requester: String,
    operator: bool,
    check: u64,
    evidence: Mutex<Vec<Value>>,
    /// A limit the check broke in a call (a fetched body over its limit): the check fails
    /// with it whatever the program caught.
    breach: Mutex<Option<CallError>>,
}

impl Ctx {
    /// The host of check `check` of `wait_id`: its calls have `requester`'s access, and
    /// files and host commands only when `operator` (the machine's operator's wait).
    pub(crate) fn new(
        shared: CtxShared,
        wait_id: WaitId,
        requester: String,
        operator: bool,
        check: u64,
    ) -> Self {
        Self {
            shared,
            wait_id,
            requester,
            operator,
            check,
            evidence: Mutex::new(Vec::new()),
            breach: Mutex::new(None),
        }
    }

    /// The limit a call broke, if one did (the first).
    pub(crate) fn breach(&self) -> Option<CallError> {
        self.breach
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every call of the check with what it came to, as JSON text.
    pub(crate) fn evidence(&self) -> String {
        let calls = self.evidence.lock().unwrap_or_else(|e| e.into_inner());
        Value::Array(calls.clone()).to_string()
    }

    fn note(&self, call: Value, answer: &Result<Value, CallError>) {
        let entry = match answer {
            Ok(summary) => json!({ "call": call, "ok": summary }),
            Err(e) => json!({ "call": call, "error": { "code": e.code, "message": e.message } }),
        };
        self.evidence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry);
    }

    fn read_runs(&self) -> Value {
        let s = self.shared.seen.lock();
        let runs: Vec<Value> = s
            .runs
            .iter()
            .filter(|(_, r)| !r.requester.is_empty() && r.requester == self.requester)
            .map(|(id, r)| {
                run_json(
                    id,
                    r,
                    r.ended.map_or("running", |(_, status, _)| status.as_str()),
                )
            })
            .collect();
        Value::Array(runs)
    }

    fn read_services(&self) -> Value {
        let s = self.shared.seen.lock();
        let services: Vec<Value> = s
            .runs
            .iter()
            .filter(|(_, r)| r.lifecycle == Some(Lifecycle::Persistent))
            .map(|(id, r)| {
                // A service that ended other than by exiting 0 failed.
                let state = match r.ended {
                    None => "running",
                    Some((_, RunStatus::Exited, Some(0))) => "exited",
                    Some(_) => "failed",
                };
                run_json(id, r, state)
            })
            .collect();
        Value::Array(services)
    }

    fn read_events(&self, since: Option<u64>, limit: u32) -> Value {
        // Copied out under the lock, parsed after: the driver takes the same lock.
        let picked: Vec<WaitEvent> = self
            .shared
            .seen
            .lock()
            .events
            .get(&self.wait_id)
            .into_iter()
            .flatten()
            .filter(|e| since.is_none_or(|since| e.seq > since))
            .take(limit as usize)
            .cloned()
            .collect();
        let events = picked.into_iter().map(|e| {
            // Text this daemon wrote (or its store held): unreadable reads as null.
            let detail: Value = serde_json::from_str(&e.detail).unwrap_or(Value::Null);
            json!({ "seq": e.seq, "at": e.at_ms, "kind": &*e.kind, "detail": detail })
        });
        Value::Array(events.collect())
    }

    fn read_file(&self, path: &str, read: bool) -> Result<Value, CallError> {
        if !self.operator {
            return Err(CallError::new(
                "files_operator_only",
                "only the machine's operator's waits may read files in its mounts",
            ));
        }
        let grant = self.shared.seen.grant().unwrap_or_else(no_grant);
        let policy = self.shared.policy.current();
        let (mounts, _) = outpost_host::grant_mounts(&grant.fs, &policy, &self.shared.denylist);
        let asked = Path::new(path);
        if !asked.is_absolute() {
            return Err(CallError::new(
                "path_not_absolute",
                format!("`{path}` is not an absolute path"),
            ));
        }
        // A path that does not exist is looked up through its folder, which must be inside.
        let (exists, inside) = match outpost_host::resolve(asked) {
            Ok((_, canonical)) => (true, canonical),
            Err(_) => {
                let parent = asked.parent().unwrap_or(asked);
                match outpost_host::resolve(parent) {
                    Ok((_, canonical)) => (false, canonical),
                    Err(e) => return Err(CallError::new("path_unresolvable", e.to_string())),
                }
            }
        };
        check_path(&inside, &mounts, &self.shared.denylist, Access::Read)
            .map_err(|e| CallError::new(e.code(), e.to_string()))?;
        if !exists {
            return Ok(json!({ "path": path, "exists": false }));
        }
        let resolved = PathBuf::from(inside.as_str());
        let meta = std::fs::metadata(&resolved)
            .map_err(|e| CallError::new("file_unreadable", e.to_string()))?;
        let kind = if meta.is_file() {
            "file"
        } else if meta.is_dir() {
            "dir"
        } else {
            "other"
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut value = json!({
            "path": path,
            "exists": true,
            "kind": kind,
            "size": meta.len(),
            "modifiedAt": modified,
        });
        if read && meta.is_file() {
            let mut bytes = Vec::new();
            std::fs::File::open(&resolved)
                .and_then(|f| {
                    f.take(FILE_READ_LIMIT as u64 + 1)
                        .read_to_end(&mut bytes)
                        .map(|_| ())
                })
                .map_err(|e| CallError::new("file_unreadable", e.to_string()))?;
            let truncated = bytes.len() > FILE_READ_LIMIT;
            bytes.truncate(FILE_READ_LIMIT);
            value["content"] = Value::String(String::from_utf8_lossy(&bytes).into_owned());
            value["truncated"] = Value::Bool(truncated);
        }
        Ok(value)
    }
}

fn run_json(id: &str, r: &RunSeen, state: &str) -> Value {
    json!({
        "runId": id,
        "name": r.name,
        "environment": r.environment,
        "state": state,
        "startedAt": r.started_ms,
        "endedAt": r.ended.map(|(at, _, _)| at),
        "exitCode": r.ended.and_then(|(_, _, code)| code),
    })
}

/// Before the first `welcome`: no folders, no network, no commands.
fn no_grant() -> Grant {
    Grant {
        fs: Vec::new(),
        egress: outpost_core::wire::Egress::None,
        commands: outpost_core::wire::CommandsGrant { enabled: false },
        limits: outpost_core::wire::GrantLimits { max_concurrent: 1 },
        environments: None,
    }
}

impl outpost_condition::Host for Ctx {
    fn read(&self, req: ReadRequest, _cancel: &Cancel) -> Result<Observation, CallError> {
        let (call, answer) = match &req {
            ReadRequest::Runs => (json!({"read": "runs"}), Ok(self.read_runs())),
            ReadRequest::Services => (json!({"read": "services"}), Ok(self.read_services())),
            ReadRequest::Files { path, read } => (
                json!({"read": "files", "path": path, "content": read}),
                self.read_file(path, *read),
            ),
            ReadRequest::Events { since, limit } => (
                json!({"read": "events", "since": since, "limit": limit}),
                Ok(self.read_events(*since, *limit)),
            ),
        };
        let summary = answer.as_ref().map(summarize).map_err(Clone::clone);
        self.note(call, &summary);
        answer.map(|value| Observation {
            value,
            observed_at_unix_ms: now_ms(),
        })
    }

    fn fetch(&self, req: FetchRequest, cancel: &Cancel) -> Result<FetchResponse, CallError> {
        let call = json!({"fetch": req.url, "method": req.method.as_str()});
        let answer = self.fetch_checked(&req, cancel);
        if let Err(e) = &answer
            && e.code == FETCH_BODY_LIMIT
        {
            self.breach
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| e.clone());
        }
        let summary = answer
            .as_ref()
            .map(|r| json!({"status": r.status, "bytes": r.body.len()}))
            .map_err(Clone::clone);
        self.note(call, &summary);
        answer
    }

    fn exec(&self, req: ExecRequest, cancel: &Cancel) -> Result<ExecOutput, CallError> {
        let call = json!({"exec": req.command, "args": req.args, "cwd": req.cwd});
        let answer = self.exec_checked(&req, cancel);
        let summary = answer
            .as_ref()
            .map(|o| json!({"exitCode": o.exit_code}))
            .map_err(Clone::clone);
        self.note(call, &summary);
        answer
    }
}

/// A short record of a read for the evidence: the count of an array, else the value.
fn summarize(value: &Value) -> Value {
    match value {
        Value::Array(items) => json!({ "items": items.len() }),
        Value::Object(o) if o.contains_key("content") => {
            json!({ "exists": o.get("exists"), "size": o.get("size") })
        }
        other => other.clone(),
    }
}

impl Ctx {
    fn fetch_checked(
        &self,
        req: &FetchRequest,
        cancel: &Cancel,
    ) -> Result<FetchResponse, CallError> {
        let url = url_host_port(&req.url)
            .ok_or_else(|| CallError::new("invalid_url", format!("`{}` has no host", req.url)))?;
        let egress = self.shared.seen.grant().unwrap_or_else(no_grant).egress;
        check_egress(&egress, &url.0, url.1)
            .map_err(|e| CallError::new(e.code(), e.to_string()))?;
        let method = match req.method {
            FetchMethod::Get => "GET",
            FetchMethod::Head => "HEAD",
        };
        let mut builder = ureq::http::Request::builder().method(method).uri(&req.url);
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .body(())
            .map_err(|e| CallError::new("invalid_url", e.to_string()))?;
        // On its own thread, so that a cancel answers at once; the request ends by its
        // own timeout at the latest.
        let (tx, rx) = std::sync::mpsc::channel();
        let agent = self.shared.agent.clone();
        let max_body = req.max_body;
        std::thread::spawn(move || {
            let _ = tx.send(fetch_once(&agent, request, max_body));
        });
        loop {
            match rx.recv_timeout(EXEC_LOOK) {
                Ok(answer) => return answer,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if cancel.is_cancelled() => {
                    return Err(CallError::new("cancelled", "the check was stopped"));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(CallError::new("fetch_failed", "the request thread ended"));
                }
            }
        }
    }

    /// The sandbox of a wait's `exec`: what an operator's run would see (the grant's folders
    /// within the owner's policy, the grant's egress), its working folder among them.
    fn exec_sandbox(&self, req: &ExecRequest) -> Result<Option<CommandSandbox>, CallError> {
        let Some(config) = &self.shared.exec_sandbox else {
            return Ok(None);
        };
        let grant = self.shared.seen.grant().unwrap_or_else(no_grant);
        let policy = self.shared.policy.current();
        let (mounts, _) = outpost_host::grant_mounts(&grant.fs, &policy, &self.shared.denylist);
        if let Some(cwd) = &req.cwd {
            let inside = outpost_host::resolve(Path::new(cwd))
                .map_err(|e| CallError::new("path_unresolvable", e.to_string()))?
                .1;
            check_path(&inside, &mounts, &self.shared.denylist, Access::Read).map_err(|e| {
                CallError::new(
                    "path_not_granted",
                    format!(
                        "the working folder `{cwd}` is not one this machine's runs may use: {e}"
                    ),
                )
            })?;
        }
        Ok(Some(CommandSandbox {
            bounds: outpost_host::sandbox::Bounds {
                run_id: format!("{}.check{}", self.wait_id, self.check).into(),
                dir: None,
                mounts,
                egress: grant.egress,
                context: String::new(),
                publish: None,
            },
            config: config.clone(),
        }))
    }

    fn exec_checked(&self, req: &ExecRequest, cancel: &Cancel) -> Result<ExecOutput, CallError> {
        if !self.operator {
            return Err(CallError::new(
                "commands_operator_only",
                "only the machine's operator's waits may run host commands",
            ));
        }
        if !self.shared.commands.is_on() {
            return Err(CallError::new(
                "commands_off",
                "host commands are off on this machine: the server's grant and the owner's \
                 local switch must both allow them",
            ));
        }
        let mut argv = vec![req.command.clone()];
        argv.extend(req.args.iter().cloned());
        let sandbox = self.exec_sandbox(req)?;
        // In the sandbox, a command without a folder starts at `/` (always there, never
        // readable); a host command at the daemon's own.
        let cwd = req
            .cwd
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| sandbox.as_ref().map(|_| PathBuf::from("/")));
        let command = CommandRequest {
            requester: self.requester.clone(),
            // A check's command is no run's: its audit names the wait it checks for.
            run_id: RunId::new(self.wait_id.as_str()),
            command_id: format!("{}.check{}", self.wait_id, self.check),
            argv,
            cwd,
            env: BTreeMap::new(),
            timeout: EXEC_TIMEOUT,
            sandbox,
        };
        let commands = &self.shared.commands;
        let job = commands
            .start(&command)
            .map_err(|e| CallError::new(e.code(), e.to_string()))?;
        let started = std::time::Instant::now();
        loop {
            match commands.poll(&self.requester, job) {
                Ok(JobStatus::Finished(outcome)) => {
                    return Ok(ExecOutput {
                        exit_code: outcome.exit_code,
                        stdout: String::from_utf8_lossy(&outcome.stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&outcome.stderr).into_owned(),
                    });
                }
                Ok(JobStatus::Running { .. }) => {}
                Err(e) => return Err(CallError::new(e.code(), e.to_string())),
            }
            let stop = if cancel.is_cancelled() {
                Some(("cancelled", "the check was stopped".to_owned()))
            } else if started.elapsed() >= EXEC_TIMEOUT {
                Some((
                    "exec_timed_out",
                    format!("the command ran longer than {} s", EXEC_TIMEOUT.as_secs()),
                ))
            } else {
                None
            };
            if let Some((code, message)) = stop {
                let _ = commands.kill(&self.requester, job);
                return Err(CallError::new(code, message));
            }
            cancel.wait_timeout(EXEC_LOOK);
        }
    }
}

/// The host and port of an http(s) URL (the engine validated its shape).
fn url_host_port(url: &str) -> Option<(String, u16)> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    Some((host.to_owned(), port))
}

fn fetch_once(
    agent: &ureq::Agent,
    request: ureq::http::Request<()>,
    max_body: usize,
) -> Result<FetchResponse, CallError> {
    let response = agent
        .run(request)
        .map_err(|e| CallError::new("fetch_failed", e.to_string()))?;
    let status = response.status().as_u16();
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in response.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.iter_mut().find(|(n, _)| n == name.as_str()) {
            Some((_, joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            None => headers.push((name.as_str().to_owned(), value)),
        }
    }
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(max_body as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| CallError::new("fetch_failed", e.to_string()))?;
    if body.len() > max_body {
        return Err(CallError::new(
            FETCH_BODY_LIMIT,
            format!("the response body is larger than {max_body} bytes, the limit per fetch"),
        ));
    }
    Ok(FetchResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
