//! Which runtime a daemon drives the protocol on, chosen by name at start (`--host`), and
//! the [`Host`] built over it with the runtime kept alive as long as the host.
//!
//! This file owns the choice and the runtime's lifetime. It never starts a runtime nobody
//! asked for: the blocking host has none.

use std::sync::Arc;

use super::{BlockingHost, Host};

/// Which host the daemon runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// A tokio runtime of its own, with one worker thread (see [`OwnedHost::new`]).
    #[cfg(feature = "tokio")]
    Tokio,
    /// smol's global executor.
    #[cfg(feature = "smol")]
    Smol,
    /// Plain std threads, no async runtime.
    Blocking,
}

impl HostKind {
    /// The host's name (`tokio`, `smol`, `blocking`).
    pub fn as_str(self) -> &'static str {
        match self {
            #[cfg(feature = "tokio")]
            HostKind::Tokio => "tokio",
            #[cfg(feature = "smol")]
            HostKind::Smol => "smol",
            HostKind::Blocking => "blocking",
        }
    }

    /// Reads a name given on the command line.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            #[cfg(feature = "tokio")]
            "tokio" => Some(HostKind::Tokio),
            #[cfg(feature = "smol")]
            "smol" => Some(HostKind::Smol),
            "blocking" => Some(HostKind::Blocking),
            _ => None,
        }
    }
}

/// A [`Host`] with the runtime it runs on kept alive.
pub struct OwnedHost {
    /// The host to open connections and run blocking work with; valid while this value lives.
    pub host: Arc<dyn Host>,
    #[cfg(feature = "tokio")]
    _tokio: Option<tokio::runtime::Runtime>,
}

impl OwnedHost {
    /// Builds the host `kind` names.
    pub fn new(kind: HostKind) -> std::io::Result<Self> {
        match kind {
            #[cfg(feature = "tokio")]
            HostKind::Tokio => {
                // One worker: only the connection's reader and writer run on it (the driver,
                // the runs and the HTTP calls have threads of their own), and a second worker
                // only costs wake-ups — about a tenth of the CPU an execution takes in the
                // system bench's 8x8 throughput (`cli/benches/system.rs`).
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("outpost-daemon")
                    .enable_all()
                    .build()?;
                let host = super::AsyncHost::new(
                    super::TokioRuntime::new(runtime.handle().clone()),
                    "tokio",
                );
                Ok(Self {
                    host: Arc::new(host),
                    _tokio: Some(runtime),
                })
            }
            #[cfg(feature = "smol")]
            HostKind::Smol => Ok(Self::wrap(Arc::new(super::AsyncHost::new(
                super::SmolRuntime,
                "smol",
            )))),
            HostKind::Blocking => Ok(Self::wrap(Arc::new(BlockingHost::default()))),
        }
    }

    fn wrap(host: Arc<dyn Host>) -> Self {
        Self {
            host,
            #[cfg(feature = "tokio")]
            _tokio: None,
        }
    }
}
