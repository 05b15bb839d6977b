//! Daemon releases this server publishes (`outpost serve --publish-daemon BINARY`): the binary
//! stored under its SHA-512 in `DIR/releases/`, and `DIR/releases/daemon-release.json`, the
//! release document (core's [`outpost_core::release`]) signed by the server's root key — the
//! key every daemon pins from its join string, so no one without the state folder can make a
//! release a daemon takes.
//!
//! The binary is written first and the document renamed into place last, so a daemon asking
//! meanwhile gets the old release or the new one, whole. This module owns those files; the
//! routes that serve them are `http::releases`, and it never runs a daemon.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use outpost_core::release::{Version, sha512_hex, sign_release};

use crate::state::{self, StateError};

/// The release document's file name in `DIR/releases/`.
pub const RELEASE_FILE: &str = "daemon-release.json";

/// The folder of releases in a state folder.
pub fn releases_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("releases")
}

/// Why a binary could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The state folder or its keys.
    #[error(transparent)]
    State(#[from] StateError),
    /// The binary cannot be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The binary that could not be read, or the release folder that could not be written.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// `BINARY version --json` did not say a version.
    #[error(
        "`{} version --json` did not print a daemon version ({reason}): publish an outpost binary built for this machine",
        .path.display()
    )]
    NoVersion {
        /// The binary that was run with `version --json`.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Signing failed.
    #[error("signing the release failed: {0}")]
    Sign(String),
}

impl PublishError {
    /// The stable code: `state_unreadable`, `binary_unreadable`, `no_version` or `signer_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            PublishError::State(_) => "state_unreadable",
            PublishError::Io { .. } => "binary_unreadable",
            PublishError::NoVersion { .. } => "no_version",
            PublishError::Sign(_) => "signer_failed",
        }
    }
}

/// What was published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The version the binary says it is.
    pub version: Version,
    /// Its SHA-512, lowercase hex.
    pub sha512: String,
    /// Its length.
    pub size: u64,
}

/// Publishes `binary` as this server's daemon release for this machine's OS and CPU. The
/// version is what the binary itself prints, so a release cannot name a version its binary
/// does not run as.
pub fn publish_daemon(state_dir: &Path, binary: &Path) -> Result<Published, PublishError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PublishError::Io { path, source }
    };
    let version = binary_version(binary)?;
    let bytes = std::fs::read(binary).map_err(io(binary))?;
    let root = state::root_signer(state_dir)?;
    let document = sign_release(
        version,
        std::env::consts::OS,
        std::env::consts::ARCH,
        &bytes,
        &root,
    )
    .map_err(|e| PublishError::Sign(e.to_string()))?;
    let dir = releases_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let sha512 = sha512_hex(&bytes);
    write_new(&dir.join(format!("{sha512}.bin")), &bytes, 0o700).map_err(io(&dir))?;
    write_new(&dir.join(RELEASE_FILE), &document, 0o600).map_err(io(&dir))?;
    Ok(Published {
        version,
        sha512,
        size: bytes.len() as u64,
    })
}

/// The version `binary version --json` prints (`{"version":"1.2.3",…}`).
pub fn binary_version(binary: &Path) -> Result<Version, PublishError> {
    let no = |reason: String| PublishError::NoVersion {
        path: binary.to_path_buf(),
        reason,
    };
    let out = Command::new(binary)
        .args(["version", "--json"])
        .output()
        .map_err(|e| no(e.to_string()))?;
    if !out.status.success() {
        return Err(no(format!("it exited with {}", out.status)));
    }
    let answer: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| no(format!("not JSON: {e}")))?;
    let text = answer["version"]
        .as_str()
        .ok_or_else(|| no("no `version` member".into()))?;
    Version::parse(text).map_err(|e| no(e.to_string()))
}

/// Writes `bytes` to `path` through a temporary file renamed over it.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)
}
