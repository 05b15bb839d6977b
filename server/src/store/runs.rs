//! Executions as the listing routes show them, and the audit log.

use super::db::{DbError, OptionalExtension as _, Row, Sql as _, params};
use outpost_core::server::ExecutionStatus;

use super::exec;
use super::{Doing as _, Store, StoreError};

/// One execution's listing row.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExecutionEntry {
    pub(crate) id: String,
    pub(crate) user: String,
    /// The context the request named, as given.
    pub(crate) requested: Option<String>,
    /// `pending`, `running` or how it ended. A row whose status this server cannot read (a
    /// newer server's) reads as `failed`: an end, which never changes.
    pub(crate) status: ExecutionStatus,
    pub(crate) created_at: u64,
    pub(crate) finished_at: Option<u64>,
    pub(crate) context_id: Option<String>,
    /// The context's name, copied when it ran (kept after the context is deleted).
    pub(crate) context_name: Option<String>,
    /// The dispatcher's `ExecutionOutcome`, JSON.
    pub(crate) outcome_json: Option<String>,
    /// `ranOn`, JSON.
    pub(crate) ran_on_json: Option<String>,
    pub(crate) line: Option<String>,
    /// The bundle its capability names by digest, if it does (kept from the sweep while the
    /// execution has not ended).
    pub(crate) bundle: Option<String>,
    /// Its capability's manifest `name` (absent for executions older than the column).
    pub(crate) capability: Option<String>,
    /// Its capability's manifest `version`.
    pub(crate) capability_version: Option<u32>,
    /// What a run printed before it was cancelled or lost, from its live view.
    pub(crate) kept: Option<KeptOutput>,
}

/// The output a run that has no result printed (cancelled, lost), as its live view held it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeptOutput {
    /// Standard output's text.
    pub(crate) stdout: String,
    /// Standard error's text.
    pub(crate) stderr: String,
    /// Part of it was not held (over the live caps, or missed across a server restart).
    pub(crate) cut: bool,
}

/// Which executions a list shows (`GET /v1/runs`).
#[derive(Debug, Clone, Default)]
pub(crate) struct RunsFilter<'a> {
    /// Only this user's (every user's when `None`).
    pub(crate) user: Option<&'a str>,
    /// Only those that asked for, or ran on, this context (a name or an id).
    pub(crate) context: Option<&'a str>,
    /// Only those with this status.
    pub(crate) status: Option<ExecutionStatus>,
    /// Only those created at or after this Unix second.
    pub(crate) since: Option<u64>,
    /// Only those older than this execution (the page before it).
    pub(crate) before: Option<&'a str>,
    /// At most this many.
    pub(crate) limit: u32,
}

pub(super) const COLUMNS: &str = "id, \"user\", requested, status, created_at, finished_at, context_id, \
     context_name, outcome_json, ran_on_json, line, capability, capability_version, \
     kept_stdout, kept_stderr, kept_cut";

/// A stored status; one this server cannot read (a newer server's) is `failed`, an end: it
/// never changes again, and nothing waits for it.
fn read_status(text: &str) -> ExecutionStatus {
    ExecutionStatus::parse(text).unwrap_or(ExecutionStatus::Failed)
}

pub(super) fn execution_row(r: &Row) -> Result<ExecutionEntry, DbError> {
    Ok(ExecutionEntry {
        id: r.get(0)?,
        user: r.get(1)?,
        requested: r.get(2)?,
        status: read_status(&r.get::<String>(3)?),
        created_at: r.get::<i64>(4)? as u64,
        finished_at: r.get::<Option<i64>>(5)?.map(|t| t as u64),
        context_id: r.get(6)?,
        context_name: r.get(7)?,
        outcome_json: r.get(8)?,
        ran_on_json: r.get(9)?,
        line: r.get(10)?,
        bundle: None,
        capability: r.get(11)?,
        capability_version: r.get::<Option<i64>>(12)?.map(|v| v as u32),
        kept: match (r.get::<Option<String>>(13)?, r.get::<Option<String>>(14)?) {
            (None, None) => None,
            (stdout, stderr) => Some(KeptOutput {
                stdout: stdout.unwrap_or_default(),
                stderr: stderr.unwrap_or_default(),
                cut: r.get::<Option<bool>>(15)?.unwrap_or(false),
            }),
        },
    })
}

/// One audit event.
#[derive(Debug, Clone)]
pub(crate) struct AuditEntry {
    pub(crate) at: u64,
    pub(crate) kind: String,
    pub(crate) actor: String,
    pub(crate) context_id: Option<String>,
    /// The context's name now (none once it is deleted).
    pub(crate) context_name: Option<String>,
    pub(crate) detail: String,
}

/// An audit event to append.
#[derive(Debug, Clone)]
pub(crate) struct AuditRow {
    /// Wall time, in seconds.
    pub(crate) at: u64,
    pub(crate) kind: String,
    pub(crate) actor: String,
    pub(crate) context_id: Option<String>,
    pub(crate) detail: String,
}

/// Records a new execution as `pending` (inside the caller's transaction, if any).
pub(super) fn insert_execution(
    conn: &impl super::db::Sql,
    entry: &ExecutionEntry,
) -> Result<(), StoreError> {
    exec(
        conn,
        "INSERT INTO executions (id, \"user\", requested, status, created_at, context_id, \
         context_name, bundle, capability, capability_version) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            entry.id,
            entry.user,
            entry.requested,
            entry.status.as_str(),
            entry.created_at as i64,
            entry.context_id,
            entry.context_name,
            entry.bundle,
            entry.capability,
            entry.capability_version.map(i64::from)
        ],
    )
    .doing("recording an execution")?;
    Ok(())
}

/// Appends an audit event (inside the caller's transaction, if any).
pub(super) fn insert_audit(conn: &impl super::db::Sql, row: &AuditRow) -> Result<(), StoreError> {
    exec(
        conn,
        "INSERT INTO audit (at, kind, actor, context_id, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            row.at as i64,
            row.kind,
            row.actor,
            row.context_id,
            row.detail
        ],
    )
    .doing("writing an audit event")?;
    Ok(())
}

impl Store {
    /// One execution.
    pub fn execution(&self, id: &str) -> Result<Option<ExecutionEntry>, StoreError> {
        self.read()
            .query_row(
                &format!("SELECT {COLUMNS} FROM executions WHERE id = ?1"),
                params![id],
                execution_row,
            )
            .optional()
            .doing("reading an execution")
    }

    /// Executions, newest first, as `filter` says (a context by the name it had, its id, or
    /// the name the request gave).
    pub(crate) fn executions(
        &self,
        filter: &RunsFilter<'_>,
    ) -> Result<Vec<ExecutionEntry>, StoreError> {
        self.read()
            .query_map(
                &format!(
                    "SELECT {COLUMNS} FROM executions
                 WHERE (CAST(?1 AS TEXT) IS NULL OR \"user\" = ?1)
                   AND (CAST(?2 AS TEXT) IS NULL OR context_name = ?2 OR context_id = ?2 OR requested = ?2)
                   AND (CAST(?3 AS TEXT) IS NULL OR status = ?3)
                   AND (CAST(?4 AS BIGINT) IS NULL OR created_at >= ?4)
                   AND (CAST(?5 AS TEXT) IS NULL OR (created_at, rowid) <
                        (SELECT created_at, rowid FROM executions WHERE id = ?5))
                 ORDER BY created_at DESC, rowid DESC LIMIT ?6"
                ),
                params![
                    filter.user,
                    filter.context,
                    filter.status.map(ExecutionStatus::as_str),
                    filter.since.map(|s| s as i64),
                    filter.before,
                    filter.limit
                ],
                execution_row,
            )
            .doing("listing executions")
    }

    /// Appends an audit event (its own transaction).
    pub fn audit(
        &self,
        at: u64,
        kind: &str,
        actor: &str,
        context_id: Option<&str>,
        detail: &str,
    ) -> Result<(), StoreError> {
        let row = AuditRow {
            at,
            kind: kind.to_owned(),
            actor: actor.to_owned(),
            context_id: context_id.map(str::to_owned),
            detail: detail.to_owned(),
        };
        insert_audit(&*self.lock(), &row)?;
        self.changes.notify(super::Topic::Audit);
        Ok(())
    }

    /// The latest audit events, newest first; only `actor`'s and its contexts' when given.
    pub fn audit_events(
        &self,
        actor: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.read()
            .query_map(
                "SELECT a.at, a.kind, a.actor, a.context_id, a.detail, c.name FROM audit a
                 LEFT JOIN contexts c ON c.id = a.context_id
                 WHERE CAST(?1 AS TEXT) IS NULL OR a.actor = ?1
                    OR a.context_id IN (SELECT id FROM contexts WHERE operator = ?1)
                 ORDER BY a.seq DESC LIMIT ?2",
                params![actor, limit],
                |r| {
                    Ok(AuditEntry {
                        at: r.get::<i64>(0)? as u64,
                        kind: r.get(1)?,
                        actor: r.get(2)?,
                        context_id: r.get(3)?,
                        detail: r.get(4)?,
                        context_name: r.get(5)?,
                    })
                },
            )
            .doing("reading the audit log")
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn a_stored_status_reads_back_and_one_from_a_newer_server_is_an_end() {
        for status in ExecutionStatus::ALL {
            assert_eq!(read_status(status.as_str()), status);
        }
        let newer = read_status("a status from a newer server");
        assert_eq!(newer, ExecutionStatus::Failed);
        assert!(newer.is_final());
    }
}
