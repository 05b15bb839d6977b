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
//! What a container may see and do is decided in one place, [`container_spec`]: only the
//! declared volumes, no network unless asked for and granted, memory / CPU / process limits,
//! no privileges. Every run — oneshot, ondemand (a fresh container per call) or persistent —
//! streams stdout and stderr under the output caps and ends with its container removed, on
//! every path: exit, timeout, cancel, a failed start, and the executor being dropped; what a
//! killed daemon left behind, [`DockerExecutor::remove_orphans`] removes at the next start. Exit
//! statuses are the engine's, as `docker run` reports them (a timed-out or cancelled container
//! stopped with SIGTERM reports 143, one killed 137).
//!
//! A persistent service with a `port` is published on `127.0.0.1:<port>` by a relay of the
//! executor's own (see `relay`), so it needs no egress. Record persistent runs in a
//! [`outpost_exec_shell::ServiceTable`]; the container id is the service's id.
//!
//! bollard is async, so the executor keeps a small tokio runtime of its own; the
//! [`Executor`] interface stays blocking. Call it from a plain thread or a blocking task,
//! never from inside an async task.
#![forbid(unsafe_code)]

mod engine;
mod image;
mod relay;
mod run;
mod spec;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, InspectContainerOptions, InspectNetworkOptions,
    ListContainersOptions, StartContainerOptions,
};
use outpost_core::executor::{ExecError, Executor, Launch, Probe, RunHandle};
use outpost_core::manifest::Lifecycle;
use outpost_core::wire::Environment;
use tokio::runtime::Runtime;

pub use engine::{DEFAULT_ADDRESS, PROBE_TIMEOUT, engine_address};
pub use image::{ImageError, busybox_rootfs, ensure_busybox_image, import_rootfs};
pub use run::DockerRun;
pub use spec::{
    ContainerSpec, INTERNAL_NETWORK, LABEL_CAPABILITY, LABEL_MANAGED, LABEL_OWNER_PID, LABEL_RUN,
    Network, SpecSettings, container_spec,
};

use engine::Connected;
use run::{Driver, Live, Streams};

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
                grace_secs: i64::try_from(config.grace.as_secs()).unwrap_or(i64::MAX),
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

    /// Removes the containers an earlier outpost process left behind: ours by label, whose
    /// owner process is gone (it was killed before it could clean up). Returns their ids.
    /// Containers of live processes, this one included, are left alone. A daemon calls this
    /// once at start.
    pub fn remove_orphans(&self) -> Result<Vec<String>, ExecError> {
        let docker = self.client()?;
        let address = self.address.clone();
        self.runtime.block_on(async {
            let options = ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![format!("{LABEL_MANAGED}=true")],
                )])),
                ..ListContainersOptions::default()
            };
            let containers = docker
                .list_containers(Some(options))
                .await
                .map_err(|e| engine_error(&address, "listing containers", e))?;
            let mut removed = Vec::new();
            for container in containers {
                let owner = container
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_OWNER_PID))
                    .and_then(|pid| pid.parse::<u32>().ok());
                let orphaned = match owner {
                    Some(pid) => {
                        pid != std::process::id()
                            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
                    }
                    None => false,
                };
                if let (true, Some(id)) = (orphaned, container.id) {
                    run::remove(&docker, &id).await?;
                    removed.push(id);
                }
            }
            Ok(removed)
        })
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

    /// Starts a run (also used directly by benchmarks and tests).
    pub fn start(&self, launch: Launch) -> Result<DockerRun, ExecError> {
        let begun = Instant::now();
        let manifest = &launch.manifest;
        if manifest.environment != Environment::Docker {
            return Err(ExecError::InvalidCapability(format!(
                "a {} capability cannot run on the docker executor",
                manifest.environment.as_str()
            )));
        }
        let connected = self.connected()?;
        let spec = container_spec(&launch, &self.settings)?;
        let name = format!(
            "outpost-{}-{}-{}",
            manifest.name,
            std::process::id(),
            self.next_name.fetch_add(1, Ordering::Relaxed)
        );
        let image = manifest.docker_image.clone().unwrap_or_default();
        let cap = usize::try_from(manifest.limits.output_max_bytes).unwrap_or(usize::MAX);
        let streams = Arc::new(Mutex::new(Streams::new(cap)));
        let docker = connected.docker;
        let address = self.address.clone();
        let live = self.live.clone();

        let (id, output, relay) = self.runtime.block_on(async {
            if spec.network == Network::Internal {
                ensure_internal_network(&docker)
                    .await
                    .map_err(|e| engine_error(&address, "creating the internal network", e))?;
            }
            let listener = match spec.port {
                Some(port) => Some(relay::bind(port).await.map_err(|e| {
                    ExecError::Spawn(format!("the service's port 127.0.0.1:{port}: {e}"))
                })?),
                None => None,
            };
            let options = CreateContainerOptions {
                name: Some(name),
                ..CreateContainerOptions::default()
            };
            let id = match docker
                .create_container(Some(options), spec.body.clone())
                .await
            {
                Ok(created) => created.id,
                Err(e) => return Err(create_error(&address, &image, e)),
            };
            if let Ok(mut live) = live.lock() {
                live.insert(id.clone());
            }
            let started = start_container(&docker, &id, &spec, listener, &address).await;
            match started {
                Ok((output, relay)) => Ok((id, output, relay)),
                Err(e) => {
                    if run::remove(&docker, &id).await.is_ok()
                        && let Ok(mut live) = live.lock()
                    {
                        live.remove(&id);
                    }
                    Err(e)
                }
            }
        })?;

        let setup = begun.elapsed();
        let deadline = (manifest.lifecycle != Lifecycle::Persistent)
            .then(|| tokio::time::Instant::from_std(begun + launch.timeout));
        let (cancel, cancel_rx) = tokio::sync::watch::channel(false);
        let (report, finished) = mpsc::channel();
        let driver = Driver {
            docker,
            id: id.clone(),
            streams: streams.clone(),
            deadline,
            cancel: cancel_rx,
            grace_secs: i32::try_from(self.settings.grace_secs).unwrap_or(i32::MAX),
            memory_mb: manifest.limits.memory_mb,
            started: Instant::now(),
            setup,
            live: self.live.clone(),
            relay,
        };
        self.runtime.spawn(driver.drive(output, report));
        Ok(DockerRun {
            run_id: launch.run_id,
            container_id: id,
            streams,
            finished,
            cancel,
            outcome: None,
        })
    }
}

/// The attach stream of a started container, and its port relay.
type Started = (run::OutputStream, Option<tokio::task::JoinHandle<()>>);

/// Attaches (before starting, so no output is missed), starts, and for a service with a port
/// starts the relay to the container's address.
async fn start_container(
    docker: &Docker,
    id: &str,
    spec: &ContainerSpec,
    listener: Option<tokio::net::TcpListener>,
    address: &str,
) -> Result<Started, ExecError> {
    let attach = AttachContainerOptions {
        stream: true,
        stdout: true,
        stderr: true,
        ..AttachContainerOptions::default()
    };
    let attached = docker
        .attach_container(id, Some(attach))
        .await
        .map_err(|e| engine_error(address, "attaching to the container", e))?;
    docker
        .start_container(id, None::<StartContainerOptions>)
        .await
        .map_err(|e| engine_error(address, "starting the container", e))?;
    let relay = match (listener, spec.port) {
        (Some(listener), Some(port)) => {
            let inspect = docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .map_err(|e| engine_error(address, "inspecting the container", e))?;
            let target =
                relay::container_address(&inspect, spec.network.mode(), port).ok_or_else(|| {
                    ExecError::Spawn(format!(
                        "the container has no address on {} to publish port {port} from",
                        spec.network.mode()
                    ))
                })?;
            Some(relay::spawn(listener, target))
        }
        _ => None,
    };
    Ok((attached.output, relay))
}

/// Creates [`INTERNAL_NETWORK`] unless it exists: internal (no route out), no traffic between
/// its containers.
async fn ensure_internal_network(docker: &Docker) -> Result<(), bollard::errors::Error> {
    if docker
        .inspect_network(INTERNAL_NETWORK, None::<InspectNetworkOptions>)
        .await
        .is_ok()
    {
        return Ok(());
    }
    let request = NetworkCreateRequest {
        name: INTERNAL_NETWORK.to_owned(),
        driver: Some("bridge".to_owned()),
        internal: Some(true),
        options: Some(HashMap::from([(
            "com.docker.network.bridge.enable_icc".to_owned(),
            "false".to_owned(),
        )])),
        labels: Some(HashMap::from([(
            LABEL_MANAGED.to_owned(),
            "true".to_owned(),
        )])),
        ..NetworkCreateRequest::default()
    };
    match docker.create_network(request).await {
        Ok(_) => Ok(()),
        // Created by another launch meanwhile.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A failed request: the engine's answer is a refusal; anything else means it went away.
fn engine_error(address: &str, doing: &str, e: bollard::errors::Error) -> ExecError {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => {
            ExecError::Spawn(format!("{doing}: the engine refused: {message}"))
        }
        other => engine::Unreachable::new(address, other).error(),
    }
}

/// A failed create: a missing image is named, never pulled.
fn create_error(address: &str, image: &str, e: bollard::errors::Error) -> ExecError {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            message,
        } if message.contains("image") => ExecError::ImageMissing {
            image: image.to_owned(),
            remedy: format!(
                "outpost never pulls images; the machine's owner can build or load it \
                 (`docker build`, `docker load`, or `docker pull {image}` where a registry is \
                 reachable)"
            ),
        },
        other => engine_error(address, "creating the container", other),
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
        let runtime = &self.runtime;
        // A scoped thread: the runtime cannot be blocked on from inside an async context.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                runtime.block_on(async {
                    for id in &ids {
                        let _ = run::remove(&connected.docker, id).await;
                    }
                })
            });
        });
    }
}
