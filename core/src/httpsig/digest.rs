//! `Content-Digest` (RFC 9530): a dictionary of digests of the message content.
//!
//! We write `sha-256` and/or `sha-512` and accept a field if every digest it carries with an
//! algorithm we know matches the content and at least one such digest is present. Digests of
//! unknown algorithms are ignored, as RFC 9530 allows.

use sfv::{BareItem, DictSerializer, Dictionary, KeyRef, ListEntry, Parser};
use sha2::{Digest as _, Sha256, Sha512};

use super::HttpSigError;

/// A digest algorithm of the RFC 9530 registry that outpost supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestAlgorithm {
    /// `sha-256`
    Sha256,
    /// `sha-512`
    Sha512,
}

impl DigestAlgorithm {
    /// The algorithm's key in the field.
    pub fn key(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha-256",
            DigestAlgorithm::Sha512 => "sha-512",
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        match key {
            "sha-256" => Some(DigestAlgorithm::Sha256),
            "sha-512" => Some(DigestAlgorithm::Sha512),
            _ => None,
        }
    }

    fn digest(self, content: &[u8]) -> Vec<u8> {
        match self {
            DigestAlgorithm::Sha256 => Sha256::digest(content).to_vec(),
            DigestAlgorithm::Sha512 => Sha512::digest(content).to_vec(),
        }
    }
}

/// The `Content-Digest` field value for `content`, one member per algorithm, in order.
pub fn content_digest(content: &[u8], algorithms: &[DigestAlgorithm]) -> String {
    let mut ser = DictSerializer::new();
    for alg in algorithms {
        // The keys are constant and valid; an invalid one could only be a programming error.
        if let Ok(key) = KeyRef::from_str(alg.key()) {
            ser.bare_item(key, alg.digest(content).as_slice());
        }
    }
    ser.finish().unwrap_or_default()
}

/// Checks a `Content-Digest` field value against `content`.
pub fn check_content_digest(field: &str, content: &[u8]) -> Result<(), HttpSigError> {
    let dict: Dictionary =
        Parser::new(field)
            .parse()
            .map_err(|e| HttpSigError::MalformedField {
                field: "content-digest",
                reason: e.to_string(),
            })?;
    let mut checked = 0;
    for (key, entry) in &dict {
        let Some(alg) = DigestAlgorithm::from_key(key.as_str()) else {
            continue;
        };
        let ListEntry::Item(item) = entry else {
            return Err(HttpSigError::MalformedField {
                field: "content-digest",
                reason: format!("{} is not a byte sequence", alg.key()),
            });
        };
        let BareItem::ByteSequence(claimed) = &item.bare_item else {
            return Err(HttpSigError::MalformedField {
                field: "content-digest",
                reason: format!("{} is not a byte sequence", alg.key()),
            });
        };
        if *claimed != alg.digest(content) {
            return Err(HttpSigError::ContentDigestMismatch(alg.key()));
        }
        checked += 1;
    }
    if checked == 0 {
        return Err(HttpSigError::NoSupportedDigest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 9530 §2 and Appendix B: the content `{"hello": "world"}` followed by a newline.
    const HELLO_NL: &[u8] = b"{\"hello\": \"world\"}\n";

    #[test]
    fn rfc9530_examples() {
        assert_eq!(
            content_digest(HELLO_NL, &[DigestAlgorithm::Sha512]),
            "sha-512=:YMAam51Jz/jOATT6/zvHrLVgOYTGFy1d6GJiOHTohq4yP+pgk4vf2aCsyRZOtw8MjkM7iw7yZ/WkppmM44T3qg==:"
        );
        assert_eq!(
            content_digest(HELLO_NL, &[DigestAlgorithm::Sha256]),
            "sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:"
        );
        // RFC 9421's test request carries the digest of the content without the newline.
        assert_eq!(
            content_digest(b"{\"hello\": \"world\"}", &[DigestAlgorithm::Sha512]),
            "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"
        );
        // The empty content.
        assert_eq!(
            content_digest(b"", &[DigestAlgorithm::Sha256]),
            "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"
        );
    }

    #[test]
    fn checking() {
        let both = content_digest(
            HELLO_NL,
            &[DigestAlgorithm::Sha256, DigestAlgorithm::Sha512],
        );
        assert!(both.starts_with("sha-256=:") && both.contains(", sha-512=:"));
        assert!(check_content_digest(&both, HELLO_NL).is_ok());
        assert_eq!(
            check_content_digest(&both, b"{\"hello\": \"world!\"}\n")
                .unwrap_err()
                .code(),
            "content_digest_mismatch"
        );
        assert!(check_content_digest(&format!("md5=:AAAA:, {both}"), HELLO_NL).is_ok());
        assert_eq!(
            check_content_digest("md5=:AAAA:", HELLO_NL)
                .unwrap_err()
                .code(),
            "no_supported_digest"
        );
        assert_eq!(
            check_content_digest("sha-256=\"x\"", HELLO_NL)
                .unwrap_err()
                .code(),
            "malformed_field"
        );
        assert_eq!(
            check_content_digest("sha-256=:!!:", HELLO_NL)
                .unwrap_err()
                .code(),
            "malformed_field"
        );
    }
}
