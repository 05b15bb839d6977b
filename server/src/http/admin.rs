//! Users, audit and operations (§11.4, §11.6): creating users with tokens (shown once), the
//! audit log, `/healthz`, `/metrics` and the OpenAPI document.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::Deserialize;

use super::auth::{self, ADMIN, READ};
use super::error::{ApiError, ApiResult};
use super::extract;
use super::openapi::{self, Auth, Carries, api};
use super::{App, Route, body, route, views};
use crate::bodies::{self, SCOPES};
use crate::clock::wall_now;
use crate::secrets;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api("POST", "/v1/users", "Create a user and its token (admin)")
                .auth(Auth::Bearer(ADMIN))
                .request::<bodies::UserRequest>()
                .answer::<views::User>(201)
                .errors(&[
                    (409, "user_exists"),
                    (400, "invalid_name"),
                    (400, "unknown_scope"),
                    (503, "random_unavailable"),
                ]),
            post(create_user),
        ),
        route(
            api(
                "GET",
                "/v1/me",
                "Whose token this is: the user, whether admin, the scopes",
            )
            .auth(Auth::Bearer(READ))
            .answer::<views::Me>(200),
            get(me),
        ),
        route(
            api("GET", "/v1/audit", "The audit log, newest first")
                .auth(Auth::Bearer(READ))
                .query::<AuditQuery>()
                .answer::<views::Audit>(200)
                .errors(&[(400, "invalid_query")]),
            get(audit),
        ),
        route(
            api(
                "GET",
                "/v1/nodes",
                "The nodes serving this system and the daemons connected to each (admin)",
            )
            .auth(Auth::Bearer(ADMIN))
            .answer::<views::Nodes>(200),
            get(super::nodes::list),
        ),
        route(
            api("GET", "/healthz", "Liveness")
                .answer::<views::Health>(200)
                .errors(&[(503, "node_cut_off")]),
            // A node cut off from its database is not healthy: a load balancer sends daemons
            // to another.
            get(|State(app): State<App>| async move {
                if app.cut_off() {
                    return Err(super::error::ApiError::cut_off());
                }
                Ok(axum::Json(views::Health { ok: true }))
            }),
        ),
        route(
            api("GET", "/metrics", "Prometheus metrics").answer_raw(
                200,
                "Prometheus text format",
                Carries::Bytes("text/plain"),
            ),
            get(metrics),
        ),
        route(
            api("GET", "/v1/openapi.json", "This API's OpenAPI 3.1 document")
                .answer_schema(200, openapi::open_api),
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
        axum::Json(views::User {
            user: body.name,
            token,
            scopes,
        }),
    )
        .into_response())
}

/// `GET /v1/audit`'s query.
#[derive(Deserialize, JsonSchema)]
struct AuditQuery {
    /// How many events, newest first (default 100).
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<u32>,
}

async fn me(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    Ok(axum::Json(views::Me {
        admin: caller.is_admin(),
        scopes: caller.scopes().to_vec(),
        user: caller.user,
    })
    .into_response())
}

async fn audit(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let query: AuditQuery = extract::query(req.uri())?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(400, "invalid_query", "limit is 1 to 1000"));
    }
    let actor = (!caller.is_admin()).then_some(caller.user.as_str());
    let events = app
        .shared
        .store
        .audit_events(actor, limit)?
        .into_iter()
        .map(|e| views::AuditEvent {
            recording: recording_of(&e.kind, &e.detail),
            at: e.at,
            kind: e.kind,
            actor: e.actor,
            context_id: e.context_id,
            context_name: e.context_name,
            detail: e.detail,
        })
        .collect();
    Ok(axum::Json(views::Audit { events }).into_response())
}

/// Where a terminal row's session recording is read: its detail begins with the terminal's
/// id (`ex_… operator`, `ex_… exited exit 0`).
fn recording_of(kind: &str, detail: &str) -> Option<String> {
    if !kind.starts_with("terminal.session.") && kind != "terminal.closed" {
        return None;
    }
    let terminal = detail
        .split(' ')
        .next()
        .filter(|id| id.starts_with("ex_"))?;
    Some(format!("/v1/terminals/{terminal}/recording"))
}

async fn metrics(State(app): State<App>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.shared.metrics.render(app.shared.inflight.in_progress()),
    )
}
