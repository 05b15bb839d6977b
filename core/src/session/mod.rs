//! The server's state machine for one registered machine (execution context).
//!
//! A session outlives the daemon's connections: it consumes connect tickets, signs every
//! frame it sends (through the [`Signer`] trait), dispatches runs only while a slot is free,
//! starts a lease at `run.commit`, and ends every started run exactly once — with its result,
//! as `lost` 30 s after its deadline, or `cancelled`. A started run is never re-run.
//!
//! Routing between contexts, queueing for offline ones and access checks belong to the
//! dispatcher above; this module never decides *whether* a requester may use the machine,
//! only *whether the machine can take the run now*.
//!
//! Like every role in `core`: `handle_input(now, Input)` and `poll_output() -> Output`, with
//! `Output::Wait` last. A daemon's bad bytes never return `Err`: the connection is closed
//! with 1002 ([`close_code::PROTOCOL_ERROR`](crate::wire::close_code::PROTOCOL_ERROR)) and an
//! event says why.
//!
//! A close is [`Output::Close`], as in the daemon and the server: see
//! [`crate::daemon::Output`] for why it sits next to `Transmit` rather than among commands.

mod control;
mod frames;
mod machine;
mod record;
mod runs;
mod terminal;
mod waits;

#[cfg(test)]
mod tests;

use crate::ids::{ContextId, RunId};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::MAX_QUEUED_OUTPUTS;
use crate::sign::{FrameSigner, Signer};
use crate::ticket::TicketStore;
use crate::time::{Instant, Now};
use crate::wire::{CapabilitySource, Environment, Grant};

pub use control::{ControlAnswer, ControlOrder};
pub use machine::IssuedTicket;
pub use runs::RecentlyEnded;
use runs::ServerRun;
pub use terminal::TerminalAction;
pub use waits::WaitOrder;

/// The result a session records for a completed run: the daemon's `run.result` with
/// `server_ms` and `transit_ms` added. The same type the daemon's host reports.
pub use crate::wire::RunResult;

/// Identifies one connection (one WebSocket) of the host's.
pub type ConnId = u64;

/// How often a daemon sends `status` unless the server says otherwise (`welcome`'s
/// `heartbeatSecs`); a server's host also pings every daemon connection this often, below the
/// protocol, so a daemon notices a silent server.
pub const DEFAULT_HEARTBEAT_SECS: u32 = 15;

/// How long a daemon has to answer an offer by default (PROTOCOL §4.4).
pub const OFFER_TIMEOUT: Duration = Duration::from_secs(5);

/// How a session behaves.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The context this session serves.
    pub context_id: ContextId,
    /// How often the daemon sends `status`.
    pub heartbeat_secs: u32,
    /// A committed run with no result ends `lost` this long after its deadline.
    pub lease_grace: Duration,
    /// A connection silent this long is dead.
    pub silence_limit: Duration,
    /// How long to wait for `hello` after `welcome`.
    pub hello_timeout: Duration,
    /// How long a connect ticket lives, in seconds.
    pub ticket_ttl_secs: u64,
    /// How long a daemon has to answer a `run.request` (`run.accept` or `run.reject`); then the
    /// offer is withdrawn (`run.cancel` with `offer_unanswered`) and the run passes as busy.
    pub offer_timeout: Duration,
}

impl SessionConfig {
    /// The defaults for `context_id`: 15 s heartbeats, 30 s lease grace, 45 s silence limit.
    pub fn new(context_id: impl Into<ContextId>) -> Self {
        Self {
            context_id: context_id.into(),
            heartbeat_secs: DEFAULT_HEARTBEAT_SECS,
            lease_grace: Duration::from_secs(30),
            silence_limit: Duration::from_secs(45),
            hello_timeout: Duration::from_secs(10),
            ticket_ttl_secs: 60,
            offer_timeout: OFFER_TIMEOUT,
        }
    }
}

/// A run to offer the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// Unique per server.
    pub run_id: RunId,
    /// The capability's environment.
    pub environment: Environment,
    /// What to run, inline or by digest, sent as is in the `run.request`.
    pub capability: CapabilitySource,
    /// Time budget once committed.
    pub timeout_ms: u64,
    /// True when the requester is not the operator.
    pub shared_run: bool,
    /// The requester's user id (so a condition on the machine reads only its own runs).
    pub requester: String,
}

/// What the host tells the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed; check timers.
    Timeout,
    /// A WebSocket presented a ticket.
    Connect {
        /// The host's id for this connection.
        conn: ConnId,
        /// The ticket from `?ticket=`.
        ticket: String,
    },
    /// One message from a connection.
    Frame {
        /// The connection it came on; a message from any but the current connection is ignored.
        conn: ConnId,
        /// The message as received: a daemon frame's JSON text, or a binary `pty.output` frame.
        bytes: Vec<u8>,
    },
    /// A connection closed.
    Disconnected {
        /// The connection that closed; only the current one takes the machine offline.
        conn: ConnId,
    },
    /// Offer a run to the machine.
    Submit(RunSpec),
    /// Stop a run.
    Cancel {
        /// The run to stop, as its [`RunSpec`] named it; an unknown or ended run is ignored.
        run_id: RunId,
        /// Why (`requested`, `access_lost`, …).
        reason: String,
    },
    /// A new grant: bump the version and push it.
    UpdateGrant(Grant),
    /// Revoke the machine: tell it, cancel its runs, close, refuse it from now on.
    Revoke,
    /// Something for a committed terminal run, from the host's relay; ignored when the run is
    /// not committed here (it ended, or never was).
    Terminal {
        /// The terminal run the action is for (its id is the terminal's `ptyId`).
        run_id: RunId,
        /// Keystrokes, a size, a hang-up or credit, sent as the matching signed `pty.*` frame.
        action: TerminalAction,
    },
    /// A wait order for the machine: sent when a connection is ready, else dropped (send
    /// every active wait again after [`Event::Ready`]).
    Wait(WaitOrder),
    /// An operator's request for the daemon itself: sent as `control.request` to a ready
    /// daemon that announced the `control` feature; otherwise answered at once with
    /// [`Event::ControlAnswered`] (`failed`, `daemon_offline` or `control_unsupported`).
    Control(ControlOrder),
}

/// How a run offered to this machine ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Not started: every slot was taken, or the daemon said `busy`. Try elsewhere.
    Busy,
    /// Not started: the daemon is not connected (or dropped before committing).
    Offline,
    /// Not started: the daemon answered the offer neither way within the offer timeout; the
    /// offer was withdrawn (`run.cancel`, `offer_unanswered`). Try elsewhere, as for busy.
    Unanswered,
    /// Not started: the daemon declined for another reason (`environment_unavailable`, …).
    Rejected {
        /// The refusal's stable code: the `run.reject` code, or `revoked` or
        /// `environment_unavailable` when the session declined the offer itself.
        code: String,
        /// A sentence for people explaining the refusal.
        message: String,
    },
    /// Started and finished; here is the result.
    Completed(Box<RunResult>),
    /// Started; the daemon stopped answering past deadline + grace, or reconnected without it.
    Lost,
    /// Started (or offered) and cancelled.
    Cancelled {
        /// The cancel's reason as the host gave it (`requested`, `access_lost`, …), or `revoked`.
        reason: String,
    },
}

impl RunOutcome {
    /// True when the run never started on the machine, so it may be tried elsewhere.
    pub fn not_started(&self) -> bool {
        matches!(
            self,
            RunOutcome::Busy
                | RunOutcome::Offline
                | RunOutcome::Unanswered
                | RunOutcome::Rejected { .. }
        )
    }
}

/// What the session asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a frame on a connection.
    Transmit {
        /// The connection to send on: the session's current one.
        conn: ConnId,
        /// The frame's JSON (signed).
        bytes: Vec<u8>,
    },
    /// Close a connection.
    Close {
        /// The connection to close; the session ignores what it sends from now on.
        conn: ConnId,
        /// The WebSocket close code.
        code: u16,
        /// The close frame's reason: a stable code (`revoked`, `ticket_expired`, a violation's
        /// code) or a short phrase such as `silent for too long`.
        reason: String,
    },
    /// Something for the host to act on or log; see [`Event`].
    Event(Event),
    /// Nothing more until `until` or new input.
    Wait {
        /// When to call back with [`Input::Timeout`].
        until: Instant,
        /// Which timer is next: `lease`, `offer`, `silence` or `hello timeout` (for logs and
        /// tests).
        reason: &'static str,
    },
}

/// What a session reports to the host: its connection's state, runs' starts, output and ends, and
/// waits' endings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The daemon said hello: runs can be dispatched.
    Ready {
        /// Slots it holds.
        max_concurrent: u32,
    },
    /// The machine has no live connection any more.
    Offline,
    /// A run was committed: its lease started.
    RunStarted {
        /// The run committed, as its [`RunSpec`] named it.
        run_id: RunId,
    },
    /// A run offered to this machine ended (exactly once per run).
    RunEnded {
        /// The run that ended, as its [`RunSpec`] named it; no event names it again.
        run_id: RunId,
        /// How it ended; [`RunOutcome::not_started`] says whether it may be tried elsewhere.
        outcome: RunOutcome,
    },
    /// The daemon sent something unacceptable; the connection was closed.
    ProtocolViolation {
        /// The connection that sent it, now being closed (1002).
        conn: ConnId,
        /// The stable code, also the close reason (`invalid_frame`, `unknown_frame_type`,
        /// `unexpected_frame`, …).
        code: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A connect was refused (bad ticket, revoked).
    ConnectRefused {
        /// The connection whose connect was refused, now being closed.
        conn: ConnId,
        /// Why: `revoked`, or the ticket's error (`ticket_malformed`, `ticket_unknown`,
        /// `ticket_expired`).
        code: &'static str,
    },
    /// A host command ended on the machine (for the audit log).
    CommandFinished {
        /// The frame, as received.
        frame: Box<crate::wire::DaemonFrame>,
    },
    /// A committed run wrote output (a `run.output`, checked: its run is committed here and
    /// its text within [`crate::wire::MAX_RUN_OUTPUT_TEXT`]).
    RunOutput {
        /// The committed run that wrote the text.
        run_id: RunId,
        /// Which stream.
        stream: crate::wire::OutputStream,
        /// Bytes of that stream's text before `text`.
        offset: u64,
        /// The next part of the stream, UTF-8, never empty.
        text: String,
    },
    /// A committed terminal run's program wrote bytes (a `pty.output`, decoded).
    TerminalOutput {
        /// The committed terminal run whose program wrote the bytes (the frame's `ptyId`).
        run_id: RunId,
        /// The bytes, untouched.
        data: Vec<u8>,
    },
    /// A committed terminal run's program ended (`pty.exit`); its `run.result` follows.
    TerminalExit {
        /// The committed terminal run whose program ended (the frame's `ptyId`).
        run_id: RunId,
        /// Its exit code, if it exited.
        exit_code: Option<i32>,
    },
    /// A `pty.output` or `pty.exit` about a terminal this connection does not hold was
    /// dropped: the run ended (`ended`) or was never committed here (`not_held_here`).
    TerminalRefused {
        /// The `ptyId` the dropped frame named.
        pty_id: RunId,
        /// `ended` or `not_held_here`.
        reason: &'static str,
    },
    /// The machine reported a wait's ending (`wait.matched` or `wait.failed`): record it,
    /// then answer with [`WaitOrder::Ack`]. The same ending arrives again until acknowledged.
    WaitEnded(Box<crate::wait::Report>),
    /// The machine's progress on a wait after a check (`wait.status`): for `show`, not a
    /// record that must survive.
    WaitProgress(Box<crate::wire::DaemonFrame>),
    /// A `run.result` for a run this machine never held here (not offered to it, or ended so
    /// long ago that its id is forgotten): acknowledged, so the daemon forgets it, and not
    /// recorded.
    UnknownResult {
        /// The run it named.
        run_id: RunId,
    },
    /// The daemon's `status` no longer says it is draining (an operator resumed it): runs
    /// waiting for the machine may be offered again.
    Resumed,
    /// The answer to an [`Input::Control`]: the daemon's `control.result` (checked against
    /// its bounds), or the session's own when the daemon could not be asked.
    ControlAnswered(Box<ControlAnswer>),
    /// The connection was closed (1001) because the daemon sent nothing for the silence limit.
    Silent {
        /// The connection closed for silence; the machine goes offline with it.
        conn: ConnId,
    },
}

/// Host misuse of the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The host did not drain outputs.
    #[error("more than {MAX_QUEUED_OUTPUTS} outputs are waiting: drain poll_output first")]
    OutputBacklog,
    /// Time went backwards.
    #[error("time went backwards")]
    TimeWentBackwards,
    /// A run id was submitted twice.
    #[error("run {0:?} was already submitted")]
    DuplicateRun(RunId),
}

enum ConnState {
    AwaitingHello {
        deadline: Instant,
    },
    Ready {
        /// What the daemon announced, capped by [`MAX_CONCURRENT_LIMIT`](crate::wire::MAX_CONCURRENT_LIMIT).
        announced: u32,
        /// `announced` capped by the grant's `limits.maxConcurrent`: the slots offers may take.
        max_concurrent: u32,
        environments: Vec<Environment>,
        features: Vec<String>,
        draining: bool,
        /// The daemon's last `status` said an operator's pause holds.
        paused: bool,
    },
}

struct Connection {
    id: ConnId,
    frames: FrameSigner,
    state: ConnState,
    last_heard: Instant,
}

/// One machine's session. See the module docs.
///
/// What every input and timer check reads stays inline; what only connects, offers and
/// grants need lives apart in [`Cold`], so a dispatcher holding many sessions touches few
/// cache lines per heartbeat.
pub struct Session {
    now: Now,
    outputs: VecDeque<Output>,
    conn: Option<Connection>,
    runs: BTreeMap<RunId, ServerRun>,
    /// `config.silence_limit`, read on every timer check.
    silence_limit: Duration,
    revoked: bool,
    grant_version: u64,
    cold: Box<Cold>,
}

/// The parts of a session a heartbeat never reads.
struct Cold {
    config: SessionConfig,
    signer: Arc<dyn Signer + Send + Sync>,
    grant: Grant,
    tickets: TicketStore,
    ended: RecentlyEnded,
}
