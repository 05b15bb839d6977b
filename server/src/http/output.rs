//! `GET /v1/executions/{id}/output` (§11.4): an execution's output as Server-Sent Events,
//! while it runs and after. Each `output` event is the next part of one stream, in the order
//! the machine sent them; its `id` is how much of each stream the follower then has, so a
//! follower that lost its connection resumes with `Last-Event-ID` (or `?stdout=&stderr=`)
//! and misses nothing. The stream ends with one `end` event carrying the execution.
//!
//! This module owns the event stream and its resumption. It never waits on the run: a
//! follower sleeps on its execution's live log ([`crate::dispatch::LiveOutputs`]) and its end
//! ([`crate::dispatch::Ends`]), and one that reads slowly only falls behind itself.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::stream;
use outpost_core::api::{Execution, OutputEvent, OutputStatus};
use outpost_core::server::ExecutionStatus;
use outpost_core::wire::OutputStream;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::auth::{self, READ};
use super::error::ApiError;
use super::extract::{self, PathParam};
use super::openapi::{Auth, Carries, api};
use super::{App, Route, forward, route, views};
use crate::dispatch::Cursor;
use crate::store::ExecutionEntry;

/// How often a quiet stream carries a comment, so proxies and followers know it lives.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long an execution may stay pending before its followers are told where it stands.
const STATUS_AFTER: Duration = Duration::from_secs(1);

/// How often a follower of a pending execution is told again where it stands (only when the
/// sentence changed: its place in the queue, the minutes left).
const STATUS_EVERY: Duration = Duration::from_secs(15);

/// Events a follower's stream holds before its task waits for the follower to read.
const BUFFERED_EVENTS: usize = 16;

pub(super) fn routes() -> Vec<Route> {
    vec![route(
        api(
            "GET",
            "/v1/executions/{id}/output",
            "Follow an execution's output as Server-Sent Events",
        )
        .auth(Auth::Bearer(READ))
        .query::<OutputQuery>()
        .answer_raw(
            200,
            "text/event-stream: `status`, then `output` events (OutputEvent), then one `end` (Execution)",
            Carries::Bytes("text/event-stream"),
        )
        .errors(&[
            (404, "execution_unknown"),
            (400, "invalid_query"),
            (400, "invalid_last_event_id"),
            (502, "node_unreachable"),
            (503, "database_unavailable"),
        ]),
        get(output),
    )]
}

/// `GET /v1/executions/{id}/output`'s query.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct OutputQuery {
    /// Keep the stream open until the execution ends (default true); false sends what there
    /// is now and closes (with `end` only if it ended).
    follow: Option<bool>,
    /// Bytes of stdout's text the caller has already (default 0, or `Last-Event-ID`'s).
    stdout: Option<u64>,
    /// Bytes of stderr's text the caller has already (default 0, or `Last-Event-ID`'s).
    stderr: Option<u64>,
}

async fn output(State(app): State<App>, PathParam(id): PathParam, req: Request) -> Response {
    match start(app, id, req).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn start(app: App, id: String, req: Request) -> Result<Response, ApiError> {
    let caller = auth::bearer(&app, req.headers(), READ)?;
    let query: OutputQuery = extract::query(req.uri())?;
    let resumed = last_event_id(req.headers())?;
    let cursor = Cursor::at(
        query.stdout.or(resumed.map(|r| r.0)).unwrap_or(0),
        query.stderr.or(resumed.map(|r| r.1)).unwrap_or(0),
    );
    super::executions::visible(&app, &caller, &id)?;
    // A run's output lives on the node its machine is connected to: asked of another node
    // of a cluster, the stream is carried from that one.
    if !forward::relayed(&app, req.headers())?
        && let Some(peer) = running_elsewhere(&app, &id).await?
    {
        return forward::relay(&app, &peer, req).await;
    }
    let (tx, rx) = mpsc::channel(BUFFERED_EVENTS);
    let follow = query.follow.unwrap_or(true);
    tokio::spawn(async move {
        if let Err(e) = feed(&app, &id, cursor, follow, &tx).await {
            // Sent as an `error` event: the status line went out already.
            let body = serde_json::json!({"error": {"code": e.code, "message": e.message}});
            let _ = tx
                .send(Event::default().event("error").data(body.to_string()))
                .await;
        }
    });
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// The other node whose machine runs execution `id` now, if it has not ended and its machine
/// is connected to another node of this cluster. An execution not placed yet is followed here
/// (its output comes at its end if it then runs elsewhere).
async fn running_elsewhere(app: &App, id: &str) -> Result<Option<forward::Peer>, ApiError> {
    let entry = stored(app, id)?;
    let Some(context) = entry.context_id.filter(|_| !entry.status.is_final()) else {
        return Ok(None);
    };
    let here = app.live_here(vec![context.clone()]).await?;
    if here.get(&context).is_some_and(|l| l.online) {
        return Ok(None);
    }
    forward::holder(app, &context).await
}

/// `Last-Event-ID: <stdout>.<stderr>`, as an `output` event's id says.
fn last_event_id(headers: &HeaderMap) -> Result<Option<(u64, u64)>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let parsed = value.to_str().ok().and_then(|v| {
        let (out, err) = v.trim().split_once('.')?;
        Some((out.parse().ok()?, err.parse().ok()?))
    });
    match parsed {
        Some(offsets) => Ok(Some(offsets)),
        None => Err(ApiError::new(
            400,
            "invalid_last_event_id",
            "Last-Event-ID is `<stdout bytes>.<stderr bytes>`, as an output event's id",
        )),
    }
}

/// A follower went away: its task stops.
struct Gone;

/// Sends the follower what it lacks, then what comes, then the end.
async fn feed(
    app: &App,
    id: &str,
    mut cursor: Cursor,
    follow: bool,
    tx: &mpsc::Sender<Event>,
) -> Result<(), ApiError> {
    let shared = &app.shared;
    // Watching before reading: an end committed after the read still wakes this.
    let mut end = shared.ends.subscribe(id);
    let entry = stored(app, id)?;
    if entry.status.is_final() {
        let _ = finish(app, id, &mut cursor, tx).await;
        return Ok(());
    }
    let mut log = shared.outputs.follow(id);
    // A run placed at once needs no word on where it stands: the status goes out only if it
    // is still pending a moment later.
    let mut status_due = (entry.status == ExecutionStatus::Pending)
        .then(|| tokio::time::Instant::now() + STATUS_AFTER);
    let mut said: Option<String> = None;
    loop {
        let read = log.read(&mut cursor);
        for (stream, offset, text) in read.pieces {
            if send(tx, output_event(stream, offset, text, &cursor))
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        if read.ended {
            break;
        }
        if !follow {
            return Ok(());
        }
        let due = status_due.unwrap_or_else(|| tokio::time::Instant::now() + KEEP_ALIVE);
        tokio::select! {
            () = log.changed() => {}
            () = tokio::time::sleep_until(due), if status_due.is_some() => {
                status_due = None;
                let now = stored(app, id)?;
                if now.status == ExecutionStatus::Pending {
                    // Said again while it waits: its place and time left change.
                    status_due = Some(tokio::time::Instant::now() + STATUS_EVERY);
                    let place = app.queue_place(id).await?;
                    let event = status_event(&now, place.as_ref());
                    if said.as_deref() != Some(event.0.as_str()) {
                        if send(tx, event.1).await.is_err() {
                            return Ok(());
                        }
                        said = Some(event.0);
                    }
                }
            }
            _ = end.signalled() => {
                // Every piece before the end was appended before the end was committed:
                // read what the log still holds, then the result.
                let rest = log.read(&mut cursor);
                for (stream, offset, text) in rest.pieces {
                    if send(tx, output_event(stream, offset, text, &cursor)).await.is_err() {
                        return Ok(());
                    }
                }
                break;
            }
        }
    }
    drop(log);
    let _ = finish(app, id, &mut cursor, tx).await;
    Ok(())
}

fn stored(app: &App, id: &str) -> Result<ExecutionEntry, ApiError> {
    app.shared
        .store
        .execution(id)?
        .ok_or_else(|| ApiError::new(404, "execution_unknown", "no such execution"))
}

/// The ended execution's text past the cursor (the result is the record: what the live log
/// missed is there), then `end`.
async fn finish(
    app: &App,
    id: &str,
    cursor: &mut Cursor,
    tx: &mpsc::Sender<Event>,
) -> Result<(), Gone> {
    let entry = stored(app, id).map_err(|_| Gone)?;
    let execution = views::execution(&entry);
    for stream in [OutputStream::Stdout, OutputStream::Stderr] {
        let text = match stream {
            OutputStream::Stdout => execution.stdout.as_deref(),
            OutputStream::Stderr => execution.stderr.as_deref(),
        }
        .unwrap_or("");
        let have = usize::try_from(cursor.of(stream)).unwrap_or(usize::MAX);
        let mut from = have;
        while from < text.len() && !text.is_char_boundary(from) {
            from += 1;
        }
        if let Some(rest) = text.get(from..).filter(|r| !r.is_empty()) {
            cursor.advance(stream, text.len() - have);
            send(
                tx,
                output_event(stream, from as u64, rest.to_owned(), cursor),
            )
            .await?;
        }
    }
    let mut ended = execution;
    // The output events carried the streams; the end carries the rest.
    (ended.stdout, ended.stderr) = (None, None);
    send(tx, end_event(&ended)).await
}

async fn send(tx: &mpsc::Sender<Event>, event: Event) -> Result<(), Gone> {
    tx.send(event).await.map_err(|_| Gone)
}

fn output_event(stream: OutputStream, offset: u64, text: String, cursor: &Cursor) -> Event {
    let body = OutputEvent {
        stream,
        offset,
        text,
    };
    Event::default()
        .event("output")
        .id(format!("{}.{}", cursor.stdout, cursor.stderr))
        .data(serde_json::to_string(&body).unwrap_or_default())
}

/// The `status` event for a pending execution, and its message (to say it only when it
/// changed).
fn status_event(
    entry: &ExecutionEntry,
    place: Option<&outpost_core::server::QueuePlace>,
) -> (String, Event) {
    let message = match (place, &entry.requested) {
        (Some(place), _) => views::queue(place).sentence(),
        (None, Some(context)) => format!("waiting for {context} to take the run"),
        (None, None) => "waiting for a machine to take the run".to_owned(),
    };
    let body = OutputStatus {
        status: ExecutionStatus::Pending,
        message: Some(message.clone()),
    };
    let event = Event::default()
        .event("status")
        .data(serde_json::to_string(&body).unwrap_or_default());
    (message, event)
}

fn end_event(execution: &Execution) -> Event {
    Event::default()
        .event("end")
        .data(serde_json::to_string(execution).unwrap_or_default())
}
