//! # outpost-adapters
//!
//! Drives `outpost-core`'s state machines over real transports, with the runtime chosen by
//! feature (`tokio`, `smol`) or none at all (the blocking host on std threads). This crate is
//! the only place those runtimes appear.
//!
//! - [`clock`]: the suspend-aware clock (`CLOCK_BOOTTIME`) the core is fed.
//! - [`runtime`]: the small [`runtime::Runtime`] trait (tokio, smol), the [`runtime::Host`]
//!   the driver uses, and the WebSocket client over each.
//! - [`tls`]: rustls client trust (public roots plus an optional extra CA) and server URLs.
//! - [`http`]: the daemon's signed HTTP client (RFC 9421) for PROTOCOL §11's machine routes.
//! - [`store`]: the daemon's durable records in SQLite.
//! - [`daemon`]: the daemon driver and [`daemon::run_daemon`], what `outpost daemon` calls.
#![forbid(unsafe_code)]

pub mod clock;
pub mod daemon;
pub mod http;
pub mod runtime;
pub mod store;
pub mod tls;
