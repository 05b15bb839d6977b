//! This process as a node of the system (docs/CLUSTER.md §4): `GET /v1/nodes`, and the
//! heartbeat that keeps this node's row in the store — every [`HEARTBEAT`], stamped by the
//! database's clock, with the daemons connected here when they changed. Rows of other nodes are
//! read, never written, here; a node is listed while its heartbeat is at most [`LIVE`] old.
//!
//! A node whose heartbeat goes unwritten for [`CUT_OFF`] is cut off: it closes every daemon's
//! connection and takes none (503 `node_cut_off`) until a heartbeat is written again — other
//! nodes are about to judge it dead, and it may not keep speaking for machines it can no
//! longer record anything for.
//!
//! It never decides who owns a machine: that is the fencing of CLUSTER.md §2.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::IntoResponse;
use tokio::sync::watch;

use super::auth::{self, ADMIN};
use super::error::{ApiError, ApiResult};
use super::{App, views};
use crate::store::SessionsChange;

/// How often a node writes its heartbeat.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(2);

/// How old a heartbeat may be for its node to be listed (live).
pub(crate) const LIVE: Duration = crate::store::NODE_LIVE;

/// How long a node goes without writing its heartbeat before it cuts itself off: well before
/// [`LIVE`], so it has let its daemons go by the time other nodes judge it dead.
pub(crate) const CUT_OFF: Duration = Duration::from_secs(10);

/// Marks this node cut off: every daemon socket's writer closes it (none waits for the
/// dispatcher, which a hung database may hold), and no new one is taken.
fn cut_off(app: &App, since: tokio::time::Instant) {
    app.shared.cut_off.send_replace(true);
    tracing::warn!(
        unwritten_secs = since.elapsed().as_secs(),
        "this node's heartbeat went unwritten for {} s: it lets its daemons go and takes none until it is written again",
        CUT_OFF.as_secs()
    );
}

/// The daemons connected to this node now, as its dispatcher knows them (no read of the
/// store: a node with thousands of machines lists them every heartbeat).
async fn sessions_here(app: &App) -> Result<Vec<views::NodeSession>, ApiError> {
    let sessions = app.sessions_here().await?;
    Ok(sessions
        .into_iter()
        .map(|(id, name, l)| views::NodeSession {
            context_id: id.as_str().into(),
            name,
            slots_used: l.slots_used,
            slots_total: l.slots_total,
            draining: l.draining,
            paused: l.paused,
            features: l.features,
            online_since: l.online_since,
        })
        .collect())
}

/// `GET /v1/nodes`: this node (its sessions as they are now), then every other live node
/// (its sessions as of its last heartbeat, at most [`HEARTBEAT`] old).
pub(super) async fn list(State(app): State<App>, req: Request) -> ApiResult {
    auth::bearer(&app, req.headers(), ADMIN)?;
    let sessions = sessions_here(&app).await?;
    let (node_id, started_at) = app.node.clone();
    let others = app.shared.store.live_nodes(LIVE.as_millis() as u64)?;
    let mut nodes = vec![views::Node {
        node_id: node_id.clone(),
        url: app.join.url.clone(),
        node_url: app.reach.as_ref().map(|r| r.url.clone()),
        started_at,
        this: true,
        sessions,
    }];
    nodes.extend(
        others
            .into_iter()
            .filter(|row| row.id != node_id)
            .map(|row| views::Node {
                sessions: row
                    .sessions
                    .iter()
                    .filter_map(|s| serde_json::from_str(s).ok())
                    .collect(),
                node_id: row.id,
                url: row.url,
                node_url: row.reach.map(|r| r.url),
                started_at: row.started_at,
                this: false,
            }),
    );
    Ok(axum::Json(views::Nodes { nodes }).into_response())
}

/// How far a node has read a numbered table (the chains other nodes wrote, the owners'
/// table's changes): the number read up to at the last learning and at the one before (a
/// transaction may commit a number lower than one already read, so each read goes back one
/// learning; a chain or an owner row read twice changes nothing).
#[derive(Default, Clone, Copy)]
struct Mark {
    last: i64,
    before: i64,
}

impl Mark {
    /// One more learning read up to `newest` (`None`: nothing new).
    fn advance(&mut self, newest: Option<i64>) {
        self.before = self.last;
        self.last = newest.unwrap_or(self.last).max(self.last);
    }
}

/// Every how many learnings the whole owners' table is read again: what a late commit, a
/// node of an earlier version (which writes no change numbers) or a machine claimed before
/// its record was written slipped past is learnt within 30 s.
const OWNERS_READ_WHOLE_EVERY: u32 = 15;

/// How far a node has read what other nodes wrote.
struct Seen {
    chains: Mark,
    owners: Mark,
    /// Learnings since the whole owners' table was last read.
    learnings: u32,
}

impl Default for Seen {
    /// Nothing read yet: the first learning reads every owner row, those written before
    /// change numbers were kept (number 0) too.
    fn default() -> Self {
        Self {
            chains: Mark::default(),
            owners: Mark {
                last: -1,
                before: -1,
            },
            learnings: 0,
        }
    }
}

/// What a node learns from the database after each heartbeat (docs/CLUSTER.md §2, §4, §9):
/// the machines another node took since (let go here) or registered (known here as owned
/// elsewhere), read from the owner rows changed since the last learning; what nodes judged
/// dead own (taken here), read by node; and the chains set through other nodes.
async fn learn_from_the_others(app: &App, node_id: &str, seen: &mut Seen) {
    let store = app.shared.store.clone();
    let node = node_id.to_owned();
    let whole = seen.learnings.is_multiple_of(OWNERS_READ_WHOLE_EVERY);
    seen.learnings = seen.learnings.wrapping_add(1);
    let owners_after = if whole { -1 } else { seen.owners.before };
    let chains_after = seen.chains.before;
    let read = tokio::task::spawn_blocking(move || {
        let live = store.live_node_ids(LIVE.as_millis() as u64)?;
        Ok::<_, crate::store::StoreError>((
            store.context_owners_changed_since(owners_after)?,
            store.context_owners_not_of(&live)?,
            store.chains_written_since(chains_after, &node)?,
        ))
    })
    .await;
    match read {
        Ok(Ok(((owners, newest_owner), dead, chains))) => {
            let _ = app.tx.send(crate::dispatch::Msg::Owners(owners)).await;
            // What nodes judged dead by the database's clock own is taken here (of the live
            // nodes trying at once, one wins each).
            if !dead.is_empty() {
                let _ = app.tx.send(crate::dispatch::Msg::Dead(dead)).await;
            }
            // What other nodes handed here or asked to cancel, should a notification be lost.
            let _ = app.tx.send(crate::dispatch::Msg::Inbox).await;
            let newest = chains.iter().map(|(seq, ..)| *seq).max();
            if !chains.is_empty() {
                let chains = chains.into_iter().map(|(_, u, c)| (u, c)).collect();
                let _ = app.tx.send(crate::dispatch::Msg::Chains(chains)).await;
            }
            seen.chains.advance(newest);
            seen.owners.advance(Some(newest_owner));
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "what other nodes wrote was not read"),
        Err(e) => tracing::warn!(error = %e, "reading what other nodes wrote failed"),
    }
}

/// Each session as the rows of `node_sessions` hold it: by context id, as JSON.
fn by_context(sessions: &[outpost_core::api::NodeSession]) -> BTreeMap<String, String> {
    sessions
        .iter()
        .filter_map(|s| Some((s.context_id.to_string(), serde_json::to_string(s).ok()?)))
        .collect()
}

/// Writes this node's heartbeat every [`HEARTBEAT`] until `stop`, then removes its row, so
/// that no list shows a node that stopped.
pub(crate) async fn heartbeat(app: App, mut stop: watch::Receiver<bool>) {
    let (node_id, started_at) = app.node.clone();
    let url = app.join.url.clone();
    let store = app.shared.store.clone();
    let id = node_id.clone();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || store.forget_earlier_starts(&id)).await
    {
        tracing::warn!(error = %e, "an earlier start of this node stays listed for 15 s");
    }
    // The sessions last written, by context id: none at first (the start's own heartbeat
    // replaced what an earlier start left); `None` after a write that failed or a drift, so
    // that the next write replaces them all.
    let mut written: Option<BTreeMap<String, String>> = Some(BTreeMap::new());
    // What the beats learn runs beside them, one learning at a time: a dispatcher busy with
    // a storm of connects takes what it learnt late, and the heartbeat is written on time.
    let mut learning: Option<tokio::task::JoinHandle<Seen>> = None;
    let mut chains_seen = Some(Seen::default());
    // The store was just opened (and migrated): that counts as the last write.
    let mut last_written = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = stop.changed() => if changed.is_err() { break },
        }
        if *stop.borrow() {
            break;
        }
        // Everything this beat does races the cut-off: a database that hangs (it answers
        // nothing, and no connection bound has fired yet) cuts the node off on time.
        let due = tokio::time::sleep_until(last_written + CUT_OFF);
        tokio::pin!(due);
        // The heartbeat never waits long for the sessions: a dispatcher busy with a storm of
        // connects must not make its node look dead.
        let sessions = tokio::select! {
            listed = tokio::time::timeout(HEARTBEAT, sessions_here(&app)) => match listed {
                Ok(Ok(s)) => Some(by_context(&s)),
                // The dispatcher stopped or is busy: the heartbeat goes on, the sessions as
                // last written.
                Ok(Err(_)) | Err(_) => None,
            },
            () = &mut due, if !app.cut_off() => {
                cut_off(&app, last_written);
                None
            }
        };
        let changed = sessions
            .as_ref()
            .and_then(|now| SessionsChange::between(written.as_ref(), now));
        let expected = sessions.as_ref().or(written.as_ref()).map(BTreeMap::len);
        let store = app.shared.store.clone();
        let (id, at, reach) = (node_id.clone(), url.clone(), app.reach.clone());
        let write = tokio::task::spawn_blocking(move || {
            store.node_heartbeat(&id, &at, reach.as_ref(), started_at, changed.as_ref())
        });
        tokio::pin!(write);
        let wrote = loop {
            tokio::select! {
                wrote = &mut write => break wrote,
                () = &mut due, if !app.cut_off() => cut_off(&app, last_written),
            }
        };
        match wrote {
            Ok(Ok(rows)) => {
                last_written = tokio::time::Instant::now();
                if app.cut_off() {
                    app.shared.cut_off.send_replace(false);
                    tracing::info!(
                        "this node's heartbeat is written again: it takes daemons again"
                    );
                }
                if sessions.is_some() {
                    written = sessions;
                }
                if expected.is_some_and(|expected| expected != rows) {
                    // Another process of this node (an earlier start, paused and woken) wrote
                    // or removed some: the next write replaces them all.
                    tracing::warn!(
                        rows,
                        expected = expected.unwrap_or_default(),
                        "this node's session rows are not the ones it wrote; they are written whole again"
                    );
                    written = None;
                }
                if let Some(done) = learning.take_if(|task| task.is_finished()) {
                    // A learning that failed starts over: rows read twice change nothing.
                    chains_seen = Some(done.await.unwrap_or_default());
                }
                if let Some(mut seen) = chains_seen.take() {
                    let (app, node_id) = (app.clone(), node_id.clone());
                    learning = Some(tokio::spawn(async move {
                        learn_from_the_others(&app, &node_id, &mut seen).await;
                        seen
                    }));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "this node's heartbeat was not written");
                // The row may be gone by the next one: it is written whole then.
                written = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "this node's heartbeat task failed");
                written = None;
            }
        }
    }
    let store = app.shared.store.clone();
    let gone = tokio::task::spawn_blocking(move || store.forget_node(&node_id)).await;
    if !matches!(gone, Ok(Ok(()))) {
        tracing::warn!("this node's row was not removed; it ages out of the lists in 15 s");
    }
}
