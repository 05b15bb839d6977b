//! `GET /v1/events` (§11.4): Server-Sent Events that say which list changed — `contexts`,
//! `runs` or `audit` — so a page that keeps a list open reads it again instead of polling.
//!
//! An event carries only its topic, never a row: what the caller may see is decided by the
//! list routes it then calls. Announcements a slow reader missed become one event per topic.
//! This module owns the stream; what counts as a change is the store's and the dispatcher's.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt as _;
use futures_util::stream;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::auth::{self, READ};
use super::openapi::{Auth, Carries, api};
use super::{App, Route, route};
use crate::store::Topic;

/// How often a quiet stream carries a comment, so proxies and readers know it lives.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) fn routes() -> Vec<Route> {
    vec![route(
        api(
            "GET",
            "/v1/events",
            "Which lists changed (contexts, runs, audit), as Server-Sent Events",
        )
        .auth(Auth::Bearer(READ))
        .answer_raw(
            200,
            "text/event-stream: one `ready` event, then a `change` event ({\"topic\":\"contexts\"|\"runs\"|\"audit\"}) whenever that list changed",
            Carries::Bytes("text/event-stream"),
        ),
        get(events),
    )]
}

async fn events(State(app): State<App>, req: Request) -> Response {
    let headers = req.headers().clone();
    if let Err(e) = auth::bearer(&app, &headers, READ) {
        return e.into_response();
    }
    let (rx, closed) = app.shared.store.changes().subscribe();
    let ready = Event::default().event("ready").data("{}");
    // Each step waits for the next announcement and takes those already waiting with it, so
    // a burst of commits is one event per topic. The token is checked again before each
    // step's events leave: a token revoked meanwhile ends the stream, as does the server's
    // stop.
    let changes = stream::unfold((rx, closed), move |(mut rx, mut closed)| {
        let app = app.clone();
        let headers = headers.clone();
        async move {
            let mut topics = BTreeSet::new();
            if *closed.borrow() {
                return None;
            }
            tokio::select! {
                got = rx.recv() => match got {
                    Ok(topic) => {
                        topics.insert(topic);
                    }
                    Err(RecvError::Lagged(_)) => topics.extend(Topic::ALL),
                    Err(RecvError::Closed) => return None,
                },
                _ = closed.changed() => return None,
            }
            loop {
                match rx.try_recv() {
                    Ok(topic) => {
                        topics.insert(topic);
                    }
                    Err(TryRecvError::Lagged(_)) => topics.extend(Topic::ALL),
                    Err(_) => break,
                }
            }
            auth::bearer(&app, &headers, READ).ok()?;
            let batch: Vec<Result<Event, Infallible>> = topics
                .into_iter()
                .map(|t| {
                    Ok(Event::default()
                        .event("change")
                        .data(format!("{{\"topic\":\"{}\"}}", t.as_str())))
                })
                .collect();
            Some((stream::iter(batch), (rx, closed)))
        }
    });
    let all = stream::once(async move { Ok::<_, Infallible>(ready) }).chain(changes.flatten());
    Sse::new(all)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
