//! Writes every vector file from fixed seeds and fixed times. The output is deterministic:
//! the committed files must equal it byte for byte.

mod daemon;
mod frames;
mod http;
mod json;
mod keysets;
mod terminal;

use ed25519_dalek::SigningKey;
use outpost_core::keyset::test_root::seed_from_hex;
use outpost_core::sign::Ed25519Signer;
use serde::Serialize;
use serde_json::value::RawValue;

/// Wall time of the vectors: 2026-01-01T00:00:00Z.
pub const NOW: u64 = 1_767_225_600;

/// The root the vectors' daemons pin explicitly (TEST ONLY).
pub const VECTORS_ROOT_SECRET_HEX: &str =
    "452c8391075a1023cbb844863e5f5ad40df61a0246f11dd30966d266f1334675";

/// The id of that root.
pub const VECTORS_ROOT_ID: &str = "root-vectors-1";

/// A second root, never pinned by the vectors' daemons (TEST ONLY).
pub const OTHER_ROOT_SECRET_HEX: &str =
    "553a045ac0772b3920c0f7eebdbc4325123705830a21084827f8300633f99b67";

/// The machine key of the HTTP vectors (TEST ONLY).
pub const MACHINE_SECRET_HEX: &str =
    "9a2a93a2b4850e291ec90f19e9850de92b358047d8484074b694b7f902f60e7c";

/// One generated file.
pub struct GeneratedFile {
    /// The file name inside `vectors/`.
    pub name: &'static str,
    /// The file's text.
    pub text: String,
}

/// Every vector file, in a fixed order.
pub fn all() -> Vec<GeneratedFile> {
    vec![
        GeneratedFile {
            name: "signed-frames.json",
            text: to_text(&frames::file()),
        },
        GeneratedFile {
            name: "key-sets.json",
            text: to_text(&keysets::file()),
        },
        GeneratedFile {
            name: "http-signatures.json",
            text: to_text(&http::file()),
        },
        GeneratedFile {
            name: "content-digest.json",
            text: to_text(&http::digest_file()),
        },
        GeneratedFile {
            name: "canonical-json.json",
            text: to_text(&json::file()),
        },
        GeneratedFile {
            name: "terminal.json",
            text: to_text(&terminal::file()),
        },
        GeneratedFile {
            name: "daemon-runs.json",
            text: to_text(&daemon::file()),
        },
    ]
}

fn to_text<T: Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("vector files serialize");
    text.push('\n');
    text
}

fn signer(kid: &str, secret_hex: &str) -> Ed25519Signer {
    Ed25519Signer::from_seed(
        kid,
        seed_from_hex(secret_hex).expect("fixed seeds are valid hex"),
    )
}

pub use crate::keys::{signer_from_hex, verifying_key_from_hex};

fn public_hex(secret_hex: &str) -> String {
    let seed = seed_from_hex(secret_hex).expect("fixed seeds are valid hex");
    hex::encode(SigningKey::from_bytes(&seed).verifying_key().as_bytes())
}

/// Embeds `bytes` verbatim when they are a JSON text a vector file can hold.
fn raw(bytes: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(bytes).ok()?;
    // A raw value loses surrounding whitespace; embed only what survives exactly.
    RawValue::from_string(text.to_owned())
        .ok()
        .filter(|raw| raw.get() == text)
}
