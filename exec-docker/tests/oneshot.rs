//! Oneshot and ondemand containers on the machine's real Docker engine, with the test image
//! made from Debian's static busybox.

mod common;

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::*;
use outpost_core::executor::{
    Allowlists, Ending, ExecError, Executor, Outcome, OutputChunk, Probe, Registry, RunHandle,
    Scope, WaitWaker, run_capability,
};
use outpost_core::manifest::Permission;
use outpost_core::wire::{Environment, FolderMode};
use outpost_exec_docker::{DockerConfig, DockerExecutor, DockerRun};

#[test]
fn oneshot_reports_output_and_exit_code_and_leaves_nothing() {
    let executor = executor();
    let dir = folder("oneshot");
    let launch = launch(
        &dir,
        "oneshot",
        &shell_manifest("oneshot", "echo out; echo err >&2; exit 3", ""),
    );
    let id = launch.run_id.clone();
    let mut run = executor.start(launch).unwrap();
    assert_eq!(run.service_id().as_deref(), Some(run.container_id()));
    let outcome = finish(&mut run);
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!(outcome.exit_code, Some(3), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "out\n");
    assert_eq!(text(&outcome.stderr), "err\n");
    assert!(!outcome.truncated);
    assert!(
        containers_of(&id).is_empty(),
        "a failing run left its container"
    );
    assert!(executor.live_containers().is_empty());
}

#[test]
fn entry_and_args_replace_the_image_command_and_env_is_the_manifest_s() {
    let executor = executor();
    let dir = folder("argv");
    let manifest = format!(
        "name: argv\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {TEST_IMAGE}\n\
         entry: /bin/echo\nargs: [\"a b\", \"$HOME\"]\nenv: {{GREETING: hi}}\n"
    );
    let mut l = launch(&dir, "argv", &manifest);
    l.extra_args = vec!["tail".into()];
    let outcome = finish(&mut executor.start(l).unwrap());
    // No shell in between: `$HOME` is not expanded, `a b` stays one argument.
    assert_eq!(text(&outcome.stdout), "a b $HOME tail\n");

    let l = launch(
        &dir,
        "env",
        &shell_manifest("env", "env | sort", "env: {GREETING: hi}\n"),
    );
    let outcome = finish(&mut executor.start(l).unwrap());
    let env = text(&outcome.stdout);
    assert!(env.contains("GREETING=hi\n"), "{env}");
    assert!(env.contains("PATH=/bin\n"), "the image's PATH stays: {env}");
    assert!(
        !env.contains("CARGO"),
        "the daemon's environment leaked: {env}"
    );
}

#[test]
fn an_entry_missing_from_the_image_exits_127_as_docker_run_reports_it() {
    let executor = executor();
    let dir = folder("missing-entry");
    let manifest = format!(
        "name: nope\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {TEST_IMAGE}\n\
         entry: no-such-command\n"
    );
    let l = launch(&dir, "missing-entry", &manifest);
    let id = l.run_id.clone();
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(outcome.exit_code, Some(127), "{outcome:?}");
    assert!(
        text(&outcome.stderr).contains("no-such-command"),
        "{outcome:?}"
    );
    assert!(containers_of(&id).is_empty());
}

#[test]
fn output_is_capped_per_stream() {
    let executor = executor();
    let dir = folder("cap");
    let l = launch(
        &dir,
        "cap",
        &shell_manifest(
            "cap",
            "head -c 200000 /dev/zero | tr '\\0' x; echo tail >&2",
            "limits: {output_max_bytes: 1000}\n",
        ),
    );
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(outcome.exit_code, Some(0));
    assert!(outcome.truncated);
    assert!(outcome.stdout.starts_with(&[b'x'; 1000]));
    assert!(text(&outcome.stdout).ends_with("[outpost: output truncated]\n"));
    assert_eq!(text(&outcome.stderr), "tail\n");
}

#[test]
fn a_timeout_stops_and_removes_the_container() {
    let executor = executor();
    let dir = folder("timeout");
    let mut l = launch(&dir, "timeout", &shell_manifest("timeout", "sleep 60", ""));
    l.timeout = Duration::from_millis(1500);
    let id = l.run_id.clone();
    let begun = Instant::now();
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(outcome.ending, Ending::TimedOut);
    // SIGTERM through the init process; `sleep` ends on it, as `docker stop` reports.
    assert_eq!(outcome.exit_code, Some(143), "{outcome:?}");
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "{:?}",
        begun.elapsed()
    );
    assert!(
        containers_of(&id).is_empty(),
        "a timed-out run left its container"
    );
}

#[test]
fn cancel_stops_and_removes_the_container() {
    let executor = executor();
    let dir = folder("cancel");
    let l = launch(
        &dir,
        "cancel",
        &shell_manifest("cancel", "echo ready; sleep 60", ""),
    );
    let id = l.run_id.clone();
    let mut run = executor.start(l).unwrap();
    let mut seen = String::new();
    while !seen.contains("ready") {
        assert!(run.wait(Duration::from_millis(20)).unwrap().is_none());
        for chunk in run.read_output() {
            seen.push_str(&text(&chunk.bytes));
        }
    }
    assert_eq!(containers_of(&id).len(), 1, "the container runs");
    run.cancel().unwrap();
    run.cancel().unwrap();
    let outcome = finish(&mut run);
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert!(
        containers_of(&id).is_empty(),
        "a cancelled run left its container"
    );
}

#[test]
fn ondemand_runs_a_fresh_container_per_call() {
    let executor = executor();
    let dir = folder("ondemand");
    let manifest = format!(
        "name: ondemand\nenvironment: docker\nlifecycle: ondemand\ndocker_image: {TEST_IMAGE}\n\
         entry: sh\nargs: [\"-c\", \"cat /tmp/mark 2>/dev/null; echo here > /tmp/mark; hostname\"]\n"
    );
    let mut hosts = Vec::new();
    for _ in 0..2 {
        let l = launch(&dir, "ondemand", &manifest);
        let id = l.run_id.clone();
        let outcome = finish(&mut executor.start(l).unwrap());
        // Nothing is left from the call before.
        assert!(!text(&outcome.stdout).contains("here"), "{outcome:?}");
        hosts.push(text(&outcome.stdout));
        assert!(containers_of(&id).is_empty());
    }
    assert_ne!(hosts[0], hosts[1], "two calls shared a container");
}

#[test]
fn a_missing_image_is_named_and_not_pulled() {
    let executor = executor();
    let dir = folder("no-image");
    let manifest = "name: noimage\nenvironment: docker\nlifecycle: oneshot\n\
                    docker_image: outpost-test/absent:1\nentry: true\n";
    let l = launch(&dir, "no-image", manifest);
    let id = l.run_id.clone();
    let err = executor.start(l).err().expect("a missing image is refused");
    assert_eq!(err.code(), "image_missing");
    assert!(err.to_string().contains("outpost-test/absent:1"), "{err}");
    assert!(err.to_string().contains("never pulls"), "{err}");
    assert!(containers_of(&id).is_empty());
}

/// A shell executor that is always available and records whether anything was handed to it.
#[derive(Default)]
struct StandInShell {
    launched: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Executor for StandInShell {
    fn environment(&self) -> Environment {
        Environment::Shell
    }

    fn probe(&self) -> Probe {
        Probe::Available {
            description: "a stand-in shell".into(),
        }
    }

    fn launch(
        &self,
        _launch: outpost_core::executor::Launch,
    ) -> Result<Box<dyn RunHandle>, ExecError> {
        self.launched
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Err(ExecError::Spawn("the stand-in shell runs nothing".into()))
    }
}

#[test]
fn an_unreachable_engine_refuses_and_never_falls_back() {
    let dead = folder("dead").join("docker.sock");
    let executor = DockerExecutor::new(DockerConfig {
        host: Some(format!("unix://{}", dead.display())),
        ..DockerConfig::default()
    })
    .unwrap();
    let Probe::Unavailable { reason, remedy } = executor.probe() else {
        panic!("a dead socket probed available");
    };
    assert!(reason.contains("cannot be reached"), "{reason}");
    assert!(reason.contains(&dead.display().to_string()), "{reason}");
    assert!(remedy.contains("DOCKER_HOST"), "{remedy}");

    let mut registry = Registry::new();
    registry.register(Box::new(executor));
    let shell = StandInShell::default();
    let shell_launched = shell.launched.clone();
    registry.register(Box::new(shell));
    let mut allow = Allowlists::new();
    allow
        .allow(
            Permission::run_capability(Environment::Docker),
            Scope::Project,
        )
        .unwrap();
    allow
        .allow(
            Permission::run_capability(Environment::Shell),
            Scope::Session,
        )
        .unwrap();
    let dir = folder("dead-run");
    let l = launch(&dir, "dead", &shell_manifest("dead", "true", ""));
    let err = run_capability(&registry, &allow, l).err().expect("refused");
    assert!(
        !shell_launched.load(std::sync::atomic::Ordering::SeqCst),
        "the docker capability fell back to the shell"
    );
    assert_eq!(err.code(), "environment_unavailable");
    assert!(
        err.to_string()
            .starts_with("Docker is unavailable; the capability cannot be executed"),
        "{err}"
    );
}

#[test]
fn a_capability_of_another_environment_is_refused() {
    let executor = executor();
    let dir = folder("wrong");
    std::fs::write(dir.join("run.sh"), "true\n").unwrap();
    let l = launch(
        &dir,
        "wrong",
        "name: wrong\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    );
    assert!(matches!(
        executor.start(l),
        Err(ExecError::InvalidCapability(_))
    ));
}

#[test]
fn dropping_the_executor_removes_what_still_runs() {
    let executor = executor();
    let dir = folder("drop");
    let l = launch(&dir, "drop", &shell_manifest("drop", "sleep 60", ""));
    let id = l.run_id.clone();
    let run = executor.start(l).unwrap();
    assert_eq!(containers_of(&id).len(), 1);
    drop(run);
    drop(executor);
    assert!(
        containers_of(&id).is_empty(),
        "the container outlived the executor"
    );
}

#[test]
fn containers_a_dead_process_left_behind_are_removed_and_others_kept() {
    let executor = executor();
    let create = |owner: &str, run_id: &str| {
        let out = std::process::Command::new("docker")
            .args([
                "create",
                "--label",
                "dev.outpost.managed=true",
                "--label",
                &format!("dev.outpost.owner={owner}"),
                "--label",
                &format!("dev.outpost.run-id={run_id}"),
                TEST_IMAGE,
                "true",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        text(&out.stdout).trim().to_owned()
    };
    // A live container of ours tells this process's owner label.
    let dir = folder("orphans");
    let l = launch(&dir, "owner", &shell_manifest("owner", "sleep 60", ""));
    let mut live = executor.start(l).unwrap();
    let me = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{index .Config.Labels \"dev.outpost.owner\"}}",
            live.container_id(),
        ])
        .output()
        .unwrap();
    let me = text(&me.stdout).trim().to_owned();
    let (host_and_boot, _) = me.rsplit_once(':').unwrap();
    let (host_and_boot, _) = host_and_boot.rsplit_once(':').unwrap();
    // Above the kernel's largest pid: no such process can exist.
    let (orphan_run, kept_run, foreign_run) = (run_id("orphan"), run_id("kept"), run_id("foreign"));
    let orphan = create(&format!("{host_and_boot}:4194305:1"), &orphan_run);
    let kept = create(&me, &kept_run);
    let foreign = create("another-machine:boot:4194305:1", &foreign_run);
    let removed = executor.remove_orphans().unwrap();
    assert!(removed.contains(&orphan), "{removed:?}");
    assert!(!removed.contains(&kept));
    assert!(!removed.contains(&foreign));
    assert!(!removed.iter().any(|id| id == live.container_id()));
    assert!(containers_of(&orphan_run).is_empty());
    assert_eq!(containers_of(&kept_run).len(), 1);
    assert_eq!(containers_of(&foreign_run).len(), 1);
    let rm = std::process::Command::new("docker")
        .args(["rm", "-f", &kept, &foreign])
        .output()
        .unwrap();
    assert!(rm.status.success());
    live.cancel().unwrap();
    assert_eq!(finish(&mut live).ending, Ending::Cancelled);
}

/// A run that prints `first`, waits for the file `go` in the folder mounted at `/gate`, prints
/// `second`, and sleeps until it is stopped (its deadline: a minute).
fn gated_launch(tag: &str) -> (outpost_core::executor::Launch, std::path::PathBuf) {
    let dir = folder(tag);
    let gate = folder("gate");
    let manifest = shell_manifest(
        tag,
        "echo first; while [ ! -e /gate/go ]; do sleep 0.1; done; echo second; sleep 120",
        &format!(
            "volumes: [{{host: {}, guest: /gate, mode: ro}}]\n",
            gate.display()
        ),
    );
    let mut l = launch(&dir, tag, &manifest);
    l.mounts = vec![mount(&gate, FolderMode::Ro)];
    // Not an hour: output that fails to wake a wait fails the test instead of hanging it.
    l.timeout = Duration::from_secs(60);
    (l, gate)
}

#[test]
fn output_ends_a_wait_through_the_handle_s_wait_waker() {
    let executor = executor();
    let (l, gate) = gated_launch("woken");
    let id = l.run_id.clone();
    let mut run = executor.start(l).unwrap();
    let waker = run.wait_waker().expect("a container run can be woken");
    let (told, calls) = mpsc::channel();
    let notifier: WaitWaker = Arc::new(move || {
        let _ = told.send(());
        waker();
    });
    assert!(run.notify_output(notifier));
    let mut seen = String::new();
    // What came before the notifier was set is read at once; what comes later ends the wait.
    let mut read_until = |run: &mut DockerRun, what: &str| {
        loop {
            for chunk in run.read_output() {
                seen.push_str(&text(&chunk.bytes));
            }
            if seen.contains(what) {
                return seen.clone();
            }
            assert!(
                run.wait(Duration::from_secs(3600)).unwrap().is_none(),
                "output ended the wait while the container still runs"
            );
        }
    };
    read_until(&mut run, "first\n");
    let before = calls.try_iter().count();
    std::fs::write(gate.join("go"), "").unwrap();
    assert_eq!(read_until(&mut run, "second\n"), "first\nsecond\n");
    assert!(
        calls.try_recv().is_ok(),
        "the output buffer called the notifier for `second` (and {before} times before)"
    );
    run.cancel().unwrap();
    let outcome = finish(&mut run);
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert_eq!(text(&outcome.stdout), "first\nsecond\n");
    assert!(containers_of(&id).is_empty());
}

/// A run handle that records the waits it is asked for and passes everything on.
struct Watched {
    run: DockerRun,
    waits: Vec<Duration>,
}

impl RunHandle for Watched {
    fn run_id(&self) -> &str {
        self.run.run_id()
    }
    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
        self.waits.push(timeout);
        self.run.wait(timeout)
    }
    fn cancel(&mut self) -> Result<(), ExecError> {
        self.run.cancel()
    }
    fn read_output(&mut self) -> Vec<OutputChunk> {
        self.run.read_output()
    }
    fn wait_waker(&self) -> Option<WaitWaker> {
        self.run.wait_waker()
    }
    fn canceller(&self) -> Option<WaitWaker> {
        self.run.canceller()
    }
    fn notify_output(&mut self, waker: WaitWaker) -> bool {
        self.run.notify_output(waker)
    }
}

#[test]
fn a_streamed_run_is_woken_by_its_output_not_looked_at_in_slices() {
    let executor = executor();
    let (l, gate) = gated_launch("streamed");
    let id = l.run_id.clone();
    let mut run = Watched {
        run: executor.start(l).unwrap(),
        waits: Vec::new(),
    };
    let cancel = outpost_host::Cancel::new();
    let raiser = cancel.clone();
    let mut streamed = String::new();
    // `first` opens the gate; `second`, printed only then, raises the cancel.
    let outcome = outpost_host::run_to_end_streaming(&mut run, &cancel, &mut |chunks| {
        for chunk in chunks {
            streamed.push_str(&text(&chunk.bytes));
        }
        if streamed.contains("first\n") && !gate.join("go").exists() {
            std::fs::write(gate.join("go"), "").unwrap();
        }
        if streamed.contains("second\n") {
            raiser.raise();
        }
    })
    .unwrap();
    assert_eq!(
        outcome.ending,
        Ending::Cancelled,
        "both lines were handed out before the deadline: {outcome:?}"
    );
    assert_eq!(streamed, "first\nsecond\n");
    assert!(
        run.waits.iter().all(|w| *w > outpost_host::STREAM_SLICE),
        "every wait lasted until output or the end woke it: {:?}",
        run.waits
    );
    assert!(containers_of(&id).is_empty());
}
