//! A connection's outgoing side as the dispatcher sees it: a bounded queue of frames and
//! closes, and a flag that tells the writer its reader fell too far behind.

use std::sync::Arc;

use tokio::sync::{Notify, mpsc};

/// How many messages may wait for one connection's writer.
pub(crate) const SEND_QUEUE: usize = 256;

/// Something to write on a connection.
#[derive(Debug)]
pub(crate) enum ToConn {
    /// One frame (one WebSocket text message).
    Frame(Vec<u8>),
    /// Close with this code and reason, then stop.
    Close(u16, String),
}

/// The dispatcher's handle on one connection's writer.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    tx: mpsc::Sender<ToConn>,
    overflow: Arc<Notify>,
}

/// The writer's end.
#[derive(Debug)]
pub(crate) struct ConnQueue {
    /// Messages to write, in order.
    pub(crate) rx: mpsc::Receiver<ToConn>,
    /// Fires when the queue overflowed: close the connection.
    pub(crate) overflow: Arc<Notify>,
}

/// A new connection's queue.
pub(crate) fn queue() -> (ConnHandle, ConnQueue) {
    let (tx, rx) = mpsc::channel(SEND_QUEUE);
    let overflow = Arc::new(Notify::new());
    (
        ConnHandle {
            tx,
            overflow: overflow.clone(),
        },
        ConnQueue { rx, overflow },
    )
}

impl ConnHandle {
    /// Queues `message` without waiting; false (and the writer told to close) when the
    /// queue is full.
    pub(crate) fn offer(&self, message: ToConn) -> bool {
        match self.tx.try_send(message) {
            Ok(()) => true,
            // The writer is gone: the connection is closing anyway.
            Err(mpsc::error::TrySendError::Closed(_)) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.overflow.notify_one();
                false
            }
        }
    }

    /// Queues `message`, waiting for room (the reader's own closes).
    pub(crate) async fn send(&self, message: ToConn) {
        let _ = self.tx.send(message).await;
    }
}
