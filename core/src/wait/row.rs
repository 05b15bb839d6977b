//! A wait's durable row: everything the schedule needs to resume the wait after a crash,
//! encoded in the record envelope ([`crate::record`], type `wait.row`).
//!
//! One row per wait, replaced on every save: the registration, the check count, the
//! consecutive-error count and the last error, when the next check is due (wall time, rebased
//! on restore), and the ending once there is one. This module never decides anything.

use serde::{Deserialize, Serialize};

use super::{CheckError, Ending, FailReason, WaitSpec};
use crate::record::{self, RecordError};

const ROW_TYPE: &str = "wait.row";

/// One wait as the daemon's store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitRow {
    /// The registration as `wait.register` carried it (id, requester, source, interval, expiry).
    pub spec: WaitSpec,
    /// Checks that ran to an outcome.
    pub checks: u64,
    /// Failed checks since the last one that did not fail.
    pub consecutive_errors: u32,
    /// The last failed check's error (kept after later successes, for `show`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<CheckError>,
    /// When the next check is due, wall-clock milliseconds; `None` once the wait ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_check_ms: Option<u64>,
    /// The wait was cancelled or expired while a check ran: it ends so once that check
    /// stopped, or at once after a restart (the check died with the process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping: Option<FailReason>,
    /// How the wait ended; `None` while it is active. An ended row stays until the server
    /// acknowledges the ending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<Ending>,
}

/// Why bytes are not a wait row.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a wait row: {0}")]
pub struct WaitRowError(#[from] pub RecordError);

impl WaitRowError {
    /// The stable code of the envelope's refusal (`record_malformed`, …).
    pub fn code(&self) -> &'static str {
        self.0.code()
    }
}

impl WaitRow {
    /// The row as one JSON document written at `written_ms`.
    pub fn encode(&self, written_ms: u64) -> Vec<u8> {
        record::encode(ROW_TYPE, written_ms, self)
    }

    /// Reads a row and when it was written; cut, flipped or foreign bytes give a typed error.
    pub fn decode(bytes: &[u8]) -> Result<(u64, WaitRow), WaitRowError> {
        Ok(record::decode(ROW_TYPE, bytes)?)
    }
}
