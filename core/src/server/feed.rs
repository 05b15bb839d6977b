//! How the dispatcher feeds a machine's session and acts on everything it says: transmits
//! and closes go to the host, run outcomes move executions along, and the session's next
//! timer goes into the wake-up table. It never decides routing itself.

use super::*;
use crate::routing::AttemptOutcome;
use crate::session::{self, RunOutcome, SessionError};
use crate::wire::Refusal;

impl Server {
    /// Feeds a session and handles everything it says; a refused input changed nothing.
    pub(super) fn feed_session(
        &mut self,
        context_id: &str,
        input: session::Input,
    ) -> Result<(), SessionError> {
        match self.machines.slot(context_id) {
            Some(slot) => self.feed_slot(slot, input),
            None => Ok(()),
        }
    }

    /// [`Server::feed_session`] for the machine stored at `slot`.
    pub(super) fn feed_slot(
        &mut self,
        slot: usize,
        input: session::Input,
    ) -> Result<(), SessionError> {
        let fed = self
            .machines
            .at_mut(slot)
            .session
            .handle_input(self.now, input);
        self.pump(slot);
        fed
    }

    /// Feeds a session an input the dispatcher gives on its own; a refusal becomes
    /// [`Event::SessionError`].
    pub(super) fn feed_or_report(&mut self, context_id: &str, input: session::Input) {
        if let Err(error) = self.feed_session(context_id, input) {
            self.report(context_id, error);
        }
    }

    pub(super) fn report(&mut self, context_id: &str, error: SessionError) {
        self.outputs.push_back(Output::Event(Event::SessionError {
            context_id: context_id.into(),
            error,
        }));
    }

    /// Carries out what the session at `slot` queued outside an input.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn pump_slot(&mut self, slot: usize) {
        self.pump(slot);
    }

    fn pump(&mut self, slot: usize) {
        loop {
            let m = self.machines.at_mut(slot);
            match m.session.poll_output() {
                session::Output::Wait { .. } => {
                    let wake = m.session.poll_timeout();
                    self.session_wakes.set(slot, wake);
                    return;
                }
                session::Output::Transmit { conn, bytes } => {
                    self.outputs.push_back(Output::Transmit { conn, bytes });
                }
                session::Output::Close { conn, code, reason } => {
                    self.conns.remove(&conn);
                    self.outputs.push_back(Output::Close { conn, code, reason });
                }
                session::Output::Event(event) => {
                    let context_id = m.session.context_id().to_owned();
                    self.on_session_event(&context_id, event);
                }
            }
        }
    }

    fn on_session_event(&mut self, context_id: &str, event: session::Event) {
        // A terminal's bytes go to the host's relay under the execution's id, without a copy.
        let event = match event {
            session::Event::TerminalOutput { run_id, data } => {
                if let Some(exec_id) = self.runs.get(&run_id) {
                    let exec_id = exec_id.clone();
                    self.outputs
                        .push_back(Output::Event(Event::TerminalOutput { exec_id, data }));
                }
                return;
            }
            session::Event::RunOutput {
                run_id,
                stream,
                offset,
                text,
            } => {
                if let Some(exec_id) = self.runs.get(&run_id) {
                    let exec_id = exec_id.clone();
                    self.outputs.push_back(Output::Event(Event::RunOutput {
                        exec_id,
                        stream,
                        offset,
                        text,
                    }));
                }
                return;
            }
            session::Event::TerminalExit { run_id, exit_code } => {
                if let Some(exec_id) = self.runs.get(&run_id) {
                    let exec_id = exec_id.clone();
                    self.outputs
                        .push_back(Output::Event(Event::TerminalExit { exec_id, exit_code }));
                }
                return;
            }
            other => other,
        };
        match &event {
            session::Event::Ready { .. } => {
                self.replan_queued(context_id);
                // A machine back after the server's restart: what waited for the machines to
                // come back is planned again.
                self.replan_parked();
            }
            session::Event::Resumed => self.replan_queued(context_id),
            session::Event::RunStarted { run_id } => {
                if let Some(exec_id) = self.runs.get(run_id).cloned()
                    && let Some(e) = self.executions.get_mut(&exec_id)
                    && let Place::OnContext { started, .. } = &mut e.place
                {
                    *started = true;
                    self.journal.touch_execution(&exec_id);
                    self.outputs.push_back(Output::Event(Event::RunStarted {
                        exec_id,
                        run_id: run_id.clone(),
                        context_id: context_id.into(),
                    }));
                }
            }
            session::Event::RunEnded { run_id, outcome } => {
                self.restored_commits.remove(run_id);
                let Some(exec_id) = self.runs.remove(run_id) else {
                    return;
                };
                match outcome.clone() {
                    RunOutcome::Busy => {
                        self.fall_through(&exec_id, AttemptOutcome::Busy, Refusal::Busy.code())
                    }
                    RunOutcome::Unanswered => {
                        self.fall_through(&exec_id, AttemptOutcome::Busy, "offer_unanswered")
                    }
                    RunOutcome::Offline => {
                        self.fall_through(&exec_id, AttemptOutcome::Offline, "offline")
                    }
                    // Draining is busy until the daemon stops: the same outcome as a draining
                    // daemon's status gives, with its own reason.
                    // A pause that crossed the offer: planned again, as if it had come first
                    // (a run that may wait for the machine waits in its queue).
                    RunOutcome::Rejected { code, .. }
                        if Refusal::from_code(&code) == Some(Refusal::Draining)
                            && self
                                .machines
                                .get(context_id)
                                .is_some_and(|m| m.session.is_paused()) =>
                    {
                        self.place(&exec_id)
                    }
                    RunOutcome::Rejected { code, .. }
                        if Refusal::from_code(&code) == Some(Refusal::Draining) =>
                    {
                        self.fall_through(&exec_id, AttemptOutcome::Busy, &code)
                    }
                    RunOutcome::Rejected { code, .. } => {
                        self.fall_through(&exec_id, AttemptOutcome::Unusable, &code)
                    }
                    RunOutcome::Completed(result) => {
                        self.finish(&exec_id, ExecutionOutcome::Completed(result))
                    }
                    RunOutcome::Lost => self.finish(&exec_id, ExecutionOutcome::Lost),
                    RunOutcome::Cancelled { reason } => {
                        self.finish(&exec_id, ExecutionOutcome::Cancelled { reason })
                    }
                }
                // A slot is free: what waits in this machine's queue may take it.
                self.replan_queued(context_id);
            }
            _ => {}
        }
        self.outputs.push_back(Output::Event(Event::Session {
            context_id: context_id.into(),
            event,
        }));
    }
}
