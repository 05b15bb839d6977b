//! Capability bundles uploaded by digest: stored once per SHA-256, read by the daemons that
//! run them.

use rusqlite::{OptionalExtension as _, params};

use super::{Doing as _, Store, StoreError};

impl Store {
    /// Stores a bundle under its (checked) digest; `false` when it was already there.
    pub(crate) fn put_bundle(
        &self,
        sha256: &str,
        bytes: &[u8],
        user: &str,
        now: u64,
    ) -> Result<bool, StoreError> {
        let added = self
            .lock()
            .execute(
                "INSERT OR IGNORE INTO bundles (sha256, bytes, user, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![sha256, bytes, user, now as i64],
            )
            .doing("storing a bundle")?;
        Ok(added == 1)
    }

    /// A bundle's bytes.
    pub(crate) fn bundle(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read()
            .query_row(
                "SELECT bytes FROM bundles WHERE sha256 = ?1",
                [sha256],
                |r| r.get(0),
            )
            .optional()
            .doing("reading a bundle")
    }
}
