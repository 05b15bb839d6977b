//! # outpost-adapters
//!
//! Drives `outpost-core`'s state machines over real transports (a WebSocket, a clock, a
//! socket), with the runtime chosen by feature: `tokio` or `smol`. This crate is the only
//! place those runtimes appear.
//!
//! **Not built yet.** The features exist so the layout is fixed; neither enables any code.
#![forbid(unsafe_code)]
