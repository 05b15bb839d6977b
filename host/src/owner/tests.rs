use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use std::time::Duration;

use outpost_core::daemon::{Capability, Execute};
use outpost_core::grant::{CanonicalPath, LocalPolicy};
use outpost_core::time::Instant;
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, Grant, GrantLimits, InlineFile,
};

use super::{OwnerError, OwnerFolders};
use crate::{LaunchContext, check_cwd, launch_from_execute};

/// Folders from exactly these variables (paths under no existing folder stay as written).
fn folders(vars: &[(&str, &str)]) -> Result<OwnerFolders, OwnerError> {
    let vars: BTreeMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect();
    OwnerFolders::from_vars(|name| vars.get(name).cloned())
}

fn p(s: &str) -> CanonicalPath {
    CanonicalPath::new(s).unwrap()
}

#[test]
fn the_xdg_folders_default_under_home() {
    let f = folders(&[("HOME", "/nonexistent/ana")]).unwrap();
    assert_eq!(f.home, Some(PathBuf::from("/nonexistent/ana")));
    assert_eq!(f.config, PathBuf::from("/nonexistent/ana/.config/outpost"));
    assert_eq!(f.cache, PathBuf::from("/nonexistent/ana/.cache/outpost"));
    assert_eq!(
        f.state,
        PathBuf::from("/nonexistent/ana/.local/state/outpost")
    );
    assert_eq!(
        f.wasm_cache(),
        PathBuf::from("/nonexistent/ana/.cache/outpost/wasm")
    );
    assert_eq!(
        f.local_policy_file(),
        PathBuf::from("/nonexistent/ana/.config/outpost/policy.json")
    );
}

#[test]
fn absolute_xdg_folders_win_and_relative_ones_are_ignored() {
    let f = folders(&[
        ("HOME", "/nonexistent/ana"),
        ("XDG_CONFIG_HOME", "/nonexistent/conf"),
        ("XDG_CACHE_HOME", "relative/cache"),
    ])
    .unwrap();
    assert_eq!(f.config, PathBuf::from("/nonexistent/conf/outpost"));
    assert_eq!(f.cache, PathBuf::from("/nonexistent/ana/.cache/outpost"));
}

#[test]
fn outpost_home_holds_everything_in_one_folder() {
    let f = folders(&[
        ("HOME", "/nonexistent/ana"),
        ("OUTPOST_HOME", "/nonexistent/op"),
    ])
    .unwrap();
    let root = PathBuf::from("/nonexistent/op");
    assert_eq!(
        (&f.config, &f.cache, &f.state),
        (
            &root.join("config"),
            &root.join("cache"),
            &root.join("state")
        )
    );
    assert_eq!(f.runs_dir(), root.join("state/runs"));
    assert_eq!(f.wasm_cache(), root.join("cache/wasm"));
    assert_eq!(f.local_policy_file(), root.join("config/policy.json"));
}

#[test]
fn under_outpost_home_a_daemon_run_may_start_in_its_own_folder() {
    let root = std::env::temp_dir().join(format!("outpost-host-owner-op-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let f = folders(&[("OUTPOST_HOME", root.to_str().unwrap())]).unwrap();
    let denylist = f.denylist().unwrap();
    let local = LocalPolicy::default();
    let cx = LaunchContext {
        runs_dir: &f.runs_dir(),
        local: &local,
        denylist: &denylist,
        now: Instant::from_origin(Duration::ZERO),
        context: "ec_test",
    };
    let execute = Execute {
        run_id: "run-1".into(),
        environment: Environment::Shell,
        capability: Capability::Inline(CapabilitySource::Inline {
            manifest: "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: vec![InlineFile {
                path: "run.sh".into(),
                content_b64: outpost_core::b64::encode(b"echo hi\n"),
            }],
        }),
        grant: Grant {
            fs: Vec::new(),
            egress: Egress::None,
            commands: CommandsGrant { enabled: false },
            limits: GrantLimits { max_concurrent: 1 },
            environments: None,
        },
        deadline: Instant::from_origin(Duration::from_secs(10)),
        shared_run: false,
        requester: String::new(),
    };
    let launch = launch_from_execute(&execute, &cx).unwrap().launch;
    let cwd = check_cwd(&launch.dir, None, &launch.mounts, &launch.denylist).unwrap();
    assert_eq!(cwd, launch.dir);
    // The config folder (keys, policy) is still denylisted as a whole.
    let policy = CanonicalPath::new(format!(
        "{}/config/policy.json",
        root.canonicalize().unwrap().display()
    ))
    .unwrap();
    assert!(denylist.denying(&policy).is_some());
    std::fs::create_dir_all(&f.config).unwrap();
    assert_eq!(
        check_cwd(
            &launch.dir,
            Some(&f.config),
            &launch.mounts,
            &launch.denylist
        )
        .unwrap_err()
        .code(),
        "path_refused"
    );
}

#[test]
fn without_a_home_the_folders_are_unknown_unless_named() {
    assert_eq!(folders(&[]).unwrap_err(), OwnerError::NoHome);
    assert_eq!(folders(&[("HOME", "ana")]).unwrap_err(), OwnerError::NoHome);
    let f = folders(&[
        ("XDG_CONFIG_HOME", "/nonexistent/conf"),
        ("XDG_CACHE_HOME", "/nonexistent/cache"),
        ("XDG_STATE_HOME", "/nonexistent/state"),
    ])
    .unwrap();
    let deny = f.denylist().unwrap();
    assert_eq!(deny.entries(), &[p("/nonexistent/conf/outpost")]);
}

#[test]
fn the_denylist_guards_the_home_credentials_and_the_config_folder() {
    let f = folders(&[("HOME", "/nonexistent/ana")]).unwrap();
    let deny = f.denylist().unwrap();
    for denied in [
        "/nonexistent/ana/.ssh/id_ed25519",
        "/nonexistent/ana/.aws",
        "/nonexistent/ana/.config/outpost/policy.json",
    ] {
        assert!(deny.denying(&p(denied)).is_some(), "{denied}");
    }
    assert!(deny.denying(&p("/nonexistent/ana/projects")).is_none());
}

#[test]
fn a_symlinked_home_is_denylisted_where_it_really_is() {
    let real = std::env::temp_dir().join(format!("outpost-host-owner-{}", std::process::id()));
    std::fs::create_dir_all(real.join(".ssh")).unwrap();
    let real = real.canonicalize().unwrap();
    let link = real.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let f = folders(&[("HOME", link.to_str().unwrap())]).unwrap();
    assert_eq!(f.home.as_deref(), Some(real.as_path()));
    let key = CanonicalPath::new(format!("{}/.ssh/id_rsa", real.display())).unwrap();
    assert!(f.denylist().unwrap().denying(&key).is_some());
}

#[test]
fn a_config_folder_not_created_yet_is_denylisted_under_its_symlinked_parent() {
    let base = std::env::temp_dir().join(format!("outpost-host-owner-xdg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (home, dotfiles) = (base.join("home"), base.join("dotfiles/config"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&dotfiles).unwrap();
    let dotfiles = dotfiles.canonicalize().unwrap();
    std::os::unix::fs::symlink(&dotfiles, home.join(".config")).unwrap();
    let f = folders(&[("HOME", home.to_str().unwrap())]).unwrap();
    // `~/.config/outpost` does not exist yet; it will be created inside the link's target.
    assert_eq!(f.config, dotfiles.join("outpost"));
    assert_eq!(f.local_policy_file(), dotfiles.join("outpost/policy.json"));
    let key = CanonicalPath::new(format!("{}/outpost/key.json", dotfiles.display())).unwrap();
    assert!(f.denylist().unwrap().denying(&key).is_some());
    // A folder under no existing one at all stays as written.
    let f = folders(&[("OUTPOST_HOME", "/nonexistent/op")]).unwrap();
    assert_eq!(f.config, PathBuf::from("/nonexistent/op/config"));
}
