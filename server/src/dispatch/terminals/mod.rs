//! The terminals actor: one tokio task owns every open terminal's [`Relay`] (core's sans-IO
//! relay), the viewer tickets, and each viewer's outbound queue. The dispatcher hands it a
//! terminal's output, exit and end; the viewer sockets hand it keystrokes, sizes, closes and
//! how much they wrote; it feeds the relays and carries out what they say — messages to
//! viewers, signed `pty.*` frames to the runner through the dispatcher, audit rows — and
//! records every session as it relays it (`recording`).
//!
//! It never interprets a terminal's bytes, never blocks on a viewer (a viewer's queue is
//! bounded by the relay, which drops a viewer that falls behind), and never logs a ticket.

mod recording;
mod tickets;
pub(crate) mod viewer;

use std::collections::HashMap;
use std::sync::Arc;

use outpost_core::api::TerminalState;
use outpost_core::executor::TerminalSize;
use outpost_core::ids::{ExecutionId, TerminalId};
use outpost_core::server::Input as ServerInput;
use outpost_core::session::TerminalAction;
use outpost_core::terminal::cast::Recorder;
use outpost_core::terminal::{
    Audit, Input, Output, Reason, Relay, RelayConfig, Role, RunnerMessage, ViewerId, ViewerMessage,
};
use outpost_core::time::Instant;
use tokio::sync::{mpsc, oneshot};

pub(crate) use recording::RecordingConfig;
pub(crate) use tickets::{IssueRefused, TicketRefused, well_formed};

/// How long a viewer ticket may wait to be used, in milliseconds (for the answers).
pub(crate) const TICKET_LIFETIME_MS: u64 = tickets::TICKET_LIFETIME.as_millis() as u64;
use tickets::Tickets;
pub(crate) use tickets::ViewerTicket;

use crate::clock::Clock;
use crate::dispatch::Msg;
use crate::store::{AuditRow, Batch, Store};
use recording::Recordings;

/// What a viewer's socket writer is asked to send.
#[derive(Debug)]
pub(crate) enum ToViewer {
    /// A text message (JSON).
    Text(String),
    /// Terminal bytes (a binary message), shared between viewers.
    Bytes(Arc<[u8]>),
    /// Close with this code and reason, after what is queued.
    Close(u16, &'static str),
}

/// What a viewer's socket reports.
#[derive(Debug)]
pub(crate) enum FromViewer {
    /// Keystrokes (a binary message).
    Input(Vec<u8>),
    /// `{"type":"resize"}`.
    Resize { cols: u16, rows: u16 },
    /// `{"type":"close"}`.
    Close,
    /// The writer sent this many terminal bytes.
    Written(u64),
    /// The connection ended: with a close (`true`) or without one (`false`).
    Left { closed: bool },
}

/// A terminal as `GET /v1/terminals` lists it.
#[derive(Debug, Clone)]
pub(crate) struct TerminalView {
    pub(crate) terminal_id: TerminalId,
    pub(crate) context_id: String,
    pub(crate) context_name: String,
    pub(crate) opened_by: String,
    pub(crate) opened_at: u64,
    pub(crate) state: TerminalState,
    pub(crate) viewers: usize,
    pub(crate) size: TerminalSize,
    pub(crate) records_input: bool,
}

/// A message to the actor.
pub(crate) enum TermMsg {
    /// A terminal was asked for; its execution is about to be submitted.
    Open {
        exec_id: ExecutionId,
        context_id: String,
        context_name: String,
        user: String,
        size: TerminalSize,
        /// Record what operators type: the server is told to and the machine's owner allows it.
        record_input: bool,
    },
    /// A ticket for `user` to view `exec_id`; `None` when there is no such open terminal
    /// the caller may see.
    IssueTicket {
        exec_id: ExecutionId,
        user: String,
        may_watch: bool,
        reply: oneshot::Sender<Result<(String, Role), tickets::IssueRefused>>,
    },
    /// A viewer presented a ticket (before the upgrade): spend it.
    Redeem {
        terminal_id: TerminalId,
        ticket: String,
        reply: oneshot::Sender<Result<ViewerTicket, TicketRefused>>,
    },
    /// A socket upgraded with a redeemed ticket: join it to the relay.
    Join {
        ticket: ViewerTicket,
        out: mpsc::UnboundedSender<ToViewer>,
        reply: oneshot::Sender<Option<ViewerId>>,
    },
    /// Something from a joined viewer.
    Viewer {
        exec_id: ExecutionId,
        viewer: ViewerId,
        event: FromViewer,
    },
    /// The execution's run was committed to a machine: the relay may talk to its runner.
    /// Any execution's start comes; one that is no terminal is ignored.
    Started { exec_id: ExecutionId },
    /// The runner's output (`pty.output`), from the dispatcher.
    Output { exec_id: ExecutionId, data: Vec<u8> },
    /// The program ended (`pty.exit`).
    Exited {
        exec_id: ExecutionId,
        exit_code: Option<i32>,
    },
    /// The execution ended; `error` says why when it never ran or did not end by exiting.
    Finished {
        exec_id: ExecutionId,
        reason: Reason,
        exit_code: Option<i32>,
        error: Option<(String, String)>,
    },
    /// The server stops: every open recording ends now and is stored, then `done`.
    Shutdown { done: oneshot::Sender<()> },
    /// The open terminals `user` may see (an admin: all).
    List {
        user: String,
        admin: bool,
        reply: oneshot::Sender<Vec<TerminalView>>,
    },
    /// Whether this node's relay holds terminal `terminal_id` (open or ending): a request for
    /// one it does not hold is relayed to the node that does.
    Holds {
        terminal_id: TerminalId,
        reply: oneshot::Sender<bool>,
    },
}

/// The handle the dispatcher and routes hold.
#[derive(Clone)]
pub(crate) struct Terminals(mpsc::UnboundedSender<TermMsg>);

impl Terminals {
    /// A handle and the receiver [`run`] takes.
    pub(crate) fn channel() -> (Self, mpsc::UnboundedReceiver<TermMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self(tx), rx)
    }

    /// Sends `msg`; a stopped actor drops it (the server is shutting down).
    pub(crate) fn send(&self, msg: TermMsg) {
        let _ = self.0.send(msg);
    }

    /// Asks the actor and waits for its answer; `None` when it stopped.
    pub(crate) async fn ask<T>(
        &self,
        msg: impl FnOnce(oneshot::Sender<T>) -> TermMsg,
    ) -> Option<T> {
        let (reply, rx) = oneshot::channel();
        self.send(msg(reply));
        rx.await.ok()
    }
}

struct Open {
    relay: Relay,
    context_id: String,
    context_name: String,
    opened_by: String,
    opened_at: u64,
    viewers: HashMap<ViewerId, mpsc::UnboundedSender<ToViewer>>,
    /// The execution ended (the relay may still be closing viewers).
    finished: bool,
    /// The session's recording so far.
    recorder: Recorder,
    /// The recording's end was written.
    recorded_end: bool,
}

/// The actor's state.
pub(crate) struct Actor {
    terminals: HashMap<ExecutionId, Open>,
    tickets: Tickets,
    next_viewer: ViewerId,
    clock: Clock,
    store: Arc<Store>,
    dispatcher: mpsc::Sender<Msg>,
    config: RelayConfig,
    recordings: Recordings,
}

impl Actor {
    /// An actor whose terminals close after `idle` with no viewer and are recorded as
    /// `recordings` says (its writer task starts here: call it inside the runtime).
    pub(crate) fn new(
        clock: Clock,
        store: Arc<Store>,
        dispatcher: mpsc::Sender<Msg>,
        idle: std::time::Duration,
        recordings: RecordingConfig,
    ) -> Self {
        Self {
            recordings: Recordings::start(recordings, store.clone()),
            terminals: HashMap::new(),
            tickets: Tickets::default(),
            next_viewer: 1,
            clock,
            store,
            dispatcher,
            config: RelayConfig {
                idle_limit: idle,
                ..RelayConfig::default()
            },
        }
    }

    /// Runs until every handle is dropped.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<TermMsg>) {
        loop {
            let wake = self.next_wake();
            let msg = match wake {
                Some(at) => {
                    let at = self.clock.to_tokio(at);
                    tokio::select! {
                        m = rx.recv() => m,
                        () = tokio::time::sleep_until(at) => {
                            self.on_timeout().await;
                            continue;
                        }
                    }
                }
                None => rx.recv().await,
            };
            let Some(msg) = msg else { return };
            self.on_msg(msg).await;
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        self.terminals
            .values()
            .filter_map(|t| t.relay.poll_timeout().map(|(at, _)| at))
            .min()
    }

    async fn on_timeout(&mut self) {
        let ids: Vec<ExecutionId> = self.terminals.keys().cloned().collect();
        for id in ids {
            self.feed(&id, Input::Timeout).await;
        }
    }

    async fn on_msg(&mut self, msg: TermMsg) {
        match msg {
            TermMsg::Open {
                exec_id,
                context_id,
                context_name,
                user,
                size,
                record_input,
            } => {
                let now = self.clock.now();
                let relay = Relay::new(self.config.clone(), exec_id.as_str(), size, now);
                let recorder = self.recordings.begin(
                    now,
                    &exec_id,
                    (&context_id, &context_name),
                    &user,
                    size,
                    record_input,
                );
                self.terminals.insert(
                    exec_id,
                    Open {
                        relay,
                        context_id,
                        context_name,
                        opened_by: user,
                        opened_at: now.wall.0,
                        viewers: HashMap::new(),
                        finished: false,
                        recorder,
                        recorded_end: false,
                    },
                );
            }
            TermMsg::IssueTicket {
                exec_id,
                user,
                may_watch,
                reply,
            } => {
                let role = match self.terminals.get(&exec_id) {
                    Some(t) if t.relay.ended().is_none() && t.opened_by == user => {
                        Some(Role::Operator)
                    }
                    Some(t) if t.relay.ended().is_none() && may_watch => Some(Role::Watcher),
                    _ => None,
                };
                let issued = role
                    .ok_or(tickets::IssueRefused::NoTerminal)
                    .and_then(|role| {
                        let now = self.clock.now().wall;
                        self.tickets
                            .issue(now, exec_id, user, role)
                            .map(|t| (t, role))
                    });
                let _ = reply.send(issued);
            }
            TermMsg::Redeem {
                terminal_id,
                ticket,
                reply,
            } => {
                let now = self.clock.now().wall;
                let _ = reply.send(self.tickets.redeem(now, &terminal_id, &ticket));
            }
            TermMsg::Join { ticket, out, reply } => {
                let viewer = self.next_viewer;
                let joined = match self.terminals.get_mut(&ticket.exec_id) {
                    Some(t) if t.relay.ended().is_none() => {
                        self.next_viewer += 1;
                        t.viewers.insert(viewer, out);
                        true
                    }
                    _ => false,
                };
                if !joined {
                    let _ = reply.send(None);
                    return;
                }
                let _ = reply.send(Some(viewer));
                let input = Input::ViewerJoined {
                    viewer,
                    user: ticket.user,
                    role: ticket.role,
                };
                self.feed(&ticket.exec_id, input).await;
            }
            TermMsg::Viewer {
                exec_id,
                viewer,
                event,
            } => {
                let input = match event {
                    FromViewer::Input(bytes) => Input::ViewerInput { viewer, bytes },
                    FromViewer::Resize { cols, rows } => Input::ViewerResize { viewer, cols, rows },
                    FromViewer::Close => Input::ViewerClose { viewer },
                    FromViewer::Written(bytes) => Input::ViewerWritten { viewer, bytes },
                    FromViewer::Left { closed } => {
                        // The socket is gone: nothing more is sent to it.
                        let known = self
                            .terminals
                            .get_mut(&exec_id)
                            .and_then(|t| t.viewers.remove(&viewer))
                            .is_some();
                        if !known {
                            return;
                        }
                        let why = if closed {
                            outpost_core::terminal::Left::Closed
                        } else {
                            outpost_core::terminal::Left::Dropped
                        };
                        Input::ViewerLeft { viewer, why }
                    }
                };
                self.feed(&exec_id, input).await;
            }
            TermMsg::Started { exec_id } => self.feed(&exec_id, Input::RunnerStarted).await,
            TermMsg::Output { exec_id, data } => {
                if let Some(t) = self.terminals.get_mut(&exec_id) {
                    t.recorder.output(self.clock.now().instant, &data);
                }
                self.feed(&exec_id, Input::Output(data)).await;
            }
            TermMsg::Exited { exec_id, exit_code } => {
                self.feed(&exec_id, Input::Exited { exit_code }).await;
            }
            TermMsg::Finished {
                exec_id,
                reason,
                exit_code,
                error,
            } => {
                let Some(t) = self.terminals.get_mut(&exec_id) else {
                    return;
                };
                t.finished = true;
                if let Some((code, message)) = error {
                    let text = ViewerMessage::Error {
                        code: error_code(&code),
                        message: format!("{code}: {message}"),
                    }
                    .to_text()
                    .unwrap_or_default();
                    for out in t.viewers.values() {
                        let _ = out.send(ToViewer::Text(text.clone()));
                    }
                }
                let input = if reason == Reason::Exited {
                    Input::Exited { exit_code }
                } else {
                    Input::Ended { reason }
                };
                self.feed(&exec_id, input).await;
            }
            TermMsg::Shutdown { done } => {
                let now = self.clock.now();
                for (id, t) in &mut self.terminals {
                    if !t.recorded_end {
                        t.recorder.finish(now.instant);
                        t.recorded_end = true;
                        self.recordings.flush(id, &mut t.recorder, Some(now.wall.0));
                    }
                }
                self.recordings.drain().await;
                let _ = done.send(());
            }
            TermMsg::Holds { terminal_id, reply } => {
                let held = self
                    .terminals
                    .contains_key(&ExecutionId::new(terminal_id.as_str()));
                let _ = reply.send(held);
            }
            TermMsg::List { user, admin, reply } => {
                let views = self
                    .terminals
                    .iter()
                    .filter(|(_, t)| admin || t.opened_by == user)
                    .map(|(id, t)| TerminalView {
                        terminal_id: TerminalId::new(id.as_str()),
                        context_id: t.context_id.clone(),
                        context_name: t.context_name.clone(),
                        opened_by: t.opened_by.clone(),
                        opened_at: t.opened_at,
                        state: if t.relay.ended().is_some() {
                            TerminalState::Closed
                        } else if t.relay.ring().pushed() > 0 {
                            TerminalState::Open
                        } else {
                            TerminalState::Starting
                        },
                        viewers: t.relay.viewer_count(),
                        size: t.relay.size(),
                        records_input: t.recorder.records_input(),
                    })
                    .collect();
                let _ = reply.send(views);
            }
        }
    }

    /// Feeds one terminal's relay and carries out everything it says.
    async fn feed(&mut self, exec_id: &str, input: Input) {
        let now = self.clock.now();
        let Some(t) = self.terminals.get_mut(exec_id) else {
            return;
        };
        if let Err(e) = t.relay.handle_input(now, input) {
            tracing::warn!(terminal = %exec_id, code = e.code(), "the relay refused an input");
        }
        let mut runner = Vec::new();
        let mut audit = Vec::new();
        loop {
            match t.relay.poll_output() {
                Output::Wait { .. } => break,
                Output::ToViewer { viewer, message } => {
                    if let Some(out) = t.viewers.get(&viewer) {
                        let _ = out.send(match message {
                            ViewerMessage::Bytes(bytes) => ToViewer::Bytes(bytes),
                            other => ToViewer::Text(other.to_text().unwrap_or_default()),
                        });
                    }
                }
                Output::DropViewer {
                    viewer,
                    reason,
                    close_code,
                } => {
                    if let Some(out) = t.viewers.remove(&viewer) {
                        let _ = out.send(ToViewer::Close(close_code, reason.code()));
                    }
                }
                Output::ToRunner(message) => {
                    match &message {
                        RunnerMessage::Input(bytes) => t.recorder.input(now.instant, bytes),
                        RunnerMessage::Resize(size) => {
                            t.recorder.resize(now.instant, size.cols, size.rows);
                        }
                        RunnerMessage::Close | RunnerMessage::Credit(_) => {}
                    }
                    runner.push(message);
                }
                Output::Audit(event) => audit.push(audit_row(&t.context_id, exec_id, &event)),
            }
        }
        let mut ended_at = None;
        if t.relay.ended().is_some() && !t.recorded_end {
            t.recorder.finish(now.instant);
            t.recorded_end = true;
            ended_at = Some(now.wall.0);
        }
        self.recordings.flush(exec_id, &mut t.recorder, ended_at);
        let forget = t.finished && t.relay.ended().is_some() && t.viewers.is_empty();
        if !audit.is_empty() {
            let batch = Batch {
                audit,
                ..Batch::default()
            };
            let store = self.store.clone();
            let written = tokio::task::spawn_blocking(move || store.write_batch(&batch)).await;
            if !matches!(written, Ok(Ok(_))) {
                tracing::error!(terminal = %exec_id, "cannot write a terminal's audit rows");
            }
        }
        for message in runner {
            let action = match message {
                RunnerMessage::Input(bytes) => TerminalAction::Input(bytes),
                RunnerMessage::Resize(size) => TerminalAction::Resize {
                    cols: size.cols,
                    rows: size.rows,
                },
                RunnerMessage::Close => TerminalAction::Close,
                RunnerMessage::Credit(bytes) => TerminalAction::Credit(bytes),
            };
            let msg = Msg::Input {
                input: ServerInput::Terminal {
                    exec_id: exec_id.into(),
                    action,
                },
                reply: None,
                listing: None,
            };
            if self.dispatcher.send(msg).await.is_err() {
                return;
            }
        }
        if forget {
            self.terminals.remove(exec_id);
        }
    }
}

/// The stable code a viewer is told when a terminal could not run.
fn error_code(code: &str) -> &'static str {
    match code {
        "environment_unavailable" => "environment_unavailable",
        "pty_operator_only" => "pty_operator_only",
        "environment_not_granted" => "environment_not_granted",
        _ => "terminal_failed",
    }
}

fn audit_row(context_id: &str, exec_id: &str, event: &Audit) -> AuditRow {
    let (at, actor, detail) = match event {
        Audit::SessionStarted { user, role, at, .. } => {
            (at.0, user.clone(), format!("{exec_id} {}", role.code()))
        }
        Audit::SessionEnded {
            user,
            role,
            at,
            started_at,
            why,
            ..
        } => (
            at.0,
            user.clone(),
            format!(
                "{exec_id} {} {} after {} s",
                role.code(),
                why.code(),
                at.0.saturating_sub(started_at.0)
            ),
        ),
        Audit::TerminalClosed {
            at,
            reason,
            exit_code,
        } => (
            at.0,
            "relay".to_owned(),
            match exit_code {
                Some(code) => format!("{exec_id} {} exit {code}", reason.code()),
                None => format!("{exec_id} {}", reason.code()),
            },
        ),
    };
    AuditRow {
        at,
        kind: event.action().to_owned(),
        actor,
        context_id: Some(context_id.to_owned()),
        detail,
    }
}

/// What an execution's end means for its terminal (if it is one).
pub(crate) fn finished(
    exec_id: ExecutionId,
    outcome: &outpost_core::server::ExecutionOutcome,
) -> TermMsg {
    use outpost_core::server::ExecutionOutcome;
    let (reason, exit_code, error) = match outcome {
        ExecutionOutcome::Completed(result) => match &result.error {
            Some(e) => (
                Reason::Closed,
                None,
                Some((e.code.clone(), e.message.clone())),
            ),
            None => (Reason::Exited, result.exit_code, None),
        },
        ExecutionOutcome::Lost => (Reason::Lost, None, None),
        ExecutionOutcome::Cancelled { reason } if reason == "revoked" => {
            (Reason::Revoked, None, None)
        }
        ExecutionOutcome::Cancelled { .. } => (Reason::Closed, None, None),
        ExecutionOutcome::Failed { code, message } => {
            (Reason::Closed, None, Some((code.clone(), message.clone())))
        }
    };
    TermMsg::Finished {
        exec_id,
        reason,
        exit_code,
        error,
    }
}
