//! # outpost-exec-docker
//!
//! The Docker executor: capabilities run as containers on the machine's Docker engine,
//! through the Engine API ([bollard]).
//!
//! The engine is found at the configured address, else `DOCKER_HOST`, else
//! `unix:///var/run/docker.sock`, and the API version is negotiated before anything else.
//! An engine that cannot be reached makes [`Executor::probe`] report `Unavailable` with the
//! fix, and every launch refuse with [`ExecError::Unavailable`] — a docker capability never
//! runs anywhere else. An image that is not on the machine is refused with
//! [`ExecError::ImageMissing`] naming it: outpost never pulls.
//!
//! What a container may see and do is decided in one place, the `spec` module: only the
//! declared volumes, no network unless asked for and granted (an egress allowlist through the
//! egress gate, in a network a holder container keeps: see `egress`), memory / CPU / process
//! limits, no privileges. Every run — oneshot, ondemand (a fresh container per call) or persistent —
//! streams stdout and stderr under the output caps (each push wakes whoever streams them, who
//! otherwise sleeps: see `run`) and ends with its container removed, on every path: exit,
//! timeout, cancel, a failed start, and the executor being dropped; what a killed daemon left
//! behind, [`DockerExecutor::remove_orphans`] removes at the next start. Exit statuses are the
//! engine's, as `docker run` reports them (a timed-out or cancelled container stopped with
//! SIGTERM reports 143, one killed 137).
//!
//! A persistent service with a `port` is published on `127.0.0.1:<port>` by a relay of the
//! executor's own (see `relay`): a container without network is reached from inside its own
//! network namespace, so publishing a port gives it no network. Record persistent runs in a
//! `outpost_host::RunningServiceTable`; the container id is the service's id.
//!
//! bollard is async, so the executor keeps a small tokio runtime of its own; the
//! [`Executor`] interface stays blocking. Call it from a plain thread or a blocking task,
//! never from inside an async task.
#![forbid(unsafe_code)]

mod cleanup;
mod egress;
mod engine;
mod image;
mod launch;
mod relay;
mod run;
mod spec;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use outpost_core::executor::{ExecError, Executor, Launch, Probe, RunHandle};
use outpost_core::wire::Environment;
use tokio::runtime::Runtime;

pub use image::{
    Ensured, ImageError, LABEL_SOURCE, busybox_rootfs, ensure_busybox_image, import_rootfs,
    source_digest,
};

/// Labels every container of ours carries (the spec sets them, the cleanup finds ours by
/// them).
pub const LABEL_MANAGED: &str = "dev.outpost.managed";
/// The run id label.
pub const LABEL_RUN: &str = "dev.outpost.run-id";
/// The capability name label.
pub const LABEL_CAPABILITY: &str = "dev.outpost.capability";
/// The process whose executor created the container (see `DockerExecutor::remove_orphans`).
pub const LABEL_OWNER: &str = "dev.outpost.owner";

/// The containers of this executor's runs that are up now, by id (the holders of egress
/// gates too): what a cancel or a drop removes.
pub(crate) type Live = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>;
pub use run::DockerRun;

use engine::{Connected, engine_address};
use spec::SpecSettings;

/// How the Docker executor is set up.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The engine's address (`unix:///…` or `tcp://…`); none: `DOCKER_HOST`, else the default
    /// socket.
    pub host: Option<String>,
    /// How long a stopped container gets between SIGTERM and SIGKILL (whole seconds).
    pub grace: Duration,
    /// `uid:gid` the container's processes run as; none: this process's own, so files written
    /// to read-write volumes belong to the machine's owner.
    pub user: Option<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            host: None,
            grace: Duration::from_secs(2),
            user: None,
        }
    }
}

/// Runs docker capabilities. See the crate docs.
pub struct DockerExecutor {
    runtime: Runtime,
    address: String,
    connected: Mutex<Option<Connected>>,
    settings: SpecSettings,
    live: Live,
    next_name: AtomicU64,
}

impl DockerExecutor {
    /// A Docker executor. Nothing is contacted yet; [`Executor::probe`] says whether the
    /// engine answers.
    pub fn new(config: DockerConfig) -> Result<Self, ExecError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("outpost-docker")
            .enable_all()
            .build()
            .map_err(|e| ExecError::Spawn(format!("the Docker executor's runtime: {e}")))?;
        let user = config
            .user
            .unwrap_or_else(|| format!("{}:{}", nix::unistd::getuid(), nix::unistd::getgid()));
        Ok(Self {
            runtime,
            address: engine_address(config.host.as_deref()),
            connected: Mutex::new(None),
            settings: SpecSettings {
                user,
                grace_secs: i32::try_from(config.grace.as_secs()).unwrap_or(i32::MAX),
            },
            live: Arc::default(),
            next_name: AtomicU64::new(0),
        })
    }

    /// The engine's address this executor uses.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The negotiated client (connecting first if needed), for callers that prepare images.
    pub fn client(&self) -> Result<Docker, ExecError> {
        Ok(self.connected()?.docker)
    }

    /// Runs a future on the executor's runtime (image preparation, inspection).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The containers created and not yet removed.
    pub fn live_containers(&self) -> Vec<String> {
        self.live
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn connected(&self) -> Result<Connected, ExecError> {
        let mut slot = self
            .connected
            .lock()
            .map_err(|_| ExecError::Failed("the engine connection lock was poisoned".into()))?;
        if let Some(connected) = slot.as_ref() {
            return Ok(connected.clone());
        }
        let connected = engine::connect(&self.runtime, &self.address).map_err(|u| u.error())?;
        *slot = Some(connected.clone());
        Ok(connected)
    }
}

impl Executor for DockerExecutor {
    fn environment(&self) -> Environment {
        Environment::Docker
    }

    fn probe(&self) -> Probe {
        let connected = match self.connected() {
            Ok(connected) => connected,
            Err(ExecError::Unavailable { reason, remedy, .. }) => {
                return Probe::Unavailable { reason, remedy };
            }
            Err(other) => {
                return Probe::Unavailable {
                    reason: other.to_string(),
                    remedy: "restart the daemon".into(),
                };
            }
        };
        match engine::ping(&self.runtime, &connected, &self.address) {
            Ok(()) => Probe::Available {
                description: connected.description,
            },
            Err(unreachable) => unreachable.probe(),
        }
    }

    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError> {
        Ok(Box::new(self.start(launch)?))
    }
}

impl Drop for DockerExecutor {
    /// Removes every container still running (a persistent service nobody stopped, a run
    /// whose handle was dropped), so none outlives the executor.
    fn drop(&mut self) {
        let ids = self.live_containers();
        let Ok(Some(connected)) = self.connected.lock().map(|c| c.clone()) else {
            return;
        };
        if ids.is_empty() {
            return;
        }
        self.runtime.block_on(async {
            for id in &ids {
                let _ = cleanup::remove(&connected.docker, id).await;
            }
        });
    }
}
