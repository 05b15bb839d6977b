//! What the dispatcher does about time it was not running: the grace a restarted server gives
//! its machines to come back, and the shift of every silence deadline after a pause (a stopped
//! process, a suspended host) — so a daemon is never blamed for the server's own silence.
//!
//! It owns those two decisions and nothing else: it never routes (it parks an execution for
//! [`Server::place`] to plan again) and never reads a clock (pauses are seen as inputs that
//! arrive later than the wake-up the host was asked for).

use crate::ids::ExecutionId;
use std::time::Duration;

use super::{Event, Output, Place, Server};
use crate::routing::{AttemptOutcome, Plan, RoutingError};
use crate::time::Instant;

/// How long after a restart an execution that would find a machine offline waits for the
/// machines to reconnect before it is routed as usual: two heartbeats, time for every daemon
/// the crash disconnected to come back (they reconnect within a second or two).
pub const RESTART_GRACE: Duration = Duration::from_secs(30);

/// While anything runs against a deadline (a connection, a lease, an offer, a queue), the
/// dispatcher asks to be woken at least this often, so that a gap between its inputs much
/// longer than this can only mean it was not running.
pub const PAUSE_PROBE: Duration = Duration::from_secs(1);

/// How much later than the wake-up it asked for an input may arrive before the dispatcher
/// counts the gap as a pause of its own.
pub const PAUSE_SLACK: Duration = Duration::from_secs(1);

impl Server {
    /// Starts the restart grace (from [`Server::restore`]).
    pub(super) fn start_grace(&mut self) {
        self.grace_until = Some(self.now.instant.saturating_add(RESTART_GRACE));
    }

    /// Whether the restart grace is running.
    pub(super) fn in_grace(&self) -> bool {
        self.grace_until
            .is_some_and(|until| self.now.instant < until)
    }

    /// Whether a plan made now would pass over a machine because it is offline — which,
    /// during the grace, may only mean it has not reconnected yet.
    pub(super) fn meets_offline(planned: &Result<Plan, RoutingError>) -> bool {
        let attempts = match planned {
            Ok(Plan::Dispatch(route)) => route.attempts(),
            Ok(Plan::Queue(_)) => return false,
            Err(e) => e.attempts(),
        };
        attempts
            .iter()
            .any(|a| a.outcome == AttemptOutcome::Offline)
    }

    /// Parks an execution until a machine comes up or the grace ends, whichever is first;
    /// then it is planned from scratch ([`Server::replan_parked`]).
    pub(super) fn park(&mut self, exec_id: &str) {
        let Some(until) = self.grace_until else {
            return;
        };
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        e.place = Place::Unplaced;
        e.route = None;
        self.journal.touch_execution(exec_id);
        self.queue_wakes
            .set(&ExecutionId::new(exec_id), Some((until, "restart grace")));
    }

    /// The executions the grace parked (the only ones left unplaced between inputs).
    fn parked(&self) -> Vec<ExecutionId> {
        self.executions
            .iter()
            .filter(|(_, e)| matches!(e.place, Place::Unplaced))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Plans again every execution parked by the grace.
    pub(super) fn replan_parked(&mut self) {
        if self.grace_until.is_none() {
            return;
        }
        for exec_id in self.parked() {
            // Still parked: placing one can plan others from inside this loop (see
            // `replan_queued`).
            if self
                .executions
                .get(&exec_id)
                .is_some_and(|e| matches!(e.place, Place::Unplaced))
            {
                self.place(&exec_id);
            }
        }
        if !self.in_grace() {
            self.grace_until = None;
        }
    }

    /// Called with every input's time, before the input: when it comes later than the wake-up
    /// the host was last asked for (by more than [`PAUSE_SLACK`]; that wake-up is at most
    /// [`PAUSE_PROBE`] away while any deadline runs), the dispatcher was not running
    /// meanwhile, and every silence deadline moves on by how late it came.
    pub(super) fn notice_pause(&mut self, now: Instant) {
        let Some(asked) = self.asked.take() else {
            return;
        };
        if now <= asked.saturating_add(PAUSE_SLACK) {
            return;
        }
        // How late the host woke it: within a probe's second of the time it did not run, and
        // never more than that — a busy host that wakes it late again and again must not hold
        // every deadline still.
        let paused = now.saturating_duration_since(asked);
        for slot in 0..self.machines.len() {
            let m = self.machines.at_mut(slot);
            m.session.shift_timers(paused);
            let wake = m.session.poll_timeout();
            self.session_wakes.set(slot, wake);
        }
        let moved: Vec<(ExecutionId, Option<Instant>)> = self
            .executions
            .iter_mut()
            .filter_map(|(id, e)| match &mut e.place {
                Place::Queued { until, .. } => {
                    *until = until.saturating_add(paused);
                    Some((id.clone(), Some(*until)))
                }
                Place::OnContext { started: true, .. } => Some((id.clone(), None)),
                _ => None,
            })
            .collect();
        for (exec_id, queued_until) in moved {
            // Queue deadlines and leases are in the records: write them again.
            self.journal.touch_execution(&exec_id);
            if let Some(until) = queued_until {
                self.queue_wakes.set(&exec_id, Some((until, "queue")));
            }
        }
        if let Some(grace) = &mut self.grace_until {
            *grace = grace.saturating_add(paused);
            let grace = *grace;
            for exec_id in self.parked() {
                self.queue_wakes
                    .set(&exec_id, Some((grace, "restart grace")));
            }
        }
        self.outputs
            .push_back(Output::Event(Event::Paused { paused_for: paused }));
    }
}
