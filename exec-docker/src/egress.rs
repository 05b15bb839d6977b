//! A container's egress allowlist: the run's network namespace holds nothing but loopback and
//! the egress gate's port.
//!
//! Before the run's container starts, a **holder** container of the same image is started
//! with no network but loopback; its only process is the host's `sleep`, run through the
//! host's dynamic loader and C library mounted read-only under [`HOLD_DIR`] (so it needs
//! nothing of the image). The executor joins the holder's network namespace on a thread of
//! its own (`setns`, which needs root and a local engine), binds `127.0.0.1:3128` ([`outpost_host::sandbox::PROXY_PORT`]) there, and
//! serves the egress gate ([`outpost_host::Gate`]) on that socket from the host. The run's
//! container then joins the holder's network (`container:<holder>`), offered the gate as
//! `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY`: the gate is listening before its first
//! instruction, and nothing else is reachable.
//!
//! This module owns the holder and the gate of a run; it never decides what the allowlist
//! holds (the grant does) and never widens a run's network.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, StartContainerOptions,
};
use outpost_core::executor::{ExecError, Launch};
use outpost_host::{Gate, GateEvent, GatePolicy};

use crate::engine::engine_error;
use crate::{cleanup, relay};

/// Where the holder finds the host's loader, C library and `sleep`.
pub(crate) const HOLD_DIR: &str = "/.outpost-hold";

/// The variables that offer the gate to the run, as the engine takes them.
pub(crate) fn proxy_env() -> Vec<String> {
    outpost_host::sandbox::proxy_env()
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect()
}

/// A run's gate and the holder of its network namespace; [`RunGate::close`] ends both.
pub(crate) struct RunGate {
    gate: Gate,
    /// The holder container's id.
    pub(crate) holder: String,
    /// The destinations the gate refused, in order.
    pub(crate) refused: Arc<Mutex<Vec<String>>>,
}

impl RunGate {
    /// Stops the gate and removes the holder.
    pub(crate) async fn close(self, docker: &Docker) -> Result<(), ExecError> {
        self.gate.stop();
        cleanup::remove(docker, &self.holder).await
    }
}

/// The host files the holder runs: the dynamic loader, the C library's folder and `sleep`.
struct HostSleep {
    loader: PathBuf,
    libraries: PathBuf,
    sleep: PathBuf,
}

impl HostSleep {
    fn find() -> Result<Self, String> {
        let first = |candidates: &[&str]| {
            candidates
                .iter()
                .map(Path::new)
                .find(|p| p.exists())
                .and_then(|p| p.canonicalize().ok())
        };
        let loader = first(&["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"])
            .ok_or("this machine has no dynamic loader where outpost looks for one")?;
        let libc = first(&[
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
            "/usr/lib64/libc.so.6",
        ])
        .ok_or("this machine has no C library where outpost looks for one")?;
        let libraries = libc
            .parent()
            .map(Path::to_path_buf)
            .ok_or("the C library has no folder")?;
        let sleep = first(&["/usr/bin/sleep", "/bin/sleep"]).ok_or("this machine has no sleep")?;
        Ok(HostSleep {
            loader,
            libraries,
            sleep,
        })
    }
}

/// Starts the holder for `launch` (image `image`, labels `labels` so a crash's leftovers are
/// removed like any container of ours) and serves the gate in its network namespace.
/// `address` is the engine's, for messages; `live` learns the holder as it learns containers.
pub(crate) async fn open(
    docker: &Docker,
    launch: &Launch,
    image: &str,
    labels: std::collections::HashMap<String, String>,
    name: &str,
    address: &str,
    live: &crate::Live,
) -> Result<RunGate, ExecError> {
    let refuse = |why: String| {
        ExecError::EgressRefused(format!(
            "the context's egress allowlist cannot be held for this container: {why}; the \
             machine's owner can set the context's egress to `all`, or the capability can run \
             without `connect:` permissions"
        ))
    };
    if !address.starts_with("unix://") {
        return Err(refuse(format!(
            "the gate must join the container's network namespace, which a remote engine ({address}) does not allow"
        )));
    }
    let host = HostSleep::find().map_err(|why| refuse(why.to_owned()))?;
    let bind =
        |host_path: &Path, guest: &str| format!("{}:{HOLD_DIR}/{guest}:ro", host_path.display());
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        entrypoint: Some(vec![format!("{HOLD_DIR}/ld.so")]),
        cmd: Some(vec![
            "--library-path".into(),
            format!("{HOLD_DIR}/lib"),
            format!("{HOLD_DIR}/sleep"),
            "infinity".into(),
        ]),
        user: Some("65534:65534".into()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            binds: Some(vec![
                bind(&host.loader, "ld.so"),
                bind(&host.libraries, "lib"),
                bind(&host.sleep, "sleep"),
            ]),
            memory: Some(16 << 20),
            pids_limit: Some(4),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            privileged: Some(false),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let options = CreateContainerOptions {
        name: Some(format!("{name}-egress")),
        ..CreateContainerOptions::default()
    };
    let holder = docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| engine_error(address, "creating the egress holder", e))?
        .id;
    if let Ok(mut live) = live.lock() {
        live.insert(holder.clone());
    }
    match serve(docker, launch, &holder, address).await {
        Ok((gate, refused)) => Ok(RunGate {
            gate,
            holder,
            refused,
        }),
        Err(e) => {
            if cleanup::remove(docker, &holder).await.is_ok()
                && let Ok(mut live) = live.lock()
            {
                live.remove(&holder);
            }
            Err(e)
        }
    }
}

/// Starts the holder, binds the gate's port in its network namespace and serves the gate.
async fn serve(
    docker: &Docker,
    launch: &Launch,
    holder: &str,
    address: &str,
) -> Result<(Gate, Arc<Mutex<Vec<String>>>), ExecError> {
    docker
        .start_container(holder, None::<StartContainerOptions>)
        .await
        .map_err(|e| engine_error(address, "starting the egress holder", e))?;
    let inspect = docker
        .inspect_container(holder, None::<InspectContainerOptions>)
        .await
        .map_err(|e| engine_error(address, "inspecting the egress holder", e))?;
    let pid = relay::container_pid(&inspect)
        .ok_or_else(|| ExecError::Spawn("the egress holder has no running process".into()))?;
    let namespace = relay::open_namespace(pid)
        .map_err(|e| ExecError::Spawn(format!("the egress holder's network namespace: {e}")))?;
    let listener = tokio::task::spawn_blocking(move || listen_in(namespace))
        .await
        .map_err(|e| ExecError::Spawn(e.to_string()))?
        .map_err(|e| {
            ExecError::EgressRefused(format!(
                "the egress gate cannot listen in the container's network namespace ({e}: joining it needs root); the machine's owner can set the context's egress to `all`"
            ))
        })?;
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = refused.clone();
    let report = Arc::new(move |event: GateEvent| {
        if let (GateEvent::Refused { destination, .. }, Ok(mut kept)) = (event, kept.lock()) {
            kept.push(destination);
        }
    });
    let policy = GatePolicy {
        egress: launch.egress.clone(),
        context: launch.context.clone(),
    };
    let gate = Gate::start(listener, policy, report)
        .map_err(|e| ExecError::Spawn(format!("the egress gate: {e}")))?;
    Ok((gate, refused))
}

/// On a thread of its own: joins `namespace` and binds the gate's port there. The socket stays
/// in that namespace; the thread ends.
fn listen_in(namespace: std::fs::File) -> std::io::Result<TcpListener> {
    std::thread::Builder::new()
        .name("outpost-egress-bind".into())
        .spawn(move || {
            nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET)?;
            TcpListener::bind((Ipv4Addr::LOCALHOST, outpost_host::sandbox::PROXY_PORT))
        })?
        .join()
        .map_err(|_| std::io::Error::other("the namespace thread panicked"))?
}
