//! `outpost run` end to end: the real binary on real capability folders.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn outpost() -> Command {
    Command::new(env!("CARGO_BIN_EXE_outpost"))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// Runs `outpost run DIR --json` (with `env`), checks the exit code, returns the JSON report.
fn run_json(dir: &Path, env: &[(&str, &Path)], code: i32) -> serde_json::Value {
    let mut command = outpost();
    command.arg("run").arg(dir).arg("--json");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `outpost run DIR` (with `env`), which must be refused before anything runs: a
/// failure status, no output from the capability. Returns what outpost said on stderr.
fn run_refused(dir: &Path, env: &[(&str, &str)]) -> String {
    let mut command = outpost();
    command.arg("run").arg(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn capability(name: &str, manifest: &str, script: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.yaml"), manifest).unwrap();
    std::fs::write(dir.join("run.sh"), script).unwrap();
    dir
}

#[test]
fn runs_the_daily_report_example() {
    let out = outpost()
        .arg("run")
        .arg(examples().join("daily-report"))
        .arg("--")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("# Daily report for "), "{stdout}");
}

#[test]
fn json_reports_the_result_and_the_exit_code_passes_through() {
    let dir = capability(
        "exit3",
        "name: exit3\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
        "echo hi; echo oops >&2; exit 3\n",
    );
    let v = run_json(&dir, &[], 3);
    assert_eq!(v["exitCode"], 3);
    assert_eq!(v["signal"], serde_json::Value::Null);
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["stderr"], "oops\n");
    assert_eq!(v["truncated"], false);
    assert_eq!(v["environment"], "shell");
    assert_eq!(v["lifecycle"], "oneshot");
    assert!(v["timing"]["executeMs"].is_u64());
}

#[test]
fn a_bad_manifest_fails_before_anything_runs() {
    let dir = capability(
        "bad",
        "name: bad\nenvironment: shell\nlifecycle: oneshot\nentry: ../run.sh\n",
        "touch ran\n",
    );
    let stderr = run_refused(&dir, &[]);
    assert!(stderr.contains("line 4, field `entry`"), "{stderr}");
    assert!(!dir.join("ran").exists());
}

#[test]
fn a_pty_capability_runs_on_a_real_terminal() {
    let dir = capability(
        "pty",
        "name: p\nenvironment: pty\nlifecycle: oneshot\nentry: run.sh\nterminal: {cols: 91, rows: 17}\n",
        "#!/bin/sh\n[ -t 0 ] && [ -t 1 ] && echo on-a-terminal\nstty size\n",
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = outpost().arg("run").arg(&dir).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("on-a-terminal"), "{stdout}");
    assert!(stdout.contains("17 91"), "the manifest's size: {stdout}");
}

#[test]
fn a_persistent_service_runs_until_sigterm() {
    let dir = std::env::temp_dir().join(format!("outpost-cli-{}-svc", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifest.yaml"),
        "name: svc\nenvironment: shell\nlifecycle: persistent\nentry: run.sh\n",
    )
    .unwrap();
    std::fs::write(dir.join("run.sh"), "echo serving\nexec sleep 300\n").unwrap();
    let mut child = outpost()
        .arg("run")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The service's first line is the event that it is up.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "serving\n");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("svc stopped"), "{stderr}");
}

#[test]
fn runs_a_wasm_module() {
    let dir = std::env::temp_dir().join(format!("outpost-cli-{}-wasm", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifest.yaml"),
        "name: exit5\nenvironment: wasm\nlifecycle: oneshot\nentry: exit.wat\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("exit.wat"),
        r#"(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
             (memory (export "memory") 1) (func (export "_start") (call $exit (i32.const 5))))"#,
    )
    .unwrap();
    let v = run_json(&dir, &[("XDG_CACHE_HOME", &dir.join("cache"))], 5);
    assert_eq!(v["environment"], "wasm");
}

/// The test image the exec-docker tests also use, made from the static busybox if missing.
fn docker_test_image() -> &'static str {
    use outpost_exec_docker::{DockerConfig, DockerExecutor, ensure_busybox_image};
    const IMAGE: &str = "outpost-test/busybox:latest";
    let executor = DockerExecutor::new(DockerConfig::default()).unwrap();
    let docker = executor.client().expect("the Docker engine answers");
    executor
        .block_on(ensure_busybox_image(
            &docker,
            IMAGE,
            Path::new("/bin/busybox"),
        ))
        .expect("the test image can be made from busybox-static");
    IMAGE
}

/// A oneshot docker capability running `command` with `sh -c` in the test image.
fn boxed(tag: &str, command: &str) -> PathBuf {
    let image = docker_test_image();
    capability(
        tag,
        &format!(
            "name: boxed\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {image}\n\
             entry: sh\nargs: [\"-c\", {command:?}]\n"
        ),
        "",
    )
}

#[test]
fn runs_a_container_and_passes_its_exit_code_through() {
    let dir = boxed("docker", "echo from the box; ls /sys/class/net; exit 4");
    let v = run_json(&dir, &[], 4);
    assert_eq!(v["environment"], "docker");
    assert_eq!(v["stdout"], "from the box\nlo\n");
}

#[test]
fn an_unreachable_docker_engine_is_refused_and_nothing_else_runs() {
    let dir = capability(
        "docker-dead",
        "name: boxed\nenvironment: docker\nlifecycle: oneshot\ndocker_image: any:1\n\
         entry: sh\nargs: [run.sh]\n",
        "touch ran\n",
    );
    let dead = dir.join("dead.sock");
    let stderr = run_refused(
        &dir,
        &[("DOCKER_HOST", &format!("unix://{}", dead.display()))],
    );
    assert!(
        stderr.contains("Docker is unavailable; the capability cannot be executed"),
        "{stderr}"
    );
    assert!(stderr.contains(&dead.display().to_string()), "{stderr}");
    assert!(stderr.contains("DOCKER_HOST"), "{stderr}");
    assert!(!dir.join("ran").exists(), "the capability ran elsewhere");
}

#[test]
fn ctrl_c_stops_a_container_and_removes_it() {
    let dir = boxed("docker-interrupt", "echo ready; sleep 60");
    let mut child = outpost()
        .arg("run")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The container's first line is the event that it runs.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    let run_label = format!("label=dev.outpost.run-id=local-{}", child.id());
    let listed = |label: &str| {
        let out = Command::new("docker")
            .args(["ps", "-a", "-q", "--filter", label])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    assert_eq!(listed(&run_label), 1);
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_eq!(listed(&run_label), 0, "the container outlived Ctrl-C");
}

#[test]
fn a_persistent_container_serves_its_port_until_sigterm() {
    use std::io::{BufRead, Read, Write};
    let image = docker_test_image();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = capability(
        "docker-service",
        &format!(
            "name: web\nenvironment: docker\nlifecycle: persistent\ndocker_image: {image}\n\
             entry: sh\nargs: [\"-c\", \"exec httpd -f -p $PORT -h /www\"]\nport: {port}\n\
             volumes: [{{host: ., guest: /www, mode: ro}}]\n"
        ),
        "",
    );
    std::fs::write(dir.join("index.html"), "served by outpost\n").unwrap();
    let mut child = outpost()
        .arg("run")
        .arg(&dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // outpost's own line is the event that the service was started.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains(&format!("on port {port}")), "{line}");
    // The server inside starts listening a moment later; its answer is the only event.
    let ask = || {
        std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok(body)
        })
    };
    let body = common::wait_for_explained(
        "the service to answer on its port",
        || ask().ok().filter(|body| !body.is_empty()),
        || format!("it answers: {:?}", ask()),
    );
    assert!(body.contains("served by outpost"), "{body}");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=dev.outpost.run-id=local-{}", child.id()),
        ])
        .output()
        .unwrap();
    assert!(
        out.stdout.is_empty(),
        "the service's container outlived SIGTERM"
    );
}
