//! Strict base64url (RFC 4648 §5, no padding), the encoding of every key and signature
//! inside outpost's JSON.
//!
//! Decoding is canonical: padding, characters outside the URL-safe alphabet and non-zero
//! trailing bits are refused, so each byte string has exactly one accepted text form.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a base64url text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Base64Error {
    /// Not canonical unpadded base64url.
    #[error("not canonical unpadded base64url")]
    NotCanonical,
    /// Decoded to the wrong number of bytes.
    #[error("decodes to {actual} bytes, expected {expected}")]
    WrongLength {
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        actual: usize,
    },
}

/// Encodes bytes as unpadded base64url.
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes unpadded canonical base64url.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| Base64Error::NotCanonical)
}

/// Decodes unpadded canonical base64url into exactly `N` bytes.
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], Base64Error> {
    // The encoded length of N bytes is fixed; check it first so a huge input is never decoded.
    let expected_len = (N * 4).div_ceil(3);
    if text.len() != expected_len {
        let actual = text.len() * 3 / 4;
        return Err(Base64Error::WrongLength {
            expected: N,
            actual,
        });
    }
    let mut out = [0u8; N];
    let n = URL_SAFE_NO_PAD
        .decode_slice(text, &mut out)
        .map_err(|_| Base64Error::NotCanonical)?;
    if n != N {
        return Err(Base64Error::WrongLength {
            expected: N,
            actual: n,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_canonical() {
        let bytes = [0xffu8, 0x00, 0x10];
        assert_eq!(decode(&encode(&bytes)).unwrap(), bytes);
        // Padding is refused.
        assert_eq!(decode("_wAQ="), Err(Base64Error::NotCanonical));
        // Standard alphabet is refused.
        assert_eq!(decode("/wAQ"), Err(Base64Error::NotCanonical));
        // Non-zero trailing bits are refused ("AB" and "AA" both decode to 0x00 leniently).
        assert_eq!(decode("AA").unwrap(), vec![0]);
        assert_eq!(decode("AB"), Err(Base64Error::NotCanonical));
    }

    #[test]
    fn fixed_length() {
        let key = [7u8; 32];
        assert_eq!(decode_array::<32>(&encode(&key)).unwrap(), key);
        assert!(matches!(
            decode_array::<32>(&encode(&[7u8; 31])),
            Err(Base64Error::WrongLength { expected: 32, .. })
        ));
        assert!(matches!(
            decode_array::<64>(&encode(&[7u8; 32])),
            Err(Base64Error::WrongLength { expected: 64, .. })
        ));
    }
}
