//! The web UI: the page at `GET /` and its files under `/ui/`, compiled into the binary
//! (`server/ui/`), and xterm.js as [`super::xterm`] reads it at run time from the system's
//! package.
//!
//! The page is a client of the JSON API, not part of it, so its routes are not in the route
//! table and not in the OpenAPI document. Every answer carries a Content-Security-Policy that
//! lets a page load nothing from another host (scripts, styles, images, connections other than
//! this origin's HTTP and WebSocket). These handlers never read a token: the page sends it to
//! the API itself.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, App};

const INDEX: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const CONTEXT_JS: &str = include_str!("../../ui/context.js");
const LIVE_JS: &str = include_str!("../../ui/live.js");
const APP_CSS: &str = include_str!("../../ui/app.css");

/// The policy every UI answer carries; `connect-src` names this origin's WebSocket schemes
/// when the request's `Host` is a plain host name (or address) and port.
pub(crate) fn content_security_policy(host: Option<&str>) -> String {
    let mut connect = String::from("'self'");
    if let Some(host) = host.filter(|h| plain_host(h)) {
        connect.push_str(&format!(" ws://{host} wss://{host}"));
    }
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
         font-src 'self'; connect-src {connect}; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    )
}

/// Whether `host` is only what a `Host` header's host and port may hold (nothing that could
/// extend the policy).
fn plain_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
}

/// The UI's routes, to merge into the API's router.
pub(crate) fn router() -> Router<App> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(file))
}

async fn index(headers: HeaderMap) -> Response {
    answer(&headers, "text/html; charset=utf-8", INDEX.to_owned())
}

async fn file(State(app): State<App>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let (kind, body) = match name.as_str() {
        "app.js" => ("text/javascript; charset=utf-8", APP_JS.to_owned()),
        "context.js" => ("text/javascript; charset=utf-8", CONTEXT_JS.to_owned()),
        "live.js" => ("text/javascript; charset=utf-8", LIVE_JS.to_owned()),
        "app.css" => ("text/css; charset=utf-8", APP_CSS.to_owned()),
        // Read (and bundled) off the request's thread: the package is a hundred files.
        "xterm.js" | "xterm.css" => {
            let css = name == "xterm.css";
            let xterm = app.clone();
            let body = tokio::task::spawn_blocking(move || {
                if css {
                    xterm.xterm.css()
                } else {
                    xterm.xterm.script()
                }
            })
            .await
            .unwrap_or_default();
            let kind = if css {
                "text/css; charset=utf-8"
            } else {
                "text/javascript; charset=utf-8"
            };
            (kind, body)
        }
        _ => {
            return ApiError::new(404, "not_found", "no such file of the web UI").into_response();
        }
    };
    answer(&headers, kind, body)
}

fn answer(request: &HeaderMap, kind: &'static str, body: String) -> Response {
    let host = request.get(header::HOST).and_then(|h| h.to_str().ok());
    let policy = HeaderValue::from_str(&content_security_policy(host))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'self'"));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (header::CONTENT_SECURITY_POLICY, policy),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_only_this_origin() {
        let policy = content_security_policy(Some("127.0.0.1:8080"));
        assert!(policy.starts_with("default-src 'self';"), "{policy}");
        assert!(
            policy.contains("connect-src 'self' ws://127.0.0.1:8080 wss://127.0.0.1:8080;"),
            "{policy}"
        );
        assert!(policy.contains("script-src 'self';"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    #[test]
    fn a_host_header_cannot_widen_the_policy() {
        for host in ["evil.example; script-src *", "a b", "x\"y", ""] {
            let policy = content_security_policy(Some(host));
            assert!(policy.contains("connect-src 'self';"), "{host}: {policy}");
            assert!(!policy.contains("evil"), "{policy}");
        }
    }
}
