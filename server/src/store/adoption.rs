//! Machines adopted in bulk (docs/CLUSTER.md §9): the snapshots of many machines read in one
//! query, and many machines of nodes judged dead taken in one transaction — so that a node
//! that takes over thousands of machines at once (a node died, or a node learns the machines
//! registered elsewhere) spends a few round trips on them, not several each.
//!
//! It owns those two reads and writes. It never decides which machines to take (the
//! dispatcher does, from the owners' table and the nodes' heartbeats), and never moves a row
//! that no longer names the node and epoch it was judged dead at.

use std::collections::{HashMap, HashSet};

use outpost_core::server::{ServerChange, ServerRecord, ServerSnapshot};

use super::db::{OptionalExtension as _, Sql as _, ToValue, params};
use super::{Doing as _, Store, StoreError};

/// Ids per query: well under either database's limit on parameters (two per id).
const IDS_PER_QUERY: usize = 500;

impl Store {
    /// The row and the live executions placed on each of `context_ids` (offered, committed,
    /// queued), one snapshot per machine that has a record, by id; read on the connection
    /// that writes, so it sees what this node just committed.
    pub(crate) fn context_snapshots(
        &self,
        context_ids: &[String],
    ) -> Result<HashMap<String, ServerSnapshot>, StoreError> {
        let mut snapshots: HashMap<String, ServerSnapshot> = HashMap::new();
        for chunk in context_ids.chunks(IDS_PER_QUERY) {
            let wanted: HashSet<&str> = chunk.iter().map(String::as_str).collect();
            let n = chunk.len();
            let keys: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
            let places: Vec<String> = (n + 1..=2 * n).map(|i| format!("?{i}")).collect();
            let sql = format!(
                // By the index of placements (PostgreSQL's; a lone server's few live records
                // are read whole); a row a node of an older version wrote has none (NULL) and
                // is read and judged by its bytes.
                "SELECT bytes FROM records
                 WHERE (kind = 'context' AND key IN ({}))
                    OR (kind = 'execution' AND (placed_on IN ({}) OR placed_on IS NULL))
                 ORDER BY seq",
                keys.join(", "),
                places.join(", ")
            );
            let args: Vec<&dyn ToValue> = chunk
                .iter()
                .chain(chunk.iter())
                .map(|id| id as &dyn ToValue)
                .collect();
            let rows = self
                .lock()
                .query_map(&sql, &args, |r| r.get::<Vec<u8>>(0))
                .doing("reading machines' records")?;
            let mut found = HashSet::new();
            let mut latest: HashMap<String, u64> = HashMap::new();
            let mut read: HashMap<String, ServerSnapshot> = HashMap::new();
            for bytes in rows {
                let record = ServerRecord::decode(&bytes).doing("decoding a stored record")?;
                let owner = match &record.change {
                    ServerChange::Context(row) => {
                        found.insert(row.id.to_string());
                        Some(row.id.as_str())
                    }
                    ServerChange::Execution(row) => row.place.context_id().map(|c| c.as_str()),
                    ServerChange::Chain(_) | ServerChange::ExecutionEnded(_) => None,
                };
                let Some(owner) = owner.filter(|id| wanted.contains(id)) else {
                    continue;
                };
                let owner = owner.to_owned();
                let at = latest.entry(owner.clone()).or_default();
                *at = (*at).max(record.written_ms);
                read.entry(owner).or_default().apply(&record);
            }
            for (id, mut snapshot) in read {
                if found.contains(&id) {
                    snapshot.written_ms = latest.get(&id).copied().unwrap_or(0);
                    snapshots.insert(id, snapshot);
                }
            }
        }
        Ok(snapshots)
    }

    /// Node `node_id` takes, in one transaction, each machine of `rows` (context id, dead
    /// node, epoch) whose owner row still names that node at that epoch (one statement each:
    /// of several nodes trying at once, one wins each). Returns (context id, epoch now held)
    /// for each taken; the others another node moved first.
    pub(crate) fn take_contexts_from(
        &self,
        rows: &[super::OwnerRow],
        node_id: &str,
        live_ms: u64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let live = i64::try_from(live_ms).unwrap_or(i64::MAX);
        let mut conn = self.lock();
        let tx = conn.transaction().doing("taking dead nodes' machines")?;
        let mut taken = Vec::new();
        for (context_id, dead, epoch) in rows {
            let moved: Option<i64> = tx
                .query_row(
                    &format!(
                        "UPDATE context_owner SET node_id = ?4, epoch = epoch + 1, changed = {}
                         WHERE context_id = ?1 AND node_id = ?2 AND epoch = ?3 AND {}
                         RETURNING epoch",
                        tx.next_owner_change(),
                        super::owners::still_dead(&tx, "?2", "?5")
                    ),
                    params![context_id, dead, epoch, node_id, live],
                    |r| r.get(0),
                )
                .optional()
                .doing("taking a dead node's machine")?;
            if let Some(epoch) = moved {
                taken.push((context_id.clone(), epoch));
            }
        }
        super::connects::announce_takes(&tx, node_id, &taken)?;
        tx.commit().doing("taking dead nodes' machines")?;
        Ok(taken)
    }
}
