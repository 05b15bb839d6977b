//! The database schema and its migrations, applied in order and recorded in
//! `schema_version`. A database newer than this code is refused, never altered.

use super::db::{Conn, Sql, params};
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
    // 11: the nodes serving this database (docs/CLUSTER.md §4): each one's heartbeat by the
    // database's clock, and the daemons connected to it at its last heartbeat.
    "
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        heartbeat_at_ms INTEGER NOT NULL,
        sessions TEXT NOT NULL DEFAULT '[]'
    );
    ",
    // 12: nothing in SQLite (its record numbers were `MAX(seq) + 1`, counted by the writing
    // process since 24); PostgreSQL's records take theirs from a sequence.
    "",
    // 13: ownership with fencing (docs/CLUSTER.md §2): the node that owns each context and the
    // epoch it took it at (every transaction that writes the context's records checks both
    // first, so a node that lost the context writes nothing more for it); the node that wrote
    // each record; and the node whose relay records each terminal session (a starting node
    // ends only the open recordings of nodes no longer live). Both columns are null in rows
    // written before.
    "
    CREATE TABLE context_owner (
        context_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        epoch INTEGER NOT NULL
    );
    ALTER TABLE records ADD COLUMN node_id TEXT;
    ALTER TABLE recordings ADD COLUMN node_id TEXT;
    ",
    // 14: executions handed to the node that owns the machine their route reached
    // (docs/CLUSTER.md §3), and cancels asked of a node that does not hold the execution:
    // each node's inbox, taken by the owner with one statement.
    "
    CREATE TABLE handoffs (
        exec_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL
    );
    CREATE INDEX handoffs_by_context ON handoffs (context_id);
    CREATE TABLE cancel_requests (
        exec_id TEXT PRIMARY KEY,
        asked_at_ms INTEGER NOT NULL
    );
    ",
    // 15: changes asked of the node that owns a machine by a node that does not (a grant, a
    // revoke, an access record: docs/CLUSTER.md §3), with the owner's answer.
    "
    CREATE TABLE owner_requests (
        id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        body TEXT NOT NULL,
        state TEXT NOT NULL,
        answer TEXT,
        asked_at_ms INTEGER NOT NULL
    );
    CREATE INDEX owner_requests_by_context ON owner_requests (context_id, state);
    ",
    // 16: connect tickets, shared by the nodes of a cluster (docs/CLUSTER.md §4): a ticket
    // issued by one node opens a WebSocket on any, once. Only its id and its secret's SHA-256
    // are kept.
    "
    CREATE TABLE connect_tickets (
        id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        secret_sha256 TEXT NOT NULL,
        session_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    );
    ",
    // 17: secrets the nodes of a cluster share, sealed under the root key (src/sealed.rs):
    // the frame keys and the admin and join tokens, each a name, a version and its bytes.
    "
    CREATE TABLE sealed (
        name TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        bytes BLOB NOT NULL
    );
    ",
    // 18: the machine each execution record is placed on ('' for none; NULL until the store
    // reads it from the record at its next open), so that a node taking one machine reads that
    // machine's records only.
    "
    ALTER TABLE records ADD COLUMN placed_on TEXT;
    CREATE INDEX records_by_placement ON records (placed_on);
    ",
    // 19: each owner row's change number (every take, claim and adoption sets the next), so
    // that a node's heartbeat reads the rows changed since its last one, not all of them; and
    // the rows by node, which is how a dead node's machines are found.
    "
    ALTER TABLE context_owner ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX context_owner_by_change ON context_owner (changed);
    CREATE INDEX context_owner_by_node ON context_owner (node_id);
    ",
    // 20: how the other nodes reach each node (docs/CLUSTER.md §3): the URL of the node itself,
    // not of a load balancer in front of all of them, and the SHA-256 of its TLS certificate,
    // pinned by the node that relays a terminal or a live output to it. Both are null in rows
    // of nodes of an earlier version, which no request is relayed to.
    "
    ALTER TABLE nodes ADD COLUMN node_url TEXT;
    ALTER TABLE nodes ADD COLUMN tls_sha256 TEXT;
    ",
    // 21: the daemons connected to each node, one row per node and machine (docs/CLUSTER.md
    // §9), written by the heartbeat as changes and read by machine, instead of the whole list
    // in `nodes.sessions` (megabytes with tens of thousands of daemons), which is left empty.
    "
    CREATE TABLE node_sessions (
        node_id TEXT NOT NULL,
        context_id TEXT NOT NULL,
        session TEXT NOT NULL,
        PRIMARY KEY (node_id, context_id)
    );
    CREATE INDEX node_sessions_by_context ON node_sessions (context_id);
    ",
    // 22: contexts by name, live ones oldest first, with and without their operator: what an
    // execute that names a context looks up (`live_context_id_named`), which scanned every
    // context and sorted what it found before; the indexes hold the order too.
    "
    DROP INDEX contexts_by_name;
    CREATE INDEX contexts_by_name ON contexts (operator, name, revoked, registered_at, id);
    CREATE INDEX contexts_by_live_name ON contexts (name, revoked, registered_at, id);
    ",
    // 23: fewer pages per execution's end. Its record is no longer kept (`kind = 'ended'`,
    // never restored, so every start read the whole history to skip it): the `executions`
    // row holds the end. The audit's numbers come from its rowid instead of AUTOINCREMENT,
    // which wrote `sqlite_sequence` in every transaction that audits: the log is never
    // pruned and only ordered by them, so the largest is never reused.
    "
    DELETE FROM records WHERE kind = 'ended';
    CREATE TABLE audit_numbered (
        seq INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        actor TEXT NOT NULL,
        context_id TEXT,
        detail TEXT NOT NULL
    );
    INSERT INTO audit_numbered (seq, at, kind, actor, context_id, detail)
        SELECT seq, at, kind, actor, context_id, detail FROM audit;
    DROP TABLE audit;
    ALTER TABLE audit_numbered RENAME TO audit;
    DELETE FROM sqlite_sequence WHERE name = 'audit';
    ",
    // 24: a lone server's records without the indexes of their placements and numbers, each
    // of which cost a page of every commit that wrote an execution's record. Only a
    // cluster's nodes, over PostgreSQL, read a machine's records by placement while they
    // run; a lone server reads them so at its start and when it learns or lets go of a
    // machine, and its table holds live records alone (an end keeps none since 23). The
    // numbers are counted by the one process that writes (`RecordSeq`), from the largest
    // read once at its start.
    "
    DROP INDEX records_by_placement;
    DROP INDEX records_by_seq;
    ",
];

/// The migrations after [`POSTGRES_BASELINE`] in PostgreSQL's words: entry `i` brings a
/// PostgreSQL database to version `POSTGRES_BASELINE + i + 1`, as `MIGRATIONS` does SQLite.
const POSTGRES_MIGRATIONS: &[&str] = &[
    // 11
    "
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        heartbeat_at_ms BIGINT NOT NULL,
        sessions TEXT NOT NULL DEFAULT '[]'
    );
    ",
    // 12: the record sequence, which nodes writing at once never share a number of, going on
    // from the largest number written so far.
    "
    CREATE SEQUENCE records_seq;
    SELECT setval('records_seq', COALESCE((SELECT MAX(seq) FROM records), 0) + 1, false);
    ",
    // 13: each context's owner and epoch, the node that wrote each record and the node whose
    // relay records each terminal session, as SQLite's 13.
    "
    CREATE TABLE context_owner (
        context_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        epoch BIGINT NOT NULL
    );
    ALTER TABLE records ADD COLUMN node_id TEXT;
    ALTER TABLE recordings ADD COLUMN node_id TEXT;
    ",
    // 14: hand-offs and cancel requests between nodes, as SQLite's 14.
    "
    CREATE TABLE handoffs (
        exec_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL
    );
    CREATE INDEX handoffs_by_context ON handoffs (context_id);
    CREATE TABLE cancel_requests (
        exec_id TEXT PRIMARY KEY,
        asked_at_ms BIGINT NOT NULL
    );
    ",
    // 15: changes asked of a machine's owner, as SQLite's 15.
    "
    CREATE TABLE owner_requests (
        id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        body TEXT NOT NULL,
        state TEXT NOT NULL,
        answer TEXT,
        asked_at_ms BIGINT NOT NULL
    );
    CREATE INDEX owner_requests_by_context ON owner_requests (context_id, state);
    ",
    // 16: shared connect tickets, as SQLite's 16.
    "
    CREATE TABLE connect_tickets (
        id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        secret_sha256 TEXT NOT NULL,
        session_id TEXT NOT NULL,
        expires_at BIGINT NOT NULL
    );
    ",
    // 17: sealed shared secrets, as SQLite's 17.
    "
    CREATE TABLE sealed (
        name TEXT PRIMARY KEY,
        version BIGINT NOT NULL,
        bytes BYTEA NOT NULL
    );
    ",
    // 18: each execution record's machine, as SQLite's 18.
    "
    ALTER TABLE records ADD COLUMN placed_on TEXT;
    CREATE INDEX records_by_placement ON records (placed_on);
    ",
    // 19: each owner row's change number, as SQLite's 19, from a sequence of its own.
    "
    CREATE SEQUENCE context_owner_changes;
    ALTER TABLE context_owner ADD COLUMN changed BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX context_owner_by_change ON context_owner (changed);
    CREATE INDEX context_owner_by_node ON context_owner (node_id);
    ",
    // 20: how the other nodes reach each node, as SQLite's 20.
    "
    ALTER TABLE nodes ADD COLUMN node_url TEXT;
    ALTER TABLE nodes ADD COLUMN tls_sha256 TEXT;
    ",
    // 21: the daemons connected to each node, as SQLite's 21.
    "
    CREATE TABLE node_sessions (
        node_id TEXT NOT NULL,
        context_id TEXT NOT NULL,
        session TEXT NOT NULL,
        PRIMARY KEY (node_id, context_id)
    );
    CREATE INDEX node_sessions_by_context ON node_sessions (context_id);
    ",
    // 22: contexts by name, with and without their operator, as SQLite's 22.
    "
    DROP INDEX contexts_by_name;
    CREATE INDEX contexts_by_name ON contexts (operator, name, revoked, registered_at, id);
    CREATE INDEX contexts_by_live_name ON contexts (name, revoked, registered_at, id);
    ",
    // 23: ends' records no longer kept, as SQLite's 23 (the audit's identity column writes
    // no page per row here).
    "DELETE FROM records WHERE kind = 'ended';",
    // 24: nothing; a cluster's nodes keep the indexes that SQLite's 24 drops.
    "SELECT 1;",
];

// Every SQLite migration after the baseline has its PostgreSQL twin.
const _: () = assert!(MIGRATIONS.len() == POSTGRES_BASELINE as usize + POSTGRES_MIGRATIONS.len());

/// The PostgreSQL schema at version [`POSTGRES_BASELINE`]: what [`MIGRATIONS`] 1 to 10 make
/// in SQLite, in PostgreSQL's words (`BIGINT` for `INTEGER`, `BYTEA` for `BLOB`, identity
/// columns for `AUTOINCREMENT`, and a `rowid` column where queries order by SQLite's). A new
/// PostgreSQL database starts here; every migration after it is written in both dialects.
const POSTGRES_SCHEMA: &str = "
    CREATE TABLE records (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        seq BIGINT NOT NULL,
        bytes BYTEA NOT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE INDEX records_by_seq ON records (seq);
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        created_at BIGINT NOT NULL,
        removed_at BIGINT
    );
    CREATE TABLE tokens (
        hash BYTEA PRIMARY KEY,
        \"user\" TEXT NOT NULL REFERENCES users(name),
        scopes TEXT NOT NULL,
        expires_at BIGINT,
        revoked BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL
    );
    CREATE TABLE contexts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        operator TEXT NOT NULL,
        key_id TEXT NOT NULL UNIQUE,
        max_concurrent BIGINT NOT NULL,
        environments TEXT NOT NULL,
        daemon_version TEXT NOT NULL,
        registered_at BIGINT NOT NULL,
        grant_json TEXT NOT NULL,
        grant_version BIGINT NOT NULL,
        revoked BIGINT NOT NULL DEFAULT 0,
        shared_with_all_members BIGINT NOT NULL DEFAULT 0,
        opted_in TEXT NOT NULL DEFAULT '[]',
        operator_is_member BIGINT NOT NULL DEFAULT 1,
        join_token TEXT
    );
    CREATE INDEX contexts_by_name ON contexts (operator, name);
    CREATE TABLE machine_keys (
        key_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        public_key BYTEA NOT NULL,
        revoked BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE nonces (
        key_id TEXT NOT NULL,
        nonce TEXT NOT NULL,
        created BIGINT NOT NULL,
        expires BIGINT,
        keep_until BIGINT NOT NULL,
        PRIMARY KEY (key_id, nonce)
    );
    CREATE TABLE executions (
        id TEXT PRIMARY KEY,
        \"user\" TEXT NOT NULL,
        requested TEXT,
        status TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        finished_at BIGINT,
        context_id TEXT,
        context_name TEXT,
        outcome_json TEXT,
        ran_on_json TEXT,
        line TEXT,
        bundle TEXT,
        capability TEXT,
        capability_version BIGINT,
        kept_stdout TEXT,
        kept_stderr TEXT,
        kept_cut BIGINT,
        rowid BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE
    );
    CREATE INDEX executions_by_user ON executions (\"user\", created_at);
    CREATE INDEX executions_by_bundle ON executions (bundle, status) WHERE bundle IS NOT NULL;
    CREATE INDEX executions_by_time ON executions (created_at);
    CREATE TABLE audit (
        seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        at BIGINT NOT NULL,
        kind TEXT NOT NULL,
        actor TEXT NOT NULL,
        context_id TEXT,
        detail TEXT NOT NULL
    );
    CREATE TABLE bundles (
        sha256 TEXT PRIMARY KEY,
        bytes BYTEA NOT NULL,
        \"user\" TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        size BIGINT NOT NULL DEFAULT 0,
        used_at BIGINT NOT NULL DEFAULT 0,
        manifest TEXT
    );
    CREATE INDEX bundles_by_user ON bundles (\"user\");
    CREATE INDEX bundles_by_use ON bundles (used_at);
    CREATE TABLE waits (
        id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        context_name TEXT NOT NULL,
        requester TEXT NOT NULL,
        source TEXT NOT NULL,
        interval_ms BIGINT NOT NULL,
        expires_at_ms BIGINT,
        reason TEXT,
        then_json TEXT,
        dedupe_key TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        state TEXT NOT NULL,
        checks BIGINT NOT NULL DEFAULT 0,
        consecutive_errors BIGINT NOT NULL DEFAULT 0,
        last_error TEXT,
        next_check_at_ms BIGINT,
        resume_text TEXT,
        payload TEXT,
        evidence TEXT,
        fail_reason TEXT,
        ended_at_ms BIGINT,
        continuation_state TEXT NOT NULL DEFAULT 'none',
        continuation_execution_id TEXT,
        continuation_error TEXT,
        rowid BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE
    );
    CREATE UNIQUE INDEX waits_dedupe ON waits (dedupe_key) WHERE state = 'active';
    CREATE INDEX waits_by_requester ON waits (requester, created_at_ms);
    CREATE INDEX waits_by_context ON waits (context_id, state);
    CREATE TABLE join_tokens (
        id TEXT PRIMARY KEY,
        hash BYTEA NOT NULL UNIQUE REFERENCES tokens(hash),
        created_by TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        uses_left BIGINT,
        used BIGINT NOT NULL DEFAULT 0,
        name_prefix TEXT,
        rowid BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE
    );
    CREATE TABLE recordings (
        exec_id TEXT PRIMARY KEY,
        context_id TEXT NOT NULL,
        context_name TEXT NOT NULL,
        opened_by TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        ended_at BIGINT,
        size BIGINT NOT NULL,
        records_input BIGINT NOT NULL,
        truncated BIGINT NOT NULL
    );
    CREATE INDEX recordings_by_time ON recordings (started_at);
    CREATE TABLE recording_chunks (
        exec_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (exec_id, seq)
    );
";

/// The schema version [`POSTGRES_SCHEMA`] is.
const POSTGRES_BASELINE: i64 = 10;

/// Any number both ways agree on, held for the length of a PostgreSQL migration so that nodes
/// starting together migrate one after another (`pg_advisory_xact_lock`).
const MIGRATION_LOCK: i64 = 0x6f75_7470_6f73_7431;

/// The schema version this server brings a database to.
pub(super) fn known_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// The version recorded, 0 for an empty database.
pub(super) fn version(conn: &impl Sql) -> Result<i64, StoreError> {
    let v: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", params![], |r| {
            r.get(0)
        })
        .doing("reading the schema version")?;
    Ok(v.unwrap_or(0))
}

/// Applies every migration the database lacks, each in its own transaction.
pub(super) fn migrate(conn: &mut Conn) -> Result<(), StoreError> {
    migrate_until(conn, known_version())
}

/// Applies the migrations the database lacks up to version `until` (at most this server's),
/// each in its own transaction: the tests make a database of an earlier version with it.
pub(super) fn migrate_until(conn: &mut Conn, until: i64) -> Result<(), StoreError> {
    let postgres = conn.is_postgres();
    let known = known_version();
    let until = until.min(known);
    loop {
        let tx = conn.transaction().doing("starting a migration")?;
        if postgres {
            tx.query_row(
                "SELECT CAST(1 AS BIGINT) FROM (SELECT pg_advisory_xact_lock(?1)) AS held",
                params![MIGRATION_LOCK],
                |r| r.get::<i64>(0),
            )
            .doing("waiting for another node's migration")?;
        }
        // Inside the lock: two nodes creating it at once would collide in PostgreSQL.
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
            .doing("creating schema_version")?;
        let current = version(&tx)?;
        if current > known {
            return Err(StoreError::new(
                "checking the schema version",
                NewerSchema {
                    found: current,
                    known,
                },
            ));
        }
        if current >= until {
            return Ok(());
        }
        let (sql, reached) = if postgres && current == 0 {
            (POSTGRES_SCHEMA, POSTGRES_BASELINE)
        } else if postgres && current < POSTGRES_BASELINE {
            return Err(StoreError::new(
                "checking the schema version",
                NewerSchema {
                    found: current,
                    known: POSTGRES_BASELINE,
                },
            ));
        } else if postgres {
            (
                POSTGRES_MIGRATIONS[(current - POSTGRES_BASELINE) as usize],
                current + 1,
            )
        } else {
            (MIGRATIONS[current as usize], current + 1)
        };
        tx.execute_batch(sql).doing("migrating the schema")?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            params![reached],
        )
        .doing("recording the schema version")?;
        tx.commit().doing("committing a migration")?;
    }
}

/// Refuses a PostgreSQL server that may acknowledge a commit before it is durable: a node
/// would then acknowledge a result (`run.ack`) that a crash of the database forgets.
pub(super) fn require_durable_commits(conn: &Conn) -> Result<(), StoreError> {
    let setting: String = conn
        .query_row(
            "SELECT setting FROM pg_settings WHERE name = 'synchronous_commit'",
            params![],
            |r| r.get(0),
        )
        .doing("reading synchronous_commit")?;
    if setting == "off" {
        return Err(StoreError::new(
            "checking synchronous_commit",
            AsynchronousCommit,
        ));
    }
    Ok(())
}

/// PostgreSQL runs with `synchronous_commit = off`.
#[derive(Debug, thiserror::Error)]
#[error(
    "PostgreSQL runs with synchronous_commit = off: a commit it acknowledges may be lost in a crash, and outpost acknowledges results after their commit; set synchronous_commit = on (the default) for this database or its role"
)]
struct AsynchronousCommit;

/// The database was written by a newer server.
#[derive(Debug, thiserror::Error)]
#[error(
    "the database is at schema version {found}; this server knows up to {known}: upgrade outpost"
)]
struct NewerSchema {
    found: i64,
    known: i64,
}
