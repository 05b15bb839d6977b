//! The JSON bodies routes answer with (§11): each is a type here that serialises the answer
//! and describes itself ([`JsonSchema`]), so the OpenAPI document's response schemas come
//! from the types the routes answer with. An Execution is built from its listing row, a
//! Context from its row, its live state and who is looking; a Wait is in [`wait`].
//!
//! A member that may be absent is skipped (`Option` with `skip_serializing_if`); one that is
//! always there but may be empty is `null` (a plain `Option`): the schemas say which.
//! Nothing here reads the store or decides anything.

pub(crate) mod wait;

use outpost_core::routing::RanOn;
use outpost_core::server::{ExecutionOutcome, ExecutionStatus};
use outpost_core::wire::{Grant, Timing};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::auth::Caller;
use crate::dispatch::Live;
use crate::store::{ContextEntry, ExecutionEntry};

/// How an execution failed, was cancelled or lost.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ExecutionError {
    /// The error code (`cancelled`, `lost`, an executor or access code, …).
    code: String,
    /// What a person should read.
    message: String,
    /// Why it was cancelled (`requested`, `access_lost`, `revoked`, …): on `cancelled` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// An Execution (§11.4). Members are absent until known.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Execution {
    execution_id: String,
    #[schemars(extend("enum" = ["pending", "running", "exited", "timed_out", "cancelled", "failed", "lost"]))]
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ExecutionError>,
    /// Where it ran (a routing record), once placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<RanOn>")]
    ran_on: Option<Value>,
    /// One line for a person: "Ran on build-box (your machine)."
    #[serde(skip_serializing_if = "Option::is_none")]
    ran_on_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Timing>")]
    timing: Option<Value>,
    /// Unix seconds.
    created_at: u64,
    /// Unix seconds, once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<u64>,
}

/// An Execution from its listing row.
pub(crate) fn execution(entry: &ExecutionEntry) -> Execution {
    let mut out = Execution {
        execution_id: entry.id.clone(),
        status: entry.status.clone(),
        exit_code: None,
        signal: None,
        stdout: None,
        stderr: None,
        truncated: None,
        error: None,
        ran_on: entry
            .ran_on_json
            .as_deref()
            .and_then(|j| serde_json::from_str::<Value>(j).ok()),
        ran_on_text: entry.line.clone(),
        timing: None,
        created_at: entry.created_at,
        finished_at: entry.finished_at,
    };
    let outcome: Option<ExecutionOutcome> = entry
        .outcome_json
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok());
    let error = |code: &str, message: String, reason: Option<String>| ExecutionError {
        code: code.to_owned(),
        message,
        reason,
    };
    match outcome {
        Some(ExecutionOutcome::Completed(result)) => {
            out.exit_code = result.exit_code;
            out.signal = result.signal;
            out.stdout = Some(result.stdout);
            out.stderr = Some(result.stderr);
            out.truncated = Some(result.truncated);
            out.error = result
                .error
                .map(|e| error(&e.code, e.message.clone(), None));
            out.timing = Some(serde_json::to_value(&result.timing).unwrap_or(Value::Null));
        }
        Some(ExecutionOutcome::Failed { code, message }) => {
            out.error = Some(error(&code, message, None));
        }
        Some(ExecutionOutcome::Cancelled { reason }) => {
            let message = format!("cancelled: {reason}");
            out.error = Some(error("cancelled", message, Some(reason)));
        }
        Some(ExecutionOutcome::Lost) => {
            let message = "the machine stopped answering after the run started".to_owned();
            out.error = Some(error("lost", message, None));
        }
        None => {}
    }
    out
}

/// Whether a status is an end (a status this server does not know counts as one: it never
/// changes).
pub(crate) fn ended(status: &str) -> bool {
    ExecutionStatus::parse(status).is_none_or(ExecutionStatus::is_final)
}

/// `GET /v1/runs`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Runs {
    /// Newest first.
    pub(crate) runs: Vec<Execution>,
}

/// A Context (§11.4), as one caller may see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Context {
    id: String,
    name: String,
    operator: String,
    online: bool,
    slots_used: usize,
    slots_total: u32,
    #[schemars(with = "Grant")]
    grant: Value,
    grant_version: u64,
    revoked: bool,
    daemon_version: String,
    environments: Vec<String>,
    /// Unix seconds.
    registered_at: u64,
    shared_with_all_members: bool,
    /// Its operator and admins see every opt-in, anyone else only their own.
    opted_in: Vec<String>,
    operator_is_member: bool,
    /// What the machine's sandbox enforces, as its daemon announced it; `null` while it is
    /// offline or when its daemon does not say.
    sandbox: Option<SandboxView>,
}

/// A machine's sandbox, from its daemon's `sandbox:*` and `confinement:*` features.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxView {
    /// The owner's rule: `required` or `operator-may-opt-out`.
    confinement: String,
    /// Landlock's file rules are enforced (every sandboxed run needs them).
    landlock: bool,
    /// User, mount, PID and network namespaces are available (egress `none`, allowlists).
    namespaces: bool,
    /// Landlock's signal and abstract-socket scoping is enforced.
    scopes: bool,
}

impl SandboxView {
    /// The view of `features`, when they say anything of the sandbox.
    pub(crate) fn of(features: &[String]) -> Option<Self> {
        let confinement = features
            .iter()
            .find_map(|f| f.strip_prefix("confinement:"))?
            .to_owned();
        let has = |name: &str| features.iter().any(|f| f == name);
        Some(SandboxView {
            confinement,
            landlock: has("sandbox:landlock"),
            namespaces: has("sandbox:namespaces"),
            scopes: has("sandbox:scopes"),
        })
    }
}

/// A Context, as `viewer` may see it: its operator and admins see every opt-in, anyone
/// else only their own.
pub(crate) fn context(entry: &ContextEntry, live: Live, viewer: &Caller) -> Context {
    let opted_in = entry
        .opted_in
        .iter()
        .filter(|u| viewer.is_admin() || viewer.user == entry.operator || **u == viewer.user)
        .cloned()
        .collect();
    Context {
        id: entry.id.clone(),
        name: entry.name.clone(),
        operator: entry.operator.clone(),
        online: live.online,
        slots_used: live.slots_used,
        slots_total: if live.online {
            live.slots_total
        } else {
            entry.max_concurrent
        },
        grant: serde_json::from_str(&entry.grant_json).unwrap_or(Value::Null),
        grant_version: entry.grant_version,
        revoked: entry.revoked,
        daemon_version: entry.daemon_version.clone(),
        environments: entry.environments.clone(),
        registered_at: entry.registered_at,
        shared_with_all_members: entry.shared_with_all_members,
        opted_in,
        operator_is_member: entry.operator_is_member,
        sandbox: live
            .online
            .then(|| SandboxView::of(&live.features))
            .flatten(),
    }
}

/// `GET /v1/execution-contexts`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Contexts {
    pub(crate) contexts: Vec<Context>,
}

/// One entry of a chain: its id (or `cloud`) and the name a person knows it by.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ChainEntryView {
    pub(crate) id: String,
    /// `null` when the context is gone.
    pub(crate) name: Option<String>,
}

/// `GET` and `PUT /v1/chain`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "ChainShown")]
pub(crate) struct ChainShown {
    /// The entries' ids, in order (`cloud` for the server).
    pub(crate) chain: Vec<String>,
    /// The same entries with their names.
    pub(crate) entries: Vec<ChainEntryView>,
}

/// `POST /v1/execution-contexts` (201 new, 200 already registered).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Registered {
    pub(crate) context_id: String,
    pub(crate) name: String,
    pub(crate) operator: String,
    pub(crate) key_id: String,
    #[schemars(with = "Grant")]
    pub(crate) grant: Value,
    pub(crate) grant_version: u64,
}

/// `POST /v1/execution-contexts/connect-ticket`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConnectTicket {
    /// `otk_…`, single-use.
    pub(crate) ticket: String,
    pub(crate) session_id: String,
    /// Unix seconds.
    pub(crate) expires_at: u64,
}

/// `PUT /v1/bundles/{sha256}` (201 stored, 200 already stored).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Bundle {
    #[schemars(regex(pattern = crate::bodies::DIGEST_PATTERN))]
    pub(crate) sha256: String,
    /// Bytes.
    pub(crate) size: u64,
}

/// `POST /v1/execution-contexts/commands`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommandsSwitched {
    pub(crate) enabled: bool,
    pub(crate) grant_version: u64,
}

/// `POST /v1/execution-contexts/commands/authorize`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommandAuthorized {
    /// `cmd_…`.
    pub(crate) command_id: String,
    pub(crate) requester: String,
}

/// `POST /v1/execution-contexts/commands/jobs/authorize`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct JobAuthorized {
    pub(crate) requester: String,
}

/// `POST /v1/users`: the token is shown once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct User {
    pub(crate) user: String,
    pub(crate) token: String,
    pub(crate) scopes: Vec<String>,
}

/// One audit event.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditEvent {
    /// Unix seconds.
    pub(crate) at: u64,
    pub(crate) kind: String,
    pub(crate) actor: String,
    /// `null` for an event about no context (a user added, …).
    pub(crate) context_id: Option<String>,
    pub(crate) detail: String,
}

/// `GET /v1/audit`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Audit {
    /// Newest first.
    pub(crate) events: Vec<AuditEvent>,
}

/// `POST /v1/execution-contexts/{context}/terminals`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TerminalOpened {
    pub(crate) terminal_id: String,
    pub(crate) context: String,
    pub(crate) context_id: String,
    pub(crate) ticket: String,
    #[schemars(extend("enum" = ["operator", "watcher"]))]
    pub(crate) role: &'static str,
    pub(crate) expires_in_ms: u128,
    pub(crate) cols: u16,
    pub(crate) rows: u16,
}

/// `POST /v1/terminals/{terminal}/tickets`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TerminalTicket {
    pub(crate) ticket: String,
    #[schemars(extend("enum" = ["operator", "watcher"]))]
    pub(crate) role: &'static str,
    pub(crate) expires_in_ms: u128,
}

/// One open terminal.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TerminalRow {
    pub(crate) terminal_id: String,
    pub(crate) context: String,
    pub(crate) context_id: String,
    #[schemars(extend("enum" = ["starting", "open", "closed"]))]
    pub(crate) state: &'static str,
    pub(crate) viewers: usize,
    pub(crate) cols: u16,
    pub(crate) rows: u16,
    /// Unix seconds.
    pub(crate) opened_at: u64,
    pub(crate) opened_by: String,
}

/// `GET /v1/terminals`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Terminals {
    pub(crate) terminals: Vec<TerminalRow>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Health {
    pub(crate) ok: bool,
}

#[cfg(test)]
mod status_tests {
    use super::*;

    /// The OpenAPI document lists exactly the statuses the core has, in its order.
    #[test]
    fn the_documented_statuses_are_the_core_s() {
        let schema = serde_json::to_value(schemars::schema_for!(Execution)).unwrap();
        let listed: Vec<&str> = schema["properties"]["status"]["enum"]
            .as_array()
            .expect("an enum of statuses")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(listed, ExecutionStatus::ALL.map(ExecutionStatus::as_str));
        assert!(ended("exited") && ended("a status from a newer server"));
        assert!(!ended("pending") && !ended("running"));
    }
}
