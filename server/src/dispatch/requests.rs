//! Changes to a machine that only its owner may make (docs/CLUSTER.md §3): a node asked to
//! change a grant, revoke a machine or update its access record while another node owns it
//! writes an owner request; the owner carries it out as its own input and answers, and the
//! asking route waits for that answer. A wait registered or cancelled through a node that
//! does not own its machine is a request too, answered without being waited on: the wait is
//! already in the database, and the owner sends the machine its open waits again.
//!
//! It owns the request's form (JSON, kept in the database) and both ends of the exchange. It
//! never carries a request out on a machine this node does not own.

use std::time::Duration;

use outpost_core::server::{ContextRecord, Input};
use outpost_core::session::WaitOrder;
use outpost_core::wire::Grant;
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
            OwnerRequest::Waits => return None,
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
            let answer = match serde_json::from_str::<OwnerRequest>(&body) {
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
