//! What the dispatcher does with the core's events once their drain's records are committed:
//! it feeds the terminal relay, counts metrics, sends waits to machines that came up, and logs
//! what an operator should read. An execution's end is counted, its live output ended and its
//! waiters woken first, before any frame of the batch is written
//! ([`Dispatcher::end_committed`]); live output is appended as the drain polls it.
//!
//! It never writes a record: the drain did, before any of this is carried out.

use super::*;

impl Dispatcher {
    /// `exec_id`'s end (and audit row) is committed: counted, its live output ended, then the
    /// requests waiting on it woken. Called before the batch's frames are written, so that
    /// who waits on an end answers while the dispatcher writes.
    pub(super) fn end_committed(
        &self,
        exec_id: &str,
        outcome: &outpost_core::server::ExecutionOutcome,
        row: Option<crate::store::ExecutionEntry>,
    ) {
        self.shared.metrics.run_finished(outcome.status().as_str());
        self.shared.outputs.ended(exec_id);
        self.shared.ends.ended(exec_id, row);
    }

    /// What the dispatcher does with one of the core's events: metrics, the terminal relay,
    /// waits, the log.
    pub(super) fn on_event(&mut self, event: Event) -> Result<(), crate::store::StoreError> {
        let at = self.shared.clock.now();
        match event {
            Event::ExecutionFinished {
                exec_id,
                outcome,
                ran_on,
                ..
            } => {
                if outcome == outpost_core::server::ExecutionOutcome::Lost {
                    let context = ran_on.as_ref().map_or("", |r| r.name.as_str());
                    tracing::info!(%exec_id, %context, "a run ended lost: its machine did not deliver a result before its lease ended, or reconnected without it");
                }
                self.received.remove(exec_id.as_str());
                self.pending.ended(&exec_id);
                self.shared
                    .terminals
                    .send(crate::dispatch::terminals::finished(
                        exec_id.clone(),
                        &outcome,
                    ));
            }
            Event::RunStarted {
                exec_id, run_id, ..
            } => {
                if let Some(received) = self.received.get(exec_id.as_str()) {
                    let latency = at.instant.saturating_duration_since(*received);
                    self.shared.metrics.dispatched(latency);
                }
                tracing::debug!(%exec_id, %run_id, "run committed");
                // A terminal's keys typed while it started go out now.
                self.shared
                    .terminals
                    .send(crate::dispatch::terminals::TermMsg::Started { exec_id });
            }
            Event::Session { context_id, event } => match event {
                session::Event::Ready { .. } => {
                    self.online_since.insert(context_id.to_string(), at.wall.0);
                    self.shared
                        .store
                        .changes()
                        .notify(crate::store::Topic::Contexts);
                    self.shared.metrics.daemon_ready(&context_id);
                    self.waits_ready(&context_id)?;
                }
                session::Event::WaitEnded(report) => self.wait_ended(&context_id, &report)?,
                session::Event::WaitProgress(frame) => self.wait_progress(&context_id, *frame),
                session::Event::Offline => {
                    self.online_since.remove(context_id.as_str());
                    self.shared
                        .store
                        .changes()
                        .notify(crate::store::Topic::Contexts);
                    self.shared.metrics.daemon_offline(&context_id);
                }
                session::Event::ProtocolViolation { code, detail, .. } => {
                    tracing::warn!(%context_id, code, %detail, "a daemon broke the protocol");
                }
                session::Event::ConnectRefused { code, .. } => {
                    tracing::info!(%context_id, code, "a connect was refused");
                }
                session::Event::TerminalRefused { pty_id, reason } => {
                    // A second runner (`not_held_here`) was logged and audited with its drain.
                    tracing::debug!(%context_id, %pty_id, reason, "terminal output refused");
                }
                session::Event::Silent { conn } => {
                    tracing::info!(%context_id, conn, "dropped a daemon connection silent for three heartbeats (1001)");
                }
                session::Event::ControlAnswered(answer) => {
                    // A pause or a resume shows on every open page.
                    self.shared
                        .store
                        .changes()
                        .notify(crate::store::Topic::Contexts);
                    // Only the machine asked answers: an id is matched with its context.
                    let asked = self
                        .controls
                        .get(&answer.control_id)
                        .is_some_and(|(asked, _)| *asked == context_id.as_str());
                    let waiting = if asked {
                        self.controls.remove(&answer.control_id)
                    } else {
                        None
                    };
                    match waiting {
                        Some((_, waiting)) => {
                            let _ = waiting.send(*answer);
                        }
                        None => {
                            tracing::info!(%context_id, control = %answer.control_id, "a daemon answered a request no one waits for (any more)")
                        }
                    }
                }
                session::Event::Resumed => {
                    self.shared
                        .store
                        .changes()
                        .notify(crate::store::Topic::Contexts);
                    tracing::info!(%context_id, "the daemon takes runs again");
                }
                session::Event::UnknownResult { run_id } => {
                    self.shared.metrics.unknown_result();
                    tracing::info!(%context_id, %run_id, "acknowledged a result for a run this machine never held; not recorded");
                }
                session::Event::CommandFinished { .. }
                | session::Event::TerminalOutput { .. }
                | session::Event::RunOutput { .. }
                | session::Event::TerminalExit { .. }
                | session::Event::RunStarted { .. }
                | session::Event::RunEnded { .. } => {}
            },
            // Appended to its live log as the drain polled it.
            Event::RunOutput { .. } => {}
            Event::TerminalOutput { exec_id, data } => {
                self.shared
                    .terminals
                    .send(crate::dispatch::terminals::TermMsg::Output { exec_id, data });
            }
            Event::TerminalExit { exec_id, exit_code } => {
                self.shared
                    .terminals
                    .send(crate::dispatch::terminals::TermMsg::Exited { exec_id, exit_code });
            }
            Event::SessionError { context_id, error } => {
                tracing::warn!(%context_id, error = %error, "a session refused an input");
            }
            Event::Paused { paused_for } => {
                tracing::warn!(
                    paused_ms = paused_for.as_millis() as u64,
                    "the dispatcher did not run for {:.1} s (a stopped process or a suspended host): leases, offers and silence limits moved on by that much",
                    paused_for.as_secs_f64()
                );
            }
        }
        Ok(())
    }
}
