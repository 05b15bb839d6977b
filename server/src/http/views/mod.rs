//! The JSON bodies routes answer with (§11), built from what the store and the dispatcher
//! hold: the types are the core's ([`outpost_core::api::answers`], shared with the CLI and
//! the daemon, and describing themselves for the OpenAPI document); this module fills them.
//! An Execution is built from its listing row, a Context from its row, its live state and
//! who is looking; a Wait is in [`wait`].
//!
//! Nothing here reads the store or decides anything.

pub(crate) mod wait;

pub(crate) use outpost_core::api::answers::{
    Audit, AuditEvent, Bundle, ChainEntryView, ChainShown, CommandAuthorized, CommandsSwitched,
    ConnectTicket, Context, Contexts, Execution, ExecutionError, Health, JobAuthorized, Me, Node,
    NodeSession, Nodes, Recording, Recordings, Registered, Runs, SandboxView, TerminalOpened,
    TerminalRow, TerminalTicket, Terminals, User,
};
use outpost_core::server::ExecutionOutcome;
use outpost_core::wire::Grant;

use super::auth::Caller;
use crate::dispatch::Live;
use crate::store::{ContextEntry, ExecutionEntry};

/// An Execution from its listing row.
pub(crate) fn execution(entry: &ExecutionEntry) -> Execution {
    let mut out = Execution {
        execution_id: entry.id.as_str().into(),
        status: entry.status,
        capability: entry.capability.clone(),
        capability_version: entry.capability_version,
        requester: Some(entry.user.clone()).filter(|u| !u.is_empty()),
        requested_context: entry.requested.clone(),
        exit_code: None,
        signal: None,
        stdout: None,
        stderr: None,
        truncated: None,
        error: None,
        queue: None,
        ran_on: entry
            .ran_on_json
            .as_deref()
            .and_then(|j| serde_json::from_str(j).ok()),
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
            out.timing = Some(result.timing);
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
    // A run with no result (cancelled, lost) shows what its live output held.
    if let Some(kept) = &entry.kept
        && out.stdout.is_none()
    {
        out.stdout = Some(kept.stdout.clone());
        out.stderr = Some(kept.stderr.clone());
        out.truncated = Some(kept.cut);
    }
    out
}

/// The view of a queued execution's place, as the dispatcher says it now.
pub(crate) fn queue(place: &outpost_core::server::QueuePlace) -> outpost_core::api::QueueView {
    outpost_core::api::QueueView {
        context: place.name.clone(),
        position: u32::try_from(place.position).unwrap_or(u32::MAX),
        reason: if place.online { "busy" } else { "offline" }.to_owned(),
        left_secs: place.left.as_secs(),
    }
}

/// A Context, as `viewer` may see it: its operator and admins see every opt-in, anyone
/// else only their own.
/// Context `entry` as `viewer` sees it; with `host_commands` false (a server started with
/// `--no-host-commands`) its grant shows commands off, as every hop answers.
pub(crate) fn context(
    entry: &ContextEntry,
    live: Live,
    viewer: &Caller,
    (host_commands, records_input): (bool, bool),
) -> Context {
    let mut grant: Grant =
        serde_json::from_str(&entry.grant_json).unwrap_or_else(|_| Grant::nothing());
    grant.commands.enabled &= host_commands;
    let opted_in = entry
        .opted_in
        .iter()
        .filter(|u| viewer.is_admin() || viewer.user == entry.operator || **u == viewer.user)
        .cloned()
        .collect();
    Context {
        id: entry.id.as_str().into(),
        name: entry.name.clone(),
        operator: entry.operator.clone(),
        online: live.online,
        online_since: live.online.then_some(live.online_since).flatten(),
        slots_used: live.slots_used,
        slots_total: if live.online {
            live.slots_total
        } else {
            entry.max_concurrent
        },
        grant,
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
            .flatten()
            .map(|mut sandbox| {
                // Paths from the owner's policy: for the operator and admins only.
                if !(viewer.is_admin() || viewer.user == entry.operator) {
                    sandbox.mounts = None;
                }
                sandbox
            }),
        draining: live.online && live.draining,
        paused: live.online && live.paused,
        control: live.online
            && live
                .features
                .iter()
                .any(|f| f == outpost_core::wire::FEATURE_CONTROL),
        records_terminal_input: live.online
            && records_input
            && live
                .features
                .iter()
                .any(|f| f == outpost_core::terminal::cast::FEATURE_RECORD_INPUT),
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;
    use outpost_core::server::ExecutionStatus;

    /// The OpenAPI document lists exactly the statuses the core has, in its order.
    #[test]
    fn the_documented_statuses_are_the_core_s() {
        let schema = serde_json::to_value(schemars::schema_for!(Execution)).unwrap();
        let status = &schema["properties"]["status"]["$ref"];
        let name = status.as_str().expect("a reference").rsplit('/').next();
        // Documented variants are a `oneOf` of constants, each with its description.
        let listed: Vec<&str> = schema["$defs"][name.unwrap()]["oneOf"]
            .as_array()
            .expect("one schema per status")
            .iter()
            .filter_map(|variant| variant["const"].as_str())
            .collect();
        assert_eq!(listed, ExecutionStatus::ALL.map(ExecutionStatus::as_str));
    }
}
