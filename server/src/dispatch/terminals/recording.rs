//! Every terminal session recorded as it is relayed: the terminals actor feeds each open
//! terminal's [`Recorder`] (core's asciicast v2 writer) with the runner's output, the sizes the
//! runner is told and, when the server keeps input, the keystrokes it is sent; what a feed
//! produced goes to one writer task, which appends it to the store in one transaction per
//! batch, at most every [`FLUSH_EVERY`] — a recording never makes the relay wait for a disk.
//!
//! A server killed mid-session loses what was not stored yet (about the last [`FLUSH_EVERY`]);
//! a recording whose session was cut that way has no end time. A server that stops on a signal
//! ends every open recording and waits for the writer ([`Recordings::drain`]) first. This module owns the recorders'
//! settings and the writer; it never decides who may read a recording (the route does).

use std::sync::Arc;
use std::time::Duration;

use outpost_core::executor::TerminalSize;
use outpost_core::terminal::cast::{CastHeader, Recorder};
use outpost_core::time::Now;
use tokio::sync::{mpsc, oneshot};

use crate::store::{RecordingAppend, RecordingEntry, Store};

/// The longest a recorded line waits before the writer stores it.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// How the server records terminal sessions (from its [`crate::Limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordingConfig {
    /// Keep what operators type too, on machines whose owner allows it (off by default:
    /// keystrokes may hold passwords).
    pub(crate) record_input: bool,
    /// The most bytes one recording keeps; the rest is cut and the end is marked.
    pub(crate) limit: usize,
    /// The node whose relay records (kept on each recording's row, so that another node's
    /// start never ends a recording this live node still writes).
    pub(crate) node_id: Option<String>,
}

impl RecordingConfig {
    /// What `limits` say.
    pub(crate) fn from_limits(limits: &crate::Limits) -> Self {
        Self {
            record_input: limits.record_terminal_input,
            limit: limits.recording_bytes,
            node_id: None,
        }
    }
}

/// One write for the writer task.
#[derive(Debug)]
pub(crate) enum Write {
    /// A session began: its row.
    Start(RecordingEntry),
    /// Lines (and perhaps its end) for a session.
    Append(RecordingAppend),
    /// Answer once everything sent before is stored (or given up on).
    Drain(oneshot::Sender<()>),
}

/// The handle the actor holds: starts recorders and hands their lines to the writer.
#[derive(Clone)]
pub(crate) struct Recordings {
    config: RecordingConfig,
    tx: mpsc::UnboundedSender<Write>,
}

impl Recordings {
    /// A handle whose writes `store` receives, through a writer task started here.
    pub(crate) fn start(config: RecordingConfig, store: Arc<Store>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(store, config.node_id.clone(), rx));
        Self { config, tx }
    }

    /// Starts recording terminal `exec_id` on the context `(id, name)` (its row is written with
    /// the next batch); keystrokes too when `owner_allows_input` and the server records input.
    pub(crate) fn begin(
        &self,
        now: Now,
        exec_id: &str,
        (context_id, context_name): (&str, &str),
        user: &str,
        size: TerminalSize,
        owner_allows_input: bool,
    ) -> Recorder {
        let record_input = self.config.record_input && owner_allows_input;
        let title = format!("{user} on {context_name}");
        let header = CastHeader::new(size.cols, size.rows, now.wall, Some(title));
        let _ = self.tx.send(Write::Start(RecordingEntry {
            exec_id: exec_id.to_owned(),
            context_id: context_id.to_owned(),
            context_name: context_name.to_owned(),
            opened_by: user.to_owned(),
            started_at: now.wall.0,
            ended_at: None,
            size: 0,
            records_input: record_input,
            truncated: false,
        }));
        Recorder::new(&header, now.instant, self.config.limit, record_input)
    }

    /// Waits until the writer has stored everything handed to it so far.
    pub(crate) async fn drain(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Write::Drain(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// Hands what `recorder` produced to the writer; with `ended_at`, the session's end.
    pub(crate) fn flush(&self, exec_id: &str, recorder: &mut Recorder, ended_at: Option<u64>) {
        if !recorder.has_pending() && ended_at.is_none() {
            return;
        }
        let _ = self.tx.send(Write::Append(RecordingAppend {
            exec_id: exec_id.to_owned(),
            text: recorder.take(),
            truncated: recorder.is_truncated(),
            ended_at,
        }));
    }
}

/// How many times a batch the store refused is tried before its lines are given up (each
/// try [`FLUSH_EVERY`] after the last, with whatever came meanwhile).
const TRIES: u32 = 5;

/// What waits to be stored: rows, then appends merged per recording.
#[derive(Default)]
struct Pending {
    starts: Vec<RecordingEntry>,
    appends: Vec<RecordingAppend>,
    drains: Vec<oneshot::Sender<()>>,
    failures: u32,
}

impl Pending {
    fn take(&mut self, write: Write) {
        match write {
            Write::Start(entry) => self.starts.push(entry),
            Write::Drain(done) => self.drains.push(done),
            Write::Append(append) => {
                match self
                    .appends
                    .iter_mut()
                    .find(|a| a.exec_id == append.exec_id)
                {
                    Some(into) => {
                        into.text.push_str(&append.text);
                        into.truncated |= append.truncated;
                        into.ended_at = append.ended_at.or(into.ended_at);
                    }
                    None => self.appends.push(append),
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.starts.is_empty() && self.appends.is_empty() && self.drains.is_empty()
    }
}

/// Stores what arrives, a batch at a time: everything waiting is merged per recording and
/// written in one transaction, then the writer rests [`FLUSH_EVERY`] so that a busy terminal
/// costs a few commits a second, not one per output. A batch the store refuses is kept and
/// tried again with the next one, [`TRIES`] times in all.
async fn writer(
    store: Arc<Store>,
    node_id: Option<String>,
    mut rx: mpsc::UnboundedReceiver<Write>,
) {
    let mut pending = Pending::default();
    loop {
        if pending.is_empty() {
            match rx.recv().await {
                Some(write) => pending.take(write),
                None => return,
            }
        }
        while let Ok(write) = rx.try_recv() {
            pending.take(write);
        }
        let (starts, appends) = (pending.starts.clone(), pending.appends.clone());
        let node_id = node_id.clone();
        let store = store.clone();
        let written = tokio::task::spawn_blocking(move || {
            store.write_recordings_on(node_id.as_deref(), &starts, &appends)
        })
        .await;
        let error = match written {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        pending.failures = if error.is_some() {
            pending.failures + 1
        } else {
            0
        };
        if let Some(error) = &error {
            tracing::error!(%error, tries = pending.failures, "cannot store terminal recordings");
        }
        if error.is_none() || pending.failures >= TRIES {
            let drains = std::mem::take(&mut pending.drains);
            pending = Pending::default();
            for done in drains {
                let _ = done.send(());
            }
        }
        tokio::time::sleep(FLUSH_EVERY).await;
    }
}
