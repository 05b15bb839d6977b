//! The state folder (`--state DIR`, mode 0700) and the secrets it holds beside the database:
//! `keys.json` (the root key and the frame keys, 0600), `admin.token` (0600) and `join` (0600).
//!
//! On first start it creates them; on every later start it reads them back, adds a frame key
//! when the newest one nears the end of its window (the old one stays published, so the two
//! overlap), and rewrites `join` with the URL actually served. The frame keys and the tokens
//! are also kept sealed in the database, so that every node of a cluster has the same
//! (`bootstrap` and `crate::sealed`); the root key is only ever in `keys.json`. It never
//! prints a secret and never loosens a file's mode.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use outpost_core::b64;
use outpost_core::keyset::{FrameKey, KeySet, RootKey};
use outpost_core::sign::Ed25519Signer;
use outpost_core::time::UnixTime;
use serde::{Deserialize, Serialize};

use crate::secrets::random;

/// How long a frame key is valid.
const FRAME_KEY_DAYS: u64 = 90;
/// A new frame key is added when the newest has less than this left.
const ROTATE_DAYS_LEFT: u64 = 30;
/// A new key starts this much in the past, for clocks that lag.
const BACKDATE_SECS: u64 = 3600;
const DAY: u64 = 24 * 3600;

/// What went wrong with the state folder.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file or folder could not be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or folder of the state folder that failed.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The OS random source failed while making a key.
    #[error(transparent)]
    Random(#[from] crate::secrets::RandomError),
    /// A file in the state folder does not hold what this server writes.
    #[error("{}: {reason}", .path.display())]
    Corrupt {
        /// The state file that does not read as this server wrote it.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (and its parents) if needed and sets it to 0700.
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), StateError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io(dir))
}

/// Writes `bytes` to `path` with mode 0600, atomically (a temporary file renamed over it).
pub(crate) fn write_secret(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// Reads a file, `None` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, StateError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// This node's id (`nd_…`), kept in the state folder's `node-id` file so that a restart is
/// the same node: it still owns the machines it owned (docs/CLUSTER.md §2). Made on the first
/// start; each node of a cluster needs its own state folder, or at least its own `node-id`.
pub(crate) fn node_id(dir: &Path) -> Result<String, StateError> {
    let path = dir.join("node-id");
    if let Some(text) = read_optional(&path)? {
        let id = text.trim();
        let valid = id.len() > 3
            && id.starts_with("nd_")
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(StateError::Corrupt {
                path,
                reason: "it must hold one id like nd_… (delete it and a new one is made)"
                    .to_owned(),
            });
        }
        return Ok(id.to_owned());
    }
    let id = crate::secrets::new_id("nd_").map_err(|e| StateError::Corrupt {
        path: path.clone(),
        reason: format!("no randomness for a new node id: {e}"),
    })?;
    write_secret(&path, format!("{id}\n").as_bytes())?;
    Ok(id)
}

/// `keys.json`: the root key, and the frame keys' set (its version and keys).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct KeyFile {
    root: SeedEntry,
    version: u64,
    frame_keys: Vec<FrameEntry>,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SeedEntry {
    id: String,
    seed: String,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FrameEntry {
    kid: String,
    seed: String,
    not_before: u64,
    not_after: u64,
}

/// The server's keys: the root that signs the key set and the frame keys it publishes.
pub(crate) struct Keys {
    /// The root's public half, for the join string.
    pub(crate) root: RootKey,
    /// The frame key sessions sign with (the newest one already valid).
    pub(crate) signer: Ed25519Signer,
    /// The key-set document served at `server-keys`.
    pub(crate) key_set: Vec<u8>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("root", &self.root.id)
            .finish_non_exhaustive()
    }
}

fn seed_of(path: &Path, text: &str) -> Result<[u8; 32], StateError> {
    b64::decode_array::<32>(text).map_err(|e| StateError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("a seed is not 32 bytes of base64url: {e}"),
    })
}

fn new_frame(now: UnixTime) -> Result<FrameEntry, StateError> {
    let seed = random::<32>()?;
    let public = Ed25519Signer::from_seed("", seed).verifying_key();
    Ok(FrameEntry {
        kid: format!("frame-{}", &b64::encode(public.as_bytes())[..12]),
        seed: b64::encode(&seed),
        not_before: now.0.saturating_sub(BACKDATE_SECS),
        not_after: now.0 + FRAME_KEY_DAYS * DAY,
    })
}

impl KeyFile {
    /// The root key's id (`root-…`).
    pub(crate) fn root_id(&self) -> &str {
        &self.root.id
    }

    /// The root key's seed, which seals what the nodes of a cluster share (`crate::sealed`).
    pub(crate) fn root_seed(&self, dir: &Path) -> Result<[u8; 32], StateError> {
        seed_of(&dir.join("keys.json"), &self.root.seed)
    }

    /// The key set's version.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The frame keys as JSON: what is sealed into the database.
    pub(crate) fn frames_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.frame_keys).expect("frame keys serialize")
    }

    /// Takes the frame keys of set `version` from `json` (as [`KeyFile::frames_json`] wrote
    /// them, on another node).
    pub(crate) fn set_frames(
        &mut self,
        version: u64,
        json: &[u8],
        dir: &Path,
    ) -> Result<(), StateError> {
        self.frame_keys = serde_json::from_slice(json).map_err(|e| StateError::Corrupt {
            path: dir.join("keys.json"),
            reason: format!("the database's frame keys do not read: {e}"),
        })?;
        self.version = version;
        Ok(())
    }
}

/// `DIR/keys.json` as written, if it is there.
pub(crate) fn read_key_file(dir: &Path) -> Result<Option<KeyFile>, StateError> {
    let path = dir.join("keys.json");
    let Some(text) = read_optional(&path)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| StateError::Corrupt {
            path,
            reason: e.to_string(),
        })
}

/// A new root key and a first frame key (set version 1).
pub(crate) fn new_key_file(now: UnixTime) -> Result<KeyFile, StateError> {
    let seed = random::<32>()?;
    let public = Ed25519Signer::from_seed("", seed).verifying_key();
    Ok(KeyFile {
        root: SeedEntry {
            id: format!("root-{}", &b64::encode(public.as_bytes())[..12]),
            seed: b64::encode(&seed),
        },
        version: 1,
        frame_keys: vec![new_frame(now)?],
    })
}

/// Drops the frame keys past their end and adds one (the set's next version) when the newest
/// nears its end; whether it did either.
pub(crate) fn rotate_if_due(file: &mut KeyFile, now: UnixTime) -> Result<bool, StateError> {
    let before = file.frame_keys.len();
    file.frame_keys.retain(|k| k.not_after > now.0);
    let mut changed = file.frame_keys.len() != before;
    let newest_end = file.frame_keys.iter().map(|k| k.not_after).max();
    if newest_end.is_none_or(|end| end < now.0 + ROTATE_DAYS_LEFT * DAY) {
        file.frame_keys.push(new_frame(now)?);
        file.version += 1;
        changed = true;
    }
    Ok(changed)
}

/// Writes `DIR/keys.json` (0600).
pub(crate) fn write_key_file(dir: &Path, file: &KeyFile) -> Result<(), StateError> {
    let path = dir.join("keys.json");
    let text = serde_json::to_vec_pretty(file).map_err(|e| StateError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    write_secret(&path, &text)
}

/// The keys `file` holds, signing as of `now`.
pub(crate) fn keys_of(dir: &Path, file: &KeyFile, now: UnixTime) -> Result<Keys, StateError> {
    keys_from(&dir.join("keys.json"), file, now)
}

fn keys_from(path: &Path, file: &KeyFile, now: UnixTime) -> Result<Keys, StateError> {
    let corrupt = |reason: String| StateError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let root_signer =
        Ed25519Signer::from_seed(file.root.id.clone(), seed_of(path, &file.root.seed)?);
    let mut frame_keys = Vec::new();
    let mut signing: Option<((bool, std::cmp::Reverse<u64>), Ed25519Signer)> = None;
    for entry in &file.frame_keys {
        let signer = Ed25519Signer::from_seed(entry.kid.clone(), seed_of(path, &entry.seed)?);
        frame_keys.push(FrameKey {
            kid: entry.kid.clone(),
            public_key: signer.verifying_key(),
            not_before: UnixTime(entry.not_before),
            not_after: UnixTime(entry.not_after),
        });
        // Sign with the oldest key that still has a day left: a rotated-in key is announced
        // for weeks before it signs, so every daemon has fetched the set that names it.
        let usable = entry.not_before <= now.0 && now.0 < entry.not_after;
        let lasting = entry.not_after > now.0 + DAY;
        let rank = (lasting, std::cmp::Reverse(entry.not_before));
        if usable && signing.as_ref().is_none_or(|(best, _)| rank > *best) {
            signing = Some((rank, signer));
        }
    }
    let (_, signer) = signing.ok_or_else(|| corrupt("no frame key is valid now".into()))?;
    let key_set = KeySet::sign_document(file.version, &frame_keys, &root_signer)
        .map_err(|e| corrupt(e.to_string()))?;
    Ok(Keys {
        root: RootKey {
            id: file.root.id.clone(),
            public_key: root_signer.verifying_key(),
        },
        signer,
        key_set,
    })
}

/// The root key's signer from `DIR/keys.json` (made on first start, so a server that has
/// never started has none yet: start it once).
pub(crate) fn root_signer(dir: &Path) -> Result<Ed25519Signer, StateError> {
    let path = dir.join("keys.json");
    let text = read_optional(&path)?.ok_or_else(|| StateError::Corrupt {
        path: path.clone(),
        reason: "there is no keys.json yet: start `outpost serve` on this state folder once".into(),
    })?;
    let file: KeyFile = serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(Ed25519Signer::from_seed(
        file.root.id.clone(),
        seed_of(&path, &file.root.seed)?,
    ))
}
