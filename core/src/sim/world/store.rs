//! The simulation's shared database: what every node of a cluster writes its records to, as
//! the PostgreSQL store does (docs/CLUSTER.md) — one row per kind and key, the last record
//! written for it, an execution's deleted when it ends (the end is not kept as a record);
//! the fences (`context_owner`), the hand-offs not yet taken, and the nodes'
//! heartbeats, judged by this store's clock alone.
//!
//! It owns the database's rules: a batch is written whole or not at all, and only when the
//! writing node holds the fence of every record in it ([`ServerRecord::fence`], and its own
//! for every execution's, [`ServerRecord::needs_node_fence`]: the same rule the server's
//! store applies). It never decides anything a node decides, and nothing
//! of a node's memory survives in it: a node restarted or taking a machine over reads it back
//! from these bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::record::RecordError;
use crate::server::{
    ContextRow, ExecutionRow, PlaceRow, ServerChange, ServerRecord, ServerSnapshot,
};

/// A node whose last heartbeat is older than this, by the store's clock, is judged dead (the
/// server's own bound).
pub(super) const NODE_LIVE: Duration = Duration::from_secs(15);

/// What a row of the records table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Context,
    Chain,
    Execution,
}

/// One row of the records table.
#[derive(Debug, Clone)]
struct Row {
    seq: u64,
    bytes: Vec<u8>,
    /// The node whose write it was (a take-over moves an execution's to the taker).
    writer: usize,
}

/// A write the store refused: nothing of the batch was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refused {
    /// The writer does not hold this fence (a context id, or `@node:N`) at its epoch.
    Fenced(String),
    /// A record already ended was ended again.
    EndedTwice(String),
}

/// The shared database.
#[derive(Debug, Default)]
pub(super) struct SharedStore {
    rows: BTreeMap<(Kind, String), Row>,
    /// The executions whose end was written (the real store's `executions` rows say so).
    ended: BTreeSet<String>,
    seq: u64,
    /// Fence rows: a context id, or a node's own row, to (node, epoch).
    owners: BTreeMap<String, (usize, u64)>,
    /// The owner-change numbers given so far (PostgreSQL's sequence): every take moves it on,
    /// and a node's own row made anew starts at the next, above any epoch it held before.
    changes: u64,
    /// Hand-offs not yet taken: execution id to the machine whose owner takes it.
    handoffs: BTreeMap<String, String>,
    /// Each node's last heartbeat.
    beats: BTreeMap<usize, Duration>,
    /// Records written in all, for the report.
    pub written: usize,
}

/// A node's own fence row.
pub(super) fn node_row(node: usize) -> String {
    format!("@node:{node}")
}

impl SharedStore {
    /// Writes `records`, node `node`'s batch, holding the epochs in `fences`: whole, or not
    /// at all when a fence is not held.
    pub fn write(
        &mut self,
        node: usize,
        fences: &BTreeMap<String, u64>,
        records: &[ServerRecord],
    ) -> Result<(), Refused> {
        // Every fence of the batch first, sorted, each once (as the real store checks them).
        let keys = ServerRecord::fences_of(records, &node_row(node));
        for key in keys {
            let held = fences.get(&key).copied();
            if held.is_none() || self.owners.get(&key) != held.map(|e| (node, e)).as_ref() {
                return Err(Refused::Fenced(key));
            }
        }
        for record in records {
            if let ServerChange::ExecutionEnded(row) = &record.change
                && self.ended.contains(row.exec_id.as_str())
            {
                return Err(Refused::EndedTwice(row.exec_id.to_string()));
            }
        }
        for record in records {
            self.seq += 1;
            self.written += 1;
            let row = Row {
                seq: self.seq,
                bytes: record.encode(),
                writer: node,
            };
            let key = match &record.change {
                ServerChange::Context(c) => (Kind::Context, c.id.to_string()),
                ServerChange::Chain(c) => (Kind::Chain, c.user_id.clone()),
                ServerChange::Execution(e) => {
                    let id = e.exec_id.to_string();
                    match &e.place {
                        PlaceRow::HandedOff { context_id } => {
                            self.handoffs.insert(id.clone(), context_id.to_string());
                        }
                        _ => {
                            self.handoffs.remove(&id);
                        }
                    }
                    (Kind::Execution, id)
                }
                ServerChange::ExecutionEnded(e) => {
                    let id = e.exec_id.to_string();
                    self.rows.remove(&(Kind::Execution, id.clone()));
                    self.handoffs.remove(&id);
                    self.ended.insert(id);
                    continue;
                }
            };
            self.rows.insert(key, row);
        }
        Ok(())
    }

    /// Every record in write order, decoded, with its writer (a row's bytes fail here as
    /// they would in a real store).
    fn records(&self) -> Result<Vec<(ServerRecord, usize)>, RecordError> {
        let mut rows: Vec<&Row> = self.rows.values().collect();
        rows.sort_by_key(|row| row.seq);
        rows.into_iter()
            .map(|row| Ok((ServerRecord::decode(&row.bytes)?, row.writer)))
            .collect()
    }

    /// The row of machine `context_id`, with the executions placed on it: what a node that
    /// takes it adopts (`None`: no such machine).
    pub fn context_snapshot(
        &self,
        context_id: &str,
    ) -> Result<Option<ServerSnapshot>, RecordError> {
        let mut snapshot = ServerSnapshot::default();
        let (mut found, mut latest) = (false, 0);
        for (record, _) in self.records()? {
            let take = match &record.change {
                ServerChange::Context(row) => row.id.as_str() == context_id,
                ServerChange::Execution(row) => row
                    .place
                    .context_id()
                    .is_some_and(|c| c.as_str() == context_id),
                ServerChange::Chain(_) | ServerChange::ExecutionEnded(_) => false,
            };
            if take {
                found |= matches!(record.change, ServerChange::Context(_));
                latest = latest.max(record.written_ms);
                snapshot.apply(&record);
            }
        }
        snapshot.written_ms = latest;
        Ok(found.then_some(snapshot))
    }

    /// What node `node` restores from at its start: the machines in `owned` with the
    /// executions placed on them, every chain, and the executions no machine holds that it
    /// wrote (another node's, dead or not, move only by [`SharedStore::take_over_node`]);
    /// and the rows of the machines owned elsewhere.
    pub fn owned_snapshot(
        &self,
        node: usize,
        owned: &BTreeSet<String>,
    ) -> Result<(ServerSnapshot, Vec<ContextRow>), RecordError> {
        let mut mine = ServerSnapshot::default();
        let mut elsewhere: BTreeMap<String, ContextRow> = BTreeMap::new();
        for (record, writer) in self.records()? {
            mine.written_ms = mine.written_ms.max(record.written_ms);
            let is_mine = match &record.change {
                ServerChange::Context(row) if !owned.contains(row.id.as_str()) => {
                    elsewhere.insert(row.id.to_string(), row.clone());
                    false
                }
                ServerChange::Context(_) | ServerChange::Chain(_) => true,
                ServerChange::Execution(row) => match row.place.context_id() {
                    Some(context_id) => owned.contains(context_id.as_str()),
                    None => writer == node,
                },
                ServerChange::ExecutionEnded(_) => false,
            };
            if is_mine {
                let written = mine.written_ms;
                mine.apply(&record);
                mine.written_ms = written;
            }
        }
        Ok((mine, elsewhere.into_values().collect()))
    }

    /// Machine `context_id`'s row as written last.
    pub fn context_row(&self, context_id: &str) -> Option<ContextRow> {
        let row = self.rows.get(&(Kind::Context, context_id.to_owned()))?;
        match ServerRecord::decode(&row.bytes).ok()?.change {
            ServerChange::Context(row) => Some(row),
            _ => None,
        }
    }

    /// Who owns `key` now, and at which epoch.
    pub fn owner(&self, key: &str) -> Option<(usize, u64)> {
        self.owners.get(key).copied()
    }

    /// Node `node` takes `key` whoever held it (a daemon's connection reached it): the next
    /// epoch, which fences every earlier holder out.
    pub fn take(&mut self, key: &str, node: usize) -> u64 {
        self.changes += 1;
        let epoch = self.owners.get(key).map_or(1, |(_, e)| e + 1);
        self.owners.insert(key.to_owned(), (node, epoch));
        epoch
    }

    /// Node `node` takes `key` from `from` if it still holds it at `epoch` (one statement:
    /// of several nodes trying at once, one wins).
    pub fn take_from(&mut self, key: &str, from: usize, epoch: u64, node: usize) -> Option<u64> {
        (self.owners.get(key) == Some(&(from, epoch))).then(|| self.take(key, node))
    }

    /// Node `node` starts: its own row and every machine it held or a dead node held move to
    /// it at their next epoch; machines no node holds become its at epoch 1. Returns every
    /// fence it holds now.
    pub fn claim(&mut self, node: usize, now: Duration) -> BTreeMap<String, u64> {
        let keys: Vec<String> = self
            .owners
            .iter()
            .filter(|(key, (holder, _))| {
                !key.starts_with("@node:") && (*holder == node || !self.live(*holder, now))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            self.take(&key, node);
        }
        let own = node_row(node);
        if self.owners.contains_key(&own) {
            self.take(&own, node);
        } else {
            self.changes += 1;
            self.owners.insert(own, (node, self.changes));
        }
        let unowned: Vec<String> = self
            .rows
            .keys()
            .filter(|(kind, id)| *kind == Kind::Context && !self.owners.contains_key(id))
            .map(|(_, id)| id.clone())
            .collect();
        for id in unowned {
            self.owners.insert(id, (node, 1));
        }
        self.owners
            .iter()
            .filter(|(_, (holder, _))| *holder == node)
            .map(|(key, (_, epoch))| (key.clone(), *epoch))
            .collect()
    }

    /// Node `node` takes over the executions no machine holds that node `dead` wrote, if
    /// `dead`'s own row is still at `epoch`: that row goes (`dead` writes none of them again).
    pub fn take_over_node(
        &mut self,
        dead: usize,
        epoch: u64,
        node: usize,
    ) -> Result<Option<Vec<ExecutionRow>>, RecordError> {
        if self.owners.get(&node_row(dead)) != Some(&(dead, epoch)) {
            return Ok(None);
        }
        self.owners.remove(&node_row(dead));
        let mut taken = Vec::new();
        for ((kind, _), row) in self.rows.iter_mut() {
            if *kind != Kind::Execution || row.writer != dead {
                continue;
            }
            if let ServerChange::Execution(e) = ServerRecord::decode(&row.bytes)?.change
                && matches!(e.place, PlaceRow::Unplaced | PlaceRow::Cloud)
            {
                row.writer = node;
                taken.push(*e);
            }
        }
        Ok(Some(taken))
    }

    /// Takes the hand-offs to machines node `node` owns, in one statement: their rows.
    pub fn take_inbox(&mut self, node: usize) -> Result<Vec<ExecutionRow>, RecordError> {
        let mine: Vec<String> = self
            .handoffs
            .iter()
            .filter(|(_, context_id)| self.owners.get(*context_id).is_some_and(|o| o.0 == node))
            .map(|(exec_id, _)| exec_id.clone())
            .collect();
        let mut rows = Vec::new();
        for exec_id in mine {
            self.handoffs.remove(&exec_id);
            if let Some(row) = self.rows.get(&(Kind::Execution, exec_id))
                && let ServerChange::Execution(e) = ServerRecord::decode(&row.bytes)?.change
            {
                rows.push(*e);
            }
        }
        Ok(rows)
    }

    /// Cuts the last record written short, as a torn write would.
    #[cfg(test)]
    pub fn corrupt_last(&mut self) {
        if let Some(row) = self.rows.values_mut().max_by_key(|row| row.seq) {
            row.bytes.truncate(row.bytes.len() / 2);
        }
    }

    /// Whether any hand-off waits for its machine's owner.
    pub fn handoffs_waiting(&self) -> bool {
        !self.handoffs.is_empty()
    }

    /// Node `node`'s heartbeat reached the store at `now`.
    pub fn beat(&mut self, node: usize, now: Duration) {
        self.beats.insert(node, now);
    }

    /// Whether node `node`'s last heartbeat is recent enough, by this store's clock.
    pub fn live(&self, node: usize, now: Duration) -> bool {
        self.beats
            .get(&node)
            .is_some_and(|at| now.saturating_sub(*at) < NODE_LIVE)
    }

    /// The nodes judged dead that still hold a fence (machines or their own row), with what
    /// they hold: (key, holder, epoch).
    pub fn held_by_dead(&self, now: Duration) -> Vec<(String, usize, u64)> {
        self.owners
            .iter()
            .filter(|(_, (holder, _))| !self.live(*holder, now))
            .map(|(key, (holder, epoch))| (key.clone(), *holder, *epoch))
            .collect()
    }
}
