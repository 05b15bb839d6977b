//! Who may run what on a context: the check made when routing and again on every hop.
//!
//! This file owns [`check_access`] and the values it reads. It never looks at whether the
//! context is online or busy (that is [`super::plan`]) and never consults credentials:
//! routing never skips a context for credential reasons.

use serde::{Deserialize, Serialize};

use super::target::{ExecuteTarget, Requirement};

/// The daemon feature that says it mounts no host folders for shared runs.
pub const HOST_OPERATOR_ONLY_FEATURE: &str = "host-operator-only";

/// What routing knows about one context, as the server sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextView {
    /// The machine's registered id (`ec_…`), as chains and execute targets name it.
    pub id: String,
    /// Its friendly name.
    pub name: String,
    /// The user id of its operator (the person whose machine it is).
    pub operator: String,
    /// Whether its daemon is connected.
    pub online: bool,
    /// Whether every slot is taken (or the daemon is not accepting).
    pub busy: bool,
    /// Whether the daemon is draining: it is busy for good until it stops (the attempt's
    /// reason is `draining`, not `busy`).
    pub draining: bool,
    /// Whether the drain is an operator's pause: it lasts until resumed, so a run may wait
    /// for it in the machine's queue (`whenBusy: queue`), and the attempt's reason is
    /// `paused`.
    pub paused: bool,
    /// Why it cannot take runs at all, as a reason code.
    pub unusable: Option<String>,
    /// Features its daemon advertises.
    pub features: Vec<String>,
    /// Whether its grant lists host folders.
    pub grant_has_fs: bool,
    /// Whether the machine's local policy allows any of them (a folder is mounted).
    pub local_fs_available: bool,
    /// Whether host commands are on: both the local policy and the grant allow them.
    pub commands_enabled: bool,
    /// Whether it is shared with every member of the org (Use; opting in is still needed).
    pub shared_with_all_members: bool,
    /// User ids that opted in to run on it.
    pub opted_in: Vec<String>,
    /// Whether its operator is still a member of the run's org.
    pub operator_is_member: bool,
}

impl ContextView {
    /// Whether another node of a cluster owns it ([`super::OWNED_ELSEWHERE`] is its unusable
    /// reason): it is passed over before its connection is even looked at.
    pub fn owned_elsewhere(&self) -> bool {
        self.unusable.as_deref() == Some(super::OWNED_ELSEWHERE)
    }
}

/// The person an execute runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Requester {
    /// Their user id.
    pub user_id: String,
}

/// Whose run it is, from the machine's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// The operator's own run.
    Operator,
    /// Someone else's run on a shared machine (no host folders, no host commands).
    Shared,
}

/// Why a requester may not run on a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessDenied {
    /// The operator left the run's org; the machine takes nobody's runs there.
    #[error(
        "this machine's operator is no longer a member of the organization, so it takes no runs here"
    )]
    OperatorLeft,
    /// A run by someone else on a machine its operator has not shared.
    #[error(
        "this machine is not shared with you: only its operator runs there, unless they share it with every member"
    )]
    NotShared,
    /// A shared run by someone who has not opted in.
    #[error(
        "you have not opted in to run on this shared machine; opt in first (while your run is active the machine can use your credentials and read the responses)"
    )]
    NotOptedIn,
    /// A shared run that requires host folders.
    #[error(
        "host folders are only for the operator's own runs; run without `requires: [\"fs\"]` or on a machine you operate"
    )]
    FsOperatorOnly,
    /// A run that requires host folders on a context whose grant lists none.
    #[error(
        "the run requires host folders but the context's grant lists none; the machine's owner can add folders to the grant"
    )]
    NoFs,
    /// A run that requires host folders on a machine whose local policy allows none.
    #[error(
        "the run requires host folders but the machine's local policy allows none; the machine's owner can add a folder to the local policy"
    )]
    NoLocalFs,
    /// A shared run on a context with folders whose daemon would mount them for it.
    #[error(
        "this machine's daemon is too old to keep host folders to its operator's runs, so it takes no shared runs while its grant lists folders; the operator can update the daemon"
    )]
    FsDaemonOutdated,
    /// A shared run that wants host commands.
    #[error(
        "host commands are only for the operator's own runs; run without host commands or on a machine you operate"
    )]
    CommandsOperatorOnly,
    /// A run that wants host commands on a machine where they are off.
    #[error(
        "host commands are off on this machine; the machine's owner can turn them on in its local policy (the context's grant must allow them too)"
    )]
    CommandsOff,
}

impl AccessDenied {
    /// Every refusal, for finding one by its code.
    pub const ALL: [AccessDenied; 9] = [
        AccessDenied::OperatorLeft,
        AccessDenied::NotShared,
        AccessDenied::NotOptedIn,
        AccessDenied::FsOperatorOnly,
        AccessDenied::NoFs,
        AccessDenied::NoLocalFs,
        AccessDenied::FsDaemonOutdated,
        AccessDenied::CommandsOperatorOnly,
        AccessDenied::CommandsOff,
    ];

    /// The refusal whose [`code`](Self::code) is `code`, if any.
    pub fn from_code(code: &str) -> Option<AccessDenied> {
        Self::ALL.into_iter().find(|d| d.code() == code)
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            AccessDenied::OperatorLeft => "operator_left",
            AccessDenied::NotShared => "not_shared",
            AccessDenied::NotOptedIn => "not_opted_in",
            AccessDenied::FsOperatorOnly => "fs_operator_only",
            AccessDenied::NoFs => "no_fs",
            AccessDenied::NoLocalFs => "no_local_fs",
            AccessDenied::FsDaemonOutdated => "fs_daemon_outdated",
            AccessDenied::CommandsOperatorOnly => "commands_operator_only",
            AccessDenied::CommandsOff => "commands_off",
        }
    }
}

/// Decides whether `requester` may run `target` on `ctx`, and whose run it is.
///
/// Checks, in order: the operator is still a member (else everyone, the operator included,
/// is refused: a view saying the operator left the run's org fails closed); someone else's
/// run is on a machine shared with every member (`not_shared`: nobody is told to opt in to
/// what they cannot use), and its requester opted in (`shared_with_all_members` grants Use,
/// never the opt-in); shared runs neither require folders nor want commands; a shared run
/// never lands on a daemon that would mount its folders for it; then that folders and
/// commands are actually available.
pub fn check_access(
    requester: &Requester,
    ctx: &ContextView,
    target: &ExecuteTarget,
) -> Result<RunKind, AccessDenied> {
    if !ctx.operator_is_member {
        return Err(AccessDenied::OperatorLeft);
    }
    let kind = if requester.user_id == ctx.operator {
        RunKind::Operator
    } else {
        RunKind::Shared
    };
    let wants_fs = target.requires(Requirement::Fs);
    if kind == RunKind::Shared {
        if !ctx.shared_with_all_members {
            return Err(AccessDenied::NotShared);
        }
        if !ctx.opted_in.contains(&requester.user_id) {
            return Err(AccessDenied::NotOptedIn);
        }
        if wants_fs {
            return Err(AccessDenied::FsOperatorOnly);
        }
        if target.wants_commands {
            return Err(AccessDenied::CommandsOperatorOnly);
        }
        let keeps_fs_to_operator = ctx.features.iter().any(|f| f == HOST_OPERATOR_ONLY_FEATURE);
        if ctx.grant_has_fs && !keeps_fs_to_operator {
            return Err(AccessDenied::FsDaemonOutdated);
        }
    }
    if wants_fs && !ctx.grant_has_fs {
        return Err(AccessDenied::NoFs);
    }
    if wants_fs && !ctx.local_fs_available {
        return Err(AccessDenied::NoLocalFs);
    }
    if target.wants_commands && !ctx.commands_enabled {
        return Err(AccessDenied::CommandsOff);
    }
    Ok(kind)
}
