//! Every request, accounted for: one log line at `info` per request (method, route, status,
//! duration, caller) and an audit event for each refused one — `sign_in_failed` for a 401
//! (a missing, unknown, expired or revoked credential), `call_refused` for a 403 (a caller
//! the server knows, asking for what it may not).
//!
//! The line names the route's pattern (`/v1/executions/{id}`), never the request's URI, whose
//! query may carry a connect ticket, and never a header: no ticket or token reaches the log.
//! Refusals are audited at most [`REFUSALS_PER_MINUTE`] a minute, so a flood of bad tokens
//! cannot fill the audit log; the rest are counted in one `refusals_suppressed` event. This
//! module never decides whether a request is allowed: handlers do, and it reads their answer.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::App;

/// The most refusals audited one by one in a minute.
pub(crate) const REFUSALS_PER_MINUTE: u32 = 60;

tokio::task_local! {
    /// Who the request's handler found the caller to be.
    static CALLER: RefCell<Option<String>>;
}

/// The error code an answer carries (set by `ApiError`'s response), for the log and audit.
#[derive(Debug, Clone)]
pub(crate) struct AnswerCode(pub(crate) String);

/// Tells the request's log line who asked: a user's name, or `context ctx_…` for a machine.
pub(crate) fn note_caller(who: &str) {
    let _ = CALLER.try_with(|caller| *caller.borrow_mut() = Some(who.to_owned()));
}

/// How many refusals were audited in the current minute, and how many were not.
#[derive(Debug, Default)]
pub(crate) struct RefusalBudget {
    minute: u64,
    audited: u32,
    suppressed: u32,
}

impl RefusalBudget {
    /// Whether a refusal at `now` (Unix seconds) is audited; the count of refusals a past
    /// minute suppressed, when a new minute starts.
    fn take(&mut self, now: u64) -> (bool, Option<(u64, u32)>) {
        let minute = now / 60;
        let mut passed = None;
        if minute != self.minute {
            if self.suppressed > 0 {
                passed = Some((self.minute * 60, self.suppressed));
            }
            *self = Self {
                minute,
                ..Self::default()
            };
        }
        if self.audited < REFUSALS_PER_MINUTE {
            self.audited += 1;
            (true, passed)
        } else {
            self.suppressed += 1;
            (false, passed)
        }
    }
}

/// The middleware: runs the request with a caller slot, then logs and audits its answer.
pub(crate) async fn account(State(app): State<App>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(no route)".to_owned(), |p| p.as_str().to_owned());
    let from = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    let (response, caller) = CALLER
        .scope(RefCell::new(None), async {
            let response = next.run(req).await;
            let caller = CALLER.with(|c| c.borrow().clone());
            (response, caller)
        })
        .await;
    let status = response.status().as_u16();
    let code = response
        .extensions()
        .get::<AnswerCode>()
        .map(|c| c.0.clone());
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let who = caller.as_deref().unwrap_or("-");
    tracing::info!(
        %method,
        %route,
        status,
        ms = format_args!("{ms:.1}"),
        caller = %who,
        code = %code.as_deref().unwrap_or("-"),
        "request"
    );
    if status == 401 || status == 403 {
        audit_refusal(&app, status, &method, &route, caller, code, from);
    }
    response
}

fn audit_refusal(
    app: &App,
    status: u16,
    method: &axum::http::Method,
    route: &str,
    caller: Option<String>,
    code: Option<String>,
    from: Option<String>,
) {
    let now = crate::clock::wall_now().0;
    let (audit, passed) = app
        .refusals
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take(now);
    let store = &app.shared.store;
    if let Some((minute, count)) = passed {
        let detail = format!(
            "{count} more refused calls in the minute from {} were not audited one by one",
            minute
        );
        if let Err(e) = store.audit(now, "refusals_suppressed", "server", None, &detail) {
            tracing::warn!(error = %e, "cannot audit the suppressed refusals");
        }
    }
    if !audit {
        return;
    }
    let kind = if status == 401 {
        "sign_in_failed"
    } else {
        "call_refused"
    };
    let detail = format!(
        "{method} {route}: {}{}",
        code.as_deref().unwrap_or("refused"),
        from.map(|ip| format!(" from {ip}")).unwrap_or_default()
    );
    let actor = caller.unwrap_or_else(|| "unknown".to_owned());
    if let Err(e) = store.audit(now, kind, &actor, None, &detail) {
        tracing::warn!(error = %e, "cannot audit a refused call");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_refusals_is_audited_sixty_a_minute_and_counted() {
        let mut budget = RefusalBudget::default();
        let minute = 1_800_000_000 / 60 * 60;
        let audited = (0..100).filter(|_| budget.take(minute).0).count();
        assert_eq!(audited, REFUSALS_PER_MINUTE as usize);
        let (next, passed) = budget.take(minute + 61);
        assert!(next);
        assert_eq!(passed, Some((minute, 40)));
        assert_eq!(budget.take(minute + 62).1, None);
    }
}
