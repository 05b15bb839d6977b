//! `POST /v1/waits`: a condition to re-check on a machine, and what to run when it matches.
//!
//! Checked here: the condition's size, the interval's range, the reason's length and the
//! continuation's execute body (read exactly as `POST /v1/executions` reads one, and inline
//! only, so the match's `outpost-wait.json` can be added to its files). The context a name
//! refers to and whether the expiry is still ahead are the route's to check.

use outpost_core::json::Value;
use outpost_core::wire::CapabilitySource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BodyError, ExecuteBody, ExecutionRequest, decode_execution_request, parse};

/// The largest condition source, in bytes.
pub const MAX_CONDITION_BYTES: usize = 64 * 1024;
/// The shortest interval a registration may ask for, in ms (the daemon's minimum).
pub const MIN_INTERVAL_MS: u64 = 1_000;
/// The longest interval a registration may ask for, in ms (one day).
pub const MAX_INTERVAL_MS: u64 = 86_400_000;
/// The interval when the registration names none, in ms.
pub const DEFAULT_INTERVAL_MS: u64 = 30_000;
/// The longest `reason`, in characters.
pub const MAX_REASON_CHARS: usize = 1_000;

/// `POST /v1/waits`, checked.
#[derive(Debug, Clone)]
pub struct WaitRequest {
    /// The context named (a name or an id), not yet resolved.
    pub context: String,
    /// The condition's JavaScript source: 1 to [`MAX_CONDITION_BYTES`] bytes.
    pub condition: String,
    /// [`MIN_INTERVAL_MS`] to [`MAX_INTERVAL_MS`] ([`DEFAULT_INTERVAL_MS`] when absent).
    pub interval_ms: u64,
    /// When the wait gives up, Unix ms (not yet compared with the clock).
    pub expires_at_ms: Option<u64>,
    /// Why the requester waits, for people.
    pub reason: Option<String>,
    /// The continuation, decoded; its capability is inline.
    pub then: Option<ExecutionRequest>,
    /// The continuation's body as given (canonical JSON), to be stored and read again.
    pub then_body: Option<Vec<u8>>,
}

/// `POST /v1/waits`: a condition to re-check on a machine, as sent (checked by
/// `decode_wait_request`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WaitRequest")]
pub struct WaitBody {
    /// The context that checks it: a name or an id (not `cloud`).
    #[schemars(length(min = 1))]
    pub context: String,
    /// The condition's JavaScript source, 1 to 65,536 bytes of UTF-8, not only spaces
    /// (`invalid_condition`).
    #[schemars(length(min = 1, max = MAX_CONDITION_BYTES), regex(pattern = r"\S"))]
    pub condition: String,
    /// Milliseconds between checks (default 30,000; `interval_out_of_range`).
    #[serde(default)]
    #[schemars(range(min = MIN_INTERVAL_MS, max = MAX_INTERVAL_MS))]
    pub interval_ms: Option<u64>,
    /// When the wait gives up, Unix ms, in the future (`expires_in_the_past`).
    #[serde(default)]
    pub expires_at_ms: Option<u64>,
    /// Why the requester waits, for people.
    #[serde(default)]
    #[schemars(length(max = MAX_REASON_CHARS))]
    pub reason: Option<String>,
    /// What to run once it matches: an execute body whose capability is inline
    /// (`then_not_inline`). Decoded apart, as `POST /v1/executions` reads one.
    #[serde(default, skip_serializing)]
    pub then: Option<ExecuteBody>,
}

/// Decodes a wait registration: `invalid_condition`, `interval_out_of_range`,
/// `then_not_inline`, and the execute body's own codes for `then` (its message names it).
pub fn decode_wait_request(bytes: &[u8]) -> Result<WaitRequest, BodyError> {
    let mut value = outpost_core::json::parse_strict(bytes)
        .map_err(|e| BodyError::new(e.code(), format!("the body is not strict JSON: {e}")))?;
    let then = match value.remove("then") {
        None | Some(Value::Null) => None,
        Some(then) => Some(then.to_canonical()),
    };
    let raw: WaitBody = parse(&value.to_canonical())?;
    if raw.condition.trim().is_empty() || raw.condition.len() > MAX_CONDITION_BYTES {
        return Err(BodyError::new(
            "invalid_condition",
            format!("condition is the JavaScript source, 1 to {MAX_CONDITION_BYTES} bytes"),
        ));
    }
    let interval_ms = raw.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS);
    if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&interval_ms) {
        return Err(BodyError::new(
            "interval_out_of_range",
            format!("intervalMs is {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS}"),
        ));
    }
    if raw.context.is_empty() {
        return Err(BodyError::invalid("context: a name or an id is required"));
    }
    if raw
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
    {
        return Err(BodyError::invalid(format!(
            "reason is at most {MAX_REASON_CHARS} characters"
        )));
    }
    let decoded = then
        .as_deref()
        .map(decode_execution_request)
        .transpose()
        .map_err(|e| BodyError::new(e.code(), format!("then: {}", e.message())))?;
    if let Some(request) = &decoded
        && !matches!(request.capability, CapabilitySource::Inline { .. })
    {
        return Err(BodyError::new(
            "then_not_inline",
            "then.capability must be inline (the match's outpost-wait.json is added to its files)",
        ));
    }
    Ok(WaitRequest {
        context: raw.context,
        condition: raw.condition,
        interval_ms,
        expires_at_ms: raw.expires_at_ms,
        reason: raw.reason,
        then: decoded,
        then_body: then,
    })
}
