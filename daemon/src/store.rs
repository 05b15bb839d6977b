//! The daemon's durable records in one SQLite file (`daemon.db` in its home, mode 0600 with
//! its `-wal` and `-shm`; WAL):
//! the journal of [`DaemonRecord`]s the core hands out, a snapshot
//! the journal is folded into when the store is opened (docs/RECORDS.md), and one row per
//! condition wait ([`WaitRow`], replaced on every save of the core's wait schedule), with the
//! wait's recent events (`ctx.read('events')`, at most [`WAIT_EVENTS_KEPT`] a wait — the
//! writer names the older ones to delete — committed with the rows and deleted with them).
//! Beside the snapshot document it keeps the run ids the daemon still refuses (table
//! `seen_runs`, rewritten when the journal is compacted; the records after it add to them as
//! the core's fold does) and the server's key set in force
//! (table `key_set`), so a restart can neither run a run id again nor go back to an older set.
//!
//! [`DaemonStore::append`] returns only once the records are committed as durably as the
//! core asks ([`DaemonRecord::durability`]: `synchronous=FULL` for a result or a grant,
//! `NORMAL` — written to the operating system, not flushed — for the others), so a host that
//! calls it before carrying out the next output keeps RECORDS.md §1's rule across kill -9. This module
//! owns the file's tables; it never interprets a record beyond the core's own fold.

use std::path::{Path, PathBuf};

use outpost_core::daemon::{DaemonRecord, DaemonSnapshot, Durability, SeenRow, SeenRuns};
use outpost_core::ids::WaitId;
use outpost_core::wait::WaitRow;
use rusqlite::{Connection, params};

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("the daemon store {}: {source}", .path.display())]
    Sqlite {
        /// The store's SQLite file (`daemon.db` in the state folder).
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The database file could not be made private to its owner (mode 0600).
    #[error("the daemon store {}: {source}", .path.display())]
    Io {
        /// The store's SQLite file (`daemon.db` in the state folder).
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A stored record or snapshot does not read (the message names it).
    #[error("the daemon store {} holds an unreadable {what}: {reason}", .path.display())]
    Corrupt {
        /// The store's SQLite file (`daemon.db` in the state folder).
        path: PathBuf,
        /// Which row.
        what: String,
        /// The core's refusal.
        reason: String,
    },
}

impl StoreError {
    /// The stable code: `store_failed` for SQLite or file errors, `store_corrupt` for an unreadable
    /// row.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Sqlite { .. } | StoreError::Io { .. } => "store_failed",
            StoreError::Corrupt { .. } => "store_corrupt",
        }
    }
}

/// The daemon's open SQLite store: its snapshot and record journal, the waits, the seen runs and
/// the key set, written with `synchronous=FULL`.
#[derive(Debug)]
pub struct DaemonStore {
    conn: Connection,
    path: PathBuf,
    /// What the connection's `synchronous` setting gives a commit now.
    durability: Durability,
}

impl DaemonStore {
    /// Opens (creating) the store at `path` and returns it with the state it holds: the
    /// snapshot with every later record folded in. The fold is then written back as the new
    /// snapshot and the journal emptied, in one transaction.
    pub fn open(path: &Path) -> Result<(Self, DaemonSnapshot), StoreError> {
        let sql = sqlite_error(path);
        // 0600 before SQLite makes it (0644 less the umask), and its -wal and -shm with it.
        outpost_host::private_database(path).map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let conn = Connection::open(path).map_err(&sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(&sql)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(&sql)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), bytes BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY AUTOINCREMENT, bytes BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS waits (wait_id TEXT PRIMARY KEY, bytes BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS wait_events (seq INTEGER PRIMARY KEY, wait_id TEXT NOT NULL,
                 at_ms INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS wait_events_by_wait ON wait_events (wait_id, seq);
             CREATE TABLE IF NOT EXISTS seen_runs (run_id TEXT PRIMARY KEY, until_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS key_set (id INTEGER PRIMARY KEY CHECK (id = 1),
                 version INTEGER NOT NULL, document TEXT NOT NULL);
             DELETE FROM wait_events WHERE wait_id NOT IN (SELECT wait_id FROM waits);",
        )
        .map_err(&sql)?;
        let mut store = Self {
            conn,
            path: path.to_path_buf(),
            durability: Durability::Disk,
        };
        let snapshot = store.load()?;
        store.compact(&snapshot)?;
        Ok((store, snapshot))
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, what: String, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what,
            reason: reason.to_string(),
        }
    }

    fn load(&self) -> Result<DaemonSnapshot, StoreError> {
        let stored: Option<Vec<u8>> = self
            .conn
            .query_row("SELECT bytes FROM snapshot WHERE id = 1", [], |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(|e| self.sql(e))?;
        let mut snapshot = match stored {
            Some(bytes) => {
                DaemonSnapshot::decode(&bytes).map_err(|e| self.corrupt("snapshot".into(), e))?
            }
            None => DaemonSnapshot::default(),
        };
        snapshot.seen = self.seen_runs()?;
        let mut stmt = self
            .conn
            .prepare("SELECT seq, bytes FROM records ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .map_err(|e| self.sql(e))?;
        for row in rows {
            let (seq, bytes) = row.map_err(|e| self.sql(e))?;
            let record = DaemonRecord::decode(&bytes)
                .map_err(|e| self.corrupt(format!("record {seq}"), e))?;
            snapshot.apply(&record);
        }
        Ok(snapshot)
    }

    /// The run ids stored beside the snapshot document.
    fn seen_runs(&self) -> Result<SeenRuns, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT run_id, until_ms FROM seen_runs ORDER BY run_id")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SeenRow {
                    run_id: r.get::<_, String>(0)?.into(),
                    until_ms: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                })
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        SeenRuns::try_from(rows).map_err(|e| self.corrupt("seen_runs".into(), e))
    }

    fn compact(&mut self, snapshot: &DaemonSnapshot) -> Result<(), StoreError> {
        let sql = sqlite_error(&self.path);
        let tx = self.conn.transaction().map_err(&sql)?;
        tx.execute(
            "INSERT OR REPLACE INTO snapshot (id, bytes) VALUES (1, ?1)",
            params![snapshot.encode()],
        )
        .and_then(|_| tx.execute("DELETE FROM records", []))
        .and_then(|_| tx.execute("DELETE FROM seen_runs", []))
        .map_err(&sql)?;
        {
            let mut insert = tx
                .prepare("INSERT INTO seen_runs (run_id, until_ms) VALUES (?1, ?2)")
                .map_err(&sql)?;
            for row in snapshot.seen.rows() {
                insert
                    .execute(params![row.run_id.as_str(), sql_int(row.until_ms)])
                    .map_err(&sql)?;
            }
        }
        tx.commit().map_err(&sql)
    }

    /// The key set document in force when the daemon last changed it, with its version: a
    /// restarted daemon checks it against the pinned root again and never takes a fetched
    /// set of a lower version (PROTOCOL §7).
    pub fn key_set(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.conn
            .query_row(
                "SELECT version, document FROM key_set WHERE id = 1",
                [],
                |r| {
                    Ok((
                        u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                        r.get::<_, String>(1)?,
                    ))
                },
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(|e| self.sql(e))
    }

    /// Stores the key set in force, flushed to disk before it returns; `None` forgets it (a
    /// new join trusts a new root, so no version of the old server's binds it).
    pub fn save_key_set(&mut self, key_set: Option<(u64, &str)>) -> Result<(), StoreError> {
        self.commit_as(Durability::Disk)?;
        let done = match key_set {
            Some((version, document)) => self.conn.execute(
                "INSERT OR REPLACE INTO key_set (id, version, document) VALUES (1, ?1, ?2)",
                params![sql_int(version), document],
            ),
            None => self.conn.execute("DELETE FROM key_set", []),
        };
        done.map(|_| ()).map_err(|e| self.sql(e))
    }

    /// Sets how durable the next commits are. In WAL mode a `NORMAL` commit is in the
    /// operating system's hands when it returns (it survives kill -9); the next `FULL` commit
    /// flushes it to disk along with its own.
    fn commit_as(&mut self, durability: Durability) -> Result<(), StoreError> {
        if self.durability != durability {
            let mode = match durability {
                Durability::Disk => "FULL",
                Durability::Process => "NORMAL",
            };
            self.conn
                .pragma_update(None, "synchronous", mode)
                .map_err(|e| self.sql(e))?;
            self.durability = durability;
        }
        Ok(())
    }

    /// Writes `records` (those of one wake of the driver) in one transaction, in order, as
    /// durably as the most demanding of them asks.
    pub fn append(&mut self, records: &[DaemonRecord]) -> Result<(), StoreError> {
        let Some(durability) = records.iter().map(DaemonRecord::durability).max() else {
            return Ok(());
        };
        self.commit_as(durability)?;
        let sql = sqlite_error(&self.path);
        let tx = self.conn.transaction().map_err(&sql)?;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO records (bytes) VALUES (?1)")
                .map_err(&sql)?;
            for record in records {
                insert.execute(params![record.encode()]).map_err(&sql)?;
            }
        }
        tx.commit().map_err(&sql)
    }

    /// Writes what the wait schedule asked for in one drain, in order and in one
    /// transaction: returns once it is committed, so the schedule's write-ahead rule holds
    /// across kill -9.
    pub fn write_waits(&mut self, writes: &[WaitWrite<'_>]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        self.commit_as(Durability::Disk)?;
        let sql = sqlite_error(&self.path);
        let tx = self.conn.transaction().map_err(&sql)?;
        {
            // An upsert changes the row where it is: `INSERT OR REPLACE` deleted it and wrote
            // it again under a new rowid, three pages of the WAL a save instead of one.
            let mut save = tx
                .prepare_cached(
                    "INSERT INTO waits (wait_id, bytes) VALUES (?1, ?2)
                     ON CONFLICT (wait_id) DO UPDATE SET bytes = excluded.bytes",
                )
                .map_err(&sql)?;
            let mut forget = tx
                .prepare_cached("DELETE FROM waits WHERE wait_id = ?1")
                .map_err(&sql)?;
            let mut forget_events = tx
                .prepare_cached("DELETE FROM wait_events WHERE wait_id = ?1")
                .map_err(&sql)?;
            let mut event = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO wait_events (seq, wait_id, at_ms, kind, detail)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(&sql)?;
            let mut drop_event = tx
                .prepare_cached("DELETE FROM wait_events WHERE seq = ?1")
                .map_err(&sql)?;
            for write in writes {
                match write {
                    WaitWrite::Save { row, written_ms } => save
                        .execute(params![row.spec.wait_id.as_str(), row.encode(*written_ms)])
                        .map_err(&sql)?,
                    WaitWrite::Forget(wait_id) => {
                        forget_events.execute(params![wait_id]).map_err(&sql)?;
                        forget.execute(params![wait_id]).map_err(&sql)?
                    }
                    WaitWrite::Event(e) => event
                        .execute(params![
                            sql_int(e.seq),
                            e.wait_id.as_str(),
                            sql_int(e.at_ms),
                            e.kind,
                            e.detail
                        ])
                        .map_err(&sql)?,
                    WaitWrite::DropEvent(seq) => {
                        drop_event.execute(params![sql_int(*seq)]).map_err(&sql)?
                    }
                };
            }
        }
        tx.commit().map_err(&sql)
    }

    /// Every wait's stored events, oldest first: what the daemon's `read('events')` starts
    /// from after a restart.
    pub fn wait_events(&self) -> Result<Vec<WaitEventRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, wait_id, at_ms, kind, detail FROM wait_events ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(WaitEventRow {
                    seq: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    wait_id: r.get::<_, String>(1)?.into(),
                    at_ms: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    kind: r.get(3)?,
                    detail: r.get(4)?,
                })
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// Every wait row held, each with the time it was written, in id order: what
    /// [`Schedule::restore`](outpost_core::wait::Schedule::restore) takes. A row that does
    /// not read is refused with `store_corrupt` naming the wait.
    pub fn waits(&self) -> Result<Vec<(u64, WaitRow)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT wait_id, bytes FROM waits ORDER BY wait_id")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| self.sql(e))?;
        let mut waits = Vec::new();
        for row in rows {
            let (wait_id, bytes) = row.map_err(|e| self.sql(e))?;
            let read =
                WaitRow::decode(&bytes).map_err(|e| self.corrupt(format!("wait {wait_id}"), e))?;
            waits.push(read);
        }
        Ok(waits)
    }
}

/// Turns SQLite's errors on the store at `path` into [`StoreError::Sqlite`].
fn sqlite_error(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// One write to the waits table.
#[derive(Debug, Clone, Copy)]
pub enum WaitWrite<'a> {
    /// The wait's row, replacing its last one (`Output::Save`).
    Save {
        /// The wait's whole row, replacing its last one.
        row: &'a WaitRow,
        /// When, wall-clock milliseconds (restore rebases the next check from it).
        written_ms: u64,
    },
    /// The wait's row goes, with its events: the server has its ending (`Output::Forget`).
    Forget(&'a str),
    /// One event of a wait's history.
    Event(&'a WaitEventRow),
    /// The event numbered so goes (if stored): the writer keeps each wait's last
    /// [`WAIT_EVENTS_KEPT`] by naming the older ones, so no write reads a wait's history.
    DropEvent(u64),
}

/// Events kept per wait, in the store and for `read('events')`.
pub const WAIT_EVENTS_KEPT: usize = 100;

/// One stored event of a wait's history (`ctx.read('events')`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitEventRow {
    /// Its number, increasing across the daemon's life (restarts included).
    pub seq: u64,
    /// The id of the wait the event belongs to (`wait_…`).
    pub wait_id: WaitId,
    /// When, wall-clock milliseconds.
    pub at_ms: u64,
    /// `check_started`, `check_ended`, …
    pub kind: String,
    /// Its details, JSON text.
    pub detail: String,
}

/// A count or a time as SQLite's integer (saturating: no stored value reaches 2^63).
fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
