//! Keys as the vector files write them: 64 hex digits of an Ed25519 seed or public key.
//!
//! The checker needs these with or without the generator, so they must never depend on the
//! test root's private keys (outpost-core's `test-support` feature).

use outpost_core::keyset::test_root::seed_from_hex;
use outpost_core::sign::Ed25519Signer;

/// A signer from a vector file's `*secret_key_hex` (an Ed25519 seed).
pub fn signer_from_hex(kid: &str, secret_hex: &str) -> Result<Ed25519Signer, String> {
    let seed =
        seed_from_hex(secret_hex).ok_or_else(|| format!("bad secret key hex {secret_hex:?}"))?;
    Ok(Ed25519Signer::from_seed(kid, seed))
}

/// A public key from a vector file's `*public_key_hex`.
pub fn verifying_key_from_hex(public_hex: &str) -> Result<ed25519_dalek::VerifyingKey, String> {
    let bytes: [u8; 32] = hex::decode(public_hex)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("bad public key hex {public_hex:?}"))?;
    ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|e| e.to_string())
}
