//! The path extractor and the query reader of the routes: axum's, with their refusals answered
//! as the API's JSON errors (`invalid_path`, `invalid_query`, 400) instead of axum's plain
//! text. A query is read by the handler after its credentials are checked, never by an
//! extractor that runs before them.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A route's one path parameter, percent-decoded.
pub(crate) struct PathParam(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(value)) if value.chars().any(char::is_control) => Err(ApiError::new(
                400,
                "invalid_path",
                "the path is not valid: it holds a control character (%00 to %1F or %7F), which no name or id has",
            )),
            Ok(Path(value)) => Ok(Self(value)),
            Err(e) => Err(ApiError::new(
                400,
                "invalid_path",
                format!("the path is not valid: {}", e.body_text()),
            )),
        }
    }
}

/// The query string read into `T` (`invalid_query`, 400). A route calls this only after it
/// checked the caller's credentials, so a request with a bad query and no token answers 401,
/// not 400: nothing of a request is judged before who sent it.
pub(crate) fn query<T: DeserializeOwned>(uri: &axum::http::Uri) -> Result<T, ApiError> {
    match Query::<T>::try_from_uri(uri) {
        Ok(Query(value)) => Ok(value),
        Err(e) => Err(ApiError::new(
            400,
            "invalid_query",
            format!("the query string is not valid: {}", e.body_text()),
        )),
    }
}

/// The `ticket` of a WebSocket URL's query (empty when there is none): the one credential a
/// socket route takes, since a browser cannot set headers on a WebSocket.
pub(crate) fn ticket_query(uri: &axum::http::Uri) -> String {
    uri.query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("ticket="))
        .unwrap_or("")
        .to_owned()
}
