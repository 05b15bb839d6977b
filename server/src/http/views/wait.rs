//! A Wait as the wait routes answer it (§11.7): every member is always there, `null` when it
//! has no value yet (a wait that has not matched has no `resumeText`), and the schema says
//! which members may be `null`.

use outpost_core::wait::{CheckError, continuation_id};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::store::WaitEntry;

/// What a match started, or why it started nothing.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Continuation {
    /// `WAIT.then`; `null` for a wait without `then`.
    id: Option<String>,
    #[schemars(extend("enum" = ["none", "pending", "started", "access_lost", "cancelled", "expired", "refused"]))]
    state: String,
    /// The execution it started (`ex_` + the continuation id).
    execution_id: Option<String>,
    /// Why nothing started (`not_opted_in`, …).
    error: Option<String>,
}

/// A Wait.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Wait {
    wait_id: String,
    /// The context's name when the wait was registered.
    context: String,
    context_id: String,
    requester: String,
    #[schemars(extend("enum" = ["active", "cancelling", "matched", "failed"]))]
    state: String,
    reason: Option<String>,
    interval_ms: u64,
    /// Unix ms.
    expires_at_ms: Option<u64>,
    /// Unix ms.
    created_at_ms: u64,
    checks: u64,
    consecutive_errors: u32,
    /// The last failed check's error, as the daemon reported it.
    #[schemars(with = "Option<CheckError>")]
    last_error: Value,
    /// Unix ms.
    next_check_at_ms: Option<u64>,
    resume_text: Option<String>,
    /// What the condition returned with its match (any JSON).
    payload: Value,
    /// What the condition observed (any JSON).
    evidence: Value,
    #[schemars(extend("enum" = ["check_errors", "expired", "cancelled", "context_revoked", null]))]
    fail_reason: Option<String>,
    /// Unix ms.
    ended_at_ms: Option<u64>,
    continuation: Continuation,
    /// On a registration: whether an identical active wait was answered (200) instead of a
    /// new one (201). Absent elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) deduplicated: Option<bool>,
}

/// `GET /v1/waits`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Waits {
    /// Newest first.
    pub(crate) waits: Vec<Wait>,
}

fn parsed(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

/// The Wait of a stored wait.
pub(crate) fn wait(w: &WaitEntry) -> Wait {
    Wait {
        wait_id: w.id.clone(),
        context: w.context_name.clone(),
        context_id: w.context_id.clone(),
        requester: w.requester.clone(),
        state: w.state.clone(),
        reason: w.reason.clone(),
        interval_ms: w.interval_ms,
        expires_at_ms: w.expires_at_ms,
        created_at_ms: w.created_at_ms,
        checks: w.checks,
        consecutive_errors: w.consecutive_errors,
        last_error: parsed(w.last_error.as_deref()),
        next_check_at_ms: w.next_check_at_ms,
        resume_text: w.resume_text.clone(),
        payload: parsed(w.payload.as_deref()),
        evidence: parsed(w.evidence.as_deref()),
        fail_reason: w.fail_reason.clone(),
        ended_at_ms: w.ended_at_ms,
        continuation: Continuation {
            id: w.then_json.as_ref().map(|_| continuation_id(&w.id)),
            state: w.continuation_state.clone(),
            execution_id: w.continuation_execution_id.clone(),
            error: w.continuation_error.clone(),
        },
        deduplicated: None,
    }
}
