//! The server's durable state: one SQLite database (`DIR/outpost.db`, mode 0600 with its
//! `-wal` and `-shm`, WAL, `synchronous=FULL`, versioned migrations in a `schema_version`
//! table).
//!
//! [`Store`] is the seam a Postgres store would replace: every query the server makes goes
//! through its methods, none takes SQL from a caller. It keeps the dispatcher's records byte
//! for byte as `ServerRecord::encode` wrote them (one row per record key, replaced on upsert)
//! and the server's own tables: users (and who was removed), tokens (SHA-256 only), contexts
//! (with their sharing, as the records say) and their machine keys, used nonces, executions
//! for listing, the audit log, condition waits, terminal recordings, and uploaded bundles (their rows here, their
//! bytes in files beside the database). It never decides anything: the dispatcher and the
//! routes do.

mod access;
mod bundles;
pub mod changes;
mod joins;
mod recordings;
mod records;
mod runs;
mod schema;
mod waits;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

pub(crate) use access::{ContextEntry, Removal};
pub(crate) use bundles::{NewBundle, Stored};
pub use changes::Topic;
pub(crate) use joins::JoinTokenEntry;
pub(crate) use recordings::{RecordingAppend, RecordingEntry};
pub(crate) use records::Batch;
pub(crate) use runs::{AuditRow, ExecutionEntry, KeptOutput, RunsFilter};
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

/// The SQLite store. Cheap calls: each takes a connection's lock for one statement or one
/// transaction. Writes go through one connection; reads through another, so that a read
/// (a token check, an execution a request waits on) never waits for a commit's fsync: in
/// WAL mode a reader sees every transaction committed before its statement began.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
    reader: Mutex<Connection>,
    /// The folder of bundle files, `bundles/` beside the database.
    bundles: std::path::PathBuf,
    /// Announces committed changes to the pages that keep a list open.
    changes: changes::Changes,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, brings its schema up to date and
    /// readies the bundle files beside it (`bundles/`).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        // 0600 before SQLite makes it (0644 less the umask), and its -wal and -shm with it.
        outpost_host::private_database(path).doing("making the database private")?;
        let conn = Self::connect(path)?;
        schema::migrate(&conn)?;
        // Opened after the migrations, so it never sees a schema half made.
        let reader = Self::connect(path)?;
        let folder = path.parent().unwrap_or_else(|| Path::new("."));
        let store = Self {
            conn: Mutex::new(conn),
            reader: Mutex::new(reader),
            bundles: folder.join("bundles"),
            changes: changes::Changes::default(),
        };
        store.prepare_bundles()?;
        Ok(store)
    }

    /// One connection to the database, set up as every connection of the store is.
    fn connect(path: &Path) -> Result<Connection, StoreError> {
        let conn = Connection::open(path).doing("opening the database")?;
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
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (statements are atomic and
        // unfinished transactions roll back on drop), so a poisoned lock is still usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection that only reads: it never waits for a commit in progress.
    fn read(&self) -> MutexGuard<'_, Connection> {
        self.reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs one statement through the connection's statement cache (prepared once, reused).
fn exec<P: rusqlite::Params>(
    conn: &rusqlite::Connection,
    sql: &str,
    params: P,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}
