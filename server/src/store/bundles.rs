//! Capability bundles uploaded by digest: each one a file `DIR/bundles/<sha256>` (0600, in a
//! 0700 folder) and a row — who stored it first, its size, its manifest, when it was last
//! used. A file is written under a temporary name and renamed into place before its row is
//! committed, so a row always has its file; a file without a row (a crash between the two)
//! and an unfinished upload are removed when the store opens. Rows of older versions held the
//! bytes themselves: opening the SQLite store moves them into files.
//!
//! Over PostgreSQL, which several nodes may share (docs/CLUSTER.md), the row holds the bytes
//! too: the node that took the upload has the file, and any other node that needs the bundle
//! (a daemon connected to it fetches it, its own executor runs it) writes its file from the
//! row the first time ([`Store::bundle_file`]). The file is then a node's cache, never the
//! only copy.
//!
//! It counts, stores and deletes; the routes decide what a quota refuses and how long an
//! unused bundle stays.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use super::db::{OptionalExtension as _, Sql as _, params};
use outpost_core::server::ExecutionStatus;

use super::{Doing as _, Store, StoreError};

/// The prefix of an upload's temporary file.
const UPLOAD_PREFIX: &str = ".upload-";

/// What the store knows of a bundle.
#[derive(Debug, Clone)]
pub(crate) struct BundleRow {
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its manifest's text (absent only for a bundle of an older version that does not read).
    pub(crate) manifest: Option<String>,
}

/// A checked upload to store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewBundle<'a> {
    /// Its digest, checked against its bytes.
    pub(crate) sha256: &'a str,
    /// Its upload file, written and synced.
    pub(crate) upload: &'a Path,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its manifest's text, checked.
    pub(crate) manifest: &'a str,
    /// Who uploads it.
    pub(crate) user: &'a str,
}

/// What storing a bundle did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// It is new.
    Added,
    /// It was stored already (now marked used).
    Existed,
    /// Its user's bundles hold `used` bytes: this one would pass the quota.
    OverQuota { used: u64 },
}

/// Whether `name` is a bundle file's name: 64 lowercase hex digits.
fn is_digest(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Writes `bytes` to a new private file (0600) at `path`, synced.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes a file's rename (or removal) in `dir` durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

impl Store {
    /// The folder of bundle files.
    pub(crate) fn bundle_dir(&self) -> &Path {
        &self.bundles
    }

    /// The file of the bundle `sha256` (which may not exist).
    pub(crate) fn bundle_path(&self, sha256: &str) -> PathBuf {
        self.bundle_dir().join(sha256)
    }

    /// A path for an upload's temporary file named by `token` (fresh random text).
    pub(crate) fn bundle_upload_path(&self, token: &str) -> PathBuf {
        self.bundle_dir().join(format!("{UPLOAD_PREFIX}{token}"))
    }

    /// The bytes of bundles `user` stored first.
    pub(crate) fn bundle_bytes_of(&self, user: &str) -> Result<u64, StoreError> {
        let used: i64 = self
            .read()
            .query_row(
                "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM bundles WHERE \"user\" = ?1",
                params![user],
                |r| r.get(0),
            )
            .doing("summing a user's bundles")?;
        Ok(used.max(0) as u64)
    }

    /// Stores `bundle` at `now`, unless it is stored already or its user's bundles and it
    /// would hold more than `quota` bytes. The upload file is renamed into place only when the
    /// bundle is added; otherwise it is the caller's to remove.
    pub(crate) fn put_bundle(
        &self,
        bundle: NewBundle<'_>,
        now: u64,
        quota: u64,
    ) -> Result<Stored, StoreError> {
        let NewBundle {
            sha256,
            upload,
            size,
            manifest,
            user,
        } = bundle;
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting to store a bundle")?;
        let touched = tx
            .execute(
                "UPDATE bundles SET used_at = CASE WHEN used_at < ?2 THEN ?2 ELSE used_at END WHERE sha256 = ?1",
                params![sha256, now as i64],
            )
            .doing("marking a bundle used")?;
        if touched == 1 {
            tx.commit().doing("marking a bundle used")?;
            return Ok(Stored::Existed);
        }
        let used: i64 = tx
            .query_row(
                "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM bundles WHERE \"user\" = ?1",
                params![user],
                |r| r.get(0),
            )
            .doing("summing a user's bundles")?;
        let used = used.max(0) as u64;
        if used.saturating_add(size) > quota {
            return Ok(Stored::OverQuota { used });
        }
        // Nodes sharing the database read the bytes from the row: they have no file of it.
        let shared = if tx.is_postgres() {
            fs::read(upload).doing("reading a bundle to share")?
        } else {
            Vec::new()
        };
        let path = self.bundle_path(sha256);
        fs::rename(upload, &path).doing("moving a bundle into place")?;
        sync_dir(self.bundle_dir()).doing("syncing the bundle folder")?;
        tx.execute(
            "INSERT INTO bundles (sha256, bytes, \"user\", created_at, size, used_at, manifest)
             VALUES (?1, ?6, ?2, ?3, ?4, ?3, ?5)",
            params![sha256, user, now as i64, size as i64, manifest, shared],
        )
        .doing("storing a bundle")?;
        tx.commit().doing("storing a bundle")?;
        Ok(Stored::Added)
    }

    /// The file of the stored bundle `sha256`, written first from its row when this node has
    /// none (another node of the cluster took the upload); `None` when neither this node's
    /// folder nor the database holds its bytes.
    pub(crate) fn bundle_file(&self, sha256: &str) -> Result<Option<PathBuf>, StoreError> {
        let path = self.bundle_path(sha256);
        if path.exists() {
            return Ok(Some(path));
        }
        let bytes: Option<Vec<u8>> = self
            .read()
            .query_row(
                "SELECT bytes FROM bundles WHERE sha256 = ?1 AND length(bytes) > 0",
                params![sha256],
                |r| r.get(0),
            )
            .optional()
            .doing("reading a shared bundle")?;
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        // A name of its own: two requests for one bundle at once each write theirs, and the
        // second rename replaces the first with the same bytes.
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).doing("naming a shared bundle's file")?;
        let token = format!("fetch-{sha256}-{}", hex::encode(nonce));
        let temp = self.bundle_upload_path(&token);
        write_synced(&temp, &bytes).doing("writing a shared bundle's file")?;
        fs::rename(&temp, &path).doing("moving a shared bundle into place")?;
        sync_dir(self.bundle_dir()).doing("syncing the bundle folder")?;
        Ok(Some(path))
    }

    /// The bundle `sha256`, marked used at `now`; `None` when it is not stored.
    pub(crate) fn use_bundle(
        &self,
        sha256: &str,
        now: u64,
    ) -> Result<Option<BundleRow>, StoreError> {
        let conn = self.lock();
        conn.execute(
            "UPDATE bundles SET used_at = ?2 WHERE sha256 = ?1 AND used_at < ?2",
            params![sha256, now as i64],
        )
        .doing("marking a bundle used")?;
        conn.query_row(
            "SELECT size, manifest FROM bundles WHERE sha256 = ?1",
            params![sha256],
            |r| {
                Ok(BundleRow {
                    size: r.get::<i64>(0)?.max(0) as u64,
                    manifest: r.get(1)?,
                })
            },
        )
        .optional()
        .doing("reading a bundle")
    }

    /// Deletes every bundle last used before `unused_since` that no execution not ended
    /// names, rows and files; returns their digests.
    pub(crate) fn sweep_bundles(&self, unused_since: u64) -> Result<Vec<String>, StoreError> {
        let gone: Vec<String> = self
            .lock()
            .query_map(
                "DELETE FROM bundles WHERE used_at < ?1 AND NOT EXISTS (
                     SELECT 1 FROM executions e
                     WHERE e.bundle = bundles.sha256 AND e.status IN (?2, ?3))
                 RETURNING sha256",
                params![
                    unused_since as i64,
                    ExecutionStatus::Pending.as_str(),
                    ExecutionStatus::Running.as_str()
                ],
                |r| r.get(0),
            )
            .doing("sweeping bundles")?;
        for sha256 in &gone {
            match fs::remove_file(self.bundle_path(sha256)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::new("removing a bundle file", e)),
            }
        }
        Ok(gone)
    }

    /// Makes the bundle folder (0700), removes unfinished uploads and files without a row,
    /// and moves the bytes of rows an older version wrote into files.
    /// The digests `query` (one column, `sha256`) lists.
    fn bundle_digests(&self, query: &str) -> Result<Vec<String>, StoreError> {
        self.lock()
            .query_map(query, params![], |r| r.get(0))
            .doing("listing stored bundles")
    }

    pub(super) fn prepare_bundles(&self) -> Result<(), StoreError> {
        let dir = self.bundle_dir();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .doing("making the bundle folder")?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .doing("making the bundle folder private")?;
        // Over PostgreSQL the rows' bytes are the copy every node reads: they stay.
        let legacy: Vec<String> = if self.lock().is_postgres() {
            Vec::new()
        } else {
            self.bundle_digests("SELECT sha256 FROM bundles WHERE length(bytes) > 0")?
        };
        for sha256 in legacy {
            self.move_out(&sha256)?;
        }
        let known: std::collections::HashSet<String> = self
            .bundle_digests("SELECT sha256 FROM bundles")?
            .into_iter()
            .collect();
        for entry in fs::read_dir(dir).doing("reading the bundle folder")? {
            let entry = entry.doing("reading the bundle folder")?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stray =
                name.starts_with(UPLOAD_PREFIX) || (is_digest(&name) && !known.contains(&name));
            if stray {
                fs::remove_file(entry.path()).doing("removing an unfinished bundle")?;
            }
        }
        Ok(())
    }

    /// Moves one row's bytes into its file, then empties the row (its manifest kept).
    fn move_out(&self, sha256: &str) -> Result<(), StoreError> {
        let bytes: Vec<u8> = self
            .lock()
            .query_row(
                "SELECT bytes FROM bundles WHERE sha256 = ?1",
                params![sha256],
                |r| r.get(0),
            )
            .doing("reading a stored bundle")?;
        let manifest = crate::bodies::check_bundle(&bytes[..])
            .ok()
            .map(|c| c.manifest_text);
        let path = self.bundle_path(sha256);
        let temp = self.bundle_upload_path(sha256);
        write_synced(&temp, &bytes).doing("moving a bundle into a file")?;
        fs::rename(&temp, &path).doing("moving a bundle into a file")?;
        sync_dir(self.bundle_dir()).doing("syncing the bundle folder")?;
        self.lock()
            .execute(
                "UPDATE bundles SET bytes = ?4, size = ?2, manifest = ?3 WHERE sha256 = ?1",
                params![sha256, bytes.len() as i64, manifest, Vec::<u8>::new()],
            )
            .doing("emptying a moved bundle's row")?;
        Ok(())
    }
}
