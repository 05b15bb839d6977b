//! One WebSocket connection as the driver sees it: a [`Link`] to send on and close, and the
//! [`LinkEvent`]s it reports; plus the async half that moves messages for [`super::AsyncHost`].
//!
//! Reading is bounded: a host reads the next message only while the messages it delivered and
//! the consumer has not yet dropped ([`Inbound`]) hold less than [`MAX_UNREAD`] bytes. A slow
//! consumer therefore stops the reads, TCP pushes back on the peer, and the daemon's memory
//! stays bounded however fast the server sends.

use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use futures_util::StreamExt as _;
use tungstenite::Message;
use tungstenite::protocol::WebSocketConfig;

use super::outbox::{
    LastCheck, OnDrop, Out, Outbox, SharedSink, Tungstenite, WakePipe, write_queued,
};
use super::{EventFn, Runtime, redact, target_of};

/// The largest WebSocket message either side accepts (PROTOCOL §2: 1 MiB; larger is 1009):
/// the core's largest frame.
pub const MAX_MESSAGE_LEN: usize = outpost_core::wire::DEFAULT_MAX_FRAME_LEN;

/// The most bytes of delivered messages a consumer may hold before the host stops reading (the
/// bound is checked before each read, so at most this plus one message is held).
pub const MAX_UNREAD: usize = 4 * MAX_MESSAGE_LEN;

/// The close code for a message over [`MAX_MESSAGE_LEN`].
pub(crate) const MESSAGE_TOO_BIG: u16 = outpost_core::wire::close_code::MESSAGE_TOO_BIG;

/// How long a host waits, after it sent its close, for the peer to close too, before it drops
/// the connection: the closing handshake completes with a live peer and is bounded with a
/// dead one (a stopped server, a connection a NAT dropped).
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long connecting and the WebSocket handshake may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What happened on a WebSocket.
#[derive(Debug)]
pub enum LinkEvent {
    /// The handshake finished; send with this link.
    Opened(Link),
    /// Connecting or the handshake failed (the message names the cause).
    Failed(String),
    /// One message (text or binary) arrived; it counts against [`MAX_UNREAD`] until dropped.
    Message(Inbound),
    /// A ping or pong arrived (answered below the protocol): the peer is alive.
    Alive,
    /// The connection ended; `code` is the peer's close code, if it sent one.
    Closed {
        /// The close code the peer sent.
        code: Option<u16>,
    },
}

/// A received message. Its bytes count as unread — holding back the host's next reads once
/// [`MAX_UNREAD`] is reached — until it is dropped or [`Inbound::into_bytes`] takes them.
pub struct Inbound {
    bytes: Vec<u8>,
    /// What was counted as unread (the bytes may have been taken since).
    counted: usize,
    unread: Arc<Unread>,
}

impl Inbound {
    pub(crate) fn new(bytes: Vec<u8>, unread: &Arc<Unread>) -> Self {
        unread.add(bytes.len());
        Self {
            counted: bytes.len(),
            bytes,
            unread: unread.clone(),
        }
    }

    /// The bytes; the host may read on as if the message had been handled.
    pub fn into_bytes(mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

impl std::ops::Deref for Inbound {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        self.unread.release(self.counted);
    }
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inbound({} bytes)", self.bytes.len())
    }
}

#[derive(Default)]
struct UnreadState {
    bytes: usize,
    waker: Option<Waker>,
}

/// The bytes of one connection's delivered, not yet dropped messages, and who to wake when
/// they fall below [`MAX_UNREAD`]: the async reader's waker, or the blocking host's wake-up
/// pipe.
#[derive(Default)]
pub(crate) struct Unread {
    state: Mutex<UnreadState>,
    notify: WakePipe,
}

impl Unread {
    fn lock(&self) -> std::sync::MutexGuard<'_, UnreadState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, n: usize) {
        self.lock().bytes += n;
    }

    fn release(&self, n: usize) {
        let wake = {
            let mut s = self.lock();
            let was_full = s.bytes >= MAX_UNREAD;
            s.bytes = s.bytes.saturating_sub(n);
            if was_full && s.bytes < MAX_UNREAD {
                s.waker.take()
            } else {
                return;
            }
        };
        if let Some(w) = wake {
            w.wake();
        }
        self.notify.poke();
    }

    /// Whether the host may read the next message now.
    pub(crate) fn has_room(&self) -> bool {
        self.lock().bytes < MAX_UNREAD
    }

    /// Wakes `notify`'s peer when room appears (the blocking host).
    pub(crate) fn notify_with(&self, notify: std::os::unix::net::UnixStream) {
        self.notify.set(notify);
    }

    /// Waits until the host may read the next message (the async reader).
    async fn room(&self) {
        std::future::poll_fn(|cx| {
            let mut s = self.lock();
            if s.bytes < MAX_UNREAD {
                return Poll::Ready(());
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// The sending half of an open WebSocket. Cheap to clone; sends keep their order and never wait
/// for the socket.
#[derive(Clone)]
pub struct Link {
    pub(crate) outbox: Arc<Outbox>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Link")
    }
}

impl Link {
    pub(crate) fn new() -> Self {
        Self {
            outbox: Arc::new(Outbox::default()),
        }
    }

    /// Sends one message (as text when it is UTF-8 JSON, as binary otherwise): on an async host
    /// whose socket is idle, a small one is written from the caller's thread at once, else it
    /// is queued for the host's writer.
    pub fn send(&self, bytes: Vec<u8>) {
        self.outbox.push(Out::Send(bytes));
    }

    /// Queues a close with `code` after the messages queued before it; later sends are dropped.
    pub fn close(&self, code: u16, reason: &str) {
        self.outbox.push(Out::Close(code, reason.to_owned()));
    }
}

/// The WebSocket settings both hosts use.
pub(crate) fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .max_message_size(Some(MAX_MESSAGE_LEN))
        .max_frame_size(Some(MAX_MESSAGE_LEN))
}

/// Connects, shakes hands, then moves messages until the connection ends.
pub(crate) async fn drive_async(
    runtime: Arc<dyn Runtime>,
    url: String,
    tls: Arc<rustls::ClientConfig>,
    events: EventFn,
) {
    let target = match target_of(&url, tls) {
        Ok(t) => t,
        Err(e) => return events(LinkEvent::Failed(e)),
    };
    let opening = async {
        let io = runtime
            .connect(target.clone())
            .await
            .map_err(|e| format!("connecting to {}:{}: {e}", target.host, target.port))?;
        let io = SharedIo::new(io);
        async_tungstenite::client_async_with_config(url.as_str(), io.clone(), Some(ws_config()))
            .await
            .map(|(ws, _response)| (ws, io))
            .map_err(|e| format!("WebSocket handshake with {}: {e}", redact(&url)))
    };
    let (ws, io) = match first(Box::pin(opening), runtime.sleep(CONNECT_TIMEOUT)).await {
        Some(Ok(opened)) => opened,
        Some(Err(e)) => return events(LinkEvent::Failed(e)),
        None => {
            return events(LinkEvent::Failed(format!(
                "connecting to {}:{} and the WebSocket handshake took over {} s",
                target.host,
                target.port,
                CONNECT_TIMEOUT.as_secs()
            )));
        }
    };
    let link = Link::new();
    let outbox = link.outbox.clone();
    events(LinkEvent::Opened(link));
    // However this ends (a panic in the socket's layers included), the queue is shut and the
    // consumer hears that the connection closed, so it connects again.
    let mut ending = Ending {
        outbox: outbox.clone(),
        events: events.clone(),
        code: None,
    };
    let (sender, mut receiver) = ws.split();
    let sender = Arc::new(SharedSink::<_, Tungstenite>::new(sender));
    let writer_outbox = outbox.clone();
    let closed = Arc::new(Signal::default());
    let writer_closed = closed.clone();
    outbox.write_directly_to(sender.clone());
    let writer_runtime = runtime.clone();
    runtime.spawn(Box::pin(async move {
        // The close is out (or writing failed, or the writer panicked, or it was given up):
        // the reader now waits a bounded time for the peer's.
        let _closed = OnDrop(move || writer_closed.set());
        // Once the connection is ending (a close queued, or the reader gone), the writer is
        // given up when its writing has not moved for CLOSE_WAIT: a peer that stopped
        // reading does not hold the writer, and with it the socket and the reader waiting
        // for the close, for ever. A slow peer that still reads gets what is queued.
        let given_up = async {
            writer_outbox.ending().await;
            let mut last = LastCheck::default();
            writer_outbox.stalled(&mut last);
            loop {
                writer_runtime.sleep(CLOSE_WAIT).await;
                if writer_outbox.stalled(&mut last) {
                    return;
                }
            }
        };
        first(
            Box::pin(write_queued(&writer_outbox, &sender)),
            Box::pin(given_up),
        )
        .await;
    }));
    let unread = Arc::new(Unread::default());
    // Set once this side has sent its close: the peer has that long to close too.
    let mut close_deadline: Option<super::BoxFuture<()>> = None;
    loop {
        unread.room().await;
        let next = match close_deadline.as_mut() {
            None => match first(receiver.next(), closed.wait()).await {
                Some(next) => next,
                None => {
                    close_deadline = Some(runtime.sleep(CLOSE_WAIT));
                    continue;
                }
            },
            Some(deadline) => match first(receiver.next(), deadline.as_mut()).await {
                Some(next) => next,
                None => break, // The peer never answered the close: drop the connection.
            },
        };
        let Some(message) = next else {
            break;
        };
        match message {
            Ok(Message::Text(text)) => {
                tracing::trace!(target: "outpost::timeline", stage = "link.read");
                events(LinkEvent::Message(Inbound::new(
                    text.as_bytes().to_vec(),
                    &unread,
                )))
            }
            Ok(Message::Binary(bytes)) => {
                events(LinkEvent::Message(Inbound::new(bytes.to_vec(), &unread)))
            }
            Ok(Message::Close(frame)) => ending.code = frame.map(|f| u16::from(f.code)),
            Ok(Message::Ping(_) | Message::Pong(_)) => events(LinkEvent::Alive),
            Ok(Message::Frame(_)) => {}
            Err(tungstenite::Error::Capacity(_)) => {
                // A message over the limit: say so (1009) after what is queued, then read and
                // drop what the peer still sends until it closes (bounded), so the close
                // reaches it instead of a reset that discards it.
                outbox.push(Out::Close(MESSAGE_TOO_BIG, "message too big".into()));
                let _ = first(Box::pin(io.discard_to_end()), runtime.sleep(CLOSE_WAIT)).await;
                break;
            }
            Err(_) => break,
        }
    }
}

/// Shuts a connection's queue and reports [`LinkEvent::Closed`] when the connection's
/// reader ends, however it ends.
struct Ending {
    outbox: Arc<Outbox>,
    events: EventFn,
    /// The peer's close code, once it sent one.
    code: Option<u16>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        self.outbox.shut();
        (self.events)(LinkEvent::Closed { code: self.code });
    }
}

/// The output of whichever of `a` and `b` finishes first: `Some` for `a`, `None` for `b`.
async fn first<A, B>(a: A, b: B) -> Option<A::Output>
where
    A: std::future::Future + Unpin,
    B: std::future::Future + Unpin,
{
    match futures_util::future::select(a, b).await {
        futures_util::future::Either::Left((out, _)) => Some(out),
        futures_util::future::Either::Right(_) => None,
    }
}

/// A one-shot signal between the writer task and the reader.
#[derive(Default)]
struct Signal {
    state: Mutex<(bool, Option<Waker>)>,
}

impl Signal {
    fn set(&self) {
        let waker = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.0 = true;
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn wait(&self) -> impl std::future::Future<Output = ()> + Unpin + '_ {
        std::future::poll_fn(|cx| {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if s.0 {
                return Poll::Ready(());
            }
            s.1 = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

/// The connection's byte stream, shared between the WebSocket and the reader, which after a
/// message over the limit reads and drops the rest itself (tungstenite stops reading there).
/// Each poll holds the lock only for its own call.
#[derive(Clone)]
struct SharedIo(Arc<Mutex<super::IoBox>>);

impl SharedIo {
    fn new(io: super::IoBox) -> Self {
        Self(Arc::new(Mutex::new(io)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, super::IoBox> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads and drops bytes until the peer closes or the stream fails.
    async fn discard_to_end(&self) {
        let mut scratch = vec![0u8; 16 * 1024];
        loop {
            let read = std::future::poll_fn(|cx| {
                std::pin::Pin::new(&mut **self.lock()).poll_read(cx, &mut scratch)
            })
            .await;
            if !matches!(read, Ok(n) if n > 0) {
                return;
            }
        }
    }
}

impl futures_util::AsyncRead for SharedIo {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut **self.lock()).poll_read(cx, buf)
    }
}

impl futures_util::AsyncWrite for SharedIo {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut **self.lock()).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut **self.lock()).poll_flush(cx)
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut **self.lock()).poll_close(cx)
    }
}
