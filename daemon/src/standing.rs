//! How the daemon stands with its server, as `outpost daemon status` reads it from
//! `state/connection.json` ([`crate::status::Connection`]).
//!
//! The driver tells a [`Standing`] what happened (an error, a retry scheduled, how the core
//! stands after each wake); it has the file rewritten only when something changed, by a
//! thread of its own, so the driver never waits for the disk (the newest state wins; the
//! last one is written before the daemon exits). The thread rests [`WRITE_GAP`] after each
//! write ([`RETRY_GAP`] after a failed one): a daemon starting and ending runs back to back
//! rewrites the file a few times a second, not twice a run. It never decides anything and
//! never fails the daemon: a file it cannot write is logged once.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::status::{Connection, now_rfc3339, rfc3339, write_connection};

/// How long the writer rests after a write before it writes a newer state: the file trails
/// the daemon by at most this much. Creating and renaming a file costs an ext4 file system
/// tens of microseconds of CPU, which at two writes a run was a tenth of what a daemon
/// running short runs back to back spent.
const WRITE_GAP: Duration = Duration::from_millis(100);

/// How long the writer rests after a write that failed (a full disk, a missing folder)
/// before it tries again.
const RETRY_GAP: Duration = Duration::from_secs(1);

/// The connection as last told, and as last handed to the writer.
pub(crate) struct Standing {
    now: Connection,
    written: Option<Connection>,
    writer: Writer,
}

impl Standing {
    /// Not connected yet, to `server`, with `slots` slots.
    pub(crate) fn new(state: PathBuf, server: &str, slots: u32) -> Self {
        let mut standing = Self {
            now: Connection {
                pid: std::process::id(),
                server: server.to_owned(),
                since: now_rfc3339(),
                slots,
                ..Connection::default()
            },
            written: None,
            writer: Writer::start(state),
        };
        standing.write();
        standing
    }

    /// Something went wrong with the connection: `what`, in a sentence.
    pub(crate) fn error(&mut self, what: impl Into<String>) {
        self.now.last_error = Some(what.into());
        self.now.last_error_at = Some(now_rfc3339());
    }

    /// The next connection attempt starts `after` from now.
    pub(crate) fn retry_in(&mut self, after: Duration) {
        let at = outpost_adapters::clock::wall_now().0 + after.as_secs_f64().ceil() as u64;
        self.now.next_retry_at = Some(rfc3339(at));
    }

    /// How the core stands after a wake; has the file written when anything changed, or
    /// again when the last write failed (a full disk that has room again).
    pub(crate) fn update(
        &mut self,
        connected: bool,
        slots_in_use: u32,
        draining: bool,
        paused: bool,
    ) {
        if connected != self.now.connected {
            self.now.connected = connected;
            self.now.since = now_rfc3339();
        }
        if connected {
            self.now.next_retry_at = None;
        }
        self.now.slots_in_use = slots_in_use;
        self.now.draining = draining;
        self.now.paused = paused;
        if self.written.as_ref() != Some(&self.now) || self.writer.failed() {
            self.write();
        }
    }

    fn write(&mut self) {
        self.writer.hand(self.now.clone());
        self.written = Some(self.now.clone());
    }
}

/// What the driver and the writer thread share: the newest state not yet written (an older
/// one it had not reached is replaced: only the newest matters), whether a write is under
/// way, whether the last one failed, and whether to stop.
#[derive(Default)]
struct Slot {
    next: Option<Connection>,
    writing: bool,
    failed: bool,
    stop: bool,
    /// Writes made so far, failed ones included.
    writes: u64,
}

/// The thread that writes `connection.json`, so the driver never waits for the file system
/// (a run's start and end each change the slots in use, and a write and a rename cost
/// hundreds of microseconds on some disks). Dropping it writes what is left, then joins.
/// Without the thread (it could not be started), each state is written where it is handed.
struct Writer {
    state: PathBuf,
    shared: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The file could not be written and that was logged (without the thread).
    warned: bool,
}

impl Writer {
    fn start(state: PathBuf) -> Writer {
        let shared = Arc::new((Mutex::new(Slot::default()), Condvar::new()));
        let (theirs, folder) = (shared.clone(), state.clone());
        let thread = std::thread::Builder::new()
            .name("outpost-status".into())
            .spawn(move || write_each(&folder, &theirs))
            .map_err(|e| {
                tracing::warn!(
                    "cannot start the thread that writes {}, so the driver writes it: {e}",
                    crate::status::CONNECTION_FILE
                )
            })
            .ok();
        Writer {
            state,
            shared,
            thread,
            warned: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.shared.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hand(&mut self, connection: Connection) {
        if self.thread.is_none() {
            let failed = write_logged(&self.state, &connection, &mut self.warned);
            self.lock().failed = failed;
            return;
        }
        self.lock().next = Some(connection);
        self.shared.1.notify_all();
    }

    /// Whether the last write failed.
    fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Writes made so far by the thread.
    #[cfg(test)]
    fn writes(&self) -> u64 {
        self.lock().writes
    }

    /// Returns once everything handed so far is written (or failed).
    #[cfg(test)]
    fn settle(&self) {
        let mut slot = self.lock();
        while self.thread.is_some() && (slot.next.is_some() || slot.writing) {
            slot = self
                .shared
                .1
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes `connection` into `state`; true when it failed (logged the first time only).
fn write_logged(state: &std::path::Path, connection: &Connection, warned: &mut bool) -> bool {
    let Err(e) = write_connection(state, connection) else {
        return false;
    };
    if !std::mem::replace(warned, true) {
        tracing::warn!(
            "cannot write {} in {} for `outpost daemon status`: {e}",
            crate::status::CONNECTION_FILE,
            state.display()
        );
    }
    true
}

/// The writer thread: each newest state in turn until told to stop (what was handed before
/// the stop is written first).
fn write_each(state: &std::path::Path, shared: &(Mutex<Slot>, Condvar)) {
    let (slot, wake) = shared;
    let mut warned = false;
    loop {
        let next = {
            let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
            while slot.next.is_none() && !slot.stop {
                slot = wake.wait(slot).unwrap_or_else(PoisonError::into_inner);
            }
            match slot.next.take() {
                Some(next) => {
                    slot.writing = true;
                    next
                }
                None => return,
            }
        };
        let failed = write_logged(state, &next, &mut warned);
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        slot.writing = false;
        slot.failed = failed;
        slot.writes += 1;
        wake.notify_all();
        // Rest before the next write; a stop ends the rest, so the last state is not held up.
        let until = Instant::now() + if failed { RETRY_GAP } else { WRITE_GAP };
        while !slot.stop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            slot = wake
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Standing;
    use crate::status::{CONNECTION_FILE, Connection};

    fn read(state: &std::path::Path) -> Connection {
        let text = std::fs::read(state.join(CONNECTION_FILE)).expect("connection.json");
        serde_json::from_slice(&text).expect("JSON")
    }

    #[test]
    fn the_newest_state_is_written_the_last_one_before_the_drop_and_a_failed_write_again() {
        let dir = std::env::temp_dir().join(format!("outpost-standing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp folder");
        // A file where the state folder should be: every write fails.
        let state = dir.join("state");
        std::fs::write(&state, b"not a folder").expect("file");
        let mut standing = Standing::new(state.clone(), "http://server", 4);
        standing.writer.settle();
        assert!(
            standing.writer.failed(),
            "a write into a file cannot succeed"
        );
        // The folder appears; nothing changed, yet the failed state is written again.
        std::fs::remove_file(&state).expect("remove");
        std::fs::create_dir_all(&state).expect("folder");
        standing.update(false, 0, false, false);
        standing.writer.settle();
        assert!(!standing.writer.failed());
        assert_eq!(read(&state).slots, 4);
        // Many changes in a row: the file ends with the newest, here once dropped.
        for used in 1..=4 {
            standing.update(true, used, false, false);
        }
        standing.update(true, 2, true, false);
        drop(standing);
        let written = read(&state);
        assert!(written.connected && written.draining, "{written:?}");
        assert_eq!(written.slots_in_use, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn states_handed_faster_than_the_gap_are_written_newest_first_not_each() {
        let dir = std::env::temp_dir().join(format!("outpost-gap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp folder");
        let mut standing = Standing::new(dir.clone(), "http://server", 4);
        standing.writer.settle();
        let first = standing.writer.writes();
        // Twenty changes, one every 5 ms (runs starting and ending back to back), within
        // about one gap: a writer without its rest writes each.
        for used in 0..20 {
            standing.update(true, used % 4, false, false);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        standing.update(true, 3, false, true);
        standing.writer.settle();
        let writes = standing.writer.writes() - first;
        assert!(
            (1..=10).contains(&writes),
            "{writes} writes for 21 changes within about {:?}",
            super::WRITE_GAP
        );
        let written = read(&dir);
        assert!(written.paused && written.slots_in_use == 3, "{written:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
