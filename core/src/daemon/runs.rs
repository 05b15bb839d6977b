//! The daemon's runs: accepted, then committed (fetching or executing), until the executor
//! reports them finished.

use crate::time::Instant;
use crate::wire::{CapabilitySource, Environment};

/// Where a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RunState {
    /// Accepted; the server has not committed it. Nothing runs yet.
    Accepted,
    /// Committed; the bundle is being fetched.
    Fetching { committed_at: Instant },
    /// Committed and handed to an executor.
    Executing {
        committed_at: Instant,
        started_at: Instant,
        deadline: Instant,
        cancel_sent: bool,
    },
}

/// One run the daemon holds a slot for.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub environment: Environment,
    pub capability: CapabilitySource,
    pub timeout_ms: u64,
    pub shared_run: bool,
    pub requester: String,
    pub accepted_at: Instant,
    pub state: RunState,
}

impl Run {
    /// Committed runs are the ones a reconnecting daemon lists in `heldRuns`.
    pub fn is_committed(&self) -> bool {
        !matches!(self.state, RunState::Accepted)
    }
}
