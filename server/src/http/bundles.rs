//! Bundle routes (§11.4): a user uploads a capability too large to send inline under its
//! SHA-256; a daemon fetches it with a signed request when a run names it by digest.
//!
//! An upload streams to a temporary file in the state folder while it is hashed — at most
//! [`Limits::concurrent_uploads`](crate::Limits) at once, within the user's quota of stored
//! bytes — and only a body whose digest is the one named is checked (one check at a time,
//! holding that one bundle's bytes: the format, the manifest and every path, exactly as an
//! inline capability is) and stored. A fetch streams the file. Nothing here runs or unpacks a
//! bundle.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, put};
use futures_util::StreamExt as _;
use outpost_core::manifest::Manifest;
use outpost_core::wire::{BundleDoc, MAX_BUNDLE_BYTES};
use serde_json::json;
use sha2::Digest as _;
use tokio::io::AsyncReadExt as _;

use super::auth::{self, EXECUTE};
use super::error::{ApiError, ApiResult};
use super::extract::PathParam;
use super::openapi::{Auth, Carries, api};
use super::{App, Route, body, route, views};
use crate::bodies::check_digest;
use crate::clock::wall_now;
use crate::inflight::BodyTimedOut;
use crate::store::{NewBundle, Stored};

/// A bundle's name in a path.
const DIGEST_PARAM: &[(&str, &str)] = &[("sha256", crate::bodies::DIGEST_PATTERN)];

/// How much of a bundle file a fetch reads at a time.
const CHUNK: usize = 64 * 1024;
/// How many received chunks an upload's writer may be behind.
const WRITES_AHEAD: usize = 8;

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
                (400, "invalid_body"),
                (408, "request_timeout"),
                (413, "bundle_too_large"),
                (413, "quota_exceeded"),
                (415, "unsupported_media_type"),
                (429, "rate_limited"),
                (503, "uploads_busy"),
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

fn unknown(sha256: &str) -> ApiError {
    ApiError::new(
        404,
        "bundle_unknown",
        format!("no bundle has the digest {sha256}: upload it first (PUT /v1/bundles/{sha256})"),
    )
}

/// The manifest of the stored bundle `sha256`, which must hold `size` bytes, marking it used
/// (its content was checked when it was stored).
pub(super) fn stored_manifest(app: &App, sha256: &str, size: u64) -> Result<Manifest, ApiError> {
    let row = app
        .shared
        .store
        .use_bundle(sha256, wall_now().0)?
        .ok_or_else(|| unknown(sha256))?;
    if row.size != size {
        return Err(ApiError::new(
            400,
            "digest_mismatch",
            format!("the bundle {sha256} holds {} bytes, not {size}", row.size),
        ));
    }
    let text = row.manifest.ok_or_else(|| {
        ApiError::new(
            400,
            "invalid_bundle",
            format!("the bundle {sha256} does not read"),
        )
    })?;
    outpost_host::parse_manifest(&text).map_err(|e| ApiError::new(400, e.code(), e.to_string()))
}

fn too_large() -> ApiError {
    ApiError::new(
        413,
        "bundle_too_large",
        format!("a bundle holds at most {MAX_BUNDLE_BYTES} bytes"),
    )
}

fn over_quota(app: &App, used: u64, adding: u64) -> ApiError {
    ApiError::new(
        413,
        "quota_exceeded",
        format!(
            "your bundles hold {used} bytes and this one {adding}; at most {} are kept for one user (unused bundles go after {} s)",
            app.shared.limits.bundle_quota,
            app.shared.limits.bundle_retention.as_secs()
        ),
    )
}

/// An upload's temporary file, removed unless it was stored.
struct Upload(Option<PathBuf>);

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn upload(State(app): State<App>, PathParam(sha256): PathParam, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let caller = auth::bearer(&app, &parts.headers, EXECUTE)?;
    check_digest(&sha256)?;
    super::body::check_media(&parts.headers, super::body::BUNDLE_MEDIA)?;
    let limits = &app.shared.limits;
    let store = app.shared.store.clone();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BUNDLE_BYTES) {
        return Err(too_large());
    }
    let used = store.bundle_bytes_of(&caller.user)?;
    if let Some(n) = declared
        && used.saturating_add(n) > limits.bundle_quota
    {
        return Err(over_quota(&app, used, n));
    }
    let Ok(_permit) = app.uploads.clone().try_acquire_owned() else {
        let mut busy = ApiError::new(
            503,
            "uploads_busy",
            format!(
                "{} bundle uploads are under way, the most at once; retry shortly",
                limits.concurrent_uploads
            ),
        );
        busy.retry_after = Some(crate::Limits::UPLOADS_BUSY_RETRY_SECS);
        return Err(busy);
    };

    // The body goes to a file as it arrives, hashed on the way.
    let token = outpost_core::b64::encode(&crate::secrets::random::<12>()?);
    let path = store.bundle_upload_path(&token);
    let mut guard = Upload(Some(path.clone()));
    let (actual, size) = receive(&app, raw, &path, used).await?;
    if actual != sha256 {
        return Err(ApiError::new(
            400,
            "digest_mismatch",
            format!("the body's SHA-256 is {actual}, not {sha256}"),
        ));
    }

    // One check at a time: a check holds the bundle's bytes.
    let checked = {
        let _check = app.checks.acquire().await.map_err(ApiError::internal)?;
        let reading = path.clone();
        tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(&reading)?;
            Ok::<_, std::io::Error>(crate::bodies::check_bundle(&bytes))
        })
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)??
    };
    let bundle = NewBundle {
        sha256: &sha256,
        upload: &path,
        size,
        manifest: &checked.manifest_text,
        user: &caller.user,
    };
    let stored = store.put_bundle(bundle, wall_now().0, limits.bundle_quota)?;
    let status = match stored {
        Stored::Added => {
            guard.0 = None;
            StatusCode::CREATED
        }
        Stored::Existed => StatusCode::OK,
        Stored::OverQuota { used } => return Err(over_quota(&app, used, size)),
    };
    Ok((status, axum::Json(json!({"sha256": sha256, "size": size}))).into_response())
}

/// Writes an upload's body to the new file `path` as it arrives — one blocking thread writes,
/// at most a few chunks behind — and hashes it; refuses it past the largest bundle or the
/// quota `used` leaves. Returns its SHA-256 and size once the file is synced.
async fn receive(app: &App, raw: Body, path: &Path, used: u64) -> Result<(String, u64), ApiError> {
    let quota = app.shared.limits.bundle_quota;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .await
        .map_err(ApiError::internal)?
        .into_std()
        .await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(WRITES_AHEAD);
    let writer = tokio::task::spawn_blocking(move || {
        while let Some(chunk) = rx.blocking_recv() {
            file.write_all(&chunk)?;
        }
        file.sync_all()
    });
    let mut hasher = sha2::Sha256::new();
    let mut size: u64 = 0;
    let mut chunks = raw.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            if BodyTimedOut::caused(&e) {
                body::timed_out()
            } else {
                ApiError::new(
                    400,
                    "invalid_body",
                    format!("the body could not be read: {e}"),
                )
            }
        })?;
        size += chunk.len() as u64;
        if size > MAX_BUNDLE_BYTES {
            return Err(too_large());
        }
        if used.saturating_add(size) > quota {
            return Err(over_quota(app, used, size));
        }
        hasher.update(&chunk);
        if tx.send(chunk).await.is_err() {
            // The writer stopped: its error is below.
            break;
        }
    }
    drop(tx);
    writer
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    Ok((hex::encode(hasher.finalize()), size))
}

async fn fetch(
    State(app): State<App>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    PathParam(sha256): PathParam,
    req: Request,
) -> ApiResult {
    use super::machine::{Metered, metered_machine_request};
    metered_machine_request(&app, addr, req, false, Metered::AddressOnly).await?;
    check_digest(&sha256)?;
    let store = &app.shared.store;
    let row = store
        .use_bundle(&sha256, wall_now().0)?
        .ok_or_else(|| unknown(&sha256))?;
    // Another node of the cluster may have taken the upload: its bytes come from the row.
    let path = store
        .bundle_file(&sha256)?
        .ok_or_else(|| unknown(&sha256))?;
    let file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unknown(&sha256)),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, row.size.to_string()),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}
