//! # outpost-exec-docker
//!
//! The outpost executor for containers through the Docker Engine API.
//!
//! **Not built yet.** This crate is a placeholder in the workspace layout; it exports nothing
//! and runs nothing. Until its issue lands, outpost refuses capabilities of this environment
//! with a typed "unavailable" error — it never falls back to another environment.
#![forbid(unsafe_code)]
