//! Each daemon's "disk": with the nodes' shared store (`store.rs`), the only thing that
//! survives a crash in the simulation.
//!
//! A disk holds bytes and nothing else: the encoded records a role handed its host, in order,
//! and now and then a snapshot that replaces the records before it (as a store compacts its
//! journal). A restart decodes what is there and restores a fresh machine from it; nothing of
//! the old machine's memory is kept.

use crate::daemon::{DaemonRecord, DaemonSnapshot, SeenRuns};
use crate::record::RecordError;

/// Records written before the journal is folded into a snapshot.
const COMPACT_AFTER: usize = 48;

/// A snapshot and the records written after it, as bytes; on a daemon's disk also its wait
/// rows, one per wait (a row replaces the wait's last one, as the store's `waits` table does).
#[derive(Debug, Default)]
pub(super) struct Disk {
    snapshot: Option<Vec<u8>>,
    /// The daemon's seen run ids as of the snapshot, kept beside it as a store's table is.
    seen: SeenRuns,
    journal: Vec<Vec<u8>>,
    /// Wait rows by wait id, encoded.
    pub waits: std::collections::BTreeMap<String, Vec<u8>>,
    /// Records written in all, for the report.
    pub written: usize,
}

impl Disk {
    /// Appends one record's bytes.
    fn append(&mut self, bytes: Vec<u8>) -> bool {
        self.journal.push(bytes);
        self.written += 1;
        self.journal.len() >= COMPACT_AFTER
    }

    /// Writes a daemon record; compacts the journal when it has grown.
    pub fn write_daemon(&mut self, record: &DaemonRecord) -> Result<(), RecordError> {
        if self.append(record.encode()) {
            let snapshot = self.daemon_state()?;
            self.snapshot = Some(snapshot.encode());
            self.seen = snapshot.seen;
            self.journal.clear();
        }
        Ok(())
    }

    /// What a restarted daemon reads: the snapshot with the journal folded in.
    pub fn daemon_state(&self) -> Result<DaemonSnapshot, RecordError> {
        let mut state = match &self.snapshot {
            Some(bytes) => DaemonSnapshot::decode(bytes)?,
            None => DaemonSnapshot::default(),
        };
        state.seen = self.seen.clone();
        for bytes in &self.journal {
            state.apply(&DaemonRecord::decode(bytes)?);
        }
        Ok(state)
    }
}

/// A crash scheduled at a random point of a role's output stream: after `outputs` more
/// outputs were carried out, or once it is idle after `latest`.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingCrash {
    /// Outputs still carried out before the crash.
    pub outputs: u32,
    /// When an idle role crashes anyway.
    pub latest: std::time::Duration,
}

impl PendingCrash {
    /// Whether the crash happens now, before the output just polled is carried out (`idle`:
    /// the poll said `Wait`). Counts the output down otherwise.
    pub fn due(&mut self, idle: bool, now: std::time::Duration) -> bool {
        if idle {
            return now >= self.latest;
        }
        if self.outputs == 0 {
            return true;
        }
        self.outputs -= 1;
        false
    }
}
