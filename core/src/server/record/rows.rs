//! The rows of the dispatcher's records, and their conversions to and from its types. Rows
//! hold wall-clock milliseconds, never an [`Instant`](crate::time::Instant), and no
//! connection or ticket state: those die with the process.

use crate::ids::{ContextId, ExecutionId, RunId};
use serde::{Deserialize, Serialize};

use crate::routing::{Chain, ExecuteTarget, RanOn, Requester, Route};
use crate::server::{ContextRecord, ExecuteRequest, ExecutionOutcome};
use crate::wire::{CapabilitySource, Environment, Grant};

/// A registered context: who may use it and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextRow {
    /// The machine's registered id (`ec_…`): the row's key, replaced by any later row with it.
    pub id: ContextId,
    /// Its friendly name.
    pub name: String,
    /// The user who runs the daemon.
    pub operator: String,
    /// Whether the operator is still a member of the org.
    pub operator_is_member: bool,
    /// Whether every member may use it.
    pub shared_with_all_members: bool,
    /// Users who opted in to shared runs.
    pub opted_in: Vec<String>,
    /// The grant in force.
    pub grant: Grant,
    /// Its version: only ever grows, and a restarted server keeps counting from it.
    pub grant_version: u64,
    /// Revoked for good.
    pub revoked: bool,
}

impl ContextRow {
    /// The access record part of the row.
    pub fn record(&self) -> ContextRecord {
        ContextRecord {
            id: self.id.clone(),
            name: self.name.clone(),
            operator: self.operator.clone(),
            operator_is_member: self.operator_is_member,
            shared_with_all_members: self.shared_with_all_members,
            opted_in: self.opted_in.clone(),
        }
    }

    pub(super) fn new(record: &ContextRecord, grant: &Grant, version: u64, revoked: bool) -> Self {
        Self {
            id: record.id.clone(),
            name: record.name.clone(),
            operator: record.operator.clone(),
            operator_is_member: record.operator_is_member,
            shared_with_all_members: record.shared_with_all_members,
            opted_in: record.opted_in.clone(),
            grant: grant.clone(),
            grant_version: version,
            revoked,
        }
    }
}

/// A user's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChainRow {
    /// The user id the chain belongs to: the row's key.
    pub user_id: String,
    /// The machines to try in order, then perhaps `cloud`, when an execute names none.
    pub chain: Chain,
}

/// An execution that has not ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionRow {
    /// Unique per server.
    pub exec_id: ExecutionId,
    /// The requesting user, whose access is checked again on every hop.
    pub requester: Requester,
    /// Where it may run.
    pub target: ExecuteTarget,
    /// The capability's environment.
    pub environment: Environment,
    /// What to run, inline or by digest, kept so a restarted server can offer it again.
    pub capability: CapabilitySource,
    /// Its time budget once committed.
    pub timeout_ms: u64,
    /// The walk along its candidates so far (absent until it got a place).
    pub route: Option<Route>,
    /// Runs offered so far: the next offer is `{execId}.{hops + 1}`, so a run id is never
    /// reused, across restarts too.
    pub hops: u32,
    /// Where it is.
    pub place: PlaceRow,
}

impl ExecutionRow {
    /// The execute request the row was made from.
    pub fn request(&self) -> ExecuteRequest {
        ExecuteRequest {
            exec_id: self.exec_id.clone(),
            requester: self.requester.clone(),
            target: self.target.clone(),
            environment: self.environment,
            capability: self.capability.clone(),
            timeout_ms: self.timeout_ms,
        }
    }

    pub(super) fn new(
        request: &ExecuteRequest,
        route: Option<Route>,
        hops: u32,
        place: PlaceRow,
    ) -> Self {
        Self {
            exec_id: request.exec_id.clone(),
            requester: request.requester.clone(),
            target: request.target.clone(),
            environment: request.environment,
            capability: request.capability.clone(),
            timeout_ms: request.timeout_ms,
            route,
            hops,
            place,
        }
    }
}

/// Where a live execution is. Times are wall-clock milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "at",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum PlaceRow {
    /// Received, not yet planned.
    Unplaced,
    /// Offered to a context as `run_id`, not committed: nothing runs. After a restart the
    /// offer is gone with its connection and the execution moves on to its next candidate.
    Offered {
        /// The machine the run was offered to.
        context_id: ContextId,
        /// The run id the context was offered.
        run_id: RunId,
    },
    /// Committed on a context: it may be running there. Never offered anywhere else; it ends
    /// with its result, `lost` at `lost_at_ms`, or `lost` when the daemon says hello without it.
    Committed {
        /// The machine the run is committed on; the execution never leaves it.
        context_id: ContextId,
        /// The run id the machine holds (`{execId}.{hops}`), as its `hello` lists it.
        run_id: RunId,
        /// When the server committed it.
        committed_at_ms: u64,
        /// When its lease ends (deadline + grace).
        lost_at_ms: u64,
    },
    /// Waiting for an offline context to come back.
    Queued {
        /// The context waited for.
        context_id: ContextId,
        /// When it fails with `execution_context_queue_expired`.
        until_ms: u64,
    },
    /// On the server's own executor. That executor dies with the process: after a restart
    /// the execution ends `lost`.
    Cloud,
    /// Handed to the node of a cluster that owns `context_id`, whose route reached it
    /// (docs/CLUSTER.md §3): nothing runs yet. The owner takes it in ([`Input::HandedOver`])
    /// and goes on from there — it plans a named execution afresh, and a chain's walk
    /// resumes at that machine; whoever owns the machine next takes it if that owner did not.
    ///
    /// [`Input::HandedOver`]: crate::server::Input::HandedOver
    HandedOff {
        /// The machine whose owner takes the execution in.
        context_id: ContextId,
    },
}

impl PlaceRow {
    /// The machine the row places the execution on (offered, committed, queued or handed
    /// to its owner), whose owner holds the execution; `None` for one unplaced or on the
    /// server's own executor.
    pub fn context_id(&self) -> Option<&ContextId> {
        match self {
            PlaceRow::Offered { context_id, .. }
            | PlaceRow::Committed { context_id, .. }
            | PlaceRow::Queued { context_id, .. }
            | PlaceRow::HandedOff { context_id } => Some(context_id),
            PlaceRow::Unplaced | PlaceRow::Cloud => None,
        }
    }
}

/// An ended execution: its outcome is the delivered result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndedRow {
    /// The execution that ended; its [`ExecutionRow`] goes with this row.
    pub exec_id: ExecutionId,
    /// How it ended: the dispatcher's own outcome, tagged by `outcome`.
    pub outcome: ExecutionOutcome,
    /// Where it ran and what was tried (absent when it never got a place).
    pub ran_on: Option<RanOn>,
    /// One friendly sentence.
    pub line: String,
    /// The machine it was held on when it ended (offered, committed or queued there):
    /// in a cluster, only that machine's owner may write this row. Absent for one unplaced
    /// or on the server's executor, and in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_on: Option<ContextId>,
}
