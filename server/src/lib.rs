//! # outpost-server
//!
//! The reference server behind `outpost serve`: the HTTP API of PROTOCOL §11, the daemons'
//! WebSocket sessions, the SQLite store and the server's own executor (`cloud`), driving
//! `outpost-core`'s dispatcher.
//!
//! The public API is [`start`] with a [`ServeConfig`], the [`Running`] server it returns,
//! and [`bodies`], the decoders of the request bodies (public so they can be fuzzed alone).
//! Everything else — the store, the dispatcher actor, the routes — stays inside.
//!
//! It owns the server's state and its answers. It never decides what the protocol allows
//! (the core's dispatcher and session machines do), never trusts a body before its strict
//! decoder read it, and never answers a caller's bad input with a 500.
#![forbid(unsafe_code)]

mod blocking;
pub mod bodies;
mod bootstrap;
mod clock;
mod dispatch;
mod http;
mod http_layer;
mod inflight;
mod limits;
mod metrics;
mod notices;
mod parking;
mod public_url;
pub mod releases;
mod sealed;
mod secrets;
mod serve;
mod state;
mod store;
mod sweep;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use outpost_core::executor::Registry;
use outpost_core::wire::Environment;
use tokio::sync::watch;

pub use blocking::BlockingServer;
pub use http::{Rate, RateLimits};
pub use limits::Limits;
pub use secrets::RandomError;
pub use state::StateError;
pub use store::{Database, StoreError, migrate};

/// A certificate chain and its private key, both PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen; port 0 picks a free port ([`Running::url`] says which).
    pub listen: SocketAddr,
    /// The state folder (created 0700): `outpost.db` (0600, with its `-wal` and `-shm`),
    /// `bundles/`, `keys.json`, `admin.token`, `join`.
    pub state_dir: PathBuf,
    /// Serve HTTPS with these files; plain HTTP when `None`.
    pub tls: Option<TlsFiles>,
    /// The environments the server's own executor may run (the registry handed to [`start`]
    /// must hold their executors); any other is refused on the server with `not_permitted`.
    pub cloud: Vec<Environment>,
    /// The base URL daemons should use (behind a proxy, a DNS name); default the address
    /// actually bound (an unspecified address is shown as loopback).
    pub public_url: Option<String>,
    /// The URL the other nodes of a cluster reach this node itself at (not a load balancer in
    /// front of them all): they relay terminals and live output to the node a machine is
    /// connected to through it. Default: the address listened on, as `public_url`'s default
    /// (for a plain-HTTP node on every address, loopback: only nodes on this machine).
    pub node_url: Option<String>,
    /// The limits on signed machine requests and connects.
    pub rate_limits: RateLimits,
    /// With no viewer for this long, an open terminal is closed (its sessions and the
    /// terminal audited `idle`); [`ServeConfig::DEFAULT_TERMINAL_IDLE`] unless set.
    pub terminal_idle: Duration,
    /// How often daemons send `status` (`welcome`'s `heartbeatSecs`, whole seconds, at least
    /// one) and the server pings each daemon connection; a connection silent for three of
    /// them is closed by either side. [`ServeConfig::DEFAULT_HEARTBEAT`] unless set.
    pub heartbeat: Duration,
    /// What the server holds for its callers at most (times to send a request, uploads,
    /// stored bundles, executions not yet ended); [`Limits::default`] unless set.
    pub limits: Limits,
    /// The xterm.js package folder the web UI's terminal is read from, at run time (none:
    /// Debian's `node-xterm`, `/usr/share/nodejs/xterm`).
    pub xterm_dir: Option<PathBuf>,
    /// Where the records are kept: the SQLite file `outpost.db` in the state folder, or a
    /// PostgreSQL database (`--database postgres://…`), migrated when the server starts.
    pub database: Database,
}

impl ServeConfig {
    /// How long a terminal with no viewer stays open by default: 10 minutes.
    pub const DEFAULT_TERMINAL_IDLE: Duration = Duration::from_secs(600);
    /// The heartbeat by default: 15 s.
    pub const DEFAULT_HEARTBEAT: Duration =
        Duration::from_secs(outpost_core::session::DEFAULT_HEARTBEAT_SECS as u64);
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The state folder or one of its files.
    #[error("state folder: {0}")]
    State(#[from] StateError),
    /// The SQLite store (`outpost.db` in the state folder) could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listening socket could not be bound, or its address read.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The TLS files.
    #[error("TLS: {0}")]
    Tls(String),
    /// The OS random source failed: no secret can be made.
    #[error(transparent)]
    Random(#[from] RandomError),
    /// The async runtime of a [`BlockingServer`] cannot start.
    #[error("the server's runtime cannot start: {0}")]
    Runtime(String),
    /// The server listens on every address but has none another machine could reach it by,
    /// so it cannot print a join that works anywhere but here.
    #[error(
        "listening on {listen}, but this machine has no address other machines can reach it by (no default route, no interface up): pass --public-url URL, the URL daemons will use (or listen on 127.0.0.1 for this machine only)"
    )]
    NoPublicAddress {
        /// The address listened on.
        listen: SocketAddr,
    },
    /// The server listens on every address over plain http, which no other machine's daemon
    /// accepts (plain http only to loopback).
    #[error(
        "listening on {listen} over plain http, which other machines' daemons refuse (plain http is for loopback only): pass --tls-cert and --tls-key (a self-signed certificate works: the join pins it), or --public-url https://… for a proxy in front, or listen on 127.0.0.1"
    )]
    PlainHttpForOthers {
        /// The address listened on.
        listen: SocketAddr,
    },
    /// The system has no suspend-aware monotonic clock (`CLOCK_BOOTTIME`).
    #[error("the server's clock cannot be read: {0}")]
    Clock(#[from] outpost_adapters::clock::ClockError),
}

/// A server that is running.
#[derive(Debug)]
pub struct Running {
    /// The base URL actually served, e.g. `http://127.0.0.1:40123`.
    pub url: String,
    /// The join string (also in `state_dir/join`).
    pub join: String,
    /// The admin token (also in `state_dir/admin.token`).
    pub admin_token: String,
    /// The state folder the server keeps its keys, database, join and token in.
    pub state_dir: PathBuf,
    stop: watch::Sender<bool>,
    /// Set when the dispatcher stopped on its own (the store refused a record).
    failed: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Why [`Running::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// SIGINT or SIGTERM asked it to.
    Asked,
    /// The store refused a record (a full disk, a database that went away): the server
    /// stopped rather than go on without it. Starting it again restores it from the records.
    StoreFailed,
}

impl Running {
    /// Stops gracefully: no new connections, open requests finish (at most 10 s), the
    /// dispatcher writes what it holds and stops, cloud runs are cancelled.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Serves until SIGINT or SIGTERM, or until the store refuses a record, then shuts down
    /// as [`Running::shutdown`] does; says which.
    pub async fn wait(self) -> Stopped {
        let interrupt = tokio::signal::ctrl_c();
        let mut failed = self.failed.clone();
        let store_failed = async move {
            // Sent once, or never while the dispatcher runs (a closed channel: it stopped
            // as asked).
            while !*failed.borrow() {
                if failed.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let stopped = {
            #[cfg(unix)]
            {
                use tokio::signal::unix::{SignalKind, signal};
                match signal(SignalKind::terminate()) {
                    Ok(mut term) => tokio::select! {
                        _ = interrupt => Stopped::Asked,
                        _ = term.recv() => Stopped::Asked,
                        () = store_failed => Stopped::StoreFailed,
                    },
                    Err(_) => tokio::select! {
                        _ = interrupt => Stopped::Asked,
                        () = store_failed => Stopped::StoreFailed,
                    },
                }
            }
            #[cfg(not(unix))]
            tokio::select! {
                _ = interrupt => Stopped::Asked,
                () = store_failed => Stopped::StoreFailed,
            }
        };
        self.shutdown().await;
        stopped
    }
}

/// Starts serving: creates or reads the state folder, restores the dispatcher from the
/// store, binds `config.listen` and returns once the socket accepts. `cloud` holds the
/// executors of the server's own executor (the `cli` crate builds it with the wasm, docker
/// and shell executors).
pub async fn start(config: ServeConfig, cloud: Registry) -> Result<Running, ServeError> {
    bootstrap::start(config, cloud).await
}
