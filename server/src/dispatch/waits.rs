//! The dispatcher's side of condition waits: every open wait of a machine is sent again when
//! it comes up ready; a daemon's ending is recorded (once) before it is acknowledged; a match
//! with a continuation starts one execution, routed like any other, for a requester who may
//! still execute on the machine.
//!
//! A continuation's execution id is derived from the wait's stable continuation id, and its
//! move from `pending` to `started` is committed with the execution's own rows, so a crash
//! between the match and the submission submits it once on restart, never twice. This module
//! never evaluates a condition and never decides when a wait is checked: the daemon does.

use outpost_core::b64;
use outpost_core::routing::{AccessDenied, ContextView, ExecuteTarget, Requester, check_access};
use outpost_core::server::{ExecuteRequest, Input};
use outpost_core::session::WaitOrder;
use outpost_core::wait::{Report, WaitSpec, continuation_id};
use outpost_core::wire::{CapabilitySource, DaemonFrame, InlineFile};
use serde_json::{Value, json};

use super::{Dispatcher, off_the_runtime};
use crate::store::wait_states::{
    ACTIVE, CANCELLING, CONT_ACCESS_LOST, CONT_PENDING, CONT_REFUSED, CONT_STARTED,
};
use crate::store::{ContextEntry, ExecutionEntry, Recorded, StoreError, WaitEntry};

/// The file a continuation's inline capability gets: `{"waitId","resumeText","payload"}`.
pub(crate) const WAIT_FILE: &str = "outpost-wait.json";

/// Why a requester may not wait (or continue) on a context: a status, a code, a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) status: u16,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// Whether `user` may execute on the context, as routing decides it for a run that needs
/// neither folders nor commands: the context is not revoked, its operator is still a member,
/// and a requester who is not its operator opted in.
pub(crate) fn may_execute(entry: &ContextEntry, user: &str) -> Result<(), Refused> {
    if entry.revoked {
        return Err(Refused {
            status: 409,
            code: "context_revoked",
            message: format!("{} is revoked", entry.name),
        });
    }
    let view = ContextView {
        id: entry.id.clone(),
        name: entry.name.clone(),
        operator: entry.operator.clone(),
        online: false,
        busy: false,
        draining: false,
        paused: false,
        unusable: None,
        features: Vec::new(),
        grant_has_fs: false,
        local_fs_available: false,
        commands_enabled: false,
        shared_with_all_members: entry.shared_with_all_members,
        opted_in: entry.opted_in.clone(),
        operator_is_member: entry.operator_is_member,
    };
    let requester = Requester {
        user_id: user.to_owned(),
    };
    check_access(&requester, &view, &ExecuteTarget::default())
        .map(|_| ())
        .map_err(|denied: AccessDenied| Refused {
            status: 403,
            code: denied.code(),
            message: denied.to_string(),
        })
}

/// What the daemon is told to register for `wait`, on a context operated by `operator`.
pub(crate) fn spec(wait: &WaitEntry, operator: &str) -> WaitSpec {
    WaitSpec {
        operator: wait.requester == operator,
        wait_id: wait.id.as_str().into(),
        requester: wait.requester.clone(),
        source: wait.source.clone(),
        interval_ms: wait.interval_ms,
        expires_at_ms: wait.expires_at_ms,
    }
}

/// The stable execution id of `wait_id`'s continuation.
pub(crate) fn continuation_exec_id(wait_id: &str) -> String {
    format!("ex_{}", continuation_id(wait_id))
}

impl Dispatcher {
    /// Feeds a wait order for `context_id` (dropped by the core unless it is ready).
    fn order(&mut self, context_id: &str, order: WaitOrder) {
        let now = self.shared.clock.now();
        let input = Input::Wait {
            context_id: context_id.into(),
            order,
        };
        if let Err(e) = self.server.handle_input(now, input) {
            tracing::warn!(%context_id, error = %e, "the dispatcher refused a wait order");
        }
    }

    /// `context_id` is ready: registers every active wait again and asks again for every
    /// cancel not yet confirmed.
    pub(super) fn waits_ready(&mut self, context_id: &str) -> Result<(), StoreError> {
        let store = &self.shared.store;
        let open = off_the_runtime(|| store.open_waits(context_id))?;
        if open.is_empty() {
            return Ok(());
        }
        let operator = off_the_runtime(|| store.context(context_id))?
            .map(|c| c.operator)
            .unwrap_or_default();
        for wait in open {
            let order = match wait.state.as_str() {
                ACTIVE => WaitOrder::Register(spec(&wait, &operator)),
                CANCELLING => WaitOrder::Cancel {
                    wait_id: wait.id.into(),
                },
                _ => continue,
            };
            self.order(context_id, order);
        }
        Ok(())
    }

    /// A daemon's `wait.status`: kept for `show` (a failure to keep it is logged, not fatal).
    pub(super) fn wait_progress(&mut self, context_id: &str, frame: DaemonFrame) {
        let DaemonFrame::WaitStatus {
            wait_id,
            checks,
            consecutive_errors,
            last_error,
            next_check_at_ms,
        } = frame
        else {
            return;
        };
        let last_error = last_error.and_then(|e| serde_json::to_string(&e).ok());
        let store = &self.shared.store;
        let kept = off_the_runtime(|| {
            store.wait_progress(
                context_id,
                &wait_id,
                checks,
                consecutive_errors,
                last_error.as_deref(),
                next_check_at_ms,
            )
        });
        if let Err(e) = kept {
            tracing::warn!(%context_id, %wait_id, error = %e, "a wait's progress was not kept");
        }
    }

    /// A daemon's `wait.matched` / `wait.failed`: recorded once, then acknowledged (a repeat
    /// is acknowledged and changes nothing); a new match with a continuation starts it.
    pub(super) fn wait_ended(
        &mut self,
        context_id: &str,
        report: &Report,
    ) -> Result<(), StoreError> {
        let store = &self.shared.store;
        let recorded = off_the_runtime(|| store.record_wait_ending(context_id, report))?;
        self.order(
            context_id,
            WaitOrder::Ack {
                wait_id: report.wait_id.clone(),
            },
        );
        match recorded {
            Recorded::Now(wait) => {
                tracing::info!(%context_id, wait_id = %wait.id, state = %wait.state, "a wait ended");
                if wait.continuation_state == CONT_PENDING {
                    self.start_continuation(&wait)?;
                }
            }
            Recorded::Before(wait) => {
                tracing::debug!(%context_id, wait_id = %wait.id, "a wait's ending came again");
            }
            Recorded::Unknown => {
                tracing::warn!(%context_id, wait_id = %report.wait_id, "an ending for a wait this machine does not hold");
            }
        }
        Ok(())
    }

    /// Submits every continuation a crash left `pending` (once: see the module's notes).
    pub(super) fn resume_continuations(&mut self) -> Result<(), StoreError> {
        let store = &self.shared.store;
        for wait in off_the_runtime(|| store.pending_continuations())? {
            self.start_continuation(&wait)?;
        }
        Ok(())
    }

    /// Starts `wait`'s continuation as `POST /v1/executions` would, with the match's
    /// `outpost-wait.json` added to its files; or records why it starts nothing.
    fn start_continuation(&mut self, wait: &WaitEntry) -> Result<(), StoreError> {
        let exec_id = continuation_exec_id(&wait.id);
        let store = self.shared.store.clone();
        let settle = |state: &str, exec: Option<&str>, error: Option<&str>| {
            off_the_runtime(|| store.settle_continuation(&wait.id, state, exec, error))
        };
        // Submitted before a crash: its listing row is committed with its records.
        if off_the_runtime(|| store.execution(&exec_id))?.is_some() {
            settle(CONT_STARTED, Some(&exec_id), None)?;
            return Ok(());
        }
        let context = off_the_runtime(|| store.context(&wait.context_id))?;
        let allowed = match &context {
            Some(entry) => may_execute(entry, &wait.requester),
            None => Err(Refused {
                status: 404,
                code: "context_unknown",
                message: "the context was deleted".into(),
            }),
        };
        if let Err(refused) = allowed {
            tracing::info!(wait_id = %wait.id, code = refused.code, "a continuation's requester lost access");
            settle(CONT_ACCESS_LOST, None, Some(refused.code))?;
            return Ok(());
        }
        let mut request = match continuation_request(wait, &exec_id) {
            Ok(request) => request,
            Err(message) => {
                settle(CONT_REFUSED, None, Some(&message))?;
                return Ok(());
            }
        };
        // A large capability waits and runs from disk, as an execute's does.
        let store = self.shared.store.clone();
        let user = request.requester.user_id.clone();
        let inline = std::mem::replace(
            &mut request.capability,
            outpost_core::wire::CapabilitySource::Digest {
                sha256: String::new(),
                size: 0,
            },
        );
        request.capability =
            match super::off_the_runtime(|| crate::parking::park(&store, &user, inline)) {
                Ok(capability) => capability,
                Err(e) => {
                    let message = format!("its capability could not be stored: {e}");
                    settle(CONT_REFUSED, None, Some(&message))?;
                    return Ok(());
                }
            };
        let bundle = match &request.capability {
            outpost_core::wire::CapabilitySource::Digest { sha256, .. } => Some(sha256.clone()),
            outpost_core::wire::CapabilitySource::Inline { .. } => None,
        };
        let requested = match &request.target.context {
            Some(id) if *id == wait.context_id => wait.context_name.clone(),
            Some(id) => id.clone(),
            None => wait.context_name.clone(),
        };
        let entry = ExecutionEntry {
            id: exec_id.clone(),
            user: wait.requester.clone(),
            requested: Some(requested),
            status: outpost_core::server::ExecutionStatus::Pending,
            created_at: crate::clock::wall_now().0,
            bundle,
            ..ExecutionEntry::default()
        };
        match self.apply(Input::Execute(Box::new(request))) {
            Ok(()) => {
                self.listings.push(entry);
                self.continuations.push((wait.id.clone(), exec_id));
            }
            Err(e) => {
                settle(CONT_REFUSED, None, Some(&e.to_string()))?;
            }
        }
        Ok(())
    }
}

/// The execution `wait`'s stored continuation body asks for, with the match's file added.
fn continuation_request(wait: &WaitEntry, exec_id: &str) -> Result<ExecuteRequest, String> {
    let body = wait.then_json.as_deref().ok_or("no continuation")?;
    let decoded =
        crate::bodies::decode_execution_request(body.as_bytes()).map_err(|e| e.to_string())?;
    let manifest = decoded
        .manifest
        .ok_or("the continuation's capability is not inline")?;
    let CapabilitySource::Inline {
        manifest: text,
        mut files,
    } = decoded.capability
    else {
        return Err("the continuation's capability is not inline".into());
    };
    let payload: Value = wait
        .payload
        .as_deref()
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null);
    let file = json!({
        "waitId": wait.id,
        "resumeText": wait.resume_text.clone().unwrap_or_default(),
        "payload": payload,
    });
    files.retain(|f| f.path != WAIT_FILE);
    files.push(InlineFile {
        path: WAIT_FILE.into(),
        content_b64: b64::encode(file.to_string().as_bytes()),
    });
    let target = ExecuteTarget {
        context: decoded.context.or_else(|| Some(wait.context_id.clone())),
        fallback: decoded.fallback,
        requires: decoded.requires,
        when_offline: decoded.when_offline,
        when_busy: decoded.when_busy,
        wants_commands: decoded.wants_commands,
    };
    target.validate().map_err(|e| e.to_string())?;
    Ok(ExecuteRequest {
        exec_id: exec_id.into(),
        requester: Requester {
            user_id: wait.requester.clone(),
        },
        target,
        environment: manifest.environment,
        capability: CapabilitySource::Inline {
            manifest: text,
            files,
        },
        timeout_ms: manifest.limits.timeout_ms,
    })
}
