//! The schedule itself: every wait's phase, the due and expiry queues, the running count.
//! See the module docs of [`crate::wait`] for the run loop and the promises.

use crate::ids::WaitId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{
    CheckError, CheckOutcome, Ending, FailReason, Input, MAX_CONSECUTIVE_ERRORS, Output, Report,
    ScheduleConfig, ScheduleError, WaitRow, WaitSpec, continuation_id,
};
use crate::MAX_QUEUED_OUTPUTS;
use crate::time::{Instant, NextWake, Now, WallAnchor, rebase};

/// Where one wait is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Waiting for its next check, due at this instant (it is in the due queue).
    Idle { due: Instant },
    /// Check `check` runs; `stopping` says why it was asked to stop.
    Running {
        check: u64,
        due: Instant,
        stopping: Option<FailReason>,
    },
    /// Ended; kept until the server acknowledges the ending.
    Ended(Ending),
}

#[derive(Debug, Clone)]
struct Wait {
    spec: WaitSpec,
    checks: u64,
    consecutive_errors: u32,
    last_error: Option<CheckError>,
    expires_at: Option<Instant>,
    phase: Phase,
}

/// One wait as `outpost wait show` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitView {
    /// `active`, `checking`, `matched` or `failed`.
    pub state: &'static str,
    /// Checks that ran to an outcome.
    pub checks: u64,
    /// Failed checks in a row.
    pub consecutive_errors: u32,
    /// The last failed check's error.
    pub last_error: Option<CheckError>,
    /// When the next check is due while the wait is active (`None` while one runs or after
    /// the end).
    pub next_check: Option<Instant>,
    /// How it ended.
    pub ending: Option<Ending>,
}

/// The daemon's wait schedule. See [`crate::wait`].
#[derive(Debug)]
pub struct Schedule {
    config: ScheduleConfig,
    now: Now,
    anchor: WallAnchor,
    waits: BTreeMap<WaitId, Wait>,
    due: BTreeSet<(Instant, WaitId)>,
    expiries: BTreeSet<(Instant, WaitId)>,
    running: usize,
    connected: bool,
    outputs: VecDeque<Output>,
}

impl Schedule {
    /// An empty schedule at `now`, not connected.
    pub fn new(config: ScheduleConfig, now: Now) -> Self {
        let mut config = config;
        config.max_running = config.max_running.max(1);
        Self {
            config,
            now,
            anchor: WallAnchor::new(now),
            waits: BTreeMap::new(),
            due: BTreeSet::new(),
            expiries: BTreeSet::new(),
            running: 0,
            connected: false,
            outputs: VecDeque::new(),
        }
    }

    /// The schedule a crashed process left in its rows (each with the time it was written):
    /// every active wait resumes at the check it had due (at once when that passed, and at
    /// once for a wait whose check was running), every ended one waits for its
    /// acknowledgement. Feed [`Input::Timeout`] to start what is due.
    pub fn restore(
        config: ScheduleConfig,
        now: Now,
        rows: impl IntoIterator<Item = (u64, WaitRow)>,
    ) -> Self {
        let mut schedule = Self::new(config, now);
        for (written_ms, row) in rows {
            let expires_at = row
                .spec
                .expires_at_ms
                .map(|ms| schedule.instant_of_wall(ms));
            let stopped = row.stopping.filter(|_| row.ending.is_none());
            let phase = match (row.ending, stopped) {
                (Some(ending), _) => Phase::Ended(ending),
                (None, Some(reason)) => Phase::Ended(Ending::Failed {
                    reason,
                    at_ms: schedule.wall_ms(),
                }),
                (None, None) => {
                    let due = row
                        .next_check_ms
                        .map_or(now.instant, |ms| rebase(ms, written_ms, now));
                    Phase::Idle { due }
                }
            };
            let id = row.spec.wait_id.clone();
            let wait = Wait {
                spec: row.spec,
                checks: row.checks,
                consecutive_errors: row.consecutive_errors,
                last_error: row.last_error,
                expires_at,
                phase,
            };
            schedule.index(&id, &wait);
            schedule.waits.insert(id.clone(), wait);
            if stopped.is_some() {
                // Its end was saved; the check it waited for died with the process.
                schedule.save(&id);
            }
        }
        schedule
    }

    // ---- getters

    /// Waits held: active ones and ended ones not yet acknowledged.
    pub fn len(&self) -> usize {
        self.waits.len()
    }

    /// True when no wait is held.
    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }

    /// Checks running now.
    pub fn running(&self) -> usize {
        self.running
    }

    /// One wait as `show` reports it; `None` for a wait not held.
    pub fn view(&self, wait_id: &str) -> Option<WaitView> {
        let w = self.waits.get(wait_id)?;
        let (state, next_check, ending) = match &w.phase {
            Phase::Idle { due } => ("active", Some(*due), None),
            Phase::Running { .. } => ("checking", None, None),
            Phase::Ended(e @ Ending::Matched { .. }) => ("matched", None, Some(e.clone())),
            Phase::Ended(e @ Ending::Failed { .. }) => ("failed", None, Some(e.clone())),
        };
        Some(WaitView {
            state,
            checks: w.checks,
            consecutive_errors: w.consecutive_errors,
            last_error: w.last_error.clone(),
            next_check,
            ending,
        })
    }

    /// The ids of every wait held, in order.
    pub fn wait_ids(&self) -> impl Iterator<Item = &str> {
        self.waits.keys().map(WaitId::as_str)
    }

    // ---- handle

    /// Feeds one input at time `now`.
    pub fn handle_input(&mut self, now: Now, input: Input) -> Result<(), ScheduleError> {
        if self.outputs.len() > MAX_QUEUED_OUTPUTS {
            return Err(ScheduleError::OutputBacklog);
        }
        if now.instant < self.now.instant {
            return Err(ScheduleError::TimeWentBackwards);
        }
        self.now = now;
        match input {
            Input::Timeout => {}
            Input::Register(spec) => self.on_register(spec),
            Input::Cancel { wait_id } => self.on_cancel(wait_id),
            Input::Checked {
                wait_id,
                check,
                outcome,
            } => self.on_checked(&wait_id, check, outcome),
            Input::Acked { wait_id } => {
                if matches!(
                    self.waits.get(&wait_id).map(|w| &w.phase),
                    Some(Phase::Ended(_))
                ) {
                    self.waits.remove(&wait_id);
                    self.outputs.push_back(Output::Forget { wait_id });
                }
            }
            Input::Connected => {
                self.connected = true;
                let ended: Vec<WaitId> = self
                    .waits
                    .iter()
                    .filter(|(_, w)| matches!(w.phase, Phase::Ended(_)))
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in ended {
                    self.report(&id);
                }
            }
            Input::Disconnected => self.connected = false,
        }
        self.expire();
        self.start_due();
        Ok(())
    }

    /// The next output; [`Output::Wait`] comes last.
    pub fn poll_output(&mut self) -> Output {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        let mut wake = NextWake::idle(self.now.instant);
        if self.running < self.config.max_running
            && let Some((at, _)) = self.due.first()
        {
            wake.consider(*at, "check");
        }
        if let Some((at, _)) = self.expiries.first() {
            wake.consider(*at, "expiry");
        }
        let (until, reason) = wake.get();
        Output::Wait { until, reason }
    }

    fn on_register(&mut self, spec: WaitSpec) {
        if let Some(w) = self.waits.get(&spec.wait_id) {
            if matches!(w.phase, Phase::Ended(_)) {
                let id = spec.wait_id;
                self.report(&id);
            }
            return;
        }
        let id = spec.wait_id.clone();
        let wait = Wait {
            expires_at: spec.expires_at_ms.map(|ms| self.instant_of_wall(ms)),
            spec,
            checks: 0,
            consecutive_errors: 0,
            last_error: None,
            phase: Phase::Idle {
                due: self.now.instant,
            },
        };
        self.index(&id, &wait);
        self.waits.insert(id.clone(), wait);
        // Saved before anything else happens to it: its deadline survives any crash.
        self.save(&id);
    }

    fn on_cancel(&mut self, wait_id: WaitId) {
        let Some(w) = self.waits.get_mut(&wait_id) else {
            if self.connected {
                let at_ms = self.wall_ms();
                self.outputs.push_back(Output::Send(Report {
                    wait_id,
                    checks: 0,
                    last_error: None,
                    ending: Ending::Failed {
                        reason: FailReason::Cancelled,
                        at_ms,
                    },
                }));
            }
            return;
        };
        match &mut w.phase {
            Phase::Idle { .. } => self.end(&wait_id, FailReason::Cancelled),
            Phase::Running {
                check, stopping, ..
            } => {
                // A cancel wins over an expiry that is stopping the check.
                let first = stopping.is_none();
                *stopping = Some(FailReason::Cancelled);
                let check = *check;
                // Saved: a crash before the check stops must not bring the wait back.
                self.save(&wait_id);
                if first {
                    self.outputs.push_back(Output::Stop { wait_id, check });
                }
            }
            Phase::Ended(_) => self.report(&wait_id),
        }
    }

    fn on_checked(&mut self, wait_id: &str, number: u64, outcome: CheckOutcome) {
        let now = self.now.instant;
        let at_ms = self.wall_ms();
        let Some(w) = self.waits.get_mut(wait_id) else {
            return;
        };
        let Phase::Running {
            check,
            due,
            stopping,
        } = w.phase.clone()
        else {
            return;
        };
        if check != number {
            return;
        }
        self.running -= 1;
        if outcome != CheckOutcome::Stopped {
            w.checks += 1;
        }
        if let Some(reason) = stopping {
            // Cancelled or expired while it ran: whatever it found is dropped.
            if let CheckOutcome::Failed(error) = outcome {
                w.last_error = Some(error);
            }
            return self.end(wait_id, reason);
        }
        let next = now.saturating_add(w.spec.interval());
        match outcome {
            CheckOutcome::NotYet => {
                w.consecutive_errors = 0;
                w.phase = Phase::Idle { due: next };
            }
            CheckOutcome::Matched {
                resume_text,
                payload,
                evidence,
            } => {
                w.consecutive_errors = 0;
                w.phase = Phase::Ended(Ending::Matched {
                    resume_text,
                    payload,
                    evidence,
                    continuation_id: continuation_id(wait_id),
                    matched_at_ms: at_ms,
                });
                self.ended(wait_id);
                return;
            }
            CheckOutcome::Failed(error) => {
                w.consecutive_errors += 1;
                w.last_error = Some(error);
                if w.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                    return self.end(wait_id, FailReason::CheckErrors);
                }
                w.phase = Phase::Idle { due: next };
            }
            // The host stopped it on its own (shutting down): it is due again as it was.
            CheckOutcome::Stopped => w.phase = Phase::Idle { due },
        }
        if let Phase::Idle { due } = w.phase {
            self.due.insert((due, wait_id.into()));
        }
        self.save(wait_id);
    }

    /// Ends every wait whose expiry passed: at once when idle, after its check stops when one
    /// runs.
    fn expire(&mut self) {
        while let Some((at, id)) = self.expiries.first().cloned() {
            if at > self.now.instant {
                break;
            }
            self.expiries.remove(&(at, id.clone()));
            let Some(w) = self.waits.get_mut(&id) else {
                continue;
            };
            match &mut w.phase {
                Phase::Idle { .. } => self.end(&id, FailReason::Expired),
                Phase::Running {
                    check,
                    stopping: stopping @ None,
                    ..
                } => {
                    *stopping = Some(FailReason::Expired);
                    let check = *check;
                    self.save(&id);
                    self.outputs.push_back(Output::Stop { wait_id: id, check });
                }
                Phase::Running { .. } | Phase::Ended(_) => {}
            }
        }
    }

    /// Starts due checks, earliest first, while slots are free.
    fn start_due(&mut self) {
        while self.running < self.config.max_running {
            let Some((at, id)) = self.due.first().cloned() else {
                return;
            };
            if at > self.now.instant {
                return;
            }
            self.due.remove(&(at, id.clone()));
            let Some(w) = self.waits.get_mut(&id) else {
                continue;
            };
            let Phase::Idle { due } = w.phase else {
                continue;
            };
            let check = w.checks + 1;
            w.phase = Phase::Running {
                check,
                due,
                stopping: None,
            };
            self.running += 1;
            self.outputs.push_back(Output::Check {
                wait_id: id,
                check,
                requester: w.spec.requester.clone(),
                operator: w.spec.operator,
                source: w.spec.source.clone(),
            });
        }
    }

    /// Ends a wait without a match.
    fn end(&mut self, wait_id: &str, reason: FailReason) {
        let at_ms = self.wall_ms();
        if let Some(w) = self.waits.get_mut(wait_id) {
            w.phase = Phase::Ended(Ending::Failed { reason, at_ms });
            self.ended(wait_id);
        }
    }

    /// A wait's phase just became `Ended`: unindex, save, report.
    fn ended(&mut self, wait_id: &str) {
        self.due.retain(|(_, id)| id != wait_id);
        self.expiries.retain(|(_, id)| id != wait_id);
        self.save(wait_id);
        self.report(wait_id);
    }

    /// Puts an idle wait in the due queue and a wait with an expiry in the expiry queue.
    fn index(&mut self, id: &str, w: &Wait) {
        match w.phase {
            Phase::Idle { due } => {
                self.due.insert((due, id.into()));
            }
            Phase::Running { .. } | Phase::Ended(_) => return,
        }
        if let Some(at) = w.expires_at {
            self.expiries.insert((at, id.into()));
        }
    }

    fn save(&mut self, wait_id: &str) {
        let Some(w) = self.waits.get(wait_id) else {
            return;
        };
        let stopping = match w.phase {
            Phase::Running { stopping, .. } => stopping,
            _ => None,
        };
        let (next_check_ms, ending) = match &w.phase {
            Phase::Idle { due } | Phase::Running { due, .. } => {
                (Some(self.anchor.wall_ms(*due)), None)
            }
            Phase::Ended(ending) => (None, Some(ending.clone())),
        };
        let row = WaitRow {
            spec: w.spec.clone(),
            checks: w.checks,
            consecutive_errors: w.consecutive_errors,
            last_error: w.last_error.clone(),
            next_check_ms,
            stopping,
            ending,
        };
        self.outputs.push_back(Output::Save(Box::new(row)));
    }

    fn report(&mut self, wait_id: &str) {
        if !self.connected {
            return;
        }
        let Some(w) = self.waits.get(wait_id) else {
            return;
        };
        let Phase::Ended(ending) = &w.phase else {
            return;
        };
        self.outputs.push_back(Output::Send(Report {
            wait_id: wait_id.into(),
            checks: w.checks,
            last_error: w.last_error.clone(),
            ending: ending.clone(),
        }));
    }

    fn wall_ms(&self) -> u64 {
        self.anchor.wall_ms(self.now.instant)
    }

    /// The instant of a wall-clock time, as this process's clocks map it.
    fn instant_of_wall(&self, ms: u64) -> Instant {
        rebase(ms, self.wall_ms(), self.now)
    }
}
