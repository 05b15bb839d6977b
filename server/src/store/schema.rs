//! The database schema and its migrations, applied in order and recorded in
//! `schema_version`. A database newer than this code is refused, never altered.

use rusqlite::Connection;

use super::{Doing as _, StoreError};

/// Each migration, in order: index + 1 is the version it brings the schema to.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "
    CREATE TABLE records (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        seq INTEGER NOT NULL,
        bytes BLOB NOT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE tokens (
        hash BLOB PRIMARY KEY,
        user TEXT NOT NULL REFERENCES users(name),
        scopes TEXT NOT NULL,
        expires_at INTEGER,
        revoked INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE contexts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        operator TEXT NOT NULL,
        key_id TEXT NOT NULL UNIQUE,
        max_concurrent INTEGER NOT NULL,
        environments TEXT NOT NULL,
        daemon_version TEXT NOT NULL,
        registered_at INTEGER NOT NULL,
        grant_json TEXT NOT NULL,
        grant_version INTEGER NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE machine_keys (
        key_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        public_key BLOB NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE nonces (
        key_id TEXT NOT NULL,
        nonce TEXT NOT NULL,
        created INTEGER NOT NULL,
        expires INTEGER,
        keep_until INTEGER NOT NULL,
        PRIMARY KEY (key_id, nonce)
    );
    CREATE TABLE executions (
        id TEXT PRIMARY KEY,
        user TEXT NOT NULL,
        requested TEXT,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        finished_at INTEGER,
        context_id TEXT,
        context_name TEXT,
        outcome_json TEXT,
        ran_on_json TEXT,
        line TEXT
    );
    CREATE INDEX executions_by_user ON executions (user, created_at);
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        actor TEXT NOT NULL,
        context_id TEXT,
        detail TEXT NOT NULL
    );
    ",
    // 2: capability bundles uploaded by digest (PROTOCOL §11.4).
    "CREATE TABLE bundles (
        sha256 TEXT PRIMARY KEY,
        bytes BLOB NOT NULL,
        user TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );",
    // 3: contexts found by operator and name without a scan.
    "CREATE INDEX contexts_by_name ON contexts (operator, name);",
    // 4: sharing (the access columns follow the dispatcher's context records) and users
    // removed from the organization.
    "
    ALTER TABLE contexts ADD COLUMN shared_with_all_members INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE contexts ADD COLUMN opted_in TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE contexts ADD COLUMN operator_is_member INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE users ADD COLUMN removed_at INTEGER;
    ",
    // 5: the next record sequence (`MAX(seq)`, read by every commit) and the restore order
    // without a scan: ended executions' records stay, so the table grows with the history.
    "CREATE INDEX records_by_seq ON records (seq);",
    // 6: condition waits (PROTOCOL §11.7): one row per registration, its progress as the
    // daemon reports it, its ending (recorded once) and its continuation.
    "
    CREATE TABLE waits (
        id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        context_name TEXT NOT NULL,
        requester TEXT NOT NULL,
        source TEXT NOT NULL,
        interval_ms INTEGER NOT NULL,
        expires_at_ms INTEGER,
        reason TEXT,
        then_json TEXT,
        dedupe_key TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        state TEXT NOT NULL,
        checks INTEGER NOT NULL DEFAULT 0,
        consecutive_errors INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        next_check_at_ms INTEGER,
        resume_text TEXT,
        payload TEXT,
        evidence TEXT,
        fail_reason TEXT,
        ended_at_ms INTEGER,
        continuation_state TEXT NOT NULL DEFAULT 'none',
        continuation_execution_id TEXT,
        continuation_error TEXT
    );
    CREATE UNIQUE INDEX waits_dedupe ON waits (dedupe_key) WHERE state = 'active';
    CREATE INDEX waits_by_requester ON waits (requester, created_at_ms);
    CREATE INDEX waits_by_context ON waits (context_id, state);
    ",
    // 7: bundles live in files (`DIR/bundles/<sha256>`, moved there from `bytes` when the
    // store opens); the rows keep each one's size and last use for the per-user quota and
    // the sweep, and its manifest; an execution names the bundle it runs, so the sweep
    // keeps what an execution not ended needs.
    "
    ALTER TABLE bundles ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bundles ADD COLUMN used_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE bundles ADD COLUMN manifest TEXT;
    UPDATE bundles SET size = length(bytes), used_at = created_at;
    CREATE INDEX bundles_by_user ON bundles (user);
    CREATE INDEX bundles_by_use ON bundles (used_at);
    ALTER TABLE executions ADD COLUMN bundle TEXT;
    CREATE INDEX executions_by_bundle ON executions (bundle, status) WHERE bundle IS NOT NULL;
    ",
    // 8: what an execution ran (its capability's name and version, for lists and `runs
    // show`), and the output a run printed before it was cancelled or lost (it has no result
    // to carry it), kept from its live view.
    "
    ALTER TABLE executions ADD COLUMN capability TEXT;
    ALTER TABLE executions ADD COLUMN capability_version INTEGER;
    ALTER TABLE executions ADD COLUMN kept_stdout TEXT;
    ALTER TABLE executions ADD COLUMN kept_stderr TEXT;
    ALTER TABLE executions ADD COLUMN kept_cut INTEGER;
    CREATE INDEX executions_by_time ON executions (created_at);
    ",
    // 9: join tokens: a join's token with its bounds (uses, a name prefix; the expiry and the
    // revocation are its token's), and which one registered each context.
    "
    CREATE TABLE join_tokens (
        id TEXT PRIMARY KEY,
        hash BLOB NOT NULL UNIQUE REFERENCES tokens(hash),
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        uses_left INTEGER,
        used INTEGER NOT NULL DEFAULT 0,
        name_prefix TEXT
    );
    ALTER TABLE contexts ADD COLUMN join_token TEXT;
    ",
    // 10: terminal recordings: a row per recorded session and its asciicast text in
    // append-only chunks (appending never rewrites what is stored).
    "
    CREATE TABLE recordings (
        exec_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        context_name TEXT NOT NULL,
        opened_by TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        ended_at INTEGER,
        size INTEGER NOT NULL,
        records_input INTEGER NOT NULL,
        truncated INTEGER NOT NULL
    );
    CREATE INDEX recordings_by_time ON recordings (started_at);
    CREATE TABLE recording_chunks (
        exec_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (exec_id, seq)
    );
    ",
];

/// The version recorded, 0 for an empty database.
pub(super) fn version(conn: &Connection) -> Result<i64, StoreError> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        .doing("creating schema_version")?;
    let v: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .doing("reading the schema version")?;
    Ok(v.unwrap_or(0))
}

/// Applies every migration the database lacks, each in its own transaction.
pub(super) fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let current = version(conn)?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::new(
            "checking the schema version",
            NewerSchema {
                found: current,
                known,
            },
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.unchecked_transaction().doing("starting a migration")?;
        tx.execute_batch(sql).doing("migrating the schema")?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [i as i64 + 1],
        )
        .doing("recording the schema version")?;
        tx.commit().doing("committing a migration")?;
    }
    Ok(())
}

/// The database was written by a newer server.
#[derive(Debug, thiserror::Error)]
#[error(
    "the database is at schema version {found}; this server knows up to {known}: upgrade outpost"
)]
struct NewerSchema {
    found: i64,
    known: i64,
}
