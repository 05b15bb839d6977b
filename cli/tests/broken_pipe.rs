//! Every command whose output nobody reads any more (its stdout a pipe whose reader is gone,
//! as in `outpost context list --json | head -1`) ends quietly: no panic, nothing on stderr,
//! exit status 141 (what a shell reports for a program killed by `SIGPIPE`).

mod common;

use std::process::{Command, Output, Stdio};

use common::{Server, temp_dir};

/// Runs `outpost ARGS` with stdout a pipe whose read end is already closed: its first write
/// fails with `EPIPE`.
fn unread(args: &[&str], server: Option<&Server>) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut command = Command::new(common::binary());
    command.args(args);
    if let Some(server) = server {
        command
            .args(["--server", &server.url])
            .env("OUTPOST_TOKEN", &server.admin);
    }
    command
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("outpost runs")
}

fn quiet(args: &[&str], out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
    assert!(stderr.is_empty(), "{args:?} said something: {stderr}");
}

#[test]
fn every_command_ends_quietly_with_141_when_its_output_is_not_read() {
    let dir = temp_dir("broken-pipe");
    let server = Server::start(&dir.join("server"), 0);
    let with_server: [&[&str]; 9] = [
        &["context", "list", "--json"],
        &["context", "list"],
        &["chain", "show"],
        &["chain", "set", "cloud", "--json"],
        &["runs", "list", "--json"],
        &["runs", "list"],
        &["audit"],
        &["wait", "list", "--json"],
        &["user", "add", "ana"],
    ];
    for args in with_server {
        quiet(args, &unread(args, Some(&server)));
    }
    for args in [&["version"][..], &["version", "--json"]] {
        quiet(args, &unread(args, None));
    }
    // A local run streaming its output: the run is stopped and the command ends quietly.
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("cap");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: talk\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nlimits: {timeout_ms: 60000}\n",
    )
    .expect("manifest");
    std::fs::write(
        cap.join("run.sh"),
        "while :; do echo talking; sleep 0.01; done\n",
    )
    .expect("script");
    let started = std::time::Instant::now();
    let args = ["run", cap.to_str().expect("utf-8")];
    quiet(&args, &unread(&args, None));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(50),
        "the run was stopped, not waited out"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
