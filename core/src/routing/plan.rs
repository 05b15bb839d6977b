//! Where an execute runs: the ordered candidates, the one to try now, and what passed.
//!
//! This file owns the routing walk. Candidates are judged lazily, one hop at a time, against
//! the views the dispatcher passes in, so access is re-checked on every hop and `attempts`
//! only ever lists candidates that really passed on the run. It never dispatches anything.

use serde::{Deserialize, Serialize};

use super::access::{AccessDenied, ContextView, Requester, RunKind, check_access};
use super::attempt::{Attempt, AttemptOutcome, RoutingError};
use super::chain::{Chain, ChainEntry};
use super::target::{ExecuteTarget, Fallback, Requirement, WhenOffline};
use super::{CLOUD_ID, CLOUD_NAME};
use crate::wire::Refusal;

/// The candidate to dispatch to now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Candidate {
    /// The server's own executor.
    Cloud,
    /// A context that passed every check on the views given.
    Context {
        /// Its id.
        id: String,
        /// Its friendly name.
        name: String,
        /// Whose run it is there.
        run: RunKind,
    },
}

impl Candidate {
    /// The context id, or [`CLOUD_ID`].
    pub fn id(&self) -> &str {
        match self {
            Candidate::Cloud => CLOUD_ID,
            Candidate::Context { id, .. } => id,
        }
    }

    /// The friendly name ([`CLOUD_NAME`] for the server).
    pub fn name(&self) -> &str {
        match self {
            Candidate::Cloud => CLOUD_NAME,
            Candidate::Context { name, .. } => name,
        }
    }
}

/// An offline named context the caller should wait for (`whenOffline: queue`). On reconnect
/// the caller calls [`plan`] again with fresh views, which re-checks access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRun {
    /// The id of the offline machine to wait for (`ec_…`).
    pub id: String,
    /// Its friendly name.
    pub name: String,
    /// The longest to wait, in minutes.
    pub minutes: u32,
}

/// What to do with an execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Dispatch to [`Route::current`].
    Dispatch(Route),
    /// Hold the run until the named context reconnects.
    Queue(QueuedRun),
}

/// A walk along the candidates: the one to try now, the ones after it, what passed before.
///
/// It is part of the dispatcher's durable records, so it serializes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    entries: Vec<ChainEntry>,
    position: usize,
    current: Candidate,
    attempts: Vec<Attempt>,
    strict_named: bool,
    cloud_skipped_for: Option<Requirement>,
}

impl Route {
    /// The candidate to dispatch to now.
    pub fn current(&self) -> &Candidate {
        &self.current
    }

    /// The current candidate and those still untried after it, in order. Untried contexts are
    /// judged only when reached.
    pub fn candidates(&self) -> &[ChainEntry] {
        self.entries.get(self.position..).unwrap_or(&[])
    }

    /// Candidates that passed on the run before the current one, in order.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// The requirement that kept the server out of this route, if one did.
    pub fn cloud_skipped_for(&self) -> Option<Requirement> {
        self.cloud_skipped_for
    }

    /// Judges the current candidate again against `contexts` as they are now, and walks on
    /// from it if it cannot take the run: how a node that was handed a run goes on with the
    /// walk another node began.
    pub fn resume(
        self,
        requester: &Requester,
        target: &ExecuteTarget,
        contexts: &[ContextView],
    ) -> Result<Route, RoutingError> {
        walk(self, requester, target, contexts)
    }

    /// Records that the current candidate passed on the run after all (a `run.reject` with
    /// `busy`, a disconnect before accept) and moves to the next usable one, judged against
    /// `contexts` as they are now.
    pub fn next_after(
        mut self,
        outcome: AttemptOutcome,
        reason: &str,
        requester: &Requester,
        target: &ExecuteTarget,
        contexts: &[ContextView],
    ) -> Result<Route, RoutingError> {
        self.attempts.push(Attempt {
            id: self.current.id().to_owned(),
            name: self.current.name().to_owned(),
            outcome,
            reason: reason.to_owned(),
        });
        self.position += 1;
        walk(self, requester, target, contexts)
    }
}

/// Plans an execute: the named context (strict unless `fallback: chain`, then the caller's
/// chain after it), or the caller's chain. An empty chain means the server.
///
/// The server is left out when `requires` is non-empty and, if the walk runs out, recorded as
/// an unusable attempt with reason `requires_fs` / `requires_lan`. A named `"cloud"` is the
/// server alone. Every context the route names must be in `contexts` (`unknown_context`).
/// An offline named context with `whenOffline: queue` that the requester may use becomes
/// [`Plan::Queue`], even when `fallback: chain` is set: the caller asked to wait for it.
pub fn plan(
    requester: &Requester,
    target: &ExecuteTarget,
    caller_chain: &Chain,
    contexts: &[ContextView],
) -> Result<Plan, RoutingError> {
    target.validate()?;
    let mut entries: Vec<ChainEntry> = match target.context.as_deref() {
        Some(CLOUD_ID) => vec![ChainEntry::Cloud],
        Some(named) => {
            let named = ChainEntry::Context(named.to_owned());
            let mut entries = vec![named.clone()];
            if target.fallback == Fallback::Chain {
                entries.extend(
                    caller_chain
                        .entries()
                        .iter()
                        .filter(|e| **e != named)
                        .cloned(),
                );
            }
            entries
        }
        None if caller_chain.entries().is_empty() => vec![ChainEntry::Cloud],
        None => caller_chain.entries().to_vec(),
    };
    let cloud_skipped_for = match target.requires.first() {
        Some(requirement) if entries.contains(&ChainEntry::Cloud) => {
            entries.retain(|e| *e != ChainEntry::Cloud);
            Some(*requirement)
        }
        _ => None,
    };
    for entry in &entries {
        if let ChainEntry::Context(id) = entry
            && find(contexts, id).is_none()
        {
            return Err(RoutingError::UnknownContext { id: id.clone() });
        }
    }
    if let (Some(id), WhenOffline::Queue { minutes }) =
        (target.context.as_deref(), target.when_offline)
        && let Some(ctx) = find(contexts, id)
        && !ctx.online
        && !ctx.owned_elsewhere()
        && check_access(requester, ctx, target).is_ok()
    {
        return Ok(Plan::Queue(QueuedRun {
            id: ctx.id.clone(),
            name: ctx.name.clone(),
            minutes,
        }));
    }
    // A named machine online with every slot taken: wait in its queue for a free one.
    if let (Some(id), WhenOffline::Queue { minutes }) =
        (target.context.as_deref(), target.when_busy)
        && let Some(ctx) = find(contexts, id)
        && ctx.online
        && ctx.busy
        && (!ctx.draining || ctx.paused)
        && ctx.unusable.is_none()
        && check_access(requester, ctx, target).is_ok()
    {
        return Ok(Plan::Queue(QueuedRun {
            id: ctx.id.clone(),
            name: ctx.name.clone(),
            minutes,
        }));
    }
    let strict_named = target.context.as_deref().is_some_and(|id| id != CLOUD_ID)
        && target.fallback == Fallback::None;
    let start = Route {
        entries,
        position: 0,
        current: Candidate::Cloud,
        attempts: Vec::new(),
        strict_named,
        cloud_skipped_for,
    };
    walk(start, requester, target, contexts).map(Plan::Dispatch)
}

fn find<'a>(contexts: &'a [ContextView], id: &str) -> Option<&'a ContextView> {
    contexts.iter().find(|c| c.id == id)
}

/// Whether `ctx` can take the run now; the skip outcome and reason when not.
fn judge(
    requester: &Requester,
    target: &ExecuteTarget,
    ctx: &ContextView,
) -> Result<RunKind, (AttemptOutcome, String)> {
    let run = check_access(requester, ctx, target)
        .map_err(|denied| (AttemptOutcome::Denied, denied.code().to_owned()))?;
    if ctx.owned_elsewhere() {
        // Its owner judges the rest (online, busy, usable) when the run is handed over.
        return Ok(run);
    }
    if !ctx.online {
        return Err((AttemptOutcome::Offline, "offline".to_owned()));
    }
    if let Some(reason) = &ctx.unusable {
        return Err((AttemptOutcome::Unusable, reason.clone()));
    }
    if ctx.busy {
        let reason = if ctx.paused {
            PAUSED_REASON
        } else if ctx.draining {
            Refusal::Draining.code()
        } else {
            Refusal::Busy.code()
        };
        return Err((AttemptOutcome::Busy, reason.to_owned()));
    }
    Ok(run)
}

/// The attempt reason of a context an operator paused (PROTOCOL §4.7): busy until resumed.
pub const PAUSED_REASON: &str = "paused";

/// Moves `route` from its position to the first candidate that can take the run.
fn walk(
    mut route: Route,
    requester: &Requester,
    target: &ExecuteTarget,
    contexts: &[ContextView],
) -> Result<Route, RoutingError> {
    while let Some(entry) = route.entries.get(route.position) {
        let id = match entry {
            ChainEntry::Cloud => {
                route.current = Candidate::Cloud;
                return Ok(route);
            }
            ChainEntry::Context(id) => id,
        };
        let (outcome, reason, name) = match find(contexts, id) {
            // A context deleted between hops.
            None => (
                AttemptOutcome::Unusable,
                "unknown_context".to_owned(),
                id.clone(),
            ),
            Some(ctx) => match judge(requester, target, ctx) {
                Ok(run) => {
                    route.current = Candidate::Context {
                        id: ctx.id.clone(),
                        name: ctx.name.clone(),
                        run,
                    };
                    return Ok(route);
                }
                Err((outcome, reason)) => (outcome, reason, ctx.name.clone()),
            },
        };
        route.attempts.push(Attempt {
            id: id.clone(),
            name,
            outcome,
            reason,
        });
        route.position += 1;
    }
    Err(exhausted(route))
}

/// The error for a route with nothing left.
fn exhausted(route: Route) -> RoutingError {
    let mut attempts = route.attempts;
    if let Some(requirement) = route.cloud_skipped_for {
        attempts.push(Attempt {
            id: CLOUD_ID.to_owned(),
            name: CLOUD_NAME.to_owned(),
            outcome: AttemptOutcome::Unusable,
            reason: format!("requires_{}", requirement.as_str()),
        });
    }
    let single = match attempts.as_slice() {
        [only] if route.strict_named => {
            Some((only.outcome, only.name.clone(), only.reason.clone()))
        }
        _ => None,
    };
    match single {
        Some((AttemptOutcome::Busy, name, _)) => RoutingError::Busy { name, attempts },
        Some((AttemptOutcome::Offline, name, _)) => RoutingError::Offline { name, attempts },
        Some((AttemptOutcome::Unusable, name, reason)) => RoutingError::Unusable {
            name,
            reason,
            attempts,
        },
        Some((AttemptOutcome::Denied, name, reason)) => match AccessDenied::from_code(&reason) {
            Some(denied) => RoutingError::Denied {
                name,
                denied,
                attempts,
            },
            None => RoutingError::NoUsableContext { attempts },
        },
        None => RoutingError::NoUsableContext { attempts },
    }
}
