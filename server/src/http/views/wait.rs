//! A Wait as the wait routes answer it (§11.7), filled from its stored row: every member is
//! always there, `null` when it has no value yet (a wait that has not matched has no
//! `resumeText`). The type is the core's ([`outpost_core::api::answers::Wait`]).

pub(crate) use outpost_core::api::answers::{Continuation, Wait, Waits};
use outpost_core::wait::continuation_id;
use serde_json::Value;

use crate::store::WaitEntry;

fn parsed(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

/// The Wait of a stored wait.
pub(crate) fn wait(w: &WaitEntry) -> Wait {
    Wait {
        wait_id: w.id.as_str().into(),
        context: w.context_name.clone(),
        context_id: w.context_id.as_str().into(),
        requester: w.requester.clone(),
        state: w.state.clone(),
        reason: w.reason.clone(),
        interval_ms: w.interval_ms,
        expires_at_ms: w.expires_at_ms,
        created_at_ms: w.created_at_ms,
        checks: w.checks,
        consecutive_errors: w.consecutive_errors,
        last_error: w
            .last_error
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok()),
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
