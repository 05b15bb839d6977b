//! Which program a pty capability starts: its entry file, or a program on the run's `PATH`.
//!
//! This module owns the choice between the two; the folder's own rules (inside, symlinks
//! resolved) are `outpost-host`'s. It never runs anything.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use outpost_core::executor::ExecError;
use outpost_host::resolve_entry;

/// The program for `entry`: the file `dir/entry` when the folder has it (or the entry names a
/// path), else the first executable `entry` in an absolute directory of `path`.
pub(crate) fn resolve(dir: &Path, entry: &str, path: Option<&OsStr>) -> Result<PathBuf, ExecError> {
    if entry.contains('/') || dir.join(entry).symlink_metadata().is_ok() {
        let file = resolve_entry(dir, entry)?;
        if !executable(&file) {
            return Err(ExecError::InvalidCapability(format!(
                "entry {entry:?} is not executable"
            )));
        }
        return Ok(file);
    }
    // A bare name: the lexical rules still apply (no NUL, not `.`/`..`).
    outpost_core::manifest::check_relative_path(entry)
        .map_err(|why| ExecError::InvalidCapability(format!("entry {entry:?} {why}")))?;
    let found = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(entry))
        .find(|candidate| executable(candidate));
    found.ok_or_else(|| {
        ExecError::InvalidCapability(format!(
            "entry {entry:?} is neither a file in {} nor a program on PATH ({})",
            dir.display(),
            path.map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
    })
}

fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("outpost-pty-program-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    #[test]
    fn the_folder_s_file_wins_over_path() {
        let dir = folder("wins");
        let own = dir.join("sh");
        std::fs::write(&own, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(resolve(&dir, "sh", Some(OsStr::new("/bin"))).unwrap(), own);
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(&dir, "sh", Some(OsStr::new("/bin"))).unwrap_err();
        assert!(e.to_string().contains("not executable"), "{e}");
    }

    #[test]
    fn a_bare_name_is_looked_up_on_absolute_path_entries_only() {
        let dir = folder("bare");
        let found = resolve(&dir, "sh", Some(OsStr::new("relative:/usr/bin:/bin"))).unwrap();
        assert!(found.is_absolute() && found.ends_with("sh"), "{found:?}");
        let e = resolve(&dir, "no-such-program-here", Some(OsStr::new("/bin"))).unwrap_err();
        assert_eq!(e.code(), "invalid_capability");
        assert!(
            e.to_string().contains("nor a program on PATH (/bin)"),
            "{e}"
        );
        let e = resolve(&dir, "sh", Some(OsStr::new("bin"))).unwrap_err();
        assert_eq!(e.code(), "invalid_capability");
        // A path names a file in the folder, never one on PATH.
        let e = resolve(&dir, "bin/sh", Some(OsStr::new("/"))).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
