//! Join tokens (§11.1, §11.4): the credentials a join string carries, made, listed and
//! revoked by an admin. A new one is a bearer token with the single scope
//! `execution_context:create`, bounded by an expiry (the token's), a number of registrations
//! and a name prefix that the registration route enforces; the first start's token is
//! `jt_first`. Its join string is shown once, in the answer that makes it.
//!
//! This module owns those routes. It never registers a machine (that is [`super::machine`])
//! and never prints a token anywhere but in that one answer.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use outpost_core::api::{JoinToken, JoinTokens};
use outpost_core::join::Join;

use super::auth::{self, ADMIN, CREATE};
use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{Auth, api};
use super::{App, Route, body, route};
use crate::bodies;
use crate::clock::wall_now;
use crate::secrets;
use crate::store::JoinTokenEntry;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api("POST", "/v1/join-tokens", "Make a join token (admin)")
                .auth(Auth::Bearer(ADMIN))
                .request::<outpost_core::api::JoinTokenRequest>()
                .answer::<JoinToken>(201)
                .errors(&[(400, "invalid_body"), (503, "random_unavailable")]),
            post(create),
        ),
        route(
            api(
                "GET",
                "/v1/join-tokens",
                "The join tokens, newest first (admin)",
            )
            .auth(Auth::Bearer(ADMIN))
            .answer::<JoinTokens>(200),
            get(list),
        ),
        route(
            api(
                "DELETE",
                "/v1/join-tokens/{id}",
                "Revoke a join token (admin)",
            )
            .auth(Auth::Bearer(ADMIN))
            .answer::<JoinToken>(200)
            .errors(&[(404, "join_token_unknown")]),
            delete(revoke),
        ),
    ]
}

fn view(entry: JoinTokenEntry, join: Option<String>) -> JoinToken {
    JoinToken {
        id: entry.id,
        created_by: entry.created_by,
        created_at: entry.created_at,
        expires_at: entry.expires_at,
        uses_left: entry.uses_left,
        used: entry.used,
        name_prefix: entry.name_prefix,
        revoked: entry.revoked,
        join,
    }
}

async fn create(State(app): State<App>, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, ADMIN)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let asked = bodies::decode_join_token(&bytes)?;
    let now = wall_now().0;
    let token = secrets::new_token()?;
    let entry = JoinTokenEntry {
        id: secrets::new_id("jt_")?,
        created_by: caller.user.clone(),
        created_at: now,
        expires_at: asked.ttl_secs.map(|ttl| now.saturating_add(ttl)),
        uses_left: asked.uses,
        used: 0,
        name_prefix: asked.name_prefix,
        revoked: false,
    };
    let store = &app.shared.store;
    store.add_join_token(&entry, &secrets::hash(&token), &[CREATE.to_owned()])?;
    store.audit(now, "join_token_created", &caller.user, None, &entry.id)?;
    let nodes = store.live_node_urls(crate::store::NODE_LIVE.as_millis() as u64)?;
    let join = Join {
        token,
        ..app.join.listing(&nodes)
    }
    .encode();
    Ok((StatusCode::CREATED, axum::Json(view(entry, Some(join)))).into_response())
}

async fn list(State(app): State<App>, req: Request) -> ApiResult {
    auth::bearer(&app, req.headers(), ADMIN)?;
    let tokens = app.shared.store.join_tokens()?;
    let join_tokens = tokens.into_iter().map(|t| view(t, None)).collect();
    Ok(axum::Json(JoinTokens { join_tokens }).into_response())
}

async fn revoke(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), ADMIN)?;
    let store = &app.shared.store;
    if !store.revoke_join_token(&id)? {
        return Err(ApiError::new(
            404,
            "join_token_unknown",
            format!("no join token {id:?}: `outpost join list` shows them"),
        ));
    }
    store.audit(wall_now().0, "join_token_revoked", &caller.user, None, &id)?;
    let entry = store
        .join_tokens()?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| ApiError::internal("a revoked join token vanished"))?;
    Ok(axum::Json(view(entry, None)).into_response())
}
