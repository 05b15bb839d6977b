//! The executors by environment, the permission allowlists with their trust ceiling, and
//! [`run_capability`].

use std::collections::BTreeSet;

use super::{ExecError, Executor, Launch, Probe, RunHandle};
use crate::manifest::{Permission, PermissionVerb};
use crate::wire::Environment;

/// One executor per environment.
#[derive(Default)]
pub struct Registry {
    executors: Vec<Box<dyn Executor>>,
}

impl Registry {
    /// An empty registry: every environment is unavailable.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the executor for its environment.
    pub fn register(&mut self, executor: Box<dyn Executor>) {
        let env = executor.environment();
        self.executors.retain(|e| e.environment() != env);
        self.executors.push(executor);
    }

    /// The executor for `environment`, if one is registered.
    pub fn get(&self, environment: Environment) -> Option<&dyn Executor> {
        self.executors
            .iter()
            .find(|e| e.environment() == environment)
            .map(|e| e.as_ref())
    }

    /// Probes every registered executor.
    pub fn probe_all(&self) -> Vec<(Environment, Probe)> {
        self.executors
            .iter()
            .map(|e| (e.environment(), e.probe()))
            .collect()
    }

    /// Environments whose executors probe available now.
    pub fn available(&self) -> Vec<Environment> {
        self.probe_all()
            .into_iter()
            .filter(|(_, p)| matches!(p, Probe::Available { .. }))
            .map(|(e, _)| e)
            .collect()
    }
}

/// How long an allowance lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This session only.
    Session,
    /// Every session of the project.
    Project,
}

/// A permission was asked for a scope its environment may never reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{permission} can only be allowed for the session, never for the whole project")]
pub struct TrustCeiling {
    /// The permission asked for the project, which only the session may allow
    /// (`run_capability:shell` or `run_capability:pty`).
    pub permission: Permission,
}

/// The session's and the project's allowlists.
///
/// Trust ceiling: `run_capability:shell` (and `:pty`, a shell by another name: an interactive
/// terminal reaches the host as far as a shell does) can be allowed
/// for the session only — shell capabilities reach the whole host; `:wasm` and `:docker` may be
/// promoted to the project.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlists {
    session: BTreeSet<Permission>,
    project: BTreeSet<Permission>,
}

impl Allowlists {
    /// Nothing allowed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows `permission` for `scope`, within the trust ceiling.
    pub fn allow(&mut self, permission: Permission, scope: Scope) -> Result<(), TrustCeiling> {
        match scope {
            Scope::Session => {
                self.session.insert(permission);
            }
            Scope::Project => {
                if permission.verb == PermissionVerb::RunCapability
                    && ["shell", "pty"].contains(&permission.target.as_str())
                {
                    return Err(TrustCeiling { permission });
                }
                self.project.insert(permission);
            }
        }
        Ok(())
    }

    /// Whether `permission` is allowed (by either list).
    pub fn permits(&self, permission: &Permission) -> bool {
        let matches = |p: &Permission| p.allows(permission.verb, &permission.target);
        self.session.iter().any(matches) || self.project.iter().any(matches)
    }
}

/// Why a capability was not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRefused {
    /// The allowlists do not hold the permission the environment needs.
    #[error("not permitted: {permission} is not allowed")]
    NotPermitted {
        /// The permission the environment needs (`run_capability:ENV`) that neither allowlist
        /// holds.
        permission: Permission,
    },
    /// No executor is registered for the environment.
    #[error("{} capabilities cannot run here: no executor is installed", .environment.as_str())]
    NoExecutor {
        /// The capability's environment, which no registered executor serves.
        environment: Environment,
    },
    /// The executor's backend is missing or it refused to start the run.
    #[error(transparent)]
    Launch(#[from] ExecError),
}

impl RunRefused {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            RunRefused::NotPermitted { .. } => "not_permitted",
            RunRefused::NoExecutor { .. } => "environment_unavailable",
            RunRefused::Launch(e) => e.code(),
        }
    }
}

/// Checks `run_capability:<environment>` against the allowlists, then launches the capability
/// on the executor of its declared environment — never on another one. An unavailable
/// executor is a refusal that names the environment, the reason and the remedy.
pub fn run_capability(
    registry: &Registry,
    allowlists: &Allowlists,
    launch: Launch,
) -> Result<Box<dyn RunHandle>, RunRefused> {
    let environment = launch.manifest.environment;
    let permission = launch.manifest.run_permission();
    if !allowlists.permits(&permission) {
        return Err(RunRefused::NotPermitted { permission });
    }
    let executor = registry
        .get(environment)
        .ok_or(RunRefused::NoExecutor { environment })?;
    if let Probe::Unavailable { reason, remedy } = executor.probe() {
        return Err(ExecError::Unavailable {
            environment,
            reason,
            remedy,
        }
        .into());
    }
    Ok(executor.launch(launch)?)
}

#[cfg(test)]
mod tests;
