//! One daemon's WebSocket: each message one frame (§2). The reader feeds frames to the
//! dispatcher (waiting for room, so a fast sender is slowed, not buffered); the writer drains
//! the connection's bounded queue (what is queued together leaves in one write to the socket)
//! and closes with 1011 when the dispatcher found it full.
//! A message over 1 MiB is closed with 1009. The writer also pings the daemon every
//! heartbeat, so a daemon hears a live server even when no frame is due and notices a silent
//! one (PROTOCOL §3).
//!
//! It never interprets a frame and never logs the ticket it was opened with.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::{SinkExt as _, StreamExt as _};
use outpost_core::server::Input;
use outpost_core::session::ConnId;
use outpost_core::wire::DEFAULT_MAX_FRAME_LEN;

use super::App;
use crate::dispatch::{ConnHandle, Msg, ToConn};

/// What the socket reads at most before it gives up on a message: above the frame limit, so
/// an oversized frame is read far enough to be answered with 1009.
pub(crate) const READ_LIMIT: usize = 2 * DEFAULT_MAX_FRAME_LEN;

/// The socket's initial read buffer; it grows for a larger message.
pub(crate) const READ_BUFFER: usize = 4096;

/// The longest one write may take before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Close code: frame over the size limit.
const TOO_LARGE: u16 = outpost_core::wire::close_code::MESSAGE_TOO_BIG;
/// The reason sent with [`TOO_LARGE`].
const TOO_LARGE_REASON: &str = "frame too large";
/// Close code: the server could not keep up with this connection.
const QUEUE_FULL: u16 = outpost_core::wire::close_code::INTERNAL_ERROR;

/// How a daemon's socket is closed when this node is cut off from its database: it connects
/// again, to any node.
const GOING_AWAY: u16 = outpost_core::wire::close_code::GOING_AWAY;

/// The reason sent with [`GOING_AWAY`] when this node is cut off.
const CUT_OFF_REASON: &str = "this node cannot reach its database; connect again";

/// The WebSocket message for `out`, and whether it closes the connection.
fn message_of(out: ToConn) -> (Message, bool) {
    match out {
        ToConn::Frame(bytes) => {
            let text = String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            (Message::Text(text.into()), false)
        }
        ToConn::Close(code, reason) => (
            Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })),
            true,
        ),
    }
}

/// Drives one upgraded socket until either side closes it.
pub(crate) async fn drive(
    app: App,
    socket: WebSocket,
    conn: ConnId,
    context_id: String,
    ticket: String,
) {
    let (handle, mut queue) = crate::dispatch::conns_queue();
    let connect = Msg::Connect {
        context_id,
        conn,
        ticket,
        handle: handle.clone(),
    };
    if app.tx.send(connect).await.is_err() {
        return;
    }
    let (mut sink, mut stream) = socket.split();
    let ping_every = app.ping_every;
    // Set when this node is cut off from its database (already, for a connection that raced
    // the cut): the writer closes the socket itself.
    let mut cut_off = app.shared.cut_off.subscribe();
    let mut writer = tokio::spawn(async move {
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let first = tokio::select! {
                m = queue.rx.recv() => m,
                () = until_cut_off(&mut cut_off) => Some(ToConn::Close(GOING_AWAY, CUT_OFF_REASON.into())),
                () = queue.overflow.notified() => Some(ToConn::Close(QUEUE_FULL, "send queue full".into())),
                _ = ping.tick() => {
                    let sent = tokio::time::timeout(WRITE_TIMEOUT, sink.send(Message::Ping(Default::default()))).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        return;
                    }
                    continue;
                }
            };
            let Some(first) = first else {
                let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
                return;
            };
            // What is already queued behind the first message leaves with it: one flush (one
            // write to the socket) for all of them.
            let write = async {
                let (message, mut last) = message_of(first);
                sink.feed(message).await?;
                while !last && let Ok(next) = queue.rx.try_recv() {
                    let (message, closes) = message_of(next);
                    last = closes;
                    sink.feed(message).await?;
                }
                sink.flush().await?;
                tracing::trace!(target: "outpost::timeline", stage = "server.written");
                Ok::<bool, axum::Error>(last)
            };
            match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                Ok(Ok(false)) => {}
                _ => return,
            }
        }
    });
    let mut writer_done = false;
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = &mut writer => { writer_done = true; break; }
        };
        let bytes = match next {
            Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
            Some(Ok(Message::Binary(bytes))) => bytes.to_vec(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_))) | None => break,
            Some(Err(e)) => {
                // The socket refuses messages over READ_LIMIT itself.
                if over_limit(e) {
                    close(&handle, TOO_LARGE, TOO_LARGE_REASON).await;
                }
                break;
            }
        };
        if bytes.len() > DEFAULT_MAX_FRAME_LEN {
            close(&handle, TOO_LARGE, TOO_LARGE_REASON).await;
            break;
        }
        tracing::trace!(target: "outpost::timeline", stage = "server.read", frame = %outpost_core::wire::frame_label(&bytes));
        let input = Input::Frame { conn, bytes };
        if app
            .tx
            .send(Msg::Input {
                input,
                reply: None,
                listing: None,
            })
            .await
            .is_err()
        {
            break;
        }
    }
    drop(handle);
    let _ = app.tx.send(Msg::Disconnected { conn }).await;
    if !writer_done {
        let _ = tokio::time::timeout(WRITE_TIMEOUT, writer).await;
    }
}

/// Returns once this node is cut off (at once if it is already); never if the flag's sender
/// is gone (the server stops, and the socket with it).
async fn until_cut_off(cut_off: &mut tokio::sync::watch::Receiver<bool>) {
    let cut = cut_off.wait_for(|cut| *cut).await.is_ok();
    if !cut {
        std::future::pending::<()>().await;
    }
}

async fn close(handle: &ConnHandle, code: u16, reason: &str) {
    handle.send(ToConn::Close(code, reason.into())).await;
}

/// Whether the socket refused a message because it was over its read limit: axum's error
/// wraps the WebSocket library's own (tungstenite, in the version axum uses), whose
/// `Capacity` variant says so.
fn over_limit(e: axum::Error) -> bool {
    matches!(
        e.into_inner().downcast_ref::<axum_tungstenite::Error>(),
        Some(axum_tungstenite::Error::Capacity(_))
    )
}
