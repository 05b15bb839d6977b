//! From the daemon's [`Execute`] command to an executor's [`Launch`], and the owner's own
//! `outpost run` mounts.
//!
//! This module owns three steps a host takes before a run starts: writing the capability's
//! folder from the frame ([`materialize`]), resolving the grant's folders with `realpath` and
//! intersecting them with the machine owner's [`LocalPolicy`] minus the credential denylist
//! ([`grant_mounts`], over core's [`effective_mounts`]), and assembling the [`Launch`]
//! ([`launch_from_execute`]): the grant's egress, the time left before the run's deadline.
//! It never starts a run and never widens the grant or the policy: a folder that cannot be
//! resolved is skipped, never guessed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use outpost_core::daemon::{Capability, Execute};
use outpost_core::executor::Launch;
use outpost_core::grant::{
    CanonicalPath, CredentialDenylist, LocalFolder, LocalPolicy, Mount, RunKind, effective_mounts,
    must_confine,
};
use outpost_core::manifest::{
    Interpreter, MANIFEST_FILE, Manifest, ManifestError, check_relative_path,
};
use outpost_core::time::Instant;
use outpost_core::wire::{CapabilitySource, Environment, FolderGrant, FolderMode, decode_bundle};

use crate::paths::{HostPathError, resolve, volume_path};

/// Why an [`Execute`] cannot become a [`Launch`].
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The run id cannot name a folder (empty, `/`, `.`, `..`).
    #[error("run id {0:?} cannot name a folder")]
    UnsafeRunId(String),
    /// A capability named by digest reached the launch without its bundle (the host must
    /// fetch it first).
    #[error("the capability {sha256} is named by digest and its bundle was not fetched")]
    BundleUnsupported {
        /// The bundle's digest.
        sha256: String,
    },
    /// The fetched bundle is not a bundle (PROTOCOL §11.4).
    #[error("the bundle {sha256} does not read: {reason}")]
    BadBundle {
        /// The bundle's checked digest.
        sha256: String,
        /// What is wrong.
        reason: String,
    },
    /// An inline file has a path outside the folder or content that is not base64url.
    #[error("capability file {path:?} {reason}")]
    BadFile {
        /// The path the frame gave.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The manifest does not parse or validate.
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    /// The frame and the manifest name different environments.
    #[error("the run asks for {} but the manifest declares {}", .frame.as_str(), .manifest.as_str())]
    EnvironmentMismatch {
        /// What the frame says.
        frame: Environment,
        /// What the manifest declares.
        manifest: Environment,
    },
    /// The grant does not let runs use this environment.
    #[error("the grant does not allow {} runs", .0.as_str())]
    EnvironmentNotGranted(Environment),
    /// Writing the capability folder failed.
    #[error("writing the capability folder {}: {source}", .path.display())]
    Write {
        /// The file or folder being written.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The capability folder's path cannot be used.
    #[error(transparent)]
    Path(#[from] HostPathError),
}

impl LaunchError {
    /// The stable error code a run failed with.
    pub fn code(&self) -> &'static str {
        match self {
            LaunchError::Manifest(e) => e.code(),
            LaunchError::EnvironmentNotGranted(_) => "environment_not_granted",
            LaunchError::Write { .. } => "spawn_failed",
            LaunchError::Path(_) => "path_refused",
            LaunchError::UnsafeRunId(_)
            | LaunchError::BundleUnsupported { .. }
            | LaunchError::BadBundle { .. }
            | LaunchError::BadFile { .. }
            | LaunchError::EnvironmentMismatch { .. } => "invalid_capability",
        }
    }
}

/// What a host brings to turn an [`Execute`] into a [`Launch`].
#[derive(Debug, Clone, Copy)]
pub struct LaunchContext<'a> {
    /// Where capability folders are written, one per run id
    /// ([`crate::OwnerFolders::runs_dir`]).
    pub runs_dir: &'a Path,
    /// The machine owner's local policy.
    pub local: &'a LocalPolicy,
    /// Paths no run may see.
    pub denylist: &'a CredentialDenylist,
    /// The monotonic time now, on the clock the daemon machine is fed.
    pub now: Instant,
    /// The machine's context (name or id), for the owner's fix in the gate's refusals.
    pub context: &'a str,
}

/// A grant folder that yields no mount because this machine cannot resolve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFolder {
    /// The path as the grant wrote it.
    pub path: String,
    /// Why it was skipped.
    pub reason: String,
}

/// A launch ready for [`outpost_core::executor::run_capability`] or the service table.
#[derive(Debug, Clone)]
pub struct PreparedLaunch {
    /// What to hand the executor: mounts, egress, working directory and confinement decided.
    pub launch: Launch,
    /// Grant folders that could not be resolved here (worth a log line; never mounted).
    pub skipped: Vec<SkippedFolder>,
}

/// Turns the daemon's [`Execute`] into a [`Launch`]: the capability written to
/// `runs_dir/<run id>` (or, for a wasm capability without volumes, whose executor reads
/// nothing of the folder but the entry, kept in memory as [`Launch::entry_bytes`]: no files
/// to create and remove per run), mounts = grant ∩ local policy minus the denylist (none for a shared
/// run), egress from the grant, and a timeout of the manifest's `timeout_ms` or the time left
/// before the run's deadline, whichever is shorter (zero when it has passed: the run then
/// times out at once and is reported so). It is sandboxed unless the owner's policy lets an
/// operator's run whose manifest says `confine: false` opt out.
pub fn launch_from_execute(
    execute: &Execute,
    cx: &LaunchContext<'_>,
) -> Result<PreparedLaunch, LaunchError> {
    if !execute.grant.allows(execute.environment) {
        return Err(LaunchError::EnvironmentNotGranted(execute.environment));
    }
    let capability = Unpacked::check(&execute.capability, &execute.run_id)?;
    if capability.manifest.environment != execute.environment {
        return Err(LaunchError::EnvironmentMismatch {
            frame: execute.environment,
            manifest: capability.manifest.environment,
        });
    }
    let Materialized {
        dir,
        manifest,
        entry_bytes,
    } = capability.materialize(cx.runs_dir, &execute.run_id)?;
    let (mounts, skipped) = if execute.shared_run {
        // Shared runs (not the operator's) get no folders.
        (Vec::new(), Vec::new())
    } else {
        grant_mounts(&execute.grant.fs, cx.local, cx.denylist)
    };
    let left = execute.deadline.saturating_duration_since(cx.now);
    let timeout = Duration::from_millis(manifest.limits.timeout_ms).min(left);
    let confined = must_confine(
        cx.local.confinement,
        if execute.shared_run {
            RunKind::Shared
        } else {
            RunKind::Operator
        },
        manifest.confine,
    );
    Ok(PreparedLaunch {
        launch: Launch {
            run_id: execute.run_id.clone(),
            dir,
            entry_bytes,
            manifest,
            extra_args: Vec::new(),
            mounts,
            denylist: cx.denylist.clone(),
            cwd: None,
            timeout,
            egress: execute.grant.egress.clone(),
            confined,
            context: cx.context.to_owned(),
        },
        skipped,
    })
}

/// The grant's folders, resolved with `realpath`, intersected with the local policy, minus
/// the denylist. A folder that is relative, missing or not UTF-8 once resolved is skipped.
pub fn grant_mounts(
    grant: &[FolderGrant],
    local: &LocalPolicy,
    denylist: &CredentialDenylist,
) -> (Vec<Mount>, Vec<SkippedFolder>) {
    let mut granted: Vec<(CanonicalPath, FolderMode)> = Vec::new();
    let mut skipped = Vec::new();
    for folder in grant {
        let path = Path::new(&folder.path);
        let resolved = if path.is_absolute() {
            resolve(path).map_err(|e| e.to_string())
        } else {
            Err("is not an absolute path".to_owned())
        };
        match resolved {
            Ok((_, canonical)) => granted.push((canonical, folder.mode)),
            Err(reason) => skipped.push(SkippedFolder {
                path: folder.path.clone(),
                reason,
            }),
        }
    }
    (effective_mounts(&granted, local, denylist), skipped)
}

/// The mounts of the owner's own run (`outpost run DIR`): typing the command grants, and
/// locally allows, exactly the folders the manifest declares, with their modes; the same
/// intersection and denylist as a daemon run then apply. Unlike a grant, a declared volume
/// that cannot be resolved is an error: the owner named it.
pub fn owner_mounts(
    dir: &Path,
    manifest: &Manifest,
    denylist: &CredentialDenylist,
) -> Result<Vec<Mount>, HostPathError> {
    let mut folders = Vec::new();
    for volume in &manifest.volumes {
        let (_, path) = resolve(&volume_path(dir, &volume.host))?;
        folders.push((path, volume.mode));
    }
    let local = LocalPolicy {
        daemon_control: None,
        record_terminal_input: false,
        folders: folders
            .iter()
            .map(|(path, mode)| LocalFolder {
                path: path.clone(),
                mode: *mode,
            })
            .collect(),
        commands_enabled: false,
        auto_update: None,
        confinement: Default::default(),
    };
    Ok(effective_mounts(&folders, &local, denylist))
}

/// A capability ready for its [`Launch`]: its folder and manifest, or its entry in memory.
#[derive(Debug, Clone)]
pub struct Materialized {
    /// The folder, canonical: `runs_dir/<run_id>`, which does not exist when `entry_bytes`
    /// is set.
    pub dir: PathBuf,
    /// The capability's manifest file, parsed and validated: environment, entry, permissions,
    /// limits.
    pub manifest: Manifest,
    /// The entry's bytes, for a capability whose executor reads nothing else of the folder
    /// (wasm without volumes): then nothing is written ([`Launch::entry_bytes`]).
    pub entry_bytes: Option<std::sync::Arc<[u8]>>,
}

/// Writes the capability of run `run_id` to `runs_dir/<run_id>` (replacing what an earlier
/// attempt left there) — unless only its entry will ever be read (a wasm capability without
/// volumes), which is then kept in memory and nothing is written. The manifest is validated
/// and every path checked before anything is written. A manifest's `interpreter: none` entry,
/// and a pty capability's entry file, are made executable.
pub fn materialize(
    capability: &Capability,
    runs_dir: &Path,
    run_id: &str,
) -> Result<Materialized, LaunchError> {
    Unpacked::check(capability, run_id)?.materialize(runs_dir, run_id)
}

/// Whether the manifest's entry is executed itself (`interpreter: none`, or a pty program)
/// rather than read by a shell, so its file must be executable.
fn starts_directly(manifest: &Manifest) -> bool {
    manifest.interpreter == Interpreter::None || manifest.environment == Environment::Pty
}

/// A capability checked and decoded, not yet written.
struct Unpacked {
    text: String,
    manifest: Manifest,
    files: Vec<(String, Vec<u8>)>,
}

impl Unpacked {
    fn check(capability: &Capability, run_id: &str) -> Result<Self, LaunchError> {
        let bundled;
        let (text, files) = match capability {
            Capability::Inline(CapabilitySource::Inline { manifest, files }) => (manifest, files),
            Capability::Bundle { sha256, bytes } => {
                // The core checked the digest; the bundle carries the inline form.
                bundled = decode_bundle(bytes).map_err(|e| LaunchError::BadBundle {
                    sha256: sha256.clone(),
                    reason: e.to_string(),
                })?;
                match &bundled {
                    CapabilitySource::Inline { manifest, files } => (manifest, files),
                    CapabilitySource::Digest { .. } => {
                        return Err(LaunchError::BadBundle {
                            sha256: sha256.clone(),
                            reason: "a bundle cannot name another bundle".into(),
                        });
                    }
                }
            }
            Capability::Inline(CapabilitySource::Digest { sha256, .. }) => {
                return Err(LaunchError::BundleUnsupported {
                    sha256: sha256.clone(),
                });
            }
        };
        if run_id.contains('/') || check_relative_path(run_id).is_err() {
            return Err(LaunchError::UnsafeRunId(run_id.to_owned()));
        }
        let manifest = crate::parse_manifest(text)?;
        let mut decoded = Vec::with_capacity(files.len());
        for file in files {
            let bad = |reason: String| LaunchError::BadFile {
                path: file.path.clone(),
                reason,
            };
            check_relative_path(&file.path).map_err(bad)?;
            if file.path == MANIFEST_FILE {
                return Err(bad("would replace the manifest".into()));
            }
            let bytes = outpost_core::b64::decode(&file.content_b64)
                .map_err(|e| bad(format!("is not base64url: {e}")))?;
            decoded.push((file.path.clone(), bytes));
        }
        Ok(Self {
            text: text.clone(),
            manifest,
            files: decoded,
        })
    }

    /// The entry's bytes, when nothing but the entry of this capability is ever read: a wasm
    /// module with no volumes (WASI preopens only the volumes), named exactly by one of the
    /// files. Anything else is written to its folder.
    fn entry_in_memory(&self) -> Option<std::sync::Arc<[u8]>> {
        if self.manifest.environment != Environment::Wasm || !self.manifest.volumes.is_empty() {
            return None;
        }
        self.files
            .iter()
            .find(|(path, _)| *path == self.manifest.entry)
            .map(|(_, bytes)| std::sync::Arc::from(bytes.as_slice()))
    }

    fn materialize(self, runs_dir: &Path, run_id: &str) -> Result<Materialized, LaunchError> {
        if let Some(entry) = self.entry_in_memory() {
            return Ok(Materialized {
                dir: runs_dir.join(run_id),
                manifest: self.manifest,
                entry_bytes: Some(entry),
            });
        }
        let (dir, manifest) = self.write(runs_dir, run_id)?;
        Ok(Materialized {
            dir,
            manifest,
            entry_bytes: None,
        })
    }

    fn write(self, runs_dir: &Path, run_id: &str) -> Result<(PathBuf, Manifest), LaunchError> {
        let dir = runs_dir.join(run_id);
        let write = |path: &Path, result: std::io::Result<()>| {
            result.map_err(|source| LaunchError::Write {
                path: path.to_path_buf(),
                source,
            })
        };
        if dir.exists() {
            write(&dir, std::fs::remove_dir_all(&dir))?;
        }
        write(&dir, std::fs::create_dir_all(&dir))?;
        let manifest_path = dir.join(MANIFEST_FILE);
        write(&manifest_path, std::fs::write(&manifest_path, self.text))?;
        for (relative, bytes) in self.files {
            let path = dir.join(&relative);
            if let Some(parent) = path.parent() {
                write(parent, std::fs::create_dir_all(parent))?;
            }
            write(&path, std::fs::write(&path, bytes))?;
            if starts_directly(&self.manifest) && relative == self.manifest.entry {
                use std::os::unix::fs::PermissionsExt as _;
                let executable = std::fs::Permissions::from_mode(0o755);
                write(&path, std::fs::set_permissions(&path, executable))?;
            }
        }
        let (dir, _) = resolve(&dir)?;
        Ok((dir, self.manifest))
    }
}

#[cfg(test)]
mod tests;
