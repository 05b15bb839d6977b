//! The queue of messages a [`super::Link`] sends, and who writes them: the host's writer (a
//! task, or the blocking host's thread), or, on an async host whose socket is idle, the
//! sender itself.
//!
//! Writing a frame from the driver's thread straight to an idle socket spares a wake-up of the
//! writer task (tens of microseconds on a busy machine, on every frame). It is only ever a
//! non-blocking attempt: whatever the socket does not take at once (the sink not ready, a
//! flush it could not finish) is left to the writer task, which the socket wakes, so a sender
//! never waits and nothing is lost or reordered. One writer at a time: a message goes
//! directly only when nothing is queued and nobody is writing, else it joins the queue.
//!
//! This module owns the order of outgoing messages. It never reads a socket and never decides
//! when a connection closes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};

use futures_util::Sink;
use tungstenite::Message;

/// Something to send.
pub(crate) enum Out {
    /// One message's bytes (text when they are UTF-8 JSON).
    Send(Vec<u8>),
    /// A close with this code and reason; nothing is sent after it.
    Close(u16, String),
    /// Finish writing what a direct send left in the sink (the async writer only).
    Flush,
}

/// The sending half of an async host's WebSocket, shared by its writer task and the senders
/// that write directly. Each poll holds the lock for its own call only.
pub(crate) type SharedSink<K> = Arc<Mutex<K>>;

/// A sink a sender may write to directly: the [`SharedSink`] of any WebSocket sink.
pub(crate) trait DirectSink: Send + Sync {
    /// One non-blocking attempt to send `bytes` and flush them, polled with `waker` (the
    /// writer task's, so the socket wakes the writer when it can take more).
    fn try_send(&self, bytes: Vec<u8>, waker: &Waker) -> Direct;
}

/// How a direct send went.
pub(crate) enum Direct {
    /// Written and flushed.
    Written,
    /// In the sink, not all flushed (or the socket failed): the writer must flush.
    FlushOwed,
    /// The sink took nothing: the bytes go back to the front of the queue.
    NotReady(Vec<u8>),
}

impl<K> DirectSink for Mutex<K>
where
    K: Sink<Message> + Unpin + Send,
{
    fn try_send(&self, bytes: Vec<u8>, waker: &Waker) -> Direct {
        let mut cx = Context::from_waker(waker);
        let mut sink = self.lock().unwrap_or_else(|e| e.into_inner());
        let mut sink = std::pin::Pin::new(&mut *sink);
        match sink.as_mut().poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => {}
            // A failed socket is the writer's to find out (its flush fails and it stops).
            Poll::Ready(Err(_)) => return Direct::FlushOwed,
            Poll::Pending => return Direct::NotReady(bytes),
        }
        if sink
            .as_mut()
            .start_send(super::link::message_of(bytes))
            .is_err()
        {
            return Direct::FlushOwed;
        }
        match sink.poll_flush(&mut cx) {
            Poll::Ready(Ok(())) => Direct::Written,
            Poll::Ready(Err(_)) | Poll::Pending => Direct::FlushOwed,
        }
    }
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Out>,
    /// The async writer's waker while it waits for an item.
    waker: Option<Waker>,
    shut: bool,
    /// Someone writes to the socket now: the writer task with what it took, or a sender
    /// sending directly. Nobody else may start until it is done.
    writing: bool,
}

/// The queue of messages waiting to be written, shared by a [`super::Link`] and the task or
/// thread that writes them.
#[derive(Default)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Written one byte per queued item, so a thread waiting in `poll(2)` wakes at once (the
    /// blocking host); none for a task, which its waker wakes.
    notify: WakePipe,
    /// The async host's sink, once its writer runs: a send may go straight to it.
    direct: OnceLock<Arc<dyn DirectSink>>,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `out`, or sends it at once when it is a message, the socket idle and nothing
    /// queued (see the module docs).
    pub(crate) fn push(&self, out: Out) {
        let direct = {
            let mut q = self.lock();
            if q.shut {
                return;
            }
            let idle = !q.writing && q.items.is_empty();
            match (out, self.direct.get(), q.waker.as_ref()) {
                (Out::Send(bytes), Some(sink), Some(waker)) if idle => {
                    let waker = waker.clone();
                    q.writing = true;
                    Some((bytes, sink.clone(), waker))
                }
                (out, _, _) => {
                    q.items.push_back(out);
                    if let Some(w) = q.waker.take() {
                        w.wake();
                    }
                    None
                }
            }
        };
        let Some((bytes, sink, waker)) = direct else {
            self.notify.poke();
            return;
        };
        let left = match sink.try_send(bytes, &waker) {
            Direct::Written => {
                tracing::trace!(target: "outpost::timeline", stage = "link.written");
                None
            }
            Direct::FlushOwed => Some(Out::Flush),
            Direct::NotReady(bytes) => Some(Out::Send(bytes)),
        };
        let mut q = self.lock();
        q.writing = false;
        // Before whatever was queued while this send wrote: it came first.
        if let Some(out) = left {
            q.items.push_front(out);
        }
        if !q.items.is_empty()
            && let Some(w) = q.waker.take()
        {
            w.wake();
        }
    }

    /// Lets senders write to `sink` directly from now on (the async host, once its writer
    /// task runs).
    pub(crate) fn write_directly_to(&self, sink: Arc<dyn DirectSink>) {
        let _ = self.direct.set(sink);
    }

    /// Wakes `notify`'s peer on every queued item from now on.
    pub(crate) fn notify_with(&self, notify: std::os::unix::net::UnixStream) {
        self.notify.set(notify);
    }

    /// The next item without waiting: the blocking host polls between reads, and the async
    /// writer takes what queued up behind the item it writes.
    pub(crate) fn try_take(&self) -> Option<Out> {
        self.lock().items.pop_front()
    }

    /// Refuses further items and wakes the writer, which then ends.
    pub(crate) fn shut(&self) {
        let mut q = self.lock();
        q.shut = true;
        if let Some(w) = q.waker.take() {
            w.wake();
        }
    }

    /// The next item, once no sender writes directly; `None` once shut and empty. The
    /// writer owns the socket from then until [`Outbox::written`].
    pub(crate) async fn next(&self) -> Option<Out> {
        std::future::poll_fn(|cx| {
            let mut q = self.lock();
            if !q.writing
                && let Some(out) = q.items.pop_front()
            {
                q.writing = true;
                return Poll::Ready(Some(out));
            }
            if q.shut && q.items.is_empty() {
                return Poll::Ready(None);
            }
            q.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The writer flushed what it took: a sender may write directly again.
    pub(crate) fn written(&self) {
        self.lock().writing = false;
    }
}

/// The async host's writer: writes what `outbox` queues to `sink` until the queue is shut or
/// a close is written, or writing fails. What is already queued behind a message leaves with
/// it: one flush (one write to the socket) for all of them.
pub(crate) async fn write_queued<K>(outbox: &Outbox, sink: &SharedSink<K>)
where
    K: Sink<Message> + Unpin,
{
    while let Some(mut out) = outbox.next().await {
        loop {
            let (message, closes) = match out {
                Out::Send(bytes) => (Some(super::link::message_of(bytes)), false),
                Out::Close(code, reason) => (Some(super::link::close_message(code, reason)), true),
                Out::Flush => (None, false),
            };
            if let Some(message) = message
                && feed(sink, message).await.is_err()
            {
                return;
            }
            if closes {
                let _ = flush(sink).await;
                return;
            }
            match outbox.try_take() {
                Some(next) => out = next,
                None => break,
            }
        }
        if flush(sink).await.is_err() {
            return;
        }
        tracing::trace!(target: "outpost::timeline", stage = "link.written");
        outbox.written();
    }
}

/// Sends `message` into the shared sink (without flushing), locking it for each poll only.
async fn feed<K>(sink: &SharedSink<K>, message: Message) -> Result<(), ()>
where
    K: Sink<Message> + Unpin,
{
    let mut message = Some(message);
    std::future::poll_fn(|cx| {
        let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
        let mut sink = std::pin::Pin::new(&mut *sink);
        match sink.as_mut().poll_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
            Poll::Pending => return Poll::Pending,
        }
        let message = message.take().expect("polled again after it finished");
        Poll::Ready(sink.start_send(message).map_err(|_| ()))
    })
    .await
}

/// Flushes the shared sink, locking it for each poll only.
async fn flush<K>(sink: &SharedSink<K>) -> Result<(), ()>
where
    K: Sink<Message> + Unpin,
{
    std::future::poll_fn(|cx| {
        let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
        std::pin::Pin::new(&mut *sink)
            .poll_flush(cx)
            .map_err(|_| ())
    })
    .await
}

/// A blocking host's wake-up pipe: one byte written wakes its thread out of `poll(2)`.
#[derive(Default)]
pub(crate) struct WakePipe(Mutex<Option<std::os::unix::net::UnixStream>>);

impl WakePipe {
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
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A sink that refuses at times (each refusal wakes its caller at once, as a socket that
    /// drained would), records what it takes and by which thread, and reports each message.
    struct Flaky {
        polls: usize,
        taken: mpsc::Sender<(Vec<u8>, bool)>,
        refused_directly: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Flaky {
        /// Every third poll of a kind is refused.
        fn refuse(&mut self, cx: &Context<'_>) -> bool {
            self.polls += 1;
            if !self.polls.is_multiple_of(3) {
                return false;
            }
            if !on_runtime() {
                self.refused_directly
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            cx.waker().wake_by_ref();
            true
        }
    }

    fn on_runtime() -> bool {
        tokio::runtime::Handle::try_current().is_ok()
    }

    impl Sink<Message> for Flaky {
        type Error = std::convert::Infallible;
        fn poll_ready(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            if self.refuse(cx) {
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        }
        fn start_send(self: std::pin::Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
            let _ = self.taken.send((item.into_data().to_vec(), !on_runtime()));
            Ok(())
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            if self.refuse(cx) {
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Senders on several threads, a sink that refuses every third poll: every message
    /// arrives once, in each sender's order, some written by the senders themselves, some
    /// by the writer, and some direct attempts refused and left to the writer.
    #[test]
    fn direct_and_queued_sends_keep_each_senders_order() {
        const SENDERS: usize = 4;
        const EACH: usize = 2_000;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let (taken, arrived) = mpsc::channel();
        let refused_directly = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sink: SharedSink<Flaky> = Arc::new(Mutex::new(Flaky {
            polls: 0,
            taken,
            refused_directly: refused_directly.clone(),
        }));
        let outbox = Arc::new(Outbox::default());
        outbox.write_directly_to(sink.clone());
        let writer = runtime.spawn({
            let outbox = outbox.clone();
            async move { write_queued(&outbox, &sink).await }
        });
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let outbox = outbox.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        outbox.push(Out::Send(format!("{sender}:{i}").into_bytes()));
                    }
                })
            })
            .collect();
        let mut next = [0usize; SENDERS];
        let mut direct = 0;
        for _ in 0..SENDERS * EACH {
            let (bytes, by_sender) = arrived
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("every message arrives");
            let text = String::from_utf8(bytes).unwrap();
            let (sender, i) = text.split_once(':').unwrap();
            let (sender, i): (usize, usize) = (sender.parse().unwrap(), i.parse().unwrap());
            assert_eq!(i, next[sender], "sender {sender}'s order");
            next[sender] += 1;
            direct += usize::from(by_sender);
        }
        for sender in senders {
            sender.join().unwrap();
        }
        outbox.shut();
        runtime.block_on(writer).unwrap();
        assert!(arrived.try_recv().is_err(), "nothing arrives twice");
        let refused = refused_directly.load(std::sync::atomic::Ordering::Relaxed);
        assert!(direct > 0, "no message went directly");
        assert!(
            direct < SENDERS * EACH,
            "no message went through the writer"
        );
        assert!(refused > 0, "no direct attempt was refused");
    }
}
