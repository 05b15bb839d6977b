//! Who may do what: users, their tokens (SHA-256 only), registered contexts with their
//! machine keys, and the nonces signed requests have used.

use super::db::{DbError, OptionalExtension as _, Row, Sql as _, params};

use super::{Doing as _, Store, StoreError};

/// A token as stored: whose it is and what it may do.
#[derive(Debug, Clone)]
pub(crate) struct TokenEntry {
    /// The user id the token acts as.
    pub(crate) user: String,
    /// Its scopes.
    pub(crate) scopes: Vec<String>,
    /// When it stops working, if ever (Unix seconds).
    pub(crate) expires_at: Option<u64>,
    /// Whether it was revoked.
    pub(crate) revoked: bool,
}

/// A registered context as the server's own table keeps it (the grant columns follow the
/// dispatcher's records).
#[derive(Debug, Clone)]
pub(crate) struct ContextEntry {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) operator: String,
    pub(crate) key_id: String,
    pub(crate) max_concurrent: u32,
    pub(crate) environments: Vec<String>,
    pub(crate) daemon_version: String,
    pub(crate) registered_at: u64,
    pub(crate) grant_json: String,
    pub(crate) grant_version: u64,
    pub(crate) revoked: bool,
    /// Shared with every member (as the dispatcher's record says).
    pub(crate) shared_with_all_members: bool,
    /// Users who opted in to shared runs on it.
    pub(crate) opted_in: Vec<String>,
    /// Whether its operator is still a member, as last fed to the dispatcher.
    pub(crate) operator_is_member: bool,
}

const CONTEXT_COLUMNS: &str = "id, name, operator, key_id, max_concurrent, environments, \
     daemon_version, registered_at, grant_json, grant_version, revoked";
/// [`CONTEXT_COLUMNS`] and the access columns, which only the dispatcher's records write.
const READ_COLUMNS: &str = "id, name, operator, key_id, max_concurrent, environments, \
     daemon_version, registered_at, grant_json, grant_version, revoked, \
     shared_with_all_members, opted_in, operator_is_member";

/// What removing a user found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    /// No such user.
    Unknown,
    /// Removed now: their tokens were revoked.
    Removed,
    /// Removed before (tokens revoked again, in case).
    AlreadyRemoved,
}

fn context_row(r: &Row) -> Result<ContextEntry, DbError> {
    let environments: String = r.get(5)?;
    Ok(ContextEntry {
        id: r.get(0)?,
        name: r.get(1)?,
        operator: r.get(2)?,
        key_id: r.get(3)?,
        max_concurrent: r.get(4)?,
        environments: serde_json::from_str(&environments).unwrap_or_default(),
        daemon_version: r.get(6)?,
        registered_at: r.get::<i64>(7)? as u64,
        grant_json: r.get(8)?,
        grant_version: r.get::<i64>(9)? as u64,
        revoked: r.get(10)?,
        shared_with_all_members: r.get(11)?,
        opted_in: serde_json::from_str(&r.get::<String>(12)?).unwrap_or_default(),
        operator_is_member: r.get(13)?,
    })
}

/// The oldest live context of operator `?1` named `?2` (with `?3`, one shared with every
/// member): `contexts_by_name`'s lookup.
pub(super) const LIVE_CONTEXT_NAMED_BY: &str = "SELECT id FROM contexts
     WHERE operator = ?1 AND name = ?2 AND revoked = 0 AND (?3 = 0 OR shared_with_all_members = 1)
     ORDER BY registered_at, id LIMIT 1";

/// The oldest live context of anyone named `?1` (with `?2`, one shared with every member):
/// `contexts_by_live_name`'s lookup.
pub(super) const LIVE_CONTEXT_NAMED: &str = "SELECT id FROM contexts
     WHERE name = ?1 AND revoked = 0 AND (?2 = 0 OR shared_with_all_members = 1)
     ORDER BY registered_at, id LIMIT 1";

impl Store {
    /// Whether any user exists (false on first start).
    pub fn has_users(&self) -> Result<bool, StoreError> {
        let n: i64 = self
            .read()
            .query_row("SELECT COUNT(*) FROM users", params![], |r| r.get(0))
            .doing("counting users")?;
        Ok(n > 0)
    }

    /// Creates a user with one token; false when the name is taken (nothing written).
    pub fn create_user(
        &self,
        name: &str,
        token_hash: &[u8; 32],
        scopes: &[String],
        now: u64,
    ) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a user transaction")?;
        let inserted = tx
            .execute(
                "INSERT INTO users (name, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                params![name, now as i64],
            )
            .doing("creating a user")?;
        if inserted == 0 {
            return Ok(false);
        }
        insert_token(&tx, name, token_hash, scopes, None, now)?;
        tx.commit().doing("committing a user")?;
        Ok(true)
    }

    /// Removes `name` from the organization: marks the user removed at `now` and revokes
    /// every token of theirs, in one transaction. The name stays taken.
    pub fn remove_user(&self, name: &str, now: u64) -> Result<Removal, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a user removal")?;
        let found: Option<Option<i64>> = tx
            .query_row(
                "SELECT removed_at FROM users WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .doing("finding a user")?;
        let Some(removed_at) = found else {
            return Ok(Removal::Unknown);
        };
        if removed_at.is_none() {
            tx.execute(
                "UPDATE users SET removed_at = ?1 WHERE name = ?2",
                params![now as i64, name],
            )
            .doing("removing a user")?;
        }
        tx.execute(
            "UPDATE tokens SET revoked = 1 WHERE \"user\" = ?1",
            params![name],
        )
        .doing("revoking a user's tokens")?;
        tx.commit().doing("committing a user removal")?;
        Ok(if removed_at.is_none() {
            Removal::Removed
        } else {
            Removal::AlreadyRemoved
        })
    }

    /// The users removed from the organization.
    pub fn removed_users(&self) -> Result<std::collections::HashSet<String>, StoreError> {
        let names: Vec<String> = self
            .lock()
            .query_map(
                "SELECT name FROM users WHERE removed_at IS NOT NULL",
                params![],
                |r| r.get::<String>(0),
            )
            .doing("listing removed users")?;
        Ok(names.into_iter().collect())
    }

    /// Adds a token for an existing user.
    pub fn add_token(
        &self,
        user: &str,
        token_hash: &[u8; 32],
        scopes: &[String],
        expires_at: Option<u64>,
        now: u64,
    ) -> Result<(), StoreError> {
        insert_token(&*self.lock(), user, token_hash, scopes, expires_at, now)
    }

    /// The token with this hash.
    pub fn token(&self, hash: &[u8; 32]) -> Result<Option<TokenEntry>, StoreError> {
        self.read()
            .query_row(
                "SELECT \"user\", scopes, expires_at, revoked FROM tokens WHERE hash = ?1",
                params![hash.as_slice()],
                |r| {
                    let scopes: String = r.get(1)?;
                    Ok(TokenEntry {
                        user: r.get(0)?,
                        scopes: scopes
                            .split(' ')
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect(),
                        expires_at: r.get::<Option<i64>>(2)?.map(|t| t as u64),
                        revoked: r.get(3)?,
                    })
                },
            )
            .optional()
            .doing("looking up a token")
    }

    /// Registers a context and its machine key in one transaction.
    pub fn insert_context(
        &self,
        entry: &ContextEntry,
        public_key: &[u8; 32],
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a context transaction")?;
        tx.execute(
            &format!("INSERT INTO contexts ({CONTEXT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
            params![
                entry.id,
                entry.name,
                entry.operator,
                entry.key_id,
                entry.max_concurrent,
                serde_json::to_string(&entry.environments).doing("encoding environments")?,
                entry.daemon_version,
                entry.registered_at as i64,
                entry.grant_json,
                entry.grant_version as i64,
                entry.revoked
            ],
        )
        .doing("registering a context")?;
        tx.execute(
            "INSERT INTO machine_keys (key_id, context_id, public_key) VALUES (?1, ?2, ?3)",
            params![entry.key_id, entry.id, public_key.as_slice()],
        )
        .doing("registering a machine key")?;
        tx.commit().doing("committing a context")?;
        self.changes.notify(super::Topic::Contexts);
        Ok(())
    }

    fn one_context(&self, clause: &str, arg: &str) -> Result<Option<ContextEntry>, StoreError> {
        self.read()
            .query_row(
                &format!("SELECT {READ_COLUMNS} FROM contexts WHERE {clause}"),
                params![arg],
                context_row,
            )
            .optional()
            .doing("reading a context")
    }

    /// The context with this id.
    pub fn context(&self, id: &str) -> Result<Option<ContextEntry>, StoreError> {
        self.one_context("id = ?1", id)
    }

    /// The context registered with this machine key.
    pub fn context_by_key(&self, key_id: &str) -> Result<Option<ContextEntry>, StoreError> {
        self.one_context("key_id = ?1", key_id)
    }

    /// Whether context `id` is revoked, or `None` when there is no such context: the one
    /// column an execute needs, without reading and decoding the whole row.
    pub fn context_revoked(&self, id: &str) -> Result<Option<bool>, StoreError> {
        self.read()
            .query_row(
                "SELECT revoked FROM contexts WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .doing("reading a context")
    }

    /// The id of the oldest live (not revoked) context named `name`: `operator`'s when
    /// given, else anyone's (with `shared_only`, one shared with every member). One indexed
    /// lookup, however many contexts there are (`contexts_by_name` with an operator,
    /// `contexts_by_live_name` without), reading nothing else of the row.
    pub fn live_context_id_named(
        &self,
        name: &str,
        operator: Option<&str>,
        shared_only: bool,
    ) -> Result<Option<String>, StoreError> {
        // Two statements, not one with `?2 IS NULL OR operator = ?2`: an OR on a parameter
        // keeps either database from using the index on `operator`.
        let conn = self.read();
        let found = match operator {
            Some(operator) => conn.query_row(
                LIVE_CONTEXT_NAMED_BY,
                params![operator, name, shared_only],
                |r| r.get(0),
            ),
            None => conn.query_row(LIVE_CONTEXT_NAMED, params![name, shared_only], |r| r.get(0)),
        };
        found.optional().doing("reading a context")
    }

    /// Whether `operator` has a live (not revoked) context named `name`: one indexed lookup,
    /// so registering stays cheap however many machines there are.
    pub fn live_name_taken(&self, operator: &str, name: &str) -> Result<bool, StoreError> {
        self.read()
            .query_row(
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM contexts WHERE operator = ?1 AND name = ?2 AND revoked = 0) THEN 1 ELSE 0 END",
                params![operator, name],
                |r| r.get(0),
            )
            .doing("checking a context name")
    }

    /// Every context, oldest first.
    pub fn contexts(&self) -> Result<Vec<ContextEntry>, StoreError> {
        self.read()
            .query_map(
                &format!("SELECT {READ_COLUMNS} FROM contexts ORDER BY registered_at, id"),
                params![],
                context_row,
            )
            .doing("listing contexts")
    }

    /// Removes a context and its machine key (its executions keep their copied name).
    pub fn delete_context(&self, id: &str) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().doing("starting a delete")?;
        tx.execute(
            "DELETE FROM machine_keys WHERE context_id = ?1",
            params![id],
        )
        .doing("deleting a machine key")?;
        tx.execute("DELETE FROM contexts WHERE id = ?1", params![id])
            .doing("deleting a context")?;
        tx.execute(
            "DELETE FROM records WHERE kind = 'context' AND key = ?1",
            params![id],
        )
        .doing("deleting a context record")?;
        tx.commit().doing("committing a delete")?;
        self.changes.notify(super::Topic::Contexts);
        Ok(())
    }

    /// A machine key: its context, public key and whether it was revoked.
    pub fn machine_key(
        &self,
        key_id: &str,
    ) -> Result<Option<(String, [u8; 32], bool)>, StoreError> {
        let found: Option<(String, Vec<u8>, bool)> = self
            .read()
            .query_row(
                "SELECT context_id, public_key, revoked FROM machine_keys WHERE key_id = ?1",
                params![key_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .doing("reading a machine key")?;
        Ok(found.and_then(|(ctx, key, revoked)| {
            <[u8; 32]>::try_from(key.as_slice())
                .ok()
                .map(|k| (ctx, k, revoked))
        }))
    }

    /// Spends a nonce (kept until `keep_until`, Unix seconds) with one statement; false when
    /// it was spent already — by this node before a restart, or by another node over the same
    /// database.
    pub fn insert_nonce(
        &self,
        key_id: &str,
        nonce: &str,
        created: u64,
        expires: Option<u64>,
        keep_until: u64,
    ) -> Result<bool, StoreError> {
        let inserted = self
            .lock()
            .execute(
                "INSERT INTO nonces (key_id, nonce, created, expires, keep_until) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                params![key_id, nonce, created as i64, expires.map(|e| e as i64), keep_until as i64],
            )
            .doing("recording a nonce")?;
        Ok(inserted == 1)
    }

    /// Nonces still worth remembering at `now`; older ones are deleted.
    #[allow(clippy::type_complexity)]
    pub fn live_nonces(
        &self,
        now: u64,
    ) -> Result<Vec<(String, String, u64, Option<u64>)>, StoreError> {
        let conn = self.lock();
        conn.execute(
            "DELETE FROM nonces WHERE keep_until < ?1",
            params![now as i64],
        )
        .doing("pruning nonces")?;
        conn.query_map(
            "SELECT key_id, nonce, created, expires FROM nonces",
            params![],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get::<i64>(2)? as u64,
                    r.get::<Option<i64>>(3)?.map(|e| e as u64),
                ))
            },
        )
        .doing("reading nonces")
    }
}

pub(super) fn insert_token(
    conn: &impl super::db::Sql,
    user: &str,
    hash: &[u8; 32],
    scopes: &[String],
    expires_at: Option<u64>,
    now: u64,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO tokens (hash, \"user\", scopes, expires_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![hash.as_slice(), user, scopes.join(" "), expires_at.map(|e| e as i64), now as i64],
    )
    .doing("storing a token")?;
    Ok(())
}
