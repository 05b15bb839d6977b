//! Every terminal session recorded as it is relayed: the terminals actor feeds each open
//! terminal's [`Recorder`] (core's asciicast v2 writer) with the runner's output, the sizes the
//! runner is told and, when the server keeps input, the keystrokes it is sent; what a feed
//! produced goes to one writer task, which appends it to the store in one transaction per
//! batch, at most every [`FLUSH_EVERY`] — a recording never makes the relay wait for a disk.
//!
//! A server killed mid-session loses at most the last [`FLUSH_EVERY`] of a recording; a
//! recording whose session was cut that way has no end time. This module owns the recorders'
//! settings and the writer; it never decides who may read a recording (the route does).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use outpost_core::executor::TerminalSize;
use outpost_core::terminal::cast::{CastHeader, Recorder};
use outpost_core::time::Now;
use tokio::sync::mpsc;

use crate::store::{RecordingAppend, RecordingEntry, Store};

/// The longest a recorded line waits before the writer stores it.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// How the server records terminal sessions (from its [`crate::Limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordingConfig {
    /// Keep what operators type too (off by default: keystrokes may hold passwords).
    pub(crate) record_input: bool,
    /// The most bytes one recording keeps; the rest is cut and the end is marked.
    pub(crate) limit: usize,
}

impl RecordingConfig {
    /// What `limits` say.
    pub(crate) fn from_limits(limits: &crate::Limits) -> Self {
        Self {
            record_input: limits.record_terminal_input,
            limit: limits.recording_bytes,
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
        tokio::spawn(writer(store, rx));
        Self { config, tx }
    }

    /// Starts recording terminal `exec_id` (its row is written with the next batch).
    pub(crate) fn begin(
        &self,
        now: Now,
        exec_id: &str,
        context_id: &str,
        context_name: &str,
        user: &str,
        size: TerminalSize,
    ) -> Recorder {
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
            records_input: self.config.record_input,
            truncated: false,
        }));
        Recorder::new(
            &header,
            now.instant,
            self.config.limit,
            self.config.record_input,
        )
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

/// Stores what arrives, a batch at a time: everything waiting is merged per recording and
/// written in one transaction, then the writer rests [`FLUSH_EVERY`] so that a busy terminal
/// costs a few commits a second, not one per output.
async fn writer(store: Arc<Store>, mut rx: mpsc::UnboundedReceiver<Write>) {
    while let Some(first) = rx.recv().await {
        let mut starts = Vec::new();
        let mut appends: Vec<RecordingAppend> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut take = |write: Write| match write {
            Write::Start(entry) => starts.push(entry),
            Write::Append(append) => match index.get(&append.exec_id) {
                Some(&i) => {
                    let into = &mut appends[i];
                    into.text.push_str(&append.text);
                    into.truncated |= append.truncated;
                    into.ended_at = append.ended_at.or(into.ended_at);
                }
                None => {
                    index.insert(append.exec_id.clone(), appends.len());
                    appends.push(append);
                }
            },
        };
        take(first);
        while let Ok(write) = rx.try_recv() {
            take(write);
        }
        let store = store.clone();
        let written = tokio::task::spawn_blocking(move || {
            for entry in &starts {
                store.start_recording(entry)?;
            }
            store.append_recordings(&appends)
        })
        .await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "cannot store terminal recordings"),
            Err(e) => tracing::error!(error = %e, "the recording writer's thread stopped"),
        }
        tokio::time::sleep(FLUSH_EVERY).await;
    }
}
