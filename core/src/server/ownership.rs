//! Which machines this dispatcher owns when several nodes of a cluster share one database
//! (docs/CLUSTER.md §2): a machine owned elsewhere is known by its row alone — no connection,
//! no execution placed on it, no row journaled for it — until this node adopts it from the
//! records the owner before it wrote.
//!
//! It owns the two moves (letting a machine go, taking one in) and the refusal of inputs that
//! name a machine owned elsewhere. It never decides who owns what: the host does, by its
//! fences in the database, and tells the dispatcher with [`Input::Elsewhere`] and
//! [`Input::Adopt`].

use crate::ids::{ContextId, ExecutionId};

use super::record::{ContextRow, ExecutionRow, PlaceRow, ServerSnapshot};
use super::{Command, Execution, Input, Output, Place, Server, ServerError};
use crate::session;
use crate::wire::close_code;

/// The close reason of a connection left on a node that no longer owns its machine.
pub const OWNED_ELSEWHERE_CLOSE: &str = "owned_elsewhere";

impl Server {
    /// Whether another node owns `context_id` (it is known here by its row alone).
    pub fn is_owned_elsewhere(&self, context_id: &str) -> bool {
        self.machines.get(context_id).is_some_and(|m| m.elsewhere)
    }

    /// The machine owned elsewhere that `input` would change or speak to, if any: such an
    /// input is refused whole, before anything is marked for the journal.
    pub(super) fn names_elsewhere(&self, input: &Input) -> Option<ContextId> {
        let named = match input {
            Input::Register { record, .. } | Input::UpdateAccess(record) => &record.id,
            Input::Connect { context_id, .. }
            | Input::UpdateGrant { context_id, .. }
            | Input::Revoke { context_id }
            | Input::Wait { context_id, .. }
            | Input::Control { context_id, .. } => context_id,
            _ => return None,
        };
        self.is_owned_elsewhere(named).then(|| named.clone())
    }

    /// [`Input::Elsewhere`]: see there.
    pub(super) fn release(&mut self, row: &ContextRow) {
        let id = row.id.as_str();
        self.forget_machine_state(id);
        let mut machine = self.machine_from_row(row, self.now);
        machine.elsewhere = true;
        match self.machines.slot(id) {
            Some(slot) => {
                *self.machines.at_mut(slot) = machine;
                let wake = self.machines.at(slot).session.poll_timeout();
                self.session_wakes.set(slot, wake);
            }
            None => self.add_machine(id.to_owned(), machine),
        }
    }

    /// [`Input::Adopt`]: see there.
    pub(super) fn adopt(&mut self, snapshot: &ServerSnapshot) -> Result<(), ServerError> {
        let [row] = snapshot.contexts.as_slice() else {
            return Err(ServerError::AdoptWithoutContext);
        };
        let id = row.id.as_str();
        self.forget_machine_state(id);
        let machine = self.machine_from_row(row, self.now);
        match self.machines.slot(id) {
            Some(slot) => *self.machines.at_mut(slot) = machine,
            None => self.add_machine(id.to_owned(), machine),
        }
        // Only the rows placed on this machine: anything else in the snapshot is not its.
        let placed: Vec<_> = snapshot
            .executions
            .iter()
            .filter(|e| e.place.context_id().is_some_and(|c| c.as_str() == id))
            .cloned()
            .collect();
        let installed = self.install_executions(&placed, snapshot.written_ms, self.now);
        // The session's timers (its restored leases) reach the wake-up table the usual way.
        self.feed_or_report(id, session::Input::Timeout);
        self.settle_installed(installed);
        Ok(())
    }

    /// Hands `exec_id` (its route now at `context_id`, a machine owned elsewhere) to that
    /// machine's owner: its row is written placed [`PlaceRow::HandedOff`], and this
    /// dispatcher forgets it.
    pub(super) fn hand_off(&mut self, exec_id: &str, context_id: ContextId) {
        let Some(mut row) = self.execution_row(exec_id) else {
            return;
        };
        row.place = PlaceRow::HandedOff {
            context_id: context_id.clone(),
        };
        let exec_id = ExecutionId::new(exec_id);
        self.forget_execution(&exec_id);
        self.journal.handed_off(row);
        self.outputs.push_back(Output::Command(Command::HandOff {
            exec_id,
            context_id,
        }));
    }

    /// [`Input::HandedOver`]: see there.
    pub(super) fn take_handed_over(&mut self, rows: &[ExecutionRow]) {
        let mine: Vec<ExecutionRow> = rows
            .iter()
            .filter(|row| match &row.place {
                PlaceRow::HandedOff { context_id } => {
                    self.machines.contains(context_id.as_str())
                        && !self.is_owned_elsewhere(context_id.as_str())
                }
                _ => false,
            })
            .cloned()
            .collect();
        // A handed-off row holds no time: where it was written does not matter.
        let written = self.journal.wall_ms(self.now.instant);
        let installed = self.install_executions(&mine, written, self.now);
        self.settle_installed(installed);
    }

    /// [`Input::TakeOver`]: see there.
    pub(super) fn take_over(&mut self, rows: &[ExecutionRow]) {
        let theirs: Vec<ExecutionRow> = rows
            .iter()
            .filter(|row| matches!(row.place, PlaceRow::Unplaced | PlaceRow::Cloud))
            .cloned()
            .collect();
        let written = self.journal.wall_ms(self.now.instant);
        let installed = self.install_executions(&theirs, written, self.now);
        self.settle_installed(installed);
    }

    /// Closes the connection a machine has here and forgets every execution placed on it,
    /// writing nothing: its records are its owner's.
    fn forget_machine_state(&mut self, context_id: &str) {
        if let Some(slot) = self.machines.slot(context_id) {
            let conns: Vec<_> = self
                .conns
                .iter()
                .filter(|(_, s)| **s == slot)
                .map(|(c, _)| *c)
                .collect();
            for conn in conns {
                self.conns.remove(&conn);
                self.outputs.push_back(Output::Close {
                    conn,
                    code: close_code::GOING_AWAY,
                    reason: OWNED_ELSEWHERE_CLOSE.to_owned(),
                });
            }
        }
        let placed: Vec<ExecutionId> =
            self.executions
                .iter()
                .filter(|(_, e)| match &e.place {
                    Place::OnContext { context_id: c, .. }
                    | Place::Queued { context_id: c, .. } => c.as_str() == context_id,
                    Place::Unplaced | Place::OnCloud => false,
                })
                .map(|(id, _)| id.clone())
                .collect();
        for exec_id in placed {
            self.forget_execution(&exec_id);
        }
    }

    /// Drops `exec_id` and its run and deadline from this dispatcher, recording nothing.
    fn forget_execution(&mut self, exec_id: &ExecutionId) {
        if let Some(Execution {
            place: Place::OnContext { run_id, .. },
            ..
        }) = self.executions.remove(exec_id)
        {
            self.runs.remove(&run_id);
            self.restored_commits.remove(&run_id);
        }
        self.queue_wakes.set(exec_id, None);
    }
}
