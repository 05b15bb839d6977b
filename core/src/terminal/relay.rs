//! One terminal's relay between its runner (the daemon holding the run) and its viewers.
//!
//! The host feeds [`Input`]s with [`Relay::handle_input`] and drains [`Relay::poll_output`]
//! until [`Output::Wait`], which always comes last (the drain rule: with more than
//! [`MAX_QUEUED_OUTPUTS`] undrained outputs `handle_input` refuses with
//! [`RelayError::OutputBacklog`]).
//!
//! - Output from the runner goes into the [`Ring`] and to every viewer, untouched.
//! - A viewer that joins gets `ready`, then `replay` + the ring's replay + `live`, then live
//!   output.
//! - Until [`Input::RunnerStarted`] no runner holds the run, so what goes to the runner
//!   (keys, sizes, a hang-up) waits, in order, and is sent then: keys typed while the
//!   terminal starts are never lost. At most [`PENDING_KEYS_LIMIT`] bytes of keys wait; more
//!   are refused with `terminal_starting`.
//! - Keystrokes, resizes and `close` are taken from operators only; a watcher's are refused
//!   with `read_only_viewer` and nothing reaches the runner. The size is the last operator
//!   resize.
//! - Flow control: the runner may have [`RelayConfig::window`] bytes not yet credited. With no
//!   viewer the ring takes everything and credit comes back at once; with viewers credit
//!   follows the viewer that has drained the most, so the terminal is read as fast as its
//!   fastest viewer and a slow viewer holds back neither the terminal nor the others.
//! - The host queues each viewer's messages and reports with [`Input::ViewerWritten`] how many
//!   binary bytes its socket wrote; a viewer with more than [`RelayConfig::viewer_queue_limit`]
//!   unwritten bytes is dropped with `slow_viewer`.
//! - Every viewer session is audited when it starts and when it ends, however it ends; with no
//!   viewer for [`RelayConfig::idle_limit`] the terminal is closed.
//!
//! It never interprets live bytes, reads no clock and holds no socket.

use crate::ids::TerminalId;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::MAX_QUEUED_OUTPUTS;
use crate::executor::TerminalSize;
use crate::time::{Instant, NextWake, Now, UnixTime};

use super::io::{Input, Output, RelayConfig, RelayError};
use super::messages::{
    Audit, Left, Reason, Role, RunnerMessage, ViewerId, ViewerMessage, viewer_close,
};
use super::ring::Ring;

/// The most keystroke bytes that wait for the runner to hold the run.
pub const PENDING_KEYS_LIMIT: usize = 64 * 1024;

/// One joined viewer.
#[derive(Debug, Clone)]
struct Viewer {
    user: String,
    role: Role,
    started_at: UnixTime,
    /// Replay bytes queued and not yet written (written before any live byte).
    replay_unwritten: u64,
    /// Live bytes queued and not yet written.
    live_unwritten: u64,
}

impl Viewer {
    fn unwritten(&self) -> u64 {
        self.replay_unwritten + self.live_unwritten
    }
}

/// One terminal's relay. See the module docs.
#[derive(Debug)]
pub struct Relay {
    config: RelayConfig,
    terminal_id: TerminalId,
    now: Now,
    size: TerminalSize,
    ring: Ring,
    viewers: BTreeMap<ViewerId, Viewer>,
    outputs: VecDeque<Output>,
    /// Output bytes received from the runner in all.
    received: u64,
    /// Output bytes credited back in all.
    credited: u64,
    /// Since when no viewer has been joined; `None` while one is.
    idle_since: Option<Instant>,
    /// Why the terminal ended, once it has.
    ended: Option<Reason>,
    /// The program's exit code, once it exited.
    exit_code: Option<i32>,
    /// Messages for the runner held until it holds the run; `None` once it does.
    pending: Option<Vec<RunnerMessage>>,
}

impl Relay {
    /// A relay for a terminal just opened at `size`, with no viewer yet (the idle timer runs
    /// from `now`).
    pub fn new(
        config: RelayConfig,
        terminal_id: impl Into<TerminalId>,
        size: TerminalSize,
        now: Now,
    ) -> Self {
        let mut config = config;
        config.window = config.window.max(1);
        config.credit_batch = config.credit_batch.clamp(1, config.window);
        Self {
            config,
            terminal_id: terminal_id.into(),
            now,
            size,
            ring: Ring::new(),
            viewers: BTreeMap::new(),
            outputs: VecDeque::new(),
            received: 0,
            credited: 0,
            idle_since: Some(now.instant),
            ended: None,
            exit_code: None,
            pending: Some(Vec::new()),
        }
    }

    // ---- getters

    /// The terminal's id (its run id).
    pub fn terminal_id(&self) -> &str {
        &self.terminal_id
    }

    /// The terminal's size: the last operator resize.
    pub fn size(&self) -> TerminalSize {
        self.size
    }

    /// The ring of recent output.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// How many viewers are joined.
    pub fn viewer_count(&self) -> usize {
        self.viewers.len()
    }

    /// The joined viewers: id, user and role, by id.
    pub fn viewers(&self) -> impl Iterator<Item = (ViewerId, &str, Role)> {
        self.viewers
            .iter()
            .map(|(id, v)| (*id, v.user.as_str(), v.role))
    }

    /// A joined viewer's queued, unwritten bytes.
    pub fn unwritten(&self, viewer: ViewerId) -> Option<u64> {
        self.viewers.get(&viewer).map(Viewer::unwritten)
    }

    /// Output bytes the runner has sent and not had credited.
    pub fn uncredited(&self) -> u64 {
        self.received - self.credited
    }

    /// Whether a runner holds the run ([`Input::RunnerStarted`] came).
    pub fn runner_started(&self) -> bool {
        self.pending.is_none()
    }

    /// Why the terminal ended, once it has: then the relay only credits late output and
    /// turns joining viewers away, and the host may drop it once drained.
    pub fn ended(&self) -> Option<Reason> {
        self.ended
    }

    /// When the relay must next get [`Input::Timeout`], and why; `None` with no timer.
    pub fn poll_timeout(&self) -> Option<(Instant, &'static str)> {
        self.timers().timer()
    }

    // ---- handle

    /// Feeds one input at time `now`.
    pub fn handle_input(&mut self, now: Now, input: Input) -> Result<(), RelayError> {
        if self.outputs.len() > MAX_QUEUED_OUTPUTS {
            return Err(RelayError::OutputBacklog);
        }
        if now.instant < self.now.instant {
            return Err(RelayError::TimeWentBackwards);
        }
        self.now = now;
        match input {
            Input::Timeout => self.on_timeout(),
            Input::Output(bytes) => self.on_output(bytes),
            Input::ViewerJoined { viewer, user, role } => {
                if self.viewers.contains_key(&viewer) {
                    return Err(RelayError::DuplicateViewer(viewer));
                }
                self.on_join(viewer, user, role);
            }
            Input::ViewerLeft { viewer, why } => {
                let why = match why {
                    Left::Closed => Reason::Closed,
                    Left::Dropped => Reason::Dropped,
                };
                self.end_session(viewer, why, None);
            }
            Input::ViewerInput { viewer, bytes } => {
                if self.operator(viewer) && !bytes.is_empty() {
                    self.keys(viewer, bytes);
                }
            }
            Input::ViewerResize { viewer, cols, rows } => {
                if self.operator(viewer) {
                    self.resize(TerminalSize::clamped(cols, rows));
                }
            }
            Input::ViewerClose { viewer } => {
                if self.operator(viewer) {
                    self.send_to_runner(RunnerMessage::Close);
                    self.end(Reason::Closed, None, Some(viewer));
                }
            }
            Input::ViewerWritten { viewer, bytes } => self.on_written(viewer, bytes),
            Input::RunnerStarted => {
                for message in self.pending.take().unwrap_or_default() {
                    self.outputs.push_back(Output::ToRunner(message));
                }
            }
            Input::Exited { exit_code } => {
                if self.ended.is_none() {
                    self.end(Reason::Exited, exit_code, None);
                }
            }
            Input::Ended { reason } => {
                if self.ended.is_none() {
                    self.end(reason, None, None);
                }
            }
        }
        Ok(())
    }

    /// The next output; [`Output::Wait`] comes last.
    pub fn poll_output(&mut self) -> Output {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        let (until, reason) = self.timers().get();
        Output::Wait { until, reason }
    }

    fn timers(&self) -> NextWake {
        let mut wake = NextWake::idle(self.now.instant);
        if let (None, Some(since)) = (self.ended, self.idle_since) {
            wake.consider(since.saturating_add(self.config.idle_limit), "idle");
        }
        wake
    }

    fn on_timeout(&mut self) {
        if let Some((at, _)) = self.poll_timeout()
            && self.now.instant >= at
        {
            self.send_to_runner(RunnerMessage::Close);
            self.end(Reason::Idle, None, None);
        }
    }

    fn on_output(&mut self, bytes: Vec<u8>) {
        let n = bytes.len() as u64;
        self.received += n;
        if self.ended.is_some() {
            // Nobody reads it any more; keep the runner from blocking on its window.
            self.credit_all();
            return;
        }
        if n == 0 {
            return;
        }
        self.ring.push(&bytes);
        let chunk: Arc<[u8]> = bytes.into();
        let mut slow = Vec::new();
        for (&id, v) in &mut self.viewers {
            v.live_unwritten += n;
            self.outputs.push_back(Output::ToViewer {
                viewer: id,
                message: ViewerMessage::Bytes(chunk.clone()),
            });
            if v.unwritten() > self.config.viewer_queue_limit {
                slow.push(id);
            }
        }
        for id in slow {
            self.end_session(id, Reason::SlowViewer, Some(viewer_close::SLOW_VIEWER));
        }
        self.credit();
    }

    fn on_join(&mut self, viewer: ViewerId, user: String, role: Role) {
        if let Some(reason) = self.ended {
            self.tell(viewer, ViewerMessage::Closed { reason });
            self.outputs.push_back(Output::DropViewer {
                viewer,
                reason,
                close_code: viewer_close::TERMINAL_ENDED,
            });
            return;
        }
        self.tell(
            viewer,
            ViewerMessage::Ready {
                terminal_id: self.terminal_id.clone(),
                role,
                cols: self.size.cols,
                rows: self.size.rows,
            },
        );
        let replay = self.ring.replay();
        let len = replay.len();
        self.tell(viewer, ViewerMessage::Replay { bytes: len });
        if len > 0 {
            self.tell(viewer, ViewerMessage::Bytes(replay.into()));
        }
        self.tell(viewer, ViewerMessage::Live);
        self.outputs.push_back(Output::Audit(Audit::SessionStarted {
            viewer,
            user: user.clone(),
            role,
            at: self.now.wall,
        }));
        self.viewers.insert(
            viewer,
            Viewer {
                user,
                role,
                started_at: self.now.wall,
                replay_unwritten: len as u64,
                live_unwritten: 0,
            },
        );
        self.idle_since = None;
        // A viewer that just joined has drained everything live: it may be the fastest.
        self.credit();
    }

    fn on_written(&mut self, viewer: ViewerId, bytes: u64) {
        let Some(v) = self.viewers.get_mut(&viewer) else {
            return;
        };
        let from_replay = bytes.min(v.replay_unwritten);
        v.replay_unwritten -= from_replay;
        v.live_unwritten = v.live_unwritten.saturating_sub(bytes - from_replay);
        self.credit();
    }

    /// True when `viewer` is a joined operator; a joined watcher is told `read_only_viewer`.
    fn operator(&mut self, viewer: ViewerId) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match self.viewers.get(&viewer).map(|v| v.role) {
            Some(Role::Operator) => true,
            Some(Role::Watcher) => {
                self.tell(
                    viewer,
                    ViewerMessage::Error {
                        code: "read_only_viewer",
                        message: "this viewer may only watch the terminal".into(),
                    },
                );
                false
            }
            None => false,
        }
    }

    fn resize(&mut self, size: TerminalSize) {
        if size == self.size {
            return;
        }
        self.size = size;
        self.send_to_runner(RunnerMessage::Resize(size));
        let ids: Vec<ViewerId> = self.viewers.keys().copied().collect();
        for id in ids {
            self.tell(
                id,
                ViewerMessage::Resized {
                    cols: size.cols,
                    rows: size.rows,
                },
            );
        }
    }

    /// Sends `message` to the runner, or holds it until the runner holds the run.
    /// While held, a resize replaces one held just before it: only the last size matters.
    fn send_to_runner(&mut self, message: RunnerMessage) {
        match &mut self.pending {
            Some(pending) => {
                if let (RunnerMessage::Resize(_), Some(RunnerMessage::Resize(_))) =
                    (&message, pending.last())
                {
                    pending.pop();
                }
                pending.push(message);
            }
            None => self.outputs.push_back(Output::ToRunner(message)),
        }
    }

    /// An operator's keys: sent, held while the terminal starts, or refused when too many
    /// wait.
    fn keys(&mut self, viewer: ViewerId, bytes: Vec<u8>) {
        if let Some(pending) = &self.pending {
            let held: usize = pending
                .iter()
                .map(|m| match m {
                    RunnerMessage::Input(keys) => keys.len(),
                    _ => 0,
                })
                .sum();
            if held + bytes.len() > PENDING_KEYS_LIMIT {
                self.tell(
                    viewer,
                    ViewerMessage::Error {
                        code: "terminal_starting",
                        message: format!(
                            "the terminal is starting and already holds {PENDING_KEYS_LIMIT} \
                             bytes of keys: type again once it answers"
                        ),
                    },
                );
                return;
            }
        }
        self.send_to_runner(RunnerMessage::Input(bytes));
    }

    /// Gives back the credit the fastest viewer (or, with none, the ring) has freed, in
    /// batches unless the runner's window is used up.
    fn credit(&mut self) {
        let freed_to = self
            .viewers
            .values()
            .map(|v| self.received - v.live_unwritten.min(self.received))
            .max()
            .unwrap_or(self.received);
        let creditable = freed_to.saturating_sub(self.credited);
        if creditable == 0 {
            return;
        }
        let window_full = self.received - self.credited >= self.config.window;
        if creditable >= self.config.credit_batch || window_full {
            self.credited += creditable;
            self.outputs
                .push_back(Output::ToRunner(RunnerMessage::Credit(creditable)));
        }
    }

    fn credit_all(&mut self) {
        let creditable = self.received - self.credited;
        if creditable > 0 {
            self.credited = self.received;
            self.outputs
                .push_back(Output::ToRunner(RunnerMessage::Credit(creditable)));
        }
    }

    /// Ends one viewer's session: audit, and (when `close_code` is set) tell the viewer and
    /// ask the host to drop it. Nothing when it is not joined.
    fn end_session(&mut self, viewer: ViewerId, why: Reason, close_code: Option<u16>) {
        let Some(v) = self.viewers.remove(&viewer) else {
            return;
        };
        if let Some(close_code) = close_code {
            let message = match (why, close_code) {
                (Reason::Exited, _) => ViewerMessage::Exit {
                    exit_code: self.exit_code,
                },
                _ => ViewerMessage::Closed { reason: why },
            };
            self.tell(viewer, message);
            self.outputs.push_back(Output::DropViewer {
                viewer,
                reason: why,
                close_code,
            });
        }
        self.outputs.push_back(Output::Audit(Audit::SessionEnded {
            viewer,
            user: v.user,
            role: v.role,
            started_at: v.started_at,
            at: self.now.wall,
            why,
        }));
        if self.viewers.is_empty() {
            self.idle_since = Some(self.now.instant);
        }
        if self.ended.is_none() {
            self.credit();
        }
    }

    /// Ends the terminal: every viewer is told and dropped, then the terminal's end audited.
    /// `closer` (the operator who closed it) is closed with 1000, as on exit; the others with
    /// 4003.
    fn end(&mut self, reason: Reason, exit_code: Option<i32>, closer: Option<ViewerId>) {
        self.ended = Some(reason);
        self.exit_code = exit_code;
        let ids: Vec<ViewerId> = self.viewers.keys().copied().collect();
        for id in ids {
            let code = if reason == Reason::Exited || closer == Some(id) {
                viewer_close::NORMAL
            } else {
                viewer_close::TERMINAL_ENDED
            };
            self.end_session(id, reason, Some(code));
        }
        self.outputs.push_back(Output::Audit(Audit::TerminalClosed {
            at: self.now.wall,
            reason,
            exit_code,
        }));
        self.credit_all();
    }

    fn tell(&mut self, viewer: ViewerId, message: ViewerMessage) {
        self.outputs.push_back(Output::ToViewer { viewer, message });
    }
}
