//! Daemon release routes: a registered machine fetches the release document this server
//! publishes (signed by its root key; `crate::releases` writes it) and then the binary it
//! names by SHA-512. Both are signed machine requests, as bundle fetches are. Nothing here
//! signs or checks a release: the daemon verifies both against the root it pins.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{self, Auth, Carries, api};
use super::{App, Route, route};
use crate::releases::RELEASE_FILE;

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "GET",
                "/v1/execution-contexts/daemon-release",
                "The daemon release this server publishes (signed by its root key)",
            )
            .auth(Auth::Signed)
            .answer_schema(200, openapi::daemon_release)
            .errors(&[(404, "no_release")]),
            get(document),
        ),
        route(
            api(
                "GET",
                "/v1/execution-contexts/daemon-release/{sha512}",
                "The daemon binary a release names by SHA-512",
            )
            .auth(Auth::Signed)
            .params(&[("sha512", "^[0-9a-f]{128}$")])
            .answer_raw(
                200,
                "the binary",
                Carries::Bytes("application/octet-stream"),
            )
            .errors(&[(400, "invalid_digest"), (404, "release_unknown")]),
            get(binary),
        ),
    ]
}

async fn document(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> ApiResult {
    super::machine::machine_request(&app, addr, req, false).await?;
    match std::fs::read(app.releases.join(RELEASE_FILE)) {
        Ok(bytes) => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(bytes),
        )
            .into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ApiError::new(
            404,
            "no_release",
            "this server publishes no daemon release (outpost serve --publish-daemon BINARY)",
        )),
        Err(e) => Err(ApiError::internal(format!("reading the release: {e}"))),
    }
}

async fn binary(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    PathParam(sha512): PathParam,
    req: Request,
) -> ApiResult {
    super::machine::machine_request(&app, addr, req, false).await?;
    if sha512.len() != 128
        || !sha512
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(ApiError::new(
            400,
            "invalid_digest",
            "a release binary is named by 128 lowercase hex digits (its SHA-512)",
        ));
    }
    let path = app.releases.join(format!("{sha512}.bin"));
    let read = tokio::task::spawn_blocking(move || std::fs::read(&path))
        .await
        .map_err(|e| ApiError::internal(format!("reading the release binary: {e}")))?;
    match read {
        Ok(bytes) => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::from(bytes),
        )
            .into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ApiError::new(
            404,
            "release_unknown",
            "no published daemon binary has this SHA-512",
        )),
        Err(e) => Err(ApiError::internal(format!(
            "reading the release binary: {e}"
        ))),
    }
}
