//! The test image's identity is checked, not its tag trusted: an image of another making under
//! the name is rebuilt.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use outpost_exec_docker::{
    DockerExecutor, Ensured, LABEL_SOURCE, busybox_rootfs, ensure_busybox_image, source_digest,
};

/// `docker import` of `rootfs` as `tag` with these `--change`s, through the docker CLI: an
/// image made the way a person might, outside the helper.
fn import_by_hand(tag: &str, rootfs: &[u8], changes: &[&str]) {
    let mut command = Command::new("docker");
    command.arg("import");
    for change in changes {
        command.args(["--change", change]);
    }
    let mut child = command
        .args(["-", tag])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("the docker CLI runs");
    child.stdin.take().unwrap().write_all(rootfs).unwrap();
    assert!(child.wait().unwrap().success(), "docker import {tag}");
}

fn inspect(tag: &str, format: &str) -> String {
    let out = Command::new("docker")
        .args(["image", "inspect", tag, "--format", format])
        .output()
        .expect("the docker CLI runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs `sh -c 'echo ok'` in `tag`: `sh` is only found through the image's `PATH`.
fn echo_ok(executor: &DockerExecutor, tag: &str) -> Option<i32> {
    let dir = folder("identity-run");
    let manifest = format!(
        "name: ok\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {tag}\n\
         entry: sh\nargs: [\"-c\", \"echo ok\"]\n"
    );
    let mut run = executor
        .start(launch(&dir, "identity", &manifest))
        .expect("starts");
    let outcome = finish(&mut run);
    assert_eq!(text(&outcome.stdout), "ok\n", "{}", text(&outcome.stderr));
    outcome.exit_code
}

#[test]
fn an_image_of_another_making_under_the_tag_is_rebuilt() {
    let executor = executor();
    let docker = executor.client().unwrap();
    let tag = format!(
        "outpost-test/busybox-identity-{}:latest",
        std::process::id()
    );
    let rootfs = busybox_rootfs(Path::new(BUSYBOX)).unwrap();
    let ensure = || {
        executor
            .block_on(ensure_busybox_image(&docker, &tag, Path::new(BUSYBOX)))
            .unwrap()
    };

    // The same files, no `PATH` in its config: the image that broke the docker tests once.
    import_by_hand(&tag, &rootfs, &[]);
    assert_eq!(ensure(), Ensured::Built);
    assert_eq!(inspect(&tag, "{{json .Config.Env}}"), r#"["PATH=/bin"]"#);
    assert_eq!(
        inspect(
            &tag,
            &format!("{{{{index .Config.Labels {LABEL_SOURCE:?}}}}}")
        ),
        source_digest(&rootfs)
    );
    assert_eq!(echo_ok(&executor, &tag), Some(0));
    assert_eq!(ensure(), Ensured::Kept, "the right image is kept");

    // Other files under a copied label: the layer gives it away.
    let mut other = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(3);
    other
        .append_data(&mut header, "etc/other", &b"no\n"[..])
        .unwrap();
    let other = other.into_inner().unwrap();
    let label = format!("LABEL {LABEL_SOURCE}={}", source_digest(&rootfs));
    import_by_hand(&tag, &other, &["ENV PATH=/bin", &label]);
    assert_eq!(ensure(), Ensured::Built);
    assert_eq!(echo_ok(&executor, &tag), Some(0));

    let _ = Command::new("docker")
        .args(["rmi", "-f", &tag])
        .stdout(Stdio::null())
        .status();
}
