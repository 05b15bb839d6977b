//! The daemon's durable records in one SQLite file (`daemon.db` in its home; WAL,
//! `synchronous=FULL`): the journal of [`DaemonRecord`]s the core hands out, and a snapshot
//! the journal is folded into when the store is opened (docs/RECORDS.md).
//!
//! [`DaemonStore::append`] returns only once the record is committed, so a host that calls it
//! before carrying out the next output keeps RECORDS.md §1's rule across kill -9. This module
//! owns the file's tables; it never interprets a record beyond the core's own fold.

use std::path::{Path, PathBuf};

use outpost_core::daemon::{DaemonRecord, DaemonSnapshot};
use rusqlite::{Connection, params};

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("the daemon store {}: {source}", .path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A stored record or snapshot does not read (the message names it).
    #[error("the daemon store {} holds an unreadable {what}: {reason}", .path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// Which row.
        what: String,
        /// The core's refusal.
        reason: String,
    },
}

impl StoreError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Sqlite { .. } => "store_failed",
            StoreError::Corrupt { .. } => "store_corrupt",
        }
    }
}

/// The open store.
#[derive(Debug)]
pub struct DaemonStore {
    conn: Connection,
    path: PathBuf,
}

impl DaemonStore {
    /// Opens (creating) the store at `path` and returns it with the state it holds: the
    /// snapshot with every later record folded in. The fold is then written back as the new
    /// snapshot and the journal emptied, in one transaction.
    pub fn open(path: &Path) -> Result<(Self, DaemonSnapshot), StoreError> {
        let sql = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), bytes BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY AUTOINCREMENT, bytes BLOB NOT NULL);",
        )
        .map_err(sql)?;
        let mut store = Self {
            conn,
            path: path.to_path_buf(),
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

    fn compact(&mut self, snapshot: &DaemonSnapshot) -> Result<(), StoreError> {
        let tx = self.conn.transaction().map_err(|e| StoreError::Sqlite {
            path: self.path.clone(),
            source: e,
        })?;
        let done = tx
            .execute(
                "INSERT OR REPLACE INTO snapshot (id, bytes) VALUES (1, ?1)",
                params![snapshot.encode()],
            )
            .and_then(|_| tx.execute("DELETE FROM records", []))
            .and_then(|_| tx.commit());
        done.map_err(|e| self.sql(e))
    }

    /// Writes `records` (those of one wake of the driver) durably, in one transaction, in
    /// order.
    pub fn append(&mut self, records: &[DaemonRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO records (bytes) VALUES (?1)")
                .map_err(sql)?;
            for record in records {
                insert.execute(params![record.encode()]).map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)
    }
}
