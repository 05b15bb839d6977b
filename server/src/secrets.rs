//! Fresh randomness and the server's bearer secrets: tokens (`opt_…`, PROTOCOL §11.2), the
//! ids it hands out, and the SHA-256 it stores instead of a token.
//!
//! It owns the only calls to the OS random source. It never stores or logs a secret.

use outpost_core::b64;
use sha2::{Digest as _, Sha256};

/// The prefix of every bearer token.
pub const TOKEN_PREFIX: &str = "opt_";

/// The OS random source failed; no secret can be drawn until it works again.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the OS random source failed: {0}")]
pub struct RandomError(String);

/// `N` bytes from the OS random source.
pub(crate) fn random<const N: usize>() -> Result<[u8; N], RandomError> {
    random_from(getrandom::fill)
}

/// `N` bytes from `fill`.
fn random_from<const N: usize, E: std::fmt::Display>(
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<[u8; N], RandomError> {
    let mut bytes = [0u8; N];
    fill(&mut bytes).map_err(|e| RandomError(e.to_string()))?;
    Ok(bytes)
}

/// A new bearer token: `opt_` and 43 base64url characters (32 random bytes).
pub(crate) fn new_token() -> Result<String, RandomError> {
    Ok(format!("{TOKEN_PREFIX}{}", b64::encode(&random::<32>()?)))
}

/// A new id with `prefix` and 16 random bytes (22 base64url characters).
pub(crate) fn new_id(prefix: &str) -> Result<String, RandomError> {
    Ok(format!("{prefix}{}", b64::encode(&random::<16>()?)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_random_source_is_an_error_answered_503_with_a_code() {
        let failed = random_from::<32, _>(|_| Err("no entropy")).expect_err("the source failed");
        assert!(failed.to_string().contains("no entropy"), "{failed}");
        let answer = crate::http::ApiError::from(failed);
        assert_eq!(answer.status.as_u16(), 503);
        assert_eq!(answer.code, "random_unavailable");
        assert!(
            !answer.message.contains("no entropy"),
            "the cause stays in the log"
        );
    }

    #[test]
    fn tokens_and_ids_have_their_shape() {
        let token = new_token().expect("a token");
        assert!(looks_like_token(&token), "{token}");
        let id = new_id("ex_").expect("an id");
        assert_eq!(id.len(), 3 + 22, "{id}");
        assert_ne!(new_id("ex_").expect("an id"), id);
    }
}
