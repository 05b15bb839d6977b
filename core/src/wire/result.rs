//! A run's result: the one shape the executor's report, the `run.result` frame and the
//! server's record share.

use serde::{Deserialize, Serialize};

use super::types::{ErrorBody, RunStatus, Timing};

/// How a committed run ended: what the daemon's host reports when its executor finishes
/// (`daemon::Input::RunFinished`), what `run.result` carries (next to its `runId`), and what
/// a session records (`session::RunOutcome::Completed`).
///
/// Who fills [`RunResult::timing`]: the host sets `setup_ms` and `execute_ms` from its
/// executor; the daemon sets `queue_ms` and `daemon_ms` on its clock before sending; the
/// session adds `server_ms` and `transit_ms` on the server's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// How it ended.
    pub status: RunStatus,
    /// The exit code, when the capability exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Captured standard output (lossy UTF-8), capped.
    pub stdout: String,
    /// Captured standard error (lossy UTF-8), capped.
    pub stderr: String,
    /// True if either stream was cut at its cap.
    pub truncated: bool,
    /// Where the time went.
    pub timing: Timing,
    /// Why the run could not be run, for [`RunStatus::Failed`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Destinations (`host:port`) the run's egress gate refused, for the server's audit log
    /// (`egress_denied`); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_denied: Vec<String>,
}

impl RunResult {
    /// A run that could not be run: status `failed`, no output, `error` saying why.
    pub fn failed(error: ErrorBody) -> Self {
        Self {
            status: RunStatus::Failed,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            timing: Timing::default(),
            error: Some(error),
            egress_denied: Vec::new(),
        }
    }

    /// [`RunResult::failed`] with an error of this `code` and `message`.
    pub fn failed_with(code: &str, message: impl Into<String>) -> Self {
        Self::failed(ErrorBody {
            code: code.into(),
            message: message.into(),
        })
    }
}
