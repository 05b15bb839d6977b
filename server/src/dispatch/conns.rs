//! A connection's outgoing side as the dispatcher sees it: the connection's outbox, which
//! holds at most [`SEND_QUEUE`] frames for its writer (a frame for an idle socket is written
//! at once, from the dispatcher's thread, when nothing else waits for the dispatcher), and
//! what becomes of a reader that falls further behind than that: its connection is closed
//! with 1011.
//!
//! It never touches the socket itself: the outbox and the connection's writer do.

use std::sync::Arc;

use outpost_adapters::runtime::outbox::Outbox;

/// How many frames may wait for one connection's writer.
pub(crate) const SEND_QUEUE: usize = 256;

/// Close code: the server could not keep up with this connection (its reader fell behind).
const QUEUE_FULL: u16 = outpost_core::wire::close_code::INTERNAL_ERROR;

/// The reason sent with [`QUEUE_FULL`].
const QUEUE_FULL_REASON: &str = "send queue full";

/// Something to write on a connection.
#[derive(Debug)]
pub(crate) enum ToConn {
    /// One frame (one WebSocket text message).
    Frame(Vec<u8>),
    /// Close with this code and reason, then stop.
    Close(u16, String),
}

/// The dispatcher's (and the connection's reader's) handle on one connection's outbox.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    outbox: Arc<Outbox>,
}

/// A new connection's handle, its outbox empty and without a writer yet.
pub(crate) fn queue() -> ConnHandle {
    ConnHandle {
        outbox: Arc::new(Outbox::bounded(SEND_QUEUE)),
    }
}

impl ConnHandle {
    /// The outbox, for the connection's writer.
    pub(crate) fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Writes or queues `message` without waiting (written from this thread only when
    /// `at_once` and the socket is idle); false when the queue was full, in which case the
    /// connection is closed with 1011 before anything still queued.
    pub(crate) fn offer(&self, message: ToConn, at_once: bool) -> bool {
        match message {
            ToConn::Frame(bytes) => {
                let taken = if at_once {
                    self.outbox.send(bytes)
                } else {
                    self.outbox.queue(bytes)
                };
                if taken {
                    return true;
                }
                self.outbox
                    .close_first(QUEUE_FULL, QUEUE_FULL_REASON.into());
                false
            }
            ToConn::Close(code, reason) => {
                self.outbox.close(code, reason);
                true
            }
        }
    }
}
