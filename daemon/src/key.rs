//! The machine key at rest: `config/key.enc`, the Ed25519 seed sealed with AES-256-GCM under
//! a wrapping key that never sits beside it in a form anyone else can read. The first that
//! works when the key is made is used, and `key.enc` says which:
//!
//! - **keyring**: 32 random bytes in the OS keyring (see `os_keyring`), where one answers and
//!   `OUTPOST_KEYRING` is not `off`;
//! - **passphrase**: derived with Argon2id from `OUTPOST_KEY_PASSPHRASE` (and the file's
//!   salt); nothing of it is stored;
//! - **file**: 32 random bytes in `config/key.file`, mode 0600 — the wrapper for a service,
//!   which has no one to type a passphrase. A file key others can read is refused.
//!
//! A keyring that does not answer is reported with its reason and the next wrapper is used.
//! A key written in the clear by an earlier build (`machine.key`) is sealed on first start and the
//! clear file removed. This module owns these files' formats. A wrong passphrase, a cut or
//! altered `key.enc`, a missing or exposed file key: each is refused with its error and
//! nothing is overwritten.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead as _, KeyInit as _, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use argon2::{Algorithm, Argon2, Params, Version};
use outpost_core::b64;
use serde::{Deserialize, Serialize};

use super::DaemonError;
use super::home::write_private;
use super::os_keyring;

/// The sealed key's file name in the config folder.
pub const SEALED_FILE: &str = "key.enc";
/// The file key's name in the config folder.
pub const FILE_KEY: &str = "key.file";
/// The clear key an earlier build wrote (sealed and removed on start).
pub const LEGACY_FILE: &str = "machine.key";
/// The variable holding the passphrase.
pub const PASSPHRASE_VAR: &str = "OUTPOST_KEY_PASSPHRASE";

const TYPE: &str = "outpost.machine-key";
const AAD: &[u8] = b"outpost.machine-key.v1";
/// Argon2id cost: 19 MiB, 2 passes, 1 lane (OWASP's minimum for Argon2id).
const ARGON_MEMORY_KIB: u32 = 19 * 1024;
const ARGON_PASSES: u32 = 2;

/// What seals `key.enc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wrapper {
    /// A key kept in the OS keyring.
    Keyring,
    /// A key derived from `OUTPOST_KEY_PASSPHRASE`: someone must give it at every start.
    Passphrase,
    /// The 0600 file key `key.file`: starts need no one (what a service uses).
    File,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Sealed {
    #[serde(rename = "type")]
    kind: String,
    version: u32,
    wrapper: Wrapper,
    /// Argon2id salt (passphrase wrapper only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    salt: Option<String>,
    /// The keyring entry's user name (keyring wrapper only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keyring_user: Option<String>,
    nonce: String,
    ciphertext: String,
}

/// Reads (or, on first start, makes and seals) the machine key's seed in `config`.
/// `passphrase` is `OUTPOST_KEY_PASSPHRASE`'s value, if set.
pub fn machine_seed(config: &Path, passphrase: Option<&str>) -> Result<[u8; 32], DaemonError> {
    let sealed_path = config.join(SEALED_FILE);
    if sealed_path.exists() {
        return unseal(config, &sealed_path, passphrase);
    }
    let legacy = config.join(LEGACY_FILE);
    let seed = match std::fs::read_to_string(&legacy) {
        Ok(text) => b64::decode_array::<32>(text.trim()).map_err(|e| DaemonError::BadKey {
            path: legacy.clone(),
            reason: e.to_string(),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => random32()?,
        Err(e) => return Err(DaemonError::home(&legacy, e)),
    };
    seal(config, &sealed_path, &seed, passphrase)?;
    if legacy.exists() {
        std::fs::remove_file(&legacy).map_err(|e| DaemonError::home(&legacy, e))?;
    }
    Ok(seed)
}

/// What seals the machine key in `config`, or `None` before the first start.
pub fn wrapper(config: &Path) -> Result<Option<Wrapper>, DaemonError> {
    let path = config.join(SEALED_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DaemonError::home(&path, e)),
    };
    let sealed: Sealed = serde_json::from_slice(&bytes).map_err(|e| DaemonError::BadKey {
        path,
        reason: format!("it is not a sealed machine key: {e}"),
    })?;
    Ok(Some(sealed.wrapper))
}

/// Seals the machine key in `config` again under a file key (`key.file`, 0600, made if
/// missing) instead of its passphrase or keyring key, for a service that has no one to type
/// a passphrase and may start before a keyring is unlocked. The key stays the same; a wrong
/// passphrase is refused and nothing is changed. From then on, anyone who can read the
/// owner's files can use the key, as with any file key.
pub fn rewrap_with_file_key(config: &Path, passphrase: Option<&str>) -> Result<(), DaemonError> {
    let path = config.join(SEALED_FILE);
    let seed = unseal(config, &path, passphrase)?;
    seal_as(config, &path, &seed, None, false)
}

fn random32() -> Result<[u8; 32], DaemonError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| DaemonError::Random(e.to_string()))?;
    Ok(bytes)
}

fn derive(passphrase: &str, salt: &[u8]) -> Result<[u8; 32], DaemonError> {
    let params = Params::new(ARGON_MEMORY_KIB, ARGON_PASSES, 1, Some(32))
        .map_err(|e| DaemonError::Random(e.to_string()))?;
    let mut out = [0u8; 32];
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(passphrase.as_bytes(), salt, &mut out)
        .map_err(|e| DaemonError::Random(e.to_string()))?;
    Ok(out)
}

fn file_key(config: &Path, create: bool) -> Result<[u8; 32], DaemonError> {
    let path = config.join(FILE_KEY);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mode = std::fs::metadata(&path)
                .map_err(|e| DaemonError::home(&path, e))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(DaemonError::KeyExposed {
                    path,
                    mode: mode & 0o777,
                });
            }
            b64::decode_array::<32>(text.trim()).map_err(|e| DaemonError::BadKey {
                path,
                reason: e.to_string(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let key = random32()?;
            write_private(&path, format!("{}\n", b64::encode(&key)).as_bytes())?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(DaemonError::BadKey {
            path,
            reason: "the file key that seals key.enc is missing; restore it, or set OUTPOST_KEY_PASSPHRASE if the key was sealed with one".into(),
        }),
        Err(e) => Err(DaemonError::home(&path, e)),
    }
}

fn seal(
    config: &Path,
    path: &Path,
    seed: &[u8; 32],
    passphrase: Option<&str>,
) -> Result<(), DaemonError> {
    seal_as(config, path, seed, passphrase, true)
}

/// [`seal`], trying the OS keyring first only when `try_keyring`.
fn seal_as(
    config: &Path,
    path: &Path,
    seed: &[u8; 32],
    passphrase: Option<&str>,
    try_keyring: bool,
) -> Result<(), DaemonError> {
    let next = if passphrase.is_some() {
        "the passphrase (OUTPOST_KEY_PASSPHRASE)"
    } else {
        "a file key (config/key.file, 0600)"
    };
    let keyring = if !try_keyring {
        None
    } else if os_keyring::switched_off() {
        tracing::info!("OUTPOST_KEYRING is off; the machine key is sealed with {next}");
        None
    } else {
        let user = os_keyring::user_for(config);
        let key = random32()?;
        match os_keyring::store(&user, &key) {
            Ok(()) => Some((user, key)),
            Err(reason) => {
                tracing::info!(
                    "the OS keyring does not answer ({reason}); the machine key is sealed with {next}"
                );
                None
            }
        }
    };
    let (wrapper, salt, keyring_user, key) = match (keyring, passphrase) {
        (Some((user, key)), _) => {
            tracing::info!("the machine key is sealed with a key in the OS keyring");
            (Wrapper::Keyring, None, Some(user), key)
        }
        (None, Some(p)) => {
            let salt = random32()?;
            (Wrapper::Passphrase, Some(salt), None, derive(p, &salt)?)
        }
        (None, None) => (Wrapper::File, None, None, file_key(config, true)?),
    };
    let nonce = random32()?;
    let nonce = &nonce[..12];
    let ciphertext = Aes256Gcm::new(&key.into())
        .encrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: seed,
                aad: AAD,
            },
        )
        .map_err(|_| DaemonError::Random("sealing the machine key failed".into()))?;
    let sealed = Sealed {
        kind: TYPE.into(),
        version: 1,
        wrapper,
        salt: salt.map(|s| b64::encode(&s)),
        keyring_user,
        nonce: b64::encode(nonce),
        ciphertext: b64::encode(&ciphertext),
    };
    let mut text = serde_json::to_vec_pretty(&sealed).unwrap_or_default();
    text.push(b'\n');
    write_private(path, &text)
}

fn unseal(
    config: &Path,
    path: &PathBuf,
    passphrase: Option<&str>,
) -> Result<[u8; 32], DaemonError> {
    let corrupt = |reason: String| DaemonError::BadKey {
        path: path.clone(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| DaemonError::home(path, e))?;
    let sealed: Sealed = serde_json::from_slice(&bytes)
        .map_err(|e| corrupt(format!("it is not a sealed machine key: {e}")))?;
    if sealed.kind != TYPE || sealed.version != 1 {
        return Err(corrupt(format!(
            "type {:?} version {} is not a sealed machine key this build reads",
            sealed.kind, sealed.version
        )));
    }
    let key = match sealed.wrapper {
        Wrapper::Keyring => {
            let user = sealed
                .keyring_user
                .as_deref()
                .ok_or_else(|| corrupt("the keyring entry's name is missing".into()))?;
            os_keyring::load(user).map_err(|reason| DaemonError::KeyringUnavailable {
                path: path.clone(),
                reason,
            })?
        }
        Wrapper::Passphrase => {
            let passphrase =
                passphrase.ok_or_else(|| DaemonError::PassphraseRequired(path.clone()))?;
            let salt = sealed
                .salt
                .as_deref()
                .ok_or_else(|| corrupt("salt is missing".into()))
                .and_then(|s| b64::decode(s).map_err(|e| corrupt(format!("salt: {e}"))))?;
            derive(passphrase, &salt)?
        }
        Wrapper::File => file_key(config, false)?,
    };
    let nonce = b64::decode(&sealed.nonce).map_err(|e| corrupt(format!("nonce: {e}")))?;
    let ciphertext =
        b64::decode(&sealed.ciphertext).map_err(|e| corrupt(format!("ciphertext: {e}")))?;
    if nonce.len() != 12 {
        return Err(corrupt("the nonce is not 12 bytes".into()));
    }
    let seed = Aes256Gcm::new(&key.into())
        .decrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &ciphertext,
                aad: AAD,
            },
        )
        .map_err(|_| match sealed.wrapper {
            Wrapper::Passphrase => DaemonError::WrongPassphrase(path.clone()),
            Wrapper::Keyring => corrupt(
                "it does not open with the OS keyring's wrapping key: the key or the entry was altered or replaced".into(),
            ),
            Wrapper::File => corrupt(
                "it does not open with key.file: one of the two was altered or replaced".into(),
            ),
        })?;
    seed.try_into()
        .map_err(|_| corrupt("the sealed key is not 32 bytes".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("outpost-key-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn every_file_lacks(d: &Path, seed: &[u8; 32]) {
        let needles = [b64::encode(seed).into_bytes(), seed.to_vec()];
        for entry in std::fs::read_dir(d).unwrap().flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            for needle in &needles {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                    "{} holds the key in the clear",
                    entry.path().display()
                );
            }
        }
    }

    #[test]
    fn a_passphrase_seals_the_key_and_a_wrong_one_is_refused_without_a_write() {
        let d = dir("pass");
        let seed = machine_seed(&d, Some("correct horse")).unwrap();
        assert_eq!(machine_seed(&d, Some("correct horse")).unwrap(), seed);
        every_file_lacks(&d, &seed);
        let before = std::fs::read(d.join(SEALED_FILE)).unwrap();
        assert!(matches!(
            machine_seed(&d, Some("wrong")),
            Err(DaemonError::WrongPassphrase(_))
        ));
        assert!(matches!(
            machine_seed(&d, None),
            Err(DaemonError::PassphraseRequired(_))
        ));
        assert_eq!(
            std::fs::read(d.join(SEALED_FILE)).unwrap(),
            before,
            "nothing overwritten"
        );
        assert!(!d.join(FILE_KEY).exists());
    }

    #[test]
    fn a_file_key_seals_the_key_and_exposure_or_tampering_is_refused() {
        let d = dir("file");
        let seed = machine_seed(&d, None).unwrap();
        assert_eq!(machine_seed(&d, None).unwrap(), seed);
        every_file_lacks(&d, &seed);
        let mode = std::fs::metadata(d.join(FILE_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::set_permissions(d.join(FILE_KEY), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(machine_seed(&d, None).unwrap_err().code(), "key_exposed");
        std::fs::set_permissions(d.join(FILE_KEY), std::fs::Permissions::from_mode(0o600)).unwrap();
        // One flipped character of the ciphertext.
        let text = std::fs::read_to_string(d.join(SEALED_FILE)).unwrap();
        let at = text.find("\"ciphertext\": \"").unwrap() + 16;
        let mut bytes = text.into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        std::fs::write(d.join(SEALED_FILE), &bytes).unwrap();
        assert_eq!(machine_seed(&d, None).unwrap_err().code(), "key_unreadable");
        std::fs::write(d.join(SEALED_FILE), b"{not json").unwrap();
        assert_eq!(machine_seed(&d, None).unwrap_err().code(), "key_unreadable");
        assert_eq!(
            std::fs::read(d.join(SEALED_FILE)).unwrap(),
            b"{not json",
            "nothing overwritten"
        );
    }

    #[test]
    fn a_passphrase_sealed_key_moves_to_a_file_key_unchanged() {
        let d = dir("rewrap");
        assert_eq!(wrapper(&d).unwrap(), None);
        let seed = machine_seed(&d, Some("pass")).unwrap();
        assert_eq!(wrapper(&d).unwrap(), Some(Wrapper::Passphrase));
        assert!(matches!(
            rewrap_with_file_key(&d, Some("wrong")),
            Err(DaemonError::WrongPassphrase(_))
        ));
        assert!(!d.join(FILE_KEY).exists(), "nothing changed");
        rewrap_with_file_key(&d, Some("pass")).unwrap();
        assert_eq!(wrapper(&d).unwrap(), Some(Wrapper::File));
        assert_eq!(machine_seed(&d, None).unwrap(), seed);
        every_file_lacks(&d, &seed);
    }

    #[test]
    fn a_clear_key_from_an_earlier_build_is_sealed_and_removed() {
        let d = dir("legacy");
        let seed = [7u8; 32];
        std::fs::write(d.join(LEGACY_FILE), b64::encode(&seed)).unwrap();
        assert_eq!(machine_seed(&d, None).unwrap(), seed);
        assert!(!d.join(LEGACY_FILE).exists());
        every_file_lacks(&d, &seed);
        assert_eq!(machine_seed(&d, None).unwrap(), seed);
    }
}
