//! Capability manifests: `manifest.yaml`, parsed and validated before anything runs.
//!
//! From the manifest alone the system knows where a capability runs (`environment`), how long
//! it lives (`lifecycle`), what extra permissions it needs and what it may touch. Parsing uses
//! `serde-saphyr` (panic-free, with locations); unknown fields are errors; every error names
//! the field and, when known, the line.
//!
//! This module owns the manifest's grammar and its lexical rules (names, the entry path, the
//! permission grammar, limits). It never reads a file: the host reads `manifest.yaml` and, when
//! it launches, resolves `entry` on disk and refuses a symlink that leaves the folder.

mod permission;
mod raw;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use permission::{Permission, PermissionVerb};

use crate::wire::{Environment, FolderMode};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TerminalSize {
    /// Columns, at least 1.
    pub cols: u16,
    /// Rows, at least 1.
    pub rows: u16,
}

impl TerminalSize {
    /// 80 × 24, what a terminal opens with when nobody says otherwise.
    pub const DEFAULT: TerminalSize = TerminalSize { cols: 80, rows: 24 };

    /// The size with each side clamped to 1..=1000, so a peer's zero or absurd size cannot
    /// reach the kernel.
    pub fn clamped(cols: u16, rows: u16) -> TerminalSize {
        TerminalSize {
            cols: cols.clamp(1, 1000),
            rows: rows.clamp(1, 1000),
        }
    }
}

/// The manifest's file name inside a capability folder.
pub const MANIFEST_FILE: &str = "manifest.yaml";

/// How long a capability lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    /// Runs once, reports, exits.
    Oneshot,
    /// A fresh instance per invocation.
    Ondemand,
    /// A long-lived service, recorded in the running-service table; never restarted.
    Persistent,
}

impl Lifecycle {
    /// The lifecycle's name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Oneshot => "oneshot",
            Lifecycle::Ondemand => "ondemand",
            Lifecycle::Persistent => "persistent",
        }
    }
}

/// How a shell capability's entry is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpreter {
    /// `sh <entry> <args…>`.
    #[default]
    Sh,
    /// `<entry> <args…>` executed directly: no shell, no interpolation.
    None,
}

/// A host folder made visible inside a wasm module or a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// The host path (absolute, or relative to the capability folder).
    pub host: String,
    /// Where the run sees it (absolute).
    pub guest: String,
    /// Read-only or read-write.
    pub mode: FolderMode,
}

/// Resource limits, the same defaults for every environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock budget of one run, in milliseconds.
    pub timeout_ms: u64,
    /// The most bytes kept per output stream.
    pub output_max_bytes: u64,
    /// Memory limit where the environment can enforce one (wasm, docker).
    pub memory_mb: u64,
    /// CPU limit in thousandths of a CPU, where the environment can enforce one (docker).
    pub cpu_millicores: u64,
    /// The most processes and threads at once, where the environment can enforce it (docker).
    pub pids_max: u64,
    /// Pty only: a terminal with no input and no output for this many milliseconds is
    /// stopped (reported timed out); `None`, the default, never stops an idle terminal.
    pub idle_ms: Option<u64>,
}

impl Limits {
    /// 90 s, 1 MiB per stream, 512 MiB, one CPU, 1024 processes, no idle limit.
    pub const DEFAULT: Limits = Limits {
        timeout_ms: 90_000,
        output_max_bytes: 1024 * 1024,
        memory_mb: 512,
        cpu_millicores: 1000,
        pids_max: 1024,
        idle_ms: None,
    };
    /// The hard maxima: 24 h, 64 MiB per stream, 64 GiB, 256 CPUs, 65,536 processes, 24 h idle.
    pub const MAX: Limits = Limits {
        timeout_ms: 24 * 3600 * 1000,
        output_max_bytes: 64 * 1024 * 1024,
        memory_mb: 64 * 1024,
        cpu_millicores: 256_000,
        pids_max: 65_536,
        idle_ms: Some(24 * 3600 * 1000),
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// A validated manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    /// Lowercase letters, digits and `-`, starting with a letter, at most 63 characters.
    pub name: String,
    /// What it does, for people.
    pub description: String,
    /// The capability's own version.
    pub version: u32,
    /// Where it runs.
    pub environment: Environment,
    /// How long it lives.
    pub lifecycle: Lifecycle,
    /// The entry file, relative to the capability folder, `/`-separated, without `..`. For
    /// docker, the command run inside the image instead (a name looked up on the image's
    /// `PATH`, or an absolute path in the image). For pty, a file in the folder, or — when the
    /// folder has no such file and the name has no `/` — a program found on the run's `PATH`
    /// (`bash`, `python3`).
    pub entry: String,
    /// Shell only: how the entry is started.
    pub interpreter: Interpreter,
    /// Arguments after the entry.
    pub args: Vec<String>,
    /// Environment variables the run gets, in the manifest's order (names
    /// `[A-Za-z_][A-Za-z0-9_]*`, never `OUTPOST_*`).
    pub env: Vec<(String, String)>,
    /// Extra permissions the capability needs.
    pub permissions: Vec<Permission>,
    /// Wasm and docker only: folders to show the run.
    pub volumes: Vec<Volume>,
    /// Docker only: the image.
    pub docker_image: Option<String>,
    /// Persistent only: the port the service listens on.
    pub port: Option<u16>,
    /// Shell and pty: `true` unless the manifest says `confine: false`, which asks to run
    /// unsandboxed — honoured only for the operator's own runs on a machine whose owner's
    /// policy is `operator-may-opt-out` ([`crate::grant::must_confine`]). A manifest can ask
    /// for less, never for more.
    pub confine: bool,
    /// Pty only: the size the terminal opens with (`terminal: {cols, rows}`, each 1..=1000,
    /// 80 × 24 when left out); `None` for every other environment.
    pub terminal: Option<TerminalSize>,
    /// Resource limits.
    pub limits: Limits,
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", line.map(|l| format!("line {l}, ")).unwrap_or_default(), if field.is_empty() { "manifest".to_owned() } else { format!("field `{field}`") })]
pub struct ManifestError {
    /// The field at fault (`entry`, `limits.timeout_ms`, `volumes[1].guest`), or empty for a
    /// YAML syntax error.
    pub field: String,
    /// The 1-based line, when known.
    pub line: Option<u64>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl ManifestError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        "invalid_manifest"
    }
}

impl Manifest {
    /// Parses and validates the text of a `manifest.yaml`.
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        raw::parse(text)
    }

    /// The permission every run of this capability needs: `run_capability:<environment>`.
    pub fn run_permission(&self) -> Permission {
        Permission::run_capability(self.environment)
    }
}

/// Checks a docker capability's `entry`: the command run inside the image, either a name found
/// on the image's `PATH` or an absolute path inside the image. Printable ASCII without spaces.
pub fn check_image_command(command: &str) -> Result<(), String> {
    if command.is_empty() {
        return Err("is empty".into());
    }
    if !command.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces (put arguments in `args`)".into());
    }
    Ok(())
}

/// Checks an entry path lexically: relative, `/`-separated, no `.`/`..`/empty components, no
/// backslashes or NUL. Symlinks are the launcher's to resolve.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("is empty".into());
    }
    if path.starts_with('/') {
        return Err("must be relative to the capability folder, not absolute".into());
    }
    if path.contains(['\\', '\0']) {
        return Err("must not contain backslashes or NUL".into());
    }
    for part in path.split('/') {
        match part {
            "" => return Err("has an empty path component".into()),
            "." | ".." => {
                return Err("must stay inside the capability folder (no `.` or `..`)".into());
            }
            _ => {}
        }
    }
    Ok(())
}
