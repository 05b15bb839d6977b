//! Reading request bodies: at most 1 MiB (`body_too_large`, 413), parsed by the core's strict
//! JSON reader (duplicate keys, floats and the like refused with their §10 code), then read
//! into a typed structure (`invalid_body`, naming the member).

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

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
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| too_large())
}

/// Parses `bytes` as strict JSON into `T`.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid_body("a JSON body is required"));
    }
    let value = outpost_core::json::parse_strict(bytes)
        .map_err(|e| ApiError::new(400, e.code(), format!("the body is not strict JSON: {e}")))?;
    value.deserialize_into().map_err(|e| {
        ApiError::invalid_body(format!("the body does not have the expected members: {e}"))
    })
}
