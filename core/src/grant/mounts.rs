//! Mounts: the server's grant intersected with the machine owner's local policy, minus the
//! credential denylist.
//!
//! This file owns that intersection. It never widens anything: a mount is always inside both
//! a granted folder and a locally allowed folder, with the narrower of their modes.

use serde::{Deserialize, Serialize};

use super::denylist::CredentialDenylist;
use super::path::CanonicalPath;
use crate::wire::FolderMode;

/// A folder the machine owner allows runs to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalFolder {
    /// The folder, canonicalized by the host.
    pub path: CanonicalPath,
    /// The most the owner allows.
    pub mode: FolderMode,
}

/// The machine owner's local allowance. An absent policy is [`LocalPolicy::default`]:
/// no folders, no host commands, every run sandboxed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalPolicy {
    /// Folders the owner allows.
    #[serde(default)]
    pub folders: Vec<LocalFolder>,
    /// Whether the owner allows host commands.
    #[serde(default)]
    pub commands_enabled: bool,
    /// Whether the daemon takes signed updates its server publishes (absent: yes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_update: Option<bool>,
    /// Whether shell and terminal runs may ever run unsandboxed (absent: never).
    #[serde(default)]
    pub confinement: super::ConfinementPolicy,
    /// Which operators' requests from afar the daemon carries out (`pause`, `resume`,
    /// `restart`, `update`, `logs`); the others are refused `refused_by_owner`. Absent: all
    /// five; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_control: Option<Vec<String>>,
    /// Whether the server may record what operators type into terminals on this machine (a
    /// server that records keystrokes does so only where the owner allows it; absent: no).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record_terminal_input: bool,
}

/// A folder a run sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// The folder's canonical host path: a granted folder or a local one, whichever lies inside the
    /// other.
    pub path: CanonicalPath,
    /// Its mode.
    pub mode: FolderMode,
    /// Denylisted paths inside the folder; refused even though the mount contains them.
    pub excluded: Vec<CanonicalPath>,
}

/// The narrower of two modes (`ro` < `rw`).
pub fn narrower(a: FolderMode, b: FolderMode) -> FolderMode {
    a.min(b)
}

/// The folders a run may use: every granted folder intersected with every local folder.
///
/// For a granted folder G and a local folder L: G is mounted when it lies inside L, L when it
/// lies inside G, nothing otherwise; the mode is the narrower of the two. When several pairs
/// yield the same path, the widest of those (already narrowed) modes is kept: each of them
/// is backed by a grant folder and a local folder that both allow it.
///
/// A mount that is, or lies inside, a denylisted path is dropped; denylisted paths inside a
/// mount are listed in [`Mount::excluded`]. The result is sorted by path. Nested mounts are
/// kept as they are; [`super::check_path`] uses the deepest one.
pub fn effective_mounts(
    grant_folders: &[(CanonicalPath, FolderMode)],
    local: &LocalPolicy,
    denylist: &CredentialDenylist,
) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = Vec::new();
    for (granted, granted_mode) in grant_folders {
        for allowed in &local.folders {
            let path = if allowed.path.contains(granted) {
                granted
            } else if granted.contains(&allowed.path) {
                &allowed.path
            } else {
                continue;
            };
            let mode = narrower(*granted_mode, allowed.mode);
            match mounts.iter_mut().find(|m| &m.path == path) {
                Some(existing) => existing.mode = existing.mode.max(mode),
                None => mounts.push(Mount {
                    path: path.clone(),
                    mode,
                    excluded: Vec::new(),
                }),
            }
        }
    }
    mounts.retain(|m| denylist.denying(&m.path).is_none());
    for mount in &mut mounts {
        mount.excluded = denylist.inside(&mount.path);
    }
    mounts.sort_by(|a, b| a.path.cmp(&b.path));
    mounts
}

#[cfg(test)]
mod tests {
    use super::*;
    use FolderMode::{Ro, Rw};

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::new(s).unwrap()
    }

    fn local(folders: &[(&str, FolderMode)]) -> LocalPolicy {
        LocalPolicy {
            daemon_control: None,
            record_terminal_input: false,
            folders: folders
                .iter()
                .map(|(path, mode)| LocalFolder {
                    path: p(path),
                    mode: *mode,
                })
                .collect(),
            commands_enabled: false,
            auto_update: None,
            confinement: Default::default(),
        }
    }

    fn mounts(
        grant: &[(&str, FolderMode)],
        local_folders: &[(&str, FolderMode)],
    ) -> Vec<(String, FolderMode)> {
        let grant: Vec<_> = grant.iter().map(|(s, m)| (p(s), *m)).collect();
        effective_mounts(&grant, &local(local_folders), &CredentialDenylist::empty())
            .into_iter()
            .map(|m| (m.path.to_string(), m.mode))
            .collect()
    }

    #[test]
    fn grant_inside_local_mounts_the_grant_folder() {
        assert_eq!(
            mounts(&[("/home/a/proj", Rw)], &[("/home/a", Rw)]),
            vec![("/home/a/proj".into(), Rw)]
        );
    }

    #[test]
    fn local_inside_grant_mounts_the_local_folder() {
        assert_eq!(
            mounts(&[("/home", Rw)], &[("/home/a/proj", Rw)]),
            vec![("/home/a/proj".into(), Rw)]
        );
    }

    #[test]
    fn disjoint_folders_mount_nothing() {
        assert!(mounts(&[("/home/ab", Rw)], &[("/home/a", Rw)]).is_empty());
        assert!(mounts(&[("/srv", Rw)], &[]).is_empty());
        assert!(mounts(&[], &[("/srv", Rw)]).is_empty());
    }

    #[test]
    fn the_narrower_mode_wins() {
        assert_eq!(
            mounts(&[("/srv", Rw)], &[("/srv", Ro)]),
            vec![("/srv".into(), Ro)]
        );
        assert_eq!(
            mounts(&[("/srv", Ro)], &[("/srv", Rw)]),
            vec![("/srv".into(), Ro)]
        );
    }

    #[test]
    fn duplicates_merge_to_the_wider_narrowed_mode() {
        // `/srv/x` comes from (grant /srv/x rw, local /srv ro) = ro and from
        // (grant /srv/x rw, local /srv/x rw) = rw: both are backed, rw is kept.
        assert_eq!(
            mounts(&[("/srv/x", Rw)], &[("/srv", Ro), ("/srv/x", Rw)]),
            vec![("/srv/x".into(), Rw)]
        );
    }

    #[test]
    fn denylisted_mounts_are_dropped_and_inner_ones_excluded() {
        let deny = CredentialDenylist::for_home(&p("/home/a"), &p("/home/a/.config/outpost"));
        let grant = [
            (p("/home/a"), Rw),
            (p("/home/a/.ssh"), Ro),
            (p("/home/a/.aws/sub"), Ro),
        ];
        let got = effective_mounts(&grant, &local(&[("/home", Rw)]), &deny);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].path, p("/home/a"));
        assert!(got[0].excluded.contains(&p("/home/a/.ssh")));
        assert!(got[0].excluded.contains(&p("/home/a/.config/outpost")));
        assert!(got[0].excluded.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn local_policy_serde_defaults_to_nothing() {
        let policy: LocalPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(policy, LocalPolicy::default());
        let policy: LocalPolicy = serde_json::from_str(
            r#"{"folders":[{"path":"/srv","mode":"ro"}],"commandsEnabled":true}"#,
        )
        .unwrap();
        assert_eq!(policy.folders[0].mode, Ro);
        assert!(policy.commands_enabled);
        assert!(
            serde_json::from_str::<LocalPolicy>(r#"{"folders":[{"path":"srv","mode":"ro"}]}"#)
                .is_err()
        );
    }
}
