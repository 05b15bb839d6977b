//! Helpers the exec-docker tests and benchmarks share: the test image, capability folders,
//! launches, and what `docker ps -a` says.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outpost_core::executor::{Allowlists, Launch, Outcome, Registry, RunHandle, Scope};
use outpost_core::grant::{CanonicalPath, CredentialDenylist, Mount};
use outpost_core::manifest::{Manifest, Permission};
use outpost_core::wire::{Egress, Environment, FolderMode};
use outpost_exec_docker::{DockerConfig, DockerExecutor, ensure_busybox_image};

/// The image every test runs: Debian's static busybox, imported from a local rootfs tarball.
pub const TEST_IMAGE: &str = "outpost-test/busybox:latest";

/// The static busybox `busybox-static` installs.
pub const BUSYBOX: &str = "/bin/busybox";

/// An executor on the machine's engine, with the test image made once per test process.
pub fn executor() -> DockerExecutor {
    let executor = DockerExecutor::new(DockerConfig::default()).expect("the executor's runtime");
    static IMAGE: OnceLock<()> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let docker = executor.client().expect("the Docker engine answers");
        executor
            .block_on(ensure_busybox_image(
                &docker,
                TEST_IMAGE,
                Path::new(BUSYBOX),
            ))
            .expect("the test image can be made from busybox-static");
    });
    executor
}

/// A registry holding `executor` alone, and allowlists that permit docker runs.
pub fn permitted(executor: DockerExecutor) -> (Registry, Allowlists) {
    let mut registry = Registry::new();
    registry.register(Box::new(executor));
    let mut allow = Allowlists::new();
    allow
        .allow(
            Permission::run_capability(Environment::Docker),
            Scope::Project,
        )
        .expect("docker may be allowed for the project");
    (registry, allow)
}

/// A fresh, empty folder.
pub fn folder(tag: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "outpost-docker-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// A unique run id, so `docker ps -a` can be asked about this run alone.
pub fn run_id(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A launch of `manifest` (YAML) from `dir`: no mounts, no egress, the manifest's timeout.
pub fn launch(dir: &Path, tag: &str, manifest: &str) -> Launch {
    let manifest = Manifest::parse(manifest).expect("a valid manifest");
    Launch {
        run_id: run_id(tag).into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        timeout: Duration::from_millis(manifest.limits.timeout_ms),
        manifest,
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        egress: Egress::None,
        confined: false,
        context: String::new(),
    }
}

/// A oneshot manifest running `command` with `sh -c` in the test image.
pub fn shell_manifest(name: &str, command: &str, extra: &str) -> String {
    format!(
        "name: {name}\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {TEST_IMAGE}\n\
         entry: sh\nargs: [\"-c\", {command:?}]\n{extra}"
    )
}

/// A grant of `path` with `mode`.
pub fn mount(path: &Path, mode: FolderMode) -> Mount {
    Mount {
        path: CanonicalPath::new(path.to_string_lossy().into_owned()).unwrap(),
        mode,
        excluded: Vec::new(),
    }
}

/// Waits for the run's end (bounded).
pub fn finish(run: &mut dyn RunHandle) -> Outcome {
    run.wait(Duration::from_secs(60))
        .expect("the run can be driven")
        .expect("the run ends within a minute")
}

/// Containers `docker ps -a` lists for run `run_id`, asked through the docker CLI.
pub fn containers_of(run_id: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("label=dev.outpost.run-id={run_id}"),
            "--format",
            "{{.ID}}",
        ])
        .output()
        .expect("the docker CLI runs");
    assert!(out.status.success(), "docker ps -a failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Text of a captured stream.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
