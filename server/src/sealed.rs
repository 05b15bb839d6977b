//! Secrets the nodes of a cluster share through their database, sealed under the server's
//! root key (docs/CLUSTER.md §4): the frame keys, so that every node signs with the same set
//! and one rotation is everyone's, and the admin and join tokens, so that a new node needs
//! only `keys.json` copied into its state folder.
//!
//! Each is one row of `sealed` (a name, a version that only grows, the bytes): AES-256-GCM
//! under a key derived from the root key's seed, with the name, the version and the root's id
//! as associated data — a copied database alone opens nothing, a row moved to another name or
//! version does not open, and a node whose `keys.json` holds another root learns so at start.
//! It never writes a secret in the clear anywhere, and never decides when a key rotates.

use aes_gcm::aead::{Aead as _, KeyInit as _, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use sha2::{Digest as _, Sha256};

/// The row of the frame keys.
pub(crate) const FRAME_KEYS: &str = "frame_keys";
/// The row of the admin and join tokens.
pub(crate) const TOKENS: &str = "tokens";

const KEY_CONTEXT: &[u8] = b"outpost.sealed.v1\0";
const NONCE_LEN: usize = 12;

/// A sealed row that does not open under this node's root key.
#[derive(Debug, thiserror::Error)]
#[error("the database's {name} (version {version}) do not open under root key {root_id}")]
pub(crate) struct WrongRoot {
    /// The row's name.
    pub(crate) name: String,
    /// Its version.
    pub(crate) version: u64,
    /// The root key tried.
    pub(crate) root_id: String,
}

fn cipher(root_seed: &[u8; 32]) -> Aes256Gcm {
    let key: [u8; 32] = Sha256::new()
        .chain_update(KEY_CONTEXT)
        .chain_update(root_seed)
        .finalize()
        .into();
    Aes256Gcm::new(&key.into())
}

fn aad(name: &str, version: u64, root_id: &str) -> Vec<u8> {
    format!("{name}\0{version}\0{root_id}").into_bytes()
}

/// Seals `plain` as row `name` at `version`, under the root key `root_id` with seed
/// `root_seed`: a fresh nonce, then the ciphertext.
pub(crate) fn seal(
    root_id: &str,
    root_seed: &[u8; 32],
    name: &str,
    version: u64,
    plain: &[u8],
) -> Result<Vec<u8>, crate::secrets::RandomError> {
    let nonce = crate::secrets::random::<NONCE_LEN>()?;
    let aad = aad(name, version, root_id);
    let sealed = cipher(root_seed)
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: plain,
                aad: &aad,
            },
        )
        .expect("AES-GCM seals any message under 64 GiB");
    Ok([nonce.as_slice(), &sealed].concat())
}

/// Opens row `name` at `version` sealed by [`seal`] under the same root key.
pub(crate) fn open(
    root_id: &str,
    root_seed: &[u8; 32],
    name: &str,
    version: u64,
    bytes: &[u8],
) -> Result<Vec<u8>, WrongRoot> {
    let wrong = || WrongRoot {
        name: name.to_owned(),
        version,
        root_id: root_id.to_owned(),
    };
    if bytes.len() < NONCE_LEN {
        return Err(wrong());
    }
    let (nonce, sealed) = bytes.split_at(NONCE_LEN);
    let aad = aad(name, version, root_id);
    cipher(root_seed)
        .decrypt(
            Nonce::from_slice(nonce),
            Payload {
                msg: sealed,
                aad: &aad,
            },
        )
        .map_err(|_| wrong())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_row_opens_only_under_its_root_name_and_version() {
        let seed = [7u8; 32];
        let sealed = seal("root-a", &seed, FRAME_KEYS, 3, b"frames").unwrap();
        assert!(
            !sealed.windows(6).any(|w| w == b"frames"),
            "not in the clear"
        );
        assert_eq!(
            open("root-a", &seed, FRAME_KEYS, 3, &sealed).unwrap(),
            b"frames"
        );
        assert!(
            open("root-a", &[8u8; 32], FRAME_KEYS, 3, &sealed).is_err(),
            "other seed"
        );
        assert!(
            open("root-b", &seed, FRAME_KEYS, 3, &sealed).is_err(),
            "other root id"
        );
        assert!(
            open("root-a", &seed, TOKENS, 3, &sealed).is_err(),
            "other row"
        );
        assert!(
            open("root-a", &seed, FRAME_KEYS, 4, &sealed).is_err(),
            "other version"
        );
        for at in 0..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[at] ^= 1;
            assert!(
                open("root-a", &seed, FRAME_KEYS, 3, &flipped).is_err(),
                "byte {at}"
            );
        }
        assert!(
            open("root-a", &seed, FRAME_KEYS, 3, &sealed[..5]).is_err(),
            "cut"
        );
        let again = seal("root-a", &seed, FRAME_KEYS, 3, b"frames").unwrap();
        assert_ne!(sealed, again, "a fresh nonce each time");
    }
}
