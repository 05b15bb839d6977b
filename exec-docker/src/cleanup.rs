//! Removing containers: one (force, with its anonymous volumes, retried while the engine
//! refuses), and the ones a killed outpost process left behind.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use outpost_core::executor::ExecError;

use crate::DockerExecutor;
use crate::engine::engine_error;
use crate::spec::{LABEL_MANAGED, LABEL_OWNER_PID};

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
        match docker.remove_container(id, Some(options.clone())).await {
            Ok(()) => return Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
    }
    Err(ExecError::Failed(format!(
        "container {id} could not be removed: {last}"
    )))
}

impl DockerExecutor {
    /// Removes the containers an earlier outpost process left behind: ours by label, whose
    /// owner process is gone (it was killed before it could clean up). Returns their ids.
    /// Containers of live processes, this one included, are left alone. A daemon calls this
    /// once at start.
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
                let owner = container
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_OWNER_PID))
                    .and_then(|pid| pid.parse::<u32>().ok());
                let orphaned = match owner {
                    Some(pid) => {
                        pid != std::process::id()
                            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
                    }
                    None => false,
                };
                if let (true, Some(id)) = (orphaned, container.id) {
                    remove(&docker, &id).await?;
                    removed.push(id);
                }
            }
            Ok(removed)
        })
    }
}
