//! How the daemon's driver reaches the outside world without knowing which runtime it is on.
//!
//! Two layers, as in quinn:
//!
//! - [`Runtime`]: the few things an async runtime must do for us — spawn a future, run
//!   blocking work off the runtime's threads, sleep, and open a TCP (optionally TLS) stream.
//!   `TokioRuntime` (feature `tokio`) and `SmolRuntime` (feature `smol`) implement it.
//! - [`Host`]: what the driver needs — run blocking work, and open a WebSocket whose events
//!   arrive through a callback. [`AsyncHost`] implements it over any [`Runtime`] (one
//!   WebSocket layer: async-tungstenite's `client_async` over the runtime's stream);
//!   [`BlockingHost`] implements it with std threads and tungstenite's sync API, with no async
//!   runtime at all.
//!
//! This module owns connection set-up and the movement of WebSocket messages. It never reads
//! a frame's content and never decides what to do about a close.

mod blocking;
mod choice;
mod link;
pub mod outbox;
mod pool;
#[cfg(feature = "smol")]
mod smol;
mod tls_nonblocking;
#[cfg(feature = "tokio")]
mod tokio;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use blocking::BlockingHost;
pub use choice::{HostKind, OwnedHost};
pub use link::{
    CLOSE_WAIT, CONNECT_TIMEOUT, Inbound, Link, LinkEvent, MAX_MESSAGE_LEN, MAX_UNREAD,
};
#[cfg(feature = "smol")]
pub use smol::SmolRuntime;
#[cfg(feature = "tokio")]
pub use tokio::TokioRuntime;

/// A boxed future a [`Runtime`] can run.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A byte stream in the `futures` I/O traits (TCP, or TLS over TCP).
pub trait AsyncIo: futures_util::AsyncRead + futures_util::AsyncWrite + Unpin + Send {}
impl<T: futures_util::AsyncRead + futures_util::AsyncWrite + Unpin + Send> AsyncIo for T {}

/// A boxed [`AsyncIo`] stream.
pub type IoBox = Box<dyn AsyncIo>;

/// Where to connect, and with which TLS configuration (none: plain TCP).
#[derive(Clone)]
pub struct Target {
    /// The host name or address.
    pub host: String,
    /// The TCP port: the URL's, or 443 / 80 by scheme when it names none.
    pub port: u16,
    /// TLS, when the URL is `wss://` / `https://`; the server name is `host`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// What an async runtime does for the driver (after quinn's `Runtime`).
pub trait Runtime: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `future` to completion in the background.
    fn spawn(&self, future: BoxFuture<()>);
    /// Runs `work` on a thread where blocking is allowed (executor waits, HTTP calls).
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>);
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<()>;
    /// Opens a TCP stream to `target`, then TLS over it when `target.tls` is set.
    fn connect(&self, target: Target) -> BoxFuture<std::io::Result<IoBox>>;
}

/// Called with each event of one WebSocket, from whatever thread the host uses.
pub type EventFn = Arc<dyn Fn(LinkEvent) + Send + Sync>;

/// What the daemon's driver needs from the machine: blocking work off its thread, and
/// WebSockets.
pub trait Host: Send + Sync + 'static {
    /// Runs `work` where blocking is allowed.
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>);

    /// Opens a WebSocket to `url` (`ws://` or `wss://`, TLS with `tls`). `events` receives
    /// exactly one of [`LinkEvent::Opened`] or [`LinkEvent::Failed`], then, after `Opened`,
    /// every message and finally one [`LinkEvent::Closed`].
    fn open(&self, url: String, tls: Arc<rustls::ClientConfig>, events: EventFn);

    /// A name for logs and errors (`tokio`, `smol`, `blocking`).
    fn name(&self) -> &'static str;
}

/// A [`Host`] over an async [`Runtime`].
#[derive(Debug)]
pub struct AsyncHost<R: Runtime> {
    runtime: Arc<R>,
    name: &'static str,
}

impl<R: Runtime> AsyncHost<R> {
    /// A host over `runtime`, named `name` in logs.
    pub fn new(runtime: R, name: &'static str) -> Self {
        Self {
            runtime: Arc::new(runtime),
            name,
        }
    }

    /// The async runtime this host spawns its connections' readers and writers on.
    pub fn runtime(&self) -> &Arc<R> {
        &self.runtime
    }
}

impl<R: Runtime> Host for AsyncHost<R> {
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) {
        self.runtime.spawn_blocking(work);
    }

    fn open(&self, url: String, tls: Arc<rustls::ClientConfig>, events: EventFn) {
        let runtime: Arc<dyn Runtime> = self.runtime.clone();
        self.runtime
            .spawn(Box::pin(link::drive_async(runtime, url, tls, events)));
    }

    fn name(&self) -> &'static str {
        self.name
    }
}

/// Splits a `ws://` / `wss://` URL into a connect [`Target`].
pub(crate) fn target_of(url: &str, tls: Arc<rustls::ClientConfig>) -> Result<Target, String> {
    let (secure, rest) = if let Some(rest) = url.strip_prefix("wss://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("ws://") {
        (false, rest)
    } else {
        return Err(format!("not a ws:// or wss:// URL: {}", redact(url)));
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let server = crate::tls::ServerUrl::parse(&format!(
        "{}://{authority}",
        if secure { "https" } else { "http" }
    ))
    .map_err(|e| e.to_string())?;
    Ok(Target {
        host: server.host,
        port: server.port,
        tls: secure.then_some(tls),
    })
}

/// The URL with its query cut (a connect ticket travels there and is never logged).
pub fn redact(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?[redacted]"),
        None => url.to_owned(),
    }
}
