//! What a daemon leaves in its state folder for its owner and for `outpost daemon status`:
//!
//! ```text
//! state/daemon.json    while it runs: pid, version, manager, startedAt, binary, contextId
//!                      (written once the lock is taken, removed on a clean exit)
//! state/connection.json while it runs: how it stands with its server (connected since
//!                      when, the last error, the next retry, slots in use), rewritten
//!                      whenever that changes (not synced: a crash loses nothing of worth)
//! state/stopped.json   after it was stopped for good: reason (revoked, replaced,
//!                      unregistered), at, contextId; while it is there no daemon starts
//! ```
//!
//! This module owns those files' formats. It never decides when a daemon stops, and it
//! never removes `stopped.json`: only the owner does (see [`Stopped::advice`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::lock::Launcher;
use super::write_private;
use crate::DaemonError;

/// The running daemon's file name in the state folder.
pub const RUNNING_FILE: &str = "daemon.json";
/// The connection file name in the state folder.
pub const CONNECTION_FILE: &str = "connection.json";
/// The stopped-for-good file name in the state folder.
pub const STOPPED_FILE: &str = "stopped.json";

/// `state/daemon.json`: the daemon that runs (or ran, if it was killed) on this home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Running {
    /// Its process id.
    pub pid: u32,
    /// Its `outpost` version.
    pub version: String,
    /// Who started it (`terminal`, `systemd`, `launchd`).
    pub manager: Launcher,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// The binary it runs, as the OS named it at start.
    pub binary: Option<String>,
    /// The context it serves, when it had joined before this start.
    pub context_id: Option<String>,
}

/// `state/connection.json`: how the running daemon stands with its server now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// The daemon that wrote it (a file whose process is gone says nothing).
    pub pid: u32,
    /// The server's URL.
    pub server: String,
    /// Whether the server's welcome was verified on the current connection.
    pub connected: bool,
    /// When `connected` last changed (RFC 3339, UTC): connected since, or disconnected since.
    pub since: String,
    /// The last thing that went wrong with the connection, in a sentence.
    pub last_error: Option<String>,
    /// When it went wrong (RFC 3339, UTC).
    pub last_error_at: Option<String>,
    /// When the next connection attempt starts, while disconnected (RFC 3339, UTC).
    pub next_retry_at: Option<String>,
    /// Runs held now.
    pub slots_in_use: u32,
    /// Runs it holds at most (`--max-concurrent`).
    pub slots: u32,
    /// It is stopping: it takes no new runs and waits for the runs in flight.
    pub draining: bool,
    /// An operator paused it from afar: it takes no new runs until resumed (absent: no).
    #[serde(default)]
    pub paused: bool,
}

/// Why a daemon stopped for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// The server's operator revoked this machine.
    Revoked,
    /// Another daemon connected with this machine's key.
    Replaced,
    /// The server no longer knows this machine (its context was deleted).
    Unregistered,
}

impl StopReason {
    /// Its name in `stopped.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Revoked => "revoked",
            StopReason::Replaced => "replaced",
            StopReason::Unregistered => "unregistered",
        }
    }
}

/// `state/stopped.json`: this home's daemon was stopped for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    /// Why it stopped for good: `revoked`, `replaced` or `unregistered`.
    pub reason: StopReason,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// The context it served.
    pub context_id: Option<String>,
}

impl Stopped {
    /// What the owner can do about it, naming the files to remove (`state` and `config` are
    /// the home's folders).
    pub fn advice(&self, state: &Path, config: &Path) -> String {
        let stopped = state.join(STOPPED_FILE);
        let server = config.join(super::SERVER_FILE);
        match self.reason {
            StopReason::Revoked => format!(
                "the server's operator revoked this machine at {}; to serve again, join anew with another home (outpost daemon --home DIR --join JOIN), or remove {} and {} and join again with this one",
                self.at,
                server.display(),
                stopped.display()
            ),
            StopReason::Replaced => format!(
                "another daemon with this machine's key took over at {}; if that copy is gone for good, remove {} and start again",
                self.at,
                stopped.display()
            ),
            StopReason::Unregistered => format!(
                "the server no longer knows this machine (its context was deleted) since {}; remove {} and {} and join again",
                self.at,
                server.display(),
                stopped.display()
            ),
        }
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: PathBuf) -> Result<Option<T>, DaemonError> {
    match std::fs::read(&path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| DaemonError::BadStateFile {
                    path,
                    reason: e.to_string(),
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(DaemonError::home(&path, e)),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), DaemonError> {
    let mut text = serde_json::to_vec_pretty(value).unwrap_or_default();
    text.push(b'\n');
    write_private(path, &text)
}

/// `daemon.json` of the state folder `state`, if there is one.
pub fn read_running(state: &Path) -> Result<Option<Running>, DaemonError> {
    read_json(state.join(RUNNING_FILE))
}

/// `stopped.json` of the state folder `state`, if there is one.
pub fn read_stopped(state: &Path) -> Result<Option<Stopped>, DaemonError> {
    read_json(state.join(STOPPED_FILE))
}

pub(crate) fn write_running(state: &Path, running: &Running) -> Result<(), DaemonError> {
    write_json(&state.join(RUNNING_FILE), running)
}

pub(crate) fn remove_running(state: &Path) {
    let _ = std::fs::remove_file(state.join(RUNNING_FILE));
    let _ = std::fs::remove_file(state.join(CONNECTION_FILE));
}

/// `connection.json` of the state folder `state`, if there is one.
pub fn read_connection(state: &Path) -> Result<Option<Connection>, DaemonError> {
    read_json(state.join(CONNECTION_FILE))
}

/// Replaces `connection.json` through a rename (a reader sees the old file or the new one),
/// without syncing: it is rewritten on every change and worth nothing after a crash.
pub(crate) fn write_connection(state: &Path, connection: &Connection) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = state.join(CONNECTION_FILE);
    let tmp = path.with_extension("json.tmp");
    let mut text = serde_json::to_vec_pretty(connection).unwrap_or_default();
    text.push(b'\n');
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(&text)?;
    std::fs::rename(&tmp, &path)
}

pub(crate) fn write_stopped(state: &Path, stopped: &Stopped) -> Result<(), DaemonError> {
    write_json(&state.join(STOPPED_FILE), stopped)
}

/// The wall clock now, RFC 3339 in UTC to the second (`2026-12-01T16:38:24Z`).
pub fn now_rfc3339() -> String {
    rfc3339(outpost_adapters::clock::wall_now().0)
}

/// `secs` after the Unix epoch, RFC 3339 in UTC.
pub fn rfc3339(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01, counted in 400-year eras of
/// 146,097 days whose years start on 1 March (so the leap day ends a year).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_229_504), "2026-12-02T16:38:24Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
