//! Join tokens: the bearer tokens with the single scope `execution_context:create` that a join
//! string carries, each with its bounds (an expiry — the token's own —, a number of uses, a
//! name prefix) and the count of machines registered with it. The token row holds the hash
//! and the revocation; this table holds the rest.
//!
//! This module owns those rows. It never decides whether a registration may go ahead: the
//! registration route reads a token's bounds and refuses.

use super::db::{DbError, OptionalExtension as _, Row, Sql as _, params};

use super::{Doing as _, Store, StoreError};

/// One join token's bounds and use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinTokenEntry {
    /// `jt_…`.
    pub(crate) id: String,
    /// Who made it.
    pub(crate) created_by: String,
    /// Unix seconds.
    pub(crate) created_at: u64,
    /// When its token expires (Unix seconds), if it does.
    pub(crate) expires_at: Option<u64>,
    /// Registrations it may still make; `None`: any number.
    pub(crate) uses_left: Option<u32>,
    /// Registrations made with it.
    pub(crate) used: u32,
    /// The prefix a registering machine's name must have.
    pub(crate) name_prefix: Option<String>,
    /// Its token is revoked.
    pub(crate) revoked: bool,
}

const COLUMNS: &str = "j.id, j.created_by, j.created_at, t.expires_at, j.uses_left, j.used, \
     j.name_prefix, t.revoked";

fn row(r: &Row) -> Result<JoinTokenEntry, DbError> {
    Ok(JoinTokenEntry {
        id: r.get(0)?,
        created_by: r.get(1)?,
        created_at: r.get::<i64>(2)? as u64,
        expires_at: r.get::<Option<i64>>(3)?.map(|t| t as u64),
        uses_left: r.get::<Option<i64>>(4)?.map(|n| n.max(0) as u32),
        used: r.get::<i64>(5)?.max(0) as u32,
        name_prefix: r.get(6)?,
        revoked: r.get(7)?,
    })
}

impl Store {
    /// Stores a new join token: its bearer token (hash, `user`, the create scope) and its
    /// bounds, in one transaction.
    pub(crate) fn add_join_token(
        &self,
        entry: &JoinTokenEntry,
        token_hash: &[u8; 32],
        scopes: &[String],
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a join token")?;
        super::access::insert_token(
            &tx,
            &entry.created_by,
            token_hash,
            scopes,
            entry.expires_at,
            entry.created_at,
        )?;
        tx.execute(
            "INSERT INTO join_tokens (id, hash, created_by, created_at, uses_left, used, name_prefix) \
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
            params![
                entry.id,
                token_hash.as_slice(),
                entry.created_by,
                entry.created_at as i64,
                entry.uses_left.map(i64::from),
                entry.name_prefix
            ],
        )
        .doing("storing a join token")?;
        tx.commit().doing("committing a join token")
    }

    /// Gives the token with `token_hash` (already stored, as the first start's join token is)
    /// the id `id` and no bounds, unless it has a join token row already.
    pub(crate) fn adopt_join_token(
        &self,
        id: &str,
        token_hash: &[u8; 32],
        created_by: &str,
        now: u64,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO join_tokens (id, hash, created_by, created_at, used) \
                 SELECT ?1, hash, ?3, ?4, 0 FROM tokens WHERE hash = ?2 ON CONFLICT DO NOTHING",
                params![id, token_hash.as_slice(), created_by, now as i64],
            )
            .doing("adopting the first join token")?;
        Ok(())
    }

    /// Every join token, newest first.
    pub(crate) fn join_tokens(&self) -> Result<Vec<JoinTokenEntry>, StoreError> {
        self.read()
            .query_map(
                &format!(
                    "SELECT {COLUMNS} FROM join_tokens j JOIN tokens t ON t.hash = j.hash \
                     ORDER BY j.created_at DESC, j.rowid DESC"
                ),
                params![],
                row,
            )
            .doing("listing join tokens")
    }

    /// The join token whose bearer token has `token_hash`, if that token is a join token.
    pub(crate) fn join_token_by_hash(
        &self,
        token_hash: &[u8; 32],
    ) -> Result<Option<JoinTokenEntry>, StoreError> {
        self.read()
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM join_tokens j JOIN tokens t ON t.hash = j.hash \
                     WHERE j.hash = ?1"
                ),
                params![token_hash.as_slice()],
                row,
            )
            .optional()
            .doing("looking up a join token")
    }

    /// Revokes join token `id`'s bearer token; false when there is no such join token.
    pub(crate) fn revoke_join_token(&self, id: &str) -> Result<bool, StoreError> {
        let changed = self
            .lock()
            .execute(
                "UPDATE tokens SET revoked = 1 WHERE hash = (SELECT hash FROM join_tokens WHERE id = ?1)",
                params![id],
            )
            .doing("revoking a join token")?;
        Ok(changed > 0)
    }

    /// Counts a registration with join token `id` (one use fewer) and records it on the
    /// context it made.
    pub(crate) fn join_token_used(&self, id: &str, context_id: &str) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a join token's use")?;
        tx.execute(
            "UPDATE join_tokens SET used = used + 1, \
             uses_left = CASE WHEN uses_left > 0 THEN uses_left - 1 WHEN uses_left IS NULL THEN NULL ELSE 0 END \
             WHERE id = ?1",
            params![id],
        )
        .doing("counting a join token's use")?;
        tx.execute(
            "UPDATE contexts SET join_token = ?1 WHERE id = ?2",
            params![id, context_id],
        )
        .doing("recording a context's join token")?;
        tx.commit().doing("committing a join token's use")
    }
}
