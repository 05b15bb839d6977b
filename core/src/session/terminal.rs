//! The session's side of terminal runs: `pty.output` and `pty.exit` from the daemon become
//! events for the host's relay, and the relay's keystrokes, sizes, hang-ups and credit become
//! signed `pty.*` frames.
//!
//! The session is the terminal's one runner: only a run committed on this machine's live
//! connection may speak for a terminal, and anything else about it is refused with an event
//! that says why. It never looks inside the bytes.

use super::runs::RunState;
use super::*;
use crate::b64;
use crate::ids::RunId;
use crate::wire::{ServerFrame, WireError};

/// What the host's relay asks of a terminal run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalAction {
    /// Keystrokes (`pty.input`).
    Input(Vec<u8>),
    /// A new size (`pty.resize`).
    Resize {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// Hang up: end the program (`pty.close`); the run still ends with its result.
    Close,
    /// Room for this many more bytes of output (`pty.credit`).
    Credit(u64),
}

impl Session {
    /// Whether `run_id` is committed here, so its terminal may talk.
    fn terminal_live(&self, run_id: &str) -> bool {
        self.runs
            .get(run_id)
            .is_some_and(|r| matches!(r.state, RunState::Committed { .. }))
    }

    /// A terminal's output in its JSON form: base64url data, read only for a live terminal.
    pub(super) fn on_pty_output_text(&mut self, conn: ConnId, pty_id: RunId, data: &str) {
        if !self.terminal_live(&pty_id) {
            return self.terminal_refused(pty_id);
        }
        match b64::decode(data) {
            Ok(data) => self.on_pty_output(pty_id, data),
            Err(_) => {
                let bad = WireError::InvalidFrame("pty.output data is not base64url".into());
                self.violation(conn, bad.code(), bad.to_string());
            }
        }
    }

    /// A terminal's output, from either form of `pty.output`.
    pub(super) fn on_pty_output(&mut self, pty_id: RunId, data: Vec<u8>) {
        if !self.terminal_live(&pty_id) {
            return self.terminal_refused(pty_id);
        }
        self.outputs.push_back(Output::Event(Event::TerminalOutput {
            run_id: pty_id,
            data,
        }));
    }

    pub(super) fn on_pty_exit(&mut self, pty_id: RunId, exit_code: Option<i32>) {
        if !self.terminal_live(&pty_id) {
            return self.terminal_refused(pty_id);
        }
        self.outputs.push_back(Output::Event(Event::TerminalExit {
            run_id: pty_id,
            exit_code,
        }));
    }

    fn terminal_refused(&mut self, pty_id: RunId) {
        let reason = if self.cold.ended.contains(&pty_id) {
            "ended"
        } else {
            "not_held_here"
        };
        self.outputs
            .push_back(Output::Event(Event::TerminalRefused { pty_id, reason }));
    }

    pub(super) fn on_terminal(&mut self, run_id: RunId, action: TerminalAction) {
        if !self.terminal_live(&run_id) {
            return;
        }
        let pty_id = run_id;
        self.send(match action {
            TerminalAction::Input(bytes) => ServerFrame::PtyInput {
                pty_id,
                data: b64::encode(&bytes),
            },
            TerminalAction::Resize { cols, rows } => ServerFrame::PtyResize { pty_id, cols, rows },
            TerminalAction::Close => ServerFrame::PtyClose { pty_id },
            TerminalAction::Credit(bytes) => ServerFrame::PtyCredit { pty_id, bytes },
        });
    }
}
