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
use outpost_core::executor::{CapturedOutput, ExecError, Launch};
use outpost_core::manifest::Lifecycle;
use outpost_core::wire::Environment;

use crate::engine::{engine_error, may_have_happened};
use crate::run::{self, Driver};
use crate::spec::{ContainerSpec, Network, container_spec};
use crate::{DockerExecutor, DockerRun, cleanup, egress, relay};

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
        let mut spec = container_spec(&launch, &self.settings)?;
        let name = format!(
            "outpost-{}-{}-{}",
            manifest.name,
            std::process::id(),
            self.next_name.fetch_add(1, Ordering::Relaxed)
        );
        let image = spec.body.image.clone().unwrap_or_default();
        let cap = usize::try_from(manifest.limits.output_max_bytes).unwrap_or(usize::MAX);
        let streams = Arc::new(Mutex::new(CapturedOutput::new(cap)));
        let docker = connected.docker;
        let address = self.address.clone();
        let live = self.live.clone();

        let (id, output, relay, gate) = self.runtime.block_on(async {
            // An allowlist: the holder of the run's network and its gate, before the run.
            let gate = if spec.network == Network::Gated {
                let labels = spec.body.labels.clone().unwrap_or_default();
                let gate =
                    egress::open(&docker, &launch, &image, labels, &name, &address, &live).await?;
                if let Some(host) = spec.body.host_config.as_mut() {
                    host.network_mode = Some(format!("container:{}", gate.holder));
                }
                Some(gate)
            } else {
                None
            };
            let close_gate = |gate: Option<egress::RunGate>| {
                let (docker, live) = (docker.clone(), live.clone());
                async move {
                    if let Some(gate) = gate {
                        let holder = gate.holder.clone();
                        if gate.close(&docker).await.is_ok()
                            && let Ok(mut live) = live.lock()
                        {
                            live.remove(&holder);
                        }
                    }
                }
            };
            let listener = match spec.port {
                Some(port) => Some((
                    relay::bind(port).await.map_err(|e| {
                        ExecError::Spawn(format!("the service's port 127.0.0.1:{port}: {e}"))
                    })?,
                    port,
                )),
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
                    close_gate(gate).await;
                    return Err(create_error(&address, &image, e));
                }
            };
            if let Ok(mut live) = live.lock() {
                live.insert(id.clone());
            }
            let started = start_container(&docker, &id, &spec, listener, &address).await;
            match started {
                Ok((output, relay)) => Ok((id, output, relay, gate)),
                Err(e) => {
                    if cleanup::remove(&docker, &id).await.is_ok()
                        && let Ok(mut live) = live.lock()
                    {
                        live.remove(&id);
                    }
                    close_gate(gate).await;
                    Err(e)
                }
            }
        })?;

        let setup = begun.elapsed();
        let deadline = (manifest.lifecycle != Lifecycle::Persistent)
            .then(|| tokio::time::Instant::from_std(begun + launch.timeout));
        let (cancel, cancel_rx) = tokio::sync::watch::channel(false);
        let (report, heard) = mpsc::channel();
        let report = Arc::new(report);
        let tell = Arc::downgrade(&report);
        let driver = Driver {
            docker,
            id: id.clone(),
            streams: streams.clone(),
            deadline,
            cancel: cancel_rx,
            grace_secs: self.settings.grace_secs,
            memory_mb: manifest.limits.memory_mb,
            started: Instant::now(),
            setup,
            live: self.live.clone(),
            relay,
            gate,
        };
        self.runtime.spawn(driver.drive(output, report));
        Ok(DockerRun {
            run_id: launch.run_id.into_string(),
            container_id: id,
            streams,
            heard,
            tell,
            unheard: Arc::default(),
            cancel: Arc::new(cancel),
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
    listener: Option<(tokio::net::TcpListener, u16)>,
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
    let relay = match listener {
        Some((listener, port)) => {
            let target = relay_target(docker, id, spec.network, port, address).await?;
            Some(relay::spawn(listener, target))
        }
        None => None,
    };
    Ok((attached.output, relay))
}

/// Where the relay of a service's `port` connects: into the container's own network namespace
/// when it has no network, to its bridge address otherwise. Joining a namespace needs the
/// engine on this machine (a local socket) and root; the namespace is checked to be the
/// container's after it is opened, so a pid reused meanwhile is never joined.
async fn relay_target(
    docker: &Docker,
    id: &str,
    network: Network,
    port: u16,
    address: &str,
) -> Result<relay::Target, ExecError> {
    let inspect = || async {
        docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| engine_error(address, "inspecting the container", e))
    };
    let refused = |why: String| {
        ExecError::Spawn(format!(
            "publishing port {port} of a container without network means joining its network \
             namespace, which {why}; the grant's egress `all` puts the container on a network \
             the host can reach instead"
        ))
    };
    let before = inspect().await?;
    if network == Network::Bridge {
        return relay::container_address(&before, network.mode(), port)
            .map(relay::Target::Address)
            .ok_or_else(|| {
                ExecError::Spawn(format!(
                    "the container has no bridge address to publish port {port} from"
                ))
            });
    }
    if !address.starts_with("unix://") {
        return Err(refused(format!(
            "is not possible with a remote engine ({address})"
        )));
    }
    let pid = relay::container_pid(&before)
        .ok_or_else(|| ExecError::Spawn("the container has no running process".into()))?;
    let namespace = relay::open_namespace(pid).map_err(|e| refused(format!("failed ({e})")))?;
    if relay::container_pid(&inspect().await?) != Some(pid) {
        return Err(ExecError::Spawn(
            "the container stopped while its port was being published".into(),
        ));
    }
    relay::Connector::enter(namespace, port)
        .map(relay::Target::Namespace)
        .map_err(|e| refused(format!("failed ({e}); the daemon needs root for that")))
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
