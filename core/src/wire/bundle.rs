//! Capability bundles: a capability too large to travel inline (over 512 KiB) is uploaded
//! once by its SHA-256 and named in `run.request` as `{"kind":"digest"}`; the daemon fetches
//! the bundle with a signed request and checks the digest before anything runs
//! (PROTOCOL §11.4).
//!
//! A bundle is one JSON document — the inline form with a type and a version:
//! `{"type":"outpost.bundle","version":1,"manifest":"…","files":[{"path","contentB64"}]}` —
//! so a peer in any language builds it with what it already has for inline capabilities.
//! This module owns that format. It never checks the manifest or the paths (the same checks
//! as for an inline capability follow), and never touches a file.

use serde::{Deserialize, Serialize};

use super::types::{CapabilitySource, InlineFile};

/// The largest bundle a server accepts and a daemon fetches.
pub const MAX_BUNDLE_BYTES: u64 = 64 << 20;

/// The `type` every bundle carries.
pub const BUNDLE_TYPE: &str = "outpost.bundle";

/// The bundle format's version.
pub const BUNDLE_VERSION: u32 = 1;

/// A bundle as its bytes read: the inline form with a type and a version (what
/// `PUT /v1/bundles/{sha256}` takes). Its members are read by `decode_bundle` only.
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "BundleDocument"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BundleDoc {
    /// `outpost.bundle`.
    #[serde(rename = "type")]
    #[cfg_attr(feature = "schema", schemars(extend("const" = BUNDLE_TYPE)))]
    kind: String,
    /// The format's version (`BUNDLE_VERSION`).
    #[cfg_attr(feature = "schema", schemars(extend("const" = BUNDLE_VERSION)))]
    version: u32,
    /// The text of `manifest.yaml`.
    manifest: String,
    /// The capability's other files.
    files: Vec<InlineFile>,
}

/// Why bytes are not a bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Larger than [`MAX_BUNDLE_BYTES`].
    #[error("the bundle holds {0} bytes; at most {MAX_BUNDLE_BYTES} are accepted")]
    TooLarge(u64),
    /// Not the bundle JSON document (the message names what is wrong).
    #[error("not a capability bundle: {0}")]
    Malformed(String),
    /// Another format version.
    #[error("bundle version {0} is not supported (this build reads version {BUNDLE_VERSION})")]
    Version(u32),
}

impl BundleError {
    /// The stable code: `bundle_too_large`, or `invalid_bundle` for any other fault.
    pub fn code(&self) -> &'static str {
        match self {
            BundleError::TooLarge(_) => "bundle_too_large",
            BundleError::Malformed(_) | BundleError::Version(_) => "invalid_bundle",
        }
    }
}

/// The bundle of an inline capability (`manifest` and `files`, in the order given).
pub fn encode_bundle(manifest: &str, files: &[InlineFile]) -> Vec<u8> {
    let doc = BundleDoc {
        kind: BUNDLE_TYPE.to_owned(),
        version: BUNDLE_VERSION,
        manifest: manifest.to_owned(),
        files: files.to_vec(),
    };
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// A bundle's name: the lowercase hex SHA-256 of its bytes (what `run.request` and the
/// routes carry, and what the daemon checks before anything runs).
pub fn bundle_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Reads a bundle back into the inline capability it carries.
pub fn decode_bundle(bytes: &[u8]) -> Result<CapabilitySource, BundleError> {
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(BundleError::TooLarge(bytes.len() as u64));
    }
    let doc: BundleDoc =
        serde_json::from_slice(bytes).map_err(|e| BundleError::Malformed(e.to_string()))?;
    if doc.kind != BUNDLE_TYPE {
        return Err(BundleError::Malformed(format!(
            "its type is {:?}, not {BUNDLE_TYPE:?}",
            doc.kind
        )));
    }
    if doc.version != BUNDLE_VERSION {
        return Err(BundleError::Version(doc.version));
    }
    Ok(CapabilitySource::Inline {
        manifest: doc.manifest,
        files: doc.files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_reads_back_to_its_inline_capability_and_bad_ones_are_refused() {
        let files = vec![InlineFile {
            path: "run.sh".into(),
            content_b64: "ZWNobyBoaQo".into(),
        }];
        let bytes = encode_bundle("name: x\n", &files);
        assert_eq!(
            decode_bundle(&bytes),
            Ok(CapabilitySource::Inline {
                manifest: "name: x\n".into(),
                files
            })
        );
        for bad in [
            &b"not json"[..],
            br#"{"type":"other","version":1,"manifest":"","files":[]}"#,
            br#"{"type":"outpost.bundle","version":1,"manifest":"","files":[],"extra":1}"#,
        ] {
            assert_eq!(decode_bundle(bad).unwrap_err().code(), "invalid_bundle");
        }
        let newer = br#"{"type":"outpost.bundle","version":2,"manifest":"","files":[]}"#;
        assert_eq!(decode_bundle(newer), Err(BundleError::Version(2)));
    }
}
