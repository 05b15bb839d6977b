//! Bundle routes (§11.4): a user uploads a capability too large to send inline under its
//! SHA-256; a daemon fetches it with a signed request when a run names it by digest.
//!
//! An upload is checked whole before it is stored: the digest of the bytes, the bundle
//! format, the manifest and every path, exactly as an inline capability is. Nothing here runs
//! or unpacks a bundle.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, put};
use outpost_core::manifest::Manifest;
use outpost_core::wire::{
    BundleDoc, CapabilitySource, MAX_BUNDLE_BYTES, bundle_digest, decode_bundle,
};
use serde_json::json;

use super::auth::{self, EXECUTE};
use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{Auth, Carries, api};
use super::{App, Route, route, views};
use crate::bodies::{check_digest, check_inline};
use crate::clock::wall_now;

/// A bundle's name in a path.
const DIGEST_PARAM: &[(&str, &str)] = &[("sha256", crate::bodies::DIGEST_PATTERN)];

pub(super) fn routes() -> Vec<Route> {
    vec![
        route(
            api(
                "PUT",
                "/v1/bundles/{sha256}",
                "Upload a capability bundle under its SHA-256 (the body is the bundle)",
            )
            .auth(Auth::Bearer(EXECUTE))
            .request_as::<BundleDoc>(super::body::BUNDLE_MEDIA)
            .params(DIGEST_PARAM)
            .answer_when::<views::Bundle>(201, "stored")
            .answer_when::<views::Bundle>(200, "already stored: nothing changed")
            .errors(&[
                (400, "invalid_digest"),
                (400, "digest_mismatch"),
                (400, "invalid_bundle"),
                (400, "invalid_manifest"),
                (413, "bundle_too_large"),
                (415, "unsupported_media_type"),
            ]),
            put(upload),
        ),
        route(
            api(
                "GET",
                "/v1/execution-contexts/bundles/{sha256}",
                "Fetch a capability bundle a run names by digest",
            )
            .auth(Auth::Signed)
            .params(DIGEST_PARAM)
            .answer_raw(
                200,
                "the bundle's bytes",
                Carries::Bytes("application/octet-stream"),
            )
            .errors(&[(400, "invalid_digest"), (404, "bundle_unknown")]),
            get(fetch),
        ),
    ]
}

/// The manifest of the stored bundle `sha256`, which must hold `size` bytes; its content is
/// checked as an inline capability's is.
pub(super) fn stored_manifest(app: &App, sha256: &str, size: u64) -> Result<Manifest, ApiError> {
    let bytes = app.shared.store.bundle(sha256)?.ok_or_else(|| {
        ApiError::new(
            404,
            "bundle_unknown",
            format!(
                "no bundle has the digest {sha256}: upload it first (PUT /v1/bundles/{sha256})"
            ),
        )
    })?;
    if bytes.len() as u64 != size {
        return Err(ApiError::new(
            400,
            "digest_mismatch",
            format!(
                "the bundle {sha256} holds {} bytes, not {size}",
                bytes.len()
            ),
        ));
    }
    bundle_manifest(&bytes)
}

/// A bundle's manifest, after the checks an inline capability gets.
fn bundle_manifest(bytes: &[u8]) -> Result<Manifest, ApiError> {
    match decode_bundle(bytes).map_err(|e| ApiError::new(400, e.code(), e.to_string()))? {
        CapabilitySource::Inline { manifest, files } => Ok(check_inline(&manifest, &files)?),
        CapabilitySource::Digest { .. } => Err(ApiError::new(
            400,
            "invalid_bundle",
            "a bundle cannot name another bundle",
        )),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        413,
        "bundle_too_large",
        format!("a bundle holds at most {MAX_BUNDLE_BYTES} bytes"),
    )
}

async fn upload(State(app): State<App>, PathParam(sha256): PathParam, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, EXECUTE)?;
    check_digest(&sha256)?;
    super::body::check_media(&parts.headers, super::body::BUNDLE_MEDIA)?;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BUNDLE_BYTES) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(raw, MAX_BUNDLE_BYTES as usize)
        .await
        .map_err(|_| too_large())?;
    let actual = bundle_digest(&bytes);
    if actual != sha256 {
        return Err(ApiError::new(
            400,
            "digest_mismatch",
            format!("the body's SHA-256 is {actual}, not {sha256}"),
        ));
    }
    bundle_manifest(&bytes)?;
    let added = app
        .shared
        .store
        .put_bundle(&sha256, &bytes, &caller.user, wall_now().0)?;
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        axum::Json(json!({"sha256": sha256, "size": bytes.len()})),
    )
        .into_response())
}

async fn fetch(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    PathParam(sha256): PathParam,
    req: Request,
) -> ApiResult {
    super::machine::machine_request(&app, addr, req, false).await?;
    check_digest(&sha256)?;
    let bytes = app
        .shared
        .store
        .bundle(&sha256)?
        .ok_or_else(|| ApiError::new(404, "bundle_unknown", "no bundle has this digest"))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from(bytes),
    )
        .into_response())
}
