//! What an execution shows as its `status` (PROTOCOL §11.4), as one type: the store writes
//! it, the views and the OpenAPI document show it, the CLI reads it. This file owns the
//! names and which of them are ends; it never decides *when* a status changes (the
//! dispatcher does).

use serde::{Deserialize, Serialize};

use super::ExecutionOutcome;
use crate::wire::RunStatus;

/// An execution's status: `pending` until a machine accepts it, `running` until it ends,
/// then how it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Waiting for a machine (or a free slot) to accept it: every execution starts so.
    #[default]
    Pending,
    /// Accepted and running.
    Running,
    /// The capability ran and exited (any exit code, or a signal it did not get from us).
    Exited,
    /// Its deadline passed and it was stopped.
    TimedOut,
    /// It was cancelled (by a person, a revoke or lost access) and stopped.
    Cancelled,
    /// It could not be run or placed (the error says why).
    Failed,
    /// Its machine stopped answering after it started; it was not run again.
    Lost,
}

impl ExecutionStatus {
    /// Every status, in the order PROTOCOL §11.4 lists them.
    pub const ALL: [ExecutionStatus; 7] = [
        ExecutionStatus::Pending,
        ExecutionStatus::Running,
        ExecutionStatus::Exited,
        ExecutionStatus::TimedOut,
        ExecutionStatus::Cancelled,
        ExecutionStatus::Failed,
        ExecutionStatus::Lost,
    ];

    /// The status as the API spells it (`timed_out`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Pending => "pending",
            ExecutionStatus::Running => "running",
            ExecutionStatus::Exited => "exited",
            ExecutionStatus::TimedOut => "timed_out",
            ExecutionStatus::Cancelled => "cancelled",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Lost => "lost",
        }
    }

    /// The status the API spells `text`; none for any other text.
    pub fn parse(text: &str) -> Option<ExecutionStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether the execution has ended (it never changes again).
    pub fn is_final(self) -> bool {
        !matches!(self, ExecutionStatus::Pending | ExecutionStatus::Running)
    }
}

impl std::fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<RunStatus> for ExecutionStatus {
    /// How a run that reported its result ended, as its execution shows it.
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Exited => ExecutionStatus::Exited,
            RunStatus::TimedOut => ExecutionStatus::TimedOut,
            RunStatus::Cancelled => ExecutionStatus::Cancelled,
            RunStatus::Failed => ExecutionStatus::Failed,
        }
    }
}

impl ExecutionOutcome {
    /// The status an execution that ended so shows.
    pub fn status(&self) -> ExecutionStatus {
        match self {
            ExecutionOutcome::Completed(result) => result.status.into(),
            ExecutionOutcome::Lost => ExecutionStatus::Lost,
            ExecutionOutcome::Cancelled { .. } => ExecutionStatus::Cancelled,
            ExecutionOutcome::Failed { .. } => ExecutionStatus::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_only_ends_are_final() {
        for status in ExecutionStatus::ALL {
            assert_eq!(ExecutionStatus::parse(status.as_str()), Some(status));
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
        }
        assert_eq!(ExecutionStatus::parse("Running"), None);
        let ends: Vec<_> = ExecutionStatus::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(ends.len(), 5);
        for run in [
            RunStatus::Exited,
            RunStatus::TimedOut,
            RunStatus::Cancelled,
            RunStatus::Failed,
        ] {
            assert_eq!(ExecutionStatus::from(run).as_str(), run.as_str());
        }
    }
}
