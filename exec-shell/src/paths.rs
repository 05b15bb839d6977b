//! Where a run's entry and working directory may be.

use std::path::{Path, PathBuf};

use outpost_core::executor::{ExecError, Launch};
use outpost_core::grant::{Access, CanonicalPath, CredentialDenylist, Mount, check_path};
use outpost_core::manifest::check_relative_path;
use outpost_core::wire::FolderMode;

fn refused(path: &Path, reason: impl Into<String>) -> ExecError {
    ExecError::PathRefused {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn canonical(path: &Path) -> Result<PathBuf, ExecError> {
    path.canonicalize()
        .map_err(|e| refused(path, format!("cannot be resolved: {e}")))
}

/// Resolves `entry` inside the capability folder `dir`, following symlinks, and refuses
/// anything that ends up outside it or is not a file.
pub fn resolve_entry(dir: &Path, entry: &str) -> Result<PathBuf, ExecError> {
    check_relative_path(entry)
        .map_err(|why| ExecError::InvalidCapability(format!("entry {entry:?} {why}")))?;
    let dir = canonical(dir)?;
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
    let dir = canonical(dir)?;
    let target = canonical(cwd.unwrap_or(&dir))?;
    let as_canonical = CanonicalPath::new(target.to_string_lossy().into_owned())
        .map_err(|e| refused(&target, e.to_string()))?;
    if let Some(entry) = denylist.denying(&as_canonical) {
        return Err(refused(
            &target,
            format!("inside the credential denylist ({})", entry.as_str()),
        ));
    }
    if target.starts_with(&dir) {
        return Ok(target);
    }
    check_path(&as_canonical, mounts, denylist, Access::Read)
        .map_err(|e| refused(&target, e.to_string()))?;
    Ok(target)
}

/// A declared volume's host folder (absolute, or relative to the capability folder), canonical,
/// checked against the run's mounts and the credential denylist for the volume's mode. A
/// read-only volume inside the capability folder needs no mount; a denylisted path is refused
/// everywhere.
pub fn resolve_volume(launch: &Launch, host: &str, mode: FolderMode) -> Result<PathBuf, ExecError> {
    let raw = Path::new(host);
    let joined = if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        launch.dir.join(raw)
    };
    let resolved = joined.canonicalize().map_err(|e| ExecError::PathRefused {
        path: joined.display().to_string(),
        reason: format!("cannot be resolved: {e}"),
    })?;
    let canonical = CanonicalPath::new(resolved.to_string_lossy().into_owned()).map_err(|e| {
        ExecError::PathRefused {
            path: resolved.display().to_string(),
            reason: e.to_string(),
        }
    })?;
    let access = match mode {
        FolderMode::Ro => Access::Read,
        FolderMode::Rw => Access::Write,
    };
    let inside_capability = mode == FolderMode::Ro && resolved.starts_with(&launch.dir);
    match check_path(&canonical, &launch.mounts, &launch.denylist, access) {
        Ok(_) => Ok(resolved),
        Err(_) if inside_capability && launch.denylist.denying(&canonical).is_none() => {
            Ok(resolved)
        }
        Err(e) => Err(ExecError::PathRefused {
            path: resolved.display().to_string(),
            reason: e.to_string(),
        }),
    }
}
