//! Host-commands switch (§11.3): the signed machine route by which a machine's owner turns
//! its commands on (`outpost context commands on`). Only this route sets the server's
//! `grant.commands.enabled` to true — a user's grant edit may only turn it off
//! (`commands_opt_in_local`) — so commands run on a machine only where its owner asked for
//! them there. Either write bumps the grant's version and pushes `grant.update`.
//!
//! The authorize hop (`POST /v1/execution-contexts/commands/authorize`, signed by the machine)
//! comes before every host command a run asks for: the server answers with a command id only
//! while the run is committed on this very machine and not finished (`run_not_live`), the
//! machine's grant has commands on (`commands_off`), and the run's requester is the machine's
//! operator and still a member now, not only when the run started (`commands_operator_only`).
//! Each authorized command is audited as `command_started` — the command cut to
//! [`AUDIT_COMMAND_CHARS`] characters, its cwd and the *names* of the variables it sets, never
//! their values (the daemon sends no values). Its end arrives as a `command.finished` frame.
//!
//! The job hop (`POST /v1/execution-contexts/commands/jobs/authorize`) comes before every
//! `poll` and `kill` of a background job and makes the same three checks, with the access of
//! now: its yes names the requester, and the daemon acts only on that requester's jobs.
//!
//! Nothing here runs a command; the daemon does, under both switches.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::response::IntoResponse;
use axum::routing::post;
use outpost_core::server::{Input, LiveRun};
use outpost_core::wire::Grant;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::openapi::{Auth, api};
use super::{App, Route, route, views};
use crate::bodies::{CommandAuthorize, CommandsSwitch, JobAuthorize};
use crate::clock::wall_now;

/// The most characters of a command kept in the audit log (the daemon cuts it too).
pub(crate) const AUDIT_COMMAND_CHARS: usize = 1000;

/// What either hop may answer: the body, then [`commands_run`]'s checks in its order.
const HOP_ERRORS: &[(u16, &str)] = &[
    (400, "invalid_body"),
    (403, "commands_off"),
    (403, "commands_operator_only"),
    (409, "run_not_live"),
    (409, "context_revoked"),
];

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "POST",
                "/v1/execution-contexts/commands/authorize",
                "Authorize one host command of a live run on this machine (the machine's own signed request)",
            )
            .auth(Auth::Signed)
            .request::<CommandAuthorize>()
            .answer::<views::CommandAuthorized>(200)
            .errors(HOP_ERRORS),
            post(authorize),
        ),
        route(
            api(
                "POST",
                "/v1/execution-contexts/commands/jobs/authorize",
                "Authorize a poll or kill of a background host command by a live run on this machine (the machine's own signed request)",
            )
            .auth(Auth::Signed)
            .request::<JobAuthorize>()
            .answer::<views::JobAuthorized>(200)
            .errors(HOP_ERRORS),
            post(authorize_job),
        ),
        route(
            api(
                "POST",
                "/v1/execution-contexts/commands",
                "Turn this machine's host commands on or off (the machine's own signed request)",
            )
            .auth(Auth::Signed)
            .request::<CommandsSwitch>()
            .answer::<views::CommandsSwitched>(200)
            .errors(&[
                (400, "invalid_body"),
                (403, "commands_disabled_on_server"),
                (409, "context_revoked"),
            ]),
            post(switch),
        ),
    ]
}

/// The checks of every hop, in order: `run_id` is live on this very machine (`run_not_live`),
/// the server allows host commands and the machine's grant has them on (`commands_off`), and the run's requester is the
/// machine's operator and a member now (`commands_operator_only`). Returns the run.
async fn commands_run(app: &App, context_id: &str, run_id: &str) -> Result<LiveRun, ApiError> {
    let run = app
        .live_run(run_id.to_owned())
        .await?
        .filter(|run| run.context_id == context_id)
        .ok_or_else(|| {
            ApiError::new(
                409,
                "run_not_live",
                format!(
                    "run {run_id:?} is not running on this machine: host commands are asked for by a live run"
                ),
            )
        })?;
    let entry = app
        .shared
        .store
        .context(context_id)?
        .ok_or_else(|| ApiError::new(401, "unknown_key", "no machine has this key"))?;
    let grant: Grant = serde_json::from_str(&entry.grant_json)
        .map_err(|e| ApiError::internal(format!("the stored grant does not read: {e}")))?;
    if !app.shared.limits.host_commands {
        return Err(ApiError::new(
            403,
            "commands_off",
            "host commands are disabled on this server (outpost serve --no-host-commands)",
        ));
    }
    if !grant.commands.enabled {
        return Err(ApiError::new(
            403,
            "commands_off",
            "host commands are off for this machine: its owner turns them on with `outpost context commands on`",
        ));
    }
    if !run.operator_now || run.requester != entry.operator {
        return Err(ApiError::new(
            403,
            "commands_operator_only",
            "host commands run only for the machine's operator",
        ));
    }
    Ok(run)
}

async fn authorize(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> ApiResult {
    let (context_id, bytes) = super::machine::machine_request(&app, addr, req, true).await?;
    let body = crate::bodies::decode_command_authorize(&bytes)?;
    let run = commands_run(&app, &context_id, &body.run_id).await?;
    let command_id = crate::secrets::new_id("cmd_")?;
    let command: String = body.command.chars().take(AUDIT_COMMAND_CHARS).collect();
    let detail = json!({
        "commandId": command_id,
        "runId": body.run_id,
        "executionId": run.exec_id,
        "command": command,
        "cwd": body.cwd,
        "envKeys": body.env_keys,
        "background": body.background,
    });
    app.shared.store.audit(
        wall_now().0,
        "command_started",
        &run.requester,
        Some(&context_id),
        &detail.to_string(),
    )?;
    Ok(axum::Json(views::CommandAuthorized {
        command_id,
        requester: run.requester,
    })
    .into_response())
}

async fn authorize_job(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> ApiResult {
    let (context_id, bytes) = super::machine::machine_request(&app, addr, req, true).await?;
    let body = crate::bodies::decode_job_authorize(&bytes)?;
    let run = commands_run(&app, &context_id, &body.run_id).await?;
    Ok(axum::Json(views::JobAuthorized {
        requester: run.requester,
    })
    .into_response())
}

async fn switch(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> ApiResult {
    let (context_id, bytes) = super::machine::machine_request(&app, addr, req, true).await?;
    let body = crate::bodies::decode_commands_switch(&bytes)?;
    if body.enabled && !app.shared.limits.host_commands {
        return Err(ApiError::new(
            403,
            "commands_disabled_on_server",
            "this server was started with --no-host-commands: no machine's host commands can be turned on",
        ));
    }
    let entry = app
        .shared
        .store
        .context(&context_id)?
        .ok_or_else(|| ApiError::new(401, "unknown_key", "no machine has this key"))?;
    let mut grant: Grant = serde_json::from_str(&entry.grant_json)
        .map_err(|e| ApiError::internal(format!("the stored grant does not read: {e}")))?;
    if grant.commands.enabled != body.enabled {
        grant.commands.enabled = body.enabled;
        app.call(Input::UpdateGrant {
            context_id: context_id.as_str().into(),
            grant,
        })
        .await?;
        app.shared.store.audit(
            wall_now().0,
            if body.enabled {
                "commands_enabled"
            } else {
                "commands_disabled"
            },
            &entry.operator,
            Some(&context_id),
            "by the machine's owner, on the machine",
        )?;
    }
    let entry = app.shared.store.context(&context_id)?.unwrap_or(entry);
    Ok(axum::Json(views::CommandsSwitched {
        enabled: body.enabled,
        grant_version: entry.grant_version,
    })
    .into_response())
}

/// 403 `commands_opt_in_local` for a user's grant edit that would turn commands on.
pub(super) fn refuse_turning_on(current: &str, next: &Grant) -> Result<(), ApiError> {
    let on_now = serde_json::from_str::<Grant>(current).is_ok_and(|g| g.commands.enabled);
    if next.commands.enabled && !on_now {
        return Err(ApiError::new(
            403,
            "commands_opt_in_local",
            "host commands are turned on only on the machine: its owner runs `outpost context commands on` there",
        ));
    }
    Ok(())
}
