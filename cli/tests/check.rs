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

/// The processes whose command line names `path` (a daemon started with `--home` under it).
fn processes_naming(path: &std::path::Path) -> Vec<String> {
    let needle = path.display().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle))
        .collect()
}

/// Interrupted once its daemon is online (Ctrl-C, as a person would), `outpost check` removes
/// what it made — the daemon stopped, the context revoked and deleted, the folder gone — and
/// exits 130. Its plain output is a line per step.
#[test]
fn an_interrupted_outpost_check_leaves_nothing_behind() {
    use std::io::BufRead as _;
    let dir = temp_dir("check-interrupted");
    let server = Server::start(&dir.join("s"), 0);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).expect("a temporary folder");
    let mut child = Command::new(binary())
        .args(["check", "--server", &server.url])
        .env("OUTPOST_TOKEN", &server.admin)
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("outpost check starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("a line");
        let online = line.starts_with("ok   daemon online");
        seen.push(line);
        if online {
            break;
        }
    }
    assert!(
        seen.first()
            .is_some_and(|l| l.starts_with("outpost check of "))
            && seen.iter().any(|l| l.starts_with("ok   server answers"))
            && seen
                .last()
                .is_some_and(|l| l.starts_with("ok   daemon online")),
        "a line per step: {seen:?}"
    );
    assert_eq!(check_contexts(&server).len(), 1, "the throwaway context");
    assert!(!processes_naming(&tmp).is_empty(), "its daemon runs");
    let signal = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(signal.success());
    let status = child.wait().expect("outpost check ends");
    assert_eq!(status.code(), Some(130), "an interrupt's exit code");
    assert!(check_contexts(&server).is_empty(), "the context is deleted");
    assert_eq!(
        processes_naming(&tmp),
        Vec::<String>::new(),
        "no daemon left"
    );
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .expect("the temporary folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "nothing left in the temporary folder: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
