//! The notifications nodes of a cluster send each other through PostgreSQL (docs/CLUSTER.md
//! §3): one unpooled connection that `LISTEN`s on `outpost_handoffs` and `outpost_cancels`
//! (this node may have work in its inbox: the dispatcher reads it), `outpost_ends` (the
//! executions another node ended: the requests here that wait on one wake and read its row)
//! and `outpost_owners` (machines another node took: the dispatcher lets them go at once).
//!
//! It owns that connection and makes it again when it is lost (then the inbox is read at once,
//! since notifications sent meanwhile are gone). A notification is only ever a hint: it never
//! carries what it announces, and nothing is lost when one is — the heartbeat reads the inbox
//! every 2 s too.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

use crate::dispatch::{Msg, Shared};

/// How long a lost listening connection waits before it is made again.
const AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Listens until `stop` for the other nodes' notifications on the database at `url`.
pub(crate) async fn listen(
    url: String,
    dispatcher: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        match listen_once(&url, &dispatcher, &shared, &mut stop).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "the connection listening to the other nodes ended; it is made again")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(AGAIN_AFTER) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// One listening connection, until it is lost (an error) or `stop` (`Ok`).
async fn listen_once(
    url: &str,
    dispatcher: &mpsc::Sender<Msg>,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let (config, tls) = crate::store::db::bounded_config(url).map_err(|e| e.to_string())?;
    let (client, mut connection) = config
        .connect(tls.connector)
        .await
        .map_err(|e| e.to_string())?;
    let (heard, mut notices) = mpsc::unbounded_channel();
    // The connection is driven here: its messages are the notifications.
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if heard
                        .send((n.channel().to_owned(), n.payload().to_owned()))
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "the listening connection failed");
                    return;
                }
                None => return,
            }
        }
    });
    client
        .batch_execute(
            "LISTEN outpost_handoffs; LISTEN outpost_cancels; LISTEN outpost_ends; \
             LISTEN outpost_owners",
        )
        .await
        .map_err(|e| e.to_string())?;
    // Whatever was announced while nobody listened is in the inbox.
    let _ = dispatcher.try_send(Msg::Inbox);
    loop {
        let first = tokio::select! {
            notice = notices.recv() => notice,
            _ = stop.changed() => {
                driver.abort();
                return Ok(());
            }
        };
        let Some(first) = first else {
            return Err("the database closed the listening connection".to_owned());
        };
        // Everything already heard is handled at once: one inbox read for a burst.
        let mut inbox = false;
        let mut taken = Vec::new();
        let mut next = Some(first);
        while let Some((channel, payload)) = next.take() {
            match channel.as_str() {
                "outpost_ends" => {
                    for exec_id in payload.split(',').filter(|id| !id.is_empty()) {
                        // A live log this node kept for it (it ran here before it was handed
                        // elsewhere) ends too, or it would stay for ever.
                        shared.outputs.ended(exec_id);
                        // Its waiters here wake with nothing and read the row: an end
                        // another node committed, or this node's own when its notice
                        // comes before the dispatcher hands them the row it wrote.
                        shared.ends.ended(exec_id, None);
                    }
                }
                "outpost_owners" => taken.push(payload),
                _ => inbox = true,
            }
            next = notices.try_recv().ok();
        }
        if inbox {
            let _ = dispatcher.try_send(Msg::Inbox);
        }
        if !taken.is_empty() {
            let _ = dispatcher.try_send(Msg::Taken(taken));
        }
    }
}
