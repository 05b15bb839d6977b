//! The machine owner's folders and the credential denylist built from them.
//!
//! This module owns where outpost keeps its files for the owner (the XDG base directories,
//! or one folder named by `OUTPOST_HOME` / `--home`, holding `config/`, `state/` and `cache/`)
//! and which of the owner's paths no run may ever see ([`CredentialDenylist::for_home`] under
//! `HOME`, plus outpost's own config folder).
//! It reads environment variables through the caller ([`OwnerFolders::from_vars`]) and never
//! creates, reads or writes a folder.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use outpost_core::grant::CredentialDenylist;

use crate::paths::{HostPathError, as_canonical};

/// The variable that puts every outpost file in one folder instead of the XDG folders.
pub const HOME_VAR: &str = "OUTPOST_HOME";

/// Why the owner's folders cannot be known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnerError {
    /// `HOME` is unset or relative, and no `OUTPOST_HOME` names the folders instead.
    #[error("HOME is not an absolute path")]
    NoHome,
    /// A folder's path cannot be handed to core (not UTF-8, not canonical).
    #[error(transparent)]
    Path(#[from] HostPathError),
}

/// Where outpost keeps the owner's files, and whose credentials it guards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerFolders {
    /// The owner's home (`HOME`), canonical; its credential paths are denylisted.
    pub home: Option<PathBuf>,
    /// Keys, tokens and the local policy: `$XDG_CONFIG_HOME/outpost` (default
    /// `~/.config/outpost`), or `$OUTPOST_HOME/config`. Denylisted as a whole.
    pub config: PathBuf,
    /// What can be rebuilt (compiled wasm modules): `$XDG_CACHE_HOME/outpost`, or
    /// `$OUTPOST_HOME/cache`.
    pub cache: PathBuf,
    /// What the daemon keeps between starts (result outbox, lock, capability folders of
    /// runs): `$XDG_STATE_HOME/outpost`, or `$OUTPOST_HOME/state`.
    pub state: PathBuf,
}

impl OwnerFolders {
    /// The folders this process's environment names. See [`OwnerFolders::from_vars`].
    pub fn from_env() -> Result<Self, OwnerError> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// The folders that `var` (an environment lookup) names: with `OUTPOST_HOME`, its
    /// `config/`, `state/` and `cache/` subfolders (separate, so that the denylisted config
    /// folder, which holds keys and the policy, never contains the runs' folders or the
    /// cache); otherwise the XDG base directories, each falling
    /// back under `HOME` when unset or relative (a relative XDG path is invalid and ignored,
    /// as the XDG spec says). Each folder is resolved with `realpath` as far as it exists
    /// (the rest appended as written), so a symlinked home or `~/.config` is denylisted where
    /// it really is, even before outpost's own folder is created.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Self, OwnerError> {
        let absolute = |name: &str| {
            var(name)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|p| realpath_if_present(&p))
        };
        let home = absolute("HOME");
        if let Some(root) = absolute(HOME_VAR) {
            return Ok(Self {
                home,
                config: realpath_if_present(&root.join("config")),
                cache: realpath_if_present(&root.join("cache")),
                state: realpath_if_present(&root.join("state")),
            });
        }
        let base = |xdg: &str, under_home: &str| -> Result<PathBuf, OwnerError> {
            let base = match absolute(xdg) {
                Some(base) => base,
                None => home.as_ref().ok_or(OwnerError::NoHome)?.join(under_home),
            };
            Ok(realpath_if_present(&base.join("outpost")))
        };
        Ok(Self {
            config: base("XDG_CONFIG_HOME", ".config")?,
            cache: base("XDG_CACHE_HOME", ".cache")?,
            state: base("XDG_STATE_HOME", ".local/state")?,
            home,
        })
    }

    /// The credential denylist: the standard credential paths under `home` (none without a
    /// home) and the whole config folder.
    pub fn denylist(&self) -> Result<CredentialDenylist, OwnerError> {
        let config = as_canonical(&self.config)?;
        Ok(match &self.home {
            Some(home) => CredentialDenylist::for_home(&as_canonical(home)?, &config),
            None => CredentialDenylist::empty().with_extra([config]),
        })
    }

    /// Where compiled wasm modules are cached.
    pub fn wasm_cache(&self) -> PathBuf {
        self.cache.join("wasm")
    }

    /// The machine owner's local policy (folders runs may use, the host-commands opt-in).
    pub fn local_policy_file(&self) -> PathBuf {
        self.config.join("policy.json")
    }

    /// Where the capability folders of the daemon's runs are written.
    pub fn runs_dir(&self) -> PathBuf {
        self.state.join("runs")
    }
}

/// `realpath` of the deepest part of `path` that exists, with the rest appended as written:
/// a folder outpost has not created yet is named where it will really be (under a symlinked
/// `~/.config`, say), so the denylist guards the place its keys will be written.
fn realpath_if_present(path: &Path) -> PathBuf {
    for existing in path.ancestors() {
        if let Ok(real) = existing.canonicalize() {
            let rest = path.strip_prefix(existing).unwrap_or(Path::new(""));
            return if rest.as_os_str().is_empty() {
                real
            } else {
                real.join(rest)
            };
        }
    }
    path.to_path_buf()
}

#[cfg(test)]
mod tests;
