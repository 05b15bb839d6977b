//! The daemon's state machine: one per machine, across all its connections.
//!
//! It owns the connect lifecycle (connecting → awaiting `welcome` → ready → draining →
//! stopped), verifies every server frame, decides which runs to accept, holds results until
//! the server acknowledges them, and tells the host what to do through [`Command`]s. It never
//! touches a socket, a process or a clock: the host feeds [`Input`]s with the time and drains
//! [`Output`]s.
//!
//! ## Run loop
//!
//! ```text
//! loop {
//!     match daemon.poll_output() {
//!         Output::Transmit(frame)   => send it on the WebSocket,
//!         Output::Close { code, .. } => close the WebSocket with `code`,
//!         Output::Command(command) => carry it out (connect, execute, cancel, …),
//!         Output::Event(event)     => log it,
//!         Output::Wait { until, .. } => wait for I/O or `until`, then
//!                                      daemon.handle_input(now, input)
//!     }
//! }
//! ```
//!
//! `Wait` always comes last: drain outputs until it appears (the *drain rule*). A host that
//! lets more than [`MAX_QUEUED_OUTPUTS`] outputs pile up gets [`DaemonError::OutputBacklog`];
//! one that passes an earlier `now` gets [`DaemonError::TimeWentBackwards`].
//!
//! ## Time
//!
//! Leases, heartbeats and retries use [`Now::instant`], which must keep counting while the
//! machine is suspended (`CLOCK_BOOTTIME` on Linux). After a suspend the run deadlines have
//! passed and the daemon cancels those runs: a lease is never outlived. Signatures and key
//! windows use [`Now::wall`].
//!
//! ## Peer errors
//!
//! A bad frame from the server (bad signature, wrong session, replayed sequence, unknown
//! type, …) never returns `Err` and never panics: the daemon closes the connection with 1002,
//! reports [`Event::ProtocolViolation`] and reconnects with backoff. Nothing the bad frame
//! asked for is carried out.

mod backoff;
mod frames;
mod machine;
mod record;
mod runs;
mod waits;

#[cfg(test)]
mod tests;

use crate::ids::{RunId, WaitId};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::MAX_QUEUED_OUTPUTS;
use crate::keyset::KeySet;
use crate::sign::FrameVerifier;
use crate::time::{Instant, Now};
use crate::wire::{CapabilitySource, Environment, Grant, Refusal, RunResult};

pub use backoff::Backoff;
pub use record::{
    DaemonChange, DaemonRecord, DaemonSnapshot, Durability, GrantRow, OutboxRow, RESTARTED_REASON,
    SEEN_RETENTION, SEEN_RETENTION_MS, SEEN_RUNS_KEPT, SeenRow, SeenRuns,
};
use runs::Run;

/// A daemon closes a connection (1001) on which the server sent nothing — no frame, no
/// WebSocket ping — for this many heartbeat intervals, and reconnects with backoff: a server
/// that was stopped, or a connection a NAT or a half-open TCP connection silently dropped.
pub const SILENT_HEARTBEATS: u32 = 3;

/// How a daemon behaves.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Runs held at once: default [`DEFAULT_MAX_CONCURRENT`](crate::wire::DEFAULT_MAX_CONCURRENT),
    /// at most [`MAX_CONCURRENT_LIMIT`](crate::wire::MAX_CONCURRENT_LIMIT), further capped by
    /// the grant.
    pub max_concurrent: u32,
    /// Optional behaviours to announce (`fs`, `host-operator-only`, …).
    pub features: Vec<String>,
    /// Environments whose executors probed available.
    pub environments: Vec<Environment>,
    /// Reconnect backoff.
    pub backoff: Backoff,
    /// How long to wait for `welcome` after the socket opens.
    pub welcome_timeout: Duration,
    /// How long after a run's deadline the daemon cancels it if the executor has not
    /// reported it finished.
    pub deadline_grace: Duration,
    /// Seeds the jitter.
    pub seed: u64,
    /// How condition waits are checked (checks at once across all waits).
    pub waits: crate::wait::ScheduleConfig,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            max_concurrent: crate::wire::DEFAULT_MAX_CONCURRENT,
            features: Vec::new(),
            environments: vec![Environment::Shell],
            backoff: Backoff::default(),
            welcome_timeout: Duration::from_secs(10),
            deadline_grace: Duration::from_secs(5),
            seed: 0,
            waits: crate::wait::ScheduleConfig::default(),
        }
    }
}

/// What the host tells the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed; check timers.
    Timeout,
    /// The socket is open (after a signed connect-ticket request). `session_id` came with
    /// the ticket.
    Connected {
        /// The session id every server frame must carry.
        session_id: String,
    },
    /// Getting a ticket or opening the socket failed.
    ConnectFailed {
        /// True when the server refused for good (`revoked`, `unknown_context`).
        stop_forever: bool,
        /// Why, for logs: the server's refusal or the connection error, as text.
        reason: String,
    },
    /// One message from the server.
    Frame(Vec<u8>),
    /// The connection showed the server alive without a frame: a WebSocket ping (the server
    /// sends one every `heartbeatSecs`) or pong arrived.
    ServerAlive,
    /// The socket closed, from either side or by failure; unless stopped, the daemon reconnects
    /// with backoff.
    Disconnected {
        /// The close code, if the server sent one.
        code: Option<u16>,
    },
    /// The bundle asked for by [`Command::FetchCapability`] arrived.
    CapabilityFetched {
        /// The run named in the [`Command::FetchCapability`] this answers.
        run_id: RunId,
        /// The bundle's bytes.
        bundle: Vec<u8>,
    },
    /// The bundle asked for by [`Command::FetchCapability`] could not be fetched (the server
    /// refused, the connection failed): the run ends `failed` with `error`, nothing ran.
    CapabilityFetchFailed {
        /// The run named in the [`Command::FetchCapability`] this answers.
        run_id: RunId,
        /// Why, as the run's error (`code` stable, `message` for people).
        error: crate::wire::ErrorBody,
    },
    /// An executor finished a run started by [`Command::Execute`] (or stopped by
    /// [`Command::Cancel`]). Fill `timing.setup_ms` and `timing.execute_ms`; the daemon sets
    /// the rest of the timing (`From<executor::Outcome>` does both).
    RunFinished {
        /// The run named in the [`Command::Execute`] (or [`Command::Cancel`]) this answers.
        run_id: RunId,
        /// The run's result, to be sent as `run.result` and kept in the outbox until `run.ack`.
        result: RunResult,
    },
    /// SIGTERM: finish what is in flight, deliver results, stop.
    Drain,
    /// An operator's `pause` (or a pause the host kept across a restart): take no new runs
    /// (offers are refused `draining`, and `status` says `paused`), let the running ones
    /// finish, and stay connected.
    Pause,
    /// An operator's `resume`: take runs again. Ends a pause, never a drain.
    Resume,
    /// The host's answer to a [`Command::Control`]: sent as `control.result` when connected
    /// and ready, else dropped (the server's request has timed out by then).
    ControlAnswered(crate::wire::DaemonFrame),
    /// How many background host commands run now (the host feeds it when the number
    /// changes). A drain also waits for these to finish, so that their `command.finished`
    /// frames still leave; the host bounds that wait.
    HostJobs(usize),
    /// A key set was fetched (and verified against the pinned roots). It replaces the set in
    /// force only when its version is higher; a lower one is refused
    /// ([`Event::KeySetRefused`]) and an equal one ignored.
    KeysUpdated(KeySet),
    /// Executors appeared or disappeared.
    EnvironmentsChanged(Vec<Environment>),
    /// The optional behaviours to announce changed (the owner's policy now mounts a folder,
    /// or no longer does: `fs`). Announced at once with `capabilities.update`.
    FeaturesChanged(Vec<String>),
    /// A host command ended (exited, killed, or stopped by a switch, revoke or shutdown):
    /// sent as `command.finished` for the server's audit log when connected and ready, else
    /// dropped — the server audited its start in the authorize hop, and the daemon holds no
    /// outbox for commands.
    CommandFinished {
        /// The id the server gave the command in the authorize hop.
        command_id: String,
        /// The run that asked for it.
        run_id: RunId,
        /// Its exit code, if it exited.
        exit_code: Option<i32>,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
        /// How long it ran.
        duration_ms: u64,
        /// `exited`, `timed_out`, `killed`, `commands_off`, `revoked` or `shutdown`.
        reason: String,
    },
    /// A committed run wrote output (pieces of [`crate::executor::OutputText`]): sent as
    /// `run.output` when connected, ready and the server's `welcome` listed
    /// [`crate::wire::FEATURE_RUN_OUTPUT`], else dropped — a live view; the run's result
    /// carries the output whole.
    RunOutput {
        /// The committed run that wrote the pieces, as its [`Command::Execute`] named it.
        run_id: RunId,
        /// The pieces, in order.
        pieces: Vec<crate::executor::OutputPiece>,
    },
    /// A terminal run's program wrote bytes: sent as `pty.output` when connected and ready,
    /// else dropped (a terminal's output is a live view, not a result; the host stops reading
    /// once the window of [`crate::wire::PTY_WINDOW`] bytes is spent, so little is lost).
    TerminalOutput {
        /// The run (the terminal's `ptyId`).
        run_id: RunId,
        /// The bytes as the program wrote them (not necessarily whole UTF-8 characters).
        data: Vec<u8>,
    },
    /// A terminal run's program ended and its output is all read: sent as `pty.exit` (before
    /// the run's [`Input::RunFinished`], which still carries the result).
    TerminalExit {
        /// The terminal run whose program ended: the frame's `ptyId`.
        run_id: RunId,
        /// Its exit code, if it exited.
        exit_code: Option<i32>,
    },
    /// A check started by [`Command::CheckWait`] ended (or was stopped by
    /// [`Command::StopCheck`] and its cleanup is done).
    WaitChecked {
        /// The wait named in the [`Command::CheckWait`] this answers.
        wait_id: WaitId,
        /// The number the command gave the check.
        check: u64,
        /// Not yet, matched, failed, or stopped after [`Command::StopCheck`].
        outcome: crate::wait::CheckOutcome,
    },
}

/// What the daemon asks of the host.
///
/// A close is [`Output::Close`], next to [`Output::Transmit`], in all three roles (daemon,
/// session, server): closing is done by the same socket code as sending, in the same order as
/// the frames before it, whereas a [`Command`] is work for the rest of the host (tickets,
/// executors, grants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write this record durably before carrying out any later output (see `docs/RECORDS.md`).
    Persist(DaemonRecord),
    /// Write this wait's row durably, replacing its last one, before carrying out any later
    /// output (record type `wait.row`).
    SaveWait {
        /// The row (boxed: it holds the condition's source).
        row: Box<crate::wait::WaitRow>,
        /// When, wall-clock milliseconds: a restore rebases the next check from it.
        written_ms: u64,
    },
    /// Delete this wait's row: the server recorded its ending.
    ForgetWait {
        /// The wait whose row to delete, as saved by an earlier [`Output::SaveWait`].
        wait_id: WaitId,
    },
    /// Send this frame (JSON text) on the socket.
    Transmit(Vec<u8>),
    /// Close the socket with this code (see [`close_code`](crate::wire::close_code)), after
    /// the frames transmitted before it.
    Close {
        /// The WebSocket close code.
        code: u16,
        /// Why (a stable code).
        reason: String,
    },
    /// Work for the rest of the host (tickets, executors, grants, terminals, checks).
    Command(Command),
    /// Something worth logging happened.
    Event(Event),
    /// Nothing more to do until `until` or new input.
    Wait {
        /// When to call back with [`Input::Timeout`].
        until: Instant,
        /// Why (for logs and tests).
        reason: &'static str,
    },
}

/// The capability a run executes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// Carried in the `run.request`.
    Inline(CapabilitySource),
    /// Fetched by digest; the digest was checked.
    Bundle {
        /// The checked SHA-256, lowercase hex.
        sha256: String,
        /// The bundle's bytes.
        bytes: Vec<u8>,
    },
}

/// A run the host must execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execute {
    /// The committed run, as the server named it in `run.request`; report it back in
    /// [`Input::RunFinished`].
    pub run_id: RunId,
    /// Its environment.
    pub environment: Environment,
    /// What to run.
    pub capability: Capability,
    /// The grant in force when it started.
    pub grant: Grant,
    /// When it must be stopped (monotonic).
    pub deadline: Instant,
    /// True when the requester is not the operator (no folders, no commands).
    pub shared_run: bool,
    /// The requester's user id, empty when the server did not say.
    pub requester: String,
}

/// What the host must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Get a connect ticket with a signed request and open the socket; then report
    /// [`Input::Connected`] or [`Input::ConnectFailed`].
    Connect,
    /// Fetch a capability bundle with a signed request; report [`Input::CapabilityFetched`].
    FetchCapability {
        /// The committed run that needs the bundle; echo it in [`Input::CapabilityFetched`] or
        /// [`Input::CapabilityFetchFailed`].
        run_id: RunId,
        /// The expected SHA-256, lowercase hex.
        sha256: String,
        /// The bundle's size in bytes, as the `run.request` announced it; only the digest is
        /// checked.
        size: u64,
    },
    /// Start a run.
    Execute(Box<Execute>),
    /// Stop a run and clean up; then report [`Input::RunFinished`].
    Cancel {
        /// The run to stop, started by an earlier [`Command::Execute`].
        run_id: RunId,
        /// Why (`requested`, `deadline`, `revoked`, `access_lost`, …).
        reason: String,
    },
    /// Apply a new grant now (mounts, egress, commands switch).
    ApplyGrant {
        /// Its version.
        version: u64,
        /// What runs may do from now on: folders, egress, the host-commands switch and the limits.
        grant: Grant,
    },
    /// Stop the daemon. With `forever`, record that it stopped and exit 0: never reconnect.
    Stop {
        /// Replaced or revoked: do not restart.
        forever: bool,
    },
    /// Write keystrokes to a terminal (a verified `pty.input`). The PTY executor owns the
    /// terminal; a host without one ignores this.
    PtyInput {
        /// The terminal: the id of the `pty` run whose program reads the bytes.
        pty_id: RunId,
        /// The bytes, decoded from the frame's base64url.
        data: Vec<u8>,
    },
    /// Resize a terminal (a verified `pty.resize`).
    PtyResize {
        /// The terminal to resize: the id of its `pty` run.
        pty_id: RunId,
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// Close a terminal and end its process (a verified `pty.close`).
    PtyClose {
        /// The terminal to close: the id of its `pty` run.
        pty_id: RunId,
    },
    /// The server has room for `bytes` more of the terminal's output (a verified
    /// `pty.credit`): the host may read that much more from the terminal.
    PtyCredit {
        /// The terminal whose output window grows: the id of its `pty` run.
        pty_id: RunId,
        /// Bytes of output.
        bytes: u64,
    },
    /// Evaluate a wait's condition once, in the sandbox, with `ctx` calls checked against
    /// `requester`; then report [`Input::WaitChecked`] with the same `check`.
    CheckWait {
        /// The wait whose condition to evaluate; echo it in [`Input::WaitChecked`].
        wait_id: WaitId,
        /// The check's number.
        check: u64,
        /// Whose access the `ctx` calls have.
        requester: String,
        /// Whether that is the machine's operator (files and host commands only then).
        operator: bool,
        /// The condition's JavaScript.
        source: String,
    },
    /// An operator's request for the daemon itself (a verified `control.request`): the host
    /// decides with the owner's local policy, acts, and answers with
    /// [`Input::ControlAnswered`] (exactly once per `control_id`).
    Control {
        /// The request's id, to echo in the answer.
        control_id: String,
        /// The action as sent (`pause`, `resume`, `restart`, `update`, `logs`, or one this
        /// daemon does not know, to refuse with `unknown_action`).
        action: String,
        /// For `logs`: how many lines were asked for (0: the default).
        lines: u32,
    },
    /// Interrupt a running check and, once it has stopped, report [`Input::WaitChecked`]
    /// (any outcome: the schedule drops it).
    StopCheck {
        /// The wait whose running check to interrupt.
        wait_id: WaitId,
        /// The number of the check to interrupt, as its [`Command::CheckWait`] gave it.
        check: u64,
    },
}

/// Things worth logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The server's `welcome` verified; runs may flow.
    Ready {
        /// The session id from the connect ticket, which every server frame on this connection
        /// carries.
        session_id: String,
    },
    /// The server sent something unacceptable; the connection is being closed.
    ProtocolViolation {
        /// The stable code, also the close reason: a frame error's (`bad_signature`,
        /// `session_mismatch`, …) or a [`Violation`](crate::wire::Violation)'s.
        code: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A run was declined (`run.reject` was sent with the refusal's code).
    RunRejected {
        /// The run whose `run.request` was declined.
        run_id: RunId,
        /// The refusal, whose code the `run.reject` carried (`busy`, `draining`, `run_seen`, …).
        refusal: Refusal,
    },
    /// The server acknowledged a result.
    ResultDelivered {
        /// The run whose `run.result` the server acknowledged (`run.ack`); it left the outbox.
        run_id: RunId,
    },
    /// A fetched key set had a lower version than the one in force and was refused: the
    /// daemon keeps its set (PROTOCOL §7). Reported once per version offered.
    KeySetRefused {
        /// The version in force.
        held: u64,
        /// The fetched key set's version, lower than `held`.
        offered: u64,
    },
    /// The server sent nothing — no frame, no ping — for [`SILENT_HEARTBEATS`] heartbeats: the
    /// connection is closed (1001) and a reconnect scheduled.
    ServerSilent {
        /// How long it was silent.
        silent_for: Duration,
    },
    /// The connection is gone; a reconnect is scheduled.
    Disconnected {
        /// When the next attempt starts.
        retry_at: Instant,
    },
}

/// Host misuse of the API (peer errors never surface here).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaemonError {
    /// The host did not drain outputs.
    #[error("more than {MAX_QUEUED_OUTPUTS} outputs are waiting: drain poll_output first")]
    OutputBacklog,
    /// Time went backwards.
    #[error("time went backwards")]
    TimeWentBackwards,
}

/// A result held until the server acknowledges it; the host persists these across a
/// daemon restart so a reconnect delivers them exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingResult {
    /// The run the result is for; at most one result is held per run.
    pub run_id: RunId,
    /// The `run.result` frame's JSON.
    pub frame: Vec<u8>,
}

enum Link {
    /// Not connected; the next attempt is due at `retry_at`.
    Idle { retry_at: Instant },
    /// [`Command::Connect`] was issued.
    Connecting,
    /// The socket is open; waiting for `welcome` until `deadline`.
    AwaitingWelcome {
        verifier: FrameVerifier,
        deadline: Instant,
    },
    /// Runs flow.
    Ready {
        verifier: FrameVerifier,
        /// The `welcome` listed [`crate::wire::FEATURE_RUN_OUTPUT`].
        live_output: bool,
        heartbeat: Duration,
        next_heartbeat: Instant,
        /// When the server will have been silent for [`SILENT_HEARTBEATS`] heartbeats: no
        /// frame and no sign of life ([`Input::ServerAlive`]) since.
        silent_at: Instant,
    },
    /// Done.
    Stopped,
}

/// The daemon's state machine. See the module docs.
pub struct Daemon {
    config: DaemonConfig,
    keys: KeySet,
    rng: crate::rng::SplitMix64,
    link: Link,
    failures: u32,
    draining: bool,
    /// An operator's pause holds ([`Input::Pause`]): no new runs, but no stop.
    paused: bool,
    /// Background host commands running, as the host last said ([`Input::HostJobs`]).
    host_jobs: usize,
    grant: Option<(u64, Grant)>,
    runs: BTreeMap<RunId, Run>,
    pending: BTreeMap<RunId, Vec<u8>>,
    /// Run ids finished with (acknowledged or dropped), refused with `run_seen` for a while.
    seen: SeenRuns,
    /// The lower key-set version last refused, so a refusal is reported once.
    refused_key_version: Option<u64>,
    outputs: VecDeque<Output>,
    journal: record::DaemonJournal,
    now: Now,
    /// Condition waits held on this machine.
    waits: crate::wait::Schedule,
    /// Whether the schedule was last told the link is ready.
    waits_online: bool,
    /// When the schedule next wants [`Input::Timeout`], and why.
    wait_wake: (Instant, &'static str),
}
