//! Large inline capabilities are kept on disk, not in memory: an execution whose inline
//! capability is over [`PARK_ABOVE`] bytes has it stored as a bundle (the same content-addressed
//! files as `PUT /v1/bundles`, in the state folder) and goes on, to the dispatcher, the
//! records and the daemon, named by digest. So what an execution holds in the server's memory
//! while it waits (queued for an offline machine, up to a day) or runs is a few dozen bytes,
//! however large its capability.
//!
//! A parked bundle does not count toward its user's bundle quota (it is not an upload; the
//! executions' own caps bound it) and goes, like any bundle, once unused for the retention and
//! named by no execution that has not ended. This module never decides where anything runs.

use outpost_core::wire::{CapabilitySource, InlineFile, bundle_digest, encode_bundle};

use crate::clock::wall_now;
use crate::store::{Doing as _, NewBundle, Store, StoreError};

/// Inline capabilities over this many bytes (manifest and base64 text) are parked.
pub const PARK_ABOVE: usize = 64 * 1024;

/// Whether [`park`] would park `capability`: inline and over [`PARK_ABOVE`]. Reads nothing
/// but the capability, so a caller on an async runtime can skip a blocking thread for the
/// common small one.
pub(crate) fn parks(capability: &CapabilitySource) -> bool {
    over_limit(capability).is_some()
}

/// The manifest and files of `capability` when it is inline and over [`PARK_ABOVE`].
fn over_limit(capability: &CapabilitySource) -> Option<(&str, &[InlineFile])> {
    let CapabilitySource::Inline {
        manifest: text,
        files,
    } = capability
    else {
        return None;
    };
    let held = text.len()
        + files
            .iter()
            .map(|f| f.path.len() + f.content_b64.len())
            .sum::<usize>();
    (held > PARK_ABOVE).then_some((text.as_str(), files.as_slice()))
}

/// `capability` (checked already), parked when it is inline and over [`PARK_ABOVE`]: then the
/// same capability by digest, stored for `user`. Anything else comes back as it was. It
/// writes a file and a row, flushed: call it where blocking is allowed.
pub(crate) fn park(
    store: &Store,
    user: &str,
    capability: CapabilitySource,
) -> Result<CapabilitySource, StoreError> {
    let Some((text, files)) = over_limit(&capability) else {
        return Ok(capability);
    };
    let bytes = encode_bundle(text, files);
    let sha256 = bundle_digest(&bytes);
    let size = bytes.len() as u64;
    let mut token = [0u8; 12];
    getrandom::fill(&mut token)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .doing("making a parked bundle's name")?;
    let upload = store.bundle_upload_path(&format!("park-{}", hex::encode(token)));
    if let Err(e) = write_private(&upload, &bytes) {
        let _ = std::fs::remove_file(&upload);
        return Err(StoreError::new("writing a parked capability", e));
    }
    let bundle = NewBundle {
        sha256: &sha256,
        upload: &upload,
        size,
        manifest: text,
        user,
    };
    let stored = store.put_bundle(bundle, wall_now().0, u64::MAX);
    // Stored already (the same capability waits twice): the file stays unused.
    let _ = std::fs::remove_file(&upload);
    stored?;
    Ok(CapabilitySource::Digest { sha256, size })
}

/// Writes `bytes` to the new file `path`, 0600, flushed to disk.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
