//! The server's own executor (`cloud`): runs a [`Command::RunOnCloud`] execution on the
//! registry the caller handed in, on a blocking thread, and reports its result.
//!
//! Only the environments the operator enabled are allowed (`run_capability:<env>` for the
//! session); any other is refused with `not_permitted`, never run elsewhere. A cloud run gets
//! no host folders and no network. A capability named by digest (uploaded, or parked by
//! [`crate::parking`]) is read from the bundle folder and its digest checked before it runs.
//! It never touches the dispatcher's state: results come back through a channel.
//!
//! [`Command::RunOnCloud`]: outpost_core::server::Command::RunOnCloud

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outpost_core::daemon::Capability;
use outpost_core::executor::{Allowlists, Launch, Registry, Scope, run_capability};
use outpost_core::grant::CredentialDenylist;
use outpost_core::ids::ExecutionId;
use outpost_core::manifest::Permission;
use outpost_core::server::ExecuteRequest;
use outpost_core::wire::{CapabilitySource, Egress, Environment, RunResult, bundle_digest};
use outpost_host::Cancel;
use tokio::sync::mpsc;

/// The server's own executor (`cloud` in a chain): it runs each execution on a blocking thread,
/// with every environment it was given allowed.
pub(crate) struct Cloud {
    registry: Arc<Registry>,
    allowlists: Arc<Allowlists>,
    runs_dir: PathBuf,
    /// Where bundles named by digest are read from (their files, or their rows when another
    /// node of the cluster took the upload).
    store: Arc<crate::store::Store>,
    cancels: HashMap<ExecutionId, Cancel>,
    tx: mpsc::UnboundedSender<(ExecutionId, RunResult)>,
    rx: mpsc::UnboundedReceiver<(ExecutionId, RunResult)>,
}

impl Cloud {
    /// A cloud executor over `registry`, allowing `environments`, writing capability folders
    /// under `runs_dir` and reading bundles from `store`.
    pub(crate) fn new(
        registry: Registry,
        environments: &[Environment],
        runs_dir: PathBuf,
        store: Arc<crate::store::Store>,
    ) -> Self {
        let mut allowlists = Allowlists::new();
        for environment in environments {
            // Session scope is within every environment's trust ceiling.
            let _ = allowlists.allow(Permission::run_capability(*environment), Scope::Session);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            registry: Arc::new(registry),
            allowlists: Arc::new(allowlists),
            runs_dir,
            store,
            cancels: HashMap::new(),
            tx,
            rx,
        }
    }

    /// The next finished run.
    pub(crate) async fn finished(&mut self) -> Option<(ExecutionId, RunResult)> {
        let done = self.rx.recv().await;
        if let Some((exec_id, _)) = &done {
            self.cancels.remove(exec_id);
        }
        done
    }

    /// Starts `request` on a blocking thread.
    pub(crate) fn start(&mut self, request: ExecuteRequest) {
        let cancel = Cancel::new();
        self.cancels.insert(request.exec_id.clone(), cancel.clone());
        let registry = self.registry.clone();
        let allowlists = self.allowlists.clone();
        let (runs_dir, store) = (self.runs_dir.clone(), self.store.clone());
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut result = match capability_of(&request.capability, &store) {
                Ok(capability) => run(
                    &registry,
                    &allowlists,
                    &runs_dir,
                    &request,
                    capability,
                    &cancel,
                ),
                Err((code, message)) => RunResult::failed_with(code, message),
            };
            result.timing.daemon_ms =
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let _ = std::fs::remove_dir_all(runs_dir.join(request.exec_id.as_str()));
            let _ = tx.send((request.exec_id, result));
        });
    }

    /// Asks a running execution to stop.
    pub(crate) fn cancel(&mut self, exec_id: &str) {
        if let Some(cancel) = self.cancels.get(exec_id) {
            cancel.raise();
        }
    }

    /// Asks every running execution to stop (shutdown).
    pub(crate) fn cancel_all(&mut self) {
        for cancel in self.cancels.values() {
            cancel.raise();
        }
    }
}

/// The capability to run: inline as it came, or the bundle a digest names, read from the
/// store and checked (else the run's error code and message).
fn capability_of(
    source: &CapabilitySource,
    store: &crate::store::Store,
) -> Result<Capability, (&'static str, String)> {
    let CapabilitySource::Digest { sha256, .. } = source else {
        return Ok(Capability::Inline(source.clone()));
    };
    let unavailable = |e: &dyn std::fmt::Display| {
        (
            "bundle_unavailable",
            format!("the bundle {sha256} could not be read: {e}"),
        )
    };
    let path = store
        .bundle_file(sha256)
        .map_err(|e| unavailable(&e))?
        .ok_or_else(|| unavailable(&"it is not stored"))?;
    let bytes = std::fs::read(path).map_err(|e| unavailable(&e))?;
    let actual = bundle_digest(&bytes);
    if actual != *sha256 {
        return Err((
            "digest_mismatch",
            format!("the bundle's sha256 is {actual}, not {sha256}"),
        ));
    }
    Ok(Capability::Bundle {
        sha256: sha256.clone(),
        bytes,
    })
}

fn run(
    registry: &Registry,
    allowlists: &Allowlists,
    runs_dir: &std::path::Path,
    request: &ExecuteRequest,
    capability: Capability,
    cancel: &Cancel,
) -> RunResult {
    let outpost_host::Materialized {
        dir,
        manifest,
        entry_bytes,
    } = match outpost_host::materialize(&capability, runs_dir, &request.exec_id) {
        Ok(done) => done,
        Err(e) => return RunResult::failed_with(e.code(), e.to_string()),
    };
    let timeout = Duration::from_millis(manifest.limits.timeout_ms.min(request.timeout_ms));
    let launch = Launch {
        run_id: request.exec_id.as_str().into(),
        dir,
        entry_bytes,
        manifest,
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::default(),
        cwd: None,
        timeout,
        egress: Egress::None,
        // The server's own machine runs nobody's manifest unsandboxed.
        confined: true,
        context: String::new(),
    };
    let mut handle = match run_capability(registry, allowlists, launch) {
        Ok(handle) => handle,
        Err(e) => return RunResult::failed_with(e.code(), e.to_string()),
    };
    match outpost_host::run_to_end(&mut *handle, cancel) {
        Ok(outcome) => RunResult::from(outcome),
        Err(e) => RunResult::from(&e),
    }
}
