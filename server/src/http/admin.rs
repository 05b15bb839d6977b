//! Users, audit and operations (§11.4, §11.6): creating users with tokens (shown once), the
//! audit log, `/healthz`, `/metrics` and the OpenAPI document.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::auth::{self, ADMIN, READ};
use super::error::{ApiError, ApiResult};
use super::extract::QueryParams;
use super::openapi::{Auth, api};
use super::{App, Route, body, route};
use crate::bodies::{self, SCOPES};
use crate::clock::wall_now;
use crate::secrets;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api("POST", "/v1/users", "Create a user and its token (admin)")
                .auth(Auth::Bearer(ADMIN))
                .request("UserRequest")
                .response(201, Some("User"))
                .errors(&[
                    (409, "user_exists"),
                    (400, "invalid_name"),
                    (400, "unknown_scope"),
                    (503, "random_unavailable"),
                ]),
            post(create_user),
        ),
        route(
            api("GET", "/v1/audit", "The audit log, newest first")
                .auth(Auth::Bearer(READ))
                .query(&["limit"])
                .response(200, Some("Audit"))
                .errors(&[(400, "invalid_query")]),
            get(audit),
        ),
        route(
            api("GET", "/healthz", "Liveness").response(200, Some("Health")),
            get(|| async { axum::Json(json!({"ok": true})) }),
        ),
        route(
            api("GET", "/metrics", "Prometheus metrics").response(200, Some("Metrics")),
            get(metrics),
        ),
        route(
            api("GET", "/v1/openapi.json", "This API's OpenAPI 3.1 document")
                .response(200, Some("OpenApi")),
            get(|State(app): State<App>| async move { axum::Json(app.openapi.clone()) }),
        ),
    ]
}

async fn create_user(State(app): State<App>, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, ADMIN)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let body = bodies::decode_user(&bytes)?;
    let scopes = body.scopes.unwrap_or_else(|| {
        SCOPES
            .iter()
            .filter(|s| **s != ADMIN)
            .map(|s| (*s).to_owned())
            .collect()
    });
    let token = secrets::new_token()?;
    let now = wall_now().0;
    if !app
        .shared
        .store
        .create_user(&body.name, &secrets::hash(&token), &scopes, now)?
    {
        return Err(ApiError::new(
            409,
            "user_exists",
            format!("a user {:?} exists", body.name),
        ));
    }
    app.shared
        .store
        .audit(now, "user_created", &caller.user, None, &body.name)?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"user": body.name, "token": token, "scopes": scopes})),
    )
        .into_response())
}

#[derive(Deserialize)]
struct AuditQuery {
    limit: Option<u32>,
}

async fn audit(
    State(app): State<App>,
    QueryParams(query): QueryParams<AuditQuery>,
    req: Request,
) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(400, "invalid_query", "limit is 1 to 1000"));
    }
    let actor = (!caller.is_admin()).then_some(caller.user.as_str());
    let events: Vec<_> = app
        .shared
        .store
        .audit_events(actor, limit)?
        .into_iter()
        .map(|e| json!({"at": e.at, "kind": e.kind, "actor": e.actor, "contextId": e.context_id, "detail": e.detail}))
        .collect();
    Ok(axum::Json(json!({ "events": events })).into_response())
}

async fn metrics(State(app): State<App>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.shared.metrics.render(app.shared.inflight.in_progress()),
    )
}
