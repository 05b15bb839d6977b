//! Server frame keys: the key-set document, the pinned roots that vouch for it, and the
//! committed test root.
//!
//! A key set is a JSON document listing frame keys with validity windows, signed by a root
//! key. A daemon pins root public keys and accepts a key set only if one of them signed it;
//! it then accepts a frame only if its `kid` names a key of the set that is valid at the
//! frame's verification time (`not_before <= now < not_after`). Rotation publishes a set in
//! which the old and the new key overlap.
//!
//! ```text
//! {"type":"outpost.key-set","version":3,"root":"root-1",
//!  "keys":[{"kid":"frame-a","publicKey":"<b64url>","notBefore":1700000000,"notAfter":1710000000}],
//!  "sig":"<b64url>"}
//! ```
//!
//! The signed bytes are `"outpost key set v1" 0x00` followed by the canonical JSON of the
//! document without `sig` (see [`crate::sign`]).
//!
//! This module owns the trust decision for frame keys. It never fetches a key set and never
//! reads a clock.

mod roots;
pub mod test_root;

pub use roots::{PinnedRoots, RootKey, is_loopback_host};

use ed25519_dalek::{Signature, VerifyingKey};

use crate::b64;
use crate::json::{self, JsonError, Value};
use crate::sign::{self, KEY_SET_DOMAIN, SIG_FIELD, Signer, SignerError};
use crate::time::UnixTime;

/// The `type` of a key-set document.
pub const KEY_SET_TYPE: &str = "outpost.key-set";

/// The most keys one set may list.
pub const MAX_KEYS: usize = 16;

/// One frame key with its validity window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameKey {
    /// The key id frames name in `kid`.
    pub kid: String,
    /// The Ed25519 public key.
    pub public_key: VerifyingKey,
    /// Valid from this time on.
    pub not_before: UnixTime,
    /// Valid until just before this time.
    pub not_after: UnixTime,
}

/// A verified set of frame keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet {
    version: u64,
    root: String,
    keys: Vec<FrameKey>,
    /// The signed document the set was read from, kept so a daemon can store it and check it
    /// again after a restart; none for a [`KeySet::trusted`] set.
    document: Option<std::sync::Arc<str>>,
}

/// Why a key-set document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    /// Not strict JSON.
    #[error("key set is not valid JSON: {0}")]
    Json(#[from] JsonError),
    /// A required member is missing or has the wrong type.
    #[error("key set field `{field}` is invalid: {reason}")]
    InvalidField {
        /// The member, as a path (`keys[1].notAfter`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Signed by a root this daemon does not pin.
    #[error("key set is signed by unknown root {0:?}")]
    UnknownRoot(String),
    /// The root signature does not verify.
    #[error("key set root signature does not verify")]
    BadRootSignature,
    /// A key is a small-order point, which would let anyone forge its signatures.
    #[error("key {0:?} is a weak public key")]
    WeakKey(String),
    /// Two keys share a kid.
    #[error("key id {0:?} appears twice")]
    DuplicateKid(String),
}

impl KeySetError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            KeySetError::Json(e) => e.code(),
            KeySetError::InvalidField { .. } => "invalid_key_set",
            KeySetError::UnknownRoot(_) => "unknown_root",
            KeySetError::BadRootSignature => "bad_root_signature",
            KeySetError::WeakKey(_) => "weak_key",
            KeySetError::DuplicateKid(_) => "duplicate_kid",
        }
    }
}

/// Why a frame key could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No key of the set has this id.
    #[error("no frame key with id {0:?}")]
    UnknownKid(String),
    /// The key's window has not opened.
    #[error("frame key {kid:?} is not valid before {not_before}")]
    NotYetValid {
        /// The `kid` the frame named.
        kid: String,
        /// When it becomes valid.
        not_before: UnixTime,
    },
    /// The key's window has closed.
    #[error("frame key {kid:?} expired at {not_after}")]
    Expired {
        /// The `kid` the frame named.
        kid: String,
        /// When it stopped being valid.
        not_after: UnixTime,
    },
}

impl KeyError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::UnknownKid(_) => "unknown_kid",
            KeyError::NotYetValid { .. } => "key_not_yet_valid",
            KeyError::Expired { .. } => "key_expired",
        }
    }
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> KeySetError {
    KeySetError::InvalidField {
        field: field.into(),
        reason: reason.into(),
    }
}

fn str_field<'a>(v: &'a Value, name: &str, path: &str) -> Result<&'a str, KeySetError> {
    v.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{path}{name}"), "missing or not a string"))
}

fn time_field(v: &Value, name: &str, path: &str) -> Result<UnixTime, KeySetError> {
    v.get(name)
        .and_then(Value::as_i64)
        .and_then(|i| u64::try_from(i).ok())
        .map(UnixTime)
        .ok_or_else(|| {
            invalid(
                format!("{path}{name}"),
                "missing or not a non-negative integer",
            )
        })
}

impl KeySet {
    /// Verifies a key-set document against the pinned roots and reads its keys.
    pub fn from_document(bytes: &[u8], roots: &PinnedRoots) -> Result<KeySet, KeySetError> {
        let mut doc = json::parse_strict(bytes)?;
        if !matches!(doc, Value::Object(_)) {
            return Err(invalid("", "not an object"));
        }
        if doc.get("type").and_then(Value::as_str) != Some(KEY_SET_TYPE) {
            return Err(invalid("type", format!("must be {KEY_SET_TYPE:?}")));
        }
        let sig_text = match doc.remove(SIG_FIELD) {
            Some(Value::String(s)) => s,
            _ => return Err(invalid(SIG_FIELD, "missing or not a string")),
        };
        let sig =
            b64::decode_array::<64>(&sig_text).map_err(|e| invalid(SIG_FIELD, e.to_string()))?;
        let root_id = str_field(&doc, "root", "")?.to_owned();
        let root = roots
            .get(&root_id)
            .ok_or_else(|| KeySetError::UnknownRoot(root_id.clone()))?;
        let input = sign::signing_input(KEY_SET_DOMAIN, &doc);
        root.verify_strict(&input, &Signature::from_bytes(&sig))
            .map_err(|_| KeySetError::BadRootSignature)?;

        // Authentic from here on; still check the content is sane.
        let version = doc
            .get("version")
            .and_then(Value::as_i64)
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| invalid("version", "missing or not a non-negative integer"))?;
        let Some(Value::Array(entries)) = doc.get("keys") else {
            return Err(invalid("keys", "missing or not an array"));
        };
        if entries.is_empty() || entries.len() > MAX_KEYS {
            return Err(invalid("keys", format!("must list 1 to {MAX_KEYS} keys")));
        }
        let mut keys: Vec<FrameKey> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let path = format!("keys[{i}].");
            let kid = str_field(entry, "kid", &path)?.to_owned();
            if kid.is_empty() {
                return Err(invalid(format!("{path}kid"), "empty"));
            }
            let pk = b64::decode_array::<32>(str_field(entry, "publicKey", &path)?)
                .map_err(|e| invalid(format!("{path}publicKey"), e.to_string()))?;
            let public_key = VerifyingKey::from_bytes(&pk)
                .map_err(|_| invalid(format!("{path}publicKey"), "not a curve point"))?;
            if public_key.is_weak() {
                return Err(KeySetError::WeakKey(kid));
            }
            let not_before = time_field(entry, "notBefore", &path)?;
            let not_after = time_field(entry, "notAfter", &path)?;
            if not_after <= not_before {
                return Err(invalid(
                    format!("{path}notAfter"),
                    "must be after notBefore",
                ));
            }
            if keys.iter().any(|k| k.kid == kid) {
                return Err(KeySetError::DuplicateKid(kid));
            }
            keys.push(FrameKey {
                kid,
                public_key,
                not_before,
                not_after,
            });
        }
        Ok(KeySet {
            version,
            root: root_id,
            keys,
            // `parse_strict` read the bytes as UTF-8 already.
            document: std::str::from_utf8(bytes).ok().map(std::sync::Arc::from),
        })
    }

    /// A set of keys the caller already trusts, without a root signature: for tests, test
    /// vectors, and hosts that pin frame keys directly. The root check is then the
    /// caller's responsibility; weak keys, duplicate ids and empty windows are still refused.
    pub fn trusted(version: u64, keys: Vec<FrameKey>) -> Result<KeySet, KeySetError> {
        for (i, k) in keys.iter().enumerate() {
            if k.public_key.is_weak() {
                return Err(KeySetError::WeakKey(k.kid.clone()));
            }
            if k.not_after <= k.not_before {
                return Err(invalid(
                    format!("keys[{i}].notAfter"),
                    "must be after notBefore",
                ));
            }
            if keys[..i].iter().any(|o| o.kid == k.kid) {
                return Err(KeySetError::DuplicateKid(k.kid.clone()));
            }
        }
        Ok(KeySet {
            version,
            root: String::new(),
            keys,
            document: None,
        })
    }

    /// Writes and signs a key-set document (the server's side; also used by tests).
    pub fn sign_document(
        version: u64,
        keys: &[FrameKey],
        root: &dyn Signer,
    ) -> Result<Vec<u8>, SignerError> {
        let key_values = keys
            .iter()
            .map(|k| {
                Value::Object(vec![
                    ("kid".into(), Value::String(k.kid.clone())),
                    (
                        "publicKey".into(),
                        Value::String(b64::encode(k.public_key.as_bytes())),
                    ),
                    ("notBefore".into(), Value::Int(clamp(k.not_before.0))),
                    ("notAfter".into(), Value::Int(clamp(k.not_after.0))),
                ])
            })
            .collect();
        let doc = Value::Object(vec![
            ("type".into(), Value::String(KEY_SET_TYPE.into())),
            ("version".into(), Value::Int(clamp(version))),
            ("root".into(), Value::String(root.key_id().to_owned())),
            ("keys".into(), Value::Array(key_values)),
        ]);
        sign::sign_canonical(KEY_SET_DOMAIN, &doc, root)
    }

    /// The document's version. A daemon never replaces a set by one with a lower version
    /// (PROTOCOL §7): [`crate::daemon::Daemon`] refuses it, across restarts too when its host
    /// stores [`KeySet::document`].
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The signed document this set was read from ([`KeySet::from_document`]), as it was
    /// given; `None` for a [`KeySet::trusted`] set.
    pub fn document(&self) -> Option<&str> {
        self.document.as_deref()
    }

    /// The id of the root that signed the set.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The keys, in document order.
    pub fn keys(&self) -> &[FrameKey] {
        &self.keys
    }

    /// The public key named `kid`, if it is valid at `now`.
    pub fn key_for(&self, kid: &str, now: UnixTime) -> Result<&VerifyingKey, KeyError> {
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == kid)
            .ok_or_else(|| KeyError::UnknownKid(kid.to_owned()))?;
        if now < key.not_before {
            return Err(KeyError::NotYetValid {
                kid: key.kid.clone(),
                not_before: key.not_before,
            });
        }
        if now >= key.not_after {
            return Err(KeyError::Expired {
                kid: key.kid.clone(),
                not_after: key.not_after,
            });
        }
        Ok(&key.public_key)
    }
}

/// Times and versions are written as I-JSON integers; anything larger is clamped.
fn clamp(v: u64) -> i64 {
    v.min(json::MAX_SAFE_INTEGER as u64) as i64
}

#[cfg(test)]
mod tests;
