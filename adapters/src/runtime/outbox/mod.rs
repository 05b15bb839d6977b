//! The queue of messages one WebSocket sends, and who writes them: the host's writer (a task,
//! or the blocking host's thread), or, on an async host whose socket is idle, the sender
//! itself. A daemon's [`super::Link`] sends through one, and so does the server's side of each
//! daemon's connection (over its framework's socket, through [`Messages`]).
//!
//! Writing a small frame from the driver's thread straight to an idle socket spares a wake-up
//! of the writer task (tens of microseconds on a busy machine, on every frame). It is only
//! ever one non-blocking attempt: whatever the socket does not take at once (the sink not
//! ready, a flush it could not finish) is left to the writer task, which the sender wakes, so
//! a sender never waits for the socket and nothing is lost or reordered. (It may wait for the
//! connection's lock while the reader takes a message out of it.) One writer at a time: a
//! message goes directly only when nothing is queued and nobody is writing, else it joins the
//! queue. A failed direct send stops the writer as a failed write of its own does. A bounded
//! outbox refuses a frame once its limit waits, so its owner can drop a peer that stopped
//! reading; [`Outbox::stalled`] tells a watchdog when a write has not moved.
//!
//! This module owns the order of outgoing messages and what a frame or a close looks like as a
//! WebSocket message. It never reads a socket and never decides when a connection closes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use futures_util::Sink;

mod sink;

pub(crate) use sink::Tungstenite;
use sink::{Direct, DirectSink};
pub use sink::{Messages, SharedSink};

/// The largest message a sender writes directly; a larger one goes to the writer, so that
/// encrypting and writing it never holds up the sender's thread.
pub(crate) const DIRECT_MAX: usize = 16 * 1024;

/// Something to send.
pub(crate) enum Out {
    /// One message's bytes (text when they are UTF-8 JSON).
    Send(Vec<u8>),
    /// A close with this code and reason; nothing is sent after it.
    Close(u16, String),
    /// A ping (the async writer only).
    Ping,
    /// Finish writing what a direct send left in the sink (the async writer only).
    Flush,
    /// A direct send failed: the writer stops, as after a failed write of its own (the async
    /// writer only).
    Failed,
}

struct Queue {
    items: VecDeque<Out>,
    /// How many frames (`Out::Send`) are queued now.
    frames: usize,
    /// How many frames may be queued at once.
    limit: usize,
    /// The async writer's waker while it waits for an item.
    waker: Option<Waker>,
    shut: bool,
    /// Someone writes to the socket now: the writer task with what it took, or a sender
    /// sending directly. Nobody else may start until it is done. It stays set once the
    /// writer stopped.
    writing: bool,
    /// The async host's sink while its writer runs: a send may go straight to it.
    direct: Option<Arc<dyn DirectSink>>,
    /// Counts the writes finished, so a watchdog sees whether writing moves.
    progress: u64,
    /// A close was queued, or the outbox shut: the connection is ending.
    ending: bool,
    /// Woken when `ending` is set.
    ending_waker: Option<Waker>,
}

impl Queue {
    fn new(limit: usize) -> Self {
        Self {
            items: VecDeque::new(),
            frames: 0,
            limit,
            waker: None,
            shut: false,
            writing: false,
            direct: None,
            progress: 0,
            ending: false,
            ending_waker: None,
        }
    }

    fn pop_front(&mut self) -> Option<Out> {
        let out = self.items.pop_front();
        if let Some(Out::Send(_)) = out {
            self.frames -= 1;
        }
        out
    }

    fn push(&mut self, out: Out, front: bool) {
        match out {
            Out::Send(_) => self.frames += 1,
            Out::Close(..) => self.end(),
            _ => {}
        }
        if front {
            self.items.push_front(out);
        } else {
            self.items.push_back(out);
        }
    }

    /// The connection is ending: wakes whoever waits for that.
    fn end(&mut self) {
        self.ending = true;
        if let Some(w) = self.ending_waker.take() {
            w.wake();
        }
    }

    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// The messages waiting to be written on one WebSocket, in order, and who may write them:
/// the host's writer (a task running [`write_queued`], or the blocking host's thread), or,
/// while the socket is idle, a sender itself (see the module docs).
pub struct Outbox {
    queue: Mutex<Queue>,
    /// Written one byte per queued item, so a thread waiting in `poll(2)` wakes at once (the
    /// blocking host); none for a task, which its waker wakes.
    notify: WakePipe,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::bounded(usize::MAX)
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.lock();
        f.debug_struct("Outbox")
            .field("queued", &q.items.len())
            .field("shut", &q.shut)
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox that holds at most `limit` frames waiting for the writer: a send beyond
    /// them is refused (closes and pings are not counted and always taken).
    pub fn bounded(limit: usize) -> Self {
        Self {
            queue: Mutex::new(Queue::new(limit)),
            notify: WakePipe::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends one frame: written at once from the caller's thread when it is small, the socket
    /// idle and nothing queued, else queued for the writer. False when it was refused because
    /// [`Outbox::bounded`]'s limit of frames is queued already (the caller decides what a
    /// reader that far behind deserves); true once shut (the frame is dropped: the connection
    /// is closing).
    pub fn send(&self, bytes: Vec<u8>) -> bool {
        self.push(Out::Send(bytes))
    }

    /// [`Outbox::send`] without the direct write: always queued for the writer, which takes
    /// what queued up together in one write to the socket. For a sender with more to send
    /// soon (a server under load), to which fewer, larger writes matter more than one
    /// wake-up.
    pub fn queue(&self, bytes: Vec<u8>) -> bool {
        self.push_with(Out::Send(bytes), false)
    }

    /// Queues a close after what is queued; nothing queued after it is written.
    pub fn close(&self, code: u16, reason: String) {
        self.push(Out::Close(code, reason));
    }

    /// Queues a ping after what is queued.
    pub fn ping(&self) {
        self.push(Out::Ping);
    }

    /// Closes before anything still queued (whose frames and pings are dropped now, not when
    /// the outbox goes) and shuts: for a reader too far behind, or a connection that must go
    /// now. What is being written now finishes first.
    pub fn close_first(&self, code: u16, reason: String) {
        let mut q = self.lock();
        if q.shut {
            return;
        }
        q.items
            .retain(|out| !matches!(out, Out::Send(_) | Out::Ping));
        q.frames = 0;
        q.push(Out::Close(code, reason), true);
        q.shut = true;
        q.direct = None;
        q.end();
        q.wake();
        drop(q);
        self.notify.poke();
    }

    /// Queues `out`, or sends it at once when it is a small message, the socket idle and
    /// nothing queued (see the module docs). False when a frame is refused because the queue
    /// holds its limit.
    pub(crate) fn push(&self, out: Out) -> bool {
        self.push_with(out, true)
    }

    /// [`Outbox::push`], written directly only when `may_write` allows it.
    fn push_with(&self, out: Out, may_write: bool) -> bool {
        let direct = {
            let mut q = self.lock();
            if q.shut {
                return true;
            }
            let idle = !q.writing && q.items.is_empty();
            match (out, q.direct.clone(), q.waker.clone()) {
                (Out::Send(bytes), Some(sink), Some(waker))
                    if may_write && idle && bytes.len() <= DIRECT_MAX =>
                {
                    q.writing = true;
                    Some((bytes, sink, waker))
                }
                (Out::Send(_), _, _) if q.frames >= q.limit => return false,
                (out, _, _) => {
                    q.push(out, false);
                    q.wake();
                    None
                }
            }
        };
        let Some((bytes, sink, waker)) = direct else {
            self.notify.poke();
            return true;
        };
        // A panic in the socket's layers must not leave `writing` set: it counts as a failure
        // (the writer stops, and the reader ends the connection; the panic itself is printed by
        // the panic hook).
        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sink.try_send(bytes, &waker)
        }))
        .unwrap_or_else(|_| {
            tracing::error!("writing to the socket panicked: the connection is dropped");
            Direct::Failed
        });
        let left = match sent {
            Direct::Written => None,
            Direct::FlushOwed => Some(Out::Flush),
            Direct::NotReady(bytes) => Some(Out::Send(bytes)),
            Direct::Failed => Some(Out::Failed),
        };
        let mut q = self.lock();
        q.writing = false;
        if !matches!(left, Some(Out::Send(_) | Out::Failed)) {
            q.progress += 1;
        }
        // Before whatever was queued while this send wrote: it came first.
        if let Some(out) = left {
            q.push(out, true);
        }
        if !q.items.is_empty() || q.shut {
            q.wake();
        }
        true
    }

    /// Lets senders write to `sink` directly while the writer runs (an async host).
    pub fn write_directly_to<K, M>(&self, sink: Arc<SharedSink<K, M>>)
    where
        M: Messages,
        K: Sink<M::Message> + Unpin + Send + 'static,
    {
        self.lock().direct = Some(sink);
    }

    /// Wakes `notify`'s peer on every queued item from now on.
    pub(crate) fn notify_with(&self, notify: std::os::unix::net::UnixStream) {
        self.notify.set(notify);
    }

    /// The next item without waiting: the blocking host polls between reads, and the async
    /// writer takes what queued up behind the item it writes.
    pub(crate) fn try_take(&self) -> Option<Out> {
        self.lock().pop_front()
    }

    /// Refuses further items and wakes the writer, which ends once it wrote what is queued;
    /// senders no longer write directly.
    pub fn shut(&self) {
        let mut q = self.lock();
        q.shut = true;
        q.direct = None;
        q.end();
        q.wake();
    }

    /// Returns once a close is queued or the outbox is shut: from then on the connection is
    /// ending, and a host gives up a writer that stops moving (a peer that stopped reading
    /// would hold it, and the connection, for as long as TCP keeps trying).
    pub async fn ending(&self) {
        std::future::poll_fn(|cx| {
            let mut q = self.lock();
            if q.ending {
                return Poll::Ready(());
            }
            q.ending_waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Whether writing is stuck: something was being written or waited to be both when this
    /// was last asked (with the same `last`) and now, and no write finished in between.
    /// Asked every so often by a watchdog, which drops a connection whose peer stopped
    /// reading: a write stuck for one period is seen within two.
    pub fn stalled(&self, last: &mut LastCheck) -> bool {
        let q = self.lock();
        let busy = q.writing || !q.items.is_empty();
        let stuck = busy && last.busy && q.progress == last.progress;
        *last = LastCheck {
            progress: q.progress,
            busy,
        };
        stuck
    }

    /// The next item, once no sender writes directly; `None` once shut and drained. The
    /// writer owns the socket from then until [`Outbox::written`].
    async fn next(&self) -> Option<Out> {
        std::future::poll_fn(|cx| {
            let mut q = self.lock();
            if q.writing {
                // A sender writes directly: it wakes this writer when it is done.
            } else if let Some(out) = q.pop_front() {
                q.writing = true;
                return Poll::Ready(Some(out));
            } else if q.shut {
                return Poll::Ready(None);
            }
            q.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The writer flushed what it took: a sender may write directly again.
    fn written(&self) {
        let mut q = self.lock();
        q.writing = false;
        q.progress += 1;
    }

    /// The writer stopped: nothing is written directly any more, and the outbox lets its
    /// reference to the sink go.
    fn stopped(&self) {
        let mut q = self.lock();
        q.writing = true;
        q.direct = None;
    }
}

/// What a watchdog saw at its last [`Outbox::stalled`]; start from the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct LastCheck {
    progress: u64,
    busy: bool,
}

/// Runs its function when dropped.
pub(crate) struct OnDrop<F: FnMut()>(pub(crate) F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// An async host's writer: writes what `outbox` queues to `sink` until the queue is shut and
/// drained, a close is written, or writing fails (its own write, or a sender's direct one).
/// What is already queued behind a message leaves with it: one flush (one write to the socket)
/// for all of them. Dropped unfinished, it stops the outbox's direct sends as well.
pub async fn write_queued<K, M>(outbox: &Outbox, sink: &SharedSink<K, M>)
where
    M: Messages,
    K: Sink<M::Message> + Unpin,
{
    let _stopped = OnDrop(|| outbox.stopped());
    write_until_stopped(outbox, sink).await;
}

async fn write_until_stopped<K, M>(outbox: &Outbox, sink: &SharedSink<K, M>)
where
    M: Messages,
    K: Sink<M::Message> + Unpin,
{
    while let Some(mut out) = outbox.next().await {
        loop {
            let (message, closes) = match out {
                Out::Send(bytes) => (Some(M::frame(bytes)), false),
                Out::Close(code, reason) => (Some(M::close(code, reason)), true),
                Out::Ping => (Some(M::ping()), false),
                Out::Flush => (None, false),
                Out::Failed => return,
            };
            if let Some(message) = message
                && sink.feed(message).await.is_err()
            {
                return;
            }
            if closes {
                let _ = sink.flush().await;
                return;
            }
            match outbox.try_take() {
                Some(next) => out = next,
                None => break,
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
        tracing::trace!(target: "outpost::timeline", stage = M::WRITTEN);
        outbox.written();
    }
}

/// A blocking host's wake-up pipe: one byte written wakes its thread out of `poll(2)`.
#[derive(Default)]
pub(crate) struct WakePipe(Mutex<Option<std::os::unix::net::UnixStream>>);

impl WakePipe {
    /// Makes [`WakePipe::poke`] write to `stream` from now on (until then it does nothing).
    pub(crate) fn set(&self, stream: std::os::unix::net::UnixStream) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream);
    }

    /// Non-blocking: a full pipe already holds a wake-up.
    pub(crate) fn poke(&self) {
        if let Some(stream) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            let _ = std::io::Write::write(stream, &[1]);
        }
    }
}

#[cfg(test)]
mod tests;
