//! Oneshot and ondemand containers on the machine's real Docker engine, with the test image
//! made from Debian's static busybox.

mod common;

use std::time::{Duration, Instant};

use common::*;
use outpost_core::executor::{
    Allowlists, Ending, ExecError, Executor, Probe, Registry, RunHandle, Scope, run_capability,
};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Permission;
use outpost_core::wire::{Egress, Environment, FolderMode};
use outpost_exec_docker::{DockerConfig, DockerExecutor};

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
fn volumes_are_read_only_or_read_write_as_declared() {
    let executor = executor();
    let dir = folder("volumes");
    let ro = folder("ro");
    let rw = folder("rw");
    std::fs::write(ro.join("in.txt"), "from the host\n").unwrap();
    let manifest = shell_manifest(
        "volumes",
        "cat /in/in.txt; echo written > /out/result.txt; echo nope > /in/x 2>/dev/null; echo ro=$?",
        &format!(
            "volumes:\n  - {{host: {}, guest: /in, mode: ro}}\n  - {{host: {}, guest: /out, mode: rw}}\n",
            ro.display(),
            rw.display()
        ),
    );
    let mut l = launch(&dir, "volumes", &manifest);
    l.mounts = vec![mount(&ro, FolderMode::Ro), mount(&rw, FolderMode::Rw)];
    let outcome = finish(&mut executor.start(l).unwrap());
    let out = text(&outcome.stdout);
    assert!(out.starts_with("from the host\n"), "{outcome:?}");
    assert!(
        out.contains("ro=1"),
        "a read-only volume was writable: {out}"
    );
    assert!(!ro.join("x").exists());
    assert_eq!(
        std::fs::read_to_string(rw.join("result.txt")).unwrap(),
        "written\n"
    );
}

#[test]
fn a_volume_outside_the_grant_or_on_the_denylist_is_refused_or_hidden() {
    let executor = executor();
    let dir = folder("refused");
    let data = folder("data");
    let manifest = shell_manifest(
        "refused",
        "ls -a /data/.ssh; cat /data/.ssh/id_ed25519; cat /data/notes",
        &format!(
            "volumes: [{{host: {}, guest: /data, mode: ro}}]\n",
            data.display()
        ),
    );
    // Not granted: refused before any container exists.
    let l = launch(&dir, "refused", &manifest);
    let id = l.run_id.clone();
    let err = executor
        .start(l)
        .err()
        .expect("an ungranted volume is refused");
    assert_eq!(err.code(), "path_refused", "{err}");
    assert!(containers_of(&id).is_empty());

    // Granted, with a credential folder inside: the folder is masked, the rest visible.
    std::fs::create_dir_all(data.join(".ssh")).unwrap();
    std::fs::write(data.join(".ssh/id_ed25519"), "SECRET KEY").unwrap();
    std::fs::write(data.join("notes"), "visible\n").unwrap();
    let mut l = launch(&dir, "masked", &manifest);
    l.mounts = vec![mount(&data, FolderMode::Ro)];
    l.denylist = CredentialDenylist::empty().with_extra([outpost_core::grant::CanonicalPath::new(
        data.join(".ssh").to_string_lossy().into_owned(),
    )
    .unwrap()]);
    let outcome = finish(&mut executor.start(l.clone()).unwrap());
    assert!(!text(&outcome.stdout).contains("SECRET"), "{outcome:?}");
    assert!(text(&outcome.stdout).ends_with("visible\n"), "{outcome:?}");

    // A symlinked credential folder (a dotfile manager's): masked where it really is.
    std::fs::remove_dir_all(data.join(".ssh")).unwrap();
    std::fs::create_dir_all(data.join("dotfiles/ssh")).unwrap();
    std::fs::write(data.join("dotfiles/ssh/id_ed25519"), "SECRET KEY").unwrap();
    std::os::unix::fs::symlink(data.join("dotfiles/ssh"), data.join(".ssh")).unwrap();
    let mut linked = l.clone();
    linked.manifest.args[1] = "cat /data/dotfiles/ssh/id_ed25519; ls /data/dotfiles".into();
    let outcome = finish(&mut executor.start(linked).unwrap());
    assert!(!text(&outcome.stdout).contains("SECRET"), "{outcome:?}");
    assert_eq!(text(&outcome.stdout), "ssh\n", "{outcome:?}");

    // Read-write over credential paths: refused, whether they exist or not (the container
    // could rename a folder out from under a mask, or create a missing path).
    for path in [".ssh", "dotfiles"] {
        let path = data.join(path);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(&path);
    }
    let mut rw = l;
    rw.manifest.volumes[0].mode = FolderMode::Rw;
    rw.mounts = vec![mount(&data, FolderMode::Rw)];
    let err = executor
        .start(rw)
        .err()
        .expect("a rw volume over a credential path");
    assert_eq!(err.code(), "path_refused", "{err}");
}

#[test]
fn the_network_is_none_unless_asked_for_and_granted() {
    let executor = executor();
    let dir = folder("net");
    let l = launch(&dir, "net", &shell_manifest("net", "ls /sys/class/net", ""));
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(text(&outcome.stdout), "lo\n", "{outcome:?}");

    let asking = shell_manifest(
        "net",
        "ls /sys/class/net",
        "permissions: [\"connect:example.org:443\"]\n",
    );
    let l = launch(&dir, "net-none", &asking);
    let err = executor.start(l).err().expect("egress none refuses");
    assert_eq!(err.code(), "egress_denied");
    assert!(err.to_string().contains("example.org:443"), "{err}");
    let mut l = launch(&dir, "net-allowlist", &asking);
    l.egress = Egress::Allowlist {
        hosts: vec!["example.org:443".into()],
    };
    let err = executor
        .start(l)
        .err()
        .expect("an allowlist cannot be enforced");
    assert!(err.to_string().contains("allowlist"), "{err}");
    let mut l = launch(&dir, "net-all", &asking);
    l.egress = Egress::All;
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(text(&outcome.stdout), "eth0\nlo\n", "{outcome:?}");
}

#[test]
fn the_memory_limit_kills_a_container_that_goes_over_it() {
    let executor = executor();
    let dir = folder("memory");
    let l = launch(
        &dir,
        "memory",
        &shell_manifest(
            "memory",
            "dd if=/dev/zero of=/dev/null bs=64M count=1",
            "limits: {memory_mb: 16}\n",
        ),
    );
    let id = l.run_id.clone();
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(outcome.exit_code, Some(137), "{outcome:?}");
    assert!(
        text(&outcome.stderr).contains("memory limit of 16 MiB"),
        "{outcome:?}"
    );
    assert!(containers_of(&id).is_empty());
    // Within the limit, the same copy succeeds.
    let l = launch(
        &dir,
        "memory-ok",
        &shell_manifest(
            "memory",
            "dd if=/dev/zero of=/dev/null bs=64M count=1",
            "limits: {memory_mb: 256}\n",
        ),
    );
    assert_eq!(finish(&mut executor.start(l).unwrap()).exit_code, Some(0));
}

#[test]
fn containers_run_unprivileged_with_cpu_and_process_limits() {
    let executor = executor();
    let dir = folder("privileges");
    let script = "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; id -u; \
                  cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; \
                  cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max 2>/dev/null";
    let l = launch(
        &dir,
        "privileges",
        &shell_manifest(
            "privileges",
            script,
            "limits: {cpu_millicores: 500, pids_max: 64}\n",
        ),
    );
    let outcome = finish(&mut executor.start(l).unwrap());
    let out = text(&outcome.stdout);
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    let uid = nix_uid();
    assert!(
        out.contains(&format!("\n{uid}\n")),
        "runs as uid {uid}: {out}"
    );
    assert!(out.contains("\n64\n"), "pids limit: {out}");
    assert!(
        out.contains("\n50000\n") || out.contains("50000 100000"),
        "half a CPU: {out}"
    );
}

fn nix_uid() -> String {
    let out = std::process::Command::new("id").arg("-u").output().unwrap();
    text(&out.stdout).trim().to_owned()
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
    registry.register(Box::new(outpost_exec_shell::ShellExecutor::default()));
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
