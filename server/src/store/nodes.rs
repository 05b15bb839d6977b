//! The nodes serving this database (docs/CLUSTER.md §4): one row per `outpost serve`
//! process, its heartbeat stamped by the database's clock (never a node's), and how the other
//! nodes reach it; the daemons connected to it at that heartbeat are `sessions.rs`' rows. A node is live while its heartbeat is recent; liveness
//! is judged here, in SQL, so that no two nodes' clocks are ever compared.
//!
//! It stores and lists; the heartbeat's pace and what a node does when it cannot write one are
//! the server's (`http/nodes.rs`).

use super::db::{OptionalExtension as _, Sql as _, params};
use super::{Doing as _, SessionsChange, Store, StoreError};

/// How old a node's last heartbeat may be, by the database's clock, for the node to be live:
/// listed, relayed to, and not taken from.
pub(crate) const NODE_LIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a row of a node that stopped heartbeating stays before a heartbeat deletes it.
const FORGET_AFTER_MS: i64 = 3_600_000;

/// A node as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeRow {
    /// `nd_…`, kept in the node's state folder across its restarts.
    pub(crate) id: String,
    /// The URL daemons and clients reach it at.
    pub(crate) url: String,
    /// The URL the other nodes reach it at, with its TLS certificate's SHA-256 (`None` for a
    /// node of an earlier version, which is never relayed to).
    pub(crate) reach: Option<NodeReach>,
    /// When it started (Unix seconds, its own clock: shown, never compared).
    pub(crate) started_at: u64,
    /// The daemons connected to it at its last heartbeat, each a `NodeSession` as JSON, in
    /// context order.
    pub(crate) sessions: Vec<String>,
    /// How long ago its last heartbeat was, by the database's clock.
    pub(crate) silent_ms: u64,
}

/// How the other nodes reach a node: its own URL, not a load balancer's in front of all of
/// them, and the certificate they pin on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeReach {
    /// `https://host:port` (or `http://` to a loopback host) of this node itself.
    pub(crate) url: String,
    /// The SHA-256 (hex) of the DER of the certificate it serves, when it serves TLS.
    pub(crate) tls_sha256: Option<String>,
}

impl Store {
    /// Writes node `id`'s heartbeat now (the database's clock) and forgets the rows of nodes
    /// silent for an hour; then, in a transaction of its own (a first beat's thousands of rows
    /// never hold the heartbeat's stamp back), what changed in its sessions (`None`: nothing
    /// since its last heartbeat). Returns how many session rows the node has then, by which
    /// the heartbeat tells that another process of the same node (an earlier start, paused
    /// and woken) wrote or removed some.
    pub(crate) fn node_heartbeat(
        &self,
        id: &str,
        url: &str,
        reach: Option<&NodeReach>,
        started_at: u64,
        sessions: Option<&SessionsChange>,
    ) -> Result<usize, StoreError> {
        {
            let mut conn = self.lock();
            let tx = conn.transaction().doing("writing a heartbeat")?;
            let now = tx.now_ms();
            // `sessions` stays empty: the sessions are `node_sessions`' rows (migration 21).
            tx.execute(
                &format!(
                    "INSERT INTO nodes
                         (id, url, started_at, heartbeat_at_ms, sessions, node_url, tls_sha256)
                     VALUES (?1, ?2, ?3, {now}, '[]', ?4, ?5)
                     ON CONFLICT (id) DO UPDATE SET url = excluded.url,
                         started_at = excluded.started_at,
                         heartbeat_at_ms = excluded.heartbeat_at_ms, sessions = '[]',
                         node_url = excluded.node_url, tls_sha256 = excluded.tls_sha256"
                ),
                params![
                    id,
                    url,
                    started_at as i64,
                    reach.map(|r| r.url.as_str()),
                    reach.and_then(|r| r.tls_sha256.as_deref())
                ],
            )
            .doing("writing a heartbeat")?;
            let forgotten = tx
                .execute(
                    &format!("DELETE FROM nodes WHERE heartbeat_at_ms < {now} - ?1"),
                    params![FORGET_AFTER_MS],
                )
                .doing("forgetting silent nodes")?;
            if forgotten > 0 {
                tx.execute(
                    "DELETE FROM node_sessions WHERE node_id NOT IN (SELECT id FROM nodes)",
                    params![],
                )
                .doing("forgetting silent nodes' sessions")?;
            }
            tx.commit().doing("writing a heartbeat")?;
        }
        let mut conn = self.lock();
        if let Some(change) = sessions {
            let tx = conn.transaction().doing("writing a node's sessions")?;
            super::sessions::write(&tx, id, change)?;
            tx.commit().doing("writing a node's sessions")?;
        }
        let rows: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM node_sessions WHERE node_id = ?1",
                params![id],
                |r| r.get(0),
            )
            .doing("counting a node's sessions")?;
        Ok(usize::try_from(rows).unwrap_or(0))
    }

    /// The nodes whose last heartbeat is at most `live_ms` old by the database's clock,
    /// oldest start first, each with its sessions.
    pub(crate) fn live_nodes(&self, live_ms: u64) -> Result<Vec<NodeRow>, StoreError> {
        let mut rows = {
            let conn = self.read();
            let now = conn.now_ms();
            conn.query_map(
                &format!(
                    "SELECT id, url, started_at, {now} - heartbeat_at_ms, node_url, tls_sha256
                     FROM nodes WHERE heartbeat_at_ms >= {now} - ?1 ORDER BY started_at, id"
                ),
                params![i64::try_from(live_ms).unwrap_or(i64::MAX)],
                |r| {
                    let node_url: Option<String> = r.get(4)?;
                    let tls_sha256: Option<String> = r.get(5)?;
                    Ok(NodeRow {
                        id: r.get(0)?,
                        url: r.get(1)?,
                        reach: node_url.map(|url| NodeReach { url, tls_sha256 }),
                        started_at: r.get::<i64>(2)?.max(0) as u64,
                        sessions: Vec::new(),
                        silent_ms: r.get::<i64>(3)?.max(0) as u64,
                    })
                },
            )
            .doing("listing the nodes")?
        };
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let mut sessions = self.sessions_by_node(&ids)?;
        for row in &mut rows {
            row.sessions = sessions.remove(&row.id).unwrap_or_default();
        }
        Ok(rows)
    }

    /// How the other nodes reach node `id`, if its last heartbeat is at most `live_ms` old
    /// by the database's clock and wrote an address (a node of an earlier version wrote none).
    pub(crate) fn live_node_reach(
        &self,
        id: &str,
        live_ms: u64,
    ) -> Result<Option<NodeReach>, StoreError> {
        let conn = self.read();
        let now = conn.now_ms();
        let row: Option<(Option<String>, Option<String>)> = conn
            .query_row(
                &format!(
                    "SELECT node_url, tls_sha256 FROM nodes
                     WHERE id = ?1 AND heartbeat_at_ms >= {now} - ?2"
                ),
                params![id, i64::try_from(live_ms).unwrap_or(i64::MAX)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .doing("reading a node's address")?;
        Ok(row.and_then(|(url, tls_sha256)| {
            Some(NodeReach {
                url: url?,
                tls_sha256,
            })
        }))
    }

    /// Every node whose last heartbeat is at most `live_ms` old by the database's clock, with
    /// how the others reach it (`None`: a node of an earlier version, which wrote no address),
    /// in id order, without the sessions [`Store::live_nodes`] reads.
    pub(crate) fn live_node_reaches(
        &self,
        live_ms: u64,
    ) -> Result<Vec<(String, Option<NodeReach>)>, StoreError> {
        let conn = self.read();
        let now = conn.now_ms();
        conn.query_map(
            &format!(
                "SELECT id, node_url, tls_sha256 FROM nodes
                 WHERE heartbeat_at_ms >= {now} - ?1 ORDER BY id"
            ),
            params![i64::try_from(live_ms).unwrap_or(i64::MAX)],
            |r| {
                let url: Option<String> = r.get(1)?;
                let tls_sha256: Option<String> = r.get(2)?;
                Ok((r.get(0)?, url.map(|url| NodeReach { url, tls_sha256 })))
            },
        )
        .doing("listing the nodes' addresses")
    }

    /// The URL daemons reach each live node at (a node's `--public-url`, the same for nodes
    /// behind one front) with the SHA-256 of the certificate it serves, oldest start first:
    /// what a join lists (docs/CLUSTER.md §3).
    pub(crate) fn live_node_urls(
        &self,
        live_ms: u64,
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let conn = self.read();
        let now = conn.now_ms();
        conn.query_map(
            &format!(
                "SELECT url, tls_sha256 FROM nodes
                 WHERE heartbeat_at_ms >= {now} - ?1 ORDER BY started_at, id"
            ),
            params![i64::try_from(live_ms).unwrap_or(i64::MAX)],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .doing("listing the nodes' URLs")
    }

    /// The ids of the nodes whose last heartbeat is at most `live_ms` old by the database's
    /// clock: what [`Store::live_nodes`] lists, without the sessions every heartbeat would
    /// otherwise read (megabytes, with tens of thousands of daemons).
    pub(crate) fn live_node_ids(&self, live_ms: u64) -> Result<Vec<String>, StoreError> {
        let conn = self.read();
        let now = conn.now_ms();
        conn.query_map(
            &format!("SELECT id FROM nodes WHERE heartbeat_at_ms >= {now} - ?1 ORDER BY id"),
            params![i64::try_from(live_ms).unwrap_or(i64::MAX)],
            |r| r.get(0),
        )
        .doing("listing the live nodes")
    }

    /// Removes every row but node `id`'s when the database is the SQLite file: one process
    /// serves it, so any other row is an earlier start of this node (killed before it could
    /// remove its own). Over PostgreSQL other rows are other nodes: nothing is removed.
    pub(crate) fn forget_earlier_starts(&self, id: &str) -> Result<(), StoreError> {
        let conn = self.lock();
        if conn.is_postgres() {
            return Ok(());
        }
        conn.execute("DELETE FROM nodes WHERE id <> ?1", params![id])
            .doing("forgetting earlier starts")?;
        conn.execute("DELETE FROM node_sessions WHERE node_id <> ?1", params![id])
            .doing("forgetting earlier starts' sessions")?;
        Ok(())
    }

    /// Removes node `id`'s row (it stops).
    pub(crate) fn forget_node(&self, id: &str) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("forgetting a node")?;
        tx.execute("DELETE FROM nodes WHERE id = ?1", params![id])
            .doing("forgetting a node")?;
        tx.execute("DELETE FROM node_sessions WHERE node_id = ?1", params![id])
            .doing("forgetting a node's sessions")?;
        tx.commit().doing("forgetting a node")?;
        Ok(())
    }
}
