//! Attempts (candidates that passed on a run, and why) and routing errors.
//!
//! This file owns how a passed-over candidate is recorded and how "nothing could take the
//! run" is reported. It never decides what to skip.

use serde::{Deserialize, Serialize};

use super::access::AccessDenied;
use super::target::TargetError;

/// Why a candidate passed on a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum AttemptOutcome {
    /// Every slot was taken, or the daemon rejected the run as busy.
    Busy,
    /// The daemon was not connected.
    Offline,
    /// It cannot take runs at all (see the reason), or cannot meet the run's requirements.
    Unusable,
    /// The requester may not run there (the reason is the access code).
    Denied,
}

impl AttemptOutcome {
    /// The outcome as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Busy => "busy",
            AttemptOutcome::Offline => "offline",
            AttemptOutcome::Unusable => "unusable",
            AttemptOutcome::Denied => "denied",
        }
    }

    /// The words after a name in a friendly line: "build-box *was busy*".
    pub fn phrase(self) -> &'static str {
        match self {
            AttemptOutcome::Busy => "was busy",
            AttemptOutcome::Offline => "was offline",
            AttemptOutcome::Unusable => "was unusable",
            AttemptOutcome::Denied => "was not available to you",
        }
    }
}

/// The mark (an unusable reason in [`super::ContextView`]) of a machine another node of a
/// cluster owns (docs/CLUSTER.md §2): a walk that reaches it stops there without judging it
/// further — the execution is handed to that node, which judges it.
pub const OWNED_ELSEWHERE: &str = "context_owned_elsewhere";

/// A candidate that passed on the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// The context id, or `"cloud"`.
    pub id: String,
    /// Its friendly name.
    pub name: String,
    /// How the candidate passed: busy, offline, unusable or denied (`reason` says more).
    pub outcome: AttemptOutcome,
    /// A `snake_case` reason code (`busy`, `offline`, an access code, an unusable reason).
    pub reason: String,
}

/// "a was busy, b was offline and c was unusable".
pub fn describe_attempts(attempts: &[Attempt]) -> String {
    let parts: Vec<String> = attempts
        .iter()
        .map(|a| format!("{} {}", a.name, a.outcome.phrase()))
        .collect();
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Why an execute could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    /// The request itself is malformed.
    #[error("{0}")]
    InvalidTarget(#[from] TargetError),
    /// The request or the chain names a context that does not exist.
    #[error("there is no execution context `{id}`")]
    UnknownContext {
        /// The id asked for.
        id: String,
    },
    /// The one named context is busy, or draining (no fallback asked for).
    #[error(
        "{name} {}; try again later, pass `whenBusy: queue` to wait for a free slot, or `fallback: \"chain\"` to fall through to your chain",
        busy_why(.attempts)
    )]
    Busy {
        /// Its friendly name.
        name: String,
        /// The named context's one attempt, as `ranOn` reports it.
        attempts: Vec<Attempt>,
    },
    /// The one named context is offline (no fallback, no queue asked for).
    #[error(
        "{name} is offline; pass `whenOffline: queue` to wait for it, or `fallback: \"chain\"` to fall through to your chain"
    )]
    Offline {
        /// Its friendly name.
        name: String,
        /// The named context's one attempt, as `ranOn` reports it.
        attempts: Vec<Attempt>,
    },
    /// The one named context cannot take runs (no fallback asked for).
    #[error(
        "{name} {} ({reason}); pass `fallback: \"chain\"` to fall through to your chain",
        unusable_why(.reason)
    )]
    Unusable {
        /// Its friendly name.
        name: String,
        /// The unusable reason code.
        reason: String,
        /// The named context's one attempt, as `ranOn` reports it.
        attempts: Vec<Attempt>,
    },
    /// The requester may not run on the one named context (no fallback asked for).
    #[error("{name}: {denied}")]
    Denied {
        /// Its friendly name.
        name: String,
        /// Why, with its own code (`not_opted_in`, `operator_left`, …).
        denied: AccessDenied,
        /// The named context's one attempt, as `ranOn` reports it.
        attempts: Vec<Attempt>,
    },
    /// Every candidate passed on the run.
    #[error("no usable execution context: {}", describe_or_empty(.attempts))]
    NoUsableContext {
        /// What was tried, in order.
        attempts: Vec<Attempt>,
    },
}

/// Why a busy context passed: its last attempt's reason in words.
fn busy_why(attempts: &[Attempt]) -> &'static str {
    match attempts.last() {
        Some(a) if a.reason == "draining" => {
            "is draining (its daemon is stopping and takes no new runs)"
        }
        Some(a) if a.reason == "paused" => {
            "is paused by an operator (its daemon takes no new runs until resumed)"
        }
        _ => "is busy (every slot is taken)",
    }
}

/// Why a context cannot take the run, in words, from its unusable reason code.
fn unusable_why(reason: &str) -> &'static str {
    match reason {
        "revoked" => "was revoked by its operator and takes no runs (its machine must join again)",
        "environment_not_granted" => {
            "may not run this capability's environment: its grant does not allow it (its operator can grant it)"
        }
        "environment_unavailable" => {
            "cannot run this capability's environment now: its daemon has no working executor for it"
        }
        "requires_fs" => "cannot give the run the host folders it requires",
        "requires_lan" => "cannot give the run the local network it requires",
        "unknown_context" => "no longer exists",
        _ => "cannot take runs",
    }
}

fn describe_or_empty(attempts: &[Attempt]) -> String {
    if attempts.is_empty() {
        "there was nothing to try".to_owned()
    } else {
        describe_attempts(attempts)
    }
}

impl RoutingError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            RoutingError::InvalidTarget(e) => e.code(),
            RoutingError::UnknownContext { .. } => "unknown_context",
            RoutingError::Busy { .. } => "execution_context_busy",
            RoutingError::Offline { .. } => "execution_context_offline",
            RoutingError::Unusable { .. } => "execution_context_unusable",
            RoutingError::Denied { denied, .. } => denied.code(),
            RoutingError::NoUsableContext { .. } => "no_usable_context",
        }
    }

    /// Every candidate that passed on the run, in order (empty for request errors).
    pub fn attempts(&self) -> &[Attempt] {
        match self {
            RoutingError::InvalidTarget(_) | RoutingError::UnknownContext { .. } => &[],
            RoutingError::Busy { attempts, .. }
            | RoutingError::Offline { attempts, .. }
            | RoutingError::Unusable { attempts, .. }
            | RoutingError::Denied { attempts, .. }
            | RoutingError::NoUsableContext { attempts } => attempts,
        }
    }
}
