//! Who is asking: bearer tokens with scopes (§11.2) for user routes, RFC 9421 signatures
//! with single-use nonces (§8) for machine routes, and the rate limits in front of both
//! machine routes and connects (§11.6).
//!
//! Nonces are checked in memory by the core's `ReplayGuard` and written to the store before
//! the request is answered, so a replay is refused after a restart too.

use std::net::SocketAddr;

use axum::http::{HeaderMap, Method, Uri, header};
use ed25519_dalek::VerifyingKey;
use outpost_core::httpsig::{
    HttpRequest, OUTPOST_LABEL, Profile, VerifiedRequest, verify_signature,
};
use outpost_core::replay::ReplayError;

use super::App;
use super::error::ApiError;
use crate::secrets;

pub(crate) use crate::bodies::SCOPES;

/// The scope of the join's registration token.
pub(crate) const CREATE: &str = "execution_context:create";
/// Reading contexts, executions, runs, chains, audit.
pub(crate) const READ: &str = "execution_context:read";
/// Starting and cancelling executions, chains.
pub(crate) const EXECUTE: &str = "execution_context:execute";
/// Revoking, deleting, granting, sharing.
pub(crate) const DELETE: &str = "execution_context:delete";
/// Host commands, and runs that want them.
pub(crate) const COMMAND: &str = "execution_context:command";
/// User management; implies every other scope.
pub(crate) const ADMIN: &str = "admin";

/// The user behind a bearer token.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) user: String,
    scopes: Vec<String>,
}

impl Caller {
    /// The token's scopes.
    pub(crate) fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Whether the caller is an admin (sees every user's contexts).
    pub(crate) fn is_admin(&self) -> bool {
        self.scopes.iter().any(|s| s == ADMIN)
    }

    /// Refuses with `scope_missing` unless the token has `scope` (or `admin`).
    pub(crate) fn require(&self, scope: &str) -> Result<(), ApiError> {
        if self.is_admin() || self.scopes.iter().any(|s| s == scope) {
            Ok(())
        } else {
            Err(ApiError::new(
                403,
                "scope_missing",
                format!("this token lacks the scope {scope}"),
            ))
        }
    }

    /// Refuses with `not_yours` unless the caller operates the context (or is an admin).
    pub(crate) fn owns(&self, operator: &str) -> Result<(), ApiError> {
        if self.is_admin() || self.user == operator {
            Ok(())
        } else {
            Err(ApiError::new(
                403,
                "not_yours",
                "the context belongs to another operator",
            ))
        }
    }
}

/// The caller of a user route, with `scope` checked.
pub(crate) fn bearer(app: &App, headers: &HeaderMap, scope: &str) -> Result<Caller, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_credentials)
        .ok_or_else(|| ApiError::new(401, "token_missing", "send Authorization: Bearer opt_…"))?;
    let invalid = || {
        ApiError::new(
            401,
            "token_invalid",
            "this server did not issue this token, or it was revoked",
        )
    };
    let token = value.trim();
    if !secrets::looks_like_token(token) {
        return Err(invalid());
    }
    let entry = app
        .shared
        .store
        .token(&secrets::hash(token))?
        .ok_or_else(invalid)?;
    if entry.revoked {
        return Err(invalid());
    }
    if entry
        .expires_at
        .is_some_and(|at| crate::clock::wall_now().0 >= at)
    {
        return Err(ApiError::new(
            401,
            "token_expired",
            "this token has expired",
        ));
    }
    let caller = Caller {
        user: entry.user,
        scopes: entry.scopes,
    };
    super::access::note_caller(&caller.user);
    caller.require(scope)?;
    Ok(caller)
}

/// The hash of the bearer token a request carries, if it carries one.
pub(crate) fn bearer_hash(headers: &HeaderMap) -> Option<[u8; 32]> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    Some(secrets::hash(bearer_credentials(value)?.trim()))
}

/// The credentials of an `Authorization` value whose scheme is `Bearer`, in any case
/// (RFC 9110 §11.1: a scheme is case-insensitive), after one or more spaces.
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim_start_matches(' '))
}

/// Takes a token from the source address's bucket.
pub(crate) fn limit_address(app: &App, addr: SocketAddr) -> Result<(), ApiError> {
    app.by_address
        .take(&addr.ip().to_string())
        .map_err(ApiError::rate_limited)
}

/// Takes a token from the context's bucket.
pub(crate) fn limit_context(app: &App, context_id: &str) -> Result<(), ApiError> {
    app.by_context
        .take(context_id)
        .map_err(ApiError::rate_limited)
}

/// The request as the signature covers it: the absolute URL from `Host` and the scheme
/// served.
pub(crate) fn signed_request(
    app: &App,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> HttpRequest {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    HttpRequest {
        method: method.as_str().to_owned(),
        url: format!("{}://{host}{path}", app.scheme),
        headers: headers
            .iter()
            .filter_map(|(n, v)| {
                v.to_str()
                    .ok()
                    .map(|v| (n.as_str().to_owned(), v.to_owned()))
            })
            .collect(),
        body: body.to_vec(),
    }
}

/// Verifies the `outpost` signature with the key `lookup` finds (§8 steps 1–6).
pub(crate) fn verify(
    request: &HttpRequest,
    lookup: &dyn Fn(&str) -> Option<VerifyingKey>,
) -> Result<VerifiedRequest, ApiError> {
    verify_signature(request, OUTPOST_LABEL, lookup, &Profile::outpost())
        .map_err(|e| ApiError::new(401, e.code(), e.to_string()))
}

/// Checks freshness and spends the nonce of a verified request (§8 step 7), in memory and
/// in the store with one statement, so a replay is refused after a restart too, and by every
/// node over the same database.
pub(crate) fn spend_nonce(app: &App, verified: &VerifiedRequest) -> Result<(), ApiError> {
    super::access::note_caller(&format!("machine {}", verified.keyid));
    let now = crate::clock::wall_now();
    {
        let mut guard = app
            .replay
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.check_request(verified, now).map_err(|e| {
            let status = if matches!(e, ReplayError::CacheFull) {
                503
            } else {
                401
            };
            ApiError::new(status, e.code(), e.to_string())
        })?;
    }
    let created = verified.params.created.unwrap_or(now.0);
    let expires = verified.params.expires;
    let keep_until = expires.map_or(created + 300, |e| (created + 300).min(e + 30));
    let nonce = verified.params.nonce.as_deref().unwrap_or_default();
    let spent =
        app.shared
            .store
            .insert_nonce(&verified.keyid, nonce, created, expires, keep_until)?;
    if !spent {
        let e = ReplayError::NonceReplayed;
        return Err(ApiError::new(401, e.code(), e.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::bearer_credentials;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for value in [
            "Bearer opt_x",
            "bearer opt_x",
            "BEARER opt_x",
            "bEaReR   opt_x",
        ] {
            assert_eq!(bearer_credentials(value), Some("opt_x"), "{value}");
        }
        for value in ["Basic opt_x", "Bearer", "Beareropt_x", "Bearers opt_x", ""] {
            assert_eq!(bearer_credentials(value), None, "{value}");
        }
    }
}
