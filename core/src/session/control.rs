//! The session's side of operators' requests for the daemon itself (PROTOCOL §4.7): the
//! host's [`ControlOrder`] becomes a signed `control.request`, and the daemon's
//! `control.result` becomes [`Event::ControlAnswered`].
//!
//! A request the daemon cannot get — no ready connection, or a daemon whose `hello` did not
//! list the `control` feature — is answered at once by the session itself, `failed` with
//! `daemon_offline` or `control_unsupported`, so the host never waits for an answer that
//! cannot come. The session keeps no record of requests: the host matches answers to its
//! requests by `controlId` and gives up on its own after a time. This module never decides
//! who may ask (the host's routes do) or whether the daemon may act (its owner does).

use super::*;
use crate::wire::{
    ControlAction, ControlOutcome, DaemonFrame, FEATURE_CONTROL, MAX_CONTROL_LINE_BYTES,
    MAX_CONTROL_LINES, ServerFrame,
};

/// What the host asks of the machine's daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlOrder {
    /// The request's id, unique per server; the answer carries it.
    pub control_id: String,
    /// What to do.
    pub action: ControlAction,
    /// For [`ControlAction::Logs`]: how many lines (0: the daemon's default).
    pub lines: u32,
}

/// A daemon's answer to a [`ControlOrder`] (or the session's, when the daemon could not be
/// asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlAnswer {
    /// The order's id.
    pub control_id: String,
    /// The action as the answer names it.
    pub action: String,
    /// Done, refused or failed.
    pub outcome: ControlOutcome,
    /// Why not, as a stable code (empty when done).
    pub code: String,
    /// A sentence for people.
    pub message: String,
    /// For `logs`: the daemon's recent log lines, oldest first.
    pub lines: Vec<String>,
    /// Whether the daemon answered (false: the session answered for it, with
    /// `daemon_offline` or `control_unsupported`).
    pub from_daemon: bool,
}

impl ControlAnswer {
    /// The answer for an order no daemon could be asked: `failed` with `code`, said by the
    /// server (`from_daemon` false).
    pub fn unasked(order: ControlOrder, code: &str, message: &str) -> Self {
        Self {
            control_id: order.control_id,
            action: order.action.as_str().to_owned(),
            outcome: ControlOutcome::Failed,
            code: code.to_owned(),
            message: message.to_owned(),
            lines: Vec::new(),
            from_daemon: false,
        }
    }
}

impl Session {
    pub(super) fn on_control_order(&mut self, order: ControlOrder) {
        let refusal = match &self.conn {
            Some(Connection {
                state: ConnState::Ready { features, .. },
                ..
            }) if features.iter().any(|f| f == FEATURE_CONTROL) => None,
            Some(Connection {
                state: ConnState::Ready { .. },
                ..
            }) => Some((
                "control_unsupported",
                "this daemon does not take requests from afar (its hello lists no `control` feature): update it",
            )),
            _ => Some(("daemon_offline", "the daemon is not connected")),
        };
        if let Some((code, message)) = refusal {
            let answer = ControlAnswer::unasked(order, code, message);
            self.outputs
                .push_back(Output::Event(Event::ControlAnswered(Box::new(answer))));
            return;
        }
        self.send(ServerFrame::ControlRequest {
            control_id: order.control_id,
            action: order.action.as_str().to_owned(),
            lines: order.lines,
        });
    }

    /// A `control.result` from a ready connection: checked against the bounds, then passed on.
    pub(super) fn on_control_result(&mut self, conn: ConnId, frame: DaemonFrame) {
        let DaemonFrame::ControlResult {
            control_id,
            action,
            outcome,
            code,
            message,
            lines,
        } = frame
        else {
            return;
        };
        if lines.len() > MAX_CONTROL_LINES as usize
            || lines.iter().any(|l| l.len() > MAX_CONTROL_LINE_BYTES)
        {
            let bad = crate::wire::WireError::InvalidFrame(format!(
                "control.result carries more than {MAX_CONTROL_LINES} lines or a line over {MAX_CONTROL_LINE_BYTES} bytes"
            ));
            return self.violation(conn, bad.code(), bad.to_string());
        }
        self.outputs
            .push_back(Output::Event(Event::ControlAnswered(Box::new(
                ControlAnswer {
                    control_id,
                    action,
                    outcome,
                    code,
                    message,
                    lines,
                    from_daemon: true,
                },
            ))));
    }
}
