//! Context routes (§11.4): list, show, change the grant, revoke, delete; and the caller's
//! chain. A context shared with every member is listed and shown to every member; only its
//! operator (or an admin) changes it. Changes go through the dispatcher (which journals
//! them) before the answer.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, patch, post};
use outpost_core::routing::{CLOUD_ID, Chain, ChainEntry};
use outpost_core::server::Input;
use outpost_core::wire::Grant;

use super::auth::{self, Caller, DELETE, EXECUTE, READ};
use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{Auth, Carries, api};
use super::{App, Route, body, route, views};
use crate::bodies;
use crate::clock::wall_now;
use crate::dispatch::Live;
use crate::store::ContextEntry;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "GET",
                "/v1/execution-contexts",
                "The caller's contexts and those shared with every member",
            )
            .auth(Auth::Bearer(READ))
            .answer::<views::Contexts>(200),
            get(list),
        ),
        route(
            api(
                "GET",
                "/v1/execution-contexts/{context}",
                "One context, by name or id",
            )
            .auth(Auth::Bearer(READ))
            .answer::<views::Context>(200)
            .errors(&[(404, "context_unknown"), (403, "not_yours")]),
            get(show),
        ),
        route(
            api(
                "PATCH",
                "/v1/execution-contexts/{context}/grant",
                "Replace a context's grant",
            )
            .auth(Auth::Bearer(DELETE))
            .request::<Grant>()
            .answer::<views::Context>(200)
            .errors(&[
                (404, "context_unknown"),
                (403, "not_yours"),
                (403, "commands_opt_in_local"),
                (409, "context_revoked"),
                (503, "owner_unavailable"),
            ]),
            patch(grant),
        ),
        route(
            api(
                "POST",
                "/v1/execution-contexts/{context}/daemon",
                "Ask a context's daemon to pause, resume, restart, update now, or send its recent log lines",
            )
            .auth(Auth::Bearer(DELETE))
            .request::<outpost_core::api::DaemonControl>()
            .answer::<outpost_core::api::DaemonControlled>(200)
            .errors(&[
                (400, "invalid_body"),
                (404, "context_unknown"),
                (403, "not_yours"),
                (409, "context_revoked"),
                (409, "daemon_offline"),
                (409, "control_unsupported"),
                (504, "daemon_no_answer"),
            ]),
            post(control),
        ),
        route(
            api(
                "POST",
                "/v1/execution-contexts/{context}/revoke",
                "Revoke a context for good",
            )
            .auth(Auth::Bearer(DELETE))
            .answer::<views::Context>(200)
            .errors(&[
                (404, "context_unknown"),
                (403, "not_yours"),
                (503, "owner_unavailable"),
            ]),
            post(revoke),
        ),
        route(
            api(
                "DELETE",
                "/v1/execution-contexts/{context}",
                "Delete a revoked context",
            )
            .auth(Auth::Bearer(DELETE))
            .answer_raw(204, "deleted", Carries::Nothing)
            .errors(&[
                (404, "context_unknown"),
                (403, "not_yours"),
                (409, "context_not_revoked"),
            ]),
            axum::routing::delete(delete),
        ),
        route(
            api("GET", "/v1/chain", "The caller's chain")
                .auth(Auth::Bearer(EXECUTE))
                .answer::<views::ChainShown>(200),
            get(get_chain),
        ),
        route(
            api("PUT", "/v1/chain", "Set the caller's chain")
                .auth(Auth::Bearer(EXECUTE))
                .request::<bodies::ChainRequest>()
                .answer::<views::ChainShown>(200)
                .errors(&[
                    (400, "invalid_chain"),
                    (404, "context_unknown"),
                    (409, "context_revoked"),
                ]),
            axum::routing::put(put_chain),
        ),
    ]
}

/// The context `given` names: an id, else a name among the caller's own (live first), then
/// among those shared with the caller, then any. Not checked to be the caller's.
pub(super) fn lookup(app: &App, caller: &Caller, given: &str) -> Result<ContextEntry, ApiError> {
    let contexts = app.shared.store.contexts()?;
    let named = |c: &&ContextEntry| c.name == given;
    let own = |c: &&ContextEntry| c.operator == caller.user;
    contexts
        .iter()
        .find(|c| c.id == given)
        .or_else(|| contexts.iter().filter(named).find(|c| own(c) && !c.revoked))
        .or_else(|| contexts.iter().filter(named).find(own))
        .or_else(|| {
            contexts
                .iter()
                .filter(named)
                .find(|c| shared_with_members(c))
        })
        .or_else(|| contexts.iter().filter(named).find(|c| !c.revoked))
        .or_else(|| contexts.iter().find(named))
        .cloned()
        .ok_or_else(|| ApiError::new(404, "context_unknown", format!("no context {given:?}")))
}

/// Whether every member may use the context now (shared and not revoked).
pub(super) fn shared_with_members(entry: &ContextEntry) -> bool {
    entry.shared_with_all_members && !entry.revoked
}

/// The context `given` names, checked to be the caller's (or the caller an admin).
pub(super) fn find(app: &App, caller: &Caller, given: &str) -> Result<ContextEntry, ApiError> {
    let found = lookup(app, caller, given)?;
    caller.owns(&found.operator)?;
    Ok(found)
}

/// The Context of `id` as `caller` sees it now.
pub(super) async fn answer(app: &App, id: &str, caller: &Caller) -> ApiResult {
    let entry = app
        .shared
        .store
        .context(id)?
        .ok_or_else(|| ApiError::new(404, "context_unknown", "the context is gone"))?;
    let live = app.live(vec![entry.id.clone()]).await?;
    let live = live.get(&entry.id).cloned().unwrap_or_default();
    let limits = &app.shared.limits;
    let view = views::context(
        &entry,
        live,
        caller,
        (limits.host_commands, limits.record_terminal_input),
    );
    Ok(axum::Json(view).into_response())
}

async fn list(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let contexts: Vec<ContextEntry> = app
        .shared
        .store
        .contexts()?
        .into_iter()
        .filter(|c| caller.is_admin() || c.operator == caller.user || shared_with_members(c))
        .collect();
    let live = app
        .live(contexts.iter().map(|c| c.id.clone()).collect())
        .await?;
    let out: Vec<_> = contexts
        .iter()
        .map(|c| {
            views::context(
                c,
                live.get(&c.id).cloned().unwrap_or(Live::default()),
                &caller,
                (
                    app.shared.limits.host_commands,
                    app.shared.limits.record_terminal_input,
                ),
            )
        })
        .collect();
    Ok(axum::Json(views::Contexts { contexts: out }).into_response())
}

async fn show(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let entry = lookup(&app, &caller, &given)?;
    if !shared_with_members(&entry) {
        caller.owns(&entry.operator)?;
    }
    answer(&app, &entry.id, &caller).await
}

async fn grant(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, DELETE)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let grant = bodies::decode_grant(&bytes)?;
    let entry = find(&app, &caller, &given)?;
    if entry.revoked {
        return Err(ApiError::new(
            409,
            "context_revoked",
            "a revoked context keeps its grant",
        ));
    }
    super::commands::refuse_turning_on(&entry.grant_json, &grant)?;
    let detail = String::from_utf8_lossy(&bytes).into_owned();
    app.call(Input::UpdateGrant {
        context_id: entry.id.as_str().into(),
        grant,
    })
    .await?;
    app.shared.store.audit(
        wall_now().0,
        "grant_updated",
        &caller.user,
        Some(&entry.id),
        &detail,
    )?;
    answer(&app, &entry.id, &caller).await
}

/// Asks the context's daemon something from afar, audits what came of it (`daemon_control`,
/// whatever the outcome), and answers with the daemon's answer — 200 whether it did it or its
/// owner refused; 409 when no daemon could be asked.
async fn control(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, DELETE)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let asked = bodies::decode_daemon_control(&bytes)?;
    let entry = find(&app, &caller, &given)?;
    if entry.revoked {
        return Err(ApiError::new(
            409,
            "context_revoked",
            "a revoked context has no daemon to ask",
        ));
    }
    let control_id = crate::secrets::new_id("ctl_")
        .map_err(|e| ApiError::new(503, "unavailable", e.to_string()))?;
    let order = outpost_core::session::ControlOrder {
        control_id: control_id.clone(),
        action: asked.action,
        lines: asked.lines.unwrap_or(0),
    };
    let answer = app.control(entry.id.clone(), order).await;
    let (outcome, code) = match &answer {
        Ok(a) => (a.outcome.as_str(), a.code.clone()),
        Err(e) => ("failed", e.code.to_string()),
    };
    let detail = serde_json::json!({
        "controlId": control_id,
        "action": asked.action,
        "outcome": outcome,
        "code": (!code.is_empty()).then_some(code),
    });
    app.shared.store.audit(
        wall_now().0,
        "daemon_control",
        &caller.user,
        Some(&entry.id),
        &detail.to_string(),
    )?;
    let answer = answer?;
    if !answer.from_daemon {
        let status = if answer.code == "context_unknown" {
            404
        } else {
            409
        };
        return Err(ApiError::new(status, &answer.code, answer.message));
    }
    let body = outpost_core::api::DaemonControlled {
        context_id: entry.id.as_str().into(),
        control_id,
        action: asked.action,
        outcome: answer.outcome,
        code: (!answer.code.is_empty()).then_some(answer.code),
        message: answer.message,
        lines: answer.lines,
    };
    Ok(axum::Json(body).into_response())
}

async fn revoke(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), DELETE)?;
    let entry = find(&app, &caller, &given)?;
    if !entry.revoked {
        app.call(Input::Revoke {
            context_id: entry.id.as_str().into(),
        })
        .await?;
        // Its daemon stops for good: nothing will check or report its waits any more.
        let ended = app
            .shared
            .store
            .end_waits_of_revoked(&entry.id, crate::clock::wall_now_ms())?;
        if ended > 0 {
            tracing::info!(context = %entry.id, ended, "the revoked context's waits ended");
        }
        app.shared.store.audit(
            wall_now().0,
            "context_revoked",
            &caller.user,
            Some(&entry.id),
            &entry.name,
        )?;
    }
    answer(&app, &entry.id, &caller).await
}

async fn delete(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), DELETE)?;
    let entry = find(&app, &caller, &given)?;
    if !entry.revoked {
        return Err(ApiError::new(
            409,
            "context_not_revoked",
            "revoke the context before deleting it",
        ));
    }
    for (user, chain) in app.shared.store.chains_naming(&entry.id)? {
        let kept: Vec<ChainEntry> = chain
            .entries()
            .iter()
            .filter(|e| e.id() != entry.id)
            .cloned()
            .collect();
        if let Ok(chain) = Chain::new(kept) {
            app.call(Input::SetChain {
                user_id: user,
                chain,
            })
            .await?;
        }
    }
    app.shared.store.delete_context(&entry.id)?;
    app.shared.store.audit(
        wall_now().0,
        "context_deleted",
        &caller.user,
        Some(&entry.id),
        &entry.name,
    )?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A chain as routes answer it: `chain` the entries' ids (and `cloud`), `entries` each id
/// with the name a person knows it by.
fn chain_body(app: &App, chain: &Chain) -> Result<views::ChainShown, ApiError> {
    let mut entries = Vec::new();
    for entry in chain.entries() {
        let name = match entry {
            ChainEntry::Cloud => Some(CLOUD_ID.to_owned()),
            ChainEntry::Context(id) => app.shared.store.context(id)?.map(|c| c.name),
        };
        entries.push(views::ChainEntryView {
            id: entry.id().to_owned(),
            name,
        });
    }
    Ok(views::ChainShown {
        chain: entries.iter().map(|e| e.id.clone()).collect(),
        entries,
    })
}

async fn get_chain(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let chain = app.shared.store.chain(&caller.user)?.unwrap_or_default();
    Ok(axum::Json(chain_body(&app, &chain)?).into_response())
}

async fn put_chain(State(app): State<App>, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, EXECUTE)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let body = bodies::decode_chain(&bytes)?;
    let mut entries = Vec::new();
    for given in &body.chain {
        let id = super::executions::resolve_context(&app, &caller, given)?;
        entries.push(if id == CLOUD_ID {
            ChainEntry::Cloud
        } else {
            ChainEntry::Context(id)
        });
    }
    let chain = Chain::new(entries)
        .map_err(|e| ApiError::new(400, "invalid_chain", format!("{e} ({})", e.code())))?;
    app.call(Input::SetChain {
        user_id: caller.user.clone(),
        chain: chain.clone(),
    })
    .await?;
    let shown = chain_body(&app, &chain)?;
    let names: Vec<String> = shown
        .entries
        .iter()
        .map(|e| e.name.clone().unwrap_or_else(|| e.id.clone()))
        .collect();
    app.shared.store.audit(
        wall_now().0,
        "chain_updated",
        &caller.user,
        None,
        &format!("chain: {}", names.join(" → ")),
    )?;
    Ok(axum::Json(shown).into_response())
}
