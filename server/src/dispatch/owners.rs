//! Which machines this node owns, and the fences that prove it (docs/CLUSTER.md §2): every
//! record the dispatcher writes for a machine is written under the epoch this node holds for
//! it, so a node that lost a machine to another can never commit anything for it.
//!
//! It owns the epochs held, the adoption of what a machine's previous owner recorded when its
//! daemon's WebSocket brings it here, and letting go of machines the owners' table says
//! another node took. It never decides routing, and never writes a machine's records itself.

use std::collections::HashMap;

use outpost_core::server::Input;

use super::Dispatcher;
use crate::store::{StoreError, off_the_runtime};

/// The machines of dead nodes a node adopts per heartbeat at most: the rest wait for the
/// next beat, so that the daemons coming back to this node get through in between.
const ADOPTED_PER_BEAT: usize = 500;

/// A node is live while its heartbeat is this recent (ms): a take from a node judged dead
/// checks it again in its own statement.
const LIVE_MS: u64 = crate::store::NODE_LIVE.as_millis() as u64;

/// The epochs this node holds, by context id.
pub(crate) struct Fences {
    node_id: String,
    epochs: HashMap<String, i64>,
}

impl Fences {
    /// The fences of node `node_id`, which holds `epochs` (what its start claimed).
    pub(crate) fn new(node_id: String, epochs: impl IntoIterator<Item = (String, i64)>) -> Self {
        Self {
            node_id,
            epochs: epochs.into_iter().collect(),
        }
    }

    /// This node's id, as the owners' table and the records name it.
    pub(crate) fn node_id(&self) -> &str {
        &self.node_id
    }
}

pub(crate) use crate::store::OwnerRow;

impl Dispatcher {
    /// The fence of every context `records` write for, claiming a context no node owns yet
    /// (one just registered through this node). A context another node owns is returned as
    /// it stands, held by nobody here: the write then fails its fence, as it must.
    pub(super) fn fence_for(
        &mut self,
        contexts: Vec<String>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut fence = Vec::with_capacity(contexts.len());
        for context_id in contexts {
            let epoch = match self.fences.epochs.get(&context_id) {
                Some(&epoch) => epoch,
                None => {
                    let store = &self.shared.store;
                    let node = &self.fences.node_id;
                    // Nobody's yet: epoch 1 is ours. Somebody else's: 0, which never matches.
                    let claimed =
                        off_the_runtime(|| store.claim_unowned_context(&context_id, node))?;
                    if let Some(epoch) = claimed {
                        self.fences.epochs.insert(context_id.clone(), epoch);
                    }
                    claimed.unwrap_or(0)
                }
            };
            fence.push((context_id, epoch));
        }
        Ok(fence)
    }

    /// Whether this node owns `context_id` (holds its fence, and knows it as its own).
    pub(super) fn owns(&self, context_id: &str) -> bool {
        self.fences.epochs.contains_key(context_id)
            && self.server.session(context_id).is_some()
            && !self.server.is_owned_elsewhere(context_id)
    }

    /// Holds each machine of `taken` (context id, epoch) just taken for this node as its
    /// daemon's WebSocket opens here (whoever held it before can write nothing more for it);
    /// unless this node held the epoch just before, what it knows of the machine is replaced
    /// by the records (the previous owner's runs, queue and offers), all of them read in one
    /// query. Fed, not drained: the batch's connects follow.
    pub(super) fn took(&mut self, taken: &[(String, i64)]) -> Result<(), StoreError> {
        let mut adopt = Vec::new();
        for (context_id, epoch) in taken {
            let held_before = self.fences.epochs.insert(context_id.clone(), *epoch);
            if held_before != Some(epoch - 1) || self.server.is_owned_elsewhere(context_id) {
                adopt.push(context_id.clone());
            }
        }
        if adopt.is_empty() {
            return Ok(());
        }
        let store = &self.shared.store;
        let mut snapshots = match off_the_runtime(|| store.context_snapshots(&adopt)) {
            Ok(snapshots) => snapshots,
            Err(e) => {
                // Not held without what the records say: the next connect takes and adopts
                // again, rather than keep what this node knew before another node's runs.
                for context_id in &adopt {
                    self.fences.epochs.remove(context_id);
                }
                return Err(e);
            }
        };
        let now = self.shared.clock.now();
        for context_id in adopt {
            // Registered, never recorded: nothing to adopt, the registration's row comes.
            let Some(snapshot) = snapshots.remove(&context_id) else {
                continue;
            };
            tracing::info!(
                context = context_id,
                "this node takes a machine another node held"
            );
            if let Err(e) = self
                .server
                .handle_input(now, Input::Adopt(Box::new(snapshot)))
            {
                tracing::warn!(error = %e, context = context_id, "a machine was not adopted");
            }
        }
        Ok(())
    }

    /// Makes sure the dispatcher knows machine `context_id` before something names it: one
    /// registered through another node moments ago (before this node's next heartbeat) is
    /// learnt now from its records, as owned elsewhere. A name that is no machine (`cloud`,
    /// or one the routes refused already) changes nothing; a database that does not answer
    /// is the error.
    pub(super) fn learn_machine(&mut self, context_id: &str) -> Result<(), StoreError> {
        if context_id == outpost_core::routing::CLOUD_ID
            || self.server.session(context_id).is_some()
        {
            return Ok(());
        }
        let store = &self.shared.store;
        let row = off_the_runtime(|| store.context_snapshot(context_id))?
            .and_then(|s| s.contexts.into_iter().next());
        if let Some(row) = row {
            let now = self.shared.clock.now();
            if let Err(e) = self
                .server
                .handle_input(now, Input::Elsewhere(Box::new(row)))
            {
                tracing::warn!(error = %e, context = context_id, "a machine was not learnt");
            }
        }
        Ok(())
    }

    /// Lets `context_id` go if its owner row says another node took it, within the batch
    /// being fed (its outputs are carried out with the batch's; nothing is written): a
    /// database that does not answer changes nothing here (the write that follows is fenced).
    pub(super) fn let_go_if_taken(&mut self, context_id: &str) {
        let store = &self.shared.store;
        let row = match off_the_runtime(|| store.context_owner(context_id)) {
            Ok(row) => row,
            Err(e) => {
                tracing::warn!(error = %e, context = context_id, "a machine's owner was not read");
                return;
            }
        };
        let held = self.fences.epochs.get(context_id).copied();
        let Some((node, epoch)) = row else { return };
        if node == self.fences.node_id && Some(epoch) == held {
            return;
        }
        let snapshot = match off_the_runtime(|| store.context_snapshot(context_id)) {
            Ok(snapshot) => snapshot,
            Err(_) => return,
        };
        if let Some(row) = snapshot.and_then(|s| s.contexts.into_iter().next()) {
            self.fences.epochs.remove(context_id);
            let now = self.shared.clock.now();
            let _ = self
                .server
                .handle_input(now, Input::Elsewhere(Box::new(row)));
        }
    }

    /// Reads the owner rows of `ids` and lets go each one another node took.
    pub(super) fn check_owners(&mut self, ids: &[String]) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            let store = &self.shared.store;
            if let Some((node, epoch)) = off_the_runtime(|| store.context_owner(id))? {
                rows.push((id.clone(), node, epoch));
            }
        }
        self.on_owners(rows)
    }

    /// Compares the owners' table with the fences held: a context another node has taken is
    /// let go (its connection here closed, its executions forgotten: they are the new
    /// owner's), and a context this node never knew is learnt as owned elsewhere — their
    /// records read together, a few queries for thousands of machines.
    pub(super) fn on_owners(&mut self, rows: Vec<OwnerRow>) -> Result<(), StoreError> {
        let mut moved = Vec::new();
        for (context_id, node_id, epoch) in rows {
            if context_id.starts_with(crate::store::NODE_FENCE) {
                // A node's own fence, not a machine (this node's moves only if it was judged
                // dead: its next write of its own executions then fails, and it stops).
                continue;
            }
            let held = self.fences.epochs.get(&context_id).copied();
            let taken_from_us = match held {
                // Epochs only grow: a row at or below the one held is this node's own (or
                // was read before this node's latest take).
                Some(mine) => epoch > mine,
                None => {
                    node_id != self.fences.node_id && !self.server.is_owned_elsewhere(&context_id)
                }
            };
            if taken_from_us {
                if held.is_some() {
                    tracing::info!(
                        context = context_id,
                        owner = node_id,
                        "another node took a machine this node held: it lets it go"
                    );
                }
                moved.push(context_id);
            }
        }
        if moved.is_empty() {
            return Ok(());
        }
        let store = &self.shared.store;
        let mut snapshots = off_the_runtime(|| store.context_snapshots(&moved))?;
        let now = self.shared.clock.now();
        for context_id in moved {
            let Some(row) = snapshots
                .remove(&context_id)
                .and_then(|s| s.contexts.into_iter().next())
            else {
                continue;
            };
            self.fences.epochs.remove(&context_id);
            if let Err(e) = self
                .server
                .handle_input(now, Input::Elsewhere(Box::new(row)))
            {
                tracing::warn!(error = %e, context = context_id, "a machine was not let go");
            }
        }
        self.drain()
    }

    /// Reads this node's inbox: takes in the executions other nodes handed to the machines
    /// it owns (each counted here from now on), cancels the executions it holds that a node
    /// was asked to cancel, and carries out what other nodes asked of its machines.
    pub(super) fn read_inbox(&mut self) -> Result<(), StoreError> {
        let (store, node) = (&self.shared.store, &self.fences.node_id);
        let handed = off_the_runtime(|| store.take_handoffs(node))?;
        if !handed.is_empty() {
            for row in &handed {
                if !self.server.holds(&row.exec_id) && self.pending.add(&row.request()) {
                    self.received
                        .insert(row.exec_id.clone(), self.shared.clock.now().instant);
                }
            }
            tracing::debug!(
                count = handed.len(),
                "took executions other nodes handed here"
            );
            self.feed(Input::HandedOver(handed))?;
        }
        let store = &self.shared.store;
        let cancels = off_the_runtime(|| store.cancel_requests())?;
        for exec_id in cancels {
            if self.server.holds(&exec_id) {
                self.feed(Input::Cancel {
                    exec_id: exec_id.into(),
                })?;
            }
        }
        self.answer_owner_requests()
    }

    /// Takes what nodes judged dead owned: each machine (its epoch moves on, and its runs,
    /// queue and offers are adopted from the records, so its leases, queue deadlines and
    /// waits keep firing here), at most [`ADOPTED_PER_BEAT`] of them per heartbeat, in one
    /// transaction and one read; and each dead node's executions no machine holds (taken in:
    /// an unplaced one is planned, one on that node's executor ends `lost`). A row another
    /// node moved first is left to it.
    pub(super) fn take_from_the_dead(&mut self, rows: Vec<OwnerRow>) -> Result<(), StoreError> {
        let mut machines = Vec::new();
        for (id, dead, epoch) in rows {
            if dead == self.fences.node_id {
                continue;
            }
            let store = &self.shared.store;
            let node = &self.fences.node_id;
            if let Some(dead_node) = id.strip_prefix(crate::store::NODE_FENCE) {
                let taken = match off_the_runtime(|| {
                    store.take_over_node(dead_node, epoch, node, LIVE_MS)
                }) {
                    Ok(taken) => taken,
                    Err(e) => {
                        // As for machines below: this beat's take, not the dispatcher.
                        tracing::warn!(error = %e, node = dead_node, "a dead node's executions were not taken this beat");
                        continue;
                    }
                };
                if let Some(rows) = taken.filter(|rows| !rows.is_empty()) {
                    tracing::info!(
                        node = dead_node,
                        count = rows.len(),
                        "this node takes over a dead node's executions"
                    );
                    for row in &rows {
                        if !self.server.holds(&row.exec_id) {
                            self.pending.add(&row.request());
                        }
                    }
                    self.feed(Input::TakeOver(rows))?;
                }
                continue;
            }
            machines.push((id, dead, epoch));
        }
        // Each live node takes its own share first (an order of its own, by a hash of its id
        // and the machine's), so that two nodes adopting at once spend their beats on
        // different machines rather than racing for the same ones; the share is then taken in
        // context order, the order every take locks rows in, so that no two deadlock.
        let node = &self.fences.node_id;
        let mut keyed: Vec<(u64, OwnerRow)> = machines
            .into_iter()
            .map(|row| (spread(node, &row.0), row))
            .collect();
        if keyed.len() > ADOPTED_PER_BEAT {
            keyed.select_nth_unstable_by_key(ADOPTED_PER_BEAT, |(key, _)| *key);
            keyed.truncate(ADOPTED_PER_BEAT);
        }
        let mut machines: Vec<OwnerRow> = keyed.into_iter().map(|(_, row)| row).collect();
        machines.sort();
        // A database that refuses (two nodes' takes waiting on each other) or does not
        // answer costs this beat's adoption, not the dispatcher: the next beat tries again.
        let (store, node) = (&self.shared.store, &self.fences.node_id);
        let taken = match off_the_runtime(|| store.take_contexts_from(&machines, node, LIVE_MS)) {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(error = %e, "dead nodes' machines were not taken this beat");
                return Ok(());
            }
        };
        if taken.is_empty() {
            return Ok(());
        }
        tracing::info!(count = taken.len(), "this node takes dead nodes' machines");
        let ids: Vec<String> = taken.iter().map(|(id, _)| id.clone()).collect();
        let store = &self.shared.store;
        let mut snapshots = match off_the_runtime(|| store.context_snapshots(&ids)) {
            Ok(snapshots) => snapshots,
            Err(e) => {
                // Taken but not held here: a write for them fails its fence, and a daemon's
                // connect takes and adopts them afresh; a beat judges them again.
                tracing::warn!(error = %e, "dead nodes' machines taken were not read");
                return Ok(());
            }
        };
        self.fences.epochs.extend(taken);
        let now = self.shared.clock.now();
        for id in ids {
            if let Some(snapshot) = snapshots.remove(&id)
                && let Err(e) = self
                    .server
                    .handle_input(now, Input::Adopt(Box::new(snapshot)))
            {
                tracing::warn!(error = %e, context = id, "a dead node's machine was not adopted");
            }
        }
        self.drain()
    }
}

/// A number that orders machines differently for each node and the same way at each beat:
/// the first 8 bytes of SHA-256 over the node's id and the machine's.
fn spread(node: &str, context: &str) -> u64 {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::new()
        .chain_update(node)
        .chain_update([0])
        .chain_update(context)
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::{ADOPTED_PER_BEAT, spread};

    /// The first share of each of two nodes, of 10,000 machines.
    fn share(node: &str) -> Vec<String> {
        let mut ids: Vec<String> = (0..10_000).map(|i| format!("ec_{i:05}")).collect();
        ids.sort_by_cached_key(|id| spread(node, id));
        ids.truncate(ADOPTED_PER_BEAT);
        ids
    }

    #[test]
    fn two_nodes_adopting_at_once_start_on_different_machines() {
        let (a, b) = (share("nd_a"), share("nd_b"));
        assert_eq!(a, share("nd_a"), "the same order at every beat");
        let overlap = a.iter().filter(|id| b.contains(id)).count();
        // Independent shares of 500 in 10,000 meet in about 25 machines.
        assert!(overlap < 60, "{overlap} machines in both first shares");
    }
}
