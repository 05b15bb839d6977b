//! Which rows an input changed, and the records the dispatcher queues for them.
//!
//! The dispatcher marks rows as it changes them (contexts and chains by the input that names
//! them, executions where they are placed, offered, committed or ended); at the end of each
//! input it writes the current row of every mark as a record, ahead of the input's outputs.
//! It never writes anything itself and never lets an output that depends on a change leave
//! the queue before that change's record.

use std::collections::BTreeSet;
use std::mem::take;

use crate::ids::{ContextId, ExecutionId};

use super::{
    ContextRow, EndedRow, ExecutionRow, PlaceRow, ServerChange, ServerRecord, ServerSnapshot,
};
use crate::routing::RanOn;
use crate::server::{ExecutionOutcome, Input, Output, Place, Server};
use crate::time::{Now, WallAnchor};

/// The rows touched since the last flush, and this process's wall-clock anchor.
pub(in crate::server) struct ServerJournal {
    anchor: WallAnchor,
    contexts: BTreeSet<ContextId>,
    chains: BTreeSet<String>,
    executions: BTreeSet<ExecutionId>,
    ended: Vec<EndedRow>,
    /// Rows of executions handed to another node, written as they were at the hand-off (the
    /// dispatcher holds them no more).
    handed: Vec<ExecutionRow>,
}

impl ServerJournal {
    /// A journal for a process whose clocks read `now` when it started.
    pub(in crate::server) fn new(now: Now) -> Self {
        Self {
            anchor: WallAnchor::new(now),
            contexts: BTreeSet::new(),
            chains: BTreeSet::new(),
            executions: BTreeSet::new(),
            ended: Vec::new(),
            handed: Vec::new(),
        }
    }

    /// Marks the rows `input` names (the context, chain or execution it changes directly).
    pub(in crate::server) fn touch_input(&mut self, input: &Input) {
        match input {
            Input::Register { record, .. } | Input::UpdateAccess(record) => {
                self.contexts.insert(record.id.as_str().into());
            }
            Input::UpdateGrant { context_id, .. } | Input::Revoke { context_id } => {
                self.contexts.insert(context_id.clone());
            }
            Input::SetChain { user_id, .. } => {
                self.chains.insert(user_id.clone());
            }
            Input::Execute(request) => {
                self.executions.insert(request.exec_id.clone());
            }
            Input::Timeout
            | Input::Connect { .. }
            | Input::Frame { .. }
            | Input::Disconnected { .. }
            | Input::CloudFinished { .. }
            | Input::Cancel { .. }
            | Input::Terminal { .. }
            // Waits are the host's records (its waits table), not the dispatcher's; control
            // requests are recorded nowhere but the host's audit.
            | Input::Wait { .. }
            | Input::Control { .. }
            // Ownership moves write nothing of their own: the node that owns a machine
            // writes its rows; what adopting decides is journaled as it happens.
            | Input::Elsewhere(_)
            | Input::Adopt(_)
            | Input::HandedOver(_)
            | Input::TakeOver(_) => {}
        }
    }

    /// Marks an execution whose place, route or hops changed.
    pub(in crate::server) fn touch_execution(&mut self, exec_id: &str) {
        if !self.executions.contains(exec_id) {
            self.executions.insert(exec_id.into());
        }
    }

    /// Records that an execution was handed to another node, as `row` (placed
    /// [`PlaceRow::HandedOff`]); it is no longer among the executions touched.
    pub(in crate::server) fn handed_off(&mut self, row: ExecutionRow) {
        self.executions.remove(&row.exec_id);
        self.handed.push(row);
    }

    /// Records that an execution ended, with what the host reports.
    pub(in crate::server) fn execution_ended(
        &mut self,
        exec_id: &str,
        outcome: &ExecutionOutcome,
        ran_on: Option<&RanOn>,
        line: &str,
        held_on: Option<&ContextId>,
    ) {
        self.ended.push(EndedRow {
            exec_id: exec_id.into(),
            outcome: outcome.clone(),
            ran_on: ran_on.cloned(),
            line: line.to_owned(),
            held_on: held_on.cloned(),
        });
    }

    /// `at` in this process's wall-clock milliseconds.
    pub(in crate::server) fn wall_ms(&self, at: crate::time::Instant) -> u64 {
        self.anchor.wall_ms(at)
    }
}

impl Server {
    /// Every live row now. Taken between inputs, after the host wrote every record polled so
    /// far, it equals the journal folded into an empty snapshot.
    pub fn snapshot(&self) -> ServerSnapshot {
        ServerSnapshot {
            written_ms: self.journal.wall_ms(self.now.instant),
            contexts: self
                .machines
                .ids()
                .filter_map(|id| self.context_row(id))
                .collect(),
            chains: self
                .chains
                .iter()
                .map(|(user_id, chain)| super::ChainRow {
                    user_id: user_id.clone(),
                    chain: chain.clone(),
                })
                .collect(),
            executions: self
                .executions
                .keys()
                .filter_map(|id| self.execution_row(id))
                .collect(),
        }
    }

    /// Queues a record for every row touched by the input whose outputs start at `mark`,
    /// ahead of those outputs.
    pub(in crate::server) fn flush_journal(&mut self, mark: usize) {
        let written_ms = self.journal.wall_ms(self.now.instant);
        let mut changes = Vec::new();
        for id in take(&mut self.journal.contexts) {
            if let Some(row) = self.context_row(&id) {
                changes.push(ServerChange::Context(row));
            }
        }
        for user_id in take(&mut self.journal.chains) {
            if let Some(chain) = self.chains.get(&user_id) {
                changes.push(ServerChange::Chain(super::ChainRow {
                    user_id,
                    chain: chain.clone(),
                }));
            }
        }
        for id in take(&mut self.journal.executions) {
            if let Some(row) = self.execution_row(&id) {
                changes.push(ServerChange::Execution(Box::new(row)));
            }
        }
        for row in take(&mut self.journal.handed) {
            changes.push(ServerChange::Execution(Box::new(row)));
        }
        for ended in take(&mut self.journal.ended) {
            changes.push(ServerChange::ExecutionEnded(Box::new(ended)));
        }
        if changes.is_empty() {
            return;
        }
        let tail = self.outputs.split_off(mark.min(self.outputs.len()));
        self.outputs.extend(
            changes
                .into_iter()
                .map(|change| Output::Persist(ServerRecord { written_ms, change })),
        );
        self.outputs.extend(tail);
    }

    /// The row of a machine this node owns (`None` for one owned elsewhere: another node
    /// writes its rows).
    fn context_row(&self, id: &str) -> Option<ContextRow> {
        let m = self.machines.get(id).filter(|m| !m.elsewhere)?;
        let (grant, version) = m.session.grant();
        Some(ContextRow::new(
            &m.record,
            grant,
            version,
            m.session.is_revoked(),
        ))
    }

    pub(in crate::server) fn execution_row(&self, exec_id: &str) -> Option<ExecutionRow> {
        let e = self.executions.get(exec_id)?;
        let place = match &e.place {
            Place::Unplaced => PlaceRow::Unplaced,
            Place::OnContext {
                context_id,
                run_id,
                started: false,
            } => PlaceRow::Offered {
                context_id: context_id.clone(),
                run_id: run_id.clone(),
            },
            Place::OnContext {
                context_id,
                run_id,
                started: true,
            } => {
                // A started run always has its lease in the session; should it not, it is
                // written as lost now rather than ever offered again.
                let now = self.now.instant;
                let (committed_at, lost_at) = self
                    .machines
                    .get(context_id)
                    .and_then(|m| m.session.lease(run_id))
                    .unwrap_or((now, now));
                PlaceRow::Committed {
                    context_id: context_id.clone(),
                    run_id: run_id.clone(),
                    committed_at_ms: self
                        .restored_commits
                        .get(run_id)
                        .copied()
                        .unwrap_or_else(|| self.journal.wall_ms(committed_at)),
                    lost_at_ms: self.journal.wall_ms(lost_at),
                }
            }
            Place::Queued { context_id, until } => PlaceRow::Queued {
                context_id: context_id.clone(),
                until_ms: self.journal.wall_ms(*until),
            },
            Place::OnCloud => PlaceRow::Cloud,
        };
        Some(ExecutionRow::new(
            &e.request,
            e.route.clone(),
            e.hops,
            place,
        ))
    }
}
