//! Grants applied on the machine: host folders and network egress, decided before and during
//! every run.
//!
//! This module owns four decisions: which folders a run sees ([`effective_mounts`]: the
//! server's grant intersected with the machine owner's [`LocalPolicy`], minus the
//! [`CredentialDenylist`]), whether a run may use one path ([`check_path`]), whether it may
//! reach one host and port ([`check_egress`]), and whether an egress allowlist is well formed
//! ([`validate_allowlist`]).
//!
//! It must never widen what either side allows, never let a denylisted path through, never
//! touch the file system (the host canonicalizes paths with `realpath` first), never resolve
//! names, and never panic on any input.

mod access;
mod allowlist;
mod confinement;
mod denylist;
mod egress;
mod mounts;
mod path;
#[cfg(test)]
mod proptests;

pub use access::{Access, FsDenied, check_path};
pub use allowlist::{AllowedHost, AllowlistEntry, AllowlistError, Destination};
pub use confinement::{ConfinementPolicy, RunKind, must_confine};
pub use denylist::{CredentialDenylist, HOME_CREDENTIAL_PATHS};
pub use egress::{EgressDenied, check_egress, validate_allowlist};
pub use mounts::{LocalFolder, LocalPolicy, Mount, effective_mounts, narrower};
pub use path::{CanonicalPath, PathError};
