//! The committed **test** root and test frame keys. TEST ONLY.
//!
//! Their private keys are published here on purpose, so local servers, tests and other
//! implementations can sign frames and key sets without secrets. A daemon trusts the test
//! root only through [`super::PinnedRoots::with_test_root_if_local`]: the switch must be on
//! and the server must be `localhost` or a loopback address. Never enable it on a real
//! machine talking to a real server.
//!
//! A production build holds only the test root's id and public key (what
//! `with_test_root_if_local` needs). The private seeds, the signers and the test key set are
//! behind the `test-support` feature.

use ed25519_dalek::VerifyingKey;

use super::RootKey;

/// The test root's id.
pub const ROOT_ID: &str = "root-test-1";
/// The test root's Ed25519 public key, hex.
pub const ROOT_PUBLIC_HEX: &str =
    "22eb4ec32a14d981c2a5e41f34c20b5908cf34496cfc40d2c90b41df752bfe62";

/// The test root's public key.
pub fn root_key() -> RootKey {
    let public_key = seed_from_hex(ROOT_PUBLIC_HEX)
        .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
        .unwrap_or_default();
    RootKey {
        id: ROOT_ID.to_owned(),
        public_key,
    }
}

/// Parses 64 hex digits into 32 bytes (a seed or a public key). The constants of this
/// module always parse.
pub fn seed_from_hex(digits: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

#[cfg(any(test, feature = "test-support"))]
pub use secrets::*;

/// The private half: seeds, signers and the test key set.
#[cfg(any(test, feature = "test-support"))]
mod secrets {
    use super::{ROOT_ID, seed_from_hex};
    use crate::keyset::{FrameKey, KeySet};
    use crate::sign::Ed25519Signer;
    use crate::time::UnixTime;

    /// The test root's private key seed (public on purpose).
    pub const ROOT_SECRET_HEX: &str =
        "5c4f79eca6799bc07214c37219e6a55adb523a3ff7bf6a1abcb3e84c63adcf24";
    /// The first test frame key's id.
    pub const FRAME_KID: &str = "frame-test-1";
    /// The first test frame key's private key seed (public on purpose).
    pub const FRAME_SECRET_HEX: &str =
        "0cdb98836a74f977e1786f0f56029c22fd6ed2677e4a16b6054b5c48eb7be8d3";
    /// The second test frame key's id (for rotation tests).
    pub const FRAME2_KID: &str = "frame-test-2";
    /// The second test frame key's private key seed (public on purpose).
    pub const FRAME2_SECRET_HEX: &str =
        "a7d7722c6baaf9d69166792802301874739da7e74300bf48b95437328e9774c6";

    fn seed(hex: &str) -> [u8; 32] {
        seed_from_hex(hex).unwrap_or([0; 32])
    }

    /// The test root's signer.
    pub fn root_signer() -> Ed25519Signer {
        Ed25519Signer::from_seed(ROOT_ID, seed(ROOT_SECRET_HEX))
    }

    /// The first test frame key's signer.
    pub fn frame_signer() -> Ed25519Signer {
        Ed25519Signer::from_seed(FRAME_KID, seed(FRAME_SECRET_HEX))
    }

    /// The second test frame key's signer.
    pub fn frame2_signer() -> Ed25519Signer {
        Ed25519Signer::from_seed(FRAME2_KID, seed(FRAME2_SECRET_HEX))
    }

    /// The test key set: `frame-test-1` valid over `[not_before, not_after)`, signed by the
    /// test root.
    pub fn key_set_document(version: u64, not_before: UnixTime, not_after: UnixTime) -> Vec<u8> {
        let key = FrameKey {
            kid: FRAME_KID.to_owned(),
            public_key: frame_signer().verifying_key(),
            not_before,
            not_after,
        };
        // The in-memory signer cannot fail.
        KeySet::sign_document(version, &[key], &root_signer()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_root_key_is_the_seed_s() {
        assert_eq!(root_key().public_key, root_signer().verifying_key());
        assert_eq!(root_key().id, ROOT_ID);
    }
}
