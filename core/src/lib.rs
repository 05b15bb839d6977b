//! # outpost-core
//!
//! The sans-IO heart of outpost. Everything in this crate is pure: bytes and time go in,
//! frames, errors and decisions come out. It never opens a socket, reads a clock, spawns a
//! thread or a process, and never draws randomness itself — the host passes `now` and
//! random bytes in. That is what lets it be fuzzed, simulated deterministically and driven
//! by any runtime.
//!
//! ## What lives where
//!
//! | module | owns |
//! |---|---|
//! | [`api`] | the HTTP API's request and answer bodies, shared by the server, the daemon and the CLI |
//! | [`ids`] | the typed ids (`RunId`, `ExecutionId`, `ContextId`, `WaitId`, `TerminalId`): plain strings on the wire |
//! | [`json`] | the strict JSON reader (duplicate keys, floats, depth, lone surrogates refused) and RFC 8785 canonical output |
//! | [`b64`] | strict base64url without padding, the encoding of every key and signature |
//! | [`wire`] | typed frames for both directions and the length-prefixed stream codec |
//! | [`sign`] | signed server frames: the `Signer` trait, the signing input, the per-session verifier; and [`keyset`] (`sign::keyset`), server frame key sets signed by pinned root keys, and the test root |
//! | [`httpsig`] | HTTP Message Signatures (RFC 9421) and `Content-Digest` (RFC 9530) |
//! | [`replay`] | the bounded nonce cache that refuses replayed or stale signed requests |
//! | [`ticket`] | single-use connect tickets |
//! | [`join`] | the join string a server prints and a daemon pins its root from; machine key ids |
//! | [`release`] | signed daemon releases and the checks before a daemon runs one |
//! | [`record`] | the versioned, strictly read envelope of the server's and the daemon's durable records |
//! | [`time`] | the host-supplied clock values: wall time and a monotonic instant |
//! | [`rng`] | a small seeded generator for jitter and the simulation (never for secrets) |
//! | [`manifest`] | capability manifests, parsed and validated before anything runs |
//! | [`executor`] | the executor trait every environment implements, and the registry that picks one |
//! | [`grant`] | grants applied on the machine: folders, egress, the owner's local policy |
//! | [`gate`] | the egress gate's protocol between a run's client and the gate |
//! | [`routing`] | where an execute goes (a context, the caller's chain) and who may use a context |
//! | [`wait`] | condition waits on the daemon: the re-check schedule and the rows that survive a crash |
//! | [`daemon`], [`session`], [`server`] | the three roles' state machines |
//! | [`terminal`] | an interactive terminal's relay between its runner and its viewers, and the replay ring |
//! | `sim` | in-memory harnesses and the seeded simulation, behind the `test-support` feature |
//!
//! ## Errors
//!
//! Every error type has a `code()` that returns a stable `snake_case` string. The codes are
//! part of the protocol (they appear in `vectors/` and `docs/PROTOCOL.md`) and never change
//! meaning. Nothing in this crate panics on peer input.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod api;
pub mod b64;
pub mod daemon;
pub mod executor;
pub mod gate;
pub mod grant;
pub mod httpsig;
pub mod ids;
pub mod join;
pub mod json;
pub mod manifest;
pub mod record;
pub mod release;
pub mod replay;
pub mod rng;
pub mod routing;
pub mod server;
pub mod session;
pub mod sign;
pub use sign::keyset;
#[cfg(any(test, feature = "test-support"))]
pub mod sim;
pub mod terminal;
pub mod ticket;
pub mod time;
pub mod wait;
pub mod wire;

/// The most outputs any role ([`daemon::Daemon`], [`session::Session`], [`server::Server`])
/// lets wait in its queue: past it, `handle_input` refuses with an `OutputBacklog` error until
/// the host drains `poll_output` (the drain rule).
pub const MAX_QUEUED_OUTPUTS: usize = 4096;
