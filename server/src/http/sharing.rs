//! Sharing (§11.4): an operator shares a machine with every member, a member opts in (or
//! out) to run on it, and an admin removes a user from the organization. Each change is a
//! new access record fed to the dispatcher ([`Input::UpdateAccess`]), which journals it
//! (the store's access columns follow) and re-checks the runs on the machine: a run whose
//! requester lost access ends `cancelled` with the reason `access_lost`.
//!
//! This module owns how an access record is computed from the store — opt-ins count only
//! while the machine is shared, a removed user's opt-ins are dropped and a removed
//! operator's machine is marked `operatorIsMember: false` (every run there, the operator's
//! own included, is then refused `operator_left`). It never decides whether a run may go
//! somewhere: that is the core's `check_access`, on every hop.

use std::collections::HashSet;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use outpost_core::server::{ContextRecord, Input};

use super::auth::{self, ADMIN, DELETE, EXECUTE};
use super::contexts::{answer, find, lookup, shared_with_members};
use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{Auth, Carries, api};
use super::{App, Route, body, route, views};
use crate::bodies;
use crate::clock::wall_now;
use crate::store::{ContextEntry, Removal, Store, StoreError};

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "POST",
                "/v1/execution-contexts/{context}/share",
                "Share a context with every member, or stop sharing it",
            )
            .auth(Auth::Bearer(DELETE))
            .request::<bodies::ShareRequest>()
            .answer::<views::Context>(200)
            .errors(&[
                (404, "context_unknown"),
                (403, "not_yours"),
                (409, "context_revoked"),
                (503, "owner_unavailable"),
            ]),
            post(share),
        ),
        route(
            api(
                "POST",
                "/v1/execution-contexts/{context}/opt-in",
                "Opt in to run on a context shared with you",
            )
            .auth(Auth::Bearer(EXECUTE))
            .answer::<views::Context>(200)
            .errors(&[
                (404, "context_unknown"),
                (403, "not_shared"),
                (409, "own_context"),
                (409, "context_revoked"),
                (503, "owner_unavailable"),
            ]),
            post(opt_in),
        ),
        route(
            api(
                "DELETE",
                "/v1/execution-contexts/{context}/opt-in",
                "Opt out: your runs no longer go to that context",
            )
            .auth(Auth::Bearer(EXECUTE))
            .answer::<views::Context>(200)
            .errors(&[
                (404, "context_unknown"),
                (403, "not_shared"),
                (409, "own_context"),
                (409, "context_revoked"),
                (503, "owner_unavailable"),
            ]),
            axum::routing::delete(opt_out),
        ),
        route(
            api(
                "DELETE",
                "/v1/users/{name}",
                "Remove a user from the organization (admin)",
            )
            .auth(Auth::Bearer(ADMIN))
            .answer_raw(204, "removed", Carries::Nothing)
            .errors(&[
                (404, "user_unknown"),
                (409, "cannot_remove_self"),
                (503, "owner_unavailable"),
            ]),
            axum::routing::delete(remove_user),
        ),
    ]
}

/// The access record the store says `entry` should have, `removed` being the users who
/// left: opt-ins only while shared, without removed users; the operator a member unless
/// removed.
pub(crate) fn access_record(entry: &ContextEntry, removed: &HashSet<String>) -> ContextRecord {
    let opted_in = if entry.shared_with_all_members {
        entry
            .opted_in
            .iter()
            .filter(|u| !removed.contains(*u))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    ContextRecord {
        id: entry.id.as_str().into(),
        name: entry.name.clone(),
        operator: entry.operator.clone(),
        operator_is_member: !removed.contains(&entry.operator),
        shared_with_all_members: entry.shared_with_all_members,
        opted_in,
    }
}

/// Whether `record` says something `entry` (the store's copy of the last record) does not.
fn differs(entry: &ContextEntry, record: &ContextRecord) -> bool {
    entry.shared_with_all_members != record.shared_with_all_members
        || entry.opted_in != record.opted_in
        || entry.operator_is_member != record.operator_is_member
}

/// Feeds `record` to the dispatcher unless the store already holds it; whether it did.
async fn update(app: &App, entry: &ContextEntry, record: ContextRecord) -> Result<bool, ApiError> {
    if !differs(entry, &record) {
        return Ok(false);
    }
    app.call(Input::UpdateAccess(record)).await?;
    Ok(true)
}

/// Every context whose access record disagrees with the users table (a removal a crash cut
/// short), as the records it should have. Called once at start.
pub(crate) fn stale_records(store: &Store) -> Result<Vec<ContextRecord>, StoreError> {
    let removed = store.removed_users()?;
    Ok(store
        .contexts()?
        .iter()
        .map(|c| (c, access_record(c, &removed)))
        .filter(|(c, record)| differs(c, record))
        .map(|(_, record)| record)
        .collect())
}

async fn share(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, DELETE)?;
    let bytes = body::read_json(&parts.headers, raw).await?;
    let body = bodies::decode_share(&bytes)?;
    let _access = app.access.lock().await;
    let entry = find(&app, &caller, &given)?;
    if entry.revoked {
        return Err(ApiError::new(
            409,
            "context_revoked",
            "a revoked context takes no runs and cannot be shared",
        ));
    }
    let removed = app.shared.store.removed_users()?;
    let mut next = entry.clone();
    next.shared_with_all_members = body.all_members;
    if !body.all_members {
        // Unsharing drops every opt-in: sharing again asks members to opt in afresh.
        next.opted_in.clear();
    }
    if update(&app, &entry, access_record(&next, &removed)).await? {
        let (kind, detail) = if body.all_members {
            ("context_shared", "allMembers: on")
        } else {
            ("context_unshared", "allMembers: off; opt-ins dropped")
        };
        app.shared
            .store
            .audit(wall_now().0, kind, &caller.user, Some(&entry.id), detail)?;
    }
    answer(&app, &entry.id, &caller).await
}

/// The context a member names to opt in or out: shared with them, not theirs, not revoked.
fn usable(app: &App, caller: &auth::Caller, given: &str) -> Result<ContextEntry, ApiError> {
    let entry = lookup(app, caller, given)?;
    if entry.operator == caller.user {
        return Err(ApiError::new(
            409,
            "own_context",
            format!("you operate {}: your own runs need no opt-in", entry.name),
        ));
    }
    if entry.revoked {
        return Err(ApiError::new(
            409,
            "context_revoked",
            format!("{} was revoked and takes no runs", entry.name),
        ));
    }
    Ok(entry)
}

/// 403 `not_shared`.
fn not_shared(entry: &ContextEntry) -> ApiError {
    ApiError::new(
        403,
        "not_shared",
        format!(
            "{} is not shared with you; its operator can share it (`outpost context share {} --all-members on`)",
            entry.name, entry.name
        ),
    )
}

async fn opt_in(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let _access = app.access.lock().await;
    let entry = usable(&app, &caller, &given)?;
    if !shared_with_members(&entry) {
        return Err(not_shared(&entry));
    }
    let removed = app.shared.store.removed_users()?;
    let mut next = entry.clone();
    if !next.opted_in.contains(&caller.user) {
        next.opted_in.push(caller.user.clone());
    }
    if update(&app, &entry, access_record(&next, &removed)).await? {
        app.shared.store.audit(
            wall_now().0,
            "opted_in",
            &caller.user,
            Some(&entry.id),
            &entry.name,
        )?;
    }
    answer(&app, &entry.id, &caller).await
}

async fn opt_out(State(app): State<App>, PathParam(given): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), EXECUTE)?;
    let _access = app.access.lock().await;
    let entry = usable(&app, &caller, &given)?;
    if !shared_with_members(&entry) && !entry.opted_in.contains(&caller.user) {
        // Not shared with them: nothing to leave, and nothing about it to learn.
        return Err(not_shared(&entry));
    }
    let removed = app.shared.store.removed_users()?;
    let mut next = entry.clone();
    next.opted_in.retain(|u| *u != caller.user);
    if update(&app, &entry, access_record(&next, &removed)).await? {
        app.shared.store.audit(
            wall_now().0,
            "opted_out",
            &caller.user,
            Some(&entry.id),
            &entry.name,
        )?;
    }
    answer(&app, &entry.id, &caller).await
}

async fn remove_user(
    State(app): State<App>,
    PathParam(name): PathParam,
    req: Request,
) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), ADMIN)?;
    if name == caller.user {
        return Err(ApiError::new(
            409,
            "cannot_remove_self",
            "an admin cannot remove themselves; another admin can",
        ));
    }
    let _access = app.access.lock().await;
    let store = &app.shared.store;
    let now = wall_now().0;
    match store.remove_user(&name, now)? {
        Removal::Unknown => {
            return Err(ApiError::new(
                404,
                "user_unknown",
                format!("no user {name:?}"),
            ));
        }
        Removal::Removed => store.audit(now, "user_removed", &caller.user, None, &name)?,
        Removal::AlreadyRemoved => {}
    }
    // Their machines fail closed for everyone, and their opt-ins go: runs re-checked.
    let removed = store.removed_users()?;
    for entry in store.contexts()? {
        update(&app, &entry, access_record(&entry, &removed)).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
