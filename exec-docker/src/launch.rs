//! From a [`Launch`] to a running container: the isolation spec, create, attach, start, the
//! port relay when a service has a port — and, if any step fails after the create was sent,
//! the container's removal before the error is returned.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Instant;

use bollard::Docker;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, InspectContainerOptions, StartContainerOptions,
};
use outpost_core::executor::{ExecError, Launch};
use outpost_core::manifest::Lifecycle;
use outpost_core::wire::Environment;

use crate::engine::{engine_error, may_have_happened};
use crate::run::{self, Driver, Streams};
use crate::spec::{ContainerSpec, Network, container_spec};
use crate::{DockerExecutor, DockerRun, cleanup, relay};

impl DockerExecutor {
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
            let listener = match spec.port {
                Some(port) => Some(relay::bind(port).await.map_err(|e| {
                    ExecError::Spawn(format!("the service's port 127.0.0.1:{port}: {e}"))
                })?),
                None => None,
            };
            let options = CreateContainerOptions {
                name: Some(name.clone()),
                ..CreateContainerOptions::default()
            };
            let id = match docker
                .create_container(Some(options), spec.body.clone())
                .await
            {
                Ok(created) => created.id,
                Err(e) => {
                    // The answer may be what was lost: remove by name what may exist.
                    if may_have_happened(&e) {
                        let _ = cleanup::remove(&docker, &name).await;
                    }
                    return Err(create_error(&address, &image, e));
                }
            };
            if let Ok(mut live) = live.lock() {
                live.insert(id.clone());
            }
            let started = start_container(&docker, &id, &spec, listener, &address).await;
            match started {
                Ok((output, relay)) => Ok((id, output, relay)),
                Err(e) => {
                    if cleanup::remove(&docker, &id).await.is_ok()
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
/// starts its relay (see [`relay_target`]).
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
            Some(relay::spawn(
                listener,
                relay_target(&inspect, spec.network, port)?,
            ))
        }
        _ => None,
    };
    Ok((attached.output, relay))
}

/// Where the relay of a service's `port` connects: into the container's own network namespace
/// when it has no network, to its bridge address otherwise.
fn relay_target(
    inspect: &bollard::models::ContainerInspectResponse,
    network: Network,
    port: u16,
) -> Result<relay::Target, ExecError> {
    if network == Network::Bridge {
        return relay::container_address(inspect, network.mode(), port)
            .map(relay::Target::Address)
            .ok_or_else(|| {
                ExecError::Spawn(format!(
                    "the container has no bridge address to publish port {port} from"
                ))
            });
    }
    let pid = relay::container_pid(inspect)
        .ok_or_else(|| ExecError::Spawn("the container has no running process".into()))?;
    relay::Connector::enter(pid, port)
        .map(relay::Target::Namespace)
        .map_err(|e| {
            ExecError::Spawn(format!(
                "publishing port {port} of a container without network means joining its \
                 network namespace, which failed ({e}); the daemon needs root for that, or the \
                 grant's egress `all` puts the container on a network the host can reach"
            ))
        })
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
