//! `outpost check` against a real `outpost serve`: it passes every step and leaves nothing
//! behind, and against a server that forbids host commands it fails at the step that turns
//! them on, naming it, and still removes what it made.

mod common;

use std::process::Command;

use common::{Server, binary, temp_dir};
use serde_json::Value;

/// `outpost check --json` against `server`, with its temporary folders under `tmp`.
fn check(server: &Server, tmp: &std::path::Path) -> (bool, Value) {
    std::fs::create_dir_all(tmp).expect("a temporary folder");
    let out = Command::new(binary())
        .args(["check", "--json", "--server", &server.url])
        .env("OUTPOST_TOKEN", &server.admin)
        .env("TMPDIR", tmp)
        .output()
        .expect("outpost check runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "a JSON report ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

/// The contexts whose name begins with `outpost-check-`.
fn check_contexts(server: &Server) -> Vec<Value> {
    let (status, body) = server.api("GET", "/v1/execution-contexts", None);
    assert_eq!(status, 200, "{body}");
    body["contexts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("outpost-check-"))
        })
        .collect()
}

#[test]
fn outpost_check_passes_every_step_and_leaves_nothing_behind() {
    let dir = temp_dir("check");
    let server = Server::start(&dir.join("s"), 0);
    let tmp = dir.join("tmp");
    let (ok, report) = check(&server, &tmp);
    assert!(ok, "{report:#}");
    assert_eq!(report["ok"], true, "{report:#}");
    let steps: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "server answers",
            "join token",
            "daemon online",
            "host commands on",
            "foreground command",
            "background job",
            "audit rows",
            "terminal",
            "revoke",
            "delete"
        ]
    );
    for step in report["steps"].as_array().unwrap() {
        assert_eq!(step["ok"], true, "{step}");
        assert!(step["ms"].is_u64(), "{step}");
    }
    assert!(check_contexts(&server).is_empty(), "the context is deleted");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .expect("the temporary folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "nothing left in the temporary folder: {left:?}"
    );
    let (_, audit) = server.api("GET", "/v1/audit?limit=500", None);
    let kinds: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for kind in [
        "command_started",
        "command_finished",
        "terminal.session.started",
    ] {
        assert!(kinds.contains(&kind), "{kind} audited: {kinds:?}");
    }
}

#[test]
fn outpost_check_names_the_step_a_server_without_host_commands_fails() {
    let dir = temp_dir("check-off");
    let server = Server::start_with(
        &dir.join("s"),
        0,
        &[std::ffi::OsStr::new("--no-host-commands")],
    );
    let tmp = dir.join("tmp");
    let (ok, report) = check(&server, &tmp);
    assert!(!ok, "{report:#}");
    assert_eq!(report["failed"], "host commands on", "{report:#}");
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["ok"], false);
    assert!(
        last["detail"]
            .as_str()
            .unwrap()
            .contains("commands_disabled_on_server"),
        "{last}"
    );
    // What it made is gone all the same: the context revoked and deleted, the folder removed.
    assert!(check_contexts(&server).is_empty(), "the context is deleted");
    let left = std::fs::read_dir(&tmp)
        .expect("the temporary folder")
        .count();
    assert_eq!(left, 0, "nothing left in the temporary folder");
}
