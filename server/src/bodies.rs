//! The request bodies of PROTOCOL §11, one decode function per body: the bytes are read by
//! the core's strict JSON reader (duplicate keys, floats and the like refused with their §10
//! code), then into a typed structure (`invalid_body`, naming the member), then checked for
//! what can be checked without the store (names, ranges, the manifest, the public key).
//!
//! The routes decode their bodies here and nowhere else, so the fuzz targets exercise the
//! code that runs. This module never touches the store, the dispatcher or the clock; what
//! needs them (a context a name refers to, a chain's shape once its names are resolved) is
//! the route's to check.
//!
//! Each body is read into a type of this module (`…Body`, or the core's type) that also
//! describes itself (`schemars::JsonSchema`): the OpenAPI document's request schemas are generated
//! from these very types, with the patterns and ranges the decoders check written beside the
//! members they check, from the same constants. A test holds each decoder to its schema.

use ed25519_dalek::VerifyingKey;
use outpost_core::b64;
use outpost_core::json::Value;
use outpost_core::manifest::{Manifest, check_relative_path};
use outpost_core::wire::{Environment, Grant};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use outpost_core::api::requests::{
    ChainRequest, CommandAuthorize, CommandsSwitch, JobAuthorize, JobOp, RegisterRequest,
    ShareRequest, TerminalOpen, UserRequest,
};
pub use outpost_core::api::{
    DEFAULT_SLOTS, DEFAULT_WAIT_SECS, DIGEST_PATTERN, KEY_PATTERN, MAX_CHAIN, MAX_SLOTS,
    MAX_WAIT_SECS, NAME_PATTERN, SCOPES, valid_name,
};

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

/// Decodes a share body (`allMembers` is required, nothing else is allowed).
pub fn decode_share(bytes: &[u8]) -> Result<ShareRequest, BodyError> {
    parse(bytes)
}

/// Decodes a request for a daemon from afar (`action` is required; `lines` 1–200).
pub fn decode_daemon_control(bytes: &[u8]) -> Result<outpost_core::api::DaemonControl, BodyError> {
    let control: outpost_core::api::DaemonControl = parse(bytes)?;
    if let Some(lines) = control.lines
        && !(1..=outpost_core::wire::MAX_CONTROL_LINES).contains(&lines)
    {
        return Err(BodyError::invalid(format!(
            "lines must be 1 to {}, not {lines}",
            outpost_core::wire::MAX_CONTROL_LINES
        )));
    }
    Ok(control)
}

/// Decodes a commands switch (`enabled` is required, nothing else is allowed).
pub fn decode_commands_switch(bytes: &[u8]) -> Result<CommandsSwitch, BodyError> {
    parse(bytes)
}

/// Decodes an authorize body.
pub fn decode_command_authorize(bytes: &[u8]) -> Result<CommandAuthorize, BodyError> {
    parse(bytes)
}

/// Decodes a job authorize body (every member is required, nothing else is allowed).
pub fn decode_job_authorize(bytes: &[u8]) -> Result<JobAuthorize, BodyError> {
    parse(bytes)
}

/// Decodes a registration body.
pub fn decode_registration(bytes: &[u8]) -> Result<Registration, BodyError> {
    let raw: RegisterRequest = parse(bytes)?;
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

/// Decodes a chain (`PUT /v1/chain`): at most [`MAX_CHAIN`] entries (`invalid_chain`).
pub fn decode_chain(bytes: &[u8]) -> Result<ChainRequest, BodyError> {
    let chain: ChainRequest = parse(bytes)?;
    if chain.chain.len() > MAX_CHAIN {
        return Err(BodyError::new(
            "invalid_chain",
            format!("a chain holds at most {MAX_CHAIN} entries"),
        ));
    }
    Ok(chain)
}

/// Decodes a new join token (`POST /v1/join-tokens`): a name prefix that a name could start
/// with (the characters of a name, at most 63), positive bounds.
pub fn decode_join_token(bytes: &[u8]) -> Result<outpost_core::api::JoinTokenRequest, BodyError> {
    let raw: outpost_core::api::JoinTokenRequest = parse(bytes)?;
    if let Some(prefix) = &raw.name_prefix
        && (prefix.is_empty() || !outpost_core::api::valid_name(&format!("{prefix}x")))
    {
        return Err(BodyError::invalid(format!(
            "namePrefix {prefix:?} is not the start of a name (lowercase letters, digits and `-`, not starting with `-`; at most 63)"
        )));
    }
    if raw.ttl_secs == Some(0) || raw.uses == Some(0) {
        return Err(BodyError::invalid("ttlSecs and uses are at least 1"));
    }
    Ok(raw)
}

/// Decodes a new user (`POST /v1/users`).
pub fn decode_user(bytes: &[u8]) -> Result<UserRequest, BodyError> {
    let raw: UserRequest = parse(bytes)?;
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
    Ok(raw)
}

/// Writes into the generated schemas what a body's types cannot say because the core's
/// types serve frames too: over HTTP a grant's `limits.maxConcurrent` is 1 to [`MAX_SLOTS`]
/// ([`decode_grant`]).
pub(crate) fn constrain(schemas: &mut serde_json::Map<String, serde_json::Value>) {
    let slots = schemas
        .get_mut("GrantLimits")
        .and_then(|s| s.pointer_mut("/properties/maxConcurrent"));
    if let Some(slots) = slots {
        slots["minimum"] = 1.into();
        slots["maximum"] = MAX_SLOTS.into();
    }
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

/// Parses `bytes` as strict JSON into `T`, refusing an array where `T` has a structure
/// (which serde would otherwise read by position).
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

/// Refuses a given array or scalar where the typed reading has an object, and a number where
/// it has a string.
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
        // serde takes a variant's number for its name (`"kind": 0` for `"inline"`).
        (serde_json::Value::String(_), Value::Int(_)) => {
            Err(BodyError::invalid(format!("{at} must be a string")))
        }
        _ => Ok(()),
    }
}

mod bundle;
mod execute;
#[cfg(test)]
mod tests;
mod waits;

pub use bundle::{CheckedBundle, check_bundle};
pub use execute::{ExecuteRequest, ExecutionRequest, OfflineMode, decode_execution_request};

pub use waits::{
    DEFAULT_INTERVAL_MS, MAX_CONDITION_BYTES, MAX_INTERVAL_MS, MAX_REASON_CHARS, MIN_INTERVAL_MS,
    WaitRegistration, WaitRequest, decode_wait_request,
};
