use std::path::{Path, PathBuf};
use std::time::Duration;

use outpost_core::daemon::{Capability, Execute};
use outpost_core::grant::{CanonicalPath, CredentialDenylist, LocalFolder, LocalPolicy};
use outpost_core::manifest::Manifest;
use outpost_core::time::Instant;
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, FolderGrant, FolderMode, Grant,
    GrantLimits, InlineFile,
};

use super::*;

fn folder(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("outpost-host-launch-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn canonical(path: &Path) -> CanonicalPath {
    CanonicalPath::new(path.to_str().unwrap()).unwrap()
}

const MANIFEST: &str = "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: bin/tool\ninterpreter: none\nlimits: {timeout_ms: 30000}\n";

fn grant(fs: Vec<FolderGrant>) -> Grant {
    Grant {
        fs,
        egress: Egress::Allowlist {
            hosts: vec!["api.example.com:443".into()],
        },
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent: 2 },
        environments: None,
    }
}

fn execute(run_id: &str, grant: Grant, shared_run: bool) -> Execute {
    Execute {
        run_id: run_id.into(),
        environment: Environment::Shell,
        capability: Capability::Inline(CapabilitySource::Inline {
            manifest: MANIFEST.into(),
            files: vec![InlineFile {
                path: "bin/tool".into(),
                content_b64: outpost_core::b64::encode(b"#!/bin/sh\necho hi\n"),
            }],
        }),
        grant,
        deadline: Instant::from_origin(Duration::from_secs(100)),
        shared_run,
        requester: "ada".into(),
    }
}

fn folder_grant(path: &Path, mode: FolderMode) -> FolderGrant {
    FolderGrant {
        path: path.display().to_string(),
        mode,
    }
}

#[test]
fn an_execute_becomes_a_launch_with_grant_and_policy_intersected() {
    let runs = folder("runs");
    let data = folder("data");
    std::fs::create_dir_all(data.join("shared")).unwrap();
    let elsewhere = folder("elsewhere");
    let local = LocalPolicy {
        daemon_control: None,
        record_terminal_input: false,
        folders: vec![LocalFolder {
            path: canonical(&data),
            mode: FolderMode::Ro,
        }],
        commands_enabled: false,
        auto_update: None,
        confinement: Default::default(),
    };
    let denylist = CredentialDenylist::empty();
    let cx = LaunchContext {
        runs_dir: &runs,
        local: &local,
        denylist: &denylist,
        now: Instant::from_origin(Duration::from_secs(90)),
        context: "ec_test",
    };
    let ex = execute(
        "run-1",
        grant(vec![
            folder_grant(&data.join("shared"), FolderMode::Rw),
            folder_grant(&elsewhere, FolderMode::Rw),
            folder_grant(Path::new("/nonexistent/outpost-grant"), FolderMode::Ro),
            folder_grant(Path::new("relative"), FolderMode::Ro),
        ]),
        false,
    );
    let prepared = launch_from_execute(&ex, &cx).unwrap();
    let launch = &prepared.launch;
    assert_eq!(launch.run_id, "run-1");
    assert_eq!(launch.dir, runs.join("run-1"));
    assert_eq!(launch.manifest, Manifest::parse(MANIFEST).unwrap());
    // Only the granted folder inside the local one, narrowed to the policy's `ro`.
    assert_eq!(launch.mounts.len(), 1);
    assert_eq!(launch.mounts[0].path, canonical(&data.join("shared")));
    assert_eq!(launch.mounts[0].mode, FolderMode::Ro);
    assert_eq!(launch.egress, ex.grant.egress);
    // Sandboxed by default, with the context named for the gate's refusals.
    assert!(launch.confined);
    assert_eq!(launch.context, "ec_test");
    // 10 s left before the deadline, less than the manifest's 30 s.
    assert_eq!(launch.timeout, Duration::from_secs(10));
    let skipped: Vec<&str> = prepared.skipped.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(skipped, ["/nonexistent/outpost-grant", "relative"]);
    // The capability folder holds the manifest and an executable entry.
    let tool = launch.dir.join("bin/tool");
    assert_eq!(std::fs::read(&tool).unwrap(), b"#!/bin/sh\necho hi\n");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&tool).unwrap().permissions().mode() & 0o111,
        0o111
    );
    assert_eq!(
        std::fs::read_to_string(launch.dir.join("manifest.yaml")).unwrap(),
        MANIFEST
    );
}

#[test]
fn a_shared_run_gets_no_folders_and_a_passed_deadline_no_time() {
    let runs = folder("shared-runs");
    let data = folder("shared-data");
    let local = LocalPolicy {
        daemon_control: None,
        record_terminal_input: false,
        folders: vec![LocalFolder {
            path: canonical(&data),
            mode: FolderMode::Rw,
        }],
        commands_enabled: false,
        auto_update: None,
        confinement: Default::default(),
    };
    let denylist = CredentialDenylist::empty();
    let cx = LaunchContext {
        runs_dir: &runs,
        local: &local,
        denylist: &denylist,
        now: Instant::from_origin(Duration::from_secs(500)),
        context: "ec_test",
    };
    let prepared = launch_from_execute(
        &execute(
            "run-2",
            grant(vec![folder_grant(&data, FolderMode::Rw)]),
            true,
        ),
        &cx,
    )
    .unwrap();
    assert!(prepared.launch.mounts.is_empty());
    assert_eq!(prepared.launch.timeout, Duration::ZERO);
}

#[test]
fn denylisted_grant_folders_are_never_mounted() {
    let runs = folder("deny-runs");
    let home = folder("deny-home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let local = LocalPolicy {
        daemon_control: None,
        record_terminal_input: false,
        folders: vec![LocalFolder {
            path: canonical(&home),
            mode: FolderMode::Rw,
        }],
        commands_enabled: false,
        auto_update: None,
        confinement: Default::default(),
    };
    let denylist = CredentialDenylist::for_home(&canonical(&home), &canonical(&home.join(".op")));
    let cx = LaunchContext {
        runs_dir: &runs,
        local: &local,
        denylist: &denylist,
        now: Instant::from_origin(Duration::ZERO),
        context: "ec_test",
    };
    let ex = execute(
        "run-3",
        grant(vec![
            folder_grant(&home.join(".ssh"), FolderMode::Ro),
            folder_grant(&home, FolderMode::Ro),
        ]),
        false,
    );
    let launch = launch_from_execute(&ex, &cx).unwrap().launch;
    assert_eq!(launch.mounts.len(), 1, "{:?}", launch.mounts);
    assert_eq!(launch.mounts[0].path, canonical(&home));
    assert!(
        launch.mounts[0]
            .excluded
            .contains(&canonical(&home.join(".ssh")))
    );
    assert_eq!(launch.denylist, denylist);
}

#[test]
fn refusals_come_before_anything_is_written() {
    let runs = folder("refuse-runs");
    let local = LocalPolicy::default();
    let denylist = CredentialDenylist::empty();
    let cx = LaunchContext {
        runs_dir: &runs,
        local: &local,
        denylist: &denylist,
        now: Instant::from_origin(Duration::ZERO),
        context: "ec_test",
    };
    let code = |ex: Execute| launch_from_execute(&ex, &cx).unwrap_err().code();

    let mut ex = execute("../escape", grant(Vec::new()), false);
    assert_eq!(code(ex.clone()), "invalid_capability");
    ex.run_id = "a/b".into();
    assert_eq!(code(ex.clone()), "invalid_capability");

    let mut ex = execute("bad-file", grant(Vec::new()), false);
    if let Capability::Inline(CapabilitySource::Inline { files, .. }) = &mut ex.capability {
        files[0].path = "../../outside".into();
    }
    assert_eq!(code(ex), "invalid_capability");

    let mut ex = execute("other-env", grant(Vec::new()), false);
    ex.environment = Environment::Wasm;
    assert_eq!(code(ex), "invalid_capability");

    let mut ex = execute("not-granted", grant(Vec::new()), false);
    ex.grant.environments = Some(vec![Environment::Wasm]);
    assert_eq!(code(ex), "environment_not_granted");

    let mut ex = execute("bundle", grant(Vec::new()), false);
    ex.capability = Capability::Bundle {
        sha256: "00".repeat(32),
        bytes: Vec::new(),
    };
    assert_eq!(code(ex), "invalid_capability");

    let mut ex = execute("bad-manifest", grant(Vec::new()), false);
    ex.capability = Capability::Inline(CapabilitySource::Inline {
        manifest: "name: t\n".into(),
        files: Vec::new(),
    });
    assert_eq!(code(ex), "invalid_manifest");

    for refused in [
        "bad-file",
        "other-env",
        "not-granted",
        "bundle",
        "bad-manifest",
    ] {
        assert!(!runs.join(refused).exists(), "{refused} was written");
    }
    assert!(!runs.parent().unwrap().join("escape").exists());
}

#[test]
fn the_owners_run_mounts_its_declared_volumes_minus_the_denylist() {
    let dir = folder("owner");
    let home = folder("owner-home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let manifest = Manifest::parse(&format!(
        "name: o\nenvironment: wasm\nlifecycle: oneshot\nentry: m.wat\nvolumes:\n\
         - {{host: data, guest: /data, mode: rw}}\n\
         - {{host: {home}, guest: /home, mode: ro}}\n\
         - {{host: {home}/.ssh, guest: /keys, mode: ro}}\n",
        home = home.display()
    ))
    .unwrap();
    let denylist = CredentialDenylist::for_home(&canonical(&home), &canonical(&home.join(".op")));
    let mounts = owner_mounts(&dir, &manifest, &denylist).unwrap();
    let got: Vec<(String, FolderMode)> = mounts
        .iter()
        .map(|m| (m.path.to_string(), m.mode))
        .collect();
    assert_eq!(
        got,
        vec![
            (dir.join("data").display().to_string(), FolderMode::Rw),
            (home.display().to_string(), FolderMode::Ro),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    let home_mount = mounts.iter().find(|m| m.path == canonical(&home)).unwrap();
    assert!(home_mount.excluded.contains(&canonical(&home.join(".ssh"))));

    let missing = Manifest::parse(
        "name: o\nenvironment: wasm\nlifecycle: oneshot\nentry: m.wat\nvolumes: [{host: nope, guest: /n, mode: ro}]\n",
    )
    .unwrap();
    let err = owner_mounts(&dir, &missing, &denylist).unwrap_err();
    assert_eq!(err.code(), "path_unresolvable");
}

#[test]
fn a_pty_entry_file_is_made_executable_and_a_shell_script_is_not() {
    use std::os::unix::fs::PermissionsExt as _;
    let runs = folder("pty-runs");
    for (environment, entry_mode) in [("pty", 0o111), ("shell", 0)] {
        let capability = Capability::Inline(CapabilitySource::Inline {
            manifest: format!(
                "name: t\nenvironment: {environment}\nlifecycle: oneshot\nentry: run\n"
            ),
            files: vec![InlineFile {
                path: "run".into(),
                content_b64: outpost_core::b64::encode(b"#!/bin/sh\necho hi\n"),
            }],
        });
        let dir = materialize(&capability, &runs, environment).unwrap().dir;
        let mode = std::fs::metadata(dir.join("run"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, entry_mode, "{environment}");
    }
}

#[test]
fn a_wasm_capability_without_volumes_stays_in_memory_and_one_with_volumes_is_written() {
    let runs = folder("wasm-runs");
    let denylist = CredentialDenylist::empty();
    let local = LocalPolicy::default();
    let cx = LaunchContext {
        runs_dir: &runs,
        local: &local,
        denylist: &denylist,
        now: Instant::from_origin(Duration::from_secs(1)),
        context: "ec_test",
    };
    let module = b"(module (func (export \"_start\")))";
    let wasm = |run_id: &str, manifest: &str| {
        let mut ex = execute(run_id, grant(Vec::new()), false);
        ex.environment = Environment::Wasm;
        ex.capability = Capability::Inline(CapabilitySource::Inline {
            manifest: manifest.into(),
            files: vec![
                InlineFile {
                    path: "m.wat".into(),
                    content_b64: outpost_core::b64::encode(module),
                },
                InlineFile {
                    path: "data/in.txt".into(),
                    content_b64: outpost_core::b64::encode(b"input"),
                },
            ],
        });
        launch_from_execute(&ex, &cx).unwrap().launch
    };
    let plain = wasm(
        "w1",
        "name: w\nenvironment: wasm\nlifecycle: oneshot\nentry: m.wat\n",
    );
    assert_eq!(plain.entry_bytes.as_deref(), Some(module.as_slice()));
    assert!(
        !plain.dir.exists(),
        "nothing written for {}",
        plain.dir.display()
    );
    // A volume may name a folder of the capability: the folder is written, as for any other
    // environment.
    let with_volume = wasm(
        "w2",
        "name: w\nenvironment: wasm\nlifecycle: oneshot\nentry: m.wat\nvolumes: [{host: data, guest: /data, mode: ro}]\n",
    );
    assert_eq!(with_volume.entry_bytes, None);
    assert_eq!(
        std::fs::read(with_volume.dir.join("data/in.txt")).unwrap(),
        b"input"
    );
    // An entry no file names is left to the folder's resolution (and the executor's refusal).
    let unnamed = wasm(
        "w3",
        "name: w\nenvironment: wasm\nlifecycle: oneshot\nentry: other.wat\n",
    );
    assert_eq!(unnamed.entry_bytes, None);
    assert!(unnamed.dir.join("m.wat").is_file());
}

/// Only the owner's `operator-may-opt-out` and the operator's own `confine: false` together
/// leave a run unsandboxed; a shared run on the same machine stays sandboxed.
#[test]
fn confine_false_counts_only_for_the_operator_where_the_owner_allows_it() {
    use outpost_core::grant::ConfinementPolicy;
    let runs = folder("confine-runs");
    let denylist = CredentialDenylist::empty();
    let opting_out = |run_id: &str, shared: bool, policy: ConfinementPolicy| {
        let mut ex = execute(run_id, grant(Vec::new()), shared);
        ex.capability = Capability::Inline(CapabilitySource::Inline {
            manifest: format!("{MANIFEST}confine: false\n"),
            files: vec![InlineFile {
                path: "bin/tool".into(),
                content_b64: outpost_core::b64::encode(b"#!/bin/sh\n"),
            }],
        });
        let local = LocalPolicy {
            confinement: policy,
            ..LocalPolicy::default()
        };
        let cx = LaunchContext {
            runs_dir: &runs,
            local: &local,
            denylist: &denylist,
            now: Instant::from_origin(Duration::ZERO),
            context: "ec_test",
        };
        launch_from_execute(&ex, &cx).unwrap().launch.confined
    };
    assert!(opting_out("a", false, ConfinementPolicy::Required));
    assert!(!opting_out(
        "b",
        false,
        ConfinementPolicy::OperatorMayOptOut
    ));
    assert!(opting_out("c", true, ConfinementPolicy::OperatorMayOptOut));
}
