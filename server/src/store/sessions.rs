//! The daemons connected to each node of a cluster (`node_sessions`, migration 21): one row
//! per node and machine, holding the `NodeSession` the node's heartbeat lists for it. A
//! heartbeat writes only what changed since the one before (the first after a start replaces
//! the node's rows), and the other nodes read the sessions of the machines they ask about, by
//! an index, never every node's whole list — with tens of thousands of daemons those lists are
//! megabytes.
//!
//! It stores and reads the rows as the heartbeat hands them over; it never judges which nodes
//! are live beyond the bound it is given, and never parses a session (the server does).

use std::collections::{BTreeMap, HashMap};

use super::db::{Sql, ToValue, params};
use super::{Doing as _, Store, StoreError};

/// Rows per statement when many are written or read at once.
const ROWS_PER_STATEMENT: usize = 300;

/// What one heartbeat changes in its node's sessions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SessionsChange {
    /// Every earlier row of the node goes first: its first heartbeat since it started.
    pub(crate) replace: bool,
    /// Sessions new or changed: (context id, its `NodeSession` as JSON).
    pub(crate) put: Vec<(String, String)>,
    /// The machines no longer connected to the node.
    pub(crate) gone: Vec<String>,
}

impl SessionsChange {
    /// The change from `before` (`None`: nothing written since this node started) to `now`,
    /// both by context id; `None` when nothing changed.
    pub(crate) fn between(
        before: Option<&BTreeMap<String, String>>,
        now: &BTreeMap<String, String>,
    ) -> Option<Self> {
        let Some(before) = before else {
            return Some(Self {
                replace: true,
                put: now.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                gone: Vec::new(),
            });
        };
        let put: Vec<(String, String)> = now
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let gone: Vec<String> = before
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        (!put.is_empty() || !gone.is_empty()).then_some(Self {
            replace: false,
            put,
            gone,
        })
    }
}

/// Writes `change` to node `node_id`'s rows, inside the heartbeat's transaction.
pub(super) fn write(
    tx: &impl Sql,
    node_id: &str,
    change: &SessionsChange,
) -> Result<(), StoreError> {
    if change.replace {
        tx.execute(
            "DELETE FROM node_sessions WHERE node_id = ?1",
            params![node_id],
        )
        .doing("replacing a node's sessions")?;
    }
    for chunk in change.gone.chunks(ROWS_PER_STATEMENT) {
        let keys: Vec<String> = (2..chunk.len() + 2).map(|i| format!("?{i}")).collect();
        let mut args: Vec<&dyn ToValue> = vec![&node_id as &dyn ToValue];
        args.extend(chunk.iter().map(|id| id as &dyn ToValue));
        tx.execute(
            &format!(
                "DELETE FROM node_sessions WHERE node_id = ?1 AND context_id IN ({})",
                keys.join(", ")
            ),
            &args,
        )
        .doing("removing a node's ended sessions")?;
    }
    for chunk in change.put.chunks(ROWS_PER_STATEMENT) {
        let rows: Vec<String> = (0..chunk.len())
            .map(|i| format!("(?1, ?{}, ?{})", 2 * i + 2, 2 * i + 3))
            .collect();
        let mut args: Vec<&dyn ToValue> = vec![&node_id as &dyn ToValue];
        for (context, session) in chunk {
            args.push(context);
            args.push(session);
        }
        tx.execute(
            &format!(
                "INSERT INTO node_sessions (node_id, context_id, session) VALUES {}
                 ON CONFLICT (node_id, context_id) DO UPDATE SET session = excluded.session",
                rows.join(", ")
            ),
            &args,
        )
        .doing("writing a node's sessions")?;
    }
    Ok(())
}

impl Store {
    /// The sessions of `context_ids` on live nodes other than `except` (its own are known to
    /// it as they are now): (context id, node id, `NodeSession` JSON), a live node being one
    /// whose heartbeat is at most `live_ms` old by the database's clock.
    pub(crate) fn sessions_of(
        &self,
        context_ids: &[String],
        except: &str,
        live_ms: u64,
    ) -> Result<Vec<(String, String, String)>, StoreError> {
        let conn = self.read();
        let now = conn.now_ms();
        let live = i64::try_from(live_ms).unwrap_or(i64::MAX);
        let mut found = Vec::new();
        // One node alone (always so over the SQLite file): nothing to read by machine.
        let others: i64 = conn
            .query_row(
                &format!(
                    "SELECT COUNT(*) FROM nodes WHERE id <> ?1 AND heartbeat_at_ms >= {now} - ?2"
                ),
                params![except, live],
                |r| r.get(0),
            )
            .doing("counting the other nodes")?;
        if others == 0 {
            return Ok(found);
        }
        for chunk in context_ids.chunks(ROWS_PER_STATEMENT) {
            let keys: Vec<String> = (3..chunk.len() + 3).map(|i| format!("?{i}")).collect();
            let mut args: Vec<&dyn ToValue> = vec![&except as &dyn ToValue, &live];
            args.extend(chunk.iter().map(|id| id as &dyn ToValue));
            found.extend(
                conn.query_map(
                    &format!(
                        "SELECT s.context_id, s.node_id, s.session
                         FROM node_sessions s JOIN nodes n ON n.id = s.node_id
                         WHERE s.node_id <> ?1 AND n.heartbeat_at_ms >= {now} - ?2
                           AND s.context_id IN ({})",
                        keys.join(", ")
                    ),
                    &args,
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .doing("reading machines' sessions")?,
            );
        }
        // By machine, then node, in the ids' bytes' order whatever the database's collation.
        found.sort_unstable();
        Ok(found)
    }

    /// Every session of `node_ids`, by node, each node's in context order (the ids' bytes',
    /// whatever the database's collation).
    pub(crate) fn sessions_by_node(
        &self,
        node_ids: &[String],
    ) -> Result<HashMap<String, Vec<String>>, StoreError> {
        let conn = self.read();
        let mut by_node: HashMap<String, Vec<String>> = HashMap::new();
        for node in node_ids {
            let mut rows: Vec<(String, String)> = conn
                .query_map(
                    "SELECT context_id, session FROM node_sessions WHERE node_id = ?1",
                    params![node],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .doing("reading a node's sessions")?;
            rows.sort_unstable();
            by_node.insert(node.clone(), rows.into_iter().map(|(_, s)| s).collect());
        }
        Ok(by_node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rows: &[(&str, &str)]) -> BTreeMap<String, String> {
        rows.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_change_holds_what_came_changed_and_went_and_a_first_one_replaces() {
        let now = map(&[("ec_a", "1"), ("ec_b", "2")]);
        let first = SessionsChange::between(None, &now).expect("a first write");
        assert!(first.replace);
        assert_eq!(first.put.len(), 2);
        assert_eq!(SessionsChange::between(Some(&now), &now), None);
        let later = map(&[("ec_b", "3"), ("ec_c", "4")]);
        let change = SessionsChange::between(Some(&now), &later).expect("a change");
        assert!(!change.replace);
        assert_eq!(
            change.put,
            [
                ("ec_b".to_owned(), "3".to_owned()),
                ("ec_c".to_owned(), "4".to_owned())
            ]
        );
        assert_eq!(change.gone, ["ec_a"]);
        let empty = SessionsChange::between(None, &BTreeMap::new()).expect("still written");
        assert!(
            empty.replace && empty.put.is_empty(),
            "a start clears old rows"
        );
    }
}
