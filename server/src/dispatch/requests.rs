//! Changes to a machine that only its owner may make (docs/CLUSTER.md §3): a node asked to
//! change a grant, revoke a machine or update its access record while another node owns it
//! writes an owner request; the owner carries it out as its own input and answers, and the
//! asking route waits for that answer. A wait registered or cancelled through a node that
//! does not own its machine is a request too, answered without being waited on: the wait is
//! already in the database, and the owner sends the machine its open waits again. A request
//! for the daemon itself (pause, resume, restart, update, logs) is answered with the daemon's
//! own answer, once it comes.
//!
//! It owns the request's form (JSON, kept in the database) and both ends of the exchange. It
//! never carries a request out on a machine this node does not own.

use std::time::Duration;

use outpost_core::server::{ContextRecord, Input};
use outpost_core::session::{ControlAnswer, ControlOrder, WaitOrder};
use outpost_core::wire::Grant;
use outpost_core::wire::{ControlAction, ControlOutcome};
use serde::{Deserialize, Serialize};

use super::Dispatcher;
use crate::store::{StoreError, off_the_runtime};

/// How long a route waits for the owner's answer.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// What a node asks of a machine's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub(crate) enum OwnerRequest {
    /// Put this grant in force.
    Grant {
        /// The grant.
        grant: Grant,
    },
    /// Revoke the machine.
    Revoke,
    /// Its access record is now this.
    Access {
        /// Its name.
        name: String,
        /// Its operator.
        operator: String,
        /// Whether the operator is still a member.
        operator_is_member: bool,
        /// Whether every member may use it.
        shared_with_all_members: bool,
        /// Who opted in.
        opted_in: Vec<String>,
    },
    /// Send the machine its open waits and cancels again, as when it comes up: one was
    /// registered or cancelled through another node.
    Waits,
    /// Ask the machine's daemon this (PROTOCOL §4.7); the answer is the daemon's
    /// ([`SharedControlAnswer`]).
    Control {
        /// The request's id.
        control_id: String,
        /// What to do.
        action: ControlAction,
        /// For `logs`: how many lines.
        lines: u32,
    },
}

/// A daemon's answer to a request from afar, as the owner writes it for the asking node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SharedControlAnswer {
    action: String,
    outcome: ControlOutcome,
    code: String,
    message: String,
    lines: Vec<String>,
    from_daemon: bool,
}

impl SharedControlAnswer {
    /// The answer to write.
    fn of(answer: &ControlAnswer) -> Self {
        Self {
            action: answer.action.clone(),
            outcome: answer.outcome,
            code: answer.code.clone(),
            message: answer.message.clone(),
            lines: answer.lines.clone(),
            from_daemon: answer.from_daemon,
        }
    }

    /// The answer to order `control_id`, as the asking node's route gives it.
    pub(crate) fn into_answer(self, control_id: String) -> ControlAnswer {
        ControlAnswer {
            control_id,
            action: self.action,
            outcome: self.outcome,
            code: self.code,
            message: self.message,
            lines: self.lines,
            from_daemon: self.from_daemon,
        }
    }
}

impl OwnerRequest {
    /// The request that carries `input` to a machine's owner, and that machine; `None` for
    /// an input no owner request carries.
    pub(crate) fn of(input: &Input) -> Option<(String, OwnerRequest)> {
        match input {
            Input::UpdateGrant { context_id, grant } => Some((
                context_id.to_string(),
                OwnerRequest::Grant {
                    grant: grant.clone(),
                },
            )),
            Input::Revoke { context_id } => Some((context_id.to_string(), OwnerRequest::Revoke)),
            Input::Wait {
                context_id,
                order: WaitOrder::Register(_) | WaitOrder::Cancel { .. },
            } => Some((context_id.to_string(), OwnerRequest::Waits)),
            Input::UpdateAccess(record) => Some((
                record.id.to_string(),
                OwnerRequest::Access {
                    name: record.name.clone(),
                    operator: record.operator.clone(),
                    operator_is_member: record.operator_is_member,
                    shared_with_all_members: record.shared_with_all_members,
                    opted_in: record.opted_in.clone(),
                },
            )),
            _ => None,
        }
    }

    /// Whether the asking route waits for the owner's answer (a wait order does not: the
    /// wait is stored already, and the owner sends it whenever it can).
    pub(crate) fn answer_awaited(&self) -> bool {
        !matches!(self, OwnerRequest::Waits)
    }

    /// The request that carries `order` to the daemon of a machine another node owns.
    pub(crate) fn control(order: &ControlOrder) -> Self {
        OwnerRequest::Control {
            control_id: order.control_id.clone(),
            action: order.action,
            lines: order.lines,
        }
    }

    /// The input the owner feeds for machine `context_id` (none for [`OwnerRequest::Waits`]).
    fn into_input(self, context_id: &str) -> Option<Input> {
        Some(match self {
            OwnerRequest::Grant { grant } => Input::UpdateGrant {
                context_id: context_id.into(),
                grant,
            },
            OwnerRequest::Revoke => Input::Revoke {
                context_id: context_id.into(),
            },
            OwnerRequest::Access {
                name,
                operator,
                operator_is_member,
                shared_with_all_members,
                opted_in,
            } => Input::UpdateAccess(ContextRecord {
                id: context_id.into(),
                name,
                operator,
                operator_is_member,
                shared_with_all_members,
                opted_in,
            }),
            OwnerRequest::Waits | OwnerRequest::Control { .. } => return None,
        })
    }
}

impl Dispatcher {
    /// Carries out the requests other nodes asked of the machines this node owns, each as
    /// its own input whose records are committed before it is answered.
    pub(super) fn answer_owner_requests(&mut self) -> Result<(), StoreError> {
        let (store, node) = (&self.shared.store, self.fences.node_id());
        let asked = off_the_runtime(|| store.take_owner_requests(node))?;
        for (id, context_id, body) in asked {
            let request = serde_json::from_str::<OwnerRequest>(&body);
            if let Ok(OwnerRequest::Control {
                control_id,
                action,
                lines,
            }) = request
            {
                let order = ControlOrder {
                    control_id,
                    action,
                    lines,
                };
                self.ask_daemon_for(id, context_id, order)?;
                continue;
            }
            let answer = match request {
                Ok(request) => match request.into_input(&context_id) {
                    Some(input) => {
                        let applied = self.apply(input);
                        // Its records are committed before the answer says done.
                        self.drain()?;
                        applied.map_err(|declined| declined.to_string())
                    }
                    None => {
                        let sent = self.waits_ready(&context_id).map_err(|e| e.to_string());
                        self.drain()?;
                        sent
                    }
                },
                Err(e) => Err(format!("a request this node cannot read: {e}")),
            };
            let store = &self.shared.store;
            let (done, why) = match &answer {
                Ok(()) => (true, ""),
                Err(why) => (false, why.as_str()),
            };
            off_the_runtime(|| store.answer_owner_request(&id, done, why))?;
        }
        Ok(())
    }
}

impl Dispatcher {
    /// Asks this node's daemon of `context_id` for another node's request `id`, and writes
    /// the daemon's answer for that node when it comes (or that none came within
    /// [`crate::Limits::CONTROL_ANSWER`]).
    fn ask_daemon_for(
        &mut self,
        id: String,
        context_id: String,
        order: ControlOrder,
    ) -> Result<(), StoreError> {
        let (reply, answered) = tokio::sync::oneshot::channel();
        self.controls
            .insert(order.control_id.clone(), (context_id.clone(), reply));
        if let Err(e) = self.server.handle_input(
            self.shared.clock.now(),
            Input::Control {
                context_id: context_id.into(),
                order,
            },
        ) {
            tracing::warn!(error = %e, "a request from afar was refused");
        }
        self.drain()?;
        let store = self.shared.store.clone();
        tokio::spawn(async move {
            let (done, text) = match tokio::time::timeout(crate::Limits::CONTROL_ANSWER, answered)
                .await
            {
                Ok(Ok(answer)) => (
                    true,
                    serde_json::to_string(&SharedControlAnswer::of(&answer)).unwrap_or_default(),
                ),
                _ => (false, "the daemon did not answer".to_owned()),
            };
            let written =
                tokio::task::spawn_blocking(move || store.answer_owner_request(&id, done, &text))
                    .await;
            if !matches!(written, Ok(Ok(()))) {
                tracing::warn!("the answer to a request from afar was not written");
            }
        });
        Ok(())
    }
}
