//! The daemon's files on the owner's machine, in the owner's folders
//! ([`OwnerFolders`]): the machine key and the server it joined in the config folder
//! (denylisted: no run ever sees them), the result outbox, the lock and the runs' folders in
//! the state folder.
//!
//! ```text
//! config/key.enc       0600  the Ed25519 seed sealed with AES-256-GCM (see `key`)
//! config/key.file      0600  the file key that seals it, when no passphrase is used
//! config/server.json   0600  the server, its pinned root, this machine's context
//! state/daemon.lock          held (flock) while a daemon runs on this home, naming it (see
//!                            `lock`)
//! state/daemon.json          the daemon running now; state/stopped.json: stopped for good
//!                            (see `status`)
//! state/daemon.db            the durable records (result outbox), SQLite
//! state/runs/<run id>/       each run's capability folder
//! state/runs/<run id>.service  what a live run started (a process group, a container), to
//!                            reap after a crash
//! ```
//!
//! This module owns those files' formats and modes. It never talks to the server and never
//! decides whether to register: it reads and writes what the driver hands it.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use outpost_core::b64;
use outpost_core::keyset::RootKey;
use outpost_host::OwnerFolders;
use serde::{Deserialize, Serialize};

pub mod lock;
pub mod status;

use crate::{DaemonError, StopSignal};
use lock::{HeldLock, Launcher};
use status::{Running, now_rfc3339};

/// The joined server's file name in the config folder.
pub const SERVER_FILE: &str = "server.json";
/// The outbox database's file name in the state folder.
pub const STORE_FILE: &str = "daemon.db";
/// The lock file's name in the state folder.
pub const LOCK_FILE: &str = "daemon.lock";

/// The server this machine joined, as `config/server.json` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerFile {
    /// The server's base URL.
    pub url: String,
    /// The pinned root key's id.
    pub root_id: String,
    /// The pinned root key, base64url.
    pub root_public_key: String,
    /// The context the registration created (`ec_…`).
    pub context_id: String,
    /// The machine's name on that server.
    pub name: String,
    /// The machine key id (`mk_…`).
    pub key_id: String,
    /// The SHA-256 of the server's TLS certificate the join pinned (lowercase hex), trusted
    /// on every later start as on the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_sha256: Option<String>,
    /// The other URLs the join listed for the same server (its other nodes), tried in turn
    /// when the one in use cannot be reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    /// The certificates of the server's other nodes the join pinned (lowercase hex).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_pins: Vec<String>,
}

impl ServerFile {
    /// The pinned root this file names.
    pub fn root(&self) -> Result<RootKey, String> {
        let key = b64::decode_array::<32>(&self.root_public_key).map_err(|e| e.to_string())?;
        let public_key = ed25519_dalek::VerifyingKey::from_bytes(&key)
            .map_err(|_| "rootPublicKey is not an Ed25519 key".to_owned())?;
        Ok(RootKey {
            id: self.root_id.clone(),
            public_key,
        })
    }
}

/// A daemon's home, locked for this process; `daemon.json` is removed and the lock emptied
/// when it is dropped.
#[derive(Debug)]
pub struct Home {
    /// The owner's folders.
    pub folders: OwnerFolders,
    _lock: HeldLock,
}

impl Home {
    /// Creates the folders (0700), takes the lock (see [`lock::take`]: a second
    /// terminal daemon is refused with [`DaemonError::HomeLocked`], a service waits, `None`
    /// when `stop` was raised meanwhile) and writes `daemon.json`.
    pub fn open(
        folders: OwnerFolders,
        launcher: Launcher,
        stop: &StopSignal,
    ) -> Result<Option<Self>, DaemonError> {
        for dir in [&folders.config, &folders.state, &folders.state.join("runs")] {
            create_private_dir(dir)?;
        }
        let Some(lock) = lock::take(&folders.state, launcher, stop)? else {
            return Ok(None);
        };
        let home = Self {
            folders,
            _lock: lock,
        };
        let running = Running {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            manager: launcher,
            started_at: now_rfc3339(),
            binary: std::env::current_exe()
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
            context_id: home.server().ok().flatten().map(|s| s.context_id),
        };
        status::write_running(&home.folders.state, &running)?;
        Ok(Some(home))
    }

    /// The path of the daemon's SQLite store, `daemon.db` in the state folder.
    pub fn store_path(&self) -> PathBuf {
        self.folders.state.join(STORE_FILE)
    }

    /// Where runs' capability folders go.
    pub fn runs_dir(&self) -> PathBuf {
        self.folders.runs_dir()
    }

    /// The server this machine joined, if it registered before.
    pub fn server(&self) -> Result<Option<ServerFile>, DaemonError> {
        let path = self.folders.config.join(SERVER_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| DaemonError::BadServerFile {
                        path,
                        reason: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(DaemonError::home(&path, e)),
        }
    }

    /// Records the registration (atomically: a crash leaves the old file or the new one).
    pub fn save_server(&self, server: &ServerFile) -> Result<(), DaemonError> {
        let path = self.folders.config.join(SERVER_FILE);
        let mut text = serde_json::to_vec_pretty(server).unwrap_or_default();
        text.push(b'\n');
        write_private(&path, &text)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        status::remove_running(&self.folders.state);
    }
}

fn create_private_dir(dir: &Path) -> Result<(), DaemonError> {
    std::fs::create_dir_all(dir).map_err(|e| DaemonError::home(dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| DaemonError::home(dir, e))
}

/// Writes `bytes` to `path` with mode 0600 through a temporary file and a rename, synced.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), DaemonError> {
    let tmp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| DaemonError::home(&tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| DaemonError::home(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| DaemonError::home(path, e))
}
