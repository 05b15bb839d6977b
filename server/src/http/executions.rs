//! Execution routes (§11.4): start one (validated before anything is stored, answered once
//! its records are written, optionally after it ends), read one (optionally waiting), cancel
//! one, and list the caller's runs.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use outpost_core::routing::{CLOUD_ID, ExecuteTarget, Requester};
use outpost_core::server::{ExecuteRequest, ExecutionStatus, Input};
use outpost_core::wire::CapabilitySource;
use schemars::JsonSchema;
use serde::Deserialize;

use super::auth::{self, COMMAND, Caller, EXECUTE, READ};
use super::error::{ApiError, ApiResult};
use super::extract::{self, PathParam};
use super::openapi::{Auth, api};
use super::{App, Route, body, route, views};
use crate::bodies::{self, MAX_WAIT_SECS};
use crate::clock::wall_now;
use crate::dispatch::EndWatch;
use crate::secrets;
use crate::store::{ExecutionEntry, RunsFilter};

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api("POST", "/v1/executions", "Run a capability")
                .auth(Auth::Bearer(EXECUTE))
                .request::<bodies::ExecuteRequest>()
                .answer::<views::Execution>(201)
                .errors(&[
                    (400, "invalid_manifest"),
                    (404, "context_unknown"),
                    (409, "context_revoked"),
                    (400, "queue_minutes_out_of_range"),
                    (413, "capability_too_large"),
                    (404, "bundle_unknown"),
                    (400, "digest_mismatch"),
                    (400, "invalid_digest"),
                    (429, "queue_full"),
                    (503, "random_unavailable"),
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
            .query::<ShowQuery>()
            .answer::<views::Execution>(200)
            .errors(&[(404, "execution_unknown"), (400, "invalid_query")]),
            get(show),
        ),
        route(
            api("POST", "/v1/executions/{id}/cancel", "Cancel an execution")
                .auth(Auth::Bearer(EXECUTE))
                .answer::<views::Execution>(200)
                .errors(&[(404, "execution_unknown")]),
            post(cancel),
        ),
        route(
            api("GET", "/v1/runs", "The caller's executions, newest first")
                .auth(Auth::Bearer(READ))
                .query::<RunsQuery>()
                .answer::<views::Runs>(200)
                .errors(&[(400, "invalid_query")]),
            get(runs),
        ),
    ]
}

/// The context id a request names: `cloud`, an id, or a name (the caller's own first, then
/// one shared with every member).
pub(crate) fn resolve_context(app: &App, caller: &Caller, given: &str) -> Result<String, ApiError> {
    if given == CLOUD_ID {
        return Ok(CLOUD_ID.to_owned());
    }
    let store = &app.shared.store;
    // By id, else the caller's own live context, else one shared with every member, else any:
    // reading ids and the revoked flag only, as every execute does this.
    let revoked = match store.context_revoked(given)? {
        Some(false) => return Ok(given.to_owned()),
        // A revoked context (named by its id, or by its name) is not a typo: say so.
        Some(true) => store.context(given)?,
        None => {
            for (operator, shared_only) in [
                (Some(caller.user.as_str()), false),
                (None, true),
                (None, false),
            ] {
                if let Some(id) = store.live_context_id_named(given, operator, shared_only)? {
                    return Ok(id);
                }
            }
            store
                .contexts()?
                .into_iter()
                .find(|c| c.revoked && c.name == given)
        }
    };
    if let Some(revoked) = revoked {
        return Err(ApiError::new(
            409,
            "context_revoked",
            format!(
                "{} was revoked and takes no runs; for its machine to serve again, its owner joins it anew (`outpost daemon --home NEW_DIR --join …`)",
                revoked.name
            ),
        ));
    }
    // Not found: say which names the caller can use (their own, those shared with every
    // member, those they opted in to), so a typo is one look away.
    let mut usable: Vec<String> = store
        .contexts()?
        .into_iter()
        .filter(|c| !c.revoked)
        .filter(|c| {
            caller.is_admin()
                || c.operator == caller.user
                || c.shared_with_all_members
                || c.opted_in.contains(&caller.user)
        })
        .map(|c| c.name)
        .collect();
    usable.sort();
    usable.dedup();
    let names = if usable.is_empty() {
        "you can use none yet (a daemon joins with `outpost daemon --join …`)".to_owned()
    } else {
        format!("yours to use: {}, or cloud", usable.join(", "))
    };
    Err(ApiError::new(
        404,
        "context_unknown",
        format!("no context is named {given:?}; {names}"),
    ))
}

async fn execute(State(app): State<App>, req: Request) -> ApiResult {
    tracing::trace!(target: "outpost::timeline", stage = "http.request");
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, EXECUTE)?;
    tracing::trace!(target: "outpost::timeline", stage = "http.authorized");
    let bytes = body::read_json(&parts.headers, raw).await?;
    tracing::trace!(target: "outpost::timeline", stage = "http.read");
    let body = bodies::decode_execution_request(&bytes)?;
    tracing::trace!(target: "outpost::timeline", stage = "http.decoded");
    if body.wants_commands {
        caller.require(COMMAND)?;
    }
    // A capability named by digest is checked against its stored bundle.
    let manifest = match (&body.manifest, &body.capability) {
        (Some(manifest), _) => manifest.clone(),
        (None, CapabilitySource::Digest { sha256, size }) => {
            super::bundles::stored_manifest(&app, sha256, *size)?
        }
        (None, CapabilitySource::Inline { .. }) => {
            return Err(ApiError::new(
                400,
                "invalid_body",
                "capability: no manifest",
            ));
        }
    };
    let context_id = body
        .context
        .as_deref()
        .map(|c| resolve_context(&app, &caller, c))
        .transpose()?;
    let target = ExecuteTarget {
        context: context_id.clone(),
        fallback: body.fallback,
        requires: body.requires,
        when_offline: body.when_offline,
        when_busy: body.when_busy,
        wants_commands: body.wants_commands,
    };
    target
        .validate()
        .map_err(|e| ApiError::new(400, e.code(), e.to_string()))?;
    tracing::trace!(target: "outpost::timeline", stage = "http.resolved");
    // A large inline capability waits and runs from disk, named by digest (written and
    // flushed on a blocking thread; a small one needs neither).
    let capability = if crate::parking::parks(&body.capability) {
        let (store, user, capability) = (
            app.shared.store.clone(),
            caller.user.clone(),
            body.capability,
        );
        tokio::task::spawn_blocking(move || crate::parking::park(&store, &user, capability))
            .await
            .map_err(ApiError::internal)??
    } else {
        body.capability
    };
    let entry = ExecutionEntry {
        id: secrets::new_ordered_id("ex_")?,
        user: caller.user.clone(),
        requested: body.context.clone(),
        status: outpost_core::server::ExecutionStatus::Pending,
        created_at: wall_now().0,
        bundle: match &capability {
            CapabilitySource::Digest { sha256, .. } => Some(sha256.clone()),
            CapabilitySource::Inline { .. } => None,
        },
        capability: Some(manifest.name.clone()),
        capability_version: Some(manifest.version),
        ..ExecutionEntry::default()
    };
    let request = ExecuteRequest {
        exec_id: entry.id.as_str().into(),
        requester: Requester {
            user_id: caller.user.clone(),
        },
        target,
        environment: manifest.environment,
        capability,
        timeout_ms: manifest.limits.timeout_ms,
    };
    // Watched before it exists, so its end needs no read to be noticed.
    let end = body.wait.then(|| app.shared.ends.subscribe(&entry.id));
    // The listing row is committed with the execution's records, in one transaction.
    tracing::trace!(target: "outpost::timeline", stage = "http.submit");
    app.call_with(Input::Execute(Box::new(request)), Some(entry.clone()))
        .await?;
    tracing::trace!(target: "outpost::timeline", stage = "http.submitted");
    let entry = if body.wait {
        wait_for_end(&app, &entry.id, Duration::from_secs(body.wait_secs), end).await?
    } else {
        app.shared.store.execution(&entry.id)?.unwrap_or(entry)
    };
    tracing::trace!(target: "outpost::timeline", stage = "http.answer");
    Ok((StatusCode::CREATED, axum::Json(views::execution(&entry))).into_response())
}

/// The execution once it ended, or as it is after `limit`. `watch`, taken before the
/// execution was submitted, spares the first read: nothing can have ended it before then.
async fn wait_for_end(
    app: &App,
    id: &str,
    limit: Duration,
    mut watch: Option<EndWatch<'_>>,
) -> Result<ExecutionEntry, ApiError> {
    let deadline = tokio::time::Instant::now() + limit;
    let read = || {
        app.shared
            .store
            .execution(id)?
            .ok_or_else(|| ApiError::new(404, "execution_unknown", "no such execution"))
    };
    loop {
        let mut end = match watch.take() {
            Some(end) => end,
            None => {
                // Watching before reading: an end committed after the read still wakes this.
                let end = app.shared.ends.subscribe(id);
                let entry = read()?;
                if entry.status.is_final() {
                    return Ok(entry);
                }
                end
            }
        };
        tokio::select! {
            row = end.signalled() => {
                tracing::trace!(target: "outpost::timeline", stage = "http.ended");
                // This node committed the end: the row it wrote is the answer.
                if let Some(row) = row {
                    return Ok(Arc::unwrap_or_clone(row));
                }
            }
            () = tokio::time::sleep_until(deadline) => return read(),
        }
    }
}

/// The execution `id` if `caller` may see it (its requester, or an admin).
pub(super) fn visible(app: &App, caller: &Caller, id: &str) -> Result<ExecutionEntry, ApiError> {
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

/// `GET /v1/executions/{id}`'s query.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ShowQuery {
    /// Wait for the end this many seconds at most (at most 300 are waited).
    wait_secs: Option<u64>,
}

async fn show(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let query: ShowQuery = extract::query(req.uri())?;
    let mut entry = visible(&app, &caller, &id)?;
    if let Some(secs) = query.wait_secs {
        let secs = secs.min(MAX_WAIT_SECS);
        entry = wait_for_end(&app, &id, Duration::from_secs(secs), None).await?;
    }
    let mut shown = views::execution(&entry);
    if shown.status == ExecutionStatus::Pending {
        shown.queue = app.queue_place(&id).await?.as_ref().map(views::queue);
    }
    Ok(axum::Json(shown).into_response())
}

async fn cancel(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let entry = visible(&app, &caller, &id)?;
    if !entry.status.is_final() {
        // An execution that ended meanwhile is not an error: the answer shows its end.
        let _ = app
            .call(Input::Cancel {
                exec_id: id.as_str().into(),
            })
            .await;
    }
    let entry = visible(&app, &caller, &id)?;
    Ok(axum::Json(views::execution(&entry)).into_response())
}

/// `GET /v1/runs`'s query.
#[derive(Deserialize, JsonSchema)]
struct RunsQuery {
    /// Only the runs that asked for, or ran on, this context (a name or an id).
    context: Option<String>,
    /// Only the runs with this status (`pending`, `running`, `exited`, `failed`, …).
    status: Option<ExecutionStatus>,
    /// Only the caller's own runs (an admin sees every user's otherwise; anyone else only
    /// ever sees their own).
    mine: Option<bool>,
    /// Only this user's runs (for an admin; anyone else sees their own, so for them another
    /// name matches nothing).
    requester: Option<String>,
    /// Only the runs created at or after this Unix second.
    since: Option<u64>,
    /// The page after this one: a `next` of a previous answer.
    before: Option<String>,
    /// How many, newest first (default 50).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u32>,
}

async fn runs(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let query: RunsQuery = extract::query(req.uri())?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::new(400, "invalid_query", "limit is 1 to 500"));
    }
    let user = match (
        &query.requester,
        caller.is_admin() && !query.mine.unwrap_or(false),
    ) {
        (Some(requester), true) => Some(requester.as_str()),
        (Some(requester), false) if *requester != caller.user => {
            return Ok(axum::Json(views::Runs {
                runs: Vec::new(),
                next: None,
            })
            .into_response());
        }
        (_, true) => None,
        (_, false) => Some(caller.user.as_str()),
    };
    let filter = RunsFilter {
        user,
        context: query.context.as_deref(),
        status: query.status,
        since: query.since,
        before: query.before.as_deref(),
        limit,
    };
    let runs = app.shared.store.executions(&filter)?;
    let next = (runs.len() == limit as usize)
        .then(|| runs.last().map(|r| r.id.as_str().into()))
        .flatten();
    let runs = runs.iter().map(views::execution).collect();
    Ok(axum::Json(views::Runs { runs, next }).into_response())
}
