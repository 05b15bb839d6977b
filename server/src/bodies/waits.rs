//! `POST /v1/waits`: a condition to re-check on a machine, and what to run when it matches.
//!
//! Checked here: the condition's size, the interval's range, the reason's length and the
//! continuation's execute body (read exactly as `POST /v1/executions` reads one, and inline
//! only, so the match's `outpost-wait.json` can be added to its files). The context a name
//! refers to and whether the expiry is still ahead are the route's to check.

pub use outpost_core::api::requests::WaitRequest;
use outpost_core::json::Value;
use outpost_core::wire::CapabilitySource;

use super::{BodyError, ExecutionRequest, decode_execution_request, parse};

pub use outpost_core::api::{
    DEFAULT_INTERVAL_MS, MAX_CONDITION_BYTES, MAX_INTERVAL_MS, MAX_REASON_CHARS, MIN_INTERVAL_MS,
};

/// `POST /v1/waits`, checked.
#[derive(Debug, Clone)]
pub struct WaitRegistration {
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

/// Decodes a wait registration: `invalid_condition`, `interval_out_of_range`,
/// `then_not_inline`, and the execute body's own codes for `then` (its message names it).
pub fn decode_wait_request(bytes: &[u8]) -> Result<WaitRegistration, BodyError> {
    let mut value = outpost_core::json::parse_strict(bytes)
        .map_err(|e| BodyError::new(e.code(), format!("the body is not strict JSON: {e}")))?;
    let then = match value.remove("then") {
        None | Some(Value::Null) => None,
        Some(then) => Some(then.to_canonical()),
    };
    let raw: WaitRequest = parse(&value.to_canonical())?;
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
    Ok(WaitRegistration {
        context: raw.context,
        condition: raw.condition,
        interval_ms,
        expires_at_ms: raw.expires_at_ms,
        reason: raw.reason,
        then: decoded,
        then_body: then,
    })
}
