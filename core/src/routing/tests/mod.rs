//! Tests of the routing module, with shared fixtures.

mod access;
mod hops;
mod plan;
mod proptests;

use super::*;

/// `ana` operates every fixture context; `bo` is another member.
pub(super) const ANA: &str = "u_ana";
pub(super) const BO: &str = "u_bo";

pub(super) fn user(id: &str) -> Requester {
    Requester { user_id: id.into() }
}

/// An online, idle, usable context `ec_{name}` operated by `ana`, with nothing shared.
pub(super) fn view(name: &str) -> ContextView {
    ContextView {
        id: format!("ec_{name}"),
        name: name.into(),
        operator: ANA.into(),
        online: true,
        busy: false,
        draining: false,
        paused: false,
        unusable: None,
        features: vec![HOST_OPERATOR_ONLY_FEATURE.into()],
        grant_has_fs: false,
        local_fs_available: false,
        commands_enabled: false,
        shared_with_all_members: true,
        opted_in: Vec::new(),
        operator_is_member: true,
    }
}

/// A chain of context names (`ec_` is prepended) and `cloud`.
pub(super) fn chain(entries: &[&str]) -> Chain {
    Chain::new(
        entries
            .iter()
            .map(|e| match *e {
                "cloud" => ChainEntry::Cloud,
                name => ChainEntry::Context(format!("ec_{name}")),
            })
            .collect(),
    )
    .unwrap()
}

/// The route of a `Plan::Dispatch`; panics (test only) on anything else.
pub(super) fn dispatch(plan: Result<Plan, RoutingError>) -> Route {
    match plan {
        Ok(Plan::Dispatch(route)) => route,
        other => panic!("expected a dispatch, got {other:?}"),
    }
}

/// `(id, outcome, reason)` of each attempt.
pub(super) fn outcomes(attempts: &[Attempt]) -> Vec<(&str, &str, &str)> {
    attempts
        .iter()
        .map(|a| (a.id.as_str(), a.outcome.as_str(), a.reason.as_str()))
        .collect()
}

/// [`view`], with every slot taken.
pub(super) fn busy(name: &str) -> ContextView {
    ContextView {
        busy: true,
        ..view(name)
    }
}

/// [`view`], disconnected.
pub(super) fn offline(name: &str) -> ContextView {
    ContextView {
        online: false,
        ..view(name)
    }
}
