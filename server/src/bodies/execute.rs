//! `POST /v1/executions`: a capability to run, and where. Checked here: the capability (an
//! inline one's manifest and files, a digest's shape), `waitSecs` and, for a queued run,
//! `queueMinutes`. Which context a name means and whether a digest's bundle is stored are the
//! route's to check. The body of a wait's `then` is read here too.

pub use outpost_core::api::requests::{ExecuteRequest, OfflineMode};
use outpost_core::manifest::Manifest;
use outpost_core::routing::{DEFAULT_QUEUE_MINUTES, Fallback, Requirement, WhenOffline};
use outpost_core::wire::CapabilitySource;

use super::{BodyError, DEFAULT_WAIT_SECS, MAX_WAIT_SECS, check_digest, check_inline, parse};

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
    /// What to do when the context has every slot taken (queue minutes checked).
    pub when_busy: WhenOffline,
    /// Whether the run wants host commands (only the operator's own runs may).
    pub wants_commands: bool,
    /// Whether the answer waits for the end.
    pub wait: bool,
    /// How long it waits at most, at most [`MAX_WAIT_SECS`].
    pub wait_secs: u64,
}

/// Decodes an execution request body.
pub fn decode_execution_request(bytes: &[u8]) -> Result<ExecutionRequest, BodyError> {
    let raw: ExecuteRequest = parse(bytes)?;
    let manifest = check_capability(&raw.capability)?;
    let wait_secs = raw.wait_secs.unwrap_or(DEFAULT_WAIT_SECS);
    if wait_secs > MAX_WAIT_SECS {
        return Err(BodyError::invalid(format!(
            "waitSecs is at most {MAX_WAIT_SECS}"
        )));
    }
    let mode = |asked: Option<OfflineMode>| match asked {
        None | Some(OfflineMode::Fail) => Ok(WhenOffline::Fail),
        Some(OfflineMode::Queue) => {
            WhenOffline::queue(raw.queue_minutes.unwrap_or(DEFAULT_QUEUE_MINUTES))
                .map_err(|e| BodyError::new(e.code(), e.to_string()))
        }
    };
    let when_offline = mode(raw.when_offline)?;
    let when_busy = mode(raw.when_busy)?;
    Ok(ExecutionRequest {
        capability: raw.capability,
        manifest,
        context: raw.context,
        fallback: raw.fallback.unwrap_or_default(),
        requires: raw.requires.unwrap_or_default(),
        when_offline,
        when_busy,
        wants_commands: raw.wants_commands.unwrap_or(false),
        wait: raw.wait.unwrap_or(false),
        wait_secs,
    })
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
