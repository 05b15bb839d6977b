//! What a container may reach, on the machine's real Docker engine: only its declared
//! volumes with their modes (credential paths hidden), no network unless granted, its memory,
//! CPU and process limits, and no privileges.

mod common;

use common::*;
use outpost_core::grant::CredentialDenylist;
use outpost_core::wire::{Egress, FolderMode};

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
    // An allowlist: loopback only, the egress gate listening on it (see tests/egress.rs).
    let outcome = finish(&mut executor.start(l).unwrap());
    assert_eq!(text(&outcome.stdout), "lo\n", "{outcome:?}");
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
