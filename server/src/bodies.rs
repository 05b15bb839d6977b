//! The request bodies of PROTOCOL §11, one decode function per body: the bytes are read by
//! the core's strict JSON reader (duplicate keys, floats and the like refused with their §10
//! code), then into a typed structure (`invalid_body`, naming the member), then checked for
//! what can be checked without the store (names, ranges, the manifest, the public key).
//!
//! The routes decode their bodies here and nowhere else, so the fuzz targets exercise the
//! code that runs. This module never touches the store, the dispatcher or the clock; what
//! needs them (a context a name refers to, a chain's shape once its names are resolved) is
//! the route's to check.

use ed25519_dalek::VerifyingKey;
use outpost_core::b64;
use outpost_core::json::Value;
use outpost_core::manifest::{Manifest, check_relative_path};
use outpost_core::routing::{DEFAULT_QUEUE_MINUTES, Fallback, Requirement, WhenOffline};
use outpost_core::wire::{CapabilitySource, Environment, Grant};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The most slots a daemon may offer.
pub const MAX_SLOTS: u32 = 8;
/// The slots a daemon offers when it names none.
pub const DEFAULT_SLOTS: u32 = 2;
/// The longest an execution request may wait for its end, in seconds.
pub const MAX_WAIT_SECS: u64 = 300;
/// How long an execution request waits when it names no `waitSecs`.
pub const DEFAULT_WAIT_SECS: u64 = 60;

/// Every scope a token may hold (§11.2).
pub const SCOPES: [&str; 6] = [
    "execution_context:create",
    "execution_context:read",
    "execution_context:execute",
    "execution_context:delete",
    "execution_context:command",
    "admin",
];

/// Why a body was refused: a §10/§11 code and what was wrong. Every one is answered 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct BodyError {
    code: &'static str,
    message: String,
}

impl BodyError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_body", message)
    }

    /// The error code (`invalid_body`, `malformed_json`, `invalid_name`, …).
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// What was wrong, for the client.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// `POST /v1/execution-contexts`: a machine registering its key.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The context's name, checked to be 1–64 characters of `[a-z0-9-]`.
    pub name: String,
    /// The machine's public key, checked to be a usable Ed25519 key.
    pub public_key: VerifyingKey,
    /// The slots offered, 1 to [`MAX_SLOTS`] ([`DEFAULT_SLOTS`] when absent).
    pub max_concurrent: u32,
    /// The environments the machine offers.
    pub environments: Vec<Environment>,
    /// The daemon's version, empty when absent.
    pub daemon_version: String,
}

/// `POST /v1/executions`: a capability to run, and where.
#[derive(Debug, Clone)]
pub struct ExecutionRequest {
    /// The capability: an inline one whose files have safe paths and base64url content, or
    /// one named by a well-formed digest.
    pub capability: CapabilitySource,
    /// Its manifest, parsed and validated; `None` for a digest (the stored bundle holds it).
    pub manifest: Option<Manifest>,
    /// The context named (a name, an id or `cloud`), not yet resolved.
    pub context: Option<String>,
    /// Whether a named context may fall through to the chain.
    pub fallback: Fallback,
    /// What the run needs of where it runs.
    pub requires: Vec<Requirement>,
    /// What to do when the context is offline (queue minutes checked).
    pub when_offline: WhenOffline,
    /// Whether the run wants host commands (only the operator's own runs may).
    pub wants_commands: bool,
    /// Whether the answer waits for the end.
    pub wait: bool,
    /// How long it waits at most, at most [`MAX_WAIT_SECS`].
    pub wait_secs: u64,
}

/// `PUT /v1/chain`: the caller's chain, as given (names or ids, not yet resolved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRequest {
    /// The entries, in order.
    pub chain: Vec<String>,
}

/// `POST /v1/users`: a new user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRequest {
    /// The user's name, checked like a context name.
    pub name: String,
    /// Its scopes, each one of [`SCOPES`]; `None` for every scope but `admin`.
    pub scopes: Option<Vec<String>>,
}

/// `POST /v1/execution-contexts/{context}/share`: whether every member may use the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShareRequest {
    /// On: every member may opt in to run on it; off: nobody but its operator (and every
    /// opt-in is dropped).
    pub all_members: bool,
}

/// Decodes a share body (`allMembers` is required, nothing else is allowed).
pub fn decode_share(bytes: &[u8]) -> Result<ShareRequest, BodyError> {
    parse(bytes)
}

/// `POST /v1/execution-contexts/commands`: the machine's own host-commands switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandsSwitch {
    /// On or off.
    pub enabled: bool,
}

/// Decodes a commands switch (`enabled` is required, nothing else is allowed).
pub fn decode_commands_switch(bytes: &[u8]) -> Result<CommandsSwitch, BodyError> {
    parse(bytes)
}

/// `POST /v1/execution-contexts/commands/authorize`: the hop before one host command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandAuthorize {
    /// The run asking.
    pub run_id: String,
    /// The command line (the server cuts it to 1,000 characters again).
    pub command: String,
    /// Its working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The names (never the values) of the variables it adds.
    #[serde(default)]
    pub env_keys: Vec<String>,
    /// Whether it is a background job.
    pub background: bool,
}

/// Decodes an authorize body.
pub fn decode_command_authorize(bytes: &[u8]) -> Result<CommandAuthorize, BodyError> {
    parse(bytes)
}

/// What a run asks to do with one of its requester's background jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobOp {
    /// Read its state and output so far.
    Poll,
    /// Kill its process group.
    Kill,
}

/// `POST /v1/execution-contexts/commands/jobs/authorize`: the hop before a `poll` or `kill`
/// of a background job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobAuthorize {
    /// The run asking.
    pub run_id: String,
    /// `poll` or `kill`.
    pub op: JobOp,
    /// The job's number on the machine (as `start` answered it).
    pub job_id: u64,
}

/// Decodes a job authorize body (every member is required, nothing else is allowed).
pub fn decode_job_authorize(bytes: &[u8]) -> Result<JobAuthorize, BodyError> {
    parse(bytes)
}

/// Decodes a registration body.
pub fn decode_registration(bytes: &[u8]) -> Result<Registration, BodyError> {
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Raw {
        name: String,
        public_key: String,
        #[serde(default)]
        max_concurrent: Option<u32>,
        #[serde(default)]
        environments: Option<Vec<Environment>>,
        #[serde(default)]
        daemon_version: Option<String>,
    }
    let raw: Raw = parse(bytes)?;
    let key = b64::decode_array::<32>(&raw.public_key)
        .map_err(|e| BodyError::invalid(format!("publicKey is not 32 bytes of base64url: {e}")))?;
    let public_key = VerifyingKey::from_bytes(&key)
        .ok()
        .filter(|k| !k.is_weak())
        .ok_or_else(|| BodyError::invalid("publicKey is not a usable Ed25519 key"))?;
    check_name(&raw.name)?;
    let max_concurrent = raw.max_concurrent.unwrap_or(DEFAULT_SLOTS);
    if !(1..=MAX_SLOTS).contains(&max_concurrent) {
        return Err(BodyError::invalid(format!(
            "maxConcurrent must be 1 to {MAX_SLOTS}"
        )));
    }
    Ok(Registration {
        name: raw.name,
        public_key,
        max_concurrent,
        environments: raw.environments.unwrap_or_default(),
        daemon_version: raw.daemon_version.unwrap_or_default(),
    })
}

/// Decodes an execution request body.
pub fn decode_execution_request(bytes: &[u8]) -> Result<ExecutionRequest, BodyError> {
    #[derive(Serialize, Deserialize, Clone, Copy)]
    #[serde(rename_all = "lowercase")]
    enum OfflineMode {
        Fail,
        Queue,
    }
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Raw {
        capability: CapabilitySource,
        #[serde(default)]
        context: Option<String>,
        #[serde(default)]
        fallback: Option<Fallback>,
        #[serde(default)]
        requires: Option<Vec<Requirement>>,
        #[serde(default)]
        when_offline: Option<OfflineMode>,
        #[serde(default)]
        queue_minutes: Option<u32>,
        #[serde(default)]
        wants_commands: Option<bool>,
        #[serde(default)]
        wait: Option<bool>,
        #[serde(default)]
        wait_secs: Option<u64>,
    }
    let raw: Raw = parse(bytes)?;
    let manifest = check_capability(&raw.capability)?;
    let wait_secs = raw.wait_secs.unwrap_or(DEFAULT_WAIT_SECS);
    if wait_secs > MAX_WAIT_SECS {
        return Err(BodyError::invalid(format!(
            "waitSecs is at most {MAX_WAIT_SECS}"
        )));
    }
    let when_offline = match raw.when_offline {
        None | Some(OfflineMode::Fail) => WhenOffline::Fail,
        Some(OfflineMode::Queue) => {
            WhenOffline::queue(raw.queue_minutes.unwrap_or(DEFAULT_QUEUE_MINUTES))
                .map_err(|e| BodyError::new(e.code(), e.to_string()))?
        }
    };
    Ok(ExecutionRequest {
        capability: raw.capability,
        manifest,
        context: raw.context,
        fallback: raw.fallback.unwrap_or_default(),
        requires: raw.requires.unwrap_or_default(),
        when_offline,
        wants_commands: raw.wants_commands.unwrap_or(false),
        wait: raw.wait.unwrap_or(false),
        wait_secs,
    })
}

/// Decodes a grant (`PATCH /v1/execution-contexts/{context}/grant`).
pub fn decode_grant(bytes: &[u8]) -> Result<Grant, BodyError> {
    let grant: Grant = parse(bytes)?;
    if !(1..=MAX_SLOTS).contains(&grant.limits.max_concurrent) {
        return Err(BodyError::invalid(format!(
            "limits.maxConcurrent must be 1 to {MAX_SLOTS}"
        )));
    }
    Ok(grant)
}

/// Decodes a chain (`PUT /v1/chain`).
pub fn decode_chain(bytes: &[u8]) -> Result<ChainRequest, BodyError> {
    parse(bytes)
}

/// Decodes a new user (`POST /v1/users`).
pub fn decode_user(bytes: &[u8]) -> Result<UserRequest, BodyError> {
    #[derive(Serialize, Deserialize)]
    struct Raw {
        name: String,
        #[serde(default)]
        scopes: Option<Vec<String>>,
    }
    let raw: Raw = parse(bytes)?;
    check_name(&raw.name)?;
    if let Some(bad) = raw
        .scopes
        .iter()
        .flatten()
        .find(|s| !SCOPES.contains(&s.as_str()))
    {
        return Err(BodyError::new(
            "unknown_scope",
            format!("{bad:?} is not a scope"),
        ));
    }
    Ok(UserRequest {
        name: raw.name,
        scopes: raw.scopes,
    })
}

/// Whether `name` is 1–64 characters of `[a-z0-9-]`, starting with a letter or digit (the
/// names of contexts and users).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
}

fn check_name(name: &str) -> Result<(), BodyError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(BodyError::new(
            "invalid_name",
            "a name is 1-64 characters of a-z, 0-9 and '-', starting with a letter or digit",
        ))
    }
}

/// Checks a capability the way the machine will: an inline one's manifest validates and
/// every file has a safe relative path and base64url content (its manifest is returned); one
/// named by digest needs a well-formed digest here (`None`: its bundle is checked against
/// the store, with [`check_inline`]).
fn check_capability(capability: &CapabilitySource) -> Result<Option<Manifest>, BodyError> {
    match capability {
        CapabilitySource::Inline { manifest, files } => check_inline(manifest, files).map(Some),
        CapabilitySource::Digest { sha256, .. } => {
            check_digest(sha256)?;
            Ok(None)
        }
    }
}

/// A digest as bodies and routes name it: 64 lowercase hex digits (`invalid_digest`).
pub fn check_digest(sha256: &str) -> Result<(), BodyError> {
    if sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(BodyError::new(
            "invalid_digest",
            "a bundle is named by its SHA-256: 64 lowercase hex digits",
        ))
    }
}

/// Checks an inline capability's manifest and files; returns the parsed manifest.
pub fn check_inline(
    manifest: &str,
    files: &[outpost_core::wire::InlineFile],
) -> Result<Manifest, BodyError> {
    let parsed = outpost_host::parse_manifest(manifest)
        .map_err(|e| BodyError::new("invalid_manifest", e.to_string()))?;
    for file in files {
        check_relative_path(&file.path)
            .map_err(|e| BodyError::invalid(format!("capability.files: {:?} {e}", file.path)))?;
        b64::decode(&file.content_b64).map_err(|e| {
            BodyError::invalid(format!("capability.files: {:?} contentB64: {e}", file.path))
        })?;
    }
    Ok(parsed)
}

/// Parses `bytes` as strict JSON into `T`, refusing an array where `T` has a structure
/// (which serde would otherwise read by position).
/// `POST /v1/execution-contexts/{context}/terminals`: the size a terminal opens with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminalOpen {
    /// Columns, 1–1000 (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    /// Rows, 1–1000 (default 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
}

/// Decodes a terminal's opening size; an empty body opens 80 × 24.
pub fn decode_terminal_open(
    bytes: &[u8],
) -> Result<outpost_core::executor::TerminalSize, BodyError> {
    let default = outpost_core::executor::TerminalSize::DEFAULT;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(default);
    }
    let open: TerminalOpen = parse(bytes)?;
    let side = |name: &str, value: Option<u16>, default: u16| match value {
        None => Ok(default),
        Some(n @ 1..=1000) => Ok(n),
        Some(n) => Err(BodyError::invalid(format!(
            "{name}: {n} is not within 1–1000"
        ))),
    };
    Ok(outpost_core::executor::TerminalSize {
        cols: side("cols", open.cols, default.cols)?,
        rows: side("rows", open.rows, default.rows)?,
    })
}

fn parse<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, BodyError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(BodyError::invalid("a JSON body is required"));
    }
    let value = outpost_core::json::parse_strict(bytes)
        .map_err(|e| BodyError::new(e.code(), format!("the body is not strict JSON: {e}")))?;
    if !matches!(value, Value::Object(_)) {
        return Err(BodyError::invalid("the body must be a JSON object"));
    }
    let typed: T = value.deserialize_into().map_err(|e| {
        BodyError::invalid(format!("the body does not have the expected members: {e}"))
    })?;
    let shape = serde_json::to_value(&typed)
        .map_err(|e| BodyError::invalid(format!("the body cannot be read back: {e}")))?;
    same_shape(&value, &shape, "the body")?;
    Ok(typed)
}

/// Refuses a given array or scalar where the typed reading has an object.
fn same_shape(given: &Value, typed: &serde_json::Value, at: &str) -> Result<(), BodyError> {
    match (typed, given) {
        (serde_json::Value::Object(typed), Value::Object(members)) => {
            for (name, value) in members {
                if let Some(expected) = typed.get(name) {
                    same_shape(value, expected, &format!("{at}.{name}"))?;
                }
            }
            Ok(())
        }
        (serde_json::Value::Object(_), _) => {
            Err(BodyError::invalid(format!("{at} must be a JSON object")))
        }
        (serde_json::Value::Array(typed), Value::Array(items)) => {
            for (i, (expected, value)) in typed.iter().zip(items).enumerate() {
                same_shape(value, expected, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

mod bundle;
#[cfg(test)]
mod tests;
mod waits;

pub use bundle::{CheckedBundle, check_bundle};

pub use waits::{
    DEFAULT_INTERVAL_MS, MAX_CONDITION_BYTES, MAX_INTERVAL_MS, MAX_REASON_CHARS, MIN_INTERVAL_MS,
    WaitRequest, decode_wait_request,
};
