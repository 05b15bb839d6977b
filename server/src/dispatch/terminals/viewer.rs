//! One viewer's WebSocket: binary messages are keystrokes, text messages a small typed
//! control (`resize`, `close`); what the relay queues for the viewer is written in order and
//! each terminal byte written is reported back, which is how the relay knows a slow viewer.
//!
//! It never interprets terminal bytes and never decides anything: roles, limits and drops are
//! the relay's.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::{SinkExt as _, StreamExt as _};
use outpost_core::terminal::{ViewerControl, ViewerMessage};
use tokio::sync::mpsc;

use super::{FromViewer, TermMsg, Terminals, ToViewer, ViewerTicket};

/// The largest message a viewer may send (keystrokes, a paste).
pub(crate) const VIEWER_MESSAGE_LIMIT: usize = 64 * 1024;

/// The longest one write may take before the viewer is treated as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Drives one upgraded viewer socket until either side closes it.
pub(crate) async fn drive(terminals: Terminals, socket: WebSocket, ticket: ViewerTicket) {
    let exec_id = ticket.exec_id.clone();
    let (out, mut queue) = mpsc::unbounded_channel();
    let Some(Some(viewer)) = terminals
        .ask(|reply| TermMsg::Join {
            ticket,
            out: out.clone(),
            reply,
        })
        .await
    else {
        let mut socket = socket;
        let closed = ViewerMessage::Closed {
            reason: outpost_core::terminal::Reason::Exited,
        };
        let _ = socket
            .send(Message::Text(closed.to_text().unwrap_or_default().into()))
            .await;
        let _ = socket
            .send(Message::Close(Some(CloseFrame {
                code: outpost_core::terminal::viewer_close::TERMINAL_ENDED,
                reason: "the terminal has ended".into(),
            })))
            .await;
        return;
    };
    let report = {
        let terminals = terminals.clone();
        let exec_id = exec_id.clone();
        move |event: FromViewer| {
            terminals.send(TermMsg::Viewer {
                exec_id: exec_id.clone(),
                viewer,
                event,
            });
        }
    };
    let (mut sink, mut stream) = socket.split();
    let writer_report = report.clone();
    let mut writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            let (message, written, last) = match message {
                ToViewer::Text(text) => (Message::Text(text.into()), 0, false),
                ToViewer::Bytes(bytes) => {
                    let n = bytes.len() as u64;
                    (Message::Binary(bytes.to_vec().into()), n, false)
                }
                ToViewer::Close(code, reason) => (
                    Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })),
                    0,
                    true,
                ),
            };
            match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await {
                Ok(Ok(())) => {
                    tracing::trace!(target: "outpost::timeline", stage = "viewer.written")
                }
                _ => return,
            }
            if written > 0 {
                writer_report(FromViewer::Written(written));
            }
            if last {
                return;
            }
        }
    });
    let mut closed = false;
    let mut writer_done = false;
    loop {
        let next = tokio::select! {
            m = stream.next() => m,
            _ = &mut writer => {
                writer_done = true;
                break;
            }
        };
        match next {
            Some(Ok(Message::Binary(bytes))) => {
                tracing::trace!(target: "outpost::timeline", stage = "viewer.read");
                report(FromViewer::Input(bytes.to_vec()))
            }
            Some(Ok(Message::Text(text))) => match ViewerControl::from_text(&text) {
                Ok(ViewerControl::Resize { cols, rows }) => {
                    report(FromViewer::Resize { cols, rows })
                }
                Ok(ViewerControl::Close) => report(FromViewer::Close),
                Err(message) => {
                    let refused = ViewerMessage::Error {
                        code: "invalid_message",
                        message,
                    };
                    let _ = out.send(ToViewer::Text(refused.to_text().unwrap_or_default()));
                }
            },
            Some(Ok(Message::Close(_))) => {
                closed = true;
                break;
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Err(_)) | None => break,
        }
    }
    report(FromViewer::Left { closed });
    // The relay forgets the viewer; the writer ends when its queue's last sender goes.
    drop(out);
    if !writer_done {
        let _ = tokio::time::timeout(WRITE_TIMEOUT, writer).await;
    }
}
