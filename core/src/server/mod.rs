//! The server's dispatcher: many machines' [`Session`]s, routing between them and the server's
//! own executor (`cloud`), queueing for offline machines, and access re-checks on every hop.
//!
//! An *execution* is one execute request. The dispatcher plans it with [`crate::routing`],
//! offers it to one session at a time (each offer is a *run* with its own id), falls through
//! to the next candidate when a machine turns out busy or offline before committing, and
//! reports exactly one [`Event::ExecutionFinished`] with `ranOn` and its friendly line. A run
//! that started on a machine is never offered anywhere else.
//!
//! It never runs anything itself: the server's own executor is asked through
//! [`Command::RunOnCloud`]. Like every role in `core`: `handle_input(now, Input)` and
//! `poll_output()`, `Wait` last; a host that lets outputs pile up or hands in time that went
//! backwards gets an error, and an error from a session is returned or reported as
//! [`Event::SessionError`], never dropped.
//!
//! ## Timers
//!
//! Sessions' and queues' wake-ups live in a table ordered by time, updated whenever a session
//! is fed: a heartbeat costs O(log n) in the number of machines, and so does finding the next
//! [`Output::Wait`]. [`Input::Timeout`] feeds only the sessions that are due.

mod feed;
mod machine;
mod ownership;
mod record;
mod registry;
mod resume;
mod status;
mod timers;

#[cfg(test)]
mod tests;

use crate::ids::{ContextId, ExecutionId, RunId};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::routing::{Chain, ExecuteTarget, RanOn, Requester, Route};
use crate::session::{ConnId, RunResult, Session, SessionConfig};
use crate::sign::Signer;
use crate::time::{Instant, Now};
use crate::wire::{CapabilitySource, Environment, Grant};
use registry::Registry;
use timers::{SessionWakes, WakeTable};

pub use ownership::OWNED_ELSEWHERE_CLOSE;
pub use record::{
    ChainRow, ContextRow, EndedRow, ExecutionRow, Fence, PlaceRow, ServerChange, ServerRecord,
    ServerSnapshot,
};
pub use resume::{PAUSE_PROBE, PAUSE_SLACK, RESTART_GRACE};
pub use status::ExecutionStatus;

/// Who may use a machine, as the server's records say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextRecord {
    /// The machine's registered id (`ec_…`), the key of every per-machine table.
    pub id: ContextId,
    /// Its friendly name.
    pub name: String,
    /// The user who runs the daemon.
    pub operator: String,
    /// Whether the operator is still a member of the org.
    pub operator_is_member: bool,
    /// Whether every member may use it.
    pub shared_with_all_members: bool,
    /// Users who opted in to shared runs.
    pub opted_in: Vec<String>,
}

/// A run committed on a machine, as the authorize hop of a host command sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRun {
    /// The execution it belongs to.
    pub exec_id: ExecutionId,
    /// The machine it was committed on.
    pub context_id: ContextId,
    /// Who asked for it.
    pub requester: String,
    /// Whether the requester is the machine's operator and still a member of the org, as
    /// the dispatcher's access record says now (not when the run started).
    pub operator_now: bool,
}

/// Where a queued execution stands ([`Server::queue_place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlace {
    /// The machine it waits for.
    pub context_id: ContextId,
    /// That machine's name.
    pub name: String,
    /// Its place in that machine's queue: 1 is next.
    pub position: usize,
    /// Whether the machine is online (waiting for a free slot) or not (for it to come back).
    pub online: bool,
    /// How long it may still wait before it fails `execution_context_queue_expired`.
    pub left: std::time::Duration,
}

/// An execute request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteRequest {
    /// Unique per server.
    pub exec_id: ExecutionId,
    /// The requesting user, whose access is checked again on every hop.
    pub requester: Requester,
    /// Where it may run.
    pub target: ExecuteTarget,
    /// The capability's environment.
    pub environment: Environment,
    /// What to run, inline or by digest, passed unchanged to the machine's `run.request`.
    pub capability: CapabilitySource,
    /// Its time budget once committed.
    pub timeout_ms: u64,
}

/// What the host tells the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed.
    Timeout,
    /// Register a machine (or replace its record).
    Register {
        /// Who may use it.
        record: ContextRecord,
        /// Its grant.
        grant: Grant,
    },
    /// A WebSocket for `context_id` presented a ticket.
    Connect {
        /// The machine the ticket was issued for ([`Server::ticket_context`]); it must be
        /// registered.
        context_id: ContextId,
        /// The host's id for the connection.
        conn: ConnId,
        /// The connect ticket's text (`otk_…`), spent by this connect whatever the outcome.
        ticket: String,
    },
    /// A message on a connection.
    Frame {
        /// The connection it came on, as given in [`Input::Connect`]; an unknown one is ignored.
        conn: ConnId,
        /// The message as received: a daemon frame's JSON text, or a binary `pty.output` frame.
        bytes: Vec<u8>,
    },
    /// A connection closed.
    Disconnected {
        /// The connection that closed, as given in [`Input::Connect`]; an unknown one is ignored.
        conn: ConnId,
    },
    /// Run something.
    Execute(Box<ExecuteRequest>),
    /// The server's own executor finished an execution.
    CloudFinished {
        /// The execution handed out with [`Command::RunOnCloud`]; ignored unless it still runs
        /// there.
        exec_id: ExecutionId,
        /// The cloud run's result, which becomes the execution's `Completed` outcome.
        result: Box<RunResult>,
    },
    /// Stop an execution.
    Cancel {
        /// The execution to stop, with reason `requested`; an unknown or ended one is ignored.
        exec_id: ExecutionId,
    },
    /// Set a user's chain.
    SetChain {
        /// The user id whose executes that name no machine follow the chain.
        user_id: String,
        /// The machines to try in order, then perhaps `cloud`; it replaces the user's previous
        /// chain.
        chain: Chain,
    },
    /// A machine's access record changed (sharing, opt-ins, membership): re-check runs on it.
    UpdateAccess(ContextRecord),
    /// A machine's grant changed.
    UpdateGrant {
        /// The registered machine whose grant changed; an unknown one is
        /// [`ServerError::UnknownContext`].
        context_id: ContextId,
        /// The grant now in force: sent as `grant.update`, and runs on the machine re-checked
        /// against it.
        grant: Grant,
    },
    /// Revoke a machine.
    Revoke {
        /// The registered machine to revoke; an unknown one is [`ServerError::UnknownContext`].
        context_id: ContextId,
    },
    /// Something for an execution's terminal, from the host's relay; ignored unless the
    /// execution is committed on a machine.
    Terminal {
        /// The execution (the terminal's id at the server).
        exec_id: ExecutionId,
        /// Keystrokes, a size, a hang-up or credit, sent as the matching signed `pty.*` frame.
        action: crate::session::TerminalAction,
    },
    /// A wait order for a machine (`wait.register`, `wait.cancel`, `wait.ack`): sent if the
    /// machine's connection is ready, else dropped. The host sends every active wait again
    /// when the machine's [`crate::session::Event::Ready`] comes up through
    /// [`Event::Session`], and records `wait.matched` / `wait.failed` from
    /// [`crate::session::Event::WaitEnded`] before it acknowledges them.
    Wait {
        /// The registered machine the order is for; an unknown one is
        /// [`ServerError::UnknownContext`].
        context_id: ContextId,
        /// The `wait.register`, `wait.cancel` or `wait.ack` to send.
        order: crate::session::WaitOrder,
    },
    /// An operator's request for a machine's daemon (pause, resume, restart, update, logs):
    /// its answer comes as [`crate::session::Event::ControlAnswered`] through
    /// [`Event::Session`] — the daemon's, or at once the session's own when the daemon is not
    /// connected or does not take such requests.
    Control {
        /// The registered machine whose daemon is asked; an unknown one is
        /// [`ServerError::UnknownContext`].
        context_id: ContextId,
        /// What to ask, with the id its answer carries.
        order: crate::session::ControlOrder,
    },
    /// Another node of a cluster owns this machine now (docs/CLUSTER.md §2): know it by this
    /// row (registering it if it is new), close its connection here if one is left (1001,
    /// `owned_elsewhere`), and forget every execution placed on it — they are the owner's,
    /// and nothing is recorded for them here. Until [`Input::Adopt`] the machine is passed
    /// over by routing (`context_owned_elsewhere`) and refuses every input that names it.
    Elsewhere(Box<ContextRow>),
    /// This node owns the machine now (it took the machine's fence, or restored it): replace
    /// what it knew of the machine with the records — the machine's row and the executions
    /// placed on it (offered, committed or queued), as the owner before wrote them. Committed
    /// runs keep their leases, queued ones their deadlines; an offer not committed moves on
    /// to its next candidate, as after a restart. A snapshot without exactly one context row
    /// is [`ServerError::AdoptWithoutContext`].
    Adopt(Box<ServerSnapshot>),
    /// Executions other nodes handed to this one ([`PlaceRow::HandedOff`] rows, as the host
    /// took them from the database): each on a machine this node owns is taken in and goes
    /// on — a named execution is planned afresh, a chain's walk resumes at that machine. A
    /// row of another place, of a machine not owned here, or of an execution already held is
    /// left alone.
    HandedOver(Vec<ExecutionRow>),
    /// Executions of a node judged dead that no machine held ([`PlaceRow::Unplaced`] or
    /// [`PlaceRow::Cloud`] rows, which the host took over from that node in the database):
    /// taken in here — an unplaced one is planned, one that was on the dead node's own
    /// executor ends `lost` (that executor died with its node). Other rows, and executions
    /// already held, are left alone.
    TakeOver(Vec<ExecutionRow>),
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase", deny_unknown_fields)]
pub enum ExecutionOutcome {
    /// It ran; here is the result.
    Completed(Box<RunResult>),
    /// It started on a machine that stopped answering.
    Lost,
    /// It was cancelled.
    Cancelled {
        /// Why (`requested`, `access_lost`, `revoked`, …).
        reason: String,
    },
    /// It could not be placed anywhere.
    Failed {
        /// The code (`no_usable_context`, an access code such as `not_opted_in` or
        /// `operator_left`, `execution_context_queue_expired`, …).
        code: String,
        /// What a person should read.
        message: String,
    },
}

/// What the dispatcher asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run an execution on the server's own executor; report [`Input::CloudFinished`].
    RunOnCloud(Box<ExecuteRequest>),
    /// Stop a cloud execution (it was cancelled).
    CancelCloud {
        /// The execution given in the [`Command::RunOnCloud`] to stop.
        exec_id: ExecutionId,
    },
    /// The execution was handed to the node that owns `context_id` (its record, placed
    /// [`PlaceRow::HandedOff`], comes first): this dispatcher holds it no more. Tell that
    /// node, which takes it in with [`Input::HandedOver`].
    HandOff {
        /// The execution handed off.
        exec_id: ExecutionId,
        /// The machine whose owner takes it.
        context_id: ContextId,
    },
}

/// What the dispatcher reports to the host: executions' starts, output and ends, and its sessions'
/// events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An execution ended (exactly once).
    ExecutionFinished {
        /// The execution that ended, as its [`ExecuteRequest`] named it.
        exec_id: ExecutionId,
        /// How it ended: completed with a result, lost, cancelled or failed with a code.
        outcome: ExecutionOutcome,
        /// Where it ran and what was tried (absent when it never got a place).
        ran_on: Option<RanOn>,
        /// One friendly sentence.
        line: String,
        /// Who asked for it (the user's name; the audit's actor for its end).
        requester: String,
    },
    /// A run was committed on a machine.
    RunStarted {
        /// The execution whose run was committed.
        exec_id: ExecutionId,
        /// The run id the machine sees.
        run_id: RunId,
        /// The machine the run was committed on; the execution is never offered anywhere else now.
        context_id: ContextId,
    },
    /// An execution's run wrote output (its machine's `run.output`): a live view for the
    /// execution's followers; the result stays the record.
    RunOutput {
        /// The execution whose run wrote the text.
        exec_id: ExecutionId,
        /// Which stream.
        stream: crate::wire::OutputStream,
        /// Bytes of that stream's text before `text`.
        offset: u64,
        /// The next part of the stream, as the `run.output` frame carried it (UTF-8, never empty).
        text: String,
    },
    /// An execution's terminal wrote bytes (its machine's `pty.output`, decoded).
    TerminalOutput {
        /// The execution whose terminal wrote the bytes (the terminal's id at the server).
        exec_id: ExecutionId,
        /// The bytes, untouched.
        data: Vec<u8>,
    },
    /// An execution's terminal program ended (`pty.exit`); the execution's end follows.
    TerminalExit {
        /// The execution whose terminal program ended (the terminal's id at the server).
        exec_id: ExecutionId,
        /// Its exit code, if it exited.
        exit_code: Option<i32>,
    },
    /// Something from a session (connections, violations).
    Session {
        /// The machine whose session reported the event.
        context_id: ContextId,
        /// The session's event, passed on after the dispatcher acted on it (`Ready`, `RunEnded`,
        /// `ProtocolViolation`, …).
        event: crate::session::Event,
    },
    /// The dispatcher was not running for a while (its input came later than the wake-up it
    /// asked for): every lease, offer, queue and connection-silence deadline moved on by
    /// `paused_for`, so no daemon is blamed for the server's own silence.
    Paused {
        /// How long, as far as the dispatcher can tell (since its previous input).
        paused_for: std::time::Duration,
    },
    /// A session refused an input the dispatcher gave it on its own (a timeout, a run to
    /// offer, a cancel). Nothing was done with that input; a refused offer falls through to
    /// the next candidate.
    SessionError {
        /// The machine whose session refused the input.
        context_id: ContextId,
        /// What the session said.
        error: crate::session::SessionError,
    },
}

/// What the dispatcher asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write this record durably before carrying out any later output (see `docs/RECORDS.md`).
    Persist(ServerRecord),
    /// Send a frame on a connection.
    Transmit {
        /// The connection to send on, as given in [`Input::Connect`].
        conn: ConnId,
        /// The server frame's JSON text, already signed for the connection's session.
        bytes: Vec<u8>,
    },
    /// Close a connection.
    Close {
        /// The connection to close, as given in [`Input::Connect`]; its later frames are ignored.
        conn: ConnId,
        /// The WebSocket close code (see [`close_code`](crate::wire::close_code)).
        code: u16,
        /// The close frame's reason: a stable code (`revoked`, `bad_signature`, …) or a short
        /// phrase such as `silent for too long`.
        reason: String,
    },
    /// Work for the host beyond the sockets: run or stop a cloud execution.
    Command(Command),
    /// Something for the host to record or pass on; see [`Event`].
    Event(Event),
    /// Nothing more until `until` or new input.
    Wait {
        /// When to call back.
        until: Instant,
        /// Why that time, for logs and tests (a lease, an offer, a queue's end, `pause probe`, …).
        reason: &'static str,
    },
}

/// Host misuse of the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    /// An execution id was used twice.
    #[error("execution {0:?} already exists")]
    DuplicateExecution(ExecutionId),
    /// The machine is not registered.
    #[error("no registered context {0:?}")]
    UnknownContext(ContextId),
    /// The host did not drain outputs.
    #[error(
        "more than {} outputs are waiting: drain poll_output first",
        crate::MAX_QUEUED_OUTPUTS
    )]
    OutputBacklog,
    /// Time went backwards.
    #[error("time went backwards")]
    TimeWentBackwards,
    /// A session refused the input.
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    /// The input names a machine another node of the cluster owns ([`Input::Elsewhere`]).
    #[error("context {0:?} is owned by another node")]
    OwnedElsewhere(ContextId),
    /// An [`Input::Adopt`] whose snapshot does not hold exactly one context row.
    #[error("an adopted snapshot must hold exactly one context row")]
    AdoptWithoutContext,
}

enum Place {
    /// Just received; not yet planned.
    Unplaced,
    /// Offered (or committed) on a machine as `run_id`.
    OnContext {
        context_id: ContextId,
        run_id: RunId,
        started: bool,
    },
    /// Waiting for `context_id` to come back until `until`.
    Queued {
        context_id: ContextId,
        until: Instant,
    },
    /// On the server's own executor.
    OnCloud,
}

struct Execution {
    request: ExecuteRequest,
    route: Option<Route>,
    place: Place,
    hops: u32,
    /// When it arrived, in this process's order: a machine's queue is served by it (an
    /// execution restored from the records is ordered by its queue deadline).
    arrival: u64,
}

struct Machine {
    record: ContextRecord,
    session: Session,
    /// Another node of the cluster owns it ([`Input::Elsewhere`]): nothing placed on it is
    /// held here, its row is never journaled here, and routing passes it over.
    elsewhere: bool,
}

/// The dispatcher. See the module docs.
pub struct Server {
    signer: Arc<dyn Signer + Send + Sync>,
    session_template: SessionConfig,
    /// Registered machines: by position, by context id (looked up by hash) and in id order
    /// (for everything that walks them, so walks stay deterministic).
    machines: Registry,
    /// Which machine each live connection belongs to, by position (looked up on every frame,
    /// never walked).
    conns: HashMap<ConnId, usize, timers::FixedHasher>,
    chains: BTreeMap<String, Chain>,
    executions: BTreeMap<ExecutionId, Execution>,
    /// The next [`Execution::arrival`].
    next_arrival: u64,
    runs: BTreeMap<RunId, ExecutionId>,
    /// When each run restored from the records was committed, as they say: a new process's
    /// clock cannot hold an instant from before its start, so the row keeps the written time.
    restored_commits: BTreeMap<RunId, u64>,
    /// Each machine's next session timer, by position (ties ordered like the context ids).
    session_wakes: SessionWakes,
    /// Each queued execution's deadline, by execution id.
    queue_wakes: WakeTable<ExecutionId>,
    outputs: VecDeque<Output>,
    journal: record::ServerJournal,
    now: Now,
    /// Until when a restarted dispatcher lets machines reconnect before it routes around them
    /// ([`RESTART_GRACE`]); `None` for a fresh one, or once the grace is over.
    grace_until: Option<Instant>,
    /// The wake-up the host was last asked for: an input much later than it means a pause.
    asked: Option<Instant>,
}
