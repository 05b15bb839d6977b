//! The shell executor against real processes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod common;

use common::process_alive;
use outpost_core::executor::{
    Ending, Executor, Launch, Outcome, Probe, RunHandle, TRUNCATION_MARKER,
};
use outpost_core::grant::{CanonicalPath, CredentialDenylist};
use outpost_core::manifest::Manifest;
use outpost_exec_shell::{ShellConfig, ShellExecutor};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh capability folder with `manifest.yaml` and the given files.
fn capability(manifest: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outpost-shell-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.yaml"), manifest).unwrap();
    for (name, body) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.canonicalize().unwrap()
}

fn launch_of(dir: &Path, timeout: Duration) -> Launch {
    let text = std::fs::read_to_string(dir.join("manifest.yaml")).unwrap();
    Launch {
        run_id: "run-1".into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        manifest: Manifest::parse(&text).unwrap(),
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout,
        egress: outpost_core::wire::Egress::None,
        confined: false,
        context: String::new(),
    }
}

fn run(launch: Launch) -> Outcome {
    let mut handle = ShellExecutor::default().launch(launch).unwrap();
    wait(handle.as_mut())
}

fn wait(handle: &mut dyn RunHandle) -> Outcome {
    loop {
        if let Some(outcome) = handle.wait(Duration::from_secs(30)).unwrap() {
            return outcome;
        }
    }
}

const ONESHOT: &str = "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";

#[test]
fn reports_exit_code_and_both_streams() {
    let dir = capability(ONESHOT, &[("run.sh", "echo out; echo err >&2; exit 7\n")]);
    let o = run(launch_of(&dir, Duration::from_secs(10)));
    assert_eq!(o.ending, Ending::Exited);
    assert_eq!(o.exit_code, Some(7));
    assert_eq!(o.signal, None);
    assert_eq!(o.stdout, b"out\n");
    assert_eq!(o.stderr, b"err\n");
    assert!(!o.truncated);
}

#[test]
fn argv_mode_passes_arguments_without_a_shell() {
    let manifest = "name: t\nenvironment: shell\nlifecycle: ondemand\nentry: bin/show\ninterpreter: none\nargs: ['$HOME; echo pwned', '*']\n";
    let dir = capability(
        manifest,
        &[("bin/show", "#!/bin/sh\nprintf '%s|' \"$@\"\n")],
    );
    let mut launch = launch_of(&dir, Duration::from_secs(10));
    launch.extra_args = vec!["`id`".into()];
    let o = run(launch);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "$HOME; echo pwned|*|`id`|"
    );
}

#[test]
fn a_timeout_stops_the_whole_group() {
    let dir = capability(ONESHOT, &[("run.sh", "sleep 30 & sleep 30\n")]);
    let started = std::time::Instant::now();
    let o = run(launch_of(&dir, Duration::from_millis(300)));
    assert_eq!(o.ending, Ending::TimedOut);
    assert_eq!(o.signal, Some(15), "SIGTERM reached the entry");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn sigkill_follows_when_sigterm_is_ignored() {
    let dir = capability(
        ONESHOT,
        &[("run.sh", "trap '' TERM\nwhile :; do sleep 0.1; done\n")],
    );
    let executor = ShellExecutor::new(ShellConfig {
        grace: Duration::from_millis(200),
        ..ShellConfig::default()
    });
    let mut handle = executor
        .launch(launch_of(&dir, Duration::from_millis(200)))
        .unwrap();
    let o = wait(handle.as_mut());
    assert_eq!(o.ending, Ending::TimedOut);
    assert_eq!(o.signal, Some(9));
}

#[test]
fn cancel_stops_and_reports_cancelled() {
    let dir = capability(ONESHOT, &[("run.sh", "echo started; sleep 30\n")]);
    let mut handle = ShellExecutor::default()
        .launch(launch_of(&dir, Duration::from_secs(60)))
        .unwrap();
    // Wait for the event that the script is running: its first output.
    let mut seen = Vec::new();
    while seen.is_empty() {
        assert!(handle.wait(Duration::from_millis(20)).unwrap().is_none());
        seen = handle.read_output();
    }
    assert_eq!(seen[0].bytes, b"started\n");
    handle.cancel().unwrap();
    let o = wait(handle.as_mut());
    assert_eq!(o.ending, Ending::Cancelled);
}

#[test]
fn no_orphans_survive_a_finished_run() {
    let dir = capability(
        ONESHOT,
        &[(
            "run.sh",
            "sleep 300 &\necho $! > grandchild.pid\necho done\n",
        )],
    );
    let o = run(launch_of(&dir, Duration::from_secs(10)));
    assert_eq!(o.exit_code, Some(0));
    let pid = std::fs::read_to_string(dir.join("grandchild.pid")).unwrap();
    let pid = pid.trim();
    assert!(!pid.is_empty());
    // The run's end SIGKILLed the group before reporting. There is no event for the death of
    // a process that is not our child (short of pidfd), so watch /proc, bounded.
    let gone = (0..200).any(|_| {
        if process_alive(pid) {
            std::thread::sleep(Duration::from_millis(10));
            false
        } else {
            true
        }
    });
    assert!(gone, "grandchild {pid} outlived the run");
}

#[test]
fn output_is_capped_with_a_marker() {
    let manifest = format!("{ONESHOT}limits: {{output_max_bytes: 100}}\n");
    let dir = capability(
        &manifest,
        &[("run.sh", "head -c 100000 /dev/zero | tr '\\0' x\n")],
    );
    let o = run(launch_of(&dir, Duration::from_secs(10)));
    assert!(o.truncated);
    assert_eq!(o.stdout.len(), 100 + TRUNCATION_MARKER.len());
    assert!(o.stdout.ends_with(TRUNCATION_MARKER.as_bytes()));
}

/// Only the passthrough variables and the manifest's `env` arrive: the test runner's own
/// `CARGO_*` variables stand in for the daemon's secrets here (the `OUTPOST_*` filter itself
/// is unit-tested in `env.rs`, since a test cannot set variables in its own process safely).
#[test]
fn only_passthrough_and_manifest_variables_reach_the_process() {
    let manifest = format!("{ONESHOT}env: {{GREETING: hello}}\n");
    let dir = capability(&manifest, &[("run.sh", "env\n")]);
    let executor = ShellExecutor::new(ShellConfig {
        secret_vars: vec!["CARGO_PKG_NAME".into()],
        ..ShellConfig::default()
    });
    let mut handle = executor
        .launch(launch_of(&dir, Duration::from_secs(10)))
        .unwrap();
    let o = wait(handle.as_mut());
    let env = String::from_utf8_lossy(&o.stdout);
    assert!(env.contains("GREETING=hello"), "{env}");
    assert!(env.contains("PATH="), "{env}");
    assert!(!env.contains("OUTPOST_"), "{env}");
    assert!(!env.contains("CARGO"), "{env}");
}

#[test]
fn an_entry_that_escapes_through_a_symlink_is_refused() {
    let outside = capability(ONESHOT, &[("evil.sh", "echo escaped\n")]);
    let dir = capability(ONESHOT, &[]);
    std::os::unix::fs::symlink(outside.join("evil.sh"), dir.join("run.sh")).unwrap();
    let err = ShellExecutor::default()
        .launch(launch_of(&dir, Duration::from_secs(10)))
        .err()
        .unwrap();
    assert_eq!(err.code(), "path_refused");
    assert!(
        err.to_string().contains("outside the capability folder"),
        "{err}"
    );
}

#[test]
fn the_working_directory_is_guarded() {
    let dir = capability(ONESHOT, &[("run.sh", "pwd\n")]);
    let elsewhere = capability(ONESHOT, &[]);
    let mut launch = launch_of(&dir, Duration::from_secs(10));
    launch.cwd = Some(elsewhere.clone());
    let err = ShellExecutor::default().launch(launch).err().unwrap();
    assert_eq!(err.code(), "path_refused");

    // Inside the folder but on the credential denylist.
    let secrets = dir.join(".ssh");
    std::fs::create_dir_all(&secrets).unwrap();
    let mut launch = launch_of(&dir, Duration::from_secs(10));
    launch.cwd = Some(secrets.clone());
    launch.denylist = CredentialDenylist::empty()
        .with_extra([CanonicalPath::new(secrets.to_string_lossy().into_owned()).unwrap()]);
    let err = ShellExecutor::default().launch(launch).err().unwrap();
    assert!(err.to_string().contains("credential denylist"), "{err}");

    // A subfolder of the capability is fine.
    let sub = dir.join("work");
    std::fs::create_dir_all(&sub).unwrap();
    let mut launch = launch_of(&dir, Duration::from_secs(10));
    launch.cwd = Some(sub.clone());
    let o = run(launch);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        sub.to_string_lossy()
    );
}

#[test]
fn a_missing_shell_is_an_honest_refusal() {
    let executor = ShellExecutor::new(ShellConfig {
        shell: "/nonexistent/sh".into(),
        ..ShellConfig::default()
    });
    assert!(matches!(executor.probe(), Probe::Unavailable { .. }));
    let dir = capability(
        "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\n",
        &[("run.sh", "touch ran\n")],
    );
    let without_helper = ShellExecutor::new(ShellConfig {
        sandbox: outpost_host::sandbox::SandboxConfig {
            helper: Some("/nonexistent/outpost-confine".into()),
            support: None,
            warm: false,
        },
        ..ShellConfig::default()
    });
    let mut launch = launch_of(&dir, Duration::from_secs(10));
    launch.confined = true;
    let err = without_helper.launch(launch).err().unwrap();
    assert_eq!(
        err.code(),
        "confinement_unavailable",
        "confinement is refused, never skipped"
    );
    assert!(
        err.to_string().contains("/nonexistent/outpost-confine"),
        "{err}"
    );
    assert!(!dir.join("ran").exists());
}
