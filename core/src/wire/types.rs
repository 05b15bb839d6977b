//! The values frames carry: grants, capabilities, timings and the like.

use serde::{Deserialize, Serialize};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// One of a run's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    /// The wire name: `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Where a capability runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    /// A shell script or an executable.
    Shell,
    /// A WebAssembly module under wasmtime.
    Wasm,
    /// A Docker container.
    Docker,
    /// An interactive terminal.
    Pty,
}

impl Environment {
    /// The environment's name as it appears in manifests and frames.
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Shell => "shell",
            Environment::Wasm => "wasm",
            Environment::Docker => "docker",
            Environment::Pty => "pty",
        }
    }
}

/// Access mode of a granted folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum FolderMode {
    /// Read only.
    Ro,
    /// Read and write.
    Rw,
}

/// The prefix of the `hello` features that say which folders the operator's runs see: `mount:ro:/srv/data`
/// (`rw` or `ro`, then the canonical path, which may itself hold `:`).
pub const FEATURE_MOUNT_PREFIX: &str = "mount:";

/// The most `mount:` features a daemon announces; a machine whose runs see more folders
/// announces the first this many, in the grant's order.
pub const MAX_MOUNT_FEATURES: usize = 64;

/// A folder the server grants, before the machine's local policy narrows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderGrant {
    /// The host path as the operator wrote it.
    pub path: String,
    /// The most the grant allows.
    pub mode: FolderMode,
}

/// Whom a run may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Egress {
    /// No network.
    None,
    /// Only these `host[:port]` entries; `*.` prefixes match subdomains.
    Allowlist {
        /// The `host[:port]` entries a run may reach; no port means any port.
        hosts: Vec<String>,
    },
    /// Anywhere.
    All,
}

/// The host-commands switch on the server's side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CommandsGrant {
    /// Whether host commands are allowed by the server.
    pub enabled: bool,
}

/// Numeric limits in a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct GrantLimits {
    /// The most runs the daemon may hold at once.
    pub max_concurrent: u32,
}

/// What the server allows runs on one machine to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Grant {
    /// Granted folders.
    #[serde(default)]
    pub fs: Vec<FolderGrant>,
    /// Network reach.
    pub egress: Egress,
    /// Host commands.
    #[serde(default)]
    pub commands: CommandsGrant,
    /// Limits.
    pub limits: GrantLimits,
    /// Environments runs may use; absent means every environment the machine offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environments: Option<Vec<Environment>>,
}

impl Grant {
    /// Whether the grant lets runs use `environment`.
    pub fn allows(&self, environment: Environment) -> bool {
        self.environments
            .as_ref()
            .is_none_or(|allowed| allowed.contains(&environment))
    }

    /// A grant that allows nothing: no folders, no network, no commands, no runs.
    pub fn nothing() -> Self {
        Grant {
            fs: Vec::new(),
            egress: Egress::None,
            commands: CommandsGrant { enabled: false },
            limits: GrantLimits { max_concurrent: 0 },
            environments: None,
        }
    }
}

/// A file of a capability carried inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InlineFile {
    /// Path relative to the capability folder.
    #[cfg_attr(
        feature = "schema",
        schemars(regex(
            pattern = r"^(?:(?!\.\.?(?:/|$))[^/\\\x00]+)(?:/(?!\.\.?(?:/|$))[^/\\\x00]+)*$"
        ))
    )]
    pub path: String,
    /// The file's bytes, base64url without padding.
    #[cfg_attr(
        feature = "schema",
        schemars(regex(
            pattern = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-][AQgw]|[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048])?$"
        ))
    )]
    pub content_b64: String,
}

/// How a `run.request` delivers its capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum CapabilitySource {
    /// The manifest and files are in the frame.
    Inline {
        /// The text of `manifest.yaml`.
        manifest: String,
        /// The capability's other files.
        files: Vec<InlineFile>,
    },
    /// The daemon fetches the bundle with a signed request and checks its digest.
    Digest {
        /// Lowercase hex SHA-256 of the bundle.
        #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^[0-9a-f]{64}$")))]
        sha256: String,
        /// The bundle's size in bytes.
        size: u64,
    },
}

/// Where the time of a run went, in milliseconds.
///
/// The daemon fills the first four on its clock; the server adds `server_ms` (commit to
/// result on its clock) and `transit_ms = server_ms - daemon_ms`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// Accepted to started.
    pub queue_ms: u64,
    /// Preparing the executor (fetching, unpacking, creating).
    pub setup_ms: u64,
    /// Running the capability.
    pub execute_ms: u64,
    /// Everything the daemon spent, commit to result.
    pub daemon_ms: u64,
    /// Commit to result on the server's clock (server adds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_ms: Option<u64>,
    /// `server_ms - daemon_ms`: dispatch plus return (server adds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transit_ms: Option<u64>,
}

/// How a run ended on the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The capability ran and exited (any exit code).
    Exited,
    /// The deadline passed and the capability was stopped.
    TimedOut,
    /// The run was cancelled and stopped.
    Cancelled,
    /// The capability could not be run (see `error`).
    Failed,
}

impl RunStatus {
    /// The status as it goes on the wire (`exited`, `timed_out`, `cancelled`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Exited => "exited",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Failed => "failed",
        }
    }
}

/// A coded error with a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// A stable `snake_case` code.
    pub code: String,
    /// What a person should read.
    pub message: String,
}

/// Why a condition wait's check failed (the daemon's `wait` schedule makes it). Also a
/// member of `wait.matched` and `wait.failed`, so unknown members
/// are ignored, as in every frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CheckError {
    /// The engine's stable code (`check_deadline`, `ctx_call_limit`, …).
    pub code: String,
    /// For people.
    pub message: String,
    /// When the check ended, wall-clock milliseconds.
    pub at_ms: u64,
}
