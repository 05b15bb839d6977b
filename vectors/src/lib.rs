//! # outpost-vectors
//!
//! outpost's published test vectors: JSON files in this crate's folder that let another
//! implementation check itself against outpost byte for byte, the generator that writes them
//! from fixed seeds, and the checker that runs outpost-core against them.
//!
//! `cargo run -p outpost-vectors --features generate -- generate` rewrites the files; `… --
//! check` verifies them. The generator (feature `generate`) needs the test root's private keys;
//! the checker, which the `outpost` binary embeds, needs public keys only.
//! The format is documented in `vectors/README.md`.
//!
//! This crate owns the vectors' files and their meaning. It never changes a published vector
//! in place (a change of the protocol is a new vector) and the checker never needs a private
//! key.

pub mod check;
#[cfg(feature = "generate")]
pub mod generate;
pub mod keys;
pub mod model;

use std::path::PathBuf;

/// The folder holding the committed vector files.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
