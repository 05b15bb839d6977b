//! The session's runs in flight, and the memory of runs that ended.

use crate::ids::RunId;
use std::collections::{HashSet, VecDeque};

use super::{ConnId, RunSpec};
use crate::time::Instant;

/// Where an offered run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RunState {
    /// `run.request` sent on `conn`; no answer yet. Counts toward the slots. Withdrawn
    /// (`run.cancel`, `offer_unanswered`) when no answer came by `deadline`.
    Dispatched { conn: ConnId, deadline: Instant },
    /// `run.commit` sent: the lease runs until `lost_at`.
    Committed {
        committed_at: Instant,
        lost_at: Instant,
    },
}

/// A run offered to the machine and not yet ended.
#[derive(Debug, Clone)]
pub(super) struct ServerRun {
    pub spec: RunSpec,
    pub state: RunState,
}

/// Ids of runs that ended recently, so a late or repeated `run.result` is acknowledged but
/// never recorded twice. Bounded: the oldest ids are forgotten first.
#[derive(Debug, Clone)]
pub struct RecentlyEnded {
    capacity: usize,
    order: VecDeque<RunId>,
    set: HashSet<RunId>,
}

impl RecentlyEnded {
    /// Remembers up to `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// Whether `run_id` ended recently.
    pub fn contains(&self, run_id: &str) -> bool {
        self.set.contains(run_id)
    }

    /// Records that `run_id` ended.
    pub fn insert(&mut self, run_id: RunId) {
        if self.capacity == 0 || !self.set.insert(run_id.clone()) {
            return;
        }
        self.order.push_back(run_id);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}
