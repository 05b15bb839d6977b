//! The server for callers without an async runtime (the `outpost` binary): a tokio runtime
//! of its own behind [`BlockingServer`], so tokio stays inside this crate.
//!
//! This module owns that runtime's life. It never changes what [`crate::start`] serves.

use outpost_core::executor::Registry;

use crate::{Running, ServeConfig, ServeError};

/// A server with its own runtime. Dropping it without [`BlockingServer::shutdown`] stops the
/// runtime abruptly (as a crash would; the store stays consistent).
pub struct BlockingServer {
    runtime: tokio::runtime::Runtime,
    running: Option<Running>,
}

impl std::fmt::Debug for BlockingServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingServer")
            .field("running", &self.running)
            .finish_non_exhaustive()
    }
}

impl BlockingServer {
    /// Starts a runtime (`workers` threads, at least 1) and the server on it; returns once the
    /// socket accepts. Its threads are named `outpost-server`.
    pub fn start(config: ServeConfig, cloud: Registry, workers: usize) -> Result<Self, ServeError> {
        Self::start_named(config, cloud, workers, "outpost-server")
    }

    /// [`BlockingServer::start`] with threads named `thread_name` (the kernel keeps 15 bytes
    /// of it): several servers in one process — the nodes of a cluster in a bench — each
    /// have their own, so each one's CPU time can be read apart.
    pub fn start_named(
        config: ServeConfig,
        cloud: Registry,
        workers: usize,
        thread_name: &str,
    ) -> Result<Self, ServeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .thread_name(thread_name)
            .enable_all()
            .build()
            .map_err(|e| ServeError::Runtime(e.to_string()))?;
        let running = runtime.block_on(crate::start(config, cloud))?;
        Ok(Self {
            runtime,
            running: Some(running),
        })
    }

    /// The running server's URL, join, admin token and state folder.
    pub fn running(&self) -> &Running {
        self.running
            .as_ref()
            .expect("a BlockingServer holds its server until shutdown or wait consume it")
    }

    /// Stops gracefully (as [`Running::shutdown`]).
    pub fn shutdown(mut self) {
        if let Some(running) = self.running.take() {
            self.runtime.block_on(running.shutdown());
        }
    }

    /// Serves until SIGINT or SIGTERM (or the store refuses a record), then shuts down
    /// gracefully; says which.
    pub fn wait(mut self) -> crate::Stopped {
        match self.running.take() {
            Some(running) => self.runtime.block_on(running.wait()),
            None => crate::Stopped::Asked,
        }
    }
}
