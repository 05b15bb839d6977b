//! The credential denylist: host paths no run may ever see, whatever the grant and the
//! local policy say.
//!
//! This file owns the list and the questions "is this path denied?" and "which denied paths
//! lie inside this folder?". It never reads the file system; the host passes its home and
//! config directories already canonicalized.

use super::path::CanonicalPath;

/// Paths below the user's home that hold credentials, `/`-separated.
///
/// Whole directories where a tool keeps tokens next to other state (`~/.aws`, `~/.kube`),
/// single files where the rest of the directory is ordinary (`~/.docker/config.json`,
/// `~/.cargo/credentials.toml`).
pub const HOME_CREDENTIAL_PATHS: &[&str] = &[
    // SSH and GPG
    ".ssh",
    ".gnupg",
    // git
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    // cloud and cluster CLIs
    ".aws",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker/config.json",
    ".config/containers/auth.json",
    ".oci",
    ".terraform.d/credentials.tfrc.json",
    // package managers
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".config/pip",
    ".pip",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    // generic and OS keyrings
    ".netrc",
    ".local/share/keyrings",
    "Library/Keychains",
    ".password-store",
];

/// Host paths that are never mounted and are refused inside any mounted folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialDenylist {
    entries: Vec<CanonicalPath>,
}

impl CredentialDenylist {
    /// An empty list (tests and hosts that build their own).
    pub fn empty() -> Self {
        Self::default()
    }

    /// The standard list for a user: [`HOME_CREDENTIAL_PATHS`] below `home`, plus outpost's
    /// own config directory (tokens, the machine key, the local policy).
    pub fn for_home(home: &CanonicalPath, outpost_config_dir: &CanonicalPath) -> Self {
        let mut list = Self::empty();
        for relative in HOME_CREDENTIAL_PATHS {
            // Every constant is a valid relative path, so `join` cannot fail here; a
            // unit test holds the list to that.
            if let Ok(path) = home.join(relative) {
                list.add(path);
            }
        }
        list.add(outpost_config_dir.clone());
        list
    }

    /// Adds an entry (a no-op when it is already listed).
    pub fn add(&mut self, path: CanonicalPath) {
        if !self.entries.contains(&path) {
            self.entries.push(path);
        }
    }

    /// The list with `extra` entries added.
    pub fn with_extra(mut self, extra: impl IntoIterator<Item = CanonicalPath>) -> Self {
        for path in extra {
            self.add(path);
        }
        self
    }

    /// The entries, in the order added.
    pub fn entries(&self) -> &[CanonicalPath] {
        &self.entries
    }

    /// The entry that denies `path` (`path` is the entry or lies inside it), if any.
    pub fn denying(&self, path: &CanonicalPath) -> Option<&CanonicalPath> {
        self.entries.iter().find(|entry| entry.contains(path))
    }

    /// Entries strictly inside `folder`, sorted: what a mount of `folder` must exclude.
    pub fn inside(&self, folder: &CanonicalPath) -> Vec<CanonicalPath> {
        let mut inside: Vec<CanonicalPath> = self
            .entries
            .iter()
            .filter(|entry| folder.contains(entry) && *entry != folder)
            .cloned()
            .collect();
        inside.sort();
        inside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::new(s).unwrap()
    }

    #[test]
    fn for_home_lists_every_credential_path_and_the_config_dir() {
        let list = CredentialDenylist::for_home(&p("/home/ana"), &p("/home/ana/.config/outpost"));
        assert_eq!(list.entries().len(), HOME_CREDENTIAL_PATHS.len() + 1);
        for must in [
            "/home/ana/.ssh",
            "/home/ana/.gnupg",
            "/home/ana/.git-credentials",
            "/home/ana/.config/git/credentials",
            "/home/ana/.aws",
            "/home/ana/.config/gcloud",
            "/home/ana/.kube",
            "/home/ana/.docker/config.json",
            "/home/ana/.npmrc",
            "/home/ana/.cargo/credentials.toml",
            "/home/ana/.netrc",
            "/home/ana/Library/Keychains",
            "/home/ana/.password-store",
            "/home/ana/.config/outpost",
        ] {
            assert!(list.entries().contains(&p(must)), "{must} missing");
        }
    }

    #[test]
    fn denying_covers_the_entry_and_everything_below_it() {
        let list = CredentialDenylist::for_home(&p("/home/ana"), &p("/etc/outpost"));
        assert_eq!(
            list.denying(&p("/home/ana/.ssh/id_ed25519")),
            Some(&p("/home/ana/.ssh"))
        );
        assert_eq!(list.denying(&p("/etc/outpost")), Some(&p("/etc/outpost")));
        assert_eq!(list.denying(&p("/home/ana/.sshx")), None);
        assert_eq!(list.denying(&p("/home/ana/.docker/daemon.json")), None);
        assert_eq!(list.denying(&p("/home/ana")), None);
    }

    #[test]
    fn inside_lists_entries_strictly_below_a_folder() {
        let list =
            CredentialDenylist::empty().with_extra([p("/srv/a/secret"), p("/srv/a"), p("/x")]);
        assert_eq!(
            list.inside(&p("/srv")),
            vec![p("/srv/a"), p("/srv/a/secret")]
        );
        assert_eq!(list.inside(&p("/srv/a")), vec![p("/srv/a/secret")]);
        assert!(list.inside(&p("/srv/a/secret")).is_empty());
    }

    #[test]
    fn extra_entries_are_not_duplicated() {
        let list = CredentialDenylist::empty().with_extra([p("/a"), p("/a")]);
        assert_eq!(list.entries(), &[p("/a")]);
    }
}
