//! The JSON bodies routes answer with (§11.4): an Execution from its listing row, a Context
//! from its row, its live state and who is looking.

use outpost_core::server::ExecutionOutcome;
use serde_json::{Map, Value, json};

use super::auth::Caller;
use crate::dispatch::Live;
use crate::store::{ContextEntry, ExecutionEntry};

/// An Execution.
pub(crate) fn execution(entry: &ExecutionEntry) -> Value {
    let mut out = Map::new();
    out.insert("executionId".into(), json!(entry.id));
    out.insert("status".into(), json!(entry.status));
    let outcome: Option<ExecutionOutcome> = entry
        .outcome_json
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok());
    match outcome {
        Some(ExecutionOutcome::Completed(result)) => {
            if let Some(code) = result.exit_code {
                out.insert("exitCode".into(), json!(code));
            }
            if let Some(signal) = result.signal {
                out.insert("signal".into(), json!(signal));
            }
            out.insert("stdout".into(), json!(result.stdout));
            out.insert("stderr".into(), json!(result.stderr));
            out.insert("truncated".into(), json!(result.truncated));
            if let Some(error) = &result.error {
                out.insert(
                    "error".into(),
                    json!({"code": error.code, "message": error.message}),
                );
            }
            out.insert(
                "timing".into(),
                serde_json::to_value(&result.timing).unwrap_or(Value::Null),
            );
        }
        Some(ExecutionOutcome::Failed { code, message }) => {
            out.insert("error".into(), json!({"code": code, "message": message}));
        }
        Some(ExecutionOutcome::Cancelled { reason }) => {
            out.insert(
                "error".into(),
                json!({"code": "cancelled", "message": format!("cancelled: {reason}"), "reason": reason}),
            );
        }
        Some(ExecutionOutcome::Lost) => {
            out.insert(
                "error".into(),
                json!({"code": "lost", "message": "the machine stopped answering after the run started"}),
            );
        }
        None => {}
    }
    if let Some(ran_on) = entry
        .ran_on_json
        .as_deref()
        .and_then(|j| serde_json::from_str::<Value>(j).ok())
    {
        out.insert("ranOn".into(), ran_on);
    }
    if let Some(line) = &entry.line {
        out.insert("ranOnText".into(), json!(line));
    }
    out.insert("createdAt".into(), json!(entry.created_at));
    if let Some(at) = entry.finished_at {
        out.insert("finishedAt".into(), json!(at));
    }
    Value::Object(out)
}

/// Whether a status is an end.
pub(crate) fn ended(status: &str) -> bool {
    !matches!(status, "pending" | "running")
}

/// A Context, as `viewer` may see it: its operator and admins see every opt-in, anyone
/// else only their own.
pub(crate) fn context(entry: &ContextEntry, live: Live, viewer: &Caller) -> Value {
    let grant: Value = serde_json::from_str(&entry.grant_json).unwrap_or(Value::Null);
    let opted_in: Vec<&String> = entry
        .opted_in
        .iter()
        .filter(|u| viewer.is_admin() || viewer.user == entry.operator || **u == viewer.user)
        .collect();
    json!({
        "id": entry.id,
        "name": entry.name,
        "operator": entry.operator,
        "online": live.online,
        "slotsUsed": live.slots_used,
        "slotsTotal": if live.online { live.slots_total } else { entry.max_concurrent },
        "grant": grant,
        "grantVersion": entry.grant_version,
        "revoked": entry.revoked,
        "daemonVersion": entry.daemon_version,
        "environments": entry.environments,
        "registeredAt": entry.registered_at,
        "sharedWithAllMembers": entry.shared_with_all_members,
        "optedIn": opted_in,
        "operatorIsMember": entry.operator_is_member,
    })
}
