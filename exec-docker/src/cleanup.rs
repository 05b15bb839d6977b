//! Removing containers: one (force, with its anonymous volumes, retried while the engine
//! refuses), and the ones a killed outpost process left behind.
//!
//! Every container carries its owner in a label: `<hostname>:<boot id>:<pid>:<start time>`.
//! The pid alone could be reused by another process, or name a process of another machine
//! that shares the engine; with the machine, its boot and the process's start time (in clock
//! ticks after boot, from `/proc/<pid>/stat`) it names one process once.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerSummaryStateEnum;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use outpost_core::executor::ExecError;

use crate::DockerExecutor;
use crate::engine::engine_error;
use crate::{LABEL_MANAGED, LABEL_OWNER};

/// Removes a container (killing it if it still runs) and its anonymous volumes. A container
/// already gone counts as removed; a refusal is retried a few times before it is reported.
pub(crate) async fn remove(docker: &Docker, id: &str) -> Result<(), ExecError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        link: false,
    };
    let mut last = String::new();
    for attempt in 0..5u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
        }
        match docker.remove_container(id, Some(options.clone())).await {
            Ok(()) => return Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(ExecError::Failed(format!(
        "container {id} could not be removed: {last}"
    )))
}

impl DockerExecutor {
    /// Removes the containers an earlier outpost process left behind: ours by label, created on
    /// this machine by a process that is gone (killed before it could clean up), or stopped
    /// since a reboot. Returns their ids. Containers of live processes, this one included,
    /// of processes it cannot see, and of other machines sharing the engine are left alone;
    /// one that cannot be removed does not stop the others. A daemon calls this once at start.
    pub fn remove_orphans(&self) -> Result<Vec<String>, ExecError> {
        let docker = self.client()?;
        let address = self.address.clone();
        self.runtime.block_on(async {
            let options = ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![format!("{LABEL_MANAGED}=true")],
                )])),
                ..ListContainersOptions::default()
            };
            let containers = docker
                .list_containers(Some(options))
                .await
                .map_err(|e| engine_error(&address, "listing containers", e))?;
            let mut removed = Vec::new();
            for container in containers {
                let owner = container.labels.as_ref().and_then(|l| l.get(LABEL_OWNER));
                let running = container.state == Some(ContainerSummaryStateEnum::RUNNING);
                if let (Some(owner), Some(id)) = (owner, container.id)
                    && orphaned(owner, running)
                    && remove(&docker, &id).await.is_ok()
                {
                    removed.push(id);
                }
            }
            Ok(removed)
        })
    }
}

/// This process as a container's owner: `<hostname>:<boot id>:<pid>:<start time>`.
pub(crate) fn owner() -> String {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER
        .get_or_init(|| {
            let pid = std::process::id();
            format!(
                "{}:{}:{pid}:{}",
                hostname(),
                boot_id(),
                start_time(pid).unwrap_or(0)
            )
        })
        .clone()
}

/// Whether the container of `owner` is left over: its process is gone, or the machine has
/// rebooted since and the container no longer runs (a running one with another boot id is a
/// same-named machine's). Labels of another machine, labels that do not parse, and processes
/// this one may not inspect name nothing it can judge: not orphaned.
fn orphaned(owner: &str, running: bool) -> bool {
    let mut parts = owner.rsplitn(4, ':');
    let (Some(start), Some(pid), Some(boot), Some(host)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (Ok(start), Ok(pid)) = (start.parse::<u64>(), pid.parse::<u32>()) else {
        return false;
    };
    if host != hostname() {
        return false;
    }
    if boot != boot_id() {
        return !running;
    }
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return true;
    }
    // Its pid is in use: by it, or by a later process that started at another time.
    start_time(pid).is_some_and(|now| now != start)
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_owned())
        .unwrap_or_default()
}

/// When process `pid` started, in clock ticks after boot (field 22 of `/proc/<pid>/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after its last `)`.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_label_names_one_process() {
        let me = owner();
        assert!(!orphaned(&me, true), "{me}");
        assert!(!orphaned(&me, false), "{me}");
        let host = hostname();
        let boot = boot_id();
        // Above the kernel's largest pid: no such process.
        assert!(orphaned(&format!("{host}:{boot}:4194305:1"), true));
        // This pid, but another start: a reused pid.
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert!(orphaned(
            &format!("{host}:{boot}:{pid}:{}", start + 1),
            true
        ));
        // Another boot: stopped containers are left over; a running one is a same-named
        // machine's.
        assert!(orphaned(
            &format!("{host}:another-boot:{pid}:{start}"),
            false
        ));
        assert!(!orphaned(
            &format!("{host}:another-boot:{pid}:{start}"),
            true
        ));
        // Another machine, or a label that does not parse: left alone.
        assert!(!orphaned(&format!("elsewhere:{boot}:4194305:1"), false));
        assert!(!orphaned("4194305", false));
    }
}
