//! How the daemon stands with its server, as `outpost daemon status` reads it from
//! `state/connection.json` ([`crate::status::Connection`]).
//!
//! The driver tells a [`Standing`] what happened (an error, a retry scheduled, how the core
//! stands after each wake); it rewrites the file only when something changed. It never
//! decides anything and never fails the daemon: a file it cannot write is logged once.

use std::path::PathBuf;
use std::time::Duration;

use crate::status::{Connection, now_rfc3339, rfc3339, write_connection};

/// The connection as last told, and as last written.
pub(crate) struct Standing {
    state: PathBuf,
    now: Connection,
    written: Option<Connection>,
    warned: bool,
}

impl Standing {
    /// Not connected yet, to `server`, with `slots` slots.
    pub(crate) fn new(state: PathBuf, server: &str, slots: u32) -> Self {
        let mut standing = Self {
            state,
            now: Connection {
                pid: std::process::id(),
                server: server.to_owned(),
                since: now_rfc3339(),
                slots,
                ..Connection::default()
            },
            written: None,
            warned: false,
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

    /// How the core stands after a wake; writes the file when anything changed.
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
        match write_connection(&self.state, &self.now) {
            Ok(()) => self.written = Some(self.now.clone()),
            Err(e) if !self.warned => {
                self.warned = true;
                tracing::warn!(
                    "cannot write {} in {} for `outpost daemon status`: {e}",
                    crate::status::CONNECTION_FILE,
                    self.state.display()
                );
            }
            Err(_) => {}
        }
    }
}
