//! Machine routes (§11.3): register, connect-ticket, server-keys, and the WebSocket upgrade
//! (whose ticket is looked at in the core before upgrading — which context issued it, without
//! spending it — and spent by that context's session once the socket is open; the socket
//! itself is driven by `ws`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use ed25519_dalek::VerifyingKey;
use outpost_core::b64;
use outpost_core::httpsig::VerifiedRequest;
use outpost_core::join::machine_key_id;
use outpost_core::server::{ContextRecord, Input};
use outpost_core::ticket::{TICKET_PREFIX, TicketError};
use outpost_core::wire::{CommandsGrant, Egress, Grant, GrantLimits};
use tokio::sync::oneshot;

use super::auth::{self, CREATE};
use super::error::{ApiError, ApiResult};
use super::openapi::{self, Auth, Carries, api};
use super::{App, Route, body, route, views};
use crate::bodies;
use crate::clock::wall_now;
use crate::dispatch::{Msg, TicketRefused};
use crate::secrets;
use crate::store::ContextEntry;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "POST",
                "/v1/execution-contexts",
                "Register a machine (signed by the new key)",
            )
            .auth(Auth::SignedBearer(CREATE))
            .request::<bodies::RegisterRequest>()
            .answer_when::<views::Registered>(201, "registered")
            .answer_when::<views::Registered>(
                200,
                "this key was already registered: the same context (registering is idempotent)",
            )
            .errors(&[
                (400, "key_id_mismatch"),
                (400, "invalid_name"),
                (403, "context_revoked"),
                (409, "context_name_taken"),
                (401, "join_token_used_up"),
                (403, "join_name_refused"),
                (503, "random_unavailable"),
            ]),
            post(register),
        ),
        route(
            api(
                "POST",
                "/v1/execution-contexts/connect-ticket",
                "Get a single-use connect ticket",
            )
            .auth(Auth::Signed)
            .answer::<views::ConnectTicket>(200)
            .errors(&[
                (403, "context_revoked"),
                (503, "ticket_store_full"),
                (503, "random_unavailable"),
                (503, "node_cut_off"),
                (503, "context_not_ready"),
                (503, "database_unavailable"),
            ]),
            post(connect_ticket),
        ),
        route(
            api(
                "GET",
                "/v1/execution-contexts/connect",
                "Open the daemon's WebSocket",
            )
            .auth(Auth::Ticket)
            .query::<TicketQuery>()
            .answer_raw(101, "switching to the WebSocket", Carries::Nothing)
            .errors(&[
                (401, "ticket_malformed"),
                (401, "ticket_unknown"),
                (401, "ticket_expired"),
                (400, "websocket_required"),
                (503, "node_cut_off"),
            ]),
            get(connect),
        ),
        route(
            api(
                "GET",
                "/v1/execution-contexts/server-keys",
                "The server's key set (§7)",
            )
            .answer_schema(200, openapi::key_set),
            get(server_keys),
        ),
    ]
}

/// The query of a WebSocket route: the single-use ticket (§9), since a browser cannot set
/// headers on a WebSocket.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // Described, then read by `extract::ticket_query`.
pub(super) struct TicketQuery {
    /// `otk_…` (a daemon's) or `vtk_…` (a viewer's).
    ticket: String,
}

fn registered(entry: &ContextEntry) -> views::Registered {
    views::Registered {
        context_id: entry.id.as_str().into(),
        name: entry.name.clone(),
        operator: entry.operator.clone(),
        key_id: entry.key_id.clone(),
        grant: serde_json::from_str(&entry.grant_json)
            .unwrap_or_else(|_| outpost_core::wire::Grant::nothing()),
        grant_version: entry.grant_version,
    }
}

/// Verifies a machine request's `outpost` signature with the key `lookup` finds (§8 steps
/// 1–6), over the request as it arrived.
fn verify_machine(
    app: &App,
    parts: &Parts,
    bytes: &[u8],
    lookup: &dyn Fn(&str) -> Option<VerifyingKey>,
) -> Result<VerifiedRequest, ApiError> {
    let signed = auth::signed_request(app, &parts.method, &parts.uri, &parts.headers, bytes);
    auth::verify(&signed, lookup)
}

/// Which buckets a machine request takes a token from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Metered {
    /// The source address's and the context's (every route but the one below).
    AddressAndContext,
    /// The source address's only: a bundle fetch, of which a machine makes one per run named
    /// by digest (the runs its slots hold bound them, not a rate).
    AddressOnly,
}

/// Lets a verified machine request in: a token from the bucket of `context` (the context's
/// id, or the key's id before it has one) unless `metered` says otherwise, then its nonce
/// spent (§8 step 7).
fn admit(
    app: &App,
    context: &str,
    verified: &VerifiedRequest,
    metered: Metered,
) -> Result<(), ApiError> {
    if metered == Metered::AddressAndContext {
        auth::limit_context(app, context)?;
    }
    auth::spend_nonce(app, verified)
}

/// 403 `context_revoked`: the key verified, but its context was revoked for good.
fn key_revoked() -> ApiError {
    ApiError::new(403, "context_revoked", "this machine key was revoked")
}

/// A signed request of a registered machine read and checked whole: the source address's
/// rate, the body (JSON when `json`), then [`registered_machine`]. Returns the machine's
/// context id and the body.
pub(super) async fn machine_request(
    app: &App,
    addr: SocketAddr,
    req: Request,
    json: bool,
) -> Result<(String, axum::body::Bytes), ApiError> {
    metered_machine_request(app, addr, req, json, Metered::AddressAndContext).await
}

/// [`machine_request`], taking tokens from the buckets `metered` names.
pub(super) async fn metered_machine_request(
    app: &App,
    addr: SocketAddr,
    req: Request,
    json: bool,
    metered: Metered,
) -> Result<(String, axum::body::Bytes), ApiError> {
    auth::limit_address(app, addr)?;
    let (parts, raw) = req.into_parts();
    let bytes = if json {
        body::read_json(&parts.headers, raw).await?
    } else {
        body::read(&parts.headers, raw).await?
    };
    let context_id = registered_machine(app, &parts, &bytes, metered)?;
    Ok((context_id, bytes))
}

/// A signed request of a registered machine, checked whole (after the source address's
/// rate): the signature by its key, its context's rate, the nonce, and that the key is not
/// revoked. Returns the machine's context id.
pub(super) fn registered_machine(
    app: &App,
    parts: &Parts,
    bytes: &[u8],
    metered: Metered,
) -> Result<String, ApiError> {
    let store = app.shared.store.clone();
    // A database that does not answer is not an unknown key: a daemon told `unknown_key`
    // stops for good.
    let failed = std::cell::RefCell::new(None);
    let lookup = |kid: &str| match store.machine_key(kid) {
        Ok(found) => found.and_then(|(_, key, _)| VerifyingKey::from_bytes(&key).ok()),
        Err(e) => {
            *failed.borrow_mut() = Some(e);
            None
        }
    };
    let verified = verify_machine(app, parts, bytes, &lookup);
    if let Some(e) = failed.take() {
        return Err(ApiError::from(e));
    }
    let verified = verified?;
    let (context_id, _, revoked) = app
        .shared
        .store
        .machine_key(&verified.keyid)?
        .ok_or_else(|| ApiError::new(401, "unknown_key", "no machine has this key"))?;
    admit(app, &context_id, &verified, metered)?;
    if revoked {
        return Err(key_revoked());
    }
    Ok(context_id)
}

async fn register(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> ApiResult {
    auth::limit_address(&app, addr)?;
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, CREATE)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let reg = bodies::decode_registration(&bytes)?;
    let public = reg.public_key;
    let key_id = machine_key_id(&public);
    // The signature is checked against the body's key whatever `keyid` says; a `keyid` that
    // is not that key's id is then its own error.
    let verified = verify_machine(&app, &parts, &bytes, &|_| Some(public))?;
    if verified.keyid != key_id {
        return Err(ApiError::new(
            400,
            "key_id_mismatch",
            format!("keyid must be {key_id}, the id of publicKey"),
        ));
    }
    admit(&app, &key_id, &verified, Metered::AddressAndContext)?;
    let slots = reg.max_concurrent;
    // One registration at a time: two requests with one key (a daemon retrying) or one name
    // must not both pass the checks below before either is stored.
    let _registering = app.registering.lock().await;
    let store = &app.shared.store;
    if let Some(existing) = store.context_by_key(&key_id)? {
        if existing.revoked {
            return Err(key_revoked());
        }
        return Ok((StatusCode::OK, axum::Json(registered(&existing))).into_response());
    }
    // A join token's bounds: registrations left, a name prefix (its expiry and revocation
    // are its token's, checked with the token).
    let join_token = match auth::bearer_hash(&parts.headers) {
        Some(hash) => store.join_token_by_hash(&hash)?,
        None => None,
    };
    if let Some(jt) = &join_token {
        if jt.uses_left == Some(0) {
            return Err(ApiError::new(
                401,
                "join_token_used_up",
                format!(
                    "join token {} has registered as many machines as it may ({}): ask the server's admin for another (`outpost join create`)",
                    jt.id, jt.used
                ),
            ));
        }
        if let Some(prefix) = &jt.name_prefix
            && !reg.name.starts_with(prefix.as_str())
        {
            return Err(ApiError::new(
                403,
                "join_name_refused",
                format!(
                    "join token {} registers only machines whose name starts with {prefix:?}; {:?} does not: pass --name {prefix}…",
                    jt.id, reg.name
                ),
            ));
        }
    }
    if store.live_name_taken(&caller.user, &reg.name)? {
        return Err(ApiError::new(
            409,
            "context_name_taken",
            format!(
                "you already have a live context named {:?}; revoke or delete it first",
                reg.name
            ),
        ));
    }
    let grant = Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits {
            max_concurrent: slots,
        },
        environments: None,
    };
    let entry = ContextEntry {
        id: secrets::new_id("ec_")?,
        name: reg.name.clone(),
        operator: caller.user.clone(),
        key_id: key_id.clone(),
        max_concurrent: slots,
        environments: reg
            .environments
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect(),
        daemon_version: reg.daemon_version,
        registered_at: wall_now().0,
        grant_json: serde_json::to_string(&grant).map_err(ApiError::internal)?,
        grant_version: 1,
        revoked: false,
        shared_with_all_members: false,
        opted_in: Vec::new(),
        operator_is_member: true,
    };
    store.insert_context(&entry, public.as_bytes())?;
    if let Some(jt) = &join_token {
        store.join_token_used(&jt.id, &entry.id)?;
    }
    let record = ContextRecord {
        id: entry.id.as_str().into(),
        name: entry.name.clone(),
        operator: entry.operator.clone(),
        operator_is_member: true,
        shared_with_all_members: false,
        opted_in: Vec::new(),
    };
    app.call(Input::Register { record, grant }).await?;
    // Which token registered it, beside its name.
    let detail = match &join_token {
        Some(jt) => format!("{} (join token {})", entry.name, jt.id),
        None => entry.name.clone(),
    };
    store.audit(
        wall_now().0,
        "context_registered",
        &caller.user,
        Some(&entry.id),
        &detail,
    )?;
    let entry = store.context(&entry.id)?.unwrap_or(entry);
    Ok((StatusCode::CREATED, axum::Json(registered(&entry))).into_response())
}

async fn connect_ticket(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> ApiResult {
    if app.cut_off() {
        return Err(ApiError::cut_off());
    }
    let (context_id, _) = machine_request(&app, addr, req, false).await?;
    let secret = secrets::random::<48>()?;
    let (reply, rx) = oneshot::channel();
    app.tx
        .send(Msg::IssueTicket {
            context_id: context_id.clone(),
            secret,
            reply,
        })
        .await
        .map_err(|_| App::gone())?;
    let issued = rx.await.map_err(|_| App::gone())?.map_err(|e| match e {
        TicketRefused::Ticket(e @ outpost_core::ticket::TicketError::StoreFull) => {
            ApiError::new(503, e.code(), "too many outstanding tickets; retry shortly")
        }
        // The key verified against the registered machines, so the dispatcher merely does
        // not know the machine yet (registered through another node moments ago): a retry
        // finds it. A daemon stops for good on `unknown_key`, so that is never said here.
        TicketRefused::Ticket(_) => {
            let mut e = ApiError::new(
                503,
                "context_not_ready",
                "this node does not know the machine yet (it was registered moments ago); retry shortly",
            );
            e.retry_after = Some(1);
            e
        }
        TicketRefused::Database(e) => ApiError::from(e),
    })?;
    let text = issued.ticket.expose_secret();
    let expires_at = issued.ticket.expires_at.0;
    Ok(axum::Json(views::ConnectTicket {
        ticket: text,
        session_id: issued.session_id,
        expires_at,
    })
    .into_response())
}

async fn server_keys(State(app): State<App>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        app.key_set.clone(),
    )
}

fn ticket_error(code: &str, message: &str) -> ApiError {
    ApiError::new(401, code, message)
}

async fn connect(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    uri: Uri,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult {
    auth::limit_address(&app, addr)?;
    if app.cut_off() {
        return Err(ApiError::cut_off());
    }
    let ticket = super::extract::ticket_query(&uri);
    let well_formed = ticket
        .strip_prefix(TICKET_PREFIX)
        .is_some_and(|rest| b64::decode_array::<48>(rest).is_ok());
    if !well_formed {
        return Err(ticket_error(
            "ticket_malformed",
            "the ticket is not otk_ and 64 base64url characters",
        ));
    }
    let upgrade = upgrade.map_err(|_| {
        ApiError::new(
            400,
            "websocket_required",
            "this route only opens a WebSocket",
        )
    })?;
    let (reply, answer) = oneshot::channel();
    let ask = Msg::TicketContext {
        ticket: ticket.clone(),
        reply,
    };
    app.tx.send(ask).await.map_err(|_| App::gone())?;
    let context_id = answer
        .await
        .map_err(|_| App::gone())?
        .map_err(|e| match e {
            TicketError::Expired(_) => {
                ticket_error(e.code(), "the ticket expired; ask for a new one")
            }
            TicketError::Malformed => ticket_error(
                e.code(),
                "the ticket is not otk_ and 64 base64url characters",
            ),
            _ => ticket_error(
                "ticket_unknown",
                "the ticket was never issued, was used, or is wrong",
            ),
        })?;
    auth::limit_context(&app, &context_id)?;
    let conn = app.next_conn.fetch_add(1, Ordering::Relaxed);
    // A small read buffer (it grows for a large message): an idle connection then holds a
    // few KiB instead of tungstenite's default 128 KiB.
    let upgrade = upgrade
        .read_buffer_size(super::ws::READ_BUFFER)
        .max_message_size(super::ws::READ_LIMIT)
        .max_frame_size(super::ws::READ_LIMIT);
    Ok(upgrade.on_upgrade(move |socket| super::ws::drive(app, socket, conn, context_id, ticket)))
}
