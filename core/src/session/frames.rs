//! The session's handling of daemon frames: hello and its reconciliation, accepts, rejects,
//! results, status.

use crate::ids::RunId;
use std::time::Duration;

use super::runs::RunState;
use super::*;
use crate::wire::{
    DaemonFrame, MAX_CONCURRENT_LIMIT, PROTOCOL_VERSION, PtyOutputFrame, Refusal, ServerFrame,
    Violation, WireError, close_code,
};

impl Session {
    pub(super) fn on_frame(&mut self, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conn.as_mut().filter(|c| c.id == conn) else {
            return; // A replaced or closed connection: ignore what it still sends.
        };
        c.last_heard = self.now.instant;
        let awaiting_hello = matches!(c.state, ConnState::AwaitingHello { .. });
        if PtyOutputFrame::is_binary(bytes) {
            return match PtyOutputFrame::decode(bytes) {
                Err(e) => self.violation(conn, e.code(), e.to_string()),
                Ok(_) if awaiting_hello => self.violation(
                    conn,
                    Violation::UnexpectedFrame.code(),
                    "pty.output before hello".into(),
                ),
                Ok(f) => self.on_pty_output(f.pty_id.into(), f.data.to_vec()),
            };
        }
        let frame = match DaemonFrame::from_json(bytes) {
            Ok(f) => f,
            Err(e) => return self.violation(conn, e.code(), e.to_string()),
        };
        match frame {
            DaemonFrame::Hello {
                protocol,
                max_concurrent,
                held_runs,
                pending_results,
                environments,
                features,
                paused,
            } => {
                if !awaiting_hello {
                    return self.violation(
                        conn,
                        Violation::UnexpectedFrame.code(),
                        "a second hello".into(),
                    );
                }
                if protocol != PROTOCOL_VERSION {
                    return self.violation(
                        conn,
                        Violation::UnsupportedProtocol.code(),
                        format!("protocol {protocol}"),
                    );
                }
                self.on_hello(
                    max_concurrent.min(MAX_CONCURRENT_LIMIT),
                    environments,
                    features,
                    paused,
                    &held_runs,
                    &pending_results,
                );
            }
            _ if awaiting_hello => self.violation(
                conn,
                Violation::UnexpectedFrame.code(),
                format!("{} before hello", frame.type_name()),
            ),
            DaemonFrame::RunAccept { run_id } => self.on_accept(conn, run_id),
            DaemonFrame::RunReject {
                run_id,
                code,
                message,
            } => {
                if matches!(
                    self.runs.get(&run_id).map(|r| &r.state),
                    Some(RunState::Dispatched { .. })
                ) {
                    let outcome = if Refusal::from_code(&code) == Some(Refusal::Busy) {
                        RunOutcome::Busy
                    } else {
                        RunOutcome::Rejected { code, message }
                    };
                    self.end(&run_id, outcome);
                }
            }
            DaemonFrame::RunResult { run_id, result } => self.on_result(run_id, result),
            DaemonFrame::Status {
                draining, paused, ..
            } => {
                if let Some(Connection {
                    state:
                        ConnState::Ready {
                            draining: d,
                            paused: p,
                            ..
                        },
                    ..
                }) = self.conn.as_mut()
                {
                    let resumed = *d && !draining;
                    *d = draining;
                    *p = paused;
                    if resumed {
                        self.outputs.push_back(Output::Event(Event::Resumed));
                    }
                }
            }
            DaemonFrame::CapabilitiesUpdate {
                environments,
                max_concurrent,
                features,
            } => {
                let cap = self.cold.grant.limits.max_concurrent;
                if let Some(Connection {
                    state:
                        ConnState::Ready {
                            environments: e,
                            announced,
                            max_concurrent: m,
                            features: f,
                            ..
                        },
                    ..
                }) = self.conn.as_mut()
                {
                    *e = environments;
                    *f = features;
                    *announced = max_concurrent.min(MAX_CONCURRENT_LIMIT);
                    *m = (*announced).min(cap);
                }
            }
            f @ DaemonFrame::CommandFinished { .. } => {
                self.outputs
                    .push_back(Output::Event(Event::CommandFinished { frame: Box::new(f) }));
            }
            DaemonFrame::RunOutput {
                run_id,
                stream,
                offset,
                text,
            } => self.on_run_output(conn, run_id, stream, offset, text),
            DaemonFrame::PtyOutput { pty_id, data } => self.on_pty_output_text(conn, pty_id, &data),
            DaemonFrame::PtyExit { pty_id, exit_code } => self.on_pty_exit(pty_id, exit_code),
            f @ (DaemonFrame::WaitMatched { .. } | DaemonFrame::WaitFailed { .. }) => {
                self.on_wait_ended(conn, f)
            }
            f @ DaemonFrame::WaitStatus { .. } => self
                .outputs
                .push_back(Output::Event(Event::WaitProgress(Box::new(f)))),
            f @ DaemonFrame::ControlResult { .. } => self.on_control_result(conn, f),
        }
    }

    pub(super) fn on_hello(
        &mut self,
        announced: u32,
        environments: Vec<Environment>,
        features: Vec<String>,
        paused: bool,
        held: &[RunId],
        pending: &[RunId],
    ) {
        let max_concurrent = announced.min(self.cold.grant.limits.max_concurrent);
        if let Some(c) = self.conn.as_mut() {
            c.state = ConnState::Ready {
                announced,
                max_concurrent,
                environments,
                features,
                draining: paused,
                paused,
            };
        }
        // Every committed run the daemon neither holds nor has a result for is lost now.
        let committed = self.committed_runs();
        for run_id in committed {
            let known = held.contains(&run_id) || pending.contains(&run_id);
            if !known {
                self.end(&run_id, RunOutcome::Lost);
            }
        }
        // Runs the daemon holds that the server already ended must stop.
        for run_id in held {
            if !self.runs.contains_key(run_id) {
                self.send(ServerFrame::RunCancel {
                    run_id: run_id.clone(),
                    reason: "lease_lost".into(),
                });
            }
        }
        self.outputs
            .push_back(Output::Event(Event::Ready { max_concurrent }));
    }

    pub(super) fn on_accept(&mut self, conn: ConnId, run_id: RunId) {
        let Some(run) = self.runs.get_mut(&run_id) else {
            return; // Cancelled meanwhile: the daemon got the cancel.
        };
        if !matches!(run.state, RunState::Dispatched { conn: c, .. } if c == conn) {
            return;
        }
        let now = self.now.instant;
        let deadline = now.saturating_add(Duration::from_millis(run.spec.timeout_ms));
        run.state = RunState::Committed {
            committed_at: now,
            lost_at: deadline.saturating_add(self.cold.config.lease_grace),
        };
        self.send(ServerFrame::RunCommit {
            run_id: run_id.clone(),
        });
        self.outputs
            .push_back(Output::Event(Event::RunStarted { run_id }));
    }

    pub(super) fn on_result(&mut self, run_id: RunId, mut result: RunResult) {
        let committed_at = match self.runs.get(&run_id).map(|r| &r.state) {
            Some(RunState::Committed { committed_at, .. }) => Some(*committed_at),
            _ => None,
        };
        // Acknowledge every result, even one already recorded, so the daemon can forget it.
        self.send(ServerFrame::RunAck {
            run_id: run_id.clone(),
        });
        let Some(committed_at) = committed_at else {
            if !self.cold.ended.contains(&run_id) {
                self.outputs
                    .push_back(Output::Event(Event::UnknownResult { run_id }));
            }
            return;
        };
        let server_ms = u64::try_from(
            self.now
                .instant
                .saturating_duration_since(committed_at)
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        result.timing.server_ms = Some(server_ms);
        result.timing.transit_ms = Some(server_ms.saturating_sub(result.timing.daemon_ms));
        self.end(&run_id, RunOutcome::Completed(Box::new(result)));
    }

    /// A run's live output: passed on for a run committed here; a piece for any other run
    /// (ended meanwhile, never held) is dropped, since the result is the record. Empty or
    /// oversized text is a peer error.
    fn on_run_output(
        &mut self,
        conn: ConnId,
        run_id: RunId,
        stream: crate::wire::OutputStream,
        offset: u64,
        text: String,
    ) {
        if text.is_empty() || text.len() > crate::wire::MAX_RUN_OUTPUT_TEXT {
            let bad = WireError::InvalidFrame(format!(
                "run.output text of {} bytes (1 to {} allowed)",
                text.len(),
                crate::wire::MAX_RUN_OUTPUT_TEXT
            ));
            return self.violation(conn, bad.code(), bad.to_string());
        }
        let committed = self
            .runs
            .get(&run_id)
            .is_some_and(|r| matches!(r.state, RunState::Committed { .. }));
        if committed {
            self.outputs.push_back(Output::Event(Event::RunOutput {
                run_id,
                stream,
                offset,
                text,
            }));
        }
    }

    pub(super) fn violation(&mut self, conn: ConnId, code: &'static str, detail: String) {
        self.outputs
            .push_back(Output::Event(Event::ProtocolViolation {
                conn,
                code,
                detail,
            }));
        self.close(conn, close_code::PROTOCOL_ERROR, code);
        self.drop_connection();
    }
}
