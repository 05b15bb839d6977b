//! The dispatcher's records: written as the core encoded them, folded back into a
//! snapshot on start. The listing columns of `executions` and the grant and access columns
//! of `contexts` follow the records in the same transaction, so they never disagree.

use std::sync::atomic::{AtomicI64, Ordering};

use super::db::{OptionalExtension as _, Sql as _, params};
use outpost_core::server::{ExecutionStatus, PlaceRow, ServerChange, ServerRecord};

use super::runs::{AuditRow, COLUMNS, ExecutionEntry};
use super::{Doing as _, Store, StoreError, exec};
use outpost_core::routing::Chain;

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).doing("encoding a row")
}

/// Where each record's number (`records.seq`, the order a start restores them in) comes
/// from: in SQLite, this process, which alone writes its database (the largest number read
/// once when the store opens, then counted here, so that no index of the numbers is written
/// with each record); in PostgreSQL, the sequence `records_seq`, which nodes writing at once
/// never share a number of.
#[derive(Debug)]
pub(crate) enum RecordSeq {
    /// The last number handed out.
    Counted(AtomicI64),
    /// `nextval('records_seq')`, in the statement.
    Postgres,
}

impl RecordSeq {
    /// The counter for a SQLite database whose largest number is now `last`.
    pub(crate) fn counted_from(last: i64) -> Self {
        Self::Counted(AtomicI64::new(last))
    }

    /// The next number, or none where the statement takes it from PostgreSQL. A number taken
    /// by a transaction that rolls back is not handed out again: the numbers only order.
    fn next(&self) -> Option<i64> {
        match self {
            Self::Counted(last) => Some(last.fetch_add(1, Ordering::Relaxed) + 1),
            Self::Postgres => None,
        }
    }
}

/// What one dispatcher drain writes, in one committed transaction (one fsync for all of it):
/// the listing rows of the executions its inputs created, the records, and the audit events
/// its outputs report.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// New executions' listing rows (`pending`), inserted before the records that update them.
    pub(crate) executions: Vec<ExecutionEntry>,
    /// The core's records, in the order it handed them out.
    pub(crate) records: Vec<ServerRecord>,
    /// Audit events the batch's outputs report.
    pub(crate) audit: Vec<AuditRow>,
    /// Wait continuations submitted with this batch's executions: (wait id, execution id),
    /// moved from `pending` to `started` in the same transaction as the execution's rows.
    pub(crate) continuations: Vec<(String, String)>,
    /// Output kept for executions that ended without a result (cancelled, lost), by id.
    pub(crate) kept: Vec<(String, super::runs::KeptOutput)>,
    /// The node writing the batch, stored with each of its records (`records.node_id`) and
    /// checked by its fence.
    pub(crate) node_id: Option<String>,
    /// The contexts the batch writes records for, each with the epoch the writing node holds
    /// (see [`contexts_written`]): checked first, inside the transaction, and nothing is
    /// written when any of them is no longer `node_id`'s at that epoch
    /// ([`StoreError::fenced_context`](super::StoreError::fenced_context), or
    /// [`StoreError::fenced_node`](super::StoreError::fenced_node) for the node's own). Empty:
    /// no check.
    pub(crate) fence: Vec<(String, i64)>,
}

impl Batch {
    /// Whether there is nothing to write (a fence and a node id alone write nothing).
    pub(crate) fn is_empty(&self) -> bool {
        self.executions.is_empty()
            && self.records.is_empty()
            && self.audit.is_empty()
            && self.continuations.is_empty()
            && self.kept.is_empty()
    }
}

impl Store {
    /// Writes `batch` in one committed transaction, its fence checked first; nothing of it is
    /// written on an error (a failed fence is one whose
    /// [`fenced_context`](super::StoreError::fenced_context) names the context, or
    /// [`fenced_node`](super::StoreError::fenced_node) the node).
    pub(crate) fn write_batch(&self, batch: &Batch) -> Result<Vec<ExecutionEntry>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a records transaction")?;
        // Dropping `tx` on the error rolls back (and, on PostgreSQL, lets the rows go).
        super::owners::check_fence(&tx, batch.node_id.as_deref(), &batch.fence)?;
        for entry in &batch.executions {
            super::runs::insert_execution(&tx, entry)?;
        }
        for row in &batch.audit {
            super::runs::insert_audit(&tx, row)?;
        }
        let mut ended = write_records(
            &tx,
            &batch.records,
            batch.node_id.as_deref(),
            &self.record_seq,
        )?;
        for (wait_id, exec_id) in &batch.continuations {
            super::waits::settle_continuation(
                &tx,
                wait_id,
                super::waits::CONT_STARTED,
                Some(exec_id),
                None,
            )?;
        }
        for (exec_id, kept) in &batch.kept {
            exec(
                &tx,
                "UPDATE executions SET kept_stdout = ?1, kept_stderr = ?2, kept_cut = ?3 \
                 WHERE id = ?4",
                params![kept.stdout, kept.stderr, kept.cut, exec_id],
            )
            .doing("keeping a cancelled run's output")?;
            if let Some(entry) = ended.iter_mut().rfind(|e| e.id == *exec_id) {
                entry.kept = Some(kept.clone());
            }
        }
        tracing::trace!(target: "outpost::timeline", stage = "server.commit_flush");
        tx.commit().doing("committing records")?;
        let contexts = batch
            .records
            .iter()
            .any(|r| matches!(r.change, ServerChange::Context(_)));
        let runs = !batch.executions.is_empty()
            || batch.records.iter().any(|r| {
                matches!(
                    r.change,
                    ServerChange::Execution(_) | ServerChange::ExecutionEnded(_)
                )
            });
        for (changed, topic) in [
            (contexts, super::Topic::Contexts),
            (runs, super::Topic::Runs),
            (!batch.audit.is_empty(), super::Topic::Audit),
        ] {
            if changed {
                self.changes.notify(topic);
            }
        }
        Ok(ended)
    }
}

/// The fences a batch of `records` written by node `node_id` needs, sorted, each once: a
/// context's row; an execution offered, committed or queued on a context; an execution that
/// ended on a context (its `heldOn`) — each that context's. Every execution's record needs
/// the node's own fence too ([`super::owners::node_fence`]; alone for one unplaced, on the
/// server's executor, handed off, or ended without a context), so that a node judged dead,
/// whose executions another node took over, writes none of them again, whichever machine it
/// owns. Chains need none. The rule is [`ServerRecord::fences_of`], which the simulation's
/// store checks too.
pub(crate) fn contexts_written(records: &[ServerRecord], node_id: &str) -> Vec<String> {
    ServerRecord::fences_of(records, &super::owners::node_fence(node_id))
}

/// Writes `records` inside `tx`, each marked as `node_id`'s and numbered by `record_seq`. An
/// execution's end deletes its record and is kept in its `executions` row alone.
fn write_records(
    tx: &impl super::db::Sql,
    records: &[ServerRecord],
    node_id: Option<&str>,
    record_seq: &RecordSeq,
) -> Result<Vec<ExecutionEntry>, StoreError> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let mut handed_to = Vec::new();
    let mut ended = Vec::new();
    let mut entries = Vec::new();
    for record in records {
        // The machine an execution record is placed on ('' for none): what a take reads by.
        let placed_on = match &record.change {
            ServerChange::Execution(row) => {
                Some(row.place.context_id().map_or("", |id| id.as_str()))
            }
            _ => None,
        };
        let (kind, key) = match &record.change {
            ServerChange::Context(row) => {
                exec(
                    tx,
                    "UPDATE contexts SET grant_json = ?1, grant_version = ?2, revoked = ?3,
                     shared_with_all_members = ?4, opted_in = ?5, operator_is_member = ?6
                     WHERE id = ?7",
                    params![
                        json(&row.grant)?,
                        row.grant_version as i64,
                        row.revoked,
                        row.shared_with_all_members,
                        json(&row.opted_in)?,
                        row.operator_is_member,
                        row.id.as_str()
                    ],
                )
                .doing("updating a context's grant and access")?;
                if row.revoked {
                    exec(
                        tx,
                        "UPDATE machine_keys SET revoked = 1 WHERE context_id = ?1",
                        params![row.id.as_str()],
                    )
                    .doing("revoking a machine key")?;
                }
                ("context", row.id.to_string())
            }
            ServerChange::Chain(row) => ("chain", row.user_id.clone()),
            ServerChange::Execution(row) => {
                let running = match &row.place {
                    PlaceRow::Committed { context_id, .. } => Some(context_id.as_str()),
                    PlaceRow::Cloud => Some(outpost_core::routing::CLOUD_ID),
                    _ => None,
                };
                if let PlaceRow::HandedOff { context_id } = &row.place {
                    exec(
                        tx,
                        "INSERT INTO handoffs (exec_id, context_id) VALUES (?1, ?2)
                         ON CONFLICT (exec_id) DO UPDATE SET context_id = excluded.context_id",
                        params![row.exec_id.as_str(), context_id.as_str()],
                    )
                    .doing("handing an execution off")?;
                    handed_to.push(context_id.to_string());
                }
                if let Some(context_id) = running {
                    exec(tx,
                        "UPDATE executions SET status = ?3, context_id = ?1 WHERE id = ?2 AND status = ?4",
                        params![
                            context_id,
                            row.exec_id.as_str(),
                            ExecutionStatus::Running.as_str(),
                            ExecutionStatus::Pending.as_str()
                        ],
                    )
                    .doing("marking an execution running")?;
                }
                ("execution", row.exec_id.to_string())
            }
            ServerChange::ExecutionEnded(row) => {
                // The record's time is anchored to whole wall seconds at start: it can
                // trail the wall clock by up to a second, never before the creation.
                exec(
                    tx,
                    "DELETE FROM records WHERE kind = 'execution' AND key = ?1",
                    params![row.exec_id.as_str()],
                )
                .doing("removing an ended execution's row")?;
                let ran_on = row.ran_on.as_ref().map(json).transpose()?;
                // The row as committed comes back with it: who waits on the end is answered
                // from it, without reading it again.
                let rows = tx.query(&format!(
                    "UPDATE executions SET status = ?1, finished_at = CASE WHEN ?2 > created_at THEN ?2 ELSE created_at END, outcome_json = ?3,
                     ran_on_json = ?4, line = ?5,
                     context_id = COALESCE(?6, context_id), context_name = COALESCE(?7, context_name)
                     WHERE id = ?8 RETURNING {COLUMNS}"),
                    params![
                        row.outcome.status().as_str(),
                        (record.written_ms / 1000) as i64,
                        json(&row.outcome)?,
                        ran_on,
                        row.line,
                        row.ran_on.as_ref().map(|r| r.id.clone()),
                        row.ran_on.as_ref().map(|r| r.name.clone()),
                        row.exec_id.as_str()
                    ],
                )
                .doing("recording an execution's end")?;
                for returned in &rows {
                    entries.push(
                        super::runs::execution_row(returned)
                            .doing("reading an ended execution's row")?,
                    );
                }
                ended.push(row.exec_id.to_string());
                // The end is the row above; no record of it is kept. A start restores only
                // live records, and an ended execution's would be read and skipped by every
                // start for as long as the history lasts.
                continue;
            }
        };
        let bytes = record.encode();
        match record_seq.next() {
            Some(seq) => exec(
                tx,
                "INSERT INTO records (kind, key, seq, bytes, node_id, placed_on)
                 VALUES (?1, ?2, ?6, ?3, ?4, ?5)
                 ON CONFLICT (kind, key) DO UPDATE SET seq = excluded.seq, bytes = excluded.bytes,
                     node_id = excluded.node_id, placed_on = excluded.placed_on",
                params![kind, key, bytes, node_id, placed_on, seq],
            ),
            None => exec(
                tx,
                "INSERT INTO records (kind, key, seq, bytes, node_id, placed_on)
                 VALUES (?1, ?2, nextval('records_seq'), ?3, ?4, ?5)
                 ON CONFLICT (kind, key) DO UPDATE SET seq = excluded.seq, bytes = excluded.bytes,
                     node_id = excluded.node_id, placed_on = excluded.placed_on",
                params![kind, key, bytes, node_id, placed_on],
            ),
        }
        .doing("writing a record")?;
    }
    notify_other_nodes(tx, handed_to, ended)?;
    Ok(entries)
}

/// What a channel's one notification carries at most (PostgreSQL refuses 8000 bytes).
const NOTIFY_PAYLOAD: usize = 7_000;

/// Tells the other nodes, when they share a PostgreSQL database, what this transaction
/// hands them and which executions it ends (delivered when it commits, and never if it does
/// not): one notification on `outpost_handoffs` per machine handed to, and the ended ids on
/// `outpost_ends` joined by commas — the wake-ups of a request waiting on another node.
/// Notifications are hints: a node reads its inbox on a timer too.
fn notify_other_nodes(
    tx: &impl super::db::Sql,
    mut handed_to: Vec<String>,
    ended: Vec<String>,
) -> Result<(), StoreError> {
    if !tx.is_postgres() {
        return Ok(());
    }
    handed_to.sort();
    handed_to.dedup();
    let mut payloads: Vec<(&str, String)> = handed_to
        .into_iter()
        .map(|context_id| ("outpost_handoffs", context_id))
        .collect();
    payloads.extend(
        joined_payloads(ended)
            .into_iter()
            .map(|joined| ("outpost_ends", joined)),
    );
    for (channel, payload) in payloads {
        // `execute`: the function returns `void`, which no row would hold.
        tx.execute(
            "SELECT pg_notify(?1, ?2)",
            params![channel, payload.as_str()],
        )
        .doing("notifying the other nodes")?;
    }
    Ok(())
}

/// `items` joined by commas into as few notification payloads as fit ([`NOTIFY_PAYLOAD`]
/// bytes each at most, but for an item longer than that alone).
pub(super) fn joined_payloads(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut joined = String::new();
    for item in items {
        if !joined.is_empty() && joined.len() + item.len() >= NOTIFY_PAYLOAD {
            payloads.push(std::mem::take(&mut joined));
        }
        if !joined.is_empty() {
            joined.push(',');
        }
        joined.push_str(&item);
    }
    if !joined.is_empty() {
        payloads.push(joined);
    }
    payloads
}

impl Store {
    /// Every live record folded into a snapshot, for `Server::restore`; `None` when the
    /// database holds no record yet.
    // The start restores through `load_owned_snapshot` (for a node alone, the whole of this);
    // the tests compare the two.
    #[cfg(test)]
    pub fn load_snapshot(
        &self,
    ) -> Result<Option<outpost_core::server::ServerSnapshot>, StoreError> {
        let rows = self
            .lock()
            .query_map(
                "SELECT bytes FROM records WHERE kind <> 'ended' ORDER BY seq",
                params![],
                |r| r.get::<Vec<u8>>(0),
            )
            .doing("reading records")?;
        let mut snapshot = outpost_core::server::ServerSnapshot::default();
        let mut any = false;
        let mut latest = 0;
        for bytes in rows {
            let record = ServerRecord::decode(&bytes).doing("decoding a stored record")?;
            latest = latest.max(record.written_ms);
            any = true;
            snapshot.apply(&record);
        }
        snapshot.written_ms = latest;
        Ok(any.then_some(snapshot))
    }

    /// A user's chain as last recorded.
    pub fn chain(&self, user: &str) -> Result<Option<Chain>, StoreError> {
        let conn = self.read();
        let bytes: Option<Vec<u8>> = conn
            .query_row(
                "SELECT bytes FROM records WHERE kind = 'chain' AND key = ?1",
                params![user],
                |r| r.get(0),
            )
            .optional()
            .doing("reading a chain")?;
        let Some(bytes) = bytes else { return Ok(None) };
        match ServerRecord::decode(&bytes)
            .doing("decoding a chain")?
            .change
        {
            ServerChange::Chain(row) => Ok(Some(row.chain)),
            _ => Ok(None),
        }
    }

    /// The chains whose latest write is another node's than `node_id` and numbered after
    /// `after`, with that number: what a node learns of chains set through the others. A
    /// user's chain is one row, rewritten by each write, so a chain this node wrote since is
    /// never returned in place of it.
    pub(crate) fn chains_written_since(
        &self,
        after: i64,
        node_id: &str,
    ) -> Result<Vec<(i64, String, Chain)>, StoreError> {
        let rows = self
            .read()
            .query_map(
                "SELECT seq, bytes FROM records WHERE kind = 'chain' AND seq > ?1
                 AND (node_id IS NULL OR node_id <> ?2) ORDER BY seq",
                params![after, node_id],
                |r| Ok((r.get::<i64>(0)?, r.get::<Vec<u8>>(1)?)),
            )
            .doing("reading chains written elsewhere")?;
        let mut out = Vec::new();
        for (seq, bytes) in rows {
            if let ServerChange::Chain(row) = ServerRecord::decode(&bytes)
                .doing("decoding a chain")?
                .change
            {
                out.push((seq, row.user_id, row.chain));
            }
        }
        Ok(out)
    }

    /// Every user whose chain names `context_id`, with that chain.
    pub fn chains_naming(&self, context_id: &str) -> Result<Vec<(String, Chain)>, StoreError> {
        let rows = self
            .read()
            .query_map(
                "SELECT bytes FROM records WHERE kind = 'chain'",
                params![],
                |r| r.get::<Vec<u8>>(0),
            )
            .doing("reading chains")?;
        let mut out = Vec::new();
        for bytes in rows {
            if let ServerChange::Chain(row) = ServerRecord::decode(&bytes)
                .doing("decoding a chain")?
                .change
                && row.chain.entries().iter().any(|e| e.id() == context_id)
            {
                out.push((row.user_id, row.chain));
            }
        }
        Ok(out)
    }
}
