//! Condition waits as the server keeps them: one row per registration, with the progress the
//! daemon reports for `show`, its ending and its continuation.
//!
//! The rules this file holds: identical active registrations share one row (a unique index
//! over the dedupe key of `active` rows); an ending is recorded once, in one transaction, only
//! while the wait has not ended (a repeated report changes nothing); a continuation leaves
//! `pending` once. It never decides whether a requester may wait or continue.

use super::db::{DbError, OptionalExtension as _, Row, Sql as _, params};
use outpost_core::wait::{Ending, Report};

use super::exec;
use super::{Doing as _, Store, StoreError};

/// A wait that is being checked.
pub(crate) const ACTIVE: &str = "active";
/// A wait whose cancel was asked and not yet confirmed by its daemon.
pub(crate) const CANCELLING: &str = "cancelling";
/// A wait that matched.
pub(crate) const MATCHED: &str = "matched";
/// A wait that ended without a match (`fail_reason` says why).
pub(crate) const FAILED: &str = "failed";

/// The `fail_reason` of a wait whose context was revoked before it ended.
pub(crate) const REVOKED: &str = "context_revoked";

/// No continuation was asked for.
pub(crate) const CONT_NONE: &str = "none";
/// Matched, the continuation not yet submitted.
pub(crate) const CONT_PENDING: &str = "pending";
/// Submitted (`continuation_execution_id` names the execution).
pub(crate) const CONT_STARTED: &str = "started";
/// The requester may no longer execute on the context: nothing was started.
pub(crate) const CONT_ACCESS_LOST: &str = "access_lost";
/// A cancel was asked before the match arrived: nothing was started.
pub(crate) const CONT_CANCELLED: &str = "cancelled";
/// The match came after the wait's expiry: nothing was started.
pub(crate) const CONT_EXPIRED: &str = "expired";
/// The dispatcher refused the execution (`continuation_error` says why).
pub(crate) const CONT_REFUSED: &str = "refused";

/// One wait as stored.
#[derive(Debug, Clone, Default)]
pub(crate) struct WaitEntry {
    pub(crate) id: String,
    pub(crate) context_id: String,
    /// The context's name when the wait was registered.
    pub(crate) context_name: String,
    pub(crate) requester: String,
    pub(crate) source: String,
    pub(crate) interval_ms: u64,
    pub(crate) expires_at_ms: Option<u64>,
    pub(crate) reason: Option<String>,
    /// The continuation's execute body (an inline capability; `context` resolved), JSON.
    pub(crate) then_json: Option<String>,
    pub(crate) dedupe_key: String,
    pub(crate) created_at_ms: u64,
    /// [`ACTIVE`], [`CANCELLING`], [`MATCHED`] or [`FAILED`].
    pub(crate) state: String,
    pub(crate) checks: u64,
    pub(crate) consecutive_errors: u32,
    /// The last failed check's `CheckError`, JSON.
    pub(crate) last_error: Option<String>,
    pub(crate) next_check_at_ms: Option<u64>,
    pub(crate) resume_text: Option<String>,
    /// JSON text, as the condition returned it.
    pub(crate) payload: Option<String>,
    /// JSON text.
    pub(crate) evidence: Option<String>,
    /// `check_errors`, `expired` or `cancelled`.
    pub(crate) fail_reason: Option<String>,
    pub(crate) ended_at_ms: Option<u64>,
    /// One of the `CONT_*` states.
    pub(crate) continuation_state: String,
    pub(crate) continuation_execution_id: Option<String>,
    pub(crate) continuation_error: Option<String>,
}

impl WaitEntry {
    /// Whether the wait ended (matched or failed).
    pub(crate) fn ended(&self) -> bool {
        self.state == MATCHED || self.state == FAILED
    }
}

const COLUMNS: &str = "id, context_id, context_name, requester, source, interval_ms, \
    expires_at_ms, reason, then_json, dedupe_key, created_at_ms, state, checks, \
    consecutive_errors, last_error, next_check_at_ms, resume_text, payload, evidence, \
    fail_reason, ended_at_ms, continuation_state, continuation_execution_id, continuation_error";

fn u(v: Option<i64>) -> Option<u64> {
    v.map(|v| v.max(0) as u64)
}

fn wait_row(r: &Row) -> Result<WaitEntry, DbError> {
    Ok(WaitEntry {
        id: r.get(0)?,
        context_id: r.get(1)?,
        context_name: r.get(2)?,
        requester: r.get(3)?,
        source: r.get(4)?,
        interval_ms: r.get::<i64>(5)?.max(0) as u64,
        expires_at_ms: u(r.get(6)?),
        reason: r.get(7)?,
        then_json: r.get(8)?,
        dedupe_key: r.get(9)?,
        created_at_ms: r.get::<i64>(10)?.max(0) as u64,
        state: r.get(11)?,
        checks: r.get::<i64>(12)?.max(0) as u64,
        consecutive_errors: r.get::<i64>(13)?.clamp(0, i64::from(u32::MAX)) as u32,
        last_error: r.get(14)?,
        next_check_at_ms: u(r.get(15)?),
        resume_text: r.get(16)?,
        payload: r.get(17)?,
        evidence: r.get(18)?,
        fail_reason: r.get(19)?,
        ended_at_ms: u(r.get(20)?),
        continuation_state: r.get(21)?,
        continuation_execution_id: r.get(22)?,
        continuation_error: r.get(23)?,
    })
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What recording a daemon's report came to.
#[derive(Debug, Clone)]
pub(crate) enum Recorded {
    /// No wait of this context has that id.
    Unknown,
    /// The ending is recorded now (the row as it is after).
    Now(Box<WaitEntry>),
    /// The wait had ended before: nothing changed.
    Before(Box<WaitEntry>),
}

fn one(conn: &impl super::db::Sql, id: &str) -> Result<Option<WaitEntry>, StoreError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM waits WHERE id = ?1"),
        params![id],
        wait_row,
    )
    .optional()
    .doing("reading a wait")
}

impl Store {
    /// Records a new wait unless an identical one is active: returns the row and whether it
    /// is new (`false`: the active wait with the same dedupe key, unchanged).
    pub(crate) fn insert_wait(&self, new: &WaitEntry) -> Result<(WaitEntry, bool), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a wait transaction")?;
        let existing: Option<String> = tx
            .query_row(
                "SELECT id FROM waits WHERE dedupe_key = ?1 AND state = 'active'",
                params![new.dedupe_key],
                |r| r.get(0),
            )
            .optional()
            .doing("looking for an identical wait")?;
        if let Some(id) = existing {
            let row = one(&tx, &id)?.unwrap_or_else(|| new.clone());
            return Ok((row, false));
        }
        // Another node may have registered the identical wait since the read: then its row
        // is the answer, as if it had been found.
        let inserted = exec(
            &tx,
            "INSERT INTO waits (id, context_id, context_name, requester, source, interval_ms,
             expires_at_ms, reason, then_json, dedupe_key, created_at_ms, state,
             continuation_state)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'active', 'none')
             ON CONFLICT (dedupe_key) WHERE state = 'active' DO NOTHING",
            params![
                new.id,
                new.context_id,
                new.context_name,
                new.requester,
                new.source,
                ms(new.interval_ms),
                new.expires_at_ms.map(ms),
                new.reason,
                new.then_json,
                new.dedupe_key,
                ms(new.created_at_ms),
            ],
        )
        .doing("recording a wait")?;
        if inserted == 0 {
            let row = tx
                .query_row(
                    &format!(
                        "SELECT {COLUMNS} FROM waits WHERE dedupe_key = ?1 AND state = 'active'"
                    ),
                    params![new.dedupe_key],
                    wait_row,
                )
                .optional()
                .doing("reading an identical wait")?
                .unwrap_or_else(|| new.clone());
            return Ok((row, false));
        }
        let row = one(&tx, &new.id)?.unwrap_or_else(|| new.clone());
        tx.commit().doing("committing a wait")?;
        Ok((row, true))
    }

    /// One wait.
    pub(crate) fn wait(&self, id: &str) -> Result<Option<WaitEntry>, StoreError> {
        one(&*self.read(), id)
    }

    /// `requester`'s waits, newest first.
    pub(crate) fn waits_of(
        &self,
        requester: &str,
        limit: u32,
    ) -> Result<Vec<WaitEntry>, StoreError> {
        self.read()
            .query_map(
                &format!(
                    "SELECT {COLUMNS} FROM waits WHERE requester = ?1
                     ORDER BY created_at_ms DESC, rowid DESC LIMIT ?2"
                ),
                params![requester, limit],
                wait_row,
            )
            .doing("listing waits")
    }

    /// The waits of a context that have not ended (active and cancelling), oldest first.
    pub(crate) fn open_waits(&self, context_id: &str) -> Result<Vec<WaitEntry>, StoreError> {
        self.waits_where(
            "context_id = ?1 AND state IN ('active', 'cancelling')",
            context_id,
        )
    }

    /// Matched waits whose continuation is still `pending` (a crash came between the match
    /// and the submission), oldest first.
    pub(crate) fn pending_continuations(&self) -> Result<Vec<WaitEntry>, StoreError> {
        self.waits_where(
            "state = 'matched' AND continuation_state = ?1",
            CONT_PENDING,
        )
    }

    fn waits_where(&self, filter: &str, arg: &str) -> Result<Vec<WaitEntry>, StoreError> {
        self.lock()
            .query_map(
                &format!(
                    "SELECT {COLUMNS} FROM waits WHERE {filter} ORDER BY created_at_ms, rowid"
                ),
                params![arg],
                wait_row,
            )
            .doing("reading waits")
    }

    /// Ends every wait of a revoked context that has not ended: `failed` with `fail_reason`
    /// `context_revoked` at `at_ms`, never continued (its daemon stops for good and will report
    /// nothing more). Returns how many it ended.
    pub(crate) fn end_waits_of_revoked(
        &self,
        context_id: &str,
        at_ms: u64,
    ) -> Result<usize, StoreError> {
        exec(
            &*self.lock(),
            "UPDATE waits SET state = 'failed', fail_reason = ?1, next_check_at_ms = NULL,
             ended_at_ms = ?2 WHERE context_id = ?3 AND state IN ('active', 'cancelling')",
            params![REVOKED, ms(at_ms), context_id],
        )
        .doing("ending the waits of a revoked context")
    }

    /// Marks an active wait `cancelling`; returns the row as it is after (an ended or
    /// cancelling wait unchanged), `None` for an unknown id.
    pub(crate) fn ask_cancel(&self, id: &str) -> Result<Option<WaitEntry>, StoreError> {
        let conn = self.lock();
        exec(
            &*conn,
            "UPDATE waits SET state = 'cancelling' WHERE id = ?1 AND state = 'active'",
            params![id],
        )
        .doing("cancelling a wait")?;
        one(&*conn, id)
    }

    /// The daemon's progress on a wait of `context_id` that has not ended (best effort).
    pub(crate) fn wait_progress(
        &self,
        context_id: &str,
        wait_id: &str,
        checks: u64,
        consecutive_errors: u32,
        last_error: Option<&str>,
        next_check_at_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        exec(&*self.lock(),
            "UPDATE waits SET checks = CASE WHEN checks < ?1 THEN ?1 ELSE checks END, consecutive_errors = ?2,
             last_error = COALESCE(?3, last_error), next_check_at_ms = ?4
             WHERE id = ?5 AND context_id = ?6 AND state IN ('active', 'cancelling')",
            params![
                ms(checks),
                consecutive_errors,
                last_error,
                next_check_at_ms.map(ms),
                wait_id,
                context_id
            ],
        )
        .doing("recording a wait's progress")?;
        Ok(())
    }

    /// Records `report` from `context_id`'s daemon, once: in one transaction, only if the
    /// wait is that context's and has not ended. A match of a wait with a continuation sets
    /// it `pending`, unless a cancel was asked first (`cancelled`) or the match came after
    /// the expiry (`expired`).
    pub(crate) fn record_wait_ending(
        &self,
        context_id: &str,
        report: &Report,
    ) -> Result<Recorded, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a wait transaction")?;
        let Some(before) = one(&tx, &report.wait_id)?.filter(|w| w.context_id == context_id) else {
            return Ok(Recorded::Unknown);
        };
        if before.ended() {
            return Ok(Recorded::Before(Box::new(before)));
        }
        let last_error = report
            .last_error
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .doing("encoding a check error")?;
        match &report.ending {
            Ending::Matched {
                resume_text,
                payload,
                evidence,
                matched_at_ms,
                ..
            } => {
                let continuation = if before.then_json.is_none() {
                    CONT_NONE
                } else if before.state == CANCELLING {
                    CONT_CANCELLED
                } else if before.expires_at_ms.is_some_and(|e| *matched_at_ms > e) {
                    CONT_EXPIRED
                } else {
                    CONT_PENDING
                };
                exec(&tx,
                    "UPDATE waits SET state = 'matched', checks = CASE WHEN checks < ?1 THEN ?1 ELSE checks END,
                     last_error = COALESCE(?2, last_error), next_check_at_ms = NULL,
                     resume_text = ?3, payload = ?4, evidence = ?5, ended_at_ms = ?6,
                     continuation_state = ?7 WHERE id = ?8",
                    params![
                        ms(report.checks),
                        last_error,
                        resume_text,
                        payload,
                        evidence,
                        ms(*matched_at_ms),
                        continuation,
                        report.wait_id.as_str()
                    ],
                )
                .doing("recording a wait's match")?;
            }
            Ending::Failed { reason, at_ms } => {
                exec(&tx,
                    "UPDATE waits SET state = 'failed', checks = CASE WHEN checks < ?1 THEN ?1 ELSE checks END,
                     last_error = COALESCE(?2, last_error), next_check_at_ms = NULL,
                     fail_reason = ?3, ended_at_ms = ?4 WHERE id = ?5",
                    params![
                        ms(report.checks),
                        last_error,
                        reason.code(),
                        ms(*at_ms),
                        report.wait_id.as_str()
                    ],
                )
                .doing("recording a wait's failure")?;
            }
        }
        let after = one(&tx, &report.wait_id)?.unwrap_or(before);
        tx.commit().doing("committing a wait's ending")?;
        Ok(Recorded::Now(Box::new(after)))
    }

    /// Moves a `pending` continuation to `state` (never twice): returns whether it moved.
    pub(crate) fn settle_continuation(
        &self,
        wait_id: &str,
        state: &str,
        execution_id: Option<&str>,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        settle_continuation(&*self.lock(), wait_id, state, execution_id, error)
    }
}

/// [`Store::settle_continuation`] inside the caller's transaction.
pub(super) fn settle_continuation(
    conn: &impl super::db::Sql,
    wait_id: &str,
    state: &str,
    execution_id: Option<&str>,
    error: Option<&str>,
) -> Result<bool, StoreError> {
    let n = exec(
        conn,
        "UPDATE waits SET continuation_state = ?1, continuation_execution_id = ?2,
         continuation_error = ?3 WHERE id = ?4 AND continuation_state = 'pending'",
        params![state, execution_id, error, wait_id],
    )
    .doing("recording a wait's continuation")?;
    Ok(n == 1)
}
