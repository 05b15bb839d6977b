//! How the daemon stands with its server, as `outpost daemon status` reads it from
//! `state/connection.json` ([`crate::status::Connection`]).
//!
//! The driver tells a [`Standing`] what happened (an error, a retry scheduled, how the core
//! stands after each wake); it has the file rewritten only when something changed, by a
//! thread of its own, so the driver never waits for the disk (the newest state wins; the
//! last one is written before the daemon exits). It never decides anything and never fails
//! the daemon: a file it cannot write is logged once.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::status::{Connection, now_rfc3339, rfc3339, write_connection};

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

    /// How the core stands after a wake; has the file written when anything changed.
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
        if self.written.as_ref() != Some(&self.now) {
            self.write();
        }
    }

    fn write(&mut self) {
        self.writer.hand(self.now.clone());
        self.written = Some(self.now.clone());
    }
}

/// What waits for the writer thread: the newest state not yet written (an older one it had
/// not reached is replaced: only the newest matters), and whether to stop.
#[derive(Default)]
struct Slot {
    next: Option<Connection>,
    stop: bool,
}

/// The thread that writes `connection.json`, so the driver never waits for the file system
/// (a run's start and end each change the slots in use, and a write and a rename cost
/// hundreds of microseconds on some disks). Dropping it writes what is left, then joins.
struct Writer {
    shared: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(state: PathBuf) -> Writer {
        let shared = Arc::new((Mutex::new(Slot::default()), Condvar::new()));
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("outpost-status".into())
            .spawn(move || write_each(&state, &theirs))
            .map_err(|e| {
                tracing::warn!(
                    "cannot start the thread that writes {}: {e}",
                    crate::status::CONNECTION_FILE
                )
            })
            .ok();
        Writer { shared, thread }
    }

    fn hand(&self, connection: Connection) {
        let (slot, wake) = &*self.shared;
        slot.lock().unwrap_or_else(PoisonError::into_inner).next = Some(connection);
        wake.notify_one();
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let (slot, wake) = &*self.shared;
        slot.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread: each newest state in turn until told to stop (what was handed before
/// the stop is written first). A file it cannot write is logged once.
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
                Some(next) => next,
                None => return,
            }
        };
        if let Err(e) = write_connection(state, &next)
            && !std::mem::replace(&mut warned, true)
        {
            tracing::warn!(
                "cannot write {} in {} for `outpost daemon status`: {e}",
                crate::status::CONNECTION_FILE,
                state.display()
            );
        }
    }
}
