//! The daemon's side of condition waits: the [`Schedule`](crate::wait::Schedule) it embeds,
//! fed from `wait.*` frames and check outcomes, its outputs turned into the daemon's.
//!
//! The schedule decides when each wait is checked and how it ends (see [`crate::wait`]);
//! this module only carries its inputs in and its outputs out: a saved row becomes
//! [`Output::SaveWait`], a check [`Command::CheckWait`], a report a `wait.matched` or
//! `wait.failed` frame (sent only while the connection is ready; the schedule sends every
//! unacknowledged report again on the next one). It never decides anything about a wait.

use super::*;
use crate::ids::WaitId;
use crate::wait::{self, WaitRow};
use crate::wire::DaemonFrame;

impl Daemon {
    /// Installs the waits a crashed process left in its store (each row with the time it was
    /// written): every active wait resumes, every ended one is reported again until the
    /// server acknowledges it. Call it once, right after [`Daemon::new`] or
    /// [`Daemon::restore`], before the first output is polled.
    pub fn restore_waits(&mut self, rows: impl IntoIterator<Item = (u64, WaitRow)>) {
        self.waits = wait::Schedule::restore(self.config.waits.clone(), self.now, rows);
        self.feed_waits(wait::Input::Timeout);
        self.drain_waits();
    }

    /// Waits held: active ones and ended ones the server has not acknowledged.
    pub fn wait_count(&self) -> usize {
        self.waits.len()
    }

    /// Feeds the schedule at the daemon's time (also each verified `wait.*` frame). Its host errors cannot happen here: the
    /// daemon refused a backwards time before, and its outputs are drained after every input.
    pub(super) fn feed_waits(&mut self, input: wait::Input) {
        let _ = self.waits.handle_input(self.now, input);
    }

    /// A check ended: the schedule hears it, and the server hears the wait's progress
    /// (`wait.status`) while the wait goes on.
    pub(super) fn on_checked(&mut self, wait_id: WaitId, check: u64, outcome: wait::CheckOutcome) {
        self.feed_waits(wait::Input::Checked {
            wait_id: wait_id.clone(),
            check,
            outcome,
        });
        if !self.is_ready() {
            return;
        }
        if let Some(view) = self.waits.view(&wait_id)
            && view.ending.is_none()
        {
            let next_check_at_ms = view.next_check.map(|at| self.journal.wall_ms(at));
            self.transmit(&DaemonFrame::WaitStatus {
                wait_id,
                checks: view.checks,
                consecutive_errors: view.consecutive_errors,
                last_error: view.last_error,
                next_check_at_ms,
            });
        }
    }

    /// After every input: tells the schedule whether the link is ready, then moves its
    /// outputs, in order, into the daemon's.
    pub(super) fn sync_waits(&mut self) {
        let ready = self.is_ready();
        if ready != self.waits_online {
            self.waits_online = ready;
            self.feed_waits(if ready {
                wait::Input::Connected
            } else {
                wait::Input::Disconnected
            });
        }
        self.drain_waits();
    }

    pub(super) fn drain_waits(&mut self) {
        loop {
            match self.waits.poll_output() {
                wait::Output::Save(row) => {
                    let written_ms = self.journal.wall_ms(self.now.instant);
                    self.outputs.push_back(Output::SaveWait { row, written_ms });
                }
                wait::Output::Forget { wait_id } => {
                    self.outputs.push_back(Output::ForgetWait { wait_id })
                }
                wait::Output::Check {
                    wait_id,
                    check,
                    requester,
                    operator,
                    source,
                } => self.command(Command::CheckWait {
                    wait_id,
                    check,
                    requester,
                    operator,
                    source,
                }),
                wait::Output::Stop { wait_id, check } => {
                    self.command(Command::StopCheck { wait_id, check })
                }
                // Not ready: the schedule sends it again once the next connection is.
                wait::Output::Send(report) => {
                    if self.is_ready() {
                        self.transmit(&report.into_frame());
                    }
                }
                wait::Output::Wait { until, reason } => {
                    self.wait_wake = (until, reason);
                    return;
                }
            }
        }
    }
}
