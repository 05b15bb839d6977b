//! Reading request bodies: at most 1 MiB (`body_too_large`, 413), labelled JSON when labelled
//! at all (`unsupported_media_type`, 415; a bundle may also be `application/octet-stream`),
//! arrived in time (`request_timeout`, 408: the listener bounds each body,
//! `crate::inflight`). Decoding them is [`crate::bodies`]'s.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};

use super::error::ApiError;

/// The most a request body may hold.
pub(crate) const MAX_BODY: usize = 1 << 20;

fn too_large() -> ApiError {
    ApiError::new(
        413,
        "body_too_large",
        format!("a request body holds at most {MAX_BODY} bytes"),
    )
}

/// The body's bytes, refused past [`MAX_BODY`] without reading further.
pub(crate) async fn read(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|e| {
        if crate::inflight::BodyTimedOut::caused(&e) {
            timed_out()
        } else {
            too_large()
        }
    })
}

/// 408 `request_timeout`: the body did not arrive in time (its connection is closed).
pub(crate) fn timed_out() -> ApiError {
    ApiError::new(
        408,
        "request_timeout",
        "the request body did not arrive in time; send it whole, promptly",
    )
}

/// What a JSON body may be labelled: `application/json`.
pub(crate) const JSON_MEDIA: &[&str] = &["application/json"];

/// What a bundle upload may be labelled: the bundle is a JSON document, hashed as bytes, so
/// `application/json` and `application/octet-stream` (what `outpost execute` sends).
pub(crate) const BUNDLE_MEDIA: &[&str] = &["application/json", "application/octet-stream"];

/// Refuses a `Content-Type` that is none of `accepted` (parameters such as `charset` aside,
/// case-insensitively) with 415 `unsupported_media_type`; a request without one passes.
pub(crate) fn check_media(headers: &HeaderMap, accepted: &[&str]) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let media = value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase());
    if media.is_some_and(|m| accepted.contains(&m.as_str())) {
        return Ok(());
    }
    Err(ApiError::new(
        415,
        "unsupported_media_type",
        format!(
            "this body is sent as content-type: {}",
            accepted.join(" or ")
        ),
    ))
}

/// [`read`] for a route whose body is JSON: a `Content-Type` other than `application/json`
/// (parameters such as `charset` aside) is refused before the body is read. A body sent
/// without one is read as JSON.
pub(crate) async fn read_json(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    check_media(headers, JSON_MEDIA)?;
    read(headers, body).await
}
