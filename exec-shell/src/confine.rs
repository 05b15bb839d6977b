//! Landlock confinement for `confine: true` shell capabilities.
//!
//! The run is started through the helper — the `outpost` binary's hidden `confine`
//! subcommand, [`helper_main`] — which restricts itself with Landlock — read-only system paths, the capability folder read-only, the granted folders
//! with their modes — and then executes the entry. Landlock is required in full: if the
//! kernel cannot enforce every rule, the helper refuses and the run never starts unconfined.
//! Landlock only allows; it cannot hide a path inside an allowed folder, so a mount that holds
//! credential-denylist paths is refused for confined runs.
//!
//! ```text
//! outpost confine --probe
//! outpost confine [--ro DIR]… [--rw DIR]… -- PROGRAM [ARGS…]
//! ```
//!
//! Two exit statuses are the helper's own failures, never the program's: 125
//! ([`EXIT_NOT_CONFINED`]) when it ran nothing (a bad argument, such as `--ro` or `--rw`
//! without a folder, or Landlock not fully enforced) and 126 ([`EXIT_CANNOT_EXECUTE`]) when
//! the program cannot be executed. A program may exit 125 or 126 itself, so each helper
//! failure is also marked by one line on stderr starting with [`STDERR_PREFIX`]
//! (`outpost confine:`). A probe that succeeds prints [`PROBE_OK`]: a binary that does not
//! know the subcommand cannot pass for a helper by exiting 0.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::{Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};
use outpost_core::executor::ExecError;
use outpost_core::grant::Mount;
use outpost_core::wire::{Environment, FolderMode};

/// The hidden subcommand of the `outpost` binary that confines a run.
pub const SUBCOMMAND: &str = "confine";

/// What a successful `confine --probe` prints.
pub const PROBE_OK: &str = "outpost-confine: Landlock enforced";

/// Exit status of a helper that ran nothing: bad arguments, or Landlock not enforced.
pub const EXIT_NOT_CONFINED: u8 = 125;

/// How the helper's own failure lines on stderr begin, telling them from the program's.
pub const STDERR_PREFIX: &str = "outpost confine:";

/// Exit status of a helper that could not execute the program.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;

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
        .args([SUBCOMMAND, "--probe"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", helper.display()))
        .and_then(|out| {
            let stdout = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && stdout.trim() == PROBE_OK {
                Ok(())
            } else if out.status.success() {
                Err(format!(
                    "{} does not know the `{SUBCOMMAND}` subcommand; name the outpost binary in ShellConfig::confine_helper",
                    helper.display()
                ))
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
            }
        });
    if let Ok(mut p) = probes.lock() {
        p.insert(helper.to_path_buf(), result.clone());
    }
    result
}

/// The helper by default: the running executable, the `outpost` binary — named through
/// `/proc/self/exe`, which a child started by this process resolves to the very file this
/// process runs, even after it was replaced or deleted on disk (a package upgrade, a
/// rebuild). Where `/proc` is absent, the path the executable was started from.
pub(crate) fn default_helper() -> Result<PathBuf, String> {
    let running = Path::new("/proc/self/exe");
    if running.exists() {
        return Ok(running.to_path_buf());
    }
    std::env::current_exe().map_err(|e| format!("the current executable cannot be found: {e}"))
}

/// The helper's arguments for a run of `program args…` in `capability_dir` with `mounts`.
pub(crate) fn helper_args(
    capability_dir: &Path,
    mounts: &[Mount],
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>, ExecError> {
    let mut out: Vec<std::ffi::OsString> = vec![SUBCOMMAND.into()];
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

/// The helper itself: `args` are what follows the subcommand. Restricts this process with
/// Landlock, then replaces it with the program (on success it never returns). Exits
/// [`EXIT_NOT_CONFINED`] without running anything when an argument is wrong or Landlock
/// cannot be fully enforced, [`EXIT_CANNOT_EXECUTE`] when the program cannot be executed.
pub fn helper_main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let (mut ro, mut rw): (Vec<PathBuf>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    let mut probe = false;
    let mut program = None;
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--probe") => probe = true,
            Some(flag @ ("--ro" | "--rw")) => {
                let Some(folder) = args.next().filter(|value| value != "--") else {
                    return not_confined(format!("{flag} needs a folder"));
                };
                let folders = if flag == "--ro" { &mut ro } else { &mut rw };
                folders.push(PathBuf::from(folder));
            }
            Some("--") => {
                program = args.next();
                break;
            }
            _ => return not_confined(format!("unexpected argument {arg:?}")),
        }
    }
    if let Err(why) = restrict_self(&ro, &rw) {
        return not_confined(why);
    }
    if probe {
        println!("{PROBE_OK}");
        return ExitCode::SUCCESS;
    }
    let Some(program) = program else {
        return not_confined("no program after `--`");
    };
    let err = Command::new(&program).args(args).exec();
    eprintln!(
        "{STDERR_PREFIX} cannot execute {}: {err}",
        PathBuf::from(program).display()
    );
    ExitCode::from(EXIT_CANNOT_EXECUTE)
}

/// Reports `why` on stderr, marked as the helper's, and exits having run nothing.
fn not_confined(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("{STDERR_PREFIX} {why}");
    ExitCode::from(EXIT_NOT_CONFINED)
}
