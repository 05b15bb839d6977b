//! Execution routes (§11.4): start one (validated before anything is stored, answered once
//! its records are written, optionally after it ends), read one (optionally waiting), cancel
//! one, and list the caller's runs.

use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use outpost_core::manifest::{Manifest, check_relative_path};
use outpost_core::routing::{
    CLOUD_ID, ExecuteTarget, Fallback, Requester, Requirement, WhenOffline,
};
use outpost_core::server::{ExecuteRequest, Input};
use outpost_core::wire::CapabilitySource;
use serde::Deserialize;
use serde_json::json;

use super::auth::{self, Caller, EXECUTE, READ};
use super::error::{ApiError, ApiResult};
use super::openapi::{Auth, api};
use super::{App, Route, body, route, views};
use crate::clock::wall_now;
use crate::secrets;
use crate::store::ExecutionEntry;

/// How long `wait` waits when no `waitSecs` is given.
const DEFAULT_WAIT_SECS: u64 = 60;
/// The longest a request waits for an execution to end.
const MAX_WAIT_SECS: u64 = 300;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api("POST", "/v1/executions", "Run a capability")
                .auth(Auth::Bearer(EXECUTE))
                .request("ExecuteRequest")
                .response(201, Some("Execution"))
                .errors(&[
                    (400, "invalid_manifest"),
                    (404, "context_unknown"),
                    (400, "queue_minutes_out_of_range"),
                    (413, "capability_too_large"),
                    (404, "bundle_unknown"),
                    (400, "digest_mismatch"),
                ]),
            post(execute),
        ),
        route(
            api(
                "GET",
                "/v1/executions/{id}",
                "Read an execution, optionally waiting for its end",
            )
            .auth(Auth::Bearer(READ))
            .query(&["waitSecs"])
            .response(200, Some("Execution"))
            .errors(&[(404, "execution_unknown"), (400, "invalid_query")]),
            get(show),
        ),
        route(
            api("POST", "/v1/executions/{id}/cancel", "Cancel an execution")
                .auth(Auth::Bearer(EXECUTE))
                .response(200, Some("Execution"))
                .errors(&[(404, "execution_unknown")]),
            post(cancel),
        ),
        route(
            api("GET", "/v1/runs", "The caller's executions, newest first")
                .auth(Auth::Bearer(READ))
                .query(&["context", "limit"])
                .response(200, Some("Runs"))
                .errors(&[(400, "invalid_query")]),
            get(runs),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecuteBody {
    capability: CapabilitySource,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    fallback: Option<Fallback>,
    #[serde(default)]
    requires: Option<Vec<Requirement>>,
    #[serde(default)]
    when_offline: Option<OfflineMode>,
    #[serde(default)]
    queue_minutes: Option<u32>,
    #[serde(default)]
    wait: Option<bool>,
    #[serde(default)]
    wait_secs: Option<u64>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum OfflineMode {
    Fail,
    Queue,
}

/// Checks a capability the way the machine will: the manifest validates and every file has
/// a safe relative path and base64url content. One named by digest must be a stored bundle
/// of that size, and its content is checked the same way.
pub(super) fn check_capability(
    app: &App,
    capability: &CapabilitySource,
) -> Result<Manifest, ApiError> {
    let (manifest, files) = match capability {
        CapabilitySource::Inline { manifest, files } => (manifest, files),
        CapabilitySource::Digest { sha256, size } => {
            super::bundles::check_digest(sha256)?;
            let bytes = app.shared.store.bundle(sha256)?.ok_or_else(|| {
                ApiError::new(
                    404,
                    "bundle_unknown",
                    format!("no bundle has the digest {sha256}: upload it first (PUT /v1/bundles/{sha256})"),
                )
            })?;
            if bytes.len() as u64 != *size {
                return Err(ApiError::new(
                    400,
                    "digest_mismatch",
                    format!(
                        "the bundle {sha256} holds {} bytes, not {size}",
                        bytes.len()
                    ),
                ));
            }
            let inline = outpost_core::wire::decode_bundle(&bytes)
                .map_err(|e| ApiError::new(400, e.code(), e.to_string()))?;
            return check_capability(app, &inline);
        }
    };
    let parsed = Manifest::parse(manifest)
        .map_err(|e| ApiError::new(400, "invalid_manifest", e.to_string()))?;
    for file in files {
        check_relative_path(&file.path).map_err(|e| {
            ApiError::invalid_body(format!("capability.files: {:?} {e}", file.path))
        })?;
        outpost_core::b64::decode(&file.content_b64).map_err(|e| {
            ApiError::invalid_body(format!("capability.files: {:?} contentB64: {e}", file.path))
        })?;
    }
    Ok(parsed)
}

/// The context id a request names: `cloud`, an id, or a name (the caller's own first).
pub(crate) fn resolve_context(app: &App, caller: &Caller, given: &str) -> Result<String, ApiError> {
    if given == CLOUD_ID {
        return Ok(CLOUD_ID.to_owned());
    }
    let contexts = app.shared.store.contexts()?;
    let by_id = contexts.iter().find(|c| c.id == given);
    let own = contexts
        .iter()
        .find(|c| c.name == given && c.operator == caller.user && !c.revoked);
    let any = contexts.iter().find(|c| c.name == given && !c.revoked);
    by_id.or(own).or(any).map(|c| c.id.clone()).ok_or_else(|| {
        ApiError::new(
            404,
            "context_unknown",
            format!("no context is named {given:?}"),
        )
    })
}

async fn execute(State(app): State<App>, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, EXECUTE)?;
    let bytes = body::read(&parts.headers, raw).await?;
    let body: ExecuteBody = body::parse(&bytes)?;
    let manifest = check_capability(&app, &body.capability)?;
    let wait_secs = body.wait_secs.unwrap_or(DEFAULT_WAIT_SECS);
    if wait_secs > MAX_WAIT_SECS {
        return Err(ApiError::invalid_body(format!(
            "waitSecs is at most {MAX_WAIT_SECS}"
        )));
    }
    let when_offline = match body.when_offline {
        None | Some(OfflineMode::Fail) => WhenOffline::Fail,
        Some(OfflineMode::Queue) => WhenOffline::queue(
            body.queue_minutes
                .unwrap_or(outpost_core::routing::DEFAULT_QUEUE_MINUTES),
        )
        .map_err(|e| ApiError::new(400, e.code(), e.to_string()))?,
    };
    let context_id = body
        .context
        .as_deref()
        .map(|c| resolve_context(&app, &caller, c))
        .transpose()?;
    let target = ExecuteTarget {
        context: context_id.clone(),
        fallback: body.fallback.unwrap_or_default(),
        requires: body.requires.unwrap_or_default(),
        when_offline,
        wants_commands: false,
    };
    target
        .validate()
        .map_err(|e| ApiError::new(400, e.code(), e.to_string()))?;
    let entry = ExecutionEntry {
        id: secrets::new_id("ex_"),
        user: caller.user.clone(),
        requested: body.context.clone(),
        status: "pending".into(),
        created_at: wall_now().0,
        ..ExecutionEntry::default()
    };
    app.shared.store.insert_execution(&entry)?;
    let request = ExecuteRequest {
        exec_id: entry.id.clone(),
        requester: Requester {
            user_id: caller.user.clone(),
        },
        target,
        environment: manifest.environment,
        capability: body.capability,
        timeout_ms: manifest.limits.timeout_ms,
    };
    app.call(Input::Execute(Box::new(request))).await?;
    let entry = if body.wait.unwrap_or(false) {
        wait_for_end(&app, &entry.id, Duration::from_secs(wait_secs)).await?
    } else {
        app.shared.store.execution(&entry.id)?.unwrap_or(entry)
    };
    Ok((StatusCode::CREATED, axum::Json(views::execution(&entry))).into_response())
}

/// The execution once it ended, or as it is after `limit`.
async fn wait_for_end(app: &App, id: &str, limit: Duration) -> Result<ExecutionEntry, ApiError> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut changed = app.shared.changed.subscribe();
    loop {
        changed.borrow_and_update();
        let entry = app
            .shared
            .store
            .execution(id)?
            .ok_or_else(|| ApiError::new(404, "execution_unknown", "no such execution"))?;
        if views::ended(&entry.status) {
            return Ok(entry);
        }
        tokio::select! {
            r = changed.changed() => if r.is_err() { return Ok(entry) },
            () = tokio::time::sleep_until(deadline) => return Ok(entry),
        }
    }
}

fn visible(app: &App, caller: &Caller, id: &str) -> Result<ExecutionEntry, ApiError> {
    app.shared
        .store
        .execution(id)?
        .filter(|e| caller.is_admin() || e.user == caller.user)
        .ok_or_else(|| {
            ApiError::new(
                404,
                "execution_unknown",
                format!("no execution {id:?} of yours"),
            )
        })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShowQuery {
    wait_secs: Option<u64>,
}

fn bad_query(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        400,
        "invalid_query",
        format!("the query string is not valid: {e}"),
    )
}

async fn show(
    State(app): State<App>,
    Path(id): Path<String>,
    query: Result<Query<ShowQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let Query(query) = query.map_err(bad_query)?;
    let mut entry = visible(&app, &caller, &id)?;
    if let Some(secs) = query.wait_secs {
        let secs = secs.min(MAX_WAIT_SECS);
        entry = wait_for_end(&app, &id, Duration::from_secs(secs)).await?;
    }
    Ok(axum::Json(views::execution(&entry)).into_response())
}

async fn cancel(State(app): State<App>, Path(id): Path<String>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let entry = visible(&app, &caller, &id)?;
    if !views::ended(&entry.status) {
        // An execution that ended meanwhile is not an error: the answer shows its end.
        let _ = app
            .call(Input::Cancel {
                exec_id: id.clone(),
            })
            .await;
    }
    let entry = visible(&app, &caller, &id)?;
    Ok(axum::Json(views::execution(&entry)).into_response())
}

#[derive(Deserialize)]
struct RunsQuery {
    context: Option<String>,
    limit: Option<u32>,
}

async fn runs(
    State(app): State<App>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let Query(query) = query.map_err(bad_query)?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::new(400, "invalid_query", "limit is 1 to 500"));
    }
    let runs = app
        .shared
        .store
        .executions(Some(&caller.user), query.context.as_deref(), limit)?;
    let runs: Vec<_> = runs.iter().map(views::execution).collect();
    Ok(axum::Json(json!({ "runs": runs })).into_response())
}
