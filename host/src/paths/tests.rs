use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outpost_core::executor::{ExecError, Launch};
use outpost_core::grant::{CredentialDenylist, Mount};
use outpost_core::manifest::Manifest;
use outpost_core::wire::{Egress, FolderMode};

use super::*;

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-host-paths-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// A folder whose name is the bytes `caf\xe9` (Latin-1 "café"): a valid Linux name, not UTF-8.
fn latin1_folder(parent: &Path) -> PathBuf {
    let dir = parent.join(OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn launch(dir: &Path, mounts: Vec<Mount>) -> Launch {
    Launch {
        run_id: "paths".into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        manifest: Manifest::parse(
            "name: p\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
        )
        .unwrap(),
        extra_args: Vec::new(),
        mounts,
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout: Duration::from_secs(1),
        egress: Egress::None,
        confined: false,
        context: String::new(),
    }
}

#[test]
fn a_non_utf8_path_is_refused_never_rewritten() {
    let base = folder("latin1");
    let odd = latin1_folder(&base);
    let err = resolve(&odd).unwrap_err();
    assert_eq!(err, HostPathError::NotUtf8(odd.clone()));
    assert_eq!(err.code(), "path_not_utf8");
    assert!(as_canonical(&odd).is_err());

    // As a working directory and as a volume, even with its parent granted read-write.
    let grant = Mount {
        path: as_canonical(&base).unwrap(),
        mode: FolderMode::Rw,
        excluded: Vec::new(),
    };
    let err = check_cwd(
        &base,
        Some(&odd),
        std::slice::from_ref(&grant),
        &CredentialDenylist::empty(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ExecError::PathRefused { reason, .. } if reason.contains("UTF-8")),
        "{err}"
    );
    let l = launch(&base, vec![grant]);
    let err = resolve_volume(&l, odd.to_str().unwrap_or("caf\u{fffd}"), FolderMode::Ro);
    assert_eq!(err.unwrap_err().code(), "path_refused");
    let relative = resolve_volume(&l, "caf\u{fffd}", FolderMode::Ro);
    assert!(relative.is_err(), "the lossy spelling names no folder");
}

#[test]
fn a_non_utf8_capability_folder_is_refused_for_its_entry() {
    let odd = latin1_folder(&folder("latin1-entry"));
    std::fs::write(odd.join("run.sh"), "true\n").unwrap();
    let err = resolve_entry(&odd, "run.sh").unwrap_err();
    assert_eq!(err.code(), "path_refused");
    assert!(err.to_string().contains("UTF-8"), "{err}");
}

#[test]
fn an_entry_that_links_outside_the_folder_is_refused() {
    let dir = folder("escape");
    let outside = folder("escape-target");
    std::fs::write(outside.join("tool"), "true\n").unwrap();
    std::os::unix::fs::symlink(outside.join("tool"), dir.join("run.sh")).unwrap();
    let err = resolve_entry(&dir, "run.sh").unwrap_err();
    assert!(
        err.to_string().contains("outside the capability folder"),
        "{err}"
    );
    std::fs::write(dir.join("own.sh"), "true\n").unwrap();
    assert_eq!(resolve_entry(&dir, "own.sh").unwrap(), dir.join("own.sh"));
}

#[test]
fn a_volume_is_granted_by_its_mount_and_refused_outside_it() {
    let dir = folder("volumes");
    let data = folder("volumes-data");
    let ro = Mount {
        path: as_canonical(&data).unwrap(),
        mode: FolderMode::Ro,
        excluded: Vec::new(),
    };
    let l = launch(&dir, vec![ro]);
    assert_eq!(
        resolve_volume(&l, data.to_str().unwrap(), FolderMode::Ro).unwrap(),
        data
    );
    let err = resolve_volume(&l, data.to_str().unwrap(), FolderMode::Rw).unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    // `.` is the capability folder: readable without a mount, never writable.
    assert_eq!(resolve_volume(&l, ".", FolderMode::Ro).unwrap(), dir);
    assert!(resolve_volume(&l, ".", FolderMode::Rw).is_err());
}

#[test]
fn a_volume_inside_a_symlinked_capability_folder_needs_no_mount() {
    let real = folder("linked-capability");
    std::fs::create_dir_all(real.join("assets")).unwrap();
    let link = real.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let l = launch(&link, Vec::new());
    assert_eq!(
        resolve_volume(&l, "assets", FolderMode::Ro).unwrap(),
        real.join("assets")
    );
    assert_eq!(resolve_volume(&l, ".", FolderMode::Ro).unwrap(), real);
    assert!(resolve_volume(&l, "assets", FolderMode::Rw).is_err());
}
