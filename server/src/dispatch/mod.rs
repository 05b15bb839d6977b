//! The dispatcher actor: one tokio task owns the core's [`Server`], fed through a bounded
//! channel. After every input it drains `poll_output` to `Wait`: it commits each run of
//! `Persist` records before it carries out the next output (RECORDS.md §1), hands frames and
//! closes to the connections' bounded queues, starts and cancels cloud runs, and turns events
//! into metrics, audit rows and wake-ups for the routes that wait on executions (given before
//! the batch's frames are written). Then it sleeps until the `Wait` deadline or the next
//! message.
//!
//! It never blocks on a slow connection (a full queue closes that connection), and it stops
//! (fail-stop) rather than carry on after the store refused a record.
//!
//! [`terminals`] is the terminal relay's own task (viewers, tickets, the core's terminal
//! machines); it lives under the dispatcher because the two talk both ways through their
//! channels.

mod audit;
mod cloud;
mod conns;
mod ends;
mod events;
mod outputs;
mod owners;
mod pending;
mod requests;
pub(crate) mod terminals;
mod tickets;
mod waits;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use outpost_core::ids::ExecutionId;
use outpost_core::server::{self as core_server, Event, Input, Output, Server};
use outpost_core::session::{self, ConnId, IssuedTicket};
use outpost_core::ticket::TicketError;
use outpost_core::time::Instant;
use tokio::sync::{mpsc, oneshot};

pub(crate) use cloud::Cloud;
pub(crate) use conns::{ConnHandle, ToConn, queue as conns_queue};
pub(crate) use ends::{EndWatch, Ends};
pub(crate) use outputs::{Cursor, LiveOutputs};
pub(crate) use owners::{Fences, OwnerRow};
pub(crate) use pending::{Pending, QueueFull};
pub(crate) use requests::{ANSWER_WAIT, OwnerRequest, SharedControlAnswer};
pub(crate) use waits::{Refused, may_execute, spec as wait_spec};

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::{AuditRow, Batch, ExecutionEntry, Store, off_the_runtime};

/// The most messages one group commit takes.
const BATCH: usize = 256;

/// The most (machine, terminal) pairs remembered as refused second runners; past it the
/// memory starts again (a pair may then be logged and audited once more).
const REFUSED_RUNNERS: usize = 1024;

/// Where a request waits for its input's records to be written.
type Reply = Option<oneshot::Sender<Result<(), Declined>>>;

/// Why the dispatcher did not take an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Declined {
    /// The core refused it (the message says why).
    Core(String),
    /// An execute its requester or its context has no room for.
    QueueFull(QueueFull),
    /// The input names a machine another node of the cluster owns.
    Elsewhere(String),
    /// The batch the input was in could not be committed (the database failed or another
    /// node took a machine it wrote for): the dispatcher stopped, and the input's records
    /// were not confirmed.
    Unstored,
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declined::Core(message) => f.write_str(message),
            Declined::QueueFull(full) => f.write_str(&full.message),
            Declined::Elsewhere(id) => write!(f, "context {id} is owned by another node"),
            Declined::Unstored => f.write_str("the records were not committed"),
        }
    }
}

/// Why no connect ticket was issued.
#[derive(Debug)]
pub(crate) enum TicketRefused {
    /// The machine's session refused (unknown, or too many tickets outstanding).
    Ticket(TicketError),
    /// The database did not take this node's claim on the machine: nothing was issued.
    Database(crate::store::StoreError),
}

/// What a connection's live state is, for the context routes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Live {
    pub(crate) online: bool,
    pub(crate) slots_used: usize,
    pub(crate) slots_total: u32,
    /// What the daemon announced (`hello` / `capabilities.update` `features`).
    pub(crate) features: Vec<String>,
    /// Its last `status` said it takes no new runs (stopping, or paused).
    pub(crate) draining: bool,
    /// Its last `status` said an operator's pause holds.
    pub(crate) paused: bool,
    /// When (Unix seconds) its current connection became ready, while it is online.
    pub(crate) online_since: Option<u64>,
}

/// A message to the dispatcher.
pub(crate) enum Msg {
    /// Feed an input; the reply comes once its records are written and its outputs carried
    /// out.
    Input {
        input: Input,
        reply: Reply,
        /// A new execution's listing row, written in the same transaction as the input's
        /// records (only if the core takes the input). An execute with one is a caller's:
        /// it is declined when it would pass the bounds on executions not ended.
        listing: Option<Box<ExecutionEntry>>,
    },
    /// Issue a connect ticket.
    IssueTicket {
        context_id: String,
        /// The ticket's 48 random bytes, drawn by the caller.
        secret: [u8; 48],
        reply: oneshot::Sender<Result<IssuedTicket, TicketRefused>>,
    },
    /// Which context issued a connect ticket (the ticket is not spent: `Connect` spends it).
    TicketContext {
        ticket: String,
        reply: oneshot::Sender<Result<String, TicketError>>,
    },
    /// A WebSocket presented a ticket: attach its queue, then feed `Connect`.
    Connect {
        context_id: String,
        conn: ConnId,
        ticket: String,
        handle: ConnHandle,
    },
    /// A connection's reader ended.
    Disconnected { conn: ConnId },
    /// The live state of contexts.
    Live {
        ids: Vec<String>,
        reply: oneshot::Sender<HashMap<String, Live>>,
    },
    /// The machines whose daemon is connected here and ready: (id, name, live state), in id
    /// order.
    Sessions {
        reply: oneshot::Sender<Vec<(String, String, Live)>>,
    },
    /// The run `run_id` if it is committed on a machine and not finished.
    LiveRun {
        run_id: String,
        reply: oneshot::Sender<Option<core_server::LiveRun>>,
    },
    /// Ask a machine's daemon something from afar; the answer (the daemon's, or the
    /// session's own when it cannot be asked) comes through `reply`.
    Control {
        context_id: String,
        order: session::ControlOrder,
        reply: oneshot::Sender<session::ControlAnswer>,
    },
    /// Where a queued execution stands, if it is queued.
    QueuePlace {
        exec_id: ExecutionId,
        reply: oneshot::Sender<Option<core_server::QueuePlace>>,
    },
    /// The owners' table as the heartbeat read it: machines another node took are let go.
    Owners(Vec<OwnerRow>),
    /// Chains set through other nodes, as the heartbeat read them: (user id, chain).
    Chains(Vec<(String, outpost_core::routing::Chain)>),
    /// Another node may have handed this one executions or asked it to cancel one (a
    /// notification, or the heartbeat's timer): the dispatcher reads its inbox.
    Inbox,
    /// Machines another node just took (the payloads of its notifications: owner rows
    /// `context:node:epoch`, or bare ids whose rows are read): each one this node held is let
    /// go at once.
    Taken(Vec<String>),
    /// Owner rows of nodes judged dead (their heartbeat is older than [`crate::http::nodes::LIVE`]
    /// by the database's clock): this node tries to take their machines and the executions
    /// no machine holds; of several live nodes trying at once, one wins each.
    Dead(Vec<OwnerRow>),
    /// Stop.
    Shutdown,
}

/// What the actor shares with the routes.
pub(crate) struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) clock: Clock,
    pub(crate) metrics: Metrics,
    /// Wakes the routes waiting on an execution once its end is committed.
    pub(crate) ends: Ends,
    /// The output of running executions, for their followers.
    pub(crate) outputs: LiveOutputs,
    /// The terminals actor: terminal output, exits and ends go there.
    pub(crate) terminals: crate::dispatch::terminals::Terminals,
    /// What the server holds for its callers at most.
    pub(crate) limits: crate::Limits,
    /// Request bodies in progress (counted by the listener, shown by `/metrics`).
    pub(crate) inflight: Arc<crate::inflight::Inflight>,
    /// This node is cut off: it could not write its heartbeat for
    /// [`crate::http::nodes::CUT_OFF`], so every daemon connection closes itself (each
    /// socket's writer watches this, not the dispatcher, which a hung database may hold) and
    /// none is taken until a heartbeat is written again. Set and cleared by the heartbeat
    /// alone.
    pub(crate) cut_off: tokio::sync::watch::Sender<bool>,
}

/// The actor's state.
pub(crate) struct Dispatcher {
    server: Server,
    shared: Arc<Shared>,
    conns: HashMap<ConnId, ConnHandle>,
    cloud: Cloud,
    next_wake: Instant,
    /// When each execution was received, for the dispatch-latency histogram.
    received: HashMap<ExecutionId, Instant>,
    /// Listing rows of executions the core took, for the next commit.
    listings: Vec<ExecutionEntry>,
    /// Wait continuations among those executions (wait id, execution id), marked started in
    /// the same commit.
    continuations: Vec<(String, String)>,
    /// The executions not ended, per user and per context.
    pending: Pending,
    /// (machine, terminal) pairs already logged and audited as a refused second runner, so a
    /// machine that keeps speaking for another's terminal fills neither the log nor the audit.
    refused_runners: HashSet<(String, String)>,
    /// Requests to daemons waiting for their answer, by control id (a route that gave up
    /// leaves its closed sender, dropped at the next request).
    controls: HashMap<String, (String, oneshot::Sender<session::ControlAnswer>)>,
    /// When (Unix seconds) each online machine's connection became ready, by context id.
    online_since: HashMap<String, u64>,
    /// The machines this node owns, with the epochs that fence their records.
    fences: Fences,
    /// The current batch's connect tickets and WebSockets, carried out together.
    connects: tickets::Connects,
    /// More messages waited when the current batch was carried out: its frames are queued
    /// for the connections' writers, which write each connection's frames together, rather
    /// than written one by one from this thread (which an idle dispatcher does, sparing a
    /// wake-up per frame).
    busy: bool,
}

impl Dispatcher {
    /// An actor around `server` (new or restored), whose executions not ended `pending`
    /// counts.
    pub(crate) fn new(
        server: Server,
        shared: Arc<Shared>,
        cloud: Cloud,
        pending: Pending,
        fences: Fences,
    ) -> Self {
        let next_wake = shared.clock.now().instant;
        Self {
            server,
            shared,
            conns: HashMap::new(),
            cloud,
            next_wake,
            received: HashMap::new(),
            listings: Vec::new(),
            continuations: Vec::new(),
            pending,
            refused_runners: HashSet::new(),
            controls: HashMap::new(),
            online_since: HashMap::new(),
            fences,
            connects: tickets::Connects::default(),
            busy: false,
        }
    }

    /// Drains what restoring decided and submits the wait continuations a crash left
    /// pending; call once before [`Dispatcher::run`].
    pub(crate) fn settle(&mut self) -> Result<(), crate::store::StoreError> {
        self.drain()?;
        self.resume_continuations()?;
        self.drain()
    }

    /// Runs until [`Msg::Shutdown`], the channel closing, or a store failure; returns
    /// whether it stopped on a store failure.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<Msg>) -> bool {
        let mut failed = false;
        loop {
            let wake = self.shared.clock.to_tokio(self.next_wake);
            let step = tokio::select! {
                // What already waits is read before a timer fires (after a pause, the frames
                // in the sockets come first; the core shifts its deadlines too).
                biased;
                msg = rx.recv() => match msg {
                    None | Some(Msg::Shutdown) => break,
                    Some(msg) => match self.on_batch(msg, &mut rx) {
                        Ok(true) => break,
                        other => other.map(|_| ()),
                    },
                },
                // (`biased`: the channel was empty when these fire.)
                Some((exec_id, result)) = self.cloud.finished() => {
                    self.busy = false;
                    self.feed(Input::CloudFinished { exec_id, result: Box::new(result) })
                }
                () = tokio::time::sleep_until(wake) => {
                    self.busy = false;
                    self.feed(Input::Timeout)
                }
            };
            if let Err(e) = step {
                match (e.fenced_context(), e.fenced_node()) {
                    (Some(context), _) => tracing::error!(
                        error = %e,
                        context,
                        "another node took a machine this node was writing for; the dispatcher stops (start the server again: it restores what it owns from the records)"
                    ),
                    (None, Some(node)) => tracing::error!(
                        error = %e,
                        node,
                        "this node's own fence failed (another node took over its executions, \
                         or a later start of it holds them); the dispatcher stops (start the \
                         server again: it restores what it owns from the records)"
                    ),
                    (None, None) => tracing::error!(
                        error = %e,
                        "the store refused a record; the dispatcher stops"
                    ),
                }
                failed = true;
                break;
            }
        }
        self.cloud.cancel_all();
        failed
    }

    fn feed(&mut self, input: Input) -> Result<(), crate::store::StoreError> {
        let now = self.shared.clock.now();
        if let Err(e) = self.server.handle_input(now, input) {
            tracing::warn!(error = %e, "the dispatcher refused an input");
        }
        self.drain()
    }

    /// Handles `first` and what is already waiting behind it (at most [`BATCH`] messages):
    /// the inputs of consecutive `Input`, `Connect` and `Disconnected` messages go to the
    /// core one after another and their records are committed in one transaction (a group
    /// commit) before any of their outputs is carried out or any reply sent. The connect
    /// tickets issued and the WebSockets presented between two other messages are carried
    /// out together, in one transaction of their own ([`Dispatcher::flush_connects`]), before
    /// the next message that could depend on them. Returns whether a shutdown was among them.
    fn on_batch(
        &mut self,
        first: Msg,
        rx: &mut mpsc::Receiver<Msg>,
    ) -> Result<bool, crate::store::StoreError> {
        let mut replies = Vec::new();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(msg) = next.take() {
            taken += 1;
            match msg {
                Msg::Shutdown => {
                    self.flush_connects();
                    self.finish_batch(replies)?;
                    return Ok(true);
                }
                Msg::Input {
                    input,
                    reply,
                    listing,
                } => {
                    // In the order they came: a daemon connected before this input is
                    // connected when it is fed.
                    self.flush_connects();
                    let admitted = match (&input, &listing) {
                        (Input::Execute(request), Some(_)) => {
                            self.pending.admit(request).map_err(Declined::QueueFull)
                        }
                        _ => Ok(()),
                    };
                    let result = admitted.and_then(|()| self.apply(input));
                    if let (Ok(()), Some(listing)) = (&result, listing) {
                        self.listings.push(*listing);
                    }
                    replies.push((reply, result));
                }
                Msg::Connect {
                    context_id,
                    conn,
                    ticket,
                    handle,
                } => {
                    self.conns.insert(conn, handle);
                    self.present(context_id, conn, ticket);
                }
                Msg::IssueTicket {
                    context_id,
                    secret,
                    reply,
                } => self.issue_ticket(context_id, secret, reply)?,
                Msg::TicketContext { ticket, reply } => {
                    let _ = reply.send(self.ticket_context(&ticket));
                }
                Msg::Disconnected { conn } => {
                    self.flush_connects();
                    if self.conns.remove(&conn).is_some() {
                        let _ = self.apply(Input::Disconnected { conn });
                    }
                }
                other => {
                    self.flush_connects();
                    self.busy = !rx.is_empty();
                    self.finish_batch(std::mem::take(&mut replies))?;
                    self.on_msg(other)?;
                }
            }
            if taken < BATCH {
                next = rx.try_recv().ok();
            }
        }
        self.flush_connects();
        self.busy = !rx.is_empty();
        self.finish_batch(replies)?;
        Ok(false)
    }

    /// Feeds one input of a batch (outputs are drained by [`Dispatcher::finish_batch`]).
    fn apply(&mut self, input: Input) -> Result<(), Declined> {
        if let Input::Cancel { exec_id } = &input
            && !self.server.holds(exec_id)
        {
            // Another node may hold it (it was handed off, or submitted there): ask them all.
            let store = &self.shared.store;
            if let Err(e) = off_the_runtime(|| store.ask_execution_cancel(exec_id)) {
                tracing::warn!(error = %e, %exec_id, "a cancel for another node was not stored");
            }
            return Ok(());
        }
        if let Input::SetChain { chain, .. } = &input {
            // A chain may name machines registered through other nodes moments ago.
            for entry in chain.entries() {
                if let outpost_core::routing::ChainEntry::Context(id) = entry
                    && let Err(e) = self.learn_machine(id)
                {
                    tracing::warn!(error = %e, context = id, "a machine was not learnt");
                }
            }
        }
        if let Input::Execute(request) = &input
            && let Some(named) = request.target.context.as_deref()
        {
            if let Err(e) = self.learn_machine(named) {
                tracing::warn!(error = %e, context = named, "a machine was not learnt");
            }
            let named = named.to_owned();
            if self.owns(&named)
                && !self
                    .server
                    .session(&named)
                    .is_some_and(outpost_core::session::Session::is_ready)
            {
                // Its daemon is not connected here: it may have moved to another node moments
                // ago, which this node must know before it writes anything for the machine.
                self.let_go_if_taken(&named);
            }
        }
        let mut counted = None;
        if let Input::Execute(request) = &input {
            self.received
                .insert(request.exec_id.clone(), self.shared.clock.now().instant);
            if self.pending.add(request) {
                counted = Some(request.exec_id.clone());
            }
        }
        tracing::trace!(target: "outpost::timeline", stage = "server.feed");
        let now = self.shared.clock.now();
        match self.server.handle_input(now, input) {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Some(exec_id) = counted {
                    self.pending.ended(&exec_id);
                }
                tracing::warn!(error = %e, "the dispatcher refused an input");
                Err(match e {
                    core_server::ServerError::OwnedElsewhere(id) => {
                        Declined::Elsewhere(id.into_string())
                    }
                    e => Declined::Core(e.to_string()),
                })
            }
        }
    }

    /// Drains a batch's outputs (records first, in one transaction), then answers its
    /// requests.
    fn finish_batch(
        &mut self,
        replies: Vec<(Reply, Result<(), Declined>)>,
    ) -> Result<(), crate::store::StoreError> {
        let drained = self.drain();
        for (reply, result) in replies {
            if let Some(reply) = reply {
                // A batch whose records were not committed answers nobody yes: the
                // dispatcher stops, and what the requests asked for was never kept.
                let result = match &drained {
                    Ok(()) => result,
                    Err(_) => Err(Declined::Unstored),
                };
                let _ = reply.send(result);
            }
        }
        drained
    }

    /// The live state of machine `id`'s session `s`.
    fn live(&self, id: &str, s: &session::Session) -> Live {
        Live {
            online: s.is_ready(),
            slots_used: s.in_flight(),
            slots_total: s.max_concurrent(),
            features: s.features().to_vec(),
            draining: s.is_draining(),
            paused: s.is_paused(),
            online_since: s
                .is_ready()
                .then(|| self.online_since.get(id).copied())
                .flatten(),
        }
    }

    /// The messages a batch does not take: they read the state the batch left.
    fn on_msg(&mut self, msg: Msg) -> Result<(), crate::store::StoreError> {
        match msg {
            Msg::Live { ids, reply } => {
                let live = ids
                    .into_iter()
                    .map(|id| {
                        let live = self.server.session(&id).map(|s| self.live(&id, s));
                        (id, live.unwrap_or_default())
                    })
                    .collect();
                let _ = reply.send(live);
                Ok(())
            }
            Msg::Sessions { reply } => {
                let sessions = self
                    .server
                    .ready_sessions()
                    .map(|(record, session)| {
                        let id = record.id.to_string();
                        let live = self.live(&id, session);
                        (id, record.name.clone(), live)
                    })
                    .collect();
                let _ = reply.send(sessions);
                Ok(())
            }
            Msg::LiveRun { run_id, reply } => {
                let _ = reply.send(self.server.live_run(&run_id));
                Ok(())
            }
            Msg::QueuePlace { exec_id, reply } => {
                let _ = reply.send(self.server.queue_place(&exec_id));
                Ok(())
            }
            Msg::Control {
                context_id,
                order,
                reply,
            } => {
                self.controls.retain(|_, (_, waiting)| !waiting.is_closed());
                if self.server.session(&context_id).is_none() {
                    let _ = reply.send(session::ControlAnswer::unasked(
                        order,
                        "context_unknown",
                        "the dispatcher knows no such context",
                    ));
                    return Ok(());
                }
                if self.server.is_owned_elsewhere(&context_id) {
                    let _ = reply.send(session::ControlAnswer::unasked(
                        order,
                        "context_owned_elsewhere",
                        "this machine's daemon is connected to another node of the cluster: ask that node",
                    ));
                    return Ok(());
                }
                self.controls
                    .insert(order.control_id.clone(), (context_id.clone(), reply));
                self.feed(Input::Control {
                    context_id: context_id.into(),
                    order,
                })
            }
            Msg::Owners(rows) => self.on_owners(rows),
            Msg::Inbox => self.read_inbox(),
            Msg::Dead(rows) => self.take_from_the_dead(rows),
            Msg::Taken(payloads) => {
                let mut rows = Vec::new();
                let mut bare = Vec::new();
                for payload in &payloads {
                    let (heard, ids) = crate::store::heard_takes(payload);
                    rows.extend(heard);
                    bare.extend(ids);
                }
                self.on_owners(rows)?;
                self.check_owners(&bare)
            }
            Msg::Chains(chains) => {
                for (user_id, chain) in chains {
                    // Equal to what this node holds: nothing happens, nothing is written.
                    let _ = self.apply(Input::SetChain { user_id, chain });
                }
                self.drain()
            }
            // Taken by `on_batch` itself.
            Msg::Input { .. }
            | Msg::Connect { .. }
            | Msg::Disconnected { .. }
            | Msg::IssueTicket { .. }
            | Msg::TicketContext { .. }
            | Msg::Shutdown => Ok(()),
        }
    }

    /// Polls outputs until `Wait`, then writes every record among them in one transaction
    /// before it carries out any other output (so each output follows the records it depends
    /// on, RECORDS.md §1, with one commit for all the inputs fed since the last drain; live
    /// output, which depends on none, is appended to its log as it is polled). The
    /// same transaction takes the listing rows of the executions those inputs created and
    /// the audit events of those outputs: one commit per drain.
    /// Carrying out can feed the core (a connection whose queue is full is dropped), so it
    /// polls again until nothing is left.
    fn drain(&mut self) -> Result<(), crate::store::StoreError> {
        loop {
            let mut batch = Batch {
                executions: std::mem::take(&mut self.listings),
                continuations: std::mem::take(&mut self.continuations),
                ..Batch::default()
            };
            let mut outputs = Vec::new();
            loop {
                match self.server.poll_output() {
                    Output::Persist(record) => batch.records.push(record),
                    Output::Wait { until, .. } => {
                        self.next_wake = until;
                        break;
                    }
                    Output::Event(Event::RunOutput {
                        exec_id,
                        stream,
                        offset,
                        text,
                    }) => {
                        // Live output is no record and waits for none: appended as it is
                        // polled, an end polled after it keeps it and its followers read it.
                        self.shared.outputs.append(&exec_id, stream, offset, &text);
                    }
                    output => {
                        if let Output::Event(event) = &output {
                            batch.audit.extend(self.audit_rows(event));
                            if let Some(kept) = self.kept_output(event) {
                                batch.kept.push(kept);
                            }
                        }
                        outputs.push(output);
                    }
                }
            }
            if batch.is_empty() && outputs.is_empty() {
                // After every drain, whatever fed it (a batch, a timer, a cloud run's end),
                // so the gauge never shows an execution that ended without a request.
                self.shared.metrics.executions_pending(self.pending.count());
                return Ok(());
            }
            // The rows of the executions this batch ended, as committed.
            let mut ended_rows = Vec::new();
            if !batch.is_empty() {
                // Each machine's records are written under the epoch this node holds for it.
                let written = crate::store::contexts_written(&batch.records, self.fences.node_id());
                batch.fence = self.fence_for(written)?;
                batch.node_id = Some(self.fences.node_id().to_owned());
                // Only a drain with something to write waits for the disk (terminal bytes,
                // most frames of a busy session, write nothing).
                let store = &self.shared.store;
                tracing::trace!(target: "outpost::timeline", stage = "server.commit", records = batch.records.len());
                ended_rows = off_the_runtime(|| store.write_batch(&batch))?;
                tracing::trace!(target: "outpost::timeline", stage = "server.committed");
            }
            // Who waits on an execution's end is told before the frames are written, and
            // given the row as committed: the answer is written on another thread while this
            // one writes.
            for output in &outputs {
                if let Output::Event(Event::ExecutionFinished {
                    exec_id, outcome, ..
                }) = output
                {
                    // The last row written for it, should a batch ever hold two ends.
                    let row = ended_rows
                        .iter()
                        .rposition(|row| row.id == exec_id.as_str())
                        .map(|at| ended_rows.swap_remove(at));
                    self.end_committed(exec_id, outcome, row);
                }
            }
            for output in outputs {
                self.carry_out(output)?;
            }
        }
    }

    fn carry_out(&mut self, output: Output) -> Result<(), crate::store::StoreError> {
        match output {
            Output::Persist(_) | Output::Wait { .. } => {}
            Output::Transmit { conn, bytes } => {
                tracing::trace!(target: "outpost::timeline", stage = "server.queue", frame = %outpost_core::wire::frame_label(&bytes));
                self.send(conn, ToConn::Frame(bytes))
            }
            Output::Close { conn, code, reason } => {
                self.send(conn, ToConn::Close(code, reason));
                self.conns.remove(&conn);
            }
            Output::Command(core_server::Command::RunOnCloud(request)) => {
                self.cloud.start(*request);
            }
            Output::Command(core_server::Command::CancelCloud { exec_id }) => {
                self.cloud.cancel(&exec_id);
            }
            Output::Command(core_server::Command::HandOff {
                exec_id,
                context_id,
            }) => {
                // The owner of the machine counts it now; its record woke that node.
                tracing::debug!(%exec_id, %context_id, "handed an execution to the machine's owner");
                self.pending.ended(&exec_id);
                self.received.remove(&exec_id);
            }
            Output::Event(event) => self.on_event(event)?,
        }
        Ok(())
    }

    fn send(&mut self, conn: ConnId, message: ToConn) {
        let Some(handle) = self.conns.get(&conn) else {
            return;
        };
        if !handle.offer(message, !self.busy) {
            // The reader is too slow: its queue is full. Close it rather than buffer without
            // bound; the session hears it as a disconnect.
            tracing::warn!(conn, "a connection's send queue is full; closing it");
            self.conns.remove(&conn);
            let now = self.shared.clock.now();
            if let Err(e) = self.server.handle_input(now, Input::Disconnected { conn }) {
                tracing::warn!(error = %e, "the dispatcher refused a disconnect");
            }
        }
    }
}
