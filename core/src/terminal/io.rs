//! A relay's inputs and outputs, its configuration and the host-misuse errors.

use std::time::Duration;

use crate::MAX_QUEUED_OUTPUTS;
use crate::time::Instant;

use super::messages::{Audit, Left, Reason, Role, RunnerMessage, ViewerId, ViewerMessage};

/// How a relay behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// How many output bytes the runner may have sent and not had credited (the `pty.output`
    /// window).
    pub window: u64,
    /// Credit is given back in amounts of at least this (at most `window`), unless the runner
    /// has used its whole window: fewer `pty.credit` frames.
    pub credit_batch: u64,
    /// A viewer with more unwritten bytes than this is dropped with `slow_viewer`.
    pub viewer_queue_limit: u64,
    /// With no viewer for this long the terminal is closed.
    pub idle_limit: Duration,
}

impl Default for RelayConfig {
    /// A 256 KiB window credited in 64 KiB steps, 1 MiB per viewer, 10 minutes idle.
    fn default() -> Self {
        Self {
            window: 256 * 1024,
            credit_batch: 64 * 1024,
            viewer_queue_limit: 1024 * 1024,
            idle_limit: Duration::from_secs(600),
        }
    }
}

/// What the host tells a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed; check the idle timer.
    Timeout,
    /// Terminal output from the runner (`pty.output`).
    Output(Vec<u8>),
    /// A viewer connected (its ticket was good).
    ViewerJoined {
        /// The host's id for the connection; unique while it is joined.
        viewer: ViewerId,
        /// Who (for the audit log).
        user: String,
        /// What the viewer may do.
        role: Role,
    },
    /// A viewer's connection went away.
    ViewerLeft {
        /// The connection that went away, as [`Input::ViewerJoined`] named it; an unknown one is
        /// ignored.
        viewer: ViewerId,
        /// [`Left::Closed`] or [`Left::Dropped`], audited as the session's `why`.
        why: Left,
    },
    /// Keystrokes (a binary message).
    ViewerInput {
        /// The connection that typed; only an operator's keys reach the runner.
        viewer: ViewerId,
        /// The binary message's bytes, passed to the runner as they are (`pty.input`).
        bytes: Vec<u8>,
    },
    /// `{"type":"resize"}`.
    ViewerResize {
        /// The connection that asked; only an operator's resize is taken.
        viewer: ViewerId,
        /// Columns (clamped to 1..=1000).
        cols: u16,
        /// Rows (clamped to 1..=1000).
        rows: u16,
    },
    /// `{"type":"close"}`: an operator ends the terminal.
    ViewerClose {
        /// The connection that asked; only an operator may close the terminal.
        viewer: ViewerId,
    },
    /// The host's socket wrote this many of the viewer's queued binary bytes.
    ViewerWritten {
        /// The connection whose socket wrote the bytes; an unknown one is ignored.
        viewer: ViewerId,
        /// Binary bytes written since the last report (not a running total).
        bytes: u64,
    },
    /// The runner holds the terminal's run (`run.commit` went out): what viewers typed and
    /// sized before it was held is sent now, in order.
    RunnerStarted,
    /// The program ended (`pty.exit`).
    Exited {
        /// Its exit code, if any.
        exit_code: Option<i32>,
    },
    /// The terminal ended for a reason outside it (`revoked`, `lost`).
    Ended {
        /// [`Reason::Revoked`] or [`Reason::Lost`]; ignored once the terminal has ended.
        reason: Reason,
    },
}

/// What a relay asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Queue a message on a viewer's connection.
    ToViewer {
        /// The connection to queue the message on, as [`Input::ViewerJoined`] named it.
        viewer: ViewerId,
        /// What to send: [`ViewerMessage::Bytes`] as a binary message, any other as its
        /// [`ViewerMessage::to_text`].
        message: ViewerMessage,
    },
    /// Forget the viewer: send what is queued if the socket takes it, then close with
    /// `close_code`. The relay has already audited the end of its session.
    DropViewer {
        /// The connection to close; the relay no longer knows it.
        viewer: ViewerId,
        /// Why its session ended, as its last `closed` message and audit event said.
        reason: Reason,
        /// The WebSocket close code ([`viewer_close`](super::viewer_close)).
        close_code: u16,
    },
    /// Send a frame to the runner.
    ToRunner(RunnerMessage),
    /// Write an audit event.
    Audit(Audit),
    /// Nothing more until `until` or new input.
    Wait {
        /// When to call back with [`Input::Timeout`].
        until: Instant,
        /// Why (`idle`, …).
        reason: &'static str,
    },
}

/// Host misuse of the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// The host did not drain outputs.
    #[error("more than {MAX_QUEUED_OUTPUTS} outputs are waiting: drain poll_output first")]
    OutputBacklog,
    /// Time went backwards.
    #[error("time went backwards")]
    TimeWentBackwards,
    /// A viewer id was joined twice.
    #[error("viewer {0} has already joined")]
    DuplicateViewer(ViewerId),
}

impl RelayError {
    /// The stable `snake_case` code.
    pub fn code(&self) -> &'static str {
        match self {
            RelayError::OutputBacklog => "output_backlog",
            RelayError::TimeWentBackwards => "time_went_backwards",
            RelayError::DuplicateViewer(_) => "duplicate_viewer",
        }
    }
}
