//! Landlock confinement for `confine: true` shell capabilities.
//!
//! The run is started through the `outpost-confine` helper, which restricts itself with
//! Landlock — read-only system paths, the capability folder read-only, the granted folders
//! with their modes — and then executes the entry. Landlock is required in full: if the
//! kernel cannot enforce every rule, the helper refuses and the run never starts unconfined.
//! Landlock only allows; it cannot hide a path inside an allowed folder, so a mount that holds
//! credential-denylist paths is refused for confined runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};
use outpost_core::executor::ExecError;
use outpost_core::grant::Mount;
use outpost_core::wire::{Environment, FolderMode};

/// The helper binary's file name.
pub const HELPER_NAME: &str = "outpost-confine";

/// System folders a confined run may read.
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/dev",
];

/// Device files a confined run may write.
pub const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/tty"];

/// The Landlock ABI whose rights a confined run is held to.
const REQUIRED_ABI: ABI = ABI::V3;

/// Restricts the calling process: `read_only` folders readable, `read_write` folders writable,
/// nothing else reachable. Fails unless the kernel enforces every rule.
pub fn restrict_self(read_only: &[PathBuf], read_write: &[PathBuf]) -> Result<(), String> {
    let abi = REQUIRED_ABI;
    let existing = |paths: &[PathBuf]| -> Vec<PathBuf> {
        paths.iter().filter(|p| p.exists()).cloned().collect()
    };
    let devices: Vec<PathBuf> = WRITABLE_DEVICES
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                existing(read_only),
                AccessFs::from_read(abi),
            ))
        })
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                existing(read_write),
                AccessFs::from_all(abi),
            ))
        })
        .and_then(|r| r.add_rules(path_beneath_rules(devices, AccessFs::from_file(abi))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| format!("Landlock cannot be enforced: {e}"))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other => Err(format!("Landlock is only {other:?} on this kernel")),
    }
}

/// Whether this machine can confine runs, probed once per helper by running it.
pub(crate) fn probe(helper: &Path) -> Result<(), String> {
    static PROBES: OnceLock<Mutex<BTreeMap<PathBuf, Result<(), String>>>> = OnceLock::new();
    let probes = PROBES.get_or_init(Default::default);
    if let Some(known) = probes.lock().ok().and_then(|p| p.get(helper).cloned()) {
        return known;
    }
    let result = Command::new(helper)
        .arg("--probe")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", helper.display()))
        .and_then(|out| {
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
            }
        });
    if let Ok(mut p) = probes.lock() {
        p.insert(helper.to_path_buf(), result.clone());
    }
    result
}

/// The helper: next to the running executable (where cargo and installs put it), unless
/// configured.
pub(crate) fn default_helper() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(HELPER_NAME), dir.join("..").join(HELPER_NAME)]
        .into_iter()
        .find(|p| p.is_file())
}

/// The helper's arguments for a run of `program args…` in `capability_dir` with `mounts`.
pub(crate) fn helper_args(
    capability_dir: &Path,
    mounts: &[Mount],
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>, ExecError> {
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    for dir in SYSTEM_READ_ONLY
        .iter()
        .map(PathBuf::from)
        .chain([capability_dir.to_path_buf()])
    {
        out.push("--ro".into());
        out.push(dir.into_os_string());
    }
    for mount in mounts {
        if !mount.excluded.is_empty() {
            return Err(ExecError::PathRefused {
                path: mount.path.as_str().to_owned(),
                reason: format!(
                    "holds credential paths ({}) that Landlock cannot hide; grant a narrower folder",
                    mount
                        .excluded
                        .iter()
                        .map(|p| p.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        out.push(match mount.mode {
            FolderMode::Ro => "--ro".into(),
            FolderMode::Rw => "--rw".into(),
        });
        out.push(mount.path.as_str().into());
    }
    out.push("--".into());
    out.push(program.into_os_string());
    out.extend(args);
    Ok(out)
}

pub(crate) fn unavailable(reason: String) -> ExecError {
    ExecError::Unavailable {
        environment: Environment::Shell,
        reason: format!("confinement is required but {reason}"),
        remedy:
            "run on a Linux kernel with Landlock (5.19 or later) enabled, or remove `confine: true`"
                .into(),
    }
}
