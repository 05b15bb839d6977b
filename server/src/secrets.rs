//! Fresh randomness and the server's bearer secrets: tokens (`opt_…`, PROTOCOL §11.2), the
//! ids it hands out, and the SHA-256 it stores instead of a token.
//!
//! It owns the only calls to the OS random source. It never stores or logs a secret.

use outpost_core::b64;
use sha2::{Digest as _, Sha256};

/// The prefix of every bearer token.
pub const TOKEN_PREFIX: &str = "opt_";

/// `N` bytes from the OS random source.
///
/// # Panics
///
/// Never in practice: `getrandom` fails only when the OS has no random source at all, and a
/// server without one must not issue secrets; it stops instead.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if let Err(e) = getrandom::fill(&mut bytes) {
        // A server that cannot draw randomness cannot issue a single safe secret.
        panic!("the OS random source failed: {e}");
    }
    bytes
}

/// A new bearer token: `opt_` and 43 base64url characters (32 random bytes).
pub(crate) fn new_token() -> String {
    format!("{TOKEN_PREFIX}{}", b64::encode(&random::<32>()))
}

/// A new id with `prefix` and 16 random bytes (22 base64url characters).
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", b64::encode(&random::<16>()))
}

/// SHA-256 of a secret, as the store keeps it.
pub(crate) fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether `text` has the shape of a token this server issues.
pub(crate) fn looks_like_token(text: &str) -> bool {
    text.strip_prefix(TOKEN_PREFIX)
        .is_some_and(|rest| rest.len() == 43 && b64::decode_array::<32>(rest).is_ok())
}
