//! Ownership with fencing (docs/CLUSTER.md §2): which node owns each context (`context_owner`,
//! one row per context: its node and the epoch that node took it at), the fence every
//! transaction writing a context's records checks first, and the records a node restores
//! from: the contexts it owns, and the rows of the others kept apart.
//!
//! This module owns that table and those reads. It never decides which node should own a
//! context (the dispatcher and the node's start do), never judges liveness by a node's own
//! clock (only by `nodes.heartbeat_at_ms` against the database's), and never lets a write
//! through a fence that names another node or another epoch.

use std::collections::{HashMap, HashSet};

use outpost_core::server::{ContextRow, PlaceRow, ServerChange, ServerRecord, ServerSnapshot};

use super::db::{OptionalExtension as _, Sql, ToValue, params};
use super::{Doing as _, Store, StoreError};

/// Any number both ways agree on, held by a PostgreSQL node's claim at its start
/// (`pg_advisory_xact_lock`) so that nodes starting together claim one after another.
const CLAIM_LOCK: i64 = 0x6f75_7470_6f73_7432;

/// The owner row's id of node `node_id`'s own executions (unplaced, on its executor, handed
/// off): fenced like a context's, so that another node that took them over from a node it
/// judged dead can make that node's next write of them fail.
pub(crate) fn node_fence(node_id: &str) -> String {
    format!("{NODE_FENCE}{node_id}")
}

/// What a node's own fence row's id starts with (no context id does: they start `ec_`).
pub(crate) const NODE_FENCE: &str = "@node:";

/// The SQL condition that node `node` (a parameter) has written no heartbeat within `live_ms`
/// (a parameter) by the database's clock: a take from a node judged dead checks it in the same
/// statement, so a node whose heartbeat came back between the judging and the take keeps
/// what it owns.
pub(super) fn still_dead(tx: &impl Sql, node: &str, live_ms: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM nodes WHERE id = {node} AND heartbeat_at_ms >= {} - {live_ms})",
        tx.now_ms()
    )
}

/// One row of the owners' table: (context id, node id, epoch).
pub(crate) type OwnerRow = (String, String, i64);

/// A write refused by its fence: the context is another node's now, or this node's at a later
/// epoch, or no node's; or the writing node's own fence row ([`node_fence`]) is gone (another
/// node took over its executions) or at a later epoch (the node started again). Nothing of the
/// transaction was written.
#[derive(Debug, thiserror::Error)]
#[error("{}", fenced_message(self))]
pub(crate) struct Fenced {
    /// The context whose fence failed (`@node:<id>` for a node's own).
    pub(crate) context_id: String,
    /// The node that owns it now (`None`: it has no owner row).
    pub(crate) holder: Option<String>,
}

fn fenced_message(f: &Fenced) -> String {
    if let Some(node) = f.node_fenced() {
        return match &f.holder {
            Some(holder) if holder == node => format!(
                "node {node} started again since (its own fence is at a later epoch): this \
                 earlier start writes none of its executions"
            ),
            _ => format!(
                "node {node}'s own fence is gone: another node judged it dead and took over \
                 its executions"
            ),
        };
    }
    match &f.holder {
        Some(holder) => format!(
            "context {} is owned by node {holder} now: this node lost its fence",
            f.context_id
        ),
        None => format!(
            "context {} has no owner now: this node lost its fence",
            f.context_id
        ),
    }
}

impl Fenced {
    /// The node whose own fence ([`node_fence`]) failed, when it is a node's and not a
    /// context's.
    pub(crate) fn node_fenced(&self) -> Option<&str> {
        self.context_id.strip_prefix(NODE_FENCE)
    }
}

/// What a node restores from at its start ([`Store::load_owned_snapshot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OwnedSnapshot {
    /// The contexts it owns, every chain, the executions placed on its contexts and the
    /// unplaced and cloud ones no other live node wrote; `None` when there is no record at
    /// all.
    pub(crate) mine: Option<ServerSnapshot>,
    /// The rows of the contexts other nodes own, by id.
    pub(crate) elsewhere: Vec<ContextRow>,
}

/// Checks `fence` inside `tx`, before anything is written: every context in it must be owned
/// by `node_id` at the epoch given. Read `FOR SHARE` on PostgreSQL, so that no node takes a
/// fenced context until `tx` ends. A fence without a node id never holds.
pub(super) fn check_fence(
    tx: &impl Sql,
    node_id: Option<&str>,
    fence: &[(String, i64)],
) -> Result<(), StoreError> {
    if fence.is_empty() {
        return Ok(());
    }
    let placeholders: Vec<String> = (1..=fence.len()).map(|i| format!("?{i}")).collect();
    let mut sql = format!(
        "SELECT context_id, node_id, epoch FROM context_owner WHERE context_id IN ({})",
        placeholders.join(", ")
    );
    if tx.is_postgres() {
        sql.push_str(" FOR SHARE");
    }
    let ids: Vec<&dyn ToValue> = fence.iter().map(|(id, _)| id as &dyn ToValue).collect();
    let held: HashMap<String, (String, i64)> = tx
        .query_map(&sql, &ids, |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
        .doing("checking a context's fence")?
        .into_iter()
        .collect();
    for (context_id, epoch) in fence {
        let holder = held.get(context_id);
        let holds =
            holder.is_some_and(|(holder, at)| Some(holder.as_str()) == node_id && at == epoch);
        if !holds {
            return Err(StoreError::new(
                "checking a context's fence",
                Fenced {
                    context_id: context_id.clone(),
                    holder: holder.map(|(holder, _)| holder.clone()),
                },
            ));
        }
    }
    Ok(())
}

impl Store {
    /// Node `node_id` claims context `context_id` if no node owns it yet (a context just
    /// registered through it): one committed statement that makes the row at epoch 1.
    /// Returns `Some(1)` when it made the row, `None` when there was one already, whoever's
    /// (then nothing changed: a context someone holds moves only by a daemon's connect).
    pub(crate) fn claim_unowned_context(
        &self,
        context_id: &str,
        node_id: &str,
    ) -> Result<Option<i64>, StoreError> {
        let conn = self.lock();
        conn.query_row(
            &format!(
                "INSERT INTO context_owner (context_id, node_id, epoch, changed)
                     VALUES (?1, ?2, 1, {})
                     ON CONFLICT (context_id) DO NOTHING
                     RETURNING epoch",
                conn.next_owner_change()
            ),
            params![context_id, node_id],
            |r| r.get(0),
        )
        .optional()
        .doing("claiming a context")
    }

    /// Node `node_id` claims, at its start and in one transaction, what no live node holds:
    /// the rows it held already and those of nodes whose heartbeat is older than `live_ms` by
    /// the database's clock (or that have no `nodes` row) move to it with their next epoch, and
    /// every registered context without a row gets one (epoch 1). Rows of other live nodes are
    /// left alone. Returns every (context id, epoch) it owns now, by id. Call it after this
    /// node's first heartbeat, so that nodes claiming after it see it live.
    pub(crate) fn claim_contexts(
        &self,
        node_id: &str,
        live_ms: u64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("claiming contexts")?;
        if tx.is_postgres() {
            tx.query_row(
                "SELECT CAST(1 AS BIGINT) FROM (SELECT pg_advisory_xact_lock(?1)) AS held",
                params![CLAIM_LOCK],
                |r| r.get::<i64>(0),
            )
            .doing("waiting for another node's claim")?;
        }
        let now = tx.now_ms();
        // Moved first, so that the rows made next start at epoch 1.
        tx.execute(
            &format!(
                "UPDATE context_owner SET node_id = ?1, epoch = epoch + 1, changed = {change}
                 WHERE (node_id = ?1
                    OR node_id NOT IN (SELECT id FROM nodes WHERE heartbeat_at_ms >= {now} - ?2))
                   AND context_id NOT LIKE '{NODE_FENCE}%'",
                change = tx.next_owner_change()
            ),
            params![node_id, i64::try_from(live_ms).unwrap_or(i64::MAX)],
        )
        .doing("claiming dead nodes' contexts")?;
        // This node's own executions: its fence moves on too (an earlier start of it, paused,
        // writes none of them again). A row made anew (the first start, or after a take-over
        // deleted it) takes its epoch from the owner-change numbers, which every bump of the
        // row moved on too: on PostgreSQL a sequence, so never an epoch an earlier start of
        // the node held (a SQLite file is one node: no take-over deletes its row).
        let next = tx.next_owner_change();
        tx.execute(
            &format!(
                "INSERT INTO context_owner (context_id, node_id, epoch, changed)
                 VALUES (?1, ?2, {next}, {next})
                 ON CONFLICT (context_id) DO UPDATE SET epoch = context_owner.epoch + 1,
                     changed = excluded.changed"
            ),
            params![node_fence(node_id), node_id],
        )
        .doing("claiming this node's own executions")?;
        tx.execute(
            &format!(
                "INSERT INTO context_owner (context_id, node_id, epoch, changed)
                 SELECT id, ?1, 1, {} FROM contexts
                 WHERE id NOT IN (SELECT context_id FROM context_owner)
                 ON CONFLICT (context_id) DO NOTHING",
                tx.next_owner_change()
            ),
            params![node_id],
        )
        .doing("claiming unowned contexts")?;
        let owned = tx
            .query_map(
                "SELECT context_id, epoch FROM context_owner WHERE node_id = ?1
                 ORDER BY context_id",
                params![node_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .doing("claiming contexts")?;
        tx.commit().doing("claiming contexts")?;
        Ok(owned)
    }

    /// Node `node_id` takes over the executions of `dead` (a node judged dead) that no machine
    /// holds — unplaced, or on its executor — if `dead`'s own fence is still at `epoch`: the
    /// fence row goes (so `dead` writes none of them again, and no other node takes them
    /// too), the rows are marked as this node's, and they come back to be taken in. `None`
    /// when another node took them first, or `dead` wrote a heartbeat within `live_ms` after
    /// all (judged at the take, not when it was read).
    pub(crate) fn take_over_node(
        &self,
        dead: &str,
        epoch: i64,
        node_id: &str,
        live_ms: u64,
    ) -> Result<Option<Vec<outpost_core::server::ExecutionRow>>, StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction()
            .doing("taking over a dead node's executions")?;
        let gone = tx
            .execute(
                &format!(
                    "DELETE FROM context_owner WHERE context_id = ?1 AND epoch = ?2
                       AND {}",
                    still_dead(&tx, "?3", "?4")
                ),
                params![
                    node_fence(dead),
                    epoch,
                    dead,
                    i64::try_from(live_ms).unwrap_or(i64::MAX)
                ],
            )
            .doing("taking over a dead node's executions")?;
        if gone == 0 {
            return Ok(None);
        }
        let rows = tx
            .query_map(
                "SELECT key, bytes FROM records WHERE kind = 'execution' AND node_id = ?1",
                params![dead],
                |r| Ok((r.get::<String>(0)?, r.get::<Vec<u8>>(1)?)),
            )
            .doing("reading a dead node's executions")?;
        let mut taken = Vec::new();
        for (key, bytes) in rows {
            let record = ServerRecord::decode(&bytes).doing("decoding an execution")?;
            let ServerChange::Execution(row) = record.change else {
                continue;
            };
            if !matches!(row.place, PlaceRow::Unplaced | PlaceRow::Cloud) {
                continue;
            }
            tx.execute(
                "UPDATE records SET node_id = ?1 WHERE kind = 'execution' AND key = ?2",
                params![node_id, key],
            )
            .doing("taking over an execution")?;
            taken.push(*row);
        }
        tx.commit().doing("taking over a dead node's executions")?;
        Ok(Some(taken))
    }

    /// Context `context_id`'s owner row: (node id, epoch), if it has one.
    pub(crate) fn context_owner(
        &self,
        context_id: &str,
    ) -> Result<Option<(String, i64)>, StoreError> {
        self.read()
            .query_row(
                "SELECT node_id, epoch FROM context_owner WHERE context_id = ?1",
                params![context_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .doing("reading a context's owner")
    }

    /// The owner rows changed (taken, claimed, adopted) after change number `after`:
    /// (context id, node id, epoch) in the order of their change, and the largest change
    /// number among them (`after` when there is none). A transaction commits the number it
    /// took when it commits, so a reader goes back a little (see the heartbeat's learning).
    pub(crate) fn context_owners_changed_since(
        &self,
        after: i64,
    ) -> Result<(Vec<OwnerRow>, i64), StoreError> {
        let rows: Vec<(String, String, i64, i64)> = self
            .read()
            .query_map(
                "SELECT context_id, node_id, epoch, changed FROM context_owner
                 WHERE changed > ?1 ORDER BY changed, context_id",
                params![after],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .doing("reading the owners changed")?;
        let newest = rows.iter().map(|r| r.3).max().unwrap_or(after).max(after);
        Ok((
            rows.into_iter().map(|(c, n, e, _)| (c, n, e)).collect(),
            newest,
        ))
    }

    /// The owner rows of every node but `live` (by the index of nodes), by context id: what
    /// nodes judged dead own, for a live node to take (every row when `live` is empty).
    pub(crate) fn context_owners_not_of(
        &self,
        live: &[String],
    ) -> Result<Vec<OwnerRow>, StoreError> {
        let mut sql = "SELECT context_id, node_id, epoch FROM context_owner".to_owned();
        if !live.is_empty() {
            let marks: Vec<String> = (1..=live.len()).map(|i| format!("?{i}")).collect();
            sql.push_str(&format!(" WHERE node_id NOT IN ({})", marks.join(", ")));
        }
        sql.push_str(" ORDER BY context_id");
        let args: Vec<&dyn ToValue> = live.iter().map(|id| id as &dyn ToValue).collect();
        self.read()
            .query_map(&sql, &args, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .doing("reading dead nodes' owners")
    }

    /// Context `context_id`'s row and the live executions placed on it (offered, committed,
    /// queued) as one snapshot, for the node that takes it; `None` when it has no record.
    /// Read on the connection that writes, so it sees what this node just committed.
    pub(crate) fn context_snapshot(
        &self,
        context_id: &str,
    ) -> Result<Option<ServerSnapshot>, StoreError> {
        let mut snapshots = self.context_snapshots(&[context_id.to_owned()])?;
        Ok(snapshots.remove(context_id))
    }

    /// Deletes the records of ends that a node of a version before schema 23 wrote (over
    /// PostgreSQL it may run beside this one for a while; the migration removed those before
    /// it): run at open, so that none outlives the next start.
    pub(crate) fn forget_old_ends(&self) -> Result<usize, StoreError> {
        self.lock()
            .execute("DELETE FROM records WHERE kind = 'ended'", params![])
            .doing("deleting the ends' records of an older version")
    }

    /// Fills in the placement of execution records written before it was kept (migration
    /// 18), from their bytes: run at open, so that a take reads by placement (through an
    /// index on PostgreSQL).
    pub(crate) fn place_old_records(&self) -> Result<usize, StoreError> {
        let rows: Vec<(String, Vec<u8>)> = self
            .lock()
            .query_map(
                "SELECT key, bytes FROM records WHERE kind = 'execution' AND placed_on IS NULL",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .doing("reading records to place")?;
        let count = rows.len();
        for (key, bytes) in rows {
            let record = ServerRecord::decode(&bytes).doing("decoding a stored record")?;
            let ServerChange::Execution(row) = record.change else {
                continue;
            };
            let placed = row.place.context_id().map_or("", |c| c.as_str());
            self.lock()
                .execute(
                    "UPDATE records SET placed_on = ?2
                     WHERE kind = 'execution' AND key = ?1 AND placed_on IS NULL",
                    params![key, placed],
                )
                .doing("placing a record")?;
        }
        Ok(count)
    }

    /// Every live record, split for node `node_id` at its start: the contexts in `owned` and
    /// the executions placed on them, every chain, and the unplaced and cloud executions this
    /// node wrote (or that no node wrote: a lone server's) are `mine`; the rows of the other
    /// contexts are `elsewhere`, and the executions placed on them are left out. Another
    /// node's unplaced and cloud executions are never restored here, even when that node is
    /// dead: its own fence row still stands, so it could write them again (it was paused, not
    /// dead). The heartbeat's [`Store::take_over_node`] moves them, fencing it out first.
    /// `load_snapshot` is the whole, for a node alone.
    pub(crate) fn load_owned_snapshot(
        &self,
        node_id: &str,
        owned: &HashSet<String>,
    ) -> Result<OwnedSnapshot, StoreError> {
        let rows = self
            .lock()
            .query_map(
                // `ended`: ends recorded before schema 23, by a node of an older version
                // still running beside this one (the migration removed the others).
                "SELECT bytes, node_id FROM records WHERE kind <> 'ended' ORDER BY seq",
                params![],
                |r| Ok((r.get::<Vec<u8>>(0)?, r.get::<Option<String>>(1)?)),
            )
            .doing("reading records")?;
        let mut mine = ServerSnapshot::default();
        let mut elsewhere: Vec<ContextRow> = Vec::new();
        let mut any = false;
        let mut latest = 0;
        for (bytes, writer) in rows {
            let record = ServerRecord::decode(&bytes).doing("decoding a stored record")?;
            latest = latest.max(record.written_ms);
            any = true;
            let is_mine = match &record.change {
                ServerChange::Context(row) if !owned.contains(row.id.as_str()) => {
                    match elsewhere.binary_search_by(|r| r.id.cmp(&row.id)) {
                        Ok(at) => elsewhere[at] = row.clone(),
                        Err(at) => elsewhere.insert(at, row.clone()),
                    }
                    false
                }
                ServerChange::Context(_) | ServerChange::Chain(_) => true,
                ServerChange::Execution(row) => match row.place.context_id().map(|c| c.as_str()) {
                    Some(context_id) => owned.contains(context_id),
                    None => writer.as_deref().is_none_or(|writer| writer == node_id),
                },
                ServerChange::ExecutionEnded(_) => true,
            };
            if is_mine {
                mine.apply(&record);
            }
        }
        mine.written_ms = latest;
        Ok(OwnedSnapshot {
            mine: any.then_some(mine),
            elsewhere,
        })
    }
}
