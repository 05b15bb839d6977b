//! Reading request bodies: at most 1 MiB (`body_too_large`, 413), labelled JSON when labelled
//! at all (`unsupported_media_type`, 415), arrived in time (`request_timeout`, 408: the
//! listener bounds each body, `crate::inflight`). Decoding them is [`crate::bodies`]'s.

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

/// [`read`] for a route whose body is JSON: a `Content-Type` other than `application/json`
/// (parameters such as `charset` aside) is refused before the body is read. A body sent
/// without one is read as JSON.
pub(crate) async fn read_json(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    if let Some(value) = headers.get(header::CONTENT_TYPE) {
        let media = value
            .to_str()
            .ok()
            .and_then(|v| v.split(';').next())
            .map(|m| m.trim().to_ascii_lowercase());
        if media.as_deref() != Some("application/json") {
            return Err(ApiError::new(
                415,
                "unsupported_media_type",
                "the body must be JSON, sent as content-type: application/json",
            ));
        }
    }
    read(headers, body).await
}
