//! # outpost-exec-pty
//!
//! The outpost executor for interactive terminals relayed as bytes.
//!
//! **Not built yet.** This crate is a placeholder in the workspace layout; it exports nothing
//! and runs nothing. Until its issue lands, outpost refuses capabilities of this environment
//! with a typed "unavailable" error — it never falls back to another environment.
#![forbid(unsafe_code)]
