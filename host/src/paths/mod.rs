//! Where a run's entry, working directory and volumes may be on this machine.
//!
//! This module owns the step from a host path (`std::path::Path`, any bytes) to a
//! [`CanonicalPath`] core can decide on: `realpath` first (symlinks followed), then a strict
//! UTF-8 check. A path that is not valid UTF-8 is refused with [`HostPathError::NotUtf8`];
//! it is never rewritten (a lossy conversion would let core decide on a different path than
//! the one the run would use). It never decides a grant itself: [`check_path`] and the
//! credential denylist in core do.

use std::path::{Path, PathBuf};

use outpost_core::executor::{ExecError, Launch};
use outpost_core::grant::{
    Access, CanonicalPath, CredentialDenylist, Mount, PathError, check_path,
};
use outpost_core::manifest::check_relative_path;
use outpost_core::wire::FolderMode;

/// Why a host path cannot be handed to core.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPathError {
    /// The path (after `realpath`) is not valid UTF-8; outpost refuses it rather than decide
    /// on a rewritten copy.
    #[error("path {} is not valid UTF-8; rename it or grant a folder whose path is", .0.display())]
    NotUtf8(PathBuf),
    /// `realpath` failed (missing, unreadable, a loop).
    #[error("path {} cannot be resolved: {reason}", .path.display())]
    Unresolvable {
        /// The path as given.
        path: PathBuf,
        /// What the file system said.
        reason: String,
    },
    /// The resolved path is not canonical as core requires (relative, `..`, a NUL byte).
    #[error("path {}: {source}", .path.display())]
    NotCanonical {
        /// The path as `realpath` returned it, which core refuses.
        path: PathBuf,
        /// Core's reason.
        source: PathError,
    },
}

impl HostPathError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            HostPathError::NotUtf8(path)
            | HostPathError::Unresolvable { path, .. }
            | HostPathError::NotCanonical { path, .. } => path,
        }
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            HostPathError::NotUtf8(_) => "path_not_utf8",
            HostPathError::Unresolvable { .. } => "path_unresolvable",
            HostPathError::NotCanonical { source, .. } => source.code(),
        }
    }
}

impl From<HostPathError> for ExecError {
    /// A path an executor cannot use is a `path_refused` for the run.
    fn from(e: HostPathError) -> Self {
        ExecError::PathRefused {
            path: e.path().display().to_string(),
            reason: match &e {
                HostPathError::NotUtf8(_) => "is not valid UTF-8".to_owned(),
                HostPathError::Unresolvable { reason, .. } => {
                    format!("cannot be resolved: {reason}")
                }
                HostPathError::NotCanonical { source, .. } => source.to_string(),
            },
        }
    }
}

/// `path` as core's [`CanonicalPath`], without touching the file system: the caller has
/// already resolved it. Refuses non-UTF-8 and non-canonical paths.
pub fn as_canonical(path: &Path) -> Result<CanonicalPath, HostPathError> {
    let text = path
        .to_str()
        .ok_or_else(|| HostPathError::NotUtf8(path.to_path_buf()))?;
    CanonicalPath::new(text).map_err(|source| HostPathError::NotCanonical {
        path: path.to_path_buf(),
        source,
    })
}

/// `realpath(path)`, as both the host path and core's [`CanonicalPath`].
pub fn resolve(path: &Path) -> Result<(PathBuf, CanonicalPath), HostPathError> {
    let resolved = path
        .canonicalize()
        .map_err(|e| HostPathError::Unresolvable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let canonical = as_canonical(&resolved)?;
    Ok((resolved, canonical))
}

fn refused(path: &Path, reason: impl Into<String>) -> ExecError {
    ExecError::PathRefused {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Resolves `entry` inside the capability folder `dir`, following symlinks, and refuses
/// anything that ends up outside it or is not a file.
pub fn resolve_entry(dir: &Path, entry: &str) -> Result<PathBuf, ExecError> {
    check_relative_path(entry)
        .map_err(|why| ExecError::InvalidCapability(format!("entry {entry:?} {why}")))?;
    let (dir, _) = resolve(dir)?;
    let path = dir.join(entry);
    let resolved = path.canonicalize().map_err(|_| {
        ExecError::InvalidCapability(format!(
            "entry {entry:?} does not exist in {}",
            dir.display()
        ))
    })?;
    if !resolved.starts_with(&dir) {
        return Err(refused(
            &path,
            format!(
                "resolves to {}, outside the capability folder",
                resolved.display()
            ),
        ));
    }
    if !resolved.is_file() {
        return Err(ExecError::InvalidCapability(format!(
            "entry {entry:?} is not a file"
        )));
    }
    Ok(resolved)
}

/// Resolves the working directory (default: the capability folder): it must be inside the
/// folder or a granted mount, and outside the credential denylist, symlinks resolved first.
pub fn check_cwd(
    dir: &Path,
    cwd: Option<&Path>,
    mounts: &[Mount],
    denylist: &CredentialDenylist,
) -> Result<PathBuf, ExecError> {
    let (dir, _) = resolve(dir)?;
    let (target, canonical) = resolve(cwd.unwrap_or(&dir))?;
    if let Some(entry) = denylist.denying(&canonical) {
        return Err(refused(
            &target,
            format!("inside the credential denylist ({})", entry.as_str()),
        ));
    }
    if target.starts_with(&dir) {
        return Ok(target);
    }
    check_path(&canonical, mounts, denylist, Access::Read)
        .map_err(|e| refused(&target, e.to_string()))?;
    Ok(target)
}

/// A declared volume's host folder (absolute, or relative to the capability folder), canonical,
/// checked against the run's mounts and the credential denylist for the volume's mode. A
/// read-only volume inside the capability folder needs no mount; a denylisted path is refused
/// everywhere. The capability folder is resolved with `realpath` too, so both sides of the
/// "inside" test are compared as they really are.
pub fn resolve_volume(launch: &Launch, host: &str, mode: FolderMode) -> Result<PathBuf, ExecError> {
    let (dir, _) = resolve(&launch.dir)?;
    let (resolved, canonical) = resolve(&volume_path(&dir, host))?;
    let access = match mode {
        FolderMode::Ro => Access::Read,
        FolderMode::Rw => Access::Write,
    };
    let inside_capability = mode == FolderMode::Ro && resolved.starts_with(&dir);
    match check_path(&canonical, &launch.mounts, &launch.denylist, access) {
        Ok(_) => Ok(resolved),
        Err(_) if inside_capability && launch.denylist.denying(&canonical).is_none() => {
            Ok(resolved)
        }
        Err(e) => Err(refused(&resolved, e.to_string())),
    }
}

/// A manifest volume's `host` as a path: absolute as written, or relative to `dir`.
pub fn volume_path(dir: &Path, host: &str) -> PathBuf {
    let raw = Path::new(host);
    if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        dir.join(raw)
    }
}

#[cfg(test)]
mod tests;
