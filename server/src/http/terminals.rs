//! Terminal routes (§11.5): open a terminal on a context (a login shell, as a `pty` run on that
//! machine only), list the caller's open terminals, buy a viewer ticket, and the viewer
//! WebSocket itself.
//!
//! Only a context's operator opens a terminal on it (`pty_operator_only`); an admin may watch
//! one read-only. The routes decide who may do what and hand everything else to the
//! terminals actor; they never see a terminal's bytes and never log a ticket.

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts as _, Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use outpost_core::executor::TerminalSize;
use outpost_core::routing::{ExecuteTarget, Requester};
use outpost_core::server::{ExecuteRequest, Input};
use outpost_core::terminal::Role;
use outpost_core::wire::{CapabilitySource, Environment};

use super::auth::{self, EXECUTE, READ};
use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{Auth, Carries, api};
use super::{App, Route, body, forward, route, views};
use crate::clock::wall_now;
use crate::dispatch::terminals::viewer::{self, VIEWER_MESSAGE_LIMIT};
use crate::dispatch::terminals::{IssueRefused, TermMsg, TicketRefused};
use crate::secrets;
use crate::store::ExecutionEntry;

/// A terminal's lease: the longest a manifest may ask for.
const TERMINAL_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "POST",
                "/v1/execution-contexts/{context}/terminals",
                "Open a terminal (a login shell) on a context you operate",
            )
            .auth(Auth::Bearer(EXECUTE))
            .request::<crate::bodies::TerminalOpen>()
            .answer::<views::TerminalOpened>(201)
            .errors(&[
                (400, "invalid_body"),
                (404, "context_unknown"),
                (403, "pty_operator_only"),
                (409, "context_revoked"),
                (409, "context_offline"),
                (409, "context_owned_elsewhere"),
                (409, "environment_unavailable"),
                (502, "node_unreachable"),
                (429, "queue_full"),
                (503, "ticket_store_full"),
                (503, "random_unavailable"),
            ]),
            post(open),
        ),
        route(
            api("GET", "/v1/terminals", "The caller's open terminals")
                .auth(Auth::Bearer(READ))
                .answer::<views::Terminals>(200)
                .errors(&[(502, "node_unreachable"), (503, "database_unavailable")]),
            get(list),
        ),
        route(
            api(
                "POST",
                "/v1/terminals/{terminal}/tickets",
                "A single-use ticket to view a terminal",
            )
            .auth(Auth::Bearer(EXECUTE))
            .answer::<views::TerminalTicket>(201)
            .errors(&[
                (404, "terminal_unknown"),
                (502, "node_unreachable"),
                (503, "database_unavailable"),
                (503, "ticket_store_full"),
                (503, "random_unavailable"),
            ]),
            post(ticket),
        ),
        route(
            api(
                "GET",
                "/v1/terminals/{terminal}/connect",
                "The viewer WebSocket (with ?ticket=)",
            )
            .auth(Auth::Ticket)
            .query::<super::machine::TicketQuery>()
            .answer_raw(101, "switching to the WebSocket", Carries::Nothing)
            .errors(&[
                (401, "ticket_malformed"),
                (401, "ticket_invalid"),
                (401, "ticket_expired"),
                (400, "websocket_required"),
                (502, "node_unreachable"),
                (503, "database_unavailable"),
            ]),
            get(connect),
        ),
    ]
}

/// The built-in capability a terminal runs: the machine's login shell, interactive. It asks
/// to run unsandboxed (`confine: false`): the machine's owner decides — sandboxed like any
/// run under the default policy, a shell as the owner under `operator-may-opt-out` (a
/// terminal is only ever the operator's).
fn shell_manifest(size: TerminalSize) -> String {
    format!(
        "name: terminal\n\
         description: An interactive shell on this machine.\n\
         environment: pty\n\
         lifecycle: oneshot\n\
         entry: sh\n\
         confine: false\n\
         args: [\"-c\", \"exec \\\"${{SHELL:-$(command -v bash || echo /bin/sh)}}\\\" -i\"]\n\
         terminal: {{cols: {}, rows: {}}}\n\
         limits: {{timeout_ms: {TERMINAL_TIMEOUT_MS}}}\n",
        size.cols, size.rows
    )
}

async fn open(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let entry = super::contexts::lookup(&app, &caller, &given)?;
    if entry.operator != caller.user {
        return Err(ApiError::new(
            403,
            "pty_operator_only",
            "a terminal opens only on a machine you operate",
        ));
    }
    if entry.revoked {
        return Err(ApiError::new(
            409,
            "context_revoked",
            "the context is revoked",
        ));
    }
    // A terminal is relayed by the node its daemon is connected to: asked of another node of
    // a cluster, the request is carried to that one.
    let here = app.live_here(vec![entry.id.clone()]).await?;
    let online = |live: &std::collections::HashMap<String, crate::dispatch::Live>| {
        live.get(&entry.id).is_some_and(|l| l.online)
    };
    if !online(&here)
        && !forward::relayed(&app, req.headers())?
        && let Some(peer) = forward::holder(&app, &entry.id).await?
    {
        return forward::relay(&app, &peer, req).await;
    }
    if !online(&here) && online(&app.live(vec![entry.id.clone()]).await?) {
        return Err(ApiError::owned_elsewhere(&entry.id));
    }
    if !online(&here) {
        return Err(ApiError::new(
            409,
            "context_offline",
            format!(
                "{} is not connected; start its daemon and try again",
                entry.name
            ),
        ));
    }
    if !entry
        .environments
        .iter()
        .any(|e| e == Environment::Pty.as_str())
    {
        return Err(ApiError::new(
            409,
            "environment_unavailable",
            format!(
                "{}'s daemon has no terminal executor (no PTY on that machine, or an older daemon)",
                entry.name
            ),
        ));
    }
    let (parts, raw) = req.into_parts();
    let bytes = body::read_json(&parts.headers, raw).await?;
    let size = crate::bodies::decode_terminal_open(&bytes)?;
    let exec_id = secrets::new_ordered_id("ex_")?;
    let listing = ExecutionEntry {
        id: exec_id.clone(),
        user: caller.user.clone(),
        requested: Some(entry.name.clone()),
        status: outpost_core::server::ExecutionStatus::Pending,
        created_at: wall_now().0,
        // A terminal runs on this machine or not at all: named from the start, so that a
        // node its viewer's socket reaches first finds where it is at once.
        context_id: Some(entry.id.to_string()),
        context_name: Some(entry.name.clone()),
        ..ExecutionEntry::default()
    };
    let request = ExecuteRequest {
        exec_id: exec_id.as_str().into(),
        requester: Requester {
            user_id: caller.user.clone(),
        },
        target: ExecuteTarget::named(entry.id.clone()),
        environment: Environment::Pty,
        capability: CapabilitySource::Inline {
            manifest: shell_manifest(size),
            files: Vec::new(),
        },
        timeout_ms: TERMINAL_TIMEOUT_MS,
    };
    // The relay exists before the run can produce a byte.
    let owner_allows_input = here.get(&entry.id).is_some_and(|l| {
        l.features
            .iter()
            .any(|f| f == outpost_core::terminal::cast::FEATURE_RECORD_INPUT)
    });
    let records_input = app.shared.limits.record_terminal_input && owner_allows_input;
    app.shared.terminals.send(TermMsg::Open {
        exec_id: exec_id.as_str().into(),
        context_id: entry.id.clone(),
        context_name: entry.name.clone(),
        user: caller.user.clone(),
        size,
        record_input: owner_allows_input,
    });
    app.call_with(Input::Execute(Box::new(request)), Some(listing))
        .await?;
    let (ticket, role) = issue(&app, &exec_id, &caller.user, false).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(views::TerminalOpened {
            terminal_id: exec_id.into(),
            context: entry.name,
            context_id: entry.id.into(),
            ticket,
            role,
            expires_in_ms: crate::dispatch::terminals::TICKET_LIFETIME_MS,
            cols: size.cols,
            rows: size.rows,
            records_input,
        }),
    )
        .into_response())
}

async fn issue(
    app: &App,
    exec_id: &str,
    user: &str,
    may_watch: bool,
) -> Result<(String, Role), ApiError> {
    let issued = app
        .shared
        .terminals
        .ask(|reply| TermMsg::IssueTicket {
            exec_id: exec_id.into(),
            user: user.to_owned(),
            may_watch,
            reply,
        })
        .await
        .ok_or_else(App::gone)?;
    issued.map_err(|refused| match refused {
        IssueRefused::NoTerminal => ApiError::new(
            404,
            "terminal_unknown",
            format!("no open terminal {exec_id:?} of yours"),
        ),
        IssueRefused::StoreFull => ApiError::new(
            503,
            "ticket_store_full",
            "too many outstanding viewer tickets; retry shortly",
        ),
        IssueRefused::NoRandom(e) => e.into(),
    })
}

async fn list(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let open = app
        .shared
        .terminals
        .ask(|reply| TermMsg::List {
            user: caller.user.clone(),
            admin: caller.is_admin(),
            reply,
        })
        .await
        .ok_or_else(App::gone)?;
    let mut terminals: Vec<views::TerminalRow> = open
        .into_iter()
        .map(|t| views::TerminalRow {
            terminal_id: t.terminal_id,
            context: t.context_name,
            context_id: t.context_id.into(),
            state: t.state,
            viewers: t.viewers,
            cols: t.size.cols,
            rows: t.size.rows,
            opened_at: t.opened_at,
            opened_by: t.opened_by,
            records_input: t.records_input,
        })
        .collect();
    // In a cluster each node lists the terminals its relay holds: asked of one node, the
    // list is every node's.
    let mut unreached_nodes = Vec::new();
    let headers = req.headers().clone();
    if !forward::relayed(&app, &headers)? {
        let others = forward::others(&app).await?;
        let asked = others.iter().map(|(id, reach)| async {
            let peer = reach.clone().map(|reach| forward::Peer {
                id: id.clone(),
                reach,
            });
            match peer {
                Some(peer) => tokio::time::timeout(LIST_WITHIN, listed_on(&app, &peer, &headers))
                    .await
                    .unwrap_or_else(|_| {
                        Err(ApiError::new(502, "node_unreachable", "no list in time"))
                    }),
                None => Err(ApiError::new(
                    502,
                    "node_unreachable",
                    "no address to reach it at",
                )),
            }
        });
        let listed = futures_util::future::join_all(asked).await;
        for ((id, _), listed) in others.iter().zip(listed) {
            match listed {
                Ok(theirs) => terminals.extend(theirs),
                Err(e) => {
                    tracing::warn!(node = %id, error = %e.message, "a node did not list its terminals");
                    unreached_nodes.push(id.clone());
                }
            }
        }
        terminals.sort_by(|a, b| {
            (a.opened_at, a.terminal_id.as_str()).cmp(&(b.opened_at, b.terminal_id.as_str()))
        });
    }
    Ok(axum::Json(views::Terminals {
        terminals,
        unreached_nodes,
    })
    .into_response())
}

/// The terminals `peer`'s relay holds that the caller (by its own headers) may see.
async fn listed_on(
    app: &App,
    peer: &forward::Peer,
    headers: &axum::http::HeaderMap,
) -> Result<Vec<views::TerminalRow>, ApiError> {
    let mut asked = Request::new(axum::body::Body::empty());
    *asked.uri_mut() = Uri::from_static("/v1/terminals");
    *asked.headers_mut() = headers.clone();
    let answer = forward::relay(app, peer, asked).await?;
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), LIST_LIMIT)
        .await
        .map_err(|e| ApiError::new(502, "node_unreachable", e.to_string()))?;
    if !status.is_success() {
        return Err(ApiError::new(
            502,
            "node_unreachable",
            format!("node {} answered {status}", peer.id),
        ));
    }
    serde_json::from_slice::<views::Terminals>(&bytes)
        .map(|t| t.terminals)
        .map_err(|e| ApiError::new(502, "node_unreachable", e.to_string()))
}

/// The largest terminal list read from another node.
const LIST_LIMIT: usize = 16 << 20;

/// The longest another node has to list its terminals, from connecting to the list's end.
const LIST_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether this node's relay holds terminal `id`.
async fn held_here(app: &App, id: &str) -> Result<bool, ApiError> {
    app.shared
        .terminals
        .ask(|reply| TermMsg::Holds {
            terminal_id: id.into(),
            reply,
        })
        .await
        .ok_or_else(App::gone)
}

/// The other node whose relay holds terminal `id`, for a request this node cannot answer:
/// the node the terminal's machine is connected to, as its recording (or its execution)
/// names the machine.
async fn holder_of(
    app: &App,
    headers: &axum::http::HeaderMap,
    id: &str,
) -> Result<Option<forward::Peer>, ApiError> {
    if forward::relayed(app, headers)? || held_here(app, id).await? {
        return Ok(None);
    }
    let store = app.shared.store.clone();
    let terminal = id.to_owned();
    let context = tokio::task::spawn_blocking(move || {
        if let Some(recording) = store.recording(&terminal)? {
            return Ok::<_, crate::store::StoreError>(Some(recording.context_id));
        }
        Ok(store.execution(&terminal)?.and_then(|e| e.context_id))
    })
    .await
    .map_err(ApiError::internal)??;
    match context {
        Some(context) => forward::holder(app, &context).await,
        None => Ok(None),
    }
}

async fn ticket(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    if let Some(peer) = holder_of(&app, req.headers(), &id).await? {
        return forward::relay(&app, &peer, req).await;
    }
    let (ticket, role) = issue(&app, &id, &caller.user, caller.is_admin()).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(views::TerminalTicket {
            ticket,
            role,
            expires_in_ms: crate::dispatch::terminals::TICKET_LIFETIME_MS,
        }),
    )
        .into_response())
}

async fn connect(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    // The ticket is checked by the node whose relay holds the terminal (it issued it); one
    // that is not even a ticket's text costs no relay.
    if forward::wants_upgrade(req.headers())
        && crate::dispatch::terminals::well_formed(&super::extract::ticket_query(req.uri()))
        && let Some(peer) = holder_of(&app, req.headers(), &id).await?
    {
        return forward::relay(&app, &peer, req).await;
    }
    let (mut parts, _) = req.into_parts();
    let upgrade = WebSocketUpgrade::from_request_parts(&mut parts, &app)
        .await
        .map_err(|_| {
            ApiError::new(
                400,
                "websocket_required",
                "this route only opens a WebSocket",
            )
        })?;
    let ticket = super::extract::ticket_query(&parts.uri);
    let redeemed = app
        .shared
        .terminals
        .ask(|reply| TermMsg::Redeem {
            terminal_id: id.into(),
            ticket,
            reply,
        })
        .await
        .ok_or_else(App::gone)?;
    let ticket =
        redeemed.map_err(|e: TicketRefused| ApiError::new(401, e.code(), e.to_string()))?;
    let terminals = app.shared.terminals.clone();
    let upgrade = upgrade
        .max_message_size(VIEWER_MESSAGE_LIMIT)
        .max_frame_size(VIEWER_MESSAGE_LIMIT);
    Ok(upgrade
        .on_upgrade(move |socket| viewer::drive(terminals, socket, ticket))
        .into_response())
}
