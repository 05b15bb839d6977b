//! The machine owner's local policy as a running daemon sees it: the one it started with,
//! read again whenever `policy.json` changes (an `outpost context policy` edit renames a new
//! file over it), so the next run is bounded by the policy as it is now.
//!
//! A policy file that no longer reads fails closed: runs see no folders until it is fixed,
//! and the log says why. A removed file means no folders. This module owns only that
//! reading; what a run mounts is the host's `launch` decision over it.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use outpost_core::grant::LocalPolicy;

/// What identifies one version of the file: inode, length, modification time (ns).
type Stamp = (u64, u64, i64, i64);

/// The policy file and the policy last read from it.
pub(crate) struct PolicySource {
    path: PathBuf,
    seen: Mutex<(Option<Stamp>, Arc<LocalPolicy>)>,
}

impl PolicySource {
    /// Watches `path`, starting from `initial` (what the daemon was started with).
    pub(crate) fn new(path: PathBuf, initial: LocalPolicy) -> Self {
        let stamp = stamp_of(&path);
        Self {
            path,
            seen: Mutex::new((stamp, Arc::new(initial))),
        }
    }

    /// The policy now: read again when the file changed since the last call.
    pub(crate) fn current(&self) -> Arc<LocalPolicy> {
        let stamp = stamp_of(&self.path);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if stamp != seen.0 {
            let policy = match stamp {
                None => LocalPolicy::default(),
                Some(_) => match std::fs::read(&self.path)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| {
                        serde_json::from_slice::<LocalPolicy>(&bytes).map_err(|e| e.to_string())
                    }) {
                    Ok(policy) => policy,
                    Err(reason) => {
                        tracing::error!(file = %self.path.display(), %reason,
                            "the local policy does not read; runs see no folders until it is fixed");
                        LocalPolicy::default()
                    }
                },
            };
            tracing::info!(file = %self.path.display(), folders = policy.folders.len(),
                "the local policy changed; the next run uses it");
            *seen = (stamp, Arc::new(policy));
        }
        seen.1.clone()
    }
}

fn stamp_of(path: &std::path::Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec()))
}
