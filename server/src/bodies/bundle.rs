//! A bundle (§11.4) checked without decoding it: the document
//! `outpost_core::wire::decode_bundle` reads — `{"type":"outpost.bundle","version":1,
//! "manifest","files":[{"path","contentB64"}]}`, no other top-level member — refused with the
//! same codes and messages, then checked as [`super::check_inline`] checks an inline
//! capability. Only the manifest's text and the files' paths are copied out: each file's
//! base64url is read where it lies in the bundle's bytes (a string without escapes is never
//! copied) and checked a piece at a time, so checking a bundle holds little beyond its bytes,
//! where decoding it would hold them two or three times over.

use std::fmt;

use outpost_core::b64::{self, Base64Error};
use outpost_core::manifest::{Manifest, check_relative_path};
use outpost_core::wire::{BUNDLE_TYPE, BUNDLE_VERSION, BundleError, MAX_BUNDLE_BYTES};
use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};

use super::BodyError;

/// Base64url text is checked in pieces of this many characters (a multiple of 4, so every
/// piece but the last is whole groups).
const PIECE: usize = 64 * 1024;

/// What a checked bundle holds that the server keeps: its manifest.
#[derive(Debug, Clone)]
pub struct CheckedBundle {
    /// The manifest's text, as the bundle carries it.
    pub manifest_text: String,
    /// The manifest, parsed and validated.
    pub manifest: Manifest,
}

/// Checks the bundle `bytes` whole: its size and format (`bundle_too_large`,
/// `invalid_bundle`), its manifest (`invalid_manifest`) and its files' paths and contents
/// (`invalid_body`).
pub fn check_bundle(bytes: &[u8]) -> Result<CheckedBundle, BodyError> {
    if bytes.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(refused(&BundleError::TooLarge(bytes.len() as u64)));
    }
    let doc: Doc = serde_json::from_slice(bytes)
        .map_err(|e| refused(&BundleError::Malformed(e.to_string())))?;
    if doc.kind != BUNDLE_TYPE {
        return Err(refused(&BundleError::Malformed(format!(
            "its type is {:?}, not {BUNDLE_TYPE:?}",
            doc.kind
        ))));
    }
    if doc.version != BUNDLE_VERSION {
        return Err(refused(&BundleError::Version(doc.version)));
    }
    let manifest = outpost_host::parse_manifest(&doc.manifest)
        .map_err(|e| BodyError::new("invalid_manifest", e.to_string()))?;
    for (path, content) in &doc.files.0 {
        check_relative_path(path)
            .map_err(|e| BodyError::invalid(format!("capability.files: {path:?} {e}")))?;
        if let Err(e) = content {
            return Err(BodyError::invalid(format!(
                "capability.files: {path:?} contentB64: {e}"
            )));
        }
    }
    Ok(CheckedBundle {
        manifest_text: doc.manifest,
        manifest,
    })
}

fn refused(e: &BundleError) -> BodyError {
    BodyError::new(e.code(), e.to_string())
}

/// The bundle document, as `decode_bundle` reads it, with each file's content checked rather
/// than kept.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Doc {
    #[serde(rename = "type")]
    kind: String,
    version: u32,
    manifest: String,
    files: Files,
}

/// Each file's path and whether its content is canonical base64url.
struct Files(Vec<(String, Result<(), Base64Error>)>);

impl<'de> Deserialize<'de> for Files {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Seq;
        impl<'de> Visitor<'de> for Seq {
            type Value = Files;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Files, A::Error> {
                let mut files = Vec::new();
                while let Some(file) = seq.next_element::<File>()? {
                    files.push((file.path, file.content_b64.0));
                }
                Ok(Files(files))
            }
        }
        deserializer.deserialize_seq(Seq)
    }
}

/// One file, as `InlineFile` reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    path: String,
    content_b64: Checked,
}

/// Whether a string is canonical unpadded base64url, found a piece at a time.
struct Checked(Result<(), Base64Error>);

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Checked;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Checked, E> {
                Ok(Checked(check_b64(text)))
            }
        }
        deserializer.deserialize_string(Text)
    }
}

/// [`b64::decode`]'s verdict on `text`, without decoding it whole: whole groups of four
/// characters decode alone, so every piece but the last is checked as it is, and the last
/// carries the end's rules (its length, its trailing bits).
fn check_b64(text: &str) -> Result<(), Base64Error> {
    if !text.is_ascii() {
        return Err(Base64Error::NotCanonical);
    }
    let mut rest = text;
    while rest.len() > PIECE {
        let (piece, tail) = rest.split_at(PIECE);
        b64::decode(piece)?;
        rest = tail;
    }
    b64::decode(rest).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use outpost_core::wire::{CapabilitySource, InlineFile, decode_bundle, encode_bundle};

    const MANIFEST: &str = "name: b\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";

    /// What the whole-document check (decode, then `check_inline`) says of `bytes`.
    fn whole(bytes: &[u8]) -> Result<String, (String, String)> {
        let refused = |code: &str, message: String| (code.to_owned(), message);
        match decode_bundle(bytes).map_err(|e| refused(e.code(), e.to_string()))? {
            CapabilitySource::Inline { manifest, files } => {
                super::super::check_inline(&manifest, &files)
                    .map_err(|e| refused(e.code(), e.message().to_owned()))?;
                Ok(manifest)
            }
            CapabilitySource::Digest { .. } => Err(refused("invalid_bundle", String::new())),
        }
    }

    fn checked(bytes: &[u8]) -> Result<String, (String, String)> {
        check_bundle(bytes)
            .map(|c| c.manifest_text)
            .map_err(|e| (e.code().to_owned(), e.message().to_owned()))
    }

    #[test]
    fn the_check_says_what_decoding_and_checking_the_document_says() {
        let file = |path: &str, content: String| InlineFile {
            path: path.into(),
            content_b64: content,
        };
        let long = b64::encode(&vec![7u8; 3 * PIECE]);
        let mut long_bad = long.clone();
        long_bad.replace_range(PIECE + 5..PIECE + 6, "=");
        let cases: Vec<Vec<u8>> = vec![
            encode_bundle(MANIFEST, &[file("run.sh", b64::encode(b"echo hi"))]),
            encode_bundle(MANIFEST, &[file("big.bin", long.clone())]),
            encode_bundle(MANIFEST, &[file("big.bin", long_bad)]),
            encode_bundle(MANIFEST, &[file("big.bin", format!("{long}A"))]),
            encode_bundle(MANIFEST, &[file("x", "QQ=".into())]),
            encode_bundle(MANIFEST, &[file("x", "QR".into())]),
            encode_bundle(MANIFEST, &[file("x", "é".into())]),
            encode_bundle(MANIFEST, &[file("../x", "QQ".into())]),
            encode_bundle("name: [", &[]),
            encode_bundle(&format!("{MANIFEST}args: &a [x]\n"), &[]),
            br#"{"type":"other","version":1,"manifest":"","files":[]}"#.to_vec(),
            br#"{"type":"outpost.bundle","version":2,"manifest":"","files":[]}"#.to_vec(),
            br#"{"type":"outpost.bundle","version":1,"manifest":"","files":[],"extra":1}"#
                .to_vec(),
            br#"{"type":"outpost.bundle","type":"outpost.bundle","version":1,"manifest":"","files":[]}"#
                .to_vec(),
            br#"{"type":"outpost.bundle","version":1,"files":[]}"#.to_vec(),
            br#"{"type":"outpost.bundle","version":1,"manifest":"","files":[{"path":"x","contentB64":1}]}"#
                .to_vec(),
            br#"{"type":"outpost.bundle","version":1,"manifest":"","files":[{"path":"x","contentB64":"QQ","more":1}]}"#
                .to_vec(),
            format!(r#"["outpost.bundle",1,{MANIFEST:?},[["run.sh","QQ"]]]"#).into_bytes(),
            format!(r#"{{"type":"outpost.bundle","version":1,"manifest":{MANIFEST:?},"files":[]}} x"#)
                .into_bytes(),
            b"{".to_vec(),
            b"".to_vec(),
        ];
        for case in cases {
            let expected = whole(&case);
            assert_eq!(
                checked(&case),
                expected,
                "{}",
                String::from_utf8_lossy(&case[..case.len().min(200)])
            );
        }
    }
}
