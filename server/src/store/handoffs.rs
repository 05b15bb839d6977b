//! Each node's inbox when several nodes share one database (docs/CLUSTER.md §3): executions
//! handed to the node that owns the machine their route reached, and cancels asked of a node
//! that does not hold the execution. A hand-off's row is written with the execution's record
//! (records.rs), in the transaction of the node handing it off; the owner takes it with one
//! statement.
//!
//! It stores and takes; it never decides what a taken execution does next (the dispatcher
//! does), and it never wakes anybody (the notifications go with the records' transaction).

use outpost_core::server::{ExecutionRow, PlaceRow, ServerChange, ServerRecord};

use super::db::{OptionalExtension as _, Sql as _, params};
use super::{Doing as _, Store, StoreError};

/// How long a cancel request waits for the node that holds its execution (a request for an
/// execution no node holds, or one that ended, goes after this).
const CANCEL_REQUEST_LIFE_MS: i64 = 600_000;

impl Store {
    /// Takes the hand-offs to the machines the owners' table says `node_id` owns, deleting
    /// them as they are read (a hand-off is taken once), with each execution's row as its
    /// record says now: only rows still placed `HandedOff` come back (one another node took
    /// in and moved on already, or that ended, is left out).
    pub(crate) fn take_handoffs(&self, node_id: &str) -> Result<Vec<ExecutionRow>, StoreError> {
        // Two statements, no transaction: a crash between them leaves executions placed
        // `HandedOff` on this node's machines with no inbox row, which this node restores
        // (and takes in) when it starts again.
        let tx = self.lock();
        let ids: Vec<String> = tx
            .query_map(
                "DELETE FROM handoffs WHERE context_id IN
                     (SELECT context_id FROM context_owner WHERE node_id = ?1)
                 RETURNING exec_id",
                params![node_id],
                |r| r.get(0),
            )
            .doing("taking hand-offs")?;
        let mut rows = Vec::with_capacity(ids.len());
        for exec_id in ids {
            let bytes: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT bytes FROM records WHERE kind = 'execution' AND key = ?1",
                    params![exec_id],
                    |r| r.get(0),
                )
                .optional()
                .doing("reading a handed-off execution")?;
            let Some(bytes) = bytes else { continue };
            let record = ServerRecord::decode(&bytes).doing("decoding a handed-off execution")?;
            if let ServerChange::Execution(row) = record.change
                && matches!(row.place, PlaceRow::HandedOff { .. })
            {
                rows.push(*row);
            }
        }
        Ok(rows)
    }

    /// Asks whichever node holds `exec_id` to cancel it (this one does not): kept until that
    /// node reads it or [`CANCEL_REQUEST_LIFE_MS`] passes, and announced on
    /// `outpost_cancels` when the database is PostgreSQL.
    pub(crate) fn ask_execution_cancel(&self, exec_id: &str) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("asking for a cancel")?;
        let now = tx.now_ms();
        tx.execute(
            &format!(
                "INSERT INTO cancel_requests (exec_id, asked_at_ms) VALUES (?1, {now})
                 ON CONFLICT (exec_id) DO NOTHING"
            ),
            params![exec_id],
        )
        .doing("asking for a cancel")?;
        if tx.is_postgres() {
            tx.execute("SELECT pg_notify('outpost_cancels', ?1)", params![exec_id])
                .doing("announcing a cancel")?;
        }
        tx.commit().doing("asking for a cancel")
    }

    /// The executions some node was asked to cancel, after forgetting the requests whose
    /// execution ended or that waited too long.
    pub(crate) fn cancel_requests(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let now = conn.now_ms();
        conn.execute(
            &format!(
                "DELETE FROM cancel_requests WHERE asked_at_ms < {now} - ?1
                 OR exec_id IN (SELECT id FROM executions WHERE finished_at IS NOT NULL)"
            ),
            params![CANCEL_REQUEST_LIFE_MS],
        )
        .doing("forgetting cancel requests")?;
        conn.query_map("SELECT exec_id FROM cancel_requests", params![], |r| {
            r.get(0)
        })
        .doing("reading cancel requests")
    }

    /// Asks the node that owns `context_id` to carry out `body` (an owner request's JSON), as
    /// request `id`: kept until answered or [`CANCEL_REQUEST_LIFE_MS`] passes, and announced
    /// on `outpost_handoffs` when the database is PostgreSQL.
    pub(crate) fn ask_owner(
        &self,
        id: &str,
        context_id: &str,
        body: &str,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("asking a machine's owner")?;
        let now = tx.now_ms();
        tx.execute(
            &format!(
                "INSERT INTO owner_requests (id, context_id, body, state, asked_at_ms)
                 VALUES (?1, ?2, ?3, 'pending', {now})"
            ),
            params![id, context_id, body],
        )
        .doing("asking a machine's owner")?;
        if tx.is_postgres() {
            tx.execute(
                "SELECT pg_notify('outpost_handoffs', ?1)",
                params![context_id],
            )
            .doing("announcing a request")?;
        }
        tx.commit().doing("asking a machine's owner")
    }

    /// Request `id`'s answer once its owner gave one: `(true, _)` done, `(false, why)`
    /// refused; `None` while it waits.
    pub(crate) fn owner_answer(&self, id: &str) -> Result<Option<(bool, String)>, StoreError> {
        let row: Option<(String, Option<String>)> = self
            .read()
            .query_row(
                "SELECT state, answer FROM owner_requests WHERE id = ?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .doing("reading a request's answer")?;
        Ok(match row {
            Some((state, answer)) if state == "done" || state == "refused" => {
                Some((state == "done", answer.unwrap_or_default()))
            }
            _ => None,
        })
    }

    /// Takes the requests waiting for the machines the owners' table says `node_id` owns
    /// (each taken once), after forgetting the ones asked long ago: `(id, context, body)`.
    pub(crate) fn take_owner_requests(
        &self,
        node_id: &str,
    ) -> Result<Vec<(String, String, String)>, StoreError> {
        let conn = self.lock();
        let now = conn.now_ms();
        conn.execute(
            &format!("DELETE FROM owner_requests WHERE asked_at_ms < {now} - ?1"),
            params![CANCEL_REQUEST_LIFE_MS],
        )
        .doing("forgetting old requests")?;
        conn.query_map(
            "UPDATE owner_requests SET state = 'taken'
             WHERE state = 'pending' AND context_id IN
                 (SELECT context_id FROM context_owner WHERE node_id = ?1)
             RETURNING id, context_id, body",
            params![node_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .doing("taking requests")
    }

    /// Answers request `id`: done, or refused with `why`.
    pub(crate) fn answer_owner_request(
        &self,
        id: &str,
        done: bool,
        why: &str,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE owner_requests SET state = ?2, answer = ?3 WHERE id = ?1",
                params![id, if done { "done" } else { "refused" }, why],
            )
            .doing("answering a request")?;
        Ok(())
    }

    /// Connect ticket `id` (hex) as kept, if it is (not spent, not forgotten).
    pub(crate) fn connect_ticket(&self, id: &str) -> Result<Option<SharedTicket>, StoreError> {
        self.read()
            .query_row(
                "SELECT id, context_id, secret_sha256, session_id, expires_at
                 FROM connect_tickets WHERE id = ?1",
                params![id],
                shared_ticket,
            )
            .optional()
            .doing("reading a connect ticket")
    }
}

/// A connect ticket as the nodes share it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedTicket {
    /// The ticket's id, hex.
    pub(crate) id: String,
    /// The machine it was issued for.
    pub(crate) context_id: String,
    /// The SHA-256 of its secret, hex.
    pub(crate) secret_sha256: String,
    /// The session it opens.
    pub(crate) session_id: String,
    /// When it stops opening anything (Unix seconds).
    pub(crate) expires_at: u64,
}

pub(super) fn shared_ticket(r: &super::db::Row) -> Result<SharedTicket, super::db::DbError> {
    Ok(SharedTicket {
        id: r.get(0)?,
        context_id: r.get(1)?,
        secret_sha256: r.get(2)?,
        session_id: r.get(3)?,
        expires_at: r.get::<i64>(4)?.max(0) as u64,
    })
}
