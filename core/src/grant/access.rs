//! The per-path decision a daemon makes when a run touches a host path.
//!
//! This file owns "may this run read or write this path?". It never resolves symlinks: the
//! host passes the realpath, so a link into a denylisted folder arrives as that folder.

use super::denylist::CredentialDenylist;
use super::mounts::Mount;
use super::path::CanonicalPath;
use crate::wire::FolderMode;

/// What a run wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read (or list, or stat).
    Read,
    /// Create, change or remove.
    Write,
}

/// Why a run may not use a host path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FsDenied {
    /// No mount contains the path.
    #[error(
        "`{path}` is not in a folder granted to this run; the machine's owner can allow it by adding a folder that contains it to both the context's grant and the machine's local policy"
    )]
    NotGranted {
        /// The path asked for.
        path: CanonicalPath,
    },
    /// The path is in the credential denylist. Nobody can lift this.
    #[error("`{path}` is in the credential denylist (`{entry}`) and is never available to runs")]
    Denied {
        /// The path asked for.
        path: CanonicalPath,
        /// The denylist entry that covers it.
        entry: CanonicalPath,
    },
    /// A write to a read-only mount.
    #[error(
        "`{path}` is in the read-only folder `{mount}`; the machine's owner can allow writes by granting the folder `rw` in both the context's grant and the machine's local policy"
    )]
    ReadOnly {
        /// The path asked for.
        path: CanonicalPath,
        /// The mount that holds it.
        mount: CanonicalPath,
    },
}

impl FsDenied {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            FsDenied::NotGranted { .. } => "path_not_granted",
            FsDenied::Denied { .. } => "path_denied",
            FsDenied::ReadOnly { .. } => "read_only",
        }
    }
}

/// Decides whether a run may `access` `path`, and returns the mode of the mount that holds it.
///
/// The credential denylist (and every mount's `excluded` list) is checked first and always
/// wins. Otherwise the deepest mount containing the path decides, so a folder granted `ro`
/// inside one granted `rw` stays read-only.
pub fn check_path(
    path: &CanonicalPath,
    mounts: &[Mount],
    denylist: &CredentialDenylist,
    access: Access,
) -> Result<FolderMode, FsDenied> {
    let excluded = mounts
        .iter()
        .flat_map(|m| m.excluded.iter())
        .find(|entry| entry.contains(path));
    if let Some(entry) = denylist.denying(path).or(excluded) {
        return Err(FsDenied::Denied {
            path: path.clone(),
            entry: entry.clone(),
        });
    }
    let mount = mounts
        .iter()
        .filter(|m| m.path.contains(path))
        .max_by_key(|m| m.path.as_str().len())
        .ok_or_else(|| FsDenied::NotGranted { path: path.clone() })?;
    if access == Access::Write && mount.mode == FolderMode::Ro {
        return Err(FsDenied::ReadOnly {
            path: path.clone(),
            mount: mount.path.clone(),
        });
    }
    Ok(mount.mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use FolderMode::{Ro, Rw};

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::new(s).unwrap()
    }

    fn mount(path: &str, mode: FolderMode) -> Mount {
        Mount {
            path: p(path),
            mode,
            excluded: Vec::new(),
        }
    }

    fn deny() -> CredentialDenylist {
        CredentialDenylist::for_home(&p("/home/a"), &p("/home/a/.config/outpost"))
    }

    #[test]
    fn reads_and_writes_inside_mounts() {
        let mounts = [mount("/home/a/proj", Rw), mount("/srv/docs", Ro)];
        let check = |path: &str, access| {
            check_path(&p(path), &mounts, &deny(), access).map_err(|e| e.code())
        };
        assert_eq!(check("/home/a/proj/src/main.rs", Access::Write), Ok(Rw));
        assert_eq!(check("/home/a/proj", Access::Read), Ok(Rw));
        assert_eq!(check("/srv/docs/a.md", Access::Read), Ok(Ro));
        assert_eq!(check("/srv/docs/a.md", Access::Write), Err("read_only"));
        assert_eq!(
            check("/home/a/projects", Access::Read),
            Err("path_not_granted")
        );
        assert_eq!(check("/home/a", Access::Read), Err("path_not_granted"));
    }

    #[test]
    fn the_denylist_wins_even_inside_a_mount() {
        let mounts = [mount("/home/a", Rw)];
        for path in [
            "/home/a/.ssh",
            "/home/a/.ssh/id_ed25519",
            "/home/a/.config/outpost/key",
        ] {
            let err = check_path(&p(path), &mounts, &deny(), Access::Read).unwrap_err();
            assert_eq!(err.code(), "path_denied", "{path}");
        }
    }

    #[test]
    fn a_mounts_excluded_list_is_honoured_without_the_denylist() {
        let mut m = mount("/home/a", Rw);
        m.excluded = vec![p("/home/a/secret")];
        let err = check_path(
            &p("/home/a/secret/x"),
            &[m],
            &CredentialDenylist::empty(),
            Access::Read,
        );
        assert_eq!(err.unwrap_err().code(), "path_denied");
    }

    #[test]
    fn the_deepest_mount_decides() {
        let mounts = [mount("/srv", Rw), mount("/srv/frozen", Ro)];
        let empty = CredentialDenylist::empty();
        assert_eq!(
            check_path(&p("/srv/x"), &mounts, &empty, Access::Write),
            Ok(Rw)
        );
        let err = check_path(&p("/srv/frozen/x"), &mounts, &empty, Access::Write).unwrap_err();
        assert_eq!(err.code(), "read_only");
    }

    #[test]
    fn messages_say_what_and_how() {
        let err = check_path(&p("/opt/x"), &[], &deny(), Access::Read).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/opt/x` is not in a folder granted to this run; the machine's owner can allow it by adding a folder that contains it to both the context's grant and the machine's local policy"
        );
        let err = check_path(&p("/home/a/.ssh/id"), &[], &deny(), Access::Read).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/home/a/.ssh/id` is in the credential denylist (`/home/a/.ssh`) and is never available to runs"
        );
        let err = check_path(&p("/d/f"), &[mount("/d", Ro)], &deny(), Access::Write).unwrap_err();
        assert!(err.to_string().starts_with(
            "`/d/f` is in the read-only folder `/d`; the machine's owner can allow writes"
        ));
    }
}
