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

/// base64url's 64 characters in ASCII order: 16 bytes written with them sort as the bytes do.
const SORTED_ALPHABET: &[u8; 64] =
    b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";

/// A new id with `prefix` and 22 base64url characters that sort by creation: the wall
/// clock's milliseconds (48 bits), then 80 random bits. Executions take these so that the
/// rows and records of executions made together share index pages, and a commit writes
/// fewer of them than when each lands in a random page. The id stays opaque to clients
/// (PROTOCOL §1), and its time is the one `createdAt` already shows.
pub(crate) fn new_ordered_id(prefix: &str) -> Result<String, RandomError> {
    Ok(ordered_id(
        prefix,
        crate::clock::wall_now_ms(),
        random::<10>()?,
    ))
}

/// `prefix`, then `ms` (its low 48 bits) and `random` as 128 bits, six at a time.
fn ordered_id(prefix: &str, ms: u64, random: [u8; 10]) -> String {
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&random);
    let n = u128::from_be_bytes(bytes);
    let mut id = String::with_capacity(prefix.len() + 22);
    id.push_str(prefix);
    // 21 characters of six bits, then the last two bits as base64 places them.
    for shift in (0..21).map(|i| 122 - 6 * i) {
        id.push(char::from(SORTED_ALPHABET[((n >> shift) & 63) as usize]));
    }
    id.push(char::from(SORTED_ALPHABET[((n & 3) << 4) as usize]));
    id
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
        let ordered = new_ordered_id("ex_").expect("an id");
        assert_eq!(ordered.len(), 3 + 22, "{ordered}");
        assert!(
            ordered[3..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "base64url's characters only: {ordered}"
        );
    }

    #[test]
    fn ordered_ids_sort_by_their_time_then_their_random_bits() {
        let early = ordered_id("ex_", 1_000, [0xff; 10]);
        let later = ordered_id("ex_", 1_001, [0; 10]);
        assert!(early < later, "{early} < {later}");
        // Milliseconds across each character's boundary, and every value of the last random
        // byte (the one the last character holds part of), keep the order: the alphabet is
        // ASCII-sorted.
        let mut previous = ordered_id("ex_", 0, [0; 10]);
        for ms in [1, 63, 64, 4095, 1 << 20, 1 << 40, (1 << 48) - 1] {
            let id = ordered_id("ex_", ms, [0; 10]);
            assert!(previous < id, "{previous} < {id}");
            previous = id;
        }
        let ids: Vec<String> = (0..=255u8)
            .map(|b| ordered_id("", 7, [0, 0, 0, 0, 0, 0, 0, 0, 0, b]))
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(ordered_id("", 0, [0; 10]), "-".repeat(22));
        assert_eq!(
            ordered_id("", (1 << 48) - 1, [0xff; 10]),
            format!("{}k", "z".repeat(21))
        );
    }
}
