//! Daemon releases: the document a server publishes for a daemon binary, signed by the root
//! key the daemon pins, and the checks a daemon makes before it would ever run that binary.
//!
//! ```text
//! {"type":"outpost.daemon-release","version":"0.2.0","os":"linux","arch":"x86_64",
//!  "size":12345678,"sha512":"<128 lowercase hex>","root":"root-1","sig":"<b64url>"}
//! ```
//!
//! The signed bytes are `"outpost daemon release v1" 0x00` followed by the canonical JSON of
//! the document without `sig` (see [`crate::sign`]): the version and the digest are inside
//! them, so neither can be swapped for another release's. A binary is accepted only when its
//! length is `size` (a cut download is refused before its digest is worth computing) and its
//! SHA-512 is `sha512`; an update is taken only to a strictly newer version.
//!
//! This module owns the document, its signature and the version order. It never fetches,
//! stores or runs anything.

use ed25519_dalek::Signature;
use sha2::{Digest as _, Sha512};

use crate::b64;
use crate::json::{self, JsonError, Value};
use crate::keyset::PinnedRoots;
use crate::sign::{self, SIG_FIELD, Signer, SignerError};

/// The `type` of a release document.
pub const RELEASE_TYPE: &str = "outpost.daemon-release";

/// The domain-separation prefix of a signed release document.
pub const RELEASE_DOMAIN: &[u8] = b"outpost daemon release v1\0";

/// The largest daemon binary a release may describe (256 MiB).
pub const MAX_RELEASE_BYTES: u64 = 256 << 20;

/// The largest release document read (it is a few hundred bytes).
pub const MAX_DOCUMENT_BYTES: usize = 4096;

/// A verified release: what the root signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The daemon version (`MAJOR.MINOR.PATCH`).
    pub version: Version,
    /// The operating system the binary is for (`std::env::consts::OS`).
    pub os: String,
    /// The CPU architecture (`std::env::consts::ARCH`).
    pub arch: String,
    /// The binary's length in bytes.
    pub size: u64,
    /// Its SHA-512, lowercase hex.
    pub sha512: String,
    /// The id of the root that signed it.
    pub root: String,
}

/// A `MAJOR.MINOR.PATCH` version, ordered numerically (pre-release suffixes are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// Reads `1.2.3`.
    pub fn parse(text: &str) -> Result<Version, ReleaseError> {
        let bad = || ReleaseError::BadVersion(text.to_owned());
        let mut parts = text.split('.');
        let mut next = || -> Result<u64, ReleaseError> {
            let part = parts.next().ok_or_else(bad)?;
            if part.is_empty() || part.len() > 9 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            part.parse().map_err(|_| bad())
        };
        let version = Version(next()?, next()?, next()?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(version)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// Why a release document or binary was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    /// Not strict JSON.
    #[error("the release document is not valid JSON: {0}")]
    Json(#[from] JsonError),
    /// Larger than [`MAX_DOCUMENT_BYTES`].
    #[error("the release document is over {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
    /// A member is missing or has the wrong type or form.
    #[error("release field `{field}` is invalid: {reason}")]
    InvalidField {
        /// The JSON member at fault, by its name in the release document.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A version that is not `MAJOR.MINOR.PATCH`.
    #[error("{0:?} is not a MAJOR.MINOR.PATCH version")]
    BadVersion(String),
    /// Signed by a root this daemon does not pin.
    #[error("the release is signed by root {0:?}, which this daemon does not pin")]
    UnknownRoot(String),
    /// The root signature does not verify.
    #[error("the release's root signature does not verify")]
    BadSignature,
    /// The binary is shorter or longer than the release says.
    #[error("the binary is {got} bytes, the release says {want}: a cut or padded download")]
    WrongSize {
        /// Bytes received.
        got: u64,
        /// Bytes the release names.
        want: u64,
    },
    /// The binary's SHA-512 is not the release's.
    #[error("the binary's SHA-512 is not the release's")]
    DigestMismatch,
}

impl ReleaseError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ReleaseError::Json(e) => e.code(),
            ReleaseError::TooLarge | ReleaseError::InvalidField { .. } => "invalid_release",
            ReleaseError::BadVersion(_) => "invalid_version",
            ReleaseError::UnknownRoot(_) => "unknown_root",
            ReleaseError::BadSignature => "bad_release_signature",
            ReleaseError::WrongSize { .. } => "release_truncated",
            ReleaseError::DigestMismatch => "digest_mismatch",
        }
    }
}

/// Describes `binary` as release `version` for `os`/`arch` and signs it with `root`.
pub fn sign_release(
    version: Version,
    os: &str,
    arch: &str,
    binary: &[u8],
    root: &dyn Signer,
) -> Result<Vec<u8>, SignerError> {
    let doc = Value::Object(vec![
        ("type".into(), Value::String(RELEASE_TYPE.into())),
        ("version".into(), Value::String(version.to_string())),
        ("os".into(), Value::String(os.into())),
        ("arch".into(), Value::String(arch.into())),
        (
            "size".into(),
            Value::Int(i64::try_from(binary.len()).unwrap_or(i64::MAX)),
        ),
        ("sha512".into(), Value::String(sha512_hex(binary))),
        ("root".into(), Value::String(root.key_id().to_owned())),
    ]);
    sign::sign_canonical(RELEASE_DOMAIN, &doc, root)
}

/// Verifies a release document against the pinned roots and reads it.
pub fn verify_release(bytes: &[u8], roots: &PinnedRoots) -> Result<Release, ReleaseError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(ReleaseError::TooLarge);
    }
    let mut doc = json::parse_strict(bytes)?;
    if !matches!(doc, Value::Object(_)) {
        return Err(invalid("type", "the document is not an object"));
    }
    if doc.get("type").and_then(Value::as_str) != Some(RELEASE_TYPE) {
        return Err(invalid("type", format!("must be {RELEASE_TYPE:?}")));
    }
    let sig = match doc.remove(SIG_FIELD) {
        Some(Value::String(s)) => {
            b64::decode_array::<64>(&s).map_err(|e| invalid("sig", e.to_string()))?
        }
        _ => return Err(invalid("sig", "missing or not a string")),
    };
    let root = text(&doc, "root")?;
    let key = roots
        .get(&root)
        .ok_or_else(|| ReleaseError::UnknownRoot(root.clone()))?;
    let input = sign::signing_input(RELEASE_DOMAIN, &doc);
    key.verify_strict(&input, &Signature::from_bytes(&sig))
        .map_err(|_| ReleaseError::BadSignature)?;
    // Authentic from here on; still check the content is sane.
    let version = Version::parse(&text(&doc, "version")?)?;
    let size = match doc.get("size") {
        Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| invalid("size", "negative"))?,
        _ => return Err(invalid("size", "missing or not an integer")),
    };
    if size == 0 || size > MAX_RELEASE_BYTES {
        return Err(invalid(
            "size",
            format!("must be 1 to {MAX_RELEASE_BYTES} bytes"),
        ));
    }
    let sha512 = text(&doc, "sha512")?;
    if sha512.len() != 128
        || !sha512
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(invalid("sha512", "must be 128 lowercase hex digits"));
    }
    Ok(Release {
        version,
        os: text(&doc, "os")?,
        arch: text(&doc, "arch")?,
        size,
        sha512,
        root,
    })
}

impl Release {
    /// Checks a downloaded `binary` against the release: its length, then its SHA-512.
    pub fn check_binary(&self, binary: &[u8]) -> Result<(), ReleaseError> {
        let got = u64::try_from(binary.len()).unwrap_or(u64::MAX);
        if got != self.size {
            return Err(ReleaseError::WrongSize {
                got,
                want: self.size,
            });
        }
        if sha512_hex(binary) != self.sha512 {
            return Err(ReleaseError::DigestMismatch);
        }
        Ok(())
    }

    /// Whether this release is for the machine `os`/`arch` and strictly newer than `running`.
    pub fn is_update_for(&self, running: Version, os: &str, arch: &str) -> bool {
        self.os == os && self.arch == arch && self.version > running
    }
}

/// SHA-512 of `bytes`, lowercase hex.
pub fn sha512_hex(bytes: &[u8]) -> String {
    hex::encode(Sha512::digest(bytes))
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ReleaseError {
    ReleaseError::InvalidField {
        field,
        reason: reason.into(),
    }
}

fn text(doc: &Value, field: &'static str) -> Result<String, ReleaseError> {
    doc.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map(str::to_owned)
        .ok_or_else(|| invalid(field, "missing, empty, over 128 bytes or not a string"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyset::RootKey;
    use crate::sign::Ed25519Signer;

    fn root() -> Ed25519Signer {
        Ed25519Signer::from_seed("root-a", [1u8; 32])
    }

    fn roots() -> PinnedRoots {
        PinnedRoots::new(vec![RootKey {
            id: "root-a".into(),
            public_key: root().verifying_key(),
        }])
    }

    fn signed(binary: &[u8]) -> Vec<u8> {
        sign_release(Version(0, 2, 0), "linux", "x86_64", binary, &root()).unwrap()
    }

    #[test]
    fn a_signed_release_verifies_and_checks_its_binary() {
        let binary = b"\x7fELF a daemon".to_vec();
        let release = verify_release(&signed(&binary), &roots()).unwrap();
        assert_eq!(release.version, Version(0, 2, 0));
        assert_eq!(release.size, binary.len() as u64);
        release.check_binary(&binary).unwrap();
        assert!(release.is_update_for(Version(0, 1, 9), "linux", "x86_64"));
        assert!(
            !release.is_update_for(Version(0, 2, 0), "linux", "x86_64"),
            "never the same"
        );
        assert!(
            !release.is_update_for(Version(1, 0, 0), "linux", "x86_64"),
            "never older"
        );
        assert!(!release.is_update_for(Version(0, 1, 0), "macos", "x86_64"));
        assert_eq!(
            release.check_binary(&binary[..4]).unwrap_err().code(),
            "release_truncated"
        );
        let mut altered = binary.clone();
        altered[5] ^= 1;
        assert_eq!(
            release.check_binary(&altered).unwrap_err().code(),
            "digest_mismatch"
        );
    }

    #[test]
    fn another_key_an_altered_field_or_a_bad_document_is_refused() {
        let binary = b"daemon".to_vec();
        let foreign = Ed25519Signer::from_seed("root-a", [9u8; 32]);
        let forged = sign_release(Version(9, 0, 0), "linux", "x86_64", &binary, &foreign).unwrap();
        assert_eq!(
            verify_release(&forged, &roots()).unwrap_err().code(),
            "bad_release_signature"
        );
        let other_root = Ed25519Signer::from_seed("root-other", [9u8; 32]);
        let unknown =
            sign_release(Version(9, 0, 0), "linux", "x86_64", &binary, &other_root).unwrap();
        assert_eq!(
            verify_release(&unknown, &roots()).unwrap_err().code(),
            "unknown_root"
        );
        let text = String::from_utf8(signed(&binary)).unwrap();
        let bumped = text.replace("\"0.2.0\"", "\"9.2.0\"");
        assert_eq!(
            verify_release(bumped.as_bytes(), &roots())
                .unwrap_err()
                .code(),
            "bad_release_signature"
        );
        for bad in [
            &b"{"[..],
            b"[]",
            b"{\"type\":\"outpost.key-set\"}",
            &[b' '; 5000][..],
        ] {
            assert!(verify_release(bad, &roots()).is_err());
        }
    }

    #[test]
    fn versions_parse_and_order_numerically() {
        assert!(Version::parse("0.10.0").unwrap() > Version::parse("0.9.12").unwrap());
        for bad in [
            "1.2",
            "1.2.3.4",
            "1.2.x",
            "",
            "1..2",
            "01.2.3-rc1",
            "+1.2.3",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
    }
}
