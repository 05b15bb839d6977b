//! Routing for execute: where a run goes, and who may use a context.
//!
//! This module owns the access check for one requester on one context ([`check_access`]),
//! the walk along a named context and the caller's [`Chain`] ([`plan`], [`Route::next_after`]),
//! and the `ranOn` record and its friendly line ([`RanOn`], [`friendly_line`]).
//!
//! It must never route a run to a context the requester cannot use, never fall back from a
//! named context unless asked (`fallback: chain`), never send a run that requires a machine
//! (`requires`) to the server, never skip a context for credential reasons, never dispatch or
//! wait itself (the caller does, passing fresh [`ContextView`]s on each hop), and never panic.

mod access;
mod attempt;
mod chain;
mod plan;
mod ran_on;
mod target;
#[cfg(test)]
mod tests;

pub use access::{
    AccessDenied, ContextView, HOST_OPERATOR_ONLY_FEATURE, Requester, RunKind, check_access,
};
pub use attempt::{Attempt, AttemptOutcome, OWNED_ELSEWHERE, RoutingError, describe_attempts};
pub use chain::{Chain, ChainEntry, ChainError};
pub use plan::{Candidate, Plan, QueuedRun, Route, plan};
pub use ran_on::{RanOn, RanOnKind, friendly_line};
pub use target::{
    DEFAULT_QUEUE_MINUTES, ExecuteTarget, Fallback, MAX_QUEUE_MINUTES, Requirement, TargetError,
    WhenOffline,
};

/// The id of the server's own executor, in chains, targets and `ranOn`.
pub const CLOUD_ID: &str = "cloud";
/// The server's own executor's name in `ranOn` and friendly lines.
pub const CLOUD_NAME: &str = "the server";
