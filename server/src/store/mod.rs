//! The server's durable state: one SQLite database (`DIR/outpost.db`, mode 0600 with its
//! `-wal` and `-shm`, WAL, `synchronous=FULL`) or one PostgreSQL database
//! (`--database postgres://…`, `synchronous_commit` on), versioned migrations in a
//! `schema_version` table.
//!
//! [`Store`] is the one seam to the database: every query the server makes goes through its
//! methods, none takes SQL from a caller, and each is written once for both databases
//! ([`db`] owns the difference). It keeps the dispatcher's live records byte for byte as
//! `ServerRecord::encode` wrote them (one row per record key, replaced on upsert; an
//! execution's is deleted when it ends, its end kept in its `executions` row) and the
//! server's own tables: users (and who was removed), tokens (SHA-256 only), contexts
//! (with their sharing, as the records say) and their machine keys, used nonces, executions
//! for listing, the audit log, condition waits, terminal recordings, and uploaded bundles (their rows here, their
//! bytes in files beside the database), and which node owns each context (the fence its
//! writes check). It never decides anything: the dispatcher and the routes do.

mod access;
mod adoption;
mod bundles;
pub mod changes;
mod connects;
pub(crate) mod db;
mod handoffs;
mod joins;
mod nodes;
mod owners;
#[cfg(test)]
mod owners_tests;
mod recordings;
mod records;
mod runs;
mod schema;
mod sealed;
mod sessions;
#[cfg(test)]
pub(crate) mod tests;
mod waits;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use db::{Conn, Driver, PgConn};

pub(crate) use access::{ContextEntry, Removal};
pub(crate) use bundles::{NewBundle, Stored};
pub use changes::Topic;
pub(crate) use connects::{Spend, Spent, heard_takes};
pub(crate) use handoffs::SharedTicket;
pub(crate) use joins::JoinTokenEntry;
pub(crate) use nodes::{NODE_LIVE, NodeReach};
pub(crate) use owners::{NODE_FENCE, OwnerRow};
pub(crate) use recordings::{RecordingAppend, RecordingEntry};
pub(crate) use records::{Batch, contexts_written};
pub(crate) use runs::{AuditRow, ExecutionEntry, KeptOutput, RunsFilter};
pub(crate) use sessions::SessionsChange;
pub(crate) use waits::{Recorded, WaitEntry};
/// The states of a wait and of its continuation.
pub(crate) mod wait_states {
    pub(crate) use super::waits::{
        ACTIVE, CANCELLING, CONT_ACCESS_LOST, CONT_NONE, CONT_PENDING, CONT_REFUSED, CONT_STARTED,
    };
}

/// A database error, with what the store was doing.
#[derive(Debug, thiserror::Error)]
#[error("the database failed while {doing}: {source}")]
pub struct StoreError {
    doing: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl StoreError {
    /// Whether the database did not answer (a lost connection, a stopped driver) rather than
    /// refused what was asked.
    pub(crate) fn is_unavailable(&self) -> bool {
        match self.source.downcast_ref::<db::DbError>() {
            Some(db::DbError::Postgres(e)) => {
                // Closed, or failed on its socket (refused, reset, timed out): not a refusal.
                e.is_closed()
                    || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
            }
            Some(db::DbError::DriverGone) => true,
            _ => false,
        }
    }

    /// The machine (context) whose fence this write failed (docs/CLUSTER.md §2): another
    /// node owns it now, or this node at a later epoch, and nothing of the transaction was
    /// written. A node's own fence is [`StoreError::fenced_node`]'s.
    pub(crate) fn fenced_context(&self) -> Option<&str> {
        self.fenced()
            .filter(|f| f.node_fenced().is_none())
            .map(|f| f.context_id.as_str())
    }

    /// The node whose own fence this write failed: another node judged it dead and took over
    /// its executions (docs/CLUSTER.md §7), or the node started again since; nothing of the
    /// transaction was written.
    pub(crate) fn fenced_node(&self) -> Option<&str> {
        self.fenced().and_then(owners::Fenced::node_fenced)
    }

    fn fenced(&self) -> Option<&owners::Fenced> {
        self.source.downcast_ref::<owners::Fenced>()
    }

    pub(crate) fn new(
        doing: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            doing,
            source: Box::new(source),
        }
    }
}

/// Adds `doing` to a rusqlite error.
pub(crate) trait Doing<T> {
    fn doing(self, doing: &'static str) -> Result<T, StoreError>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Doing<T> for Result<T, E> {
    fn doing(self, doing: &'static str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::new(doing, e))
    }
}

/// The store. Cheap calls: each takes a connection's lock for one statement or one
/// transaction. Writes go through one connection; reads through another, so that a read
/// (a token check, an execution a request waits on) never waits for a commit's fsync: in
/// WAL mode (and in PostgreSQL) a reader sees every transaction committed before its
/// statement began.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Conn>,
    reader: Mutex<Conn>,
    /// The folder of bundle files, `bundles/` in the state folder.
    bundles: std::path::PathBuf,
    /// Announces committed changes to the pages that keep a list open.
    changes: changes::Changes,
    /// Numbers the records this store writes.
    record_seq: records::RecordSeq,
    /// What drives PostgreSQL's sockets (none for SQLite): held only to be dropped after the
    /// connections (fields drop in order).
    _driver: Option<Driver>,
}

/// Which database a store keeps its state in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// `DIR/outpost.db`, the default.
    Sqlite,
    /// A PostgreSQL database by its URL (`postgres://user@host/db`).
    Postgres(String),
}

impl Database {
    /// The database `--database` names: absent is SQLite; a `postgres://` or
    /// `postgresql://` URL is PostgreSQL.
    pub fn from_flag(flag: Option<&str>) -> Result<Self, String> {
        match flag {
            None => Ok(Self::Sqlite),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Self::Postgres(url.to_owned()))
            }
            Some(other) => Err(format!(
                "--database `{}` is not a PostgreSQL URL: write postgres://USER@HOST:PORT/DATABASE, or leave it out for the SQLite file in the state folder",
                redact(other)
            )),
        }
    }

    /// Where the records are, for messages and `--json`: the SQLite file's path in the state
    /// folder `state_dir`, or the URL without its password.
    pub fn location(&self, state_dir: &Path) -> String {
        match self {
            Self::Sqlite => state_dir.join("outpost.db").display().to_string(),
            Self::Postgres(url) => redact(url),
        }
    }
}

/// Brings the schema of `database` (for the state folder `dir`) up to date without serving:
/// `outpost serve migrate`. Returns the version it is at. Safe while other nodes serve: they
/// refuse a schema newer than they know, and nodes migrating together take turns.
pub fn migrate(database: &Database, dir: &Path) -> Result<i64, StoreError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .doing("making the state folder")?;
    let (conn, _driver) = migrated(database, dir)?;
    schema::version(&conn)
}

/// The connection that writes to `database`, its schema brought up to date (PostgreSQL's
/// checked first for durable commits), and the driver of PostgreSQL's sockets.
fn migrated(database: &Database, dir: &Path) -> Result<(Conn, Option<Driver>), StoreError> {
    let (mut conn, driver) = connected(database, dir)?;
    schema::migrate(&mut conn)?;
    Ok((conn, driver))
}

/// The connection that writes to `database`, its schema as found, and the driver of
/// PostgreSQL's sockets.
fn connected(database: &Database, dir: &Path) -> Result<(Conn, Option<Driver>), StoreError> {
    Ok(match database {
        Database::Sqlite => {
            let path = dir.join("outpost.db");
            // 0600 before SQLite makes it (0644 less the umask), and its -wal and -shm with it.
            outpost_host::private_database(&path).doing("making the database private")?;
            (Conn::Sqlite(Store::connect(&path)?), None)
        }
        Database::Postgres(url) => {
            let driver = Driver::start().doing("starting the database driver")?;
            let conn =
                Conn::Postgres(PgConn::connect(url, &driver).doing("connecting to PostgreSQL")?);
            schema::require_durable_commits(&conn)?;
            (conn, Some(driver))
        }
    })
}

/// `url` with any password between `:` and `@` replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

impl Store {
    /// Opens the store `database` names for the state folder `dir` — `DIR/outpost.db`
    /// (created if needed), or the PostgreSQL database — brings its schema up to date and
    /// readies the bundle files (`DIR/bundles/`, for either).
    pub fn open_database(database: &Database, dir: &Path) -> Result<Self, StoreError> {
        use db::{Sql as _, params};
        let (conn, driver) = migrated(database, dir)?;
        // Opened after the migrations, so it never sees a schema half made.
        let reader = match (database, &driver) {
            (Database::Postgres(url), Some(driver)) => {
                Conn::Postgres(PgConn::connect(url, driver).doing("connecting to PostgreSQL")?)
            }
            _ => Conn::Sqlite(Self::connect(&dir.join("outpost.db"))?),
        };
        let record_seq = match &conn {
            Conn::Postgres(_) => records::RecordSeq::Postgres,
            Conn::Sqlite(_) => records::RecordSeq::counted_from(
                conn.query_row(
                    "SELECT COALESCE(MAX(seq), 0) FROM records",
                    params![],
                    |r| r.get(0),
                )
                .doing("reading the last record's number")?,
            ),
        };
        let store = Self {
            conn: Mutex::new(conn),
            reader: Mutex::new(reader),
            bundles: dir.join("bundles"),
            changes: changes::Changes::default(),
            record_seq,
            _driver: driver,
        };
        store.prepare_bundles()?;
        store.forget_old_ends()?;
        store.place_old_records()?;
        Ok(store)
    }

    /// One SQLite connection, set up as every connection of the store is.
    fn connect(path: &Path) -> Result<rusqlite::Connection, StoreError> {
        let conn = rusqlite::Connection::open(path).doing("opening the database")?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .doing("switching to WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")
            .doing("setting synchronous=FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .doing("enabling foreign keys")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .doing("setting the busy timeout")?;
        Ok(conn)
    }

    /// What changed, announced as it is committed (`GET /v1/events`).
    pub fn changes(&self) -> &changes::Changes {
        &self.changes
    }

    /// The connection that writes (and reads what a write depends on).
    fn lock(&self) -> MutexGuard<'_, Conn> {
        // A panic while holding the lock leaves SQLite consistent (statements are atomic and
        // unfinished transactions roll back on drop), so a poisoned lock is still usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection that only reads: it never waits for a commit in progress.
    fn read(&self) -> MutexGuard<'_, Conn> {
        self.reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs `work`, which blocks on the disk or the database, without holding up the runtime's
/// other tasks: on a multi-thread runtime the worker hands its queue to another thread first.
pub(crate) fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// Runs one statement on `conn` (a connection or a transaction).
fn exec(conn: &impl db::Sql, sql: &str, params: db::Params<'_>) -> Result<usize, db::DbError> {
    conn.execute(sql, params)
}
