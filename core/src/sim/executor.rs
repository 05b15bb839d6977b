//! A fake executor: remembers what it was asked to run and finishes runs when told.

use crate::ids::RunId;
use std::collections::BTreeMap;

use crate::daemon::Execute;
use crate::time::Instant;
use crate::wire::{RunResult, RunStatus, Timing};

/// Runs started by a daemon, in memory.
#[derive(Debug, Default, Clone)]
pub struct FakeExecutor {
    /// Runs executing now, with their deadline.
    pub running: BTreeMap<RunId, Instant>,
    /// Every run ever started, in order (a run appearing twice is a bug).
    pub started: Vec<RunId>,
    /// Runs cancelled, in order.
    pub cancelled: Vec<RunId>,
}

impl FakeExecutor {
    /// Records a start.
    pub fn start(&mut self, execute: &Execute) {
        self.started.push(execute.run_id.clone());
        self.running
            .insert(execute.run_id.clone(), execute.deadline);
    }

    /// Stops a run; returns the result to give back if it was running.
    pub fn cancel(&mut self, run_id: &str) -> Option<RunResult> {
        self.running.remove(run_id)?;
        self.cancelled.push(run_id.into());
        Some(report(RunStatus::Cancelled, None))
    }

    /// Finishes a running run with `exit_code`; returns its result if it was running.
    pub fn finish(&mut self, run_id: &str, exit_code: i32) -> Option<RunResult> {
        self.running.remove(run_id)?;
        Some(report(RunStatus::Exited, Some(exit_code)))
    }

    /// Forgets every run (the machine crashed).
    pub fn crash(&mut self) {
        self.running.clear();
    }
}

/// A result as a fake executor reports it: no output, 1 ms setup, 2 ms execute.
pub(super) fn report(status: RunStatus, exit_code: Option<i32>) -> RunResult {
    RunResult {
        status,
        exit_code,
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        timing: Timing {
            setup_ms: 1,
            execute_ms: 2,
            ..Timing::default()
        },
        error: None,
        egress_denied: Vec::new(),
    }
}
