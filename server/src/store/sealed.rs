//! The `sealed` table: secrets the nodes of a cluster share (the frame keys, the admin and join
//! tokens), each one row of bytes sealed under the root key by [`crate::sealed`], with a
//! version that only grows.
//!
//! It stores and compares versions; it never opens a row, and never writes one over a version
//! it was not told of (two nodes rotating at once: one wins, the other reads the winner's).

use super::db::{OptionalExtension as _, Sql as _, params};
use super::{Doing as _, Store, StoreError};

impl Store {
    /// Row `name`: its version and sealed bytes, if it was written.
    pub(crate) fn sealed(&self, name: &str) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.lock()
            .query_row(
                "SELECT version, bytes FROM sealed WHERE name = ?1",
                params![name],
                |r| Ok((r.get::<i64>(0)?.max(0) as u64, r.get::<Vec<u8>>(1)?)),
            )
            .optional()
            .doing("reading a sealed secret")
    }

    /// Writes row `name` at `version` if it is still at `replacing` (`None`: if it does not
    /// exist yet). `false`: another node wrote it first; read it again.
    pub(crate) fn put_sealed(
        &self,
        name: &str,
        version: u64,
        bytes: &[u8],
        replacing: Option<u64>,
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        let written = match replacing {
            None => conn.execute(
                "INSERT INTO sealed (name, version, bytes) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO NOTHING",
                params![name, version as i64, bytes.to_vec()],
            ),
            Some(before) => conn.execute(
                "UPDATE sealed SET version = ?2, bytes = ?3 WHERE name = ?1 AND version = ?4",
                params![name, version as i64, bytes.to_vec(), before as i64],
            ),
        }
        .doing("writing a sealed secret")?;
        Ok(written == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::stores;

    #[test]
    fn a_sealed_row_is_written_once_and_replaced_only_from_the_version_read() {
        for fresh in stores("sealed") {
            let (store, kind) = (&fresh.store, fresh.kind);
            assert_eq!(store.sealed("frame_keys").unwrap(), None, "{kind}");
            assert!(store.put_sealed("frame_keys", 1, b"one", None).unwrap());
            assert!(
                !store.put_sealed("frame_keys", 1, b"other", None).unwrap(),
                "{kind}: a second first write loses"
            );
            assert!(store.put_sealed("frame_keys", 2, b"two", Some(1)).unwrap());
            assert!(
                !store.put_sealed("frame_keys", 2, b"late", Some(1)).unwrap(),
                "{kind}: a node that read version 1 does not overwrite version 2"
            );
            assert_eq!(
                store.sealed("frame_keys").unwrap(),
                Some((2, b"two".to_vec())),
                "{kind}"
            );
            assert_eq!(store.sealed("tokens").unwrap(), None, "{kind}: rows apart");
        }
    }
}
