//! The running-service table: persistent capabilities of any environment.
//!
//! A persistent capability is started once and keeps running until it is stopped. The table
//! records its name, the id its executor gives (a shell service's pid, which is also its
//! process group; a container id; none for a wasm instance), start time, port and state. A
//! service that exits on its own is marked [`ServiceState::Failed`] with its exit status and
//! is **not** restarted. Stopping kills its process group; shutdown stops every service.
//! Nothing here is persisted: a daemon restart starts with an empty table.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use outpost_core::executor::{Ending, ExecError, Executor, Launch, RunHandle};
use outpost_core::manifest::Lifecycle;

/// Where a service is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    /// Running.
    Running,
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

/// A row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The capability's name.
    pub name: String,
    /// The executor's id for it: a pid (also the process group), a container id, or none.
    pub id: Option<String>,
    /// When it started.
    pub started_at: SystemTime,
    /// The port it listens on, if the manifest names one.
    pub port: Option<u16>,
    /// Its state.
    pub state: ServiceState,
}

struct Entry {
    info: ServiceInfo,
    run: Box<dyn RunHandle>,
}

/// The persistent services this daemon runs.
#[derive(Default)]
pub struct ServiceTable {
    services: Mutex<BTreeMap<String, Entry>>,
}

fn poisoned() -> ExecError {
    ExecError::Failed("the service table lock was poisoned".into())
}

impl ServiceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a persistent capability with `executor`. Refuses other lifecycles, and a name
    /// already running.
    pub fn start(&self, executor: &dyn Executor, launch: Launch) -> Result<ServiceInfo, ExecError> {
        if launch.manifest.lifecycle != Lifecycle::Persistent {
            return Err(ExecError::InvalidCapability(format!(
                "{} is {}, not persistent",
                launch.manifest.name,
                launch.manifest.lifecycle.as_str()
            )));
        }
        let name = launch.manifest.name.clone();
        let port = launch.manifest.port;
        let mut services = self.services.lock().map_err(|_| poisoned())?;
        refresh(&mut services);
        if services
            .get(&name)
            .is_some_and(|e| e.info.state == ServiceState::Running)
        {
            return Err(ExecError::InvalidCapability(format!(
                "service {name} is already running"
            )));
        }
        let run = executor.launch(launch)?;
        let info = ServiceInfo {
            name: name.clone(),
            id: run.service_id(),
            started_at: SystemTime::now(),
            port,
            state: ServiceState::Running,
        };
        services.insert(
            name,
            Entry {
                info: info.clone(),
                run,
            },
        );
        Ok(info)
    }

    /// Every service, with states brought up to date.
    pub fn list(&self) -> Vec<ServiceInfo> {
        match self.services.lock() {
            Ok(mut services) => {
                refresh(&mut services);
                services.values().map(|e| e.info.clone()).collect()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Output a service printed since the last call (within its caps).
    pub fn read_output(&self, name: &str) -> Vec<outpost_core::executor::OutputChunk> {
        match self.services.lock() {
            Ok(mut services) => services
                .get_mut(name)
                .map(|e| e.run.read_output())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Stops a service: SIGTERM to its group, SIGKILL after the grace period.
    pub fn stop(&self, name: &str) -> Result<ServiceInfo, ExecError> {
        let mut services = self.services.lock().map_err(|_| poisoned())?;
        refresh(&mut services);
        let entry = services
            .get_mut(name)
            .ok_or_else(|| ExecError::InvalidCapability(format!("no service named {name}")))?;
        if entry.info.state == ServiceState::Running {
            entry.run.cancel()?;
            while entry.run.wait(Duration::from_secs(60))?.is_none() {}
            entry.info.state = ServiceState::Stopped;
        }
        Ok(entry.info.clone())
    }

    /// Stops every running service (daemon shutdown).
    pub fn shutdown(&self) {
        let names: Vec<String> = self.list().into_iter().map(|s| s.name).collect();
        for name in names {
            let _ = self.stop(&name);
        }
    }
}

impl Drop for ServiceTable {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Marks services that exited on their own as failed.
fn refresh(services: &mut BTreeMap<String, Entry>) {
    for entry in services.values_mut() {
        if entry.info.state != ServiceState::Running {
            continue;
        }
        if let Ok(Some(outcome)) = entry.run.wait(Duration::ZERO) {
            entry.info.state = match outcome.ending {
                Ending::Cancelled => ServiceState::Stopped,
                Ending::Exited | Ending::TimedOut => ServiceState::Failed {
                    exit_code: outcome.exit_code,
                    signal: outcome.signal,
                },
            };
        }
    }
}
