//! The audit rows and kept output the dispatcher's events are worth: a finished run's end,
//! each destination its egress gate refused, a second runner refused a terminal; and the
//! output kept for an execution that ended without a result. They are written with the
//! records of the same drain (one commit).
//!
//! It only turns events into rows; it never writes them itself and never decides anything
//! about the runs.

use super::*;

impl Dispatcher {
    /// The audit events `event` is worth, written with the records of its drain: a finished
    /// run's end, and one `egress_denied` for each destination its egress gate refused.
    pub(super) fn audit_rows(&mut self, event: &Event) -> Vec<AuditRow> {
        let at = self.shared.clock.now().wall.0;
        if let Event::ExecutionFinished {
            exec_id,
            outcome,
            ran_on,
            requester,
            ..
        } = event
        {
            let context_id = ran_on.as_ref().map(|r| r.id.clone());
            let place = ran_on
                .as_ref()
                .map(|r| format!(" on {}", r.name))
                .unwrap_or_default();
            let mut rows = vec![AuditRow {
                at,
                kind: "run".into(),
                actor: requester.clone(),
                context_id: context_id.clone(),
                detail: format!("{exec_id} {}{place}", outcome.status()),
            }];
            if let outpost_core::server::ExecutionOutcome::Completed(result) = outcome {
                rows.extend(result.egress_denied.iter().map(|destination| AuditRow {
                    at,
                    kind: "egress_denied".into(),
                    actor: "daemon".into(),
                    context_id: context_id.clone(),
                    detail: format!("{exec_id} {destination}"),
                }));
            }
            return rows;
        }
        self.audit_row(event).into_iter().collect()
    }

    /// What an execution that ends without a result (cancelled, lost) printed, kept with its
    /// end: its live view is all there is of it.
    pub(super) fn kept_output(&self, event: &Event) -> Option<(String, crate::store::KeptOutput)> {
        use outpost_core::server::ExecutionOutcome;
        let Event::ExecutionFinished {
            exec_id, outcome, ..
        } = event
        else {
            return None;
        };
        if !matches!(
            outcome,
            ExecutionOutcome::Cancelled { .. } | ExecutionOutcome::Lost
        ) {
            return None;
        }
        let kept = self.shared.outputs.kept(exec_id)?;
        Some((exec_id.to_string(), kept))
    }

    /// The audit event any other `event` is worth.
    fn audit_row(&mut self, event: &Event) -> Option<AuditRow> {
        let at = self.shared.clock.now().wall.0;
        match event {
            Event::Session {
                context_id,
                event: session::Event::CommandFinished { frame },
            } => Some(AuditRow {
                at,
                kind: "command_finished".into(),
                actor: "daemon".into(),
                context_id: Some(context_id.to_string()),
                detail: String::from_utf8_lossy(&frame.to_json()).into_owned(),
            }),
            Event::Session {
                context_id,
                event:
                    session::Event::TerminalRefused {
                        pty_id,
                        reason: "not_held_here",
                    },
            } => self.second_runner(at, context_id, pty_id),
            _ => None,
        }
    }

    /// Machine `sender` spoke for terminal `pty_id` (`pty.output` or `pty.exit`) without
    /// holding its run: the session dropped the frame. When another machine holds the run, this
    /// was a second runner for that terminal: logged at `warn` naming the holder (its context
    /// and live connection) and audited `terminal.runner_refused` on the holder's context. A
    /// terminal nobody holds is only logged. Each (machine, terminal) pair once.
    fn second_runner(&mut self, at: u64, sender: &str, pty_id: &str) -> Option<AuditRow> {
        if self.refused_runners.len() >= REFUSED_RUNNERS {
            self.refused_runners.clear();
        }
        if !self
            .refused_runners
            .insert((sender.to_owned(), pty_id.to_owned()))
        {
            return None;
        }
        let Some(holder) = self.server.live_run(pty_id) else {
            tracing::info!(
                context_id = %sender,
                %pty_id,
                "a machine spoke for a terminal no machine holds; its frames are dropped"
            );
            return None;
        };
        let holder_conn = self
            .server
            .session(&holder.context_id)
            .and_then(session::Session::connection);
        let held_by = match holder_conn {
            Some(conn) => format!("{} on connection {conn}", holder.context_id),
            None => holder.context_id.to_string(),
        };
        tracing::warn!(
            terminal = %holder.exec_id,
            runner = %sender,
            holder = %held_by,
            "a second runner for a terminal was refused: {held_by} holds it"
        );
        Some(AuditRow {
            at,
            kind: "terminal.runner_refused".into(),
            actor: "daemon".into(),
            context_id: Some(holder.context_id.into_string()),
            detail: format!("{} from {sender}: held by {held_by}", holder.exec_id),
        })
    }
}
