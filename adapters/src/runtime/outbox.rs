//! The queue of messages a [`super::Link`] sends, and who writes them: the host's writer (a
//! task, or the blocking host's thread), or, on an async host whose socket is idle, the
//! sender itself.
//!
//! Writing a small frame from the driver's thread straight to an idle socket spares a wake-up
//! of the writer task (tens of microseconds on a busy machine, on every frame). It is only
//! ever one non-blocking attempt: whatever the socket does not take at once (the sink not
//! ready, a flush it could not finish) is left to the writer task, which the sender wakes, so
//! a sender never waits for the socket and nothing is lost or reordered. (It may wait for the
//! connection's lock while the reader takes a message out of it.) One writer at a time: a
//! message goes directly only when nothing is queued and nobody is writing, else it joins the
//! queue. A failed direct send stops the writer as a failed write of its own does.
//!
//! This module owns the order of outgoing messages and what a frame or a close looks like as a
//! WebSocket message. It never reads a socket and never decides when a connection closes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_util::Sink;
use outpost_core::wire::PtyOutputFrame;
use tungstenite::Message;
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;

/// The largest message a sender writes directly; a larger one goes to the writer, so that
/// encrypting and writing it never holds up the sender's thread.
pub(crate) const DIRECT_MAX: usize = 16 * 1024;

/// Something to send.
pub(crate) enum Out {
    /// One message's bytes (text when they are UTF-8 JSON).
    Send(Vec<u8>),
    /// A close with this code and reason; nothing is sent after it.
    Close(u16, String),
    /// Finish writing what a direct send left in the sink (the async writer only).
    Flush,
    /// A direct send failed: the writer stops, as after a failed write of its own (the async
    /// writer only).
    Failed,
}

/// The sending half of an async host's WebSocket, shared by its writer task and the senders
/// that write directly. The writer holds the lock for one poll at a time; a direct send, for
/// its one attempt.
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
    /// In the sink, not all flushed: the writer must flush.
    FlushOwed,
    /// The sink took nothing: the bytes go back to the front of the queue.
    NotReady(Vec<u8>),
    /// The sink refused the message or its flush: the writer stops.
    Failed,
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
            Poll::Ready(Err(_)) => return Direct::Failed,
            Poll::Pending => return Direct::NotReady(bytes),
        }
        if sink.as_mut().start_send(message_of(bytes)).is_err() {
            return Direct::Failed;
        }
        match sink.poll_flush(&mut cx) {
            Poll::Ready(Ok(())) => Direct::Written,
            Poll::Ready(Err(_)) => Direct::Failed,
            Poll::Pending => Direct::FlushOwed,
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
    /// sending directly. Nobody else may start until it is done. It stays set once the
    /// writer stopped.
    writing: bool,
    /// The async host's sink while its writer runs: a send may go straight to it.
    direct: Option<Arc<dyn DirectSink>>,
}

/// The queue of messages waiting to be written, shared by a [`super::Link`] and the task or
/// thread that writes them.
#[derive(Default)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Written one byte per queued item, so a thread waiting in `poll(2)` wakes at once (the
    /// blocking host); none for a task, which its waker wakes.
    notify: WakePipe,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `out`, or sends it at once when it is a small message, the socket idle and
    /// nothing queued (see the module docs).
    pub(crate) fn push(&self, out: Out) {
        let direct = {
            let mut q = self.lock();
            if q.shut {
                return;
            }
            let idle = !q.writing && q.items.is_empty();
            match (out, q.direct.clone(), q.waker.clone()) {
                (Out::Send(bytes), Some(sink), Some(waker))
                    if idle && bytes.len() <= DIRECT_MAX =>
                {
                    q.writing = true;
                    Some((bytes, sink, waker))
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
            Direct::Written => {
                tracing::trace!(target: "outpost::timeline", stage = "link.written");
                None
            }
            Direct::FlushOwed => Some(Out::Flush),
            Direct::NotReady(bytes) => Some(Out::Send(bytes)),
            Direct::Failed => Some(Out::Failed),
        };
        let mut q = self.lock();
        q.writing = false;
        // Before whatever was queued while this send wrote: it came first.
        if let Some(out) = left {
            q.items.push_front(out);
        }
        if (!q.items.is_empty() || q.shut)
            && let Some(w) = q.waker.take()
        {
            w.wake();
        }
    }

    /// Lets senders write to `sink` directly while the writer runs (the async host).
    pub(crate) fn write_directly_to(&self, sink: Arc<dyn DirectSink>) {
        self.lock().direct = Some(sink);
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

    /// Refuses further items and wakes the writer, which ends once it wrote what is queued;
    /// senders no longer write directly.
    pub(crate) fn shut(&self) {
        let mut q = self.lock();
        q.shut = true;
        q.direct = None;
        if let Some(w) = q.waker.take() {
            w.wake();
        }
    }

    /// The next item, once no sender writes directly; `None` once shut and drained. The
    /// writer owns the socket from then until [`Outbox::written`].
    async fn next(&self) -> Option<Out> {
        std::future::poll_fn(|cx| {
            let mut q = self.lock();
            if q.writing {
                // A sender writes directly: it wakes this writer when it is done.
            } else if let Some(out) = q.items.pop_front() {
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
        self.lock().writing = false;
    }

    /// The writer stopped: nothing is written directly any more, and the outbox lets its
    /// reference to the sink go.
    fn stopped(&self) {
        let mut q = self.lock();
        q.writing = true;
        q.direct = None;
    }
}

/// The async host's writer: writes what `outbox` queues to `sink` until the queue is shut and
/// drained, a close is written, or writing fails (its own write, or a sender's direct one).
/// What is already queued behind a message leaves with it: one flush (one write to the socket)
/// for all of them.
pub(crate) async fn write_queued<K>(outbox: &Outbox, sink: &SharedSink<K>)
where
    K: Sink<Message> + Unpin,
{
    write_until_stopped(outbox, sink).await;
    outbox.stopped();
}

async fn write_until_stopped<K>(outbox: &Outbox, sink: &SharedSink<K>)
where
    K: Sink<Message> + Unpin,
{
    while let Some(mut out) = outbox.next().await {
        loop {
            let (message, closes) = match out {
                Out::Send(bytes) => (Some(message_of(bytes)), false),
                Out::Close(code, reason) => (Some(close_message(code, reason)), true),
                Out::Flush => (None, false),
                Out::Failed => return,
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

/// A frame as a WebSocket message: JSON text (it starts with `{`) as a text message, the
/// binary `pty.output` and anything else not UTF-8 as a binary one.
pub(crate) fn message_of(bytes: Vec<u8>) -> Message {
    if PtyOutputFrame::is_binary(&bytes) {
        return Message::binary(bytes);
    }
    match String::from_utf8(bytes) {
        Ok(text) => Message::text(text),
        Err(e) => Message::binary(e.into_bytes()),
    }
}

/// The WebSocket close message with `code` and `reason`.
pub(crate) fn close_message(code: u16, reason: String) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    }))
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
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// What a [`Scripted`] sink refuses.
    #[derive(Default)]
    struct Refusals {
        /// Refuse every `n`th poll of each kind (0: none).
        every: usize,
        /// Refuse the next this many `poll_ready`s, then the next this many `poll_flush`es.
        ready: usize,
        flush: usize,
        /// Fail the next `start_send`.
        fail_send: bool,
        /// Run at the next `poll_ready`: another send arriving while one is written.
        meanwhile: Option<Box<dyn FnOnce() + Send>>,
    }

    /// A sink that reports each message once a flush took it (with whether a sender's own
    /// thread flushed it) and refuses as told (each refusal wakes its caller at once, as a
    /// socket that drained would).
    struct Scripted {
        refusals: Refusals,
        polls: [usize; 2],
        unflushed: Vec<Vec<u8>>,
        flushed: mpsc::Sender<(Vec<u8>, bool)>,
    }

    fn on_runtime() -> bool {
        tokio::runtime::Handle::try_current().is_ok()
    }

    impl Scripted {
        fn new(refusals: Refusals) -> (SharedSink<Self>, mpsc::Receiver<(Vec<u8>, bool)>) {
            let (flushed, arrived) = mpsc::channel();
            let sink = Scripted {
                refusals,
                polls: [0; 2],
                unflushed: Vec::new(),
                flushed,
            };
            (Arc::new(Mutex::new(sink)), arrived)
        }

        /// Whether this poll (`kind` 0: ready, 1: flush) is refused.
        fn refuses(&mut self, kind: usize, cx: &Context<'_>) -> bool {
            self.polls[kind] += 1;
            let once = if kind == 0 {
                &mut self.refusals.ready
            } else {
                &mut self.refusals.flush
            };
            let refused = if *once > 0 {
                *once -= 1;
                true
            } else {
                self.refusals.every > 0 && self.polls[kind].is_multiple_of(self.refusals.every)
            };
            if refused {
                cx.waker().wake_by_ref();
            }
            refused
        }
    }

    impl Sink<Message> for Scripted {
        type Error = ();
        fn poll_ready(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), ()>> {
            if let Some(arrive) = self.refusals.meanwhile.take() {
                arrive();
            }
            if self.refuses(0, cx) {
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        }
        fn start_send(mut self: std::pin::Pin<&mut Self>, item: Message) -> Result<(), ()> {
            if std::mem::take(&mut self.refusals.fail_send) {
                return Err(());
            }
            self.unflushed.push(item.into_data().to_vec());
            Ok(())
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), ()>> {
            if self.refuses(1, cx) {
                return Poll::Pending;
            }
            let by_sender = !on_runtime();
            for bytes in std::mem::take(&mut self.unflushed) {
                let _ = self.flushed.send((bytes, by_sender));
            }
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn send(outbox: &Outbox, text: &str) {
        outbox.push(Out::Send(text.as_bytes().to_vec()));
    }

    /// A fresh outbox whose writer runs on `runtime`, writing to a [`Scripted`] sink.
    struct Started {
        sink: SharedSink<Scripted>,
        arrived: mpsc::Receiver<(Vec<u8>, bool)>,
        outbox: Arc<Outbox>,
        writer: tokio::task::JoinHandle<()>,
    }

    /// A single-threaded runtime that runs the writer only when a test lets it, and a writer
    /// on it already parked, waiting for a message.
    fn parked_writer() -> (Arc<tokio::runtime::Runtime>, Started) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let started = start(&runtime, Refusals::default());
        runtime.block_on(tokio::task::yield_now());
        (Arc::new(runtime), started)
    }

    fn start(runtime: &tokio::runtime::Runtime, refusals: Refusals) -> Started {
        let (sink, arrived) = Scripted::new(refusals);
        let outbox = Arc::new(Outbox::default());
        outbox.write_directly_to(sink.clone());
        let writer = runtime.spawn({
            let (outbox, sink) = (outbox.clone(), sink.clone());
            async move { write_queued(&outbox, &sink).await }
        });
        Started {
            sink,
            arrived,
            outbox,
            writer,
        }
    }

    /// Each path on one thread, with a single-threaded runtime that runs the writer only when
    /// the test lets it: a send to an idle socket is flushed by the sender itself; a flush the
    /// socket refuses, a sink that is not ready and a large message are finished by the
    /// writer, in order; a failed send stops the writer, and nothing is written after it.
    #[test]
    fn each_path_of_a_send() {
        let (
            runtime,
            Started {
                sink,
                arrived,
                outbox,
                writer,
            },
        ) = parked_writer();
        let let_the_writer_run = || runtime.block_on(tokio::task::yield_now());
        send(&outbox, "direct");
        assert_eq!(arrived.try_recv(), Ok((b"direct".to_vec(), true)));
        // The socket takes the message, not its flush: the writer flushes it.
        sink.lock().unwrap().refusals.flush = 1;
        send(&outbox, "flush owed");
        send(&outbox, "queued behind it");
        assert!(arrived.try_recv().is_err(), "nothing flushed yet");
        let_the_writer_run();
        assert_eq!(arrived.try_recv(), Ok((b"flush owed".to_vec(), false)));
        assert_eq!(
            arrived.try_recv(),
            Ok((b"queued behind it".to_vec(), false))
        );
        // The sink is not ready: the bytes go to the writer, before what another sender
        // queued meanwhile and what follows.
        let other = outbox.clone();
        sink.lock().unwrap().refusals = Refusals {
            ready: 1,
            meanwhile: Some(Box::new(move || send(&other, "meanwhile"))),
            ..Refusals::default()
        };
        send(&outbox, "not ready");
        send(&outbox, &"x".repeat(DIRECT_MAX + 1));
        let_the_writer_run();
        assert_eq!(arrived.try_recv(), Ok((b"not ready".to_vec(), false)));
        assert_eq!(arrived.try_recv(), Ok((b"meanwhile".to_vec(), false)));
        let (large, by_sender) = arrived.try_recv().unwrap();
        assert_eq!((large.len(), by_sender), (DIRECT_MAX + 1, false));
        // Idle again: direct again.
        send(&outbox, "direct again");
        assert_eq!(arrived.try_recv(), Ok((b"direct again".to_vec(), true)));
        // A failed send stops the writer; what follows is not written.
        sink.lock().unwrap().refusals.fail_send = true;
        send(&outbox, "refused");
        send(&outbox, "after the failure");
        let_the_writer_run();
        assert!(writer.is_finished(), "the writer stops after a failed send");
        assert!(
            arrived.try_recv().is_err(),
            "nothing is written after a failure"
        );
        send(&outbox, "later");
        assert!(
            arrived.try_recv().is_err(),
            "nothing goes directly after the writer stopped"
        );
        assert_eq!(
            Arc::strong_count(&sink),
            1,
            "the stopped writer lets the sink go"
        );
    }

    /// A shut while a sender writes directly (the writer, woken by it, polls during the
    /// write): the writer waits for the sender, finishes the flush it left if it left one,
    /// then ends.
    #[test]
    fn a_shut_during_a_direct_send_lets_it_finish() {
        for flush_owed in [false, true] {
            let (runtime, started) = parked_writer();
            let Started {
                sink,
                arrived,
                outbox,
                writer,
            } = started;
            let (other, during) = (outbox.clone(), runtime.clone());
            sink.lock().unwrap().refusals = Refusals {
                flush: usize::from(flush_owed),
                meanwhile: Some(Box::new(move || {
                    other.shut();
                    during.block_on(tokio::task::yield_now());
                })),
                ..Refusals::default()
            };
            send(&outbox, "last");
            runtime.block_on(tokio::task::yield_now());
            let by_sender = !flush_owed;
            assert_eq!(arrived.try_recv(), Ok((b"last".to_vec(), by_sender)));
            assert!(
                writer.is_finished(),
                "the writer ends (flush owed: {flush_owed})"
            );
        }
    }

    /// Senders on several threads, a sink that refuses every third poll of each kind: every
    /// message is flushed once, in each sender's order, whichever thread wrote it (which
    /// path each took depends on the scheduling; `each_path_of_a_send` covers each).
    #[test]
    fn direct_and_queued_sends_keep_each_senders_order() {
        const SENDERS: usize = 4;
        const EACH: usize = 2_000;
        const WAIT: std::time::Duration = std::time::Duration::from_secs(20);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let Started {
            arrived,
            outbox,
            writer,
            ..
        } = start(
            &runtime,
            Refusals {
                every: 3,
                ..Refusals::default()
            },
        );
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let outbox = outbox.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        send(&outbox, &format!("{sender}:{i}"));
                    }
                })
            })
            .collect();
        let mut next = [0usize; SENDERS];
        for _ in 0..SENDERS * EACH {
            let (bytes, _) = arrived
                .recv_timeout(WAIT)
                .expect("every message is flushed");
            let text = String::from_utf8(bytes).unwrap();
            let (sender, i) = text.split_once(':').unwrap();
            let (sender, i): (usize, usize) = (sender.parse().unwrap(), i.parse().unwrap());
            assert_eq!(i, next[sender], "sender {sender}'s order");
            next[sender] += 1;
        }
        for sender in senders {
            sender.join().unwrap();
        }
        outbox.shut();
        runtime
            .block_on(async { tokio::time::timeout(WAIT, writer).await })
            .expect("the writer ends once shut")
            .unwrap();
        assert!(arrived.try_recv().is_err(), "nothing is flushed twice");
    }
}
