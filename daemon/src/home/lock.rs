//! One runner per home: `state/daemon.lock`, an exclusive `flock` held for the daemon's
//! whole life, holding one JSON line that names its holder ([`Holder`]: pid, launcher,
//! version), written right after the lock is taken and emptied on a clean exit.
//!
//! - A second daemon started in a terminal is refused with
//!   [`DaemonError::HomeLocked`], which names the holder.
//! - A daemon started by a service manager ([`Launcher::Systemd`], [`Launcher::Launchd`])
//!   waits for the lock instead, polling with backoff and logging once.
//! - The OS drops a `flock` when its process dies, so a crashed daemon's lock is free; its
//!   holder line is still there, and the next daemon reports it and writes its own.
//!
//! This module owns the lock file and its format. It never signals or stops the holder.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::{DaemonError, StopSignal};

/// The variable a service manager's unit sets to its own name (`systemd`, `launchd`), so
/// the daemon knows it runs as a service.
pub const SERVICE_VAR: &str = "OUTPOST_DAEMON_SERVICE";

/// How long a terminal daemon retries a held lock before it gives up: long enough to ride
/// out `outpost daemon status` probing it, or a holder line being written.
const REFUSE_AFTER: Duration = Duration::from_millis(500);
/// The first and the longest pause of a service waiting for the lock.
const WAIT_FIRST: Duration = Duration::from_millis(100);
const WAIT_MAX: Duration = Duration::from_secs(5);

/// Who started the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// Someone ran `outpost daemon` (no [`SERVICE_VAR`]).
    Terminal,
    /// A `systemd --user` unit.
    Systemd,
    /// A launchd LaunchAgent.
    Launchd,
}

impl Launcher {
    /// The launcher [`SERVICE_VAR`]'s value names: unset or empty is a terminal; any name
    /// but `systemd` and `launchd` is refused (the text says why).
    pub fn from_var(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Launcher::Terminal),
            Some("systemd") => Ok(Launcher::Systemd),
            Some("launchd") => Ok(Launcher::Launchd),
            Some(other) => Err(format!(
                "{SERVICE_VAR}={other:?} is not a service manager: use systemd or launchd, or unset it"
            )),
        }
    }

    /// Its name (`terminal`, `systemd`, `launchd`).
    pub fn as_str(self) -> &'static str {
        match self {
            Launcher::Terminal => "terminal",
            Launcher::Systemd => "systemd",
            Launcher::Launchd => "launchd",
        }
    }

    /// Whether a service manager started it (it waits for a held lock and, when stopped for
    /// good, has its service disabled).
    pub fn is_service(self) -> bool {
        self != Launcher::Terminal
    }
}

/// What `daemon.lock` says about the daemon holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Who started it.
    pub launcher: Launcher,
    /// Its `outpost` version.
    pub version: String,
}

impl Holder {
    /// This process, started by `launcher`.
    pub fn this_process(launcher: Launcher) -> Self {
        Self {
            pid: std::process::id(),
            launcher,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {}, started from {}, version {}",
            self.pid,
            self.launcher.as_str(),
            self.version
        )
    }
}

/// The lock, held; emptied when dropped (a clean exit), before the OS releases it.
#[derive(Debug)]
pub struct HeldLock {
    lock: Flock<File>,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = self.lock.set_len(0);
    }
}

/// Whether a daemon holds a home's lock, as [`probe`] saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// No daemon runs on the home. `left` is the holder line of one that ended without
    /// cleaning up (killed, crashed), if any.
    Free {
        /// A dead holder's line.
        left: Option<Holder>,
    },
    /// A daemon runs on the home; `holder` is `None` while it has not written its line yet.
    Held {
        /// Its line.
        holder: Option<Holder>,
    },
}

fn lock_path(state: &Path) -> PathBuf {
    state.join(super::LOCK_FILE)
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

/// Takes the lock of the state folder `state` for a daemon started by `launcher`, and
/// writes its holder line. A terminal daemon is refused when another holds it; a service
/// waits (until `stop` is raised: then `None`).
pub fn take(
    state: &Path,
    launcher: Launcher,
    stop: &StopSignal,
) -> Result<Option<HeldLock>, DaemonError> {
    let path = lock_path(state);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| DaemonError::home(&path, e))?;
    let started = Instant::now();
    let mut pause = WAIT_FIRST;
    let mut logged = false;
    let mut lock = loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => break lock,
            Err((back, _)) => file = back,
        }
        if !launcher.is_service() {
            if started.elapsed() >= REFUSE_AFTER {
                return Err(DaemonError::HomeLocked {
                    state: state.to_path_buf(),
                    holder: read_holder(&mut file),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        if !logged {
            logged = true;
            match read_holder(&mut file) {
                Some(holder) => {
                    tracing::info!(%holder, "another daemon runs on this home; waiting for it to stop")
                }
                None => tracing::info!("another daemon runs on this home; waiting for it to stop"),
            }
        }
        // Sleep `pause` in slices, so a stop request is heard promptly.
        let next = Instant::now() + pause;
        while Instant::now() < next {
            if stop.count() > 0 {
                return Ok(None);
            }
            std::thread::sleep(
                crate::STOP_POLL.min(next.saturating_duration_since(Instant::now())),
            );
        }
        pause = (pause * 2).min(WAIT_MAX);
    };
    if let Some(left) = read_holder(&mut lock) {
        tracing::warn!(holder = %left, "took over the lock of a daemon that ended without cleaning up");
    }
    let mut line = serde_json::to_vec(&Holder::this_process(launcher)).unwrap_or_default();
    line.push(b'\n');
    lock.set_len(0)
        .and_then(|()| lock.seek(SeekFrom::Start(0)).map(drop))
        .and_then(|()| lock.write_all(&line))
        .and_then(|()| lock.sync_data())
        .map_err(|e| DaemonError::home(&path, e))?;
    Ok(Some(HeldLock { lock }))
}

/// Whether a daemon holds the lock of `state`, and its holder line. Takes a shared lock for
/// an instant when none is held (a daemon starting at that instant retries, see
/// [`take`]); never writes.
pub fn probe(state: &Path) -> Result<LockState, DaemonError> {
    let path = lock_path(state);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LockState::Free { left: None });
        }
        Err(e) => return Err(DaemonError::home(&path, e)),
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(mut shared) => Ok(LockState::Free {
            left: read_holder(&mut shared),
        }),
        Err((mut file, _)) => Ok(LockState::Held {
            holder: read_holder(&mut file),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_names_read_as_written_and_others_are_refused() {
        assert_eq!(Launcher::from_var(None), Ok(Launcher::Terminal));
        assert_eq!(Launcher::from_var(Some("")), Ok(Launcher::Terminal));
        assert_eq!(Launcher::from_var(Some("systemd")), Ok(Launcher::Systemd));
        assert_eq!(Launcher::from_var(Some("launchd")), Ok(Launcher::Launchd));
        assert!(Launcher::from_var(Some("cron")).is_err());
    }

    #[test]
    fn the_lock_names_its_holder_and_is_emptied_on_drop() {
        let dir = std::env::temp_dir().join(format!("outpost-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(probe(&dir).unwrap(), LockState::Free { left: None });
        let stop = StopSignal::new();
        let held = take(&dir, Launcher::Terminal, &stop).unwrap().unwrap();
        let me = Holder::this_process(Launcher::Terminal);
        assert_eq!(
            probe(&dir).unwrap(),
            LockState::Held {
                holder: Some(me.clone())
            }
        );
        // A second taker in this process: flock locks are per open file, so it is refused.
        match take(&dir, Launcher::Terminal, &stop) {
            Err(DaemonError::HomeLocked { holder, .. }) => assert_eq!(holder, Some(me)),
            other => panic!("{other:?}"),
        }
        drop(held);
        assert_eq!(probe(&dir).unwrap(), LockState::Free { left: None });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
