//! One daemon's WebSocket: each message one frame (§2). The reader feeds frames to the
//! dispatcher (waiting for room, so a fast sender is slowed, not buffered); the writer drains
//! the connection's bounded outbox (what is queued together leaves in one write to the
//! socket; a frame for an idle socket, when nothing else waits for the dispatcher, the
//! dispatcher writes itself), which closes with 1011 when the dispatcher finds it full. A
//! message over 1 MiB is closed with 1009. The writer also pings the daemon every heartbeat,
//! so a daemon hears a live server even when no frame is due and notices a silent one
//! (PROTOCOL §3), and drops a connection whose writing has stood still for 30 s (seen within
//! 60 s).
//!
//! It never interprets a frame and never logs the ticket it was opened with.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::StreamExt as _;
use outpost_adapters::runtime::outbox::{LastCheck, Messages, SharedSink, write_queued};
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

/// How long writing may stand still before the connection is dropped (checked this often,
/// so a stuck write is dropped 30–60 s after it stuck); also how long closing the socket and
/// the writer's end may take once the reader is done.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Close code: frame over the size limit.
const TOO_LARGE: u16 = outpost_core::wire::close_code::MESSAGE_TOO_BIG;
/// The reason sent with [`TOO_LARGE`].
const TOO_LARGE_REASON: &str = "frame too large";

/// How a daemon's socket is closed when this node is cut off from its database: it connects
/// again, to any node.
const GOING_AWAY: u16 = outpost_core::wire::close_code::GOING_AWAY;

/// The reason sent with [`GOING_AWAY`] when this node is cut off.
const CUT_OFF_REASON: &str = "this node cannot reach its database; connect again";

/// The server's WebSocket messages (axum's): every frame to a daemon is JSON text.
struct Axum;

impl Messages for Axum {
    type Message = Message;
    const WRITTEN: &'static str = "server.written";

    fn frame(bytes: Vec<u8>) -> Message {
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Message::Text(text.into())
    }

    fn close(code: u16, reason: String) -> Message {
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }))
    }

    fn ping() -> Message {
        Message::Ping(Default::default())
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
    let handle = crate::dispatch::conns_queue();
    let connect = Msg::Connect {
        context_id,
        conn,
        ticket,
        handle: handle.clone(),
    };
    if app.tx.send(connect).await.is_err() {
        return;
    }
    let (sink, mut stream) = socket.split();
    let sink = Arc::new(SharedSink::<_, Axum>::new(sink));
    let outbox = handle.outbox().clone();
    outbox.write_directly_to(sink.clone());
    let ping_every = app.ping_every;
    // Set when this node is cut off from its database (already, for a connection that raced
    // the cut): the writer closes the socket itself.
    let mut cut_off = app.shared.cut_off.subscribe();
    let mut writer = tokio::spawn(async move {
        // Pings, the cut-off's close, and the watchdog that drops a connection whose write
        // has not moved for WRITE_TIMEOUT (its peer stopped reading; seen within twice that):
        // ends only then.
        let chores = async {
            let start = tokio::time::Instant::now();
            let mut ping = tokio::time::interval_at(start + ping_every, ping_every);
            ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut watch = tokio::time::interval_at(start + WRITE_TIMEOUT, WRITE_TIMEOUT);
            // A missed tick must not make two checks in a row with no time to write between.
            watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut last, mut cut) = (LastCheck::default(), false);
            loop {
                tokio::select! {
                    () = until_cut_off(&mut cut_off), if !cut => {
                        cut = true;
                        outbox.close(GOING_AWAY, CUT_OFF_REASON.into());
                    }
                    _ = ping.tick() => outbox.ping(),
                    _ = watch.tick() => if outbox.stalled(&mut last) {
                        return;
                    },
                }
            }
        };
        tokio::select! {
            () = write_queued(&outbox, &sink) => {
                // Shut and drained, a close written, or a failed write: closing the sink
                // answers the peer's close, if it sent one, and flushes.
                let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
            }
            () = chores => {}
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
                    close(&handle, TOO_LARGE, TOO_LARGE_REASON);
                }
                break;
            }
        };
        if bytes.len() > DEFAULT_MAX_FRAME_LEN {
            close(&handle, TOO_LARGE, TOO_LARGE_REASON);
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
    let _ = app.tx.send(Msg::Disconnected { conn }).await;
    // The writer writes what is queued (a close, when this side closes), then ends.
    handle.outbox().shut();
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

fn close(handle: &ConnHandle, code: u16, reason: &str) {
    handle.offer(ToConn::Close(code, reason.into()), false);
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
