//! Recording routes: the terminal sessions the server recorded, listed, and one read back as
//! the asciicast v2 file `asciinema play` plays.
//!
//! Who may watch a recording follows who may read the terminal's run: the user who opened it,
//! or an admin. These routes only read; the terminals actor records, the sweep removes.

use axum::extract::{Request, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use schemars::JsonSchema;
use serde::Deserialize;

use super::auth::{self, READ};
use super::error::{ApiError, ApiResult};
use super::extract::{self, PathParam};
use super::openapi::{Auth, Carries, api};
use super::{App, Route, route, views};
use crate::store::RecordingEntry;

/// The media type of a recording.
pub(crate) const ASCIICAST: &str = "application/x-asciicast";

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "GET",
                "/v1/recordings",
                "The terminal sessions recorded that you may watch, newest first",
            )
            .auth(Auth::Bearer(READ))
            .query::<ListQuery>()
            .answer::<views::Recordings>(200)
            .errors(&[(400, "invalid_query")]),
            get(list),
        ),
        route(
            api(
                "GET",
                "/v1/terminals/{terminal}/recording",
                "A terminal session's recording (asciicast v2)",
            )
            .auth(Auth::Bearer(READ))
            .answer_raw(
                200,
                "the recording so far: a header line, then one event line each",
                Carries::Bytes(ASCIICAST),
            )
            .errors(&[(404, "recording_unknown")]),
            get(show),
        ),
    ]
}

/// `GET /v1/recordings`'s query.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only this context's (its id or its name).
    context: Option<String>,
    /// How many, newest first (default 100).
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<u32>,
}

fn view(e: RecordingEntry) -> views::Recording {
    views::Recording {
        terminal_id: e.exec_id.into(),
        context: e.context_name,
        context_id: e.context_id.into(),
        opened_by: e.opened_by,
        started_at: e.started_at,
        ended_at: e.ended_at,
        size: e.size,
        records_input: e.records_input,
        truncated: e.truncated,
    }
}

async fn list(State(app): State<App>, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let query: ListQuery = extract::query(req.uri())?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(400, "invalid_query", "limit is 1 to 1000"));
    }
    let opened_by = (!caller.is_admin()).then_some(caller.user.as_str());
    let recordings = app
        .shared
        .store
        .recordings(opened_by, query.context.as_deref(), limit)?
        .into_iter()
        .map(view)
        .collect();
    Ok(axum::Json(views::Recordings { recordings }).into_response())
}

async fn show(State(app): State<App>, PathParam(id): PathParam, req: Request) -> ApiResult {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let store = &app.shared.store;
    let unknown = || {
        ApiError::new(
            404,
            "recording_unknown",
            format!("no recording of terminal {id:?} that you may watch"),
        )
    };
    let entry = store.recording(&id)?.ok_or_else(unknown)?;
    if !caller.is_admin() && entry.opened_by != caller.user {
        return Err(unknown());
    }
    let text = store.recording_text(&id)?;
    Ok((
        [
            (header::CONTENT_TYPE, ASCIICAST),
            (header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response())
}
