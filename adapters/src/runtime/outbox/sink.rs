//! The socket side of an [`super::Outbox`]: what a frame, a close and a ping look like as
//! messages of a given WebSocket library ([`Messages`]), and the sending half of a socket that
//! the writer task and direct senders share ([`SharedSink`]).
//!
//! It owns the one non-blocking attempt a direct send makes. It never queues and never
//! decides who writes.

use std::marker::PhantomData;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures_util::Sink;
use outpost_core::wire::PtyOutputFrame;
use tungstenite::Message;
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;

/// How one WebSocket library's messages are made: the daemon's hosts use tungstenite's
/// ([`Tungstenite`]), a server its framework's own.
pub trait Messages: 'static {
    /// The library's message type.
    type Message;
    /// The timeline stage traced (target `outpost::timeline`) when a write is flushed.
    const WRITTEN: &'static str;
    /// One frame's bytes as a message.
    fn frame(bytes: Vec<u8>) -> Self::Message;
    /// A close with `code` and `reason`.
    fn close(code: u16, reason: String) -> Self::Message;
    /// An empty ping.
    fn ping() -> Self::Message;
}

/// tungstenite's messages (the daemon's hosts): a JSON frame as text, the binary
/// `pty.output` and anything else not UTF-8 as binary.
pub(crate) struct Tungstenite;

impl Messages for Tungstenite {
    type Message = Message;
    const WRITTEN: &'static str = "link.written";

    fn frame(bytes: Vec<u8>) -> Message {
        if PtyOutputFrame::is_binary(&bytes) {
            return Message::binary(bytes);
        }
        match String::from_utf8(bytes) {
            Ok(text) => Message::text(text),
            Err(e) => Message::binary(e.into_bytes()),
        }
    }

    fn close(code: u16, reason: String) -> Message {
        Message::Close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        }))
    }

    fn ping() -> Message {
        Message::Ping(Default::default())
    }
}

/// The sending half of an async socket, shared by its writer task and the senders that write
/// to it directly. The writer holds the lock for one poll at a time; a direct send, for its
/// one attempt.
pub struct SharedSink<K, M> {
    sink: Mutex<K>,
    messages: PhantomData<fn() -> M>,
}

impl<K, M> SharedSink<K, M> {
    /// Shares `sink`, whose messages `M` makes.
    pub fn new(sink: K) -> Self {
        Self {
            sink: Mutex::new(sink),
            messages: PhantomData,
        }
    }

    /// The sink, for one poll (a panic in an earlier poll does not poison it: the writer
    /// stops after one anyway).
    pub(crate) fn lock(&self) -> MutexGuard<'_, K> {
        self.sink.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K, M> SharedSink<K, M>
where
    M: Messages,
    K: Sink<M::Message> + Unpin,
{
    /// Sends `message` into the sink (without flushing), locking it for each poll only.
    pub(crate) async fn feed(&self, message: M::Message) -> Result<(), ()> {
        let mut message = Some(message);
        std::future::poll_fn(|cx| {
            let mut sink = self.lock();
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

    /// Flushes the sink, locking it for each poll only.
    pub(crate) async fn flush(&self) -> Result<(), ()> {
        std::future::poll_fn(|cx| {
            std::pin::Pin::new(&mut *self.lock())
                .poll_flush(cx)
                .map_err(|_| ())
        })
        .await
    }

    /// Closes the sink (for a WebSocket: sends a close, or the answer to the peer's, if none
    /// went yet, and flushes), locking it for each poll only. Call it once the writer ended.
    pub async fn close(&self) -> Result<(), ()> {
        std::future::poll_fn(|cx| {
            std::pin::Pin::new(&mut *self.lock())
                .poll_close(cx)
                .map_err(|_| ())
        })
        .await
    }
}

/// A sink a sender may write to directly: a [`SharedSink`] of any WebSocket sink.
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

impl<K, M> DirectSink for SharedSink<K, M>
where
    M: Messages,
    K: Sink<M::Message> + Unpin + Send,
{
    fn try_send(&self, bytes: Vec<u8>, waker: &Waker) -> Direct {
        let mut cx = Context::from_waker(waker);
        let mut sink = self.lock();
        let mut sink = std::pin::Pin::new(&mut *sink);
        match sink.as_mut().poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return Direct::Failed,
            Poll::Pending => return Direct::NotReady(bytes),
        }
        if sink.as_mut().start_send(M::frame(bytes)).is_err() {
            return Direct::Failed;
        }
        match sink.poll_flush(&mut cx) {
            Poll::Ready(Ok(())) => {
                tracing::trace!(target: "outpost::timeline", stage = M::WRITTEN);
                Direct::Written
            }
            Poll::Ready(Err(_)) => Direct::Failed,
            Poll::Pending => Direct::FlushOwed,
        }
    }
}
