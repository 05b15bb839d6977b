//! The frames of both directions, typed.
//!
//! On the wire a frame is a JSON object whose `type` member names it; the other members are
//! its fields, in `camelCase`. Server frames also carry the signature envelope (`sid`, `seq`,
//! `kid`, `sig`), handled by [`crate::sign`], not here.
//!
//! Rules for readers: unknown members are ignored (so peers can add optional fields);
//! an unknown `type` is a protocol error ([`WireError::UnknownFrameType`]).

use crate::ids::{ContextId, RunId, WaitId};
use serde::{Deserialize, Serialize};

use super::WireError;
use super::result::RunResult;
use super::types::{CapabilitySource, Environment, Grant, OutputStream};

/// A frame the server sends to a daemon. Always signed on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ServerFrame {
    /// First frame of a session: who the daemon is to the server, and its grant.
    #[serde(rename = "welcome", rename_all = "camelCase")]
    Welcome {
        /// The execution context this machine is registered as.
        context_id: ContextId,
        /// The protocol version the server speaks.
        protocol: u32,
        /// The grant in force, and its version.
        grant_version: u64,
        /// What runs on this machine may do.
        grant: Grant,
        /// How often the daemon sends `status`, in seconds.
        heartbeat_secs: u32,
        /// Optional behaviours the server takes (absent: none): [`FEATURE_RUN_OUTPUT`] says
        /// a daemon may send `run.output` on this connection.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    /// Offers a run; the daemon answers `run.accept` or `run.reject`.
    #[serde(rename = "run.request", rename_all = "camelCase")]
    RunRequest {
        /// The run's id, unique per server.
        run_id: RunId,
        /// The environment the capability declares.
        environment: Environment,
        /// The capability, inline or by digest.
        capability: CapabilitySource,
        /// The run's time budget once committed, in milliseconds.
        timeout_ms: u64,
        /// True when the requester is not the machine's operator.
        shared_run: bool,
        /// The requester's user id: whose runs a condition on the machine may read (absent
        /// from older servers: such runs belong to nobody a condition can name).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        requester: String,
    },
    /// The server holds the daemon to an accepted run: the lease starts.
    #[serde(rename = "run.commit", rename_all = "camelCase")]
    RunCommit {
        /// The accepted run whose lease starts now; a daemon ignores an id it did not accept.
        run_id: RunId,
    },
    /// Stop a run.
    #[serde(rename = "run.cancel", rename_all = "camelCase")]
    RunCancel {
        /// The offered or committed run to stop; a daemon ignores an id it does not hold.
        run_id: RunId,
        /// Why, as a stable code (`requested`, `access_lost`, `revoked`, …).
        reason: String,
    },
    /// The server recorded a run's result; the daemon may forget it.
    #[serde(rename = "run.ack", rename_all = "camelCase")]
    RunAck {
        /// The run whose `run.result` the server stored; the daemon drops it from its outbox.
        run_id: RunId,
    },
    /// A new grant, applied at once.
    #[serde(rename = "grant.update", rename_all = "camelCase")]
    GrantUpdate {
        /// Strictly greater than any version the daemon has applied.
        grant_version: u64,
        /// The grant in force from now on; it replaces the previous one whole.
        grant: Grant,
    },
    /// The machine's key was revoked: stop for good.
    #[serde(rename = "revoked", rename_all = "camelCase")]
    Revoked {
        /// A sentence for people (the daemon does not read it): the server sends "the machine's key
        /// was revoked".
        reason: String,
    },
    /// Keystrokes for a terminal.
    #[serde(rename = "pty.input", rename_all = "camelCase")]
    PtyInput {
        /// The terminal: the `runId` of the `pty` run whose program reads the keystrokes.
        pty_id: RunId,
        /// The bytes, base64url without padding.
        data: String,
    },
    /// A terminal's new size.
    #[serde(rename = "pty.resize", rename_all = "camelCase")]
    PtyResize {
        /// The terminal to resize: the `runId` of its `pty` run.
        pty_id: RunId,
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// Close a terminal.
    #[serde(rename = "pty.close", rename_all = "camelCase")]
    PtyClose {
        /// The terminal to close: the `runId` of its `pty` run; its program is ended.
        pty_id: RunId,
    },
    /// Room for more terminal output: the daemon may send `bytes` more bytes of `pty.output`
    /// data for this terminal (on top of what it may still send). A daemon starts each
    /// terminal, and each new connection, with [`PTY_WINDOW`] bytes of room.
    #[serde(rename = "pty.credit", rename_all = "camelCase")]
    PtyCredit {
        /// The terminal whose window grows: the `runId` of its `pty` run.
        pty_id: RunId,
        /// Bytes of decoded output data.
        bytes: u64,
    },
    /// Registers a condition wait (see SPEC "Condition waits"). A daemon that already knows
    /// the id changes nothing (the server sends every active wait again on each connection);
    /// one that ended it and was not yet acknowledged sends its ending again.
    #[serde(rename = "wait.register", rename_all = "camelCase")]
    WaitRegister {
        /// The wait's id, unique per server.
        wait_id: WaitId,
        /// The user who registered it: the only one whose runs its checks may read.
        requester: String,
        /// The condition: JavaScript, `async ({ ctx }) => false | { resumeText, payload? }`.
        source: String,
        /// The least time from the end of one check to the start of the next, in ms (a
        /// daemon raises it to 1000).
        interval_ms: u64,
        /// When the wait gives up, Unix milliseconds; absent: never.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at_ms: Option<u64>,
        /// `true` when the requester is the machine's operator: only an operator's checks may
        /// read files in the mounts or run host commands. Absent: `false`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        operator: bool,
    },
    /// Ends a wait: a running check is stopped, and the daemon answers `wait.failed` with
    /// reason `cancelled` (also for an id it does not know), unless it had already matched.
    #[serde(rename = "wait.cancel", rename_all = "camelCase")]
    WaitCancel {
        /// The wait to end, as `wait.register` named it.
        wait_id: WaitId,
    },
    /// The server recorded a wait's ending (`wait.matched` or `wait.failed`); the daemon may
    /// forget the wait.
    #[serde(rename = "wait.ack", rename_all = "camelCase")]
    WaitAck {
        /// The wait whose `wait.matched` or `wait.failed` the server stored; the daemon deletes its
        /// row.
        wait_id: WaitId,
    },
    /// An operator's request for the daemon itself (PROTOCOL §4.7): sent only to a daemon whose
    /// `hello` listed [`FEATURE_CONTROL`](super::FEATURE_CONTROL). The daemon answers with one
    /// `control.result` of the same `controlId`; neither is sent again.
    #[serde(rename = "control.request", rename_all = "camelCase")]
    ControlRequest {
        /// The request's id, unique per server, echoed in the answer.
        control_id: String,
        /// `pause`, `resume`, `restart`, `update` or `logs` (see
        /// [`ControlAction`](super::ControlAction)); a daemon refuses any other with
        /// `unknown_action` rather than close the connection.
        action: String,
        /// For `logs`: how many of the most recent lines (absent or 0: 100; at most 200).
        #[serde(default, skip_serializing_if = "is_zero")]
        lines: u32,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How many bytes of a terminal's output a daemon may send before the server gives room back
/// with `pty.credit`: enough to keep a fast viewer busy, small enough that one terminal never
/// floods the connection other runs share.
pub const PTY_WINDOW: u64 = 256 * 1024;

/// The `type` names of server frames, in declaration order.
pub const SERVER_FRAME_TYPES: &[&str] = &[
    "welcome",
    "run.request",
    "run.commit",
    "run.cancel",
    "run.ack",
    "grant.update",
    "revoked",
    "pty.input",
    "pty.resize",
    "pty.close",
    "pty.credit",
    "wait.register",
    "wait.cancel",
    "wait.ack",
    "control.request",
];

/// A frame a daemon sends to the server. Not signed: the connection was opened with a
/// ticket the daemon obtained by a signed request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum DaemonFrame {
    /// The daemon's answer to `welcome`.
    #[serde(rename = "hello", rename_all = "camelCase")]
    Hello {
        /// The protocol version the daemon speaks.
        protocol: u32,
        /// Optional behaviours the daemon supports (`fs`, `host-operator-only`, …).
        features: Vec<String>,
        /// Runs it will hold at once (default 2, at most 8, capped by the grant).
        max_concurrent: u32,
        /// Committed runs it still holds from before a reconnect.
        held_runs: Vec<RunId>,
        /// Runs whose results it holds but the server has not acknowledged.
        pending_results: Vec<RunId>,
        /// Environments whose executors are available (absent: none announced yet).
        #[serde(default)]
        environments: Vec<Environment>,
        /// An operator's pause holds (absent: `false`): the daemon takes no new runs until
        /// resumed, so the server offers it none from the start.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        paused: bool,
    },
    /// Takes an offered run.
    #[serde(rename = "run.accept", rename_all = "camelCase")]
    RunAccept {
        /// The `runId` of the `run.request` being taken; the run waits for `run.commit`.
        run_id: RunId,
    },
    /// Declines an offered run.
    #[serde(rename = "run.reject", rename_all = "camelCase")]
    RunReject {
        /// The `runId` of the `run.request` being declined; the run never started here.
        run_id: RunId,
        /// Why, as a stable code (`busy`, `environment_unavailable`, `draining`, …).
        code: String,
        /// What a person should read.
        message: String,
    },
    /// A committed run ended.
    #[serde(rename = "run.result", rename_all = "camelCase")]
    RunResult {
        /// The committed run that ended; the frame is sent again on each connection until
        /// `run.ack`.
        run_id: RunId,
        /// How it ended; its members sit next to `runId` on the wire.
        #[serde(flatten)]
        result: RunResult,
    },
    /// Output a committed run wrote, as it writes it (only where the `welcome` listed
    /// [`FEATURE_RUN_OUTPUT`]). Not acknowledged and not sent again: a live view, while the
    /// `run.result` stays the run's one record.
    #[serde(rename = "run.output", rename_all = "camelCase")]
    RunOutput {
        /// The committed run that wrote the text.
        run_id: RunId,
        /// Which of its streams.
        stream: OutputStream,
        /// Where `text` starts in that stream: bytes of the stream's UTF-8 text (the text the
        /// result's `stdout`/`stderr` carries) before it.
        offset: u64,
        /// The next part of the stream, at most [`MAX_RUN_OUTPUT_TEXT`] bytes, never empty.
        text: String,
    },
    /// Slots in use; also the heartbeat.
    #[serde(rename = "status", rename_all = "camelCase")]
    Status {
        /// Runs held now.
        slots_used: u32,
        /// Runs it will hold at once.
        slots_total: u32,
        /// True once the daemon is draining and takes no new runs (also while it is paused).
        draining: bool,
        /// True while an operator's `pause` holds (absent: `false`): the daemon takes no new
        /// runs but does not stop.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        paused: bool,
    },
    /// What the daemon can do changed.
    #[serde(rename = "capabilities.update", rename_all = "camelCase")]
    CapabilitiesUpdate {
        /// Optional behaviours supported now.
        features: Vec<String>,
        /// Environments whose executors are available now.
        environments: Vec<Environment>,
        /// Runs it will hold at once.
        max_concurrent: u32,
    },
    /// A host command ended (for the audit log).
    #[serde(rename = "command.finished", rename_all = "camelCase")]
    CommandFinished {
        /// The command's id.
        command_id: String,
        /// The run that started it.
        run_id: RunId,
        /// Its exit code, if it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The signal that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// How long it ran.
        duration_ms: u64,
        /// Why it ended (`exited`, `killed`, `commands_off`, `revoked`, `shutdown`).
        reason: String,
    },
    /// Terminal output.
    #[serde(rename = "pty.output", rename_all = "camelCase")]
    PtyOutput {
        /// The terminal that wrote the bytes: the `runId` of its `pty` run.
        pty_id: RunId,
        /// The bytes, base64url without padding.
        data: String,
    },
    /// A terminal's process ended.
    #[serde(rename = "pty.exit", rename_all = "camelCase")]
    PtyExit {
        /// The terminal whose program ended: the `runId` of its `pty` run, whose `run.result`
        /// follows.
        pty_id: RunId,
        /// Its exit code, if it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// A wait matched: sent on every connection until `wait.ack`. The same match is sent
    /// each time, with the same `continuationId`.
    #[serde(rename = "wait.matched", rename_all = "camelCase")]
    WaitMatched {
        /// The wait that matched, as `wait.register` named it.
        wait_id: WaitId,
        /// Checks that ran to an outcome, the matching one included.
        checks: u64,
        /// The condition's `resumeText`, for the requester.
        resume_text: String,
        /// The condition's `payload` as JSON text (absent: it gave none), handed to the
        /// continuation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
        /// What the matching check observed (its `ctx` calls), as JSON text.
        evidence: String,
        /// The stable id of the continuation: `WAITID.then`.
        continuation_id: String,
        /// When it matched, Unix milliseconds.
        matched_at_ms: u64,
        /// The last failed check's error, if any check failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_error: Option<super::CheckError>,
    },
    /// A wait's progress after one of its checks ended (the match or failure that ends it
    /// comes as `wait.matched` / `wait.failed` instead). Not acknowledged: a lost one is
    /// replaced by the next.
    #[serde(rename = "wait.status", rename_all = "camelCase")]
    WaitStatus {
        /// The wait whose check ended, as `wait.register` named it.
        wait_id: WaitId,
        /// Checks that ran to an outcome.
        checks: u64,
        /// Failed checks in a row (five fail the wait).
        consecutive_errors: u32,
        /// The last failed check's error, if any check failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_error: Option<super::CheckError>,
        /// When the next check is due, Unix milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_check_at_ms: Option<u64>,
    },
    /// A wait ended without a match: sent on every connection until `wait.ack`.
    #[serde(rename = "wait.failed", rename_all = "camelCase")]
    WaitFailed {
        /// The wait that ended, as `wait.register` named it.
        wait_id: WaitId,
        /// Checks that ran to an outcome.
        checks: u64,
        /// `check_errors` (five in a row), `expired` or `cancelled`.
        reason: String,
        /// When it ended, Unix milliseconds.
        at_ms: u64,
        /// The last failed check's error, if any check failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_error: Option<super::CheckError>,
    },
    /// The answer to a `control.request` (PROTOCOL §4.7): sent once, not acknowledged.
    #[serde(rename = "control.result", rename_all = "camelCase")]
    ControlResult {
        /// The request's `controlId`.
        control_id: String,
        /// The request's `action`, as it was sent.
        action: String,
        /// `done`, `refused` or `failed`.
        outcome: super::ControlOutcome,
        /// Why it was refused or failed, as a stable code (absent when done).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        code: String,
        /// A sentence for people: what the daemon did, or why not.
        message: String,
        /// For `logs`: the daemon's most recent log lines, oldest first (at most
        /// [`MAX_CONTROL_LINES`](super::MAX_CONTROL_LINES), each at most
        /// [`MAX_CONTROL_LINE_BYTES`](super::MAX_CONTROL_LINE_BYTES)).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lines: Vec<String>,
    },
}

/// The `type` names of daemon frames, in declaration order.
pub const DAEMON_FRAME_TYPES: &[&str] = &[
    "hello",
    "run.accept",
    "run.reject",
    "run.result",
    "run.output",
    "status",
    "capabilities.update",
    "command.finished",
    "pty.output",
    "pty.exit",
    "wait.matched",
    "wait.status",
    "wait.failed",
    "control.result",
];

/// The `welcome` feature that lets a daemon send `run.output` frames.
pub const FEATURE_RUN_OUTPUT: &str = "run.output";

/// The most text one `run.output` frame carries, in bytes (64 KiB, as `pty.output`).
pub const MAX_RUN_OUTPUT_TEXT: usize = 64 * 1024;

impl ServerFrame {
    /// The frame's `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            ServerFrame::Welcome { .. } => "welcome",
            ServerFrame::RunRequest { .. } => "run.request",
            ServerFrame::RunCommit { .. } => "run.commit",
            ServerFrame::RunCancel { .. } => "run.cancel",
            ServerFrame::RunAck { .. } => "run.ack",
            ServerFrame::GrantUpdate { .. } => "grant.update",
            ServerFrame::Revoked { .. } => "revoked",
            ServerFrame::PtyInput { .. } => "pty.input",
            ServerFrame::PtyResize { .. } => "pty.resize",
            ServerFrame::PtyClose { .. } => "pty.close",
            ServerFrame::PtyCredit { .. } => "pty.credit",
            ServerFrame::WaitRegister { .. } => "wait.register",
            ServerFrame::WaitCancel { .. } => "wait.cancel",
            ServerFrame::WaitAck { .. } => "wait.ack",
            ServerFrame::ControlRequest { .. } => "control.request",
        }
    }
}

impl DaemonFrame {
    /// The frame's `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            DaemonFrame::Hello { .. } => "hello",
            DaemonFrame::RunAccept { .. } => "run.accept",
            DaemonFrame::RunReject { .. } => "run.reject",
            DaemonFrame::RunResult { .. } => "run.result",
            DaemonFrame::RunOutput { .. } => "run.output",
            DaemonFrame::Status { .. } => "status",
            DaemonFrame::CapabilitiesUpdate { .. } => "capabilities.update",
            DaemonFrame::CommandFinished { .. } => "command.finished",
            DaemonFrame::PtyOutput { .. } => "pty.output",
            DaemonFrame::PtyExit { .. } => "pty.exit",
            DaemonFrame::WaitMatched { .. } => "wait.matched",
            DaemonFrame::WaitStatus { .. } => "wait.status",
            DaemonFrame::WaitFailed { .. } => "wait.failed",
            DaemonFrame::ControlResult { .. } => "control.result",
        }
    }

    /// Writes the frame as JSON.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing these types cannot fail: every map key is a string and no value is a float.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a daemon frame from its JSON text.
    pub fn from_json(bytes: &[u8]) -> Result<Self, WireError> {
        serde_json::from_slice(bytes).map_err(|e| classify(bytes, e, DAEMON_FRAME_TYPES))
    }
}

/// Turns a serde_json failure into the most precise [`WireError`].
fn classify(bytes: &[u8], err: serde_json::Error, known: &[&str]) -> WireError {
    use serde_json::error::Category;
    match err.classify() {
        Category::Eof => WireError::Json(crate::json::JsonError::Truncated),
        Category::Syntax | Category::Io => WireError::Json(crate::json::JsonError::Syntax {
            offset: err.column(),
            what: "not JSON",
        }),
        Category::Data => {
            #[derive(Deserialize)]
            struct TypeOnly {
                #[serde(rename = "type")]
                frame_type: Option<String>,
            }
            match serde_json::from_slice::<TypeOnly>(bytes) {
                Ok(TypeOnly {
                    frame_type: Some(t),
                }) if !known.contains(&t.as_str()) => WireError::UnknownFrameType(t),
                Ok(TypeOnly { frame_type: None }) => WireError::MissingFrameType,
                _ => WireError::InvalidFrame(err.to_string()),
            }
        }
    }
}

/// Reads a server frame's typed body from a strictly parsed value (see [`crate::sign`]).
pub(crate) fn server_frame_from_value(
    value: &crate::json::Value,
) -> Result<ServerFrame, WireError> {
    let Some(t) = value.get("type") else {
        return Err(WireError::MissingFrameType);
    };
    let Some(t) = t.as_str() else {
        return Err(WireError::InvalidFrame("`type` is not a string".into()));
    };
    if !SERVER_FRAME_TYPES.contains(&t) {
        return Err(WireError::UnknownFrameType(t.to_owned()));
    }
    value
        .deserialize_into::<ServerFrame>()
        .map_err(|e| WireError::InvalidFrame(e.to_string()))
}
