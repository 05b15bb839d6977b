//! What a container is allowed: the create request built from a [`Launch`].
//!
//! This module owns every isolation decision the executor makes, in one place:
//!
//! - the command: the manifest's `entry` (a command in the image) with `args` and the launch's
//!   extra arguments, replacing the image's entrypoint and command;
//! - the environment: the manifest's `env` only (the image keeps its own, like `PATH`);
//! - the folders: **only** the declared volumes, as bind mounts with their `ro`/`rw` mode, host
//!   paths canonicalized and checked against the run's mounts and the credential denylist;
//!   denylisted paths inside a read-only volume are masked (an empty read-only tmpfs over a
//!   folder, `/dev/null` over a file; a symlinked entry is masked where it really is), and a
//!   read-write volume holding one is refused;
//! - the network: none, unless the manifest asks for it with `connect:` permissions: the
//!   engine's bridge when the grant's egress is `all`, loopback and the egress gate when it is
//!   an allowlist ([`crate::egress`]); an egress `none` refuses it rather than widen
//!   anything; a persistent service's `port` is published by the
//!   executor's own relay, which needs no network in the container;
//! - the limits: memory (swap included), CPU and processes from the manifest's `limits`;
//! - the privileges: never privileged, every capability dropped, `no-new-privileges`, an init
//!   process that forwards signals and reaps zombies, restart policy `no`, no log driver
//!   (output is streamed over the attach connection and capped here, not stored by the
//!   engine).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountTmpfsOptions, MountType, RestartPolicy,
    RestartPolicyNameEnum,
};
use outpost_core::executor::{ExecError, Launch};
use outpost_core::manifest::PermissionVerb;
use outpost_core::wire::{Egress, FolderMode};

use crate::{LABEL_CAPABILITY, LABEL_MANAGED, LABEL_OWNER, LABEL_RUN};

/// Which network a container joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Network {
    /// No interface but loopback.
    None,
    /// The engine's default bridge: the network the grant's egress `all` allows.
    Bridge,
    /// Loopback and the egress gate only: the network of the run's holder
    /// ([`crate::egress`]), for the grant's egress allowlist.
    Gated,
}

impl Network {
    /// The engine's name for it.
    pub(crate) fn mode(self) -> &'static str {
        match self {
            // Until the holder exists; the launch then names `container:<holder>`.
            Network::None | Network::Gated => "none",
            Network::Bridge => "bridge",
        }
    }
}

/// A container to create.
#[derive(Debug, Clone)]
pub(crate) struct ContainerSpec {
    /// The engine's create request.
    pub(crate) body: ContainerCreateBody,
    /// Its network.
    pub(crate) network: Network,
    /// The port a persistent service listens on, relayed from the host's loopback.
    pub(crate) port: Option<u16>,
}

/// Settings that are the executor's, not the manifest's.
#[derive(Debug, Clone)]
pub(crate) struct SpecSettings {
    /// `uid:gid` the container's processes run as.
    pub(crate) user: String,
    /// How long a stop waits between SIGTERM and SIGKILL, in whole seconds.
    pub(crate) grace_secs: i32,
}

/// Builds the create request for `launch`, or says what the run may not have.
pub(crate) fn container_spec(
    launch: &Launch,
    settings: &SpecSettings,
) -> Result<ContainerSpec, ExecError> {
    let manifest = &launch.manifest;
    let image = manifest.docker_image.clone().ok_or_else(|| {
        ExecError::InvalidCapability("a docker capability must name its docker_image".into())
    })?;
    // The manifest only allows a port on a persistent service.
    let port = manifest.port;
    let network = network(launch)?;
    let (mounts, volumes) = mounts(launch)?;
    let working_dir = launch
        .cwd
        .as_deref()
        .map(|cwd| guest_cwd(cwd, &volumes))
        .transpose()?;

    let cmd: Vec<String> = manifest
        .args
        .iter()
        .chain(&launch.extra_args)
        .cloned()
        .collect();
    let limits = manifest.limits;
    let memory = i64::try_from(limits.memory_mb.saturating_mul(1 << 20)).unwrap_or(i64::MAX);
    let labels = HashMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_RUN.to_owned(), launch.run_id.to_string()),
        (LABEL_CAPABILITY.to_owned(), manifest.name.clone()),
        (LABEL_OWNER.to_owned(), crate::cleanup::owner()),
    ]);
    let host_config = HostConfig {
        network_mode: Some(network.mode().to_owned()),
        mounts: Some(mounts),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some(
            i64::try_from(limits.cpu_millicores.saturating_mul(1_000_000)).unwrap_or(i64::MAX),
        ),
        pids_limit: Some(i64::try_from(limits.pids_max).unwrap_or(i64::MAX)),
        privileged: Some(false),
        cap_drop: Some(vec!["ALL".to_owned()]),
        security_opt: Some(vec!["no-new-privileges".to_owned()]),
        init: Some(true),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        auto_remove: Some(false),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".to_owned()),
            config: None,
        }),
        ipc_mode: Some("private".to_owned()),
        ..HostConfig::default()
    };
    let body = ContainerCreateBody {
        image: Some(image),
        entrypoint: Some(vec![manifest.entry.clone()]),
        cmd: Some(cmd),
        env: Some({
            let mut env = environment(manifest, port);
            if network == Network::Gated {
                env.extend(crate::egress::proxy_env());
            }
            env
        }),
        user: Some(settings.user.clone()),
        working_dir,
        labels: Some(labels),
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        open_stdin: Some(false),
        // Not merely `network_mode: none` again: the engine then sets up no network sandbox
        // at all (the container still gets its own namespace with `lo`), which is measurably
        // faster to start.
        network_disabled: Some(network == Network::None),
        // A container on another's network exposes nothing of its own.
        exposed_ports: port
            .filter(|_| network != Network::Gated)
            .map(|p| vec![format!("{p}/tcp")]),
        stop_timeout: Some(i64::from(settings.grace_secs)),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    };
    Ok(ContainerSpec {
        body,
        network,
        port,
    })
}

/// The manifest's `env`, and for a service with a port `PORT` (as every environment passes
/// it) unless the manifest sets it.
fn environment(manifest: &outpost_core::manifest::Manifest, port: Option<u16>) -> Vec<String> {
    let mut env: Vec<String> = manifest
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if let Some(port) = port
        && !manifest.env.iter().any(|(k, _)| k == "PORT")
    {
        env.push(format!("PORT={port}"));
    }
    env
}

/// The network the manifest asks for and the grant allows.
fn network(launch: &Launch) -> Result<Network, ExecError> {
    let Some(asked) = launch
        .manifest
        .permissions
        .iter()
        .find(|p| p.verb == PermissionVerb::Connect)
    else {
        return Ok(Network::None);
    };
    let destination = asked.target.clone();
    match &launch.egress {
        Egress::All => Ok(Network::Bridge),
        Egress::None => Err(ExecError::EgressRefused(format!(
            "network access to `{destination}` was refused: this context's egress mode is `none`; \
             the machine's owner can allow it by setting the context's egress to `all` (a \
             container's network cannot be held to an allowlist)"
        ))),
        Egress::Allowlist { .. } => Ok(Network::Gated),
    }
}

/// A volume as mounted: its canonical host folder and where the container sees it.
struct Mounted {
    host: PathBuf,
    guest: String,
}

/// The bind mounts of the declared volumes, and the masks over denylisted paths inside them.
fn mounts(launch: &Launch) -> Result<(Vec<Mount>, Vec<Mounted>), ExecError> {
    let mut mounts = Vec::new();
    let mut volumes = Vec::new();
    for volume in &launch.manifest.volumes {
        let host = outpost_host::resolve_volume(launch, &volume.host, volume.mode)?;
        mounts.push(Mount {
            typ: Some(MountType::BIND),
            source: Some(host.display().to_string()),
            target: Some(volume.guest.clone()),
            read_only: Some(volume.mode == FolderMode::Ro),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..MountBindOptions::default()
            }),
            ..Mount::default()
        });
        mounts.extend(masks(launch, &host, &volume.guest, volume.mode)?);
        volumes.push(Mounted {
            host,
            guest: volume.guest.clone(),
        });
    }
    Ok((mounts, volumes))
}

/// Masks over the credential-denylist paths inside a read-only volume: each entry, and where
/// it really is when it is a symlink (a dotfile manager's `~/.ssh -> ~/dotfiles/ssh`), if that
/// lies inside the volume. A read-write volume holding any of them is refused: the container
/// could rename a folder out from under a mask, or create a path that is missing today.
fn masks(
    launch: &Launch,
    host: &Path,
    guest: &str,
    mode: FolderMode,
) -> Result<Vec<Mount>, ExecError> {
    let mut masks = Vec::new();
    for denied in launch.denylist.entries() {
        let entry = Path::new(denied.as_str());
        let resolved = entry.canonicalize().ok().filter(|r| r != entry);
        for path in std::iter::once(entry).chain(resolved.as_deref()) {
            let Ok(relative) = path.strip_prefix(host) else {
                continue;
            };
            if mode == FolderMode::Rw {
                return Err(ExecError::PathRefused {
                    path: host.display().to_string(),
                    reason: format!(
                        "holds the credential path {}; a read-write volume could move or create \
                         it: grant a narrower folder or mount it read-only",
                        path.display()
                    ),
                });
            }
            let target = format!("{}/{}", guest.trim_end_matches('/'), relative.display());
            if !masks
                .iter()
                .any(|m: &Mount| m.target.as_deref() == Some(target.as_str()))
            {
                masks.extend(mask(path, target));
            }
        }
    }
    Ok(masks)
}

/// What hides `path` at `target`: an empty read-only tmpfs over a folder, `/dev/null` over
/// anything else. A symlink is not masked itself (a mount would follow it inside the
/// container); its target is, when it is inside a volume. A missing path needs nothing.
fn mask(path: &Path, target: String) -> Option<Mount> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.is_symlink() {
        return None;
    }
    Some(if meta.is_dir() {
        Mount {
            typ: Some(MountType::TMPFS),
            target: Some(target),
            read_only: Some(true),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: Some(4096),
                mode: Some(0o500),
                ..MountTmpfsOptions::default()
            }),
            ..Mount::default()
        }
    } else {
        Mount {
            typ: Some(MountType::BIND),
            source: Some("/dev/null".to_owned()),
            target: Some(target),
            read_only: Some(true),
            ..Mount::default()
        }
    })
}

/// The container's working directory for a host `cwd` inside one of the volumes.
fn guest_cwd(cwd: &Path, volumes: &[Mounted]) -> Result<String, ExecError> {
    let cwd = cwd.canonicalize().map_err(|e| ExecError::PathRefused {
        path: cwd.display().to_string(),
        reason: format!("cannot be resolved: {e}"),
    })?;
    volumes
        .iter()
        .find_map(|v| {
            let rest = cwd.strip_prefix(&v.host).ok()?;
            Some(if rest.as_os_str().is_empty() {
                v.guest.clone()
            } else {
                format!("{}/{}", v.guest.trim_end_matches('/'), rest.display())
            })
        })
        .ok_or_else(|| ExecError::PathRefused {
            path: cwd.display().to_string(),
            reason: "a container's working directory must be inside one of its volumes".into(),
        })
}

#[cfg(test)]
mod tests;
