//! The HTTP API of PROTOCOL §11 on axum: one route table ([`routes`]) builds both the router
//! and the OpenAPI document, so the two cannot drift apart.
//!
//! Handlers parse and check what a client sent, ask the store and the dispatcher actor, and
//! answer; they never touch the core's state machines directly and never log a ticket or a
//! token.

mod access;
mod admin;
mod auth;
mod body;
mod bundles;
mod commands;
mod contexts;
mod error;
mod events;
mod executions;
mod extract;
mod forward;
mod joins;
mod machine;
pub(crate) mod nodes;
mod openapi;
mod output;
mod ratelimit;
mod recordings;
mod releases;
mod sharing;
mod terminals;
mod ui;
mod views;
mod waits;
mod ws;
mod xterm;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use axum::Router;
use axum::routing::MethodRouter;
use outpost_core::replay::ReplayGuard;
use outpost_core::server::Input;
use tokio::sync::{mpsc, oneshot};

use crate::dispatch::{Declined, Live, Msg, Shared};
pub(crate) use error::ApiError;
use openapi::RouteDoc;
use ratelimit::Limiter;
pub use ratelimit::{Rate, RateLimits};
pub(crate) use sharing::stale_records;

/// Everything the handlers share.
pub(crate) struct AppInner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tx: mpsc::Sender<Msg>,
    /// The key-set document served at `server-keys`.
    pub(crate) key_set: Vec<u8>,
    pub(crate) replay: Mutex<ReplayGuard>,
    pub(crate) by_address: Limiter,
    pub(crate) by_context: Limiter,
    pub(crate) next_conn: AtomicU64,
    /// Held by a registration from its checks until it is stored.
    pub(crate) registering: tokio::sync::Mutex<()>,
    /// Held by a sharing change (share, opt-in, opt-out, removing a user) from reading a
    /// context's access to its new record being written, so two changes never race.
    pub(crate) access: tokio::sync::Mutex<()>,
    /// `https` with TLS, else `http`: the scheme signed URLs carry.
    pub(crate) scheme: &'static str,
    pub(crate) openapi: serde_json::Value,
    /// The folder of published daemon releases (`crate::releases`).
    pub(crate) releases: std::path::PathBuf,
    /// How often each daemon connection is pinged (the sessions' heartbeat).
    pub(crate) ping_every: std::time::Duration,
    /// The server's first join: new join tokens take its URL, root and pinned certificate.
    pub(crate) join: outpost_core::join::Join,
    /// Bundle uploads under way (at most `Limits::concurrent_uploads`).
    pub(crate) uploads: Arc<tokio::sync::Semaphore>,
    /// Bundle checks under way: one at a time.
    pub(crate) checks: tokio::sync::Semaphore,
    /// How many refused calls the audit took this minute ([`access`]).
    pub(crate) refusals: Mutex<access::RefusalBudget>,
    /// xterm.js for the web UI's terminal, read from the system's package.
    pub(crate) xterm: xterm::Xterm,
    /// This process as a node (`GET /v1/nodes`): its id, kept in the state folder across
    /// restarts, and its start.
    pub(crate) node: (String, u64),
    /// How the other nodes reach this one (its heartbeat writes it); `None` when they cannot.
    pub(crate) reach: Option<crate::store::NodeReach>,
}

/// The handlers' state.
#[derive(Clone)]
pub(crate) struct App(Arc<AppInner>);

impl Deref for App {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

/// The settings the handlers take from the server's configuration.
pub(crate) struct AppSettings {
    /// `https` with TLS, else `http`.
    pub(crate) scheme: &'static str,
    /// The folder of published daemon releases.
    pub(crate) releases: std::path::PathBuf,
    /// The limits on signed machine requests and connects.
    pub(crate) limits: RateLimits,
    /// How often each daemon connection is pinged.
    pub(crate) ping_every: std::time::Duration,
    /// The server's join with its first token: new join tokens take its URL, root and pin.
    pub(crate) join: outpost_core::join::Join,
    /// Where xterm.js is read from (none: Debian's `node-xterm` folder).
    pub(crate) xterm_dir: Option<std::path::PathBuf>,
    /// This node's id (the state folder's `node-id`).
    pub(crate) node_id: String,
    /// How the other nodes reach this one; `None` when they cannot.
    pub(crate) reach: Option<crate::store::NodeReach>,
}

impl App {
    /// Whether this node is cut off from its database (its heartbeat unwritten for
    /// [`nodes::CUT_OFF`]): it takes no daemon connection then.
    pub(crate) fn cut_off(&self) -> bool {
        *self.shared.cut_off.borrow()
    }

    /// Builds the state.
    pub(crate) fn new(
        shared: Arc<Shared>,
        tx: mpsc::Sender<Msg>,
        key_set: Vec<u8>,
        replay: ReplayGuard,
        settings: AppSettings,
    ) -> Self {
        let AppSettings {
            scheme,
            releases,
            limits,
            ping_every,
            join,
            xterm_dir,
            node_id,
            reach,
        } = settings;
        Self(Arc::new(AppInner {
            tx,
            key_set,
            replay: Mutex::new(replay),
            by_address: Limiter::new(limits.per_address),
            by_context: Limiter::new(limits.per_context),
            next_conn: AtomicU64::new(1),
            registering: tokio::sync::Mutex::new(()),
            access: tokio::sync::Mutex::new(()),
            scheme,
            openapi: openapi::document(&routes()),
            releases,
            ping_every,
            join,
            uploads: Arc::new(tokio::sync::Semaphore::new(
                shared.limits.concurrent_uploads,
            )),
            checks: tokio::sync::Semaphore::new(1),
            refusals: Mutex::default(),
            xterm: xterm::Xterm::new(xterm_dir),
            node: (node_id, crate::clock::wall_now().0),
            reach,
            shared,
        }))
    }

    /// 503 `unavailable`: the dispatcher stopped.
    pub(crate) fn gone() -> ApiError {
        ApiError::new(503, "unavailable", "the dispatcher is not running")
    }

    /// Feeds `input` to the dispatcher and waits until its records are written.
    pub(crate) async fn call(&self, input: Input) -> Result<(), ApiError> {
        self.call_with(input, None).await
    }

    /// As [`App::call`], with a new execution's listing row committed in the same
    /// transaction as the input's records (nothing is stored if the core refuses it).
    pub(crate) async fn call_with(
        &self,
        input: Input,
        listing: Option<crate::store::ExecutionEntry>,
    ) -> Result<(), ApiError> {
        let handover = crate::dispatch::OwnerRequest::of(&input);
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Input {
                input,
                reply: Some(reply),
                listing: listing.map(Box::new),
            })
            .await
            .map_err(|_| Self::gone())?;
        let answered = rx.await.map_err(|_| Self::gone())?;
        if let (Err(Declined::Elsewhere(_)), Some((context_id, request))) = (&answered, handover) {
            return self.ask_owner(&context_id, &request).await;
        }
        answered.map_err(|e| match e {
            Declined::Core(e) => ApiError::new(409, "dispatcher_refused", e),
            Declined::Elsewhere(id) => ApiError::owned_elsewhere(&id),
            Declined::Unstored => {
                let mut e = ApiError::new(
                    503,
                    "database_unavailable",
                    "the server's database did not confirm the request's records, and the server stopped to restart from them: it was not accepted; retry shortly (an execute may have been kept if the database failed after committing it: list your runs first)",
                );
                e.retry_after = Some(2);
                e
            }
            Declined::QueueFull(full) => {
                let mut e = ApiError::new(429, "queue_full", full.message);
                e.retry_after = Some(crate::Limits::QUEUE_FULL_RETRY_SECS);
                e
            }
        })
    }

    /// Asks the node that owns `context_id` to carry out `request`, and waits up to
    /// [`crate::dispatch::ANSWER_WAIT`] for its answer (its records committed by then), unless
    /// the request is one whose answer is not awaited.
    async fn ask_owner(
        &self,
        context_id: &str,
        request: &crate::dispatch::OwnerRequest,
    ) -> Result<(), ApiError> {
        let id = self.write_owner_request(context_id, request).await?;
        if !request.answer_awaited() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + crate::dispatch::ANSWER_WAIT;
        match self.owner_answer(&id, deadline).await? {
            Some((true, _)) => Ok(()),
            Some((false, why)) => Err(ApiError::new(409, "dispatcher_refused", why)),
            None => {
                let mut e = ApiError::new(
                    503,
                    "owner_unavailable",
                    format!(
                        "the node that owns context {context_id} did not carry the change out within {} s; it may still: read the context again before retrying",
                        crate::dispatch::ANSWER_WAIT.as_secs()
                    ),
                );
                e.retry_after = Some(2);
                Err(e)
            }
        }
    }

    /// Writes `request` for the node that owns `context_id` (announced to it); its id.
    async fn write_owner_request(
        &self,
        context_id: &str,
        request: &crate::dispatch::OwnerRequest,
    ) -> Result<String, ApiError> {
        let id = crate::secrets::new_id("orq_")?;
        let body = serde_json::to_string(request).map_err(ApiError::internal)?;
        let store = self.shared.store.clone();
        let (asked, context) = (id.clone(), context_id.to_owned());
        tokio::task::spawn_blocking(move || store.ask_owner(&asked, &context, &body))
            .await
            .map_err(ApiError::internal)??;
        Ok(id)
    }

    /// Owner request `id`'s answer, `(done, text)`, once the owner wrote it; `None` when it
    /// did not by `deadline`.
    async fn owner_answer(
        &self,
        id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Option<(bool, String)>, ApiError> {
        loop {
            let store = self.shared.store.clone();
            let asked = id.to_owned();
            let answer = tokio::task::spawn_blocking(move || store.owner_answer(&asked))
                .await
                .map_err(ApiError::internal)??;
            if answer.is_some() || tokio::time::Instant::now() >= deadline {
                return Ok(answer);
            }
            // The answer is a row another node writes: it is read again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The live state of these contexts.
    ///
    /// A machine whose daemon is connected to another node of a cluster is online as that
    /// node's last heartbeat listed it (its slots, drain, pause, features and `onlineSince`).
    pub(crate) async fn live(&self, ids: Vec<String>) -> Result<HashMap<String, Live>, ApiError> {
        let mut live = self.live_here(ids).await?;
        if live.values().all(|l| l.online) {
            return Ok(live);
        }
        let offline: Vec<String> = live
            .iter()
            .filter(|(_, l)| !l.online)
            .map(|(id, _)| id.clone())
            .collect();
        let store = self.shared.store.clone();
        let here = self.node.0.clone();
        let elsewhere = tokio::task::spawn_blocking(move || {
            store.sessions_of(&offline, &here, nodes::LIVE.as_millis() as u64)
        })
        .await
        .map_err(ApiError::internal)??;
        for (context_id, _, session) in elsewhere {
            let Ok(session) = serde_json::from_str::<outpost_core::api::NodeSession>(&session)
            else {
                continue;
            };
            if let Some(l) = live.get_mut(&context_id)
                && !l.online
            {
                *l = Live {
                    online: true,
                    slots_used: session.slots_used,
                    slots_total: session.slots_total,
                    features: session.features,
                    draining: session.draining,
                    paused: session.paused,
                    online_since: session.online_since,
                };
            }
        }
        Ok(live)
    }

    /// The live state of these contexts as this node's dispatcher knows it (a machine
    /// connected to another node is offline here).
    pub(crate) async fn live_here(
        &self,
        ids: Vec<String>,
    ) -> Result<HashMap<String, Live>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Live { ids, reply })
            .await
            .map_err(|_| Self::gone())?;
        rx.await.map_err(|_| Self::gone())
    }

    /// The machines whose daemon is connected to this node and ready, as the dispatcher
    /// knows them now: (id, name, live state), in id order.
    pub(crate) async fn sessions_here(&self) -> Result<Vec<(String, String, Live)>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Sessions { reply })
            .await
            .map_err(|_| Self::gone())?;
        rx.await.map_err(|_| Self::gone())
    }

    /// The run `run_id` if it is committed on a machine and not finished, as the
    /// dispatcher knows it now.
    pub(crate) async fn live_run(
        &self,
        run_id: String,
    ) -> Result<Option<outpost_core::server::LiveRun>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::LiveRun { run_id, reply })
            .await
            .map_err(|_| Self::gone())?;
        rx.await.map_err(|_| Self::gone())
    }
}

impl App {
    /// Asks `context_id`'s daemon something from afar and waits at most
    /// [`crate::Limits::CONTROL_ANSWER`] for its answer (the session answers at once for a
    /// daemon that cannot be asked). 504 `daemon_no_answer` when none came in time.
    pub(crate) async fn control(
        &self,
        context_id: String,
        order: outpost_core::session::ControlOrder,
    ) -> Result<outpost_core::session::ControlAnswer, ApiError> {
        let (reply, rx) = oneshot::channel();
        let asked = order.clone();
        self.tx
            .send(Msg::Control {
                context_id: context_id.clone(),
                order,
                reply,
            })
            .await
            .map_err(|_| Self::gone())?;
        let answer = match tokio::time::timeout(crate::Limits::CONTROL_ANSWER, rx).await {
            Ok(answer) => answer.map_err(|_| Self::gone())?,
            Err(_) => return Err(Self::no_answer()),
        };
        if !answer.from_daemon && answer.code == "context_owned_elsewhere" {
            // The daemon is connected to another node: that node asks it.
            return self.control_through_owner(&context_id, asked).await;
        }
        Ok(answer)
    }

    /// The daemon did not answer in time.
    fn no_answer() -> ApiError {
        ApiError::new(
            504,
            "daemon_no_answer",
            format!(
                "the daemon did not answer within {} s (its connection may have dropped); what it did, if anything, shows in its state and the audit",
                crate::Limits::CONTROL_ANSWER.as_secs()
            ),
        )
    }

    /// Asks the node that owns `context_id` to ask its daemon for `order`, and waits for the
    /// daemon's answer as that node writes it.
    async fn control_through_owner(
        &self,
        context_id: &str,
        order: outpost_core::session::ControlOrder,
    ) -> Result<outpost_core::session::ControlAnswer, ApiError> {
        let request = crate::dispatch::OwnerRequest::control(&order);
        let id = self.write_owner_request(context_id, &request).await?;
        // The owner waits as long for its daemon: a little more, for its write to land.
        let deadline = tokio::time::Instant::now()
            + crate::Limits::CONTROL_ANSWER
            + std::time::Duration::from_secs(5);
        match self.owner_answer(&id, deadline).await? {
            Some((true, text)) => {
                let shared: crate::dispatch::SharedControlAnswer =
                    serde_json::from_str(&text).map_err(ApiError::internal)?;
                Ok(shared.into_answer(order.control_id))
            }
            Some((false, _)) | None => Err(Self::no_answer()),
        }
    }

    /// Where the execution `exec_id` stands in a machine's queue, if it waits in one.
    pub(crate) async fn queue_place(
        &self,
        exec_id: &str,
    ) -> Result<Option<outpost_core::server::QueuePlace>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::QueuePlace {
                exec_id: exec_id.into(),
                reply,
            })
            .await
            .map_err(|_| Self::gone())?;
        rx.await.map_err(|_| Self::gone())
    }
}

/// One route: its documentation and its handler.
pub(crate) struct Route {
    pub(crate) doc: RouteDoc,
    pub(crate) handler: MethodRouter<App>,
}

fn route(doc: RouteDoc, handler: MethodRouter<App>) -> Route {
    Route { doc, handler }
}

/// Every route of the API.
pub(crate) fn routes() -> Vec<Route> {
    let mut all = Vec::new();
    all.extend(machine::routes());
    all.extend(executions::routes());
    all.extend(output::routes());
    all.extend(events::routes());
    all.extend(waits::routes());
    all.extend(bundles::routes());
    all.extend(releases::routes());
    all.extend(commands::routes());
    all.extend(contexts::routes());
    all.extend(sharing::routes());
    all.extend(joins::routes());
    all.extend(terminals::routes());
    all.extend(recordings::routes());
    all.extend(admin::routes());
    all
}

/// The router over [`routes`] and the web UI's pages (`ui`, not in the OpenAPI document: the
/// page is a client of the API), with JSON answers for unknown routes and methods.
pub(crate) fn router(app: App) -> Router {
    let mut router = Router::new();
    for r in routes() {
        router = router.route(r.doc.path, r.handler);
    }
    router
        .merge(ui::router())
        .fallback(|| async {
            ApiError::new(404, "not_found", "no such route; see /v1/openapi.json")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                405,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            access::account,
        ))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(app)
}

/// Every scope, for the admin user.
pub(crate) fn all_scopes() -> Vec<String> {
    auth::SCOPES.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod schema_tests;
