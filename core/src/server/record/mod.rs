//! The dispatcher's durable state as records: what a server store (SQLite, Postgres) writes,
//! and what [`Server::restore`](super::Server::restore) rebuilds a dispatcher from after a crash.
//!
//! Four kinds of row, each keyed by an id: a context (its access record, grant, grant version,
//! revocation), a user's chain, a live execution (its request, route, hops and *place*:
//! offered, committed with its lease, queued until a deadline, on the server's executor), and
//! an ended execution (its outcome, `ranOn` and line: the delivered result). A
//! [`ServerRecord`] is one row written (an upsert, or the end of an execution); a
//! [`ServerSnapshot`] is every live row at once, and folding the journal of records into an
//! empty snapshot gives the same snapshot.
//!
//! The dispatcher queues every record an input produces as [`super::Output::Persist`] ahead
//! of every other output of that input, so a host that writes each record durably before it
//! carries out the next output never sends a frame that depends on state it would forget.
//! Times are wall-clock milliseconds; [`crate::time::rebase`] moves them onto the new
//! process's clock. Tickets, connections and offers die with the process.
//!
//! This module never reads a clock and never writes anything itself; `docs/RECORDS.md`
//! documents the format.

mod journal;
mod restore;
mod rows;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::record::{self, RecordError};

pub(super) use journal::ServerJournal;
pub use rows::{ChainRow, ContextRow, EndedRow, ExecutionRow, PlaceRow};

const RECORD_TYPE: &str = "server.record";
const SNAPSHOT_TYPE: &str = "server.snapshot";

/// One row the dispatcher changed, to be written durably before the next output is carried
/// out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRecord {
    /// When it was written, wall-clock milliseconds: the times in `change` are rebased from it.
    pub written_ms: u64,
    /// The row written, which replaces any earlier row with the same key, or the execution's end.
    pub change: ServerChange,
}

/// What a [`ServerRecord`] says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ServerChange {
    /// A context's row, replacing any earlier one with its id.
    Context(ContextRow),
    /// A user's chain, replacing any earlier one.
    Chain(ChainRow),
    /// A live execution's row, replacing any earlier one with its id.
    Execution(Box<ExecutionRow>),
    /// An execution ended (exactly once): its row goes; the outcome is the delivered result.
    ExecutionEnded(Box<EndedRow>),
}

/// Whose fence a node of a cluster must hold to write a [`ServerRecord`] (docs/CLUSTER.md
/// §2): every record of a machine's rows is written only by the node that owns that machine
/// at the epoch it holds; the rows no machine holds are fenced by the writing node's own row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence<'a> {
    /// The machine's owner: a context's row, an execution offered, committed or queued on
    /// it, or the end of one held there (even one that never ran: a queue that expired).
    Context(&'a str),
    /// The writing node's own row: an execution unplaced, on the server's executor or handed
    /// to another node's machine (that node takes it in), and the end of one no machine held.
    Node,
    /// No fence: a user's chain, which any node may set.
    Nothing,
}

impl ServerRecord {
    /// Whose fence a cluster node must hold to write this record; a node alone holds all.
    pub fn fence(&self) -> Fence<'_> {
        match &self.change {
            ServerChange::Context(row) => Fence::Context(row.id.as_str()),
            ServerChange::Execution(row) => match &row.place {
                PlaceRow::HandedOff { .. } => Fence::Node,
                place => place
                    .context_id()
                    .map_or(Fence::Node, |id| Fence::Context(id.as_str())),
            },
            ServerChange::ExecutionEnded(row) => row
                .held_on
                .as_ref()
                .map_or(Fence::Node, |id| Fence::Context(id.as_str())),
            ServerChange::Chain(_) => Fence::Nothing,
        }
    }

    /// Whether the record needs its writer's own node fence as well as [`ServerRecord::fence`]:
    /// every execution's record does. A node judged dead, whose executions another node took
    /// over with its node fence, may still hold one of them (parked, say) and later own the
    /// machine it names again: the machine's fence alone would let it offer or end that
    /// execution a second time.
    pub fn needs_node_fence(&self) -> bool {
        matches!(
            self.change,
            ServerChange::Execution(_) | ServerChange::ExecutionEnded(_)
        )
    }

    /// The fences a batch of `records` needs, sorted, each once: each record's machine
    /// ([`ServerRecord::fence`]; `own`, the writing node's own fence row, for
    /// [`Fence::Node`]), and `own` for every execution's record too
    /// ([`ServerRecord::needs_node_fence`]). Chains need none. The one rule both a server's
    /// store and the simulation's check a batch against.
    pub fn fences_of(records: &[ServerRecord], own: &str) -> Vec<String> {
        let mut keys: Vec<String> = records
            .iter()
            .flat_map(|record| {
                let key = match record.fence() {
                    Fence::Context(id) => Some(id.to_owned()),
                    Fence::Node => Some(own.to_owned()),
                    Fence::Nothing => None,
                };
                let node = record.needs_node_fence().then(|| own.to_owned());
                key.into_iter().chain(node)
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The record's bytes (one JSON document, see `docs/RECORDS.md`).
    pub fn encode(&self) -> Vec<u8> {
        record::encode(RECORD_TYPE, self.written_ms, &self.change)
    }

    /// Reads a record strictly; cut, altered or newer-version bytes give a typed error.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let (written_ms, change) = record::decode(RECORD_TYPE, bytes)?;
        Ok(Self { written_ms, change })
    }
}

/// Every live row of a dispatcher at one moment, sorted by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerSnapshot {
    /// When it was taken (or when the last record folded into it was written).
    #[serde(skip)]
    pub written_ms: u64,
    /// Registered contexts.
    pub contexts: Vec<ContextRow>,
    /// Users' chains.
    pub chains: Vec<ChainRow>,
    /// Executions not yet ended.
    pub executions: Vec<ExecutionRow>,
}

impl ServerSnapshot {
    /// The snapshot's bytes (one JSON document, see `docs/RECORDS.md`).
    pub fn encode(&self) -> Vec<u8> {
        record::encode(SNAPSHOT_TYPE, self.written_ms, self)
    }

    /// Reads a snapshot strictly; cut, altered or newer-version bytes give a typed error.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let (written_ms, mut snapshot): (u64, Self) = record::decode(SNAPSHOT_TYPE, bytes)?;
        snapshot.written_ms = written_ms;
        sorted_and_unique(&snapshot.contexts, |r| &r.id)?;
        sorted_and_unique(&snapshot.chains, |r| &r.user_id)?;
        sorted_and_unique(&snapshot.executions, |r| &r.exec_id)?;
        Ok(snapshot)
    }

    /// Folds a journal into this snapshot, in the order the records were written.
    pub fn replay<'a>(&mut self, journal: impl IntoIterator<Item = &'a ServerRecord>) {
        for record in journal {
            self.apply(record);
        }
    }

    /// Applies one record: an upsert of its row, or the removal of an ended execution.
    pub fn apply(&mut self, record: &ServerRecord) {
        self.written_ms = record.written_ms;
        match &record.change {
            ServerChange::Context(row) => upsert(&mut self.contexts, row.clone(), |r| &r.id),
            ServerChange::Chain(row) => upsert(&mut self.chains, row.clone(), |r| &r.user_id),
            ServerChange::Execution(row) => {
                upsert(&mut self.executions, (**row).clone(), |r| &r.exec_id)
            }
            ServerChange::ExecutionEnded(ended) => {
                if let Ok(at) = self
                    .executions
                    .binary_search_by(|r| r.exec_id.as_str().cmp(&ended.exec_id))
                {
                    self.executions.remove(at);
                }
            }
        }
    }
}

/// Replaces the row with `row`'s key, or inserts it in order.
fn upsert<T, K: Ord + ?Sized>(rows: &mut Vec<T>, row: T, key: impl Fn(&T) -> &K) {
    match rows.binary_search_by(|r| key(r).cmp(key(&row))) {
        Ok(at) => rows[at] = row,
        Err(at) => rows.insert(at, row),
    }
}

/// A snapshot's rows are sorted by id, each id once: anything else was not written by us.
fn sorted_and_unique<T, K: Ord + std::fmt::Debug + ?Sized>(
    rows: &[T],
    key: impl Fn(&T) -> &K,
) -> Result<(), RecordError> {
    match rows.windows(2).find(|w| key(&w[0]) >= key(&w[1])) {
        Some(w) => Err(RecordError::Shape(format!(
            "rows out of order or repeated at {:?}",
            key(&w[1])
        ))),
        None => Ok(()),
    }
}
