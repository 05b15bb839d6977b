//! Condition waits in the world: the server's host keeps a durable table of waits (the
//! server's `waits` table) that survives its restarts, registers each one on its machine,
//! sends it again after every `Ready`, cancels some, records each ending once, acknowledges
//! every report and starts a matched wait's follow-up; the machines' hosts keep wait rows on
//! their disks and carry out checks whose outcomes come from the seed.
//!
//! Like the rest of the world it only carries out what the roles ask; every decision about a
//! wait is the daemon's schedule's.

use crate::ids::WaitId;
use std::collections::BTreeMap;
use std::time::Duration;

use super::World;
use crate::daemon;
use crate::rng::SplitMix64;
use crate::server;
use crate::session::{self, WaitOrder};
use crate::sim::WALL_ORIGIN;
use crate::wait::{CheckError, CheckOutcome, Ending, Report, WaitRow, WaitSpec};

/// A wait in the server's table.
pub(super) struct HostWait {
    /// The registration, as sent.
    spec: WaitSpec,
    /// The machine it waits on.
    machine: usize,
    /// When the client asks to cancel it, if it does.
    cancel_at: Option<Duration>,
    /// The client asked to cancel it.
    cancel_asked: bool,
    /// The host recorded its ending.
    ended: bool,
}

/// Waits not yet registered, by time, and the table of those that are.
#[derive(Default)]
pub(super) struct HostWaits {
    /// Registrations still to come: when, and the wait.
    pending: Vec<(Duration, HostWait)>,
    /// The table, by wait id.
    table: BTreeMap<WaitId, HostWait>,
}

impl HostWaits {
    /// Draws 2 to 6 waits over `spread` on `machines` machines: intervals of 1–10 s, most with
    /// an expiry, a quarter cancelled by their client soon after they are registered.
    pub fn draw(machines: usize, spread: Duration, rng: &mut SplitMix64) -> Self {
        let mut pending = Vec::new();
        let spread_ms = spread.as_millis().max(1) as u64;
        for n in 0..2 + rng.below(5) {
            let at = Duration::from_millis(rng.below(spread_ms));
            let machine = rng.below(machines as u64) as usize;
            let at_ms = (WALL_ORIGIN + at.as_secs()) * 1000;
            let expires_at_ms = rng
                .chance(7, 10)
                .then(|| at_ms + 30_000 + rng.below(15 * 60_000));
            let cancel_at = rng
                .chance(1, 4)
                .then(|| at + Duration::from_millis(rng.below(60_000)));
            let spec = WaitSpec {
                wait_id: format!("w{n:02}").into(),
                requester: "ada".into(),
                source: "async (ctx) => false".into(),
                interval_ms: 1_000 + rng.below(9_000),
                expires_at_ms,
                operator: false,
            };
            let wait = HostWait {
                spec,
                machine,
                cancel_at,
                cancel_asked: false,
                ended: false,
            };
            pending.push((at, wait));
        }
        pending.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        Self {
            pending,
            table: BTreeMap::new(),
        }
    }

    /// When the host next has something to do on its own.
    pub fn next_due(&self) -> Option<Duration> {
        let registration = self.pending.last().map(|(at, _)| *at);
        let cancel = self
            .table
            .values()
            .filter(|w| !w.cancel_asked && !w.ended)
            .filter_map(|w| w.cancel_at)
            .min();
        registration.into_iter().chain(cancel).min()
    }
}

/// A check running on a machine's fake condition engine.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunningCheck {
    /// When it ends.
    pub at: Duration,
    /// Its number.
    pub check: u64,
    /// The daemon asked to stop it.
    pub stopped: bool,
}

impl World {
    /// The host registers what is due and asks for the cancels that are.
    pub(super) fn fire_due_waits(&mut self) {
        let now = self.elapsed;
        while self.waits.pending.last().is_some_and(|(at, _)| *at <= now) {
            let Some((_, wait)) = self.waits.pending.pop() else {
                break;
            };
            let id = wait.spec.wait_id.clone();
            let i = wait.machine;
            if self.revoked_machine == Some(i) {
                // The server refuses a wait on a revoked context (`context_revoked`).
                self.note(format!("wait {id} refused: machine {i} is revoked"));
                continue;
            }
            self.checker
                .wait_registered(&id, i, wait.spec.expires_at_ms);
            self.note(format!("wait {id} registered on machine {i}"));
            self.waits.table.insert(id.clone(), wait);
            self.order_wait(&id, false);
        }
        let cancels: Vec<WaitId> = self
            .waits
            .table
            .iter()
            .filter(|(_, w)| !w.cancel_asked && !w.ended && w.cancel_at.is_some_and(|at| at <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in cancels {
            if let Some(w) = self.waits.table.get_mut(&id) {
                w.cancel_asked = true;
            }
            self.note(format!("wait {id} cancelled by its client"));
            self.order_wait(&id, true);
        }
    }

    /// Sends a wait's registration (and its cancel, once asked) to its machine's session.
    fn order_wait(&mut self, wait_id: &str, cancel_only: bool) {
        let Some(w) = self.waits.table.get(wait_id) else {
            return;
        };
        let context_id = self.machines[w.machine].context_id.clone();
        let mut orders = Vec::new();
        if !cancel_only {
            orders.push(WaitOrder::Register(w.spec.clone()));
        }
        if w.cancel_asked {
            orders.push(WaitOrder::Cancel {
                wait_id: wait_id.into(),
            });
        }
        for order in orders {
            let context_id = context_id.clone();
            self.feed_owner(server::Input::Wait {
                context_id: context_id.into(),
                order,
            });
        }
    }

    /// A session became ready: every wait of its machine that has not ended is sent again.
    pub(super) fn on_session_ready(&mut self, context_id: &str) {
        let Some(i) = self
            .machines
            .iter()
            .position(|m| m.context_id == context_id)
        else {
            return;
        };
        let open: Vec<WaitId> = self
            .waits
            .table
            .iter()
            .filter(|(_, w)| w.machine == i && !w.ended)
            .map(|(id, _)| id.clone())
            .collect();
        for id in open {
            self.order_wait(&id, false);
        }
    }

    /// A machine reported a wait's ending: the first is recorded (and a match's follow-up
    /// started), every one is acknowledged.
    pub(super) fn on_wait_ended(&mut self, context_id: &str, report: &Report) {
        let id = report.wait_id.clone();
        let Some(w) = self.waits.table.get_mut(&id) else {
            return self.checker.fail(format!(
                "{context_id} reported wait {id}, which no one registered"
            ));
        };
        if self.machines[w.machine].context_id != context_id {
            return self.checker.fail(format!(
                "{context_id} reported wait {id} of another machine"
            ));
        }
        if w.ended {
            self.checker.wait_reported_again(&id, &report.ending);
        } else {
            w.ended = true;
            self.checker.wait_recorded(&id, &report.ending);
            let kind = match &report.ending {
                Ending::Matched { .. } => {
                    self.checker.continuation_started(&id);
                    "matched".to_owned()
                }
                Ending::Failed { reason, .. } => reason.code().to_owned(),
            };
            self.note(format!(
                "wait {id} ended {kind} after {} checks",
                report.checks
            ));
        }
        let order = WaitOrder::Ack { wait_id: id };
        let context_id = context_id.to_owned();
        self.feed_owner(server::Input::Wait {
            context_id: context_id.into(),
            order,
        });
    }

    /// The host's own ending of a wait whose machine was revoked (as the server's revoke
    /// ends them: `context_revoked`).
    fn end_by_host(&mut self, wait_id: &str) {
        if let Some(w) = self.waits.table.get_mut(wait_id)
            && !w.ended
        {
            w.ended = true;
            self.checker.wait_ended_by_host(wait_id);
            self.note(format!("wait {wait_id} ended: its machine was revoked"));
        }
    }

    /// Machine `i` was revoked: its waits end at the server (its daemon stops for good).
    pub(super) fn end_waits_of(&mut self, i: usize) {
        let ids: Vec<WaitId> = self
            .waits
            .table
            .iter()
            .filter(|(_, w)| w.machine == i)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.end_by_host(&id);
        }
    }

    /// Whether every wait registered so far or to come has ended at the server.
    pub(super) fn waits_done(&self) -> bool {
        self.waits.pending.is_empty() && self.checker.waits_settled()
    }

    /// Machine `i`'s host saves a wait row to its disk.
    pub(super) fn save_wait(&mut self, i: usize, row: &WaitRow, written_ms: u64) {
        let id = row.spec.wait_id.clone();
        self.checker.wait_saved(&id, row.ending.as_ref());
        self.machines[i]
            .disk
            .waits
            .insert(id.into_string(), row.encode(written_ms));
    }

    /// Machine `i`'s host deletes a wait row.
    pub(super) fn forget_wait(&mut self, i: usize, wait_id: &str) {
        self.checker.wait_forgotten(wait_id);
        self.machines[i].disk.waits.remove(wait_id);
    }

    /// Machine `i` starts a check: it ends after 20 ms to 3 s.
    pub(super) fn start_check(&mut self, i: usize, wait_id: WaitId, check: u64) {
        self.checker.check_started(&wait_id, check, i);
        let at = self.elapsed + Duration::from_millis(20 + self.rng.below(3_000));
        let running = RunningCheck {
            at,
            check,
            stopped: false,
        };
        self.machines[i].checks.insert(wait_id, running);
    }

    /// Machine `i` stops a check: it ends 10 ms later.
    pub(super) fn stop_check(&mut self, i: usize, wait_id: &str, check: u64) {
        let at = self.elapsed + Duration::from_millis(10);
        if let Some(running) = self.machines[i].checks.get_mut(wait_id)
            && running.check == check
        {
            running.at = running.at.min(at);
            running.stopped = true;
        }
    }

    /// Checks that are due end: a stopped one as stopped, the others matched (1 in 8),
    /// failed (1 in 6) or not yet.
    pub(super) fn finish_due_checks(&mut self, i: usize) {
        let now = self.elapsed;
        if self.machines[i].suspended_until.is_some() {
            return;
        }
        let due: Vec<(WaitId, RunningCheck)> = self.machines[i]
            .checks
            .iter()
            .filter(|(_, c)| c.at <= now)
            .map(|(id, c)| (id.clone(), *c))
            .collect();
        for (wait_id, running) in due {
            self.machines[i].checks.remove(&wait_id);
            let outcome = if running.stopped {
                CheckOutcome::Stopped
            } else {
                self.check_outcome(&wait_id, running.check)
            };
            self.checker.check_ended(&wait_id, running.check);
            let input = daemon::Input::WaitChecked {
                wait_id,
                check: running.check,
                outcome,
            };
            self.feed_daemon(i, input);
        }
    }

    fn check_outcome(&mut self, wait_id: &str, check: u64) -> CheckOutcome {
        let at_ms = (WALL_ORIGIN + self.elapsed.as_secs()) * 1000;
        match self.rng.below(24) {
            0..=2 => CheckOutcome::Matched {
                resume_text: format!("{wait_id} matched on check {check}"),
                payload: Some(format!("{{\"check\":{check}}}")),
                evidence: "[]".into(),
            },
            3..=6 => CheckOutcome::Failed(CheckError {
                code: "check_threw".into(),
                message: "the condition threw".into(),
                at_ms,
            }),
            _ => CheckOutcome::NotYet,
        }
    }

    /// The rows on machine `i`'s disk, for its restore.
    pub(super) fn wait_rows(&mut self, i: usize) -> Option<Vec<(u64, WaitRow)>> {
        let decoded: Result<Vec<_>, _> = self.machines[i]
            .disk
            .waits
            .values()
            .map(|bytes| WaitRow::decode(bytes))
            .collect();
        match decoded {
            Ok(rows) => Some(rows),
            Err(e) => {
                self.checker
                    .fail(format!("machine {i}'s wait rows do not read: {e}"));
                None
            }
        }
    }

    /// A session event the waits care about.
    pub(super) fn on_wait_event(&mut self, context_id: &str, event: &session::Event) {
        match event {
            session::Event::Ready { .. } => self.on_session_ready(context_id),
            session::Event::WaitEnded(report) => self.on_wait_ended(context_id, report),
            _ => {}
        }
    }
}
