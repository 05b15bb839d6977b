//! Condition-wait routes (§11.7): register a wait on a context (identical active ones
//! deduplicate), list the caller's waits, show one, cancel one.
//!
//! A registration is stored first and then offered to the machine (sent now if its daemon is
//! ready, else when it next comes up). A cancel marks the wait `cancelling` until the daemon
//! confirms. The routes decide who may wait where; the dispatcher records what the daemon
//! reports and starts continuations.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use outpost_core::routing::CLOUD_ID;
use outpost_core::server::Input;
use outpost_core::session::WaitOrder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::auth::{self, COMMAND, Caller, EXECUTE, READ};
use super::error::{ApiError, ApiResult};
use super::extract::{self, PathParam};
use super::openapi::{Auth, api};
use super::views::wait::{Wait, Waits, wait as view};
use super::{App, Route, body, route};
use crate::dispatch::{Refused, may_execute, wait_spec};
use crate::secrets;
use crate::store::WaitEntry;
use crate::store::wait_states::{CANCELLING, CONT_NONE};

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "POST",
                "/v1/waits",
                "Register a condition wait on a context",
            )
            .auth(Auth::Bearer(EXECUTE))
            .request::<crate::bodies::WaitRequest>()
            .answer_when::<Wait>(201, "a new wait (deduplicated: false)")
            .answer_when::<Wait>(
                200,
                "an identical active wait of the caller (deduplicated: true)",
            )
            .errors(&[
                (400, "invalid_condition"),
                (400, "interval_out_of_range"),
                (400, "expires_in_the_past"),
                (400, "cloud_cannot_wait"),
                (400, "then_not_inline"),
                (400, "invalid_manifest"),
                (400, "queue_minutes_out_of_range"),
                (404, "context_unknown"),
                (409, "context_revoked"),
                (403, "not_shared"),
                (403, "not_opted_in"),
                (403, "operator_left"),
                (503, "random_unavailable"),
            ]),
            post(register),
        ),
        route(
            api("GET", "/v1/waits", "The caller's waits, newest first")
                .auth(Auth::Bearer(READ))
                .query::<ListQuery>()
                .answer::<Waits>(200)
                .errors(&[(400, "invalid_query")]),
            get(list),
        ),
        route(
            api("GET", "/v1/waits/{id}", "One wait")
                .auth(Auth::Bearer(READ))
                .answer::<Wait>(200)
                .errors(&[(404, "wait_unknown")]),
            get(show),
        ),
        route(
            api("POST", "/v1/waits/{id}/cancel", "Cancel a wait")
                .auth(Auth::Bearer(EXECUTE))
                .answer::<Wait>(200)
                .errors(&[(404, "wait_unknown")]),
            post(cancel),
        ),
    ]
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        ApiError::new(r.status, r.code, r.message)
    }
}

async fn register(State(app): State<App>, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, EXECUTE)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let body = crate::bodies::decode_wait_request(&bytes)?;
    if body.then.as_ref().is_some_and(|t| t.wants_commands) {
        caller.require(COMMAND)?;
    }
    if body.context == CLOUD_ID {
        return Err(ApiError::new(
            400,
            "cloud_cannot_wait",
            "a wait is checked by a machine's daemon; name a context, not cloud",
        ));
    }
    let context = super::contexts::lookup(&app, &caller, &body.context)?;
    may_execute(&context, &caller.user)?;
    let now = crate::clock::wall_now_ms();
    if body.expires_at_ms.is_some_and(|at| at <= now) {
        return Err(ApiError::new(
            400,
            "expires_in_the_past",
            "expiresAtMs is not in the future",
        ));
    }
    let then_json = match (&body.then, &body.then_body) {
        (Some(then), Some(raw)) => {
            let target = match then.context.as_deref() {
                Some(given) => super::executions::resolve_context(&app, &caller, given)?,
                None => context.id.clone(),
            };
            let mut value: Value = serde_json::from_slice(raw)
                .map_err(|e| ApiError::new(400, "invalid_body", format!("then: {e}")))?;
            value["context"] = json!(target);
            Some(value.to_string())
        }
        _ => None,
    };
    let dedupe = json!([
        context.id,
        caller.user,
        body.condition,
        body.interval_ms,
        body.expires_at_ms,
        then_json
    ]);
    let new = WaitEntry {
        id: secrets::new_id("wait_")?,
        context_id: context.id.clone(),
        context_name: context.name.clone(),
        requester: caller.user.clone(),
        source: body.condition,
        interval_ms: body.interval_ms,
        expires_at_ms: body.expires_at_ms,
        reason: body.reason,
        then_json,
        dedupe_key: outpost_core::b64::encode(&Sha256::digest(dedupe.to_string().as_bytes())),
        created_at_ms: now,
        state: crate::store::wait_states::ACTIVE.into(),
        continuation_state: CONT_NONE.into(),
        ..WaitEntry::default()
    };
    let (wait, created) = app.shared.store.insert_wait(&new)?;
    if !created {
        let mut view = view(&wait);
        view.deduplicated = Some(true);
        return Ok(axum::Json(view).into_response());
    }
    // Offered now; a daemon that is not ready gets it when it next comes up.
    let order = WaitOrder::Register(wait_spec(&wait, &context.operator));
    send(&app, &wait.context_id, order).await;
    app.shared.store.audit(
        now / 1000,
        "wait_registered",
        &caller.user,
        Some(&wait.context_id),
        &format!(
            "{} on {}{}",
            wait.id,
            wait.context_name,
            if wait.then_json.is_some() {
                ", with a continuation"
            } else {
                ""
            }
        ),
    )?;
    let mut view = view(&wait);
    view.deduplicated = Some(false);
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

/// Hands a wait order to the dispatcher (or, through the database, to the node of a cluster
/// that owns the machine); a refusal (an unknown machine) only means the order waits for the
/// machine's next connection.
async fn send(app: &App, context_id: &str, order: WaitOrder) {
    let input = Input::Wait {
        context_id: context_id.into(),
        order,
    };
    if let Err(e) = app.call(input).await {
        tracing::debug!(%context_id, code = %e.code, "a wait order was not sent now");
    }
}

/// `GET /v1/waits`'s query.
#[derive(Deserialize, JsonSchema)]
struct ListQuery {
    /// How many, newest first (default 100).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
}

async fn list(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let query: ListQuery = extract::query(req.uri())?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::new(400, "invalid_query", "limit is 1 to 500"));
    }
    let waits = app.shared.store.waits_of(&caller.user, limit)?;
    let waits = Waits {
        waits: waits.iter().map(view).collect(),
    };
    Ok(axum::Json(waits).into_response())
}

/// The wait `id` if the caller registered it (or is an admin).
fn visible(app: &App, caller: &Caller, id: &str) -> Result<WaitEntry, ApiError> {
    app.shared
        .store
        .wait(id)?
        .filter(|w| caller.is_admin() || w.requester == caller.user)
        .ok_or_else(|| ApiError::new(404, "wait_unknown", format!("no wait {id:?} of yours")))
}

async fn show(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let wait = visible(&app, &caller, &id)?;
    Ok(axum::Json(view(&wait)).into_response())
}

async fn cancel(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let wait = visible(&app, &caller, &id)?;
    if wait.ended() {
        return Ok(axum::Json(view(&wait)).into_response());
    }
    let wait = app.shared.store.ask_cancel(&id)?.unwrap_or(wait);
    app.shared.store.audit(
        crate::clock::wall_now().0,
        "wait_cancelled",
        &caller.user,
        Some(&wait.context_id),
        &format!("{} on {}", wait.id, wait.context_name),
    )?;
    if wait.state == CANCELLING {
        let order = WaitOrder::Cancel {
            wait_id: wait.id.as_str().into(),
        };
        send(&app, &wait.context_id, order).await;
    }
    // Read again: the daemon may have answered already.
    let wait = app.shared.store.wait(&id)?.unwrap_or(wait);
    Ok(axum::Json(view(&wait)).into_response())
}
