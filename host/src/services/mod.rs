//! The running-service table: persistent capabilities of every environment.
//!
//! A persistent capability is started once and keeps running until it is stopped. The table
//! records its name, the id its executor gives (a shell service's pid, which is also its
//! process group; a container id; none for a wasm instance), start time, port and state. A
//! service that exits on its own is marked [`ServiceState::Failed`] with its exit status and
//! is **not** restarted. Shutdown stops every service, and a launch still in flight when it
//! begins stops its run as soon as it completes; after shutdown no start is accepted. A stop
//! waits at most [`RunningServiceTable::with_stop_bound`] for the run to end. Nothing here is
//! persisted: a daemon restart starts with an empty table.
//!
//! Every start goes through core's [`run_capability`]: the `run_capability:<environment>`
//! permission, the trust ceiling and the executor's probe are checked before anything runs.
//!
//! The table's lock is never held across a launch or a stop (either can take up to a minute:
//! a container start, a grace period before SIGKILL). A start reserves the name
//! ([`ServiceState::Starting`]) and launches unlocked; a stop takes the run out of its row
//! ([`ServiceState::Stopping`]) and stops it unlocked. Meanwhile every other row can be
//! listed, read, started and stopped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use outpost_core::executor::{
    Allowlists, Ending, ExecError, Launch, OutputChunk, Registry, RunHandle, RunRefused,
    run_capability,
};
use outpost_core::manifest::Lifecycle;

/// Where a service is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    /// Its executor is launching it; the name is taken.
    Starting,
    /// Running.
    Running,
    /// A stop is in progress (SIGTERM sent, waiting for the grace period or the engine).
    Stopping,
    /// Stopped on request.
    Stopped,
    /// Exited on its own; not restarted.
    Failed {
        /// Its exit code, if it exited.
        exit_code: Option<i32>,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
    },
}

impl ServiceState {
    /// Whether the name is in use: starting, running or stopping.
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            ServiceState::Starting | ServiceState::Running | ServiceState::Stopping
        )
    }
}

/// A row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The capability's name.
    pub name: String,
    /// The executor's id for it: a pid (also the process group), a container id, or none
    /// (a wasm instance, or a service still starting).
    pub id: Option<String>,
    /// The port it listens on, if the manifest names one.
    pub port: Option<u16>,
    /// Its state.
    pub state: ServiceState,
}

struct Row {
    info: ServiceInfo,
    /// `None` while starting, and while a stop holds the run outside the lock.
    run: Option<Box<dyn RunHandle>>,
}

/// How long a stop waits by default for a run to end once cancelled: the executors' default
/// SIGTERM→SIGKILL grace (2 s) plus a margin for an engine removing a container.
pub const DEFAULT_STOP_BOUND: Duration = Duration::from_secs(32);

/// Why a service could not be stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StopError {
    /// The table refused the stop, or the executor failed to cancel or wait for the run.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The run was cancelled but still had not ended when the stop bound passed; it stays
    /// listed as running, so a later stop or shutdown tries again.
    #[error("service {name} did not end within {}s of being stopped", .waited.as_secs_f64())]
    DidNotEnd {
        /// The capability's name, as the service table lists it.
        name: String,
        /// How long the stop waited after cancelling it.
        waited: Duration,
    },
}

impl StopError {
    /// The stable error code: the executor's, or `run_failed` for a run that did not end.
    pub fn code(&self) -> &'static str {
        match self {
            StopError::Exec(e) => e.code(),
            StopError::DidNotEnd { .. } => "run_failed",
        }
    }
}

/// Why a shutdown did not stop every service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShutdownError {
    /// The table's lock was poisoned: its services cannot be listed, let alone stopped.
    #[error("the service table lock was poisoned; its services were not stopped")]
    Poisoned,
    /// These services (name, why) could not be stopped; the others were.
    #[error("{} service(s) could not be stopped: {}", .0.len(), describe(.0))]
    NotStopped(Vec<(String, StopError)>),
}

fn describe(failures: &[(String, StopError)]) -> String {
    failures
        .iter()
        .map(|(name, e)| format!("{name}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The persistent services this daemon runs. See the module docs.
pub struct RunningServiceTable {
    rows: Mutex<BTreeMap<String, Row>>,
    /// Set (before the rows are listed) when shutdown begins. A launch completing checks it
    /// under the lock, so it either sees it or left a `Running` row shutdown then stops.
    shutting_down: AtomicBool,
    stop_bound: Duration,
}

impl Default for RunningServiceTable {
    fn default() -> Self {
        Self::with_stop_bound(DEFAULT_STOP_BOUND)
    }
}

fn poisoned() -> ExecError {
    ExecError::Failed("the service table lock was poisoned".into())
}

fn shut_down(name: &str) -> ExecError {
    ExecError::Failed(format!(
        "the service table is shutting down; service {name} was not started"
    ))
}

fn in_use(name: &str, state: &ServiceState) -> ExecError {
    let what = match state {
        ServiceState::Starting => "starting",
        ServiceState::Stopping => "stopping",
        _ => "already running",
    };
    ExecError::InvalidCapability(format!("service {name} is {what}"))
}

impl RunningServiceTable {
    /// An empty table whose stops wait up to [`DEFAULT_STOP_BOUND`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose stops wait at most `stop_bound` for a cancelled run to end before
    /// reporting [`StopError::DidNotEnd`]: the executors' SIGTERM→SIGKILL grace plus a margin.
    pub fn with_stop_bound(stop_bound: Duration) -> Self {
        Self {
            rows: Mutex::new(BTreeMap::new()),
            shutting_down: AtomicBool::new(false),
            stop_bound,
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, BTreeMap<String, Row>>, ExecError> {
        self.rows.lock().map_err(|_| poisoned())
    }

    /// Starts a persistent capability through [`run_capability`] (permission, trust ceiling,
    /// probe, then the executor of its environment). Refuses other lifecycles, and a name
    /// that is starting, running or stopping. A name that stopped or failed is replaced.
    /// Refused once shutdown has begun; a launch that completes after that is stopped at once
    /// and reported as not started.
    pub fn start(
        &self,
        registry: &Registry,
        allowlists: &Allowlists,
        launch: Launch,
    ) -> Result<ServiceInfo, RunRefused> {
        if launch.manifest.lifecycle != Lifecycle::Persistent {
            return Err(ExecError::InvalidCapability(format!(
                "{} is {}, not persistent",
                launch.manifest.name,
                launch.manifest.lifecycle.as_str()
            ))
            .into());
        }
        let name = launch.manifest.name.clone();
        let reserved = ServiceInfo {
            name: name.clone(),
            id: None,
            port: launch.manifest.port,
            state: ServiceState::Starting,
        };
        let previous = {
            let mut rows = self.lock()?;
            if self.shutting_down.load(Ordering::SeqCst) {
                return Err(shut_down(&name).into());
            }
            refresh(&mut rows);
            if let Some(row) = rows.get(&name).filter(|r| r.info.state.is_live()) {
                return Err(in_use(&name, &row.info.state).into());
            }
            rows.insert(
                name.clone(),
                Row {
                    info: reserved.clone(),
                    run: None,
                },
            )
        };
        // Unlocked: a launch may take as long as its executor needs.
        let launched = run_capability(registry, allowlists, launch);
        let mut rows = match self.lock() {
            Ok(rows) => rows,
            Err(e) => {
                // The run cannot be recorded: stop it rather than leave it running untracked.
                if let Ok(mut run) = launched {
                    let _ = self.stop_run(&name, run.as_mut());
                }
                return Err(e.into());
            }
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            // Shutdown began during the launch and did not see this row running: stop it now,
            // unlocked, and leave the name as it was before.
            match previous {
                Some(row) => rows.insert(name.clone(), row),
                None => rows.remove(&name),
            };
            drop(rows);
            if let Ok(mut run) = launched {
                let _ = self.stop_run(&name, run.as_mut());
            }
            return Err(shut_down(&name).into());
        }
        match launched {
            Ok(run) => {
                let info = ServiceInfo {
                    id: run.service_id(),
                    state: ServiceState::Running,
                    ..reserved
                };
                rows.insert(
                    name,
                    Row {
                        info: info.clone(),
                        run: Some(run),
                    },
                );
                Ok(info)
            }
            Err(refused) => {
                match previous {
                    Some(row) => rows.insert(name, row),
                    None => rows.remove(&name),
                };
                Err(refused)
            }
        }
    }

    /// Every service, with states brought up to date.
    pub fn list(&self) -> Vec<ServiceInfo> {
        match self.lock() {
            Ok(mut rows) => {
                refresh(&mut rows);
                rows.values().map(|r| r.info.clone()).collect()
            }
            Err(_) => Vec::new(),
        }
    }

    /// One service's row, brought up to date.
    pub fn get(&self, name: &str) -> Option<ServiceInfo> {
        let mut rows = self.lock().ok()?;
        refresh(&mut rows);
        rows.get(name).map(|r| r.info.clone())
    }

    /// Output a service printed since the last call (within its caps). Nothing while it is
    /// starting or being stopped; what it printed meanwhile comes with the next call.
    pub fn read_output(&self, name: &str) -> Vec<OutputChunk> {
        match self.lock() {
            Ok(mut rows) => rows
                .get_mut(name)
                .and_then(|r| r.run.as_mut())
                .map(|run| run.read_output())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Stops a service: SIGTERM to its group (or its container), SIGKILL after the grace
    /// period, waiting for it to be gone (at most the table's stop bound). A service that
    /// already ended is reported as it is.
    pub fn stop(&self, name: &str) -> Result<ServiceInfo, StopError> {
        let mut run = {
            let mut rows = self.lock()?;
            refresh(&mut rows);
            let row = rows
                .get_mut(name)
                .ok_or_else(|| ExecError::InvalidCapability(format!("no service named {name}")))?;
            match row.info.state {
                ServiceState::Running => {}
                ServiceState::Starting | ServiceState::Stopping => {
                    return Err(in_use(name, &row.info.state).into());
                }
                ServiceState::Stopped | ServiceState::Failed { .. } => return Ok(row.info.clone()),
            }
            row.info.state = ServiceState::Stopping;
            row.run
                .take()
                .ok_or_else(|| in_use(name, &ServiceState::Starting))?
        };
        // Unlocked: the grace period, or the engine removing a container.
        let stopped = self.stop_run(name, run.as_mut());
        let mut rows = self.lock()?;
        let row = rows
            .get_mut(name)
            .ok_or_else(|| ExecError::Failed(format!("service {name} vanished while stopping")))?;
        row.info.state = match &stopped {
            Ok(()) => ServiceState::Stopped,
            // The run could not be driven to its end: it stays listed as running, so a
            // later stop or shutdown tries again.
            Err(_) => ServiceState::Running,
        };
        row.run = Some(run);
        stopped.map(|()| row.info.clone())
    }

    /// Stops every running service (daemon shutdown) and refuses starts from now on; a
    /// launch still in flight stops its own run when it completes. Reports every service
    /// that could not be stopped (each was still tried).
    pub fn shutdown(&self) -> Result<(), ShutdownError> {
        self.shutting_down.store(true, Ordering::SeqCst);
        let names: Vec<String> = {
            let mut rows = self.lock().map_err(|_| ShutdownError::Poisoned)?;
            refresh(&mut rows);
            rows.values()
                .filter(|r| r.info.state == ServiceState::Running)
                .map(|r| r.info.name.clone())
                .collect()
        };
        let failures: Vec<(String, StopError)> = names
            .into_iter()
            .filter_map(|name| self.stop(&name).err().map(|e| (name, e)))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(ShutdownError::NotStopped(failures))
        }
    }

    /// Cancels `run` and waits for it to end, at most the stop bound.
    fn stop_run(&self, name: &str, run: &mut dyn RunHandle) -> Result<(), StopError> {
        run.cancel()?;
        let begun = Instant::now();
        loop {
            let left = self.stop_bound.saturating_sub(begun.elapsed());
            if run.wait(left)?.is_some() {
                return Ok(());
            }
            if left.is_zero() {
                return Err(StopError::DidNotEnd {
                    name: name.to_owned(),
                    waited: begun.elapsed(),
                });
            }
        }
    }
}

impl Drop for RunningServiceTable {
    /// Stops what is still running; a service that cannot be stopped here cannot be reported
    /// either (call [`RunningServiceTable::shutdown`] first to learn of it).
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Marks services that exited on their own as failed.
fn refresh(rows: &mut BTreeMap<String, Row>) {
    for row in rows.values_mut() {
        if row.info.state != ServiceState::Running {
            continue;
        }
        let Some(run) = row.run.as_mut() else {
            continue;
        };
        if let Ok(Some(outcome)) = run.wait(Duration::ZERO) {
            row.info.state = match outcome.ending {
                Ending::Cancelled => ServiceState::Stopped,
                Ending::Exited | Ending::TimedOut => ServiceState::Failed {
                    exit_code: outcome.exit_code,
                    signal: outcome.signal,
                },
            };
        }
    }
}

#[cfg(test)]
mod tests;
