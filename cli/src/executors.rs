//! The executors this binary carries, as one [`Registry`] for the daemon and for the server's
//! own `cloud` executor.
//!
//! Shell, wasm and pty always register (the server's `cloud` never takes pty); docker registers only when its client can be built, and
//! then first removes containers a killed outpost process left behind. A registered executor
//! whose backend is missing (no engine answering) still refuses each run with its reason:
//! nothing falls back to another environment.

use std::path::PathBuf;

use outpost_core::executor::Registry;
use outpost_core::wire::Environment;
use outpost_exec_docker::{DockerConfig, DockerExecutor};
use outpost_exec_pty::PtyExecutor;
use outpost_exec_shell::{ShellConfig, ShellExecutor};
use outpost_exec_wasm::{WasmConfig, WasmExecutor};
use outpost_host::sandbox::SandboxConfig;

/// The environments a daemon offers when its executors probe available.
pub const DAEMON_ENVIRONMENTS: [Environment; 4] = [
    Environment::Shell,
    Environment::Wasm,
    Environment::Docker,
    Environment::Pty,
];

/// A registry with the executors of `environments`; compiled wasm modules are cached in
/// `wasm_cache` when given. A long-lived process (`warm`: a daemon, a server) keeps a warm
/// sandbox helper ready for its next shell run, and calls
/// `outpost_host::sandbox::retire_warm_helpers` when it stops.
pub fn registry(environments: &[Environment], wasm_cache: Option<PathBuf>, warm: bool) -> Registry {
    let mut registry = Registry::new();
    for environment in environments {
        match environment {
            Environment::Shell => registry.register(Box::new(ShellExecutor::new(ShellConfig {
                sandbox: SandboxConfig {
                    warm,
                    ..SandboxConfig::default()
                },
                ..ShellConfig::default()
            }))),
            Environment::Wasm => registry.register(Box::new(WasmExecutor::new(WasmConfig {
                cache_dir: wasm_cache.clone(),
                ..WasmConfig::default()
            }))),
            Environment::Docker => match DockerExecutor::new(DockerConfig::default()) {
                Ok(docker) => {
                    // An unreachable engine is reported by the probe and by each launch.
                    if let Ok(removed) = docker.remove_orphans()
                        && !removed.is_empty()
                    {
                        eprintln!(
                            "outpost: removed {} container(s) a killed outpost process left behind",
                            removed.len()
                        );
                    }
                    registry.register(Box::new(docker));
                }
                Err(e) => eprintln!("outpost: docker runs are unavailable: {e}"),
            },
            Environment::Pty => registry.register(Box::new(PtyExecutor::default())),
        }
    }
    registry
}
