//! The one error answer of every route: `{"error":{"code","message"}}` with a status, and
//! `Retry-After` for `rate_limited`. Internal failures answer 500 `internal` without their
//! detail (which goes to the log); nothing a client sends reaches that path.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An error answer.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    /// An answer with `status`, `code` and `message`.
    pub(crate) fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            code: code.to_owned(),
            message: message.into(),
            retry_after: None,
        }
    }

    /// 500 `internal`: the server failed; the cause is logged, not sent.
    pub(crate) fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "a request failed inside the server");
        Self::new(500, "internal", "the server failed; see its log")
    }

    /// 429 `rate_limited`.
    pub(crate) fn rate_limited(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "rate_limited",
            format!("too many requests; retry in {retry_after} s"),
        );
        e.retry_after = Some(retry_after);
        e
    }
}

impl From<crate::bodies::BodyError> for ApiError {
    fn from(e: crate::bodies::BodyError) -> Self {
        Self::new(400, e.code(), e.message())
    }
}

impl From<crate::secrets::RandomError> for ApiError {
    fn from(e: crate::secrets::RandomError) -> Self {
        tracing::error!(error = %e, "a request could not draw randomness");
        Self::new(
            503,
            "random_unavailable",
            "the server cannot draw randomness now; retry later",
        )
    }
}

impl ApiError {
    /// 503 `node_cut_off`: this node could not write its heartbeat lately, so it takes no
    /// daemon connection now (another node may).
    pub(crate) fn cut_off() -> Self {
        let mut answer = Self::new(
            503,
            "node_cut_off",
            "this node cannot write its heartbeat to the database and takes no daemon connection now; connect again shortly, to any node",
        );
        answer.retry_after = Some(2);
        answer
    }

    /// 409 `context_owned_elsewhere`: the request names a machine whose daemon is connected
    /// to another node of the cluster, and this node hands nothing over to another yet.
    pub(crate) fn owned_elsewhere(context_id: &str) -> Self {
        Self::new(
            409,
            "context_owned_elsewhere",
            format!(
                "context {context_id} is connected to another node of this cluster, which alone may change or ask it now; send the request to that node (GET /v1/nodes lists each node's sessions)"
            ),
        )
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        if e.is_unavailable() {
            tracing::warn!(error = %e, "the database does not answer");
            let mut answer = Self::new(
                503,
                "database_unavailable",
                "the server's database does not answer; nothing was stored, retry shortly",
            );
            answer.retry_after = Some(2);
            return answer;
        }
        Self::internal(e)
    }
}

/// The body of every error answer: `{"error":{"code","message"}}`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
#[schemars(rename = "Error")]
pub(crate) struct ErrorAnswer {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
struct ErrorDetail {
    /// A stable `snake_case` code.
    #[schemars(regex(pattern = "^[a-z0-9_]+$"))]
    code: String,
    /// What was wrong and what to do, for a person.
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body_code = self.code.clone();
        let body = ErrorAnswer {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        response
            .extensions_mut()
            .insert(super::access::AnswerCode(body_code));
        if let Some(secs) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// What every handler returns.
pub(crate) type ApiResult = Result<Response, ApiError>;
