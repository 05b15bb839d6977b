//! Live output of the executions running now: the dispatcher appends each `run.output` piece
//! its machines send, and any number of followers (`GET /v1/executions/{id}/output`) read
//! from their own cursor and sleep until there is more. A follower that reads slowly only
//! falls behind: the dispatcher never waits for one, and nothing is queued per follower.
//!
//! This module owns the held text (at most [`MAX_LIVE_BYTES`] per execution and
//! [`MAX_LIVE_TOTAL`] in all; what is over is left to the result) and each log's life: from
//! the first piece or follower to the end of its execution and of its last follower. It never
//! reads the store: the run's result is the record, and a follower finishes from it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use outpost_core::ids::ExecutionId;
use outpost_core::wire::OutputStream;
use tokio::sync::watch;

use crate::store::KeptOutput;

/// The most text held for one running execution, both streams together (1 MiB, what one
/// `run.result` can carry).
pub(crate) const MAX_LIVE_BYTES: usize = 1 << 20;

/// The most text held for all running executions together (256 MiB).
pub(crate) const MAX_LIVE_TOTAL: usize = 256 << 20;

/// The live logs, by execution id.
#[derive(Debug, Default)]
pub(crate) struct LiveOutputs {
    inner: Mutex<Logs>,
}

#[derive(Debug, Default)]
struct Logs {
    by_exec: HashMap<ExecutionId, Live>,
    /// Bytes of text held in all logs.
    held: usize,
}

#[derive(Debug)]
struct Live {
    log: LiveLog,
    /// Bumped on every change; followers wait on it.
    changed: watch::Sender<u64>,
}

/// One execution's output as its pieces arrived: each stream's text from its start, and the
/// order the pieces came in.
#[derive(Debug, Default)]
struct LiveLog {
    stdout: String,
    stderr: String,
    spans: Vec<Span>,
    /// A stream that missed a piece (the server restarted mid-run) takes no more: what
    /// follows the gap comes from the result.
    stalled: [bool; 2],
    /// The execution's end is committed.
    ended: bool,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    stream: OutputStream,
    start: usize,
    end: usize,
}

/// Where one follower is: how much of each stream it has, and the next span it looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Bytes of stdout's text the follower has.
    pub(crate) stdout: u64,
    /// Bytes of stderr's text the follower has.
    pub(crate) stderr: u64,
    next_span: usize,
}

impl Cursor {
    /// A follower that has `stdout` and `stderr` bytes of each stream already.
    pub(crate) fn at(stdout: u64, stderr: u64) -> Self {
        Self {
            stdout,
            stderr,
            next_span: 0,
        }
    }

    /// How much of `stream` the follower has.
    pub(crate) fn of(&self, stream: OutputStream) -> u64 {
        match stream {
            OutputStream::Stdout => self.stdout,
            OutputStream::Stderr => self.stderr,
        }
    }

    /// The follower now has `text` more of `stream`.
    pub(crate) fn advance(&mut self, stream: OutputStream, by: usize) {
        match stream {
            OutputStream::Stdout => self.stdout += by as u64,
            OutputStream::Stderr => self.stderr += by as u64,
        }
    }
}

/// What a follower read: pieces in arrival order, and whether the log's execution ended.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// `(stream, offset, text)` in the order they arrived.
    pub(crate) pieces: Vec<(OutputStream, u64, String)>,
    /// The end is committed: nothing more will be appended.
    pub(crate) ended: bool,
}

fn index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
    }
}

impl LiveLog {
    fn text(&self, stream: OutputStream) -> &str {
        match stream {
            OutputStream::Stdout => &self.stdout,
            OutputStream::Stderr => &self.stderr,
        }
    }

    fn len(&self) -> usize {
        self.stdout.len() + self.stderr.len()
    }
}

impl LiveOutputs {
    fn lock(&self) -> MutexGuard<'_, Logs> {
        // Every change keeps the log whole before it returns: nothing a panic could half-do.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A `run.output` piece of `exec_id`: appended where it continues its stream; a piece
    /// after a gap stalls the stream, text over the caps is dropped (the result has it).
    pub(crate) fn append(&self, exec_id: &str, stream: OutputStream, offset: u64, text: &str) {
        let mut logs = self.lock();
        let Logs { by_exec, held } = &mut *logs;
        let live = by_exec
            .entry(ExecutionId::new(exec_id))
            .or_insert_with(Live::new);
        let log = &mut live.log;
        if log.ended || log.stalled[index(stream)] {
            return;
        }
        let have = log.text(stream).len() as u64;
        let new = match offset.checked_sub(have) {
            // Starts where the stream stands: all of it is new.
            Some(0) => text,
            Some(_) => {
                log.stalled[index(stream)] = true;
                return;
            }
            // Overlaps what is held: only what goes past it.
            None => {
                let skip = usize::try_from(have - offset).unwrap_or(usize::MAX);
                match text.get(skip..) {
                    Some(rest) if !rest.is_empty() => rest,
                    _ => return,
                }
            }
        };
        let room = MAX_LIVE_BYTES
            .saturating_sub(log.len())
            .min(MAX_LIVE_TOTAL.saturating_sub(*held));
        if new.len() > room {
            log.stalled[index(stream)] = true;
            return;
        }
        let start = log.text(stream).len();
        match stream {
            OutputStream::Stdout => log.stdout.push_str(new),
            OutputStream::Stderr => log.stderr.push_str(new),
        }
        log.spans.push(Span {
            stream,
            start,
            end: start + new.len(),
        });
        *held += new.len();
        live.changed.send_modify(|v| *v += 1);
    }

    /// `exec_id`'s end is committed: its followers read what is held and then the result.
    /// The log goes once no follower holds it.
    pub(crate) fn ended(&self, exec_id: &str) {
        let mut logs = self.lock();
        let Some(live) = logs.by_exec.get_mut(exec_id) else {
            return;
        };
        live.log.ended = true;
        live.changed.send_modify(|v| *v += 1);
        if live.changed.receiver_count() == 0 {
            logs.remove(exec_id);
        }
    }

    /// A copy of what `exec_id`'s log holds, for an execution that ends without a result to
    /// carry it (cancelled, lost); `None` when it printed nothing.
    pub(crate) fn kept(&self, exec_id: &str) -> Option<KeptOutput> {
        let logs = self.lock();
        let log = &logs.by_exec.get(exec_id)?.log;
        let cut = log.stalled.iter().any(|s| *s);
        (log.len() > 0 || cut).then(|| KeptOutput {
            stdout: log.stdout.clone(),
            stderr: log.stderr.clone(),
            cut,
        })
    }

    /// Starts following `exec_id` (an empty log waits for its first piece).
    pub(crate) fn follow(&self, exec_id: &str) -> Follow<'_> {
        let rx = self
            .lock()
            .by_exec
            .entry(ExecutionId::new(exec_id))
            .or_insert_with(Live::new)
            .changed
            .subscribe();
        Follow {
            outputs: self,
            exec_id: ExecutionId::new(exec_id),
            rx: Some(rx),
        }
    }

    /// What `exec_id`'s log holds past `cursor`, moving the cursor on.
    fn read(&self, exec_id: &str, cursor: &mut Cursor) -> Read {
        let logs = self.lock();
        let Some(live) = logs.by_exec.get(exec_id) else {
            return Read {
                pieces: Vec::new(),
                ended: true,
            };
        };
        let log = &live.log;
        let mut pieces = Vec::new();
        for span in &log.spans[cursor.next_span.min(log.spans.len())..] {
            let have = usize::try_from(cursor.of(span.stream)).unwrap_or(usize::MAX);
            if span.end > have {
                let text = log.text(span.stream);
                let mut from = span.start.max(have);
                while !text.is_char_boundary(from) {
                    from += 1;
                }
                if from < span.end {
                    pieces.push((span.stream, from as u64, text[from..span.end].to_owned()));
                    cursor.advance(span.stream, span.end - have.min(span.end));
                }
            }
        }
        cursor.next_span = log.spans.len();
        Read {
            pieces,
            ended: log.ended,
        }
    }

    /// How many logs are held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let logs = self.lock();
        (logs.by_exec.len(), logs.held)
    }
}

impl Logs {
    fn remove(&mut self, exec_id: &str) {
        if let Some(live) = self.by_exec.remove(exec_id) {
            self.held -= live.log.len();
        }
    }
}

impl Live {
    fn new() -> Self {
        Self {
            log: LiveLog::default(),
            changed: watch::channel(0).0,
        }
    }
}

/// One follower of one execution's log; dropping it lets the log go once the execution
/// ended (or never wrote anything) and no one else follows.
#[derive(Debug)]
pub(crate) struct Follow<'a> {
    outputs: &'a LiveOutputs,
    exec_id: ExecutionId,
    rx: Option<watch::Receiver<u64>>,
}

impl Follow<'_> {
    /// What the log holds past `cursor` (see [`LiveOutputs::append`]).
    pub(crate) fn read(&mut self, cursor: &mut Cursor) -> Read {
        if let Some(rx) = self.rx.as_mut() {
            rx.mark_unchanged();
        }
        self.outputs.read(&self.exec_id, cursor)
    }

    /// Returns once the log changed since the last [`Follow::read`].
    pub(crate) async fn changed(&mut self) {
        match self.rx.as_mut() {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    // The log was dropped: nothing more comes; wait for the end instead.
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for Follow<'_> {
    fn drop(&mut self) {
        let mut logs = self.outputs.lock();
        drop(self.rx.take());
        let unused = logs.by_exec.get(&self.exec_id).is_some_and(|live| {
            live.changed.receiver_count() == 0 && (live.log.ended || live.log.spans.is_empty())
        });
        if unused {
            logs.remove(&self.exec_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutputStream::{Stderr, Stdout};

    #[tokio::test]
    async fn followers_read_in_order_from_their_own_cursor_and_the_log_goes_after_the_end() {
        let outputs = LiveOutputs::default();
        let mut early = outputs.follow("ex");
        outputs.append("ex", Stdout, 0, "ab");
        outputs.append("ex", Stderr, 0, "E");
        outputs.append("ex", Stdout, 2, "cd");
        let mut cursor = Cursor::default();
        let read = early.read(&mut cursor);
        let got: Vec<_> = read
            .pieces
            .iter()
            .map(|(s, o, t)| (*s, *o, t.as_str()))
            .collect();
        assert_eq!(
            got,
            [(Stdout, 0, "ab"), (Stderr, 0, "E"), (Stdout, 2, "cd")]
        );
        assert_eq!((cursor.stdout, cursor.stderr), (4, 1));
        // A late follower resuming from offsets gets only what it lacks.
        let mut late = outputs.follow("ex");
        let mut resumed = Cursor::at(3, 1);
        let read = late.read(&mut resumed);
        assert_eq!(read.pieces, [(Stdout, 3, "d".to_owned())]);
        // A repeated piece adds nothing; an overlapping one adds its new part.
        outputs.append("ex", Stdout, 2, "cdef");
        assert_eq!(
            early.read(&mut cursor).pieces,
            [(Stdout, 4, "ef".to_owned())]
        );
        tokio::time::timeout(std::time::Duration::from_secs(5), early.changed())
            .await
            .expect_err("nothing changed since the read");
        outputs.ended("ex");
        early.changed().await;
        assert!(early.read(&mut cursor).ended);
        drop(early);
        assert_eq!(outputs.held().0, 1, "the late follower still holds it");
        drop(late);
        assert_eq!(outputs.held(), (0, 0));
    }

    #[test]
    fn a_gap_stalls_its_stream_only_and_the_caps_hold() {
        let outputs = LiveOutputs::default();
        outputs.append("ex", Stdout, 5, "lost before");
        outputs.append("ex", Stdout, 16, "more");
        outputs.append("ex", Stderr, 0, "err");
        let mut follow = outputs.follow("ex");
        let read = follow.read(&mut Cursor::default());
        assert_eq!(read.pieces, [(Stderr, 0, "err".to_owned())]);
        let big = "x".repeat(MAX_LIVE_BYTES + 1);
        outputs.append("big", Stdout, 0, &big);
        assert_eq!(outputs.held().1, 3, "over the cap: left to the result");
        outputs.ended("big");
        drop(follow);
        outputs.ended("ex");
        assert_eq!(outputs.held(), (0, 0));
    }
}
