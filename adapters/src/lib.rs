//! # outpost-adapters
//!
//! Drives `outpost-core`'s state machines over real transports, with the runtime chosen by
//! feature (`tokio`, `smol`) or none at all (the blocking host on std threads).
//!
//! - [`clock`]: the suspend-aware clock (`CLOCK_BOOTTIME`) the core is fed.
//! - [`runtime`]: the small [`runtime::Runtime`] trait (tokio, smol), the [`runtime::Host`]
//!   the daemon's driver uses, the WebSocket client over each, and [`runtime::HostKind`] /
//!   [`runtime::OwnedHost`], the host picked by name with its runtime kept alive.
//! - [`tls`]: rustls client trust (public roots plus an optional extra CA) and server URLs.
//! - [`http`]: the daemon's signed HTTP client (RFC 9421) for PROTOCOL §11's machine routes.
//!
//! This crate owns the transports and the runtimes a daemon runs on; it never reads a frame's
//! meaning, keeps no file and holds no key (the daemon, `outpost-daemon`, does). Async
//! runtimes appear here, in `outpost-server` (tokio: axum and hyper need it), in
//! `outpost-exec-docker` (tokio: bollard, the Docker client, needs it) and, as a trait only, in
//! `outpost-exec-wasm` (wasmtime-wasi's output streams are tokio's `AsyncWrite`; no runtime
//! is started there); nowhere else — `cli/tests/layout.rs` checks it. The server's leases
//! and deadlines run on this crate's clock; its HTTP handlers' own short timers (a wait's
//! limit, a ping interval) are tokio's, which its `sleep_until` needs.
#![forbid(unsafe_code)]

pub mod clock;
pub mod http;
pub mod https;
pub mod runtime;
pub mod tls;
