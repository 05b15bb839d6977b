//! Sharing across the wire, with the real binary as server, daemon and client: ana operates
//! `box` (her daemon joined with her own token), shares it, bo opts in and runs there
//! without her folders or host commands, losing access mid-run ends his run `access_lost`,
//! and once ana is removed from the organization the machine takes nobody's runs.

mod common;

use std::path::Path;
use std::process::Output;

use common::{Daemon, Server, api, shell_capability, temp_dir, wait_for};
use serde_json::{Value, json};

use common::outpost_as as outpost;

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn new_user(server: &Server, name: &str) -> String {
    let (status, made) = server.api("POST", "/v1/users", Some(json!({ "name": name })));
    assert_eq!(status, 201, "{made}");
    made["token"].as_str().expect("a token").to_owned()
}

/// A confined shell capability: it sees only the folders mounted for it.
fn confined(script: &str) -> Value {
    use base64::Engine as _;
    json!({
        "kind": "inline",
        "manifest": "name: folders\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\n",
        "files": [{"path": "run.sh", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script)}],
    })
}

/// Runs `capability` on `box` as `token` with `extra` members, waiting for its end.
fn run(server: &Server, token: &str, capability: Value, extra: Value) -> Value {
    let mut body =
        json!({"capability": capability, "context": "box", "wait": true, "waitSecs": 60});
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    let (status, e) = api(&server.url, token, "POST", "/v1/executions", Some(body));
    assert_eq!(status, 201, "{e}");
    e
}

/// The code a run on `box` by `token` is refused with.
fn refused(server: &Server, token: &str, extra: Value) -> String {
    let e = run(server, token, shell_capability("hi", "echo hi\n"), extra);
    assert_eq!(e["status"], "failed", "{e}");
    e["error"]["code"].as_str().unwrap_or("?").to_owned()
}

/// Starts a run that lasts until cancelled, and waits until the daemon runs it. The daemon
/// frees a cancelled run's slot once its process is gone, so a start it refuses as busy is
/// tried again.
fn start_long(server: &Server, token: &str) -> String {
    wait_for("a long run to start on box", || {
        let body = json!({"capability": shell_capability("long", "sleep 600\n"), "context": "box"});
        let (status, e) = api(&server.url, token, "POST", "/v1/executions", Some(body));
        assert_eq!(status, 201, "{e}");
        let id = e["executionId"].as_str().expect("an id").to_owned();
        let e = wait_for(&format!("{id} to leave pending"), || {
            let (_, e) = api(
                &server.url,
                token,
                "GET",
                &format!("/v1/executions/{id}"),
                None,
            );
            (e["status"] != "pending").then_some(e)
        });
        match e["status"].as_str() {
            Some("running") => Some(id),
            _ if e["error"]["code"] == "execution_context_busy" => None,
            _ => panic!("the long run ended: {e}"),
        }
    })
}

/// The execution, once it was cancelled; its cancel reason.
fn cancel_reason(server: &Server, id: &str) -> String {
    let e = server.wait_status(id, "cancelled");
    e["error"]["reason"].as_str().unwrap_or("?").to_owned()
}

fn policy_allow(home: &Path, folder: &str) {
    common::owner_policy(home, &["allow", folder, "--mode", "ro"]);
}

#[test]
fn a_shared_machine_runs_opted_in_members_without_folders_or_commands_and_fails_closed() {
    let dir = temp_dir("sharing");
    let home = dir.join("home");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::write(data.join("note.txt"), "hello\n").expect("note");
    let data = data.canonicalize().expect("realpath");
    let data_text = data.display().to_string();
    policy_allow(&home, &data_text);

    let server = Server::start(&dir.join("server"), 0);
    let ana = new_user(&server, "ana");
    let bo = new_user(&server, "bo");
    // Ana's daemon joins with her own token: she operates `box`.
    let mut join = outpost_core::join::Join::parse(&server.join).expect("the join parses");
    join.token = ana.clone();
    let mut daemon = Daemon::start(&home, "box", Some(&join.encode()), "tokio");
    let context = server.wait_context("box", "box online", |c| c["online"] == true);
    assert_eq!(context["operator"], "ana");
    let mut grant = context["grant"].clone();
    grant["fs"] = json!([{"path": data_text, "mode": "ro"}]);
    let (status, answer) = api(
        &server.url,
        &ana,
        "PATCH",
        "/v1/execution-contexts/box/grant",
        Some(grant),
    );
    assert_eq!(status, 200, "{answer}");

    let script = format!("if cat {data_text}/note.txt 2>/dev/null; then :; else echo unseen; fi\n");
    let own = run(&server, &ana, confined(&script), json!({}));
    assert_eq!(
        (own["status"].as_str(), own["stdout"].as_str()),
        (Some("exited"), Some("hello\n")),
        "{own}"
    );

    // Not shared yet: bo may neither opt in nor run there.
    let out = outpost(&server, &bo, &["context", "opt-in", "box"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not_shared") && err.contains("--all-members on"),
        "{err}"
    );
    assert_eq!(refused(&server, &bo, json!({})), "not_shared");
    let out = outpost(
        &server,
        &bo,
        &["context", "share", "box", "--all-members", "on"],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_yours"));

    let shared = json_of(&outpost(
        &server,
        &ana,
        &["context", "share", "box", "--all-members", "on", "--json"],
    ));
    assert_eq!(shared["sharedWithAllMembers"], true, "{shared}");
    assert_eq!(refused(&server, &bo, json!({})), "not_opted_in");
    let opted = json_of(&outpost(
        &server,
        &bo,
        &["context", "opt-in", "box", "--json"],
    ));
    assert_eq!(opted["optedIn"], json!(["bo"]), "{opted}");
    let table = outpost(&server, &bo, &["context", "list"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("SHARED")
            && table
                .lines()
                .any(|l| l.starts_with("box ") && l.contains("all,in")),
        "{table}"
    );

    // Bo's run runs, and sees nothing of ana's folder.
    let theirs = run(&server, &bo, confined(&script), json!({}));
    assert_eq!(
        (theirs["status"].as_str(), theirs["stdout"].as_str()),
        (Some("exited"), Some("unseen\n")),
        "{theirs}"
    );
    assert_eq!(
        refused(&server, &bo, json!({"requires": ["fs"]})),
        "fs_operator_only"
    );
    assert_eq!(
        refused(&server, &bo, json!({"wantsCommands": true})),
        "commands_operator_only"
    );
    // Ana's folder is still hers.
    let own = run(
        &server,
        &ana,
        confined(&script),
        json!({"requires": ["fs"]}),
    );
    assert_eq!(own["stdout"], "hello\n", "{own}");

    // Unsharing ends bo's run on it, and refuses the next one.
    let long = start_long(&server, &bo);
    let out = outpost(
        &server,
        &ana,
        &["context", "share", "box", "--all-members", "off"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cancel_reason(&server, &long), "access_lost");
    assert_eq!(refused(&server, &bo, json!({})), "not_shared");

    // Opting out ends a run too.
    json_of(&outpost(
        &server,
        &ana,
        &["context", "share", "box", "--all-members", "on", "--json"],
    ));
    json_of(&outpost(
        &server,
        &bo,
        &["context", "opt-in", "box", "--json"],
    ));
    let long = start_long(&server, &bo);
    let out = json_of(&outpost(
        &server,
        &bo,
        &["context", "opt-out", "box", "--json"],
    ));
    assert_eq!(out["optedIn"], json!([]), "{out}");
    assert_eq!(cancel_reason(&server, &long), "access_lost");

    // Ana leaves the organization: her own run and bo's end, and nobody's run goes there.
    json_of(&outpost(
        &server,
        &bo,
        &["context", "opt-in", "box", "--json"],
    ));
    let hers = start_long(&server, &ana);
    let his = start_long(&server, &bo);
    let removed = json_of(&outpost(
        &server,
        &server.admin,
        &["user", "remove", "ana", "--json"],
    ));
    assert_eq!(removed["removed"], "ana");
    assert_eq!(cancel_reason(&server, &hers), "access_lost");
    assert_eq!(cancel_reason(&server, &his), "access_lost");
    assert_eq!(refused(&server, &bo, json!({})), "operator_left");
    assert_eq!(refused(&server, &server.admin, json!({})), "operator_left");
    let (status, _) = api(&server.url, &ana, "GET", "/v1/execution-contexts", None);
    assert_eq!(status, 401, "ana's token stopped working");
    let shown = outpost(&server, &server.admin, &["context", "show", "box"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("operator left"), "{shown}");

    let audit = json_of(&outpost(&server, &server.admin, &["audit", "--json"]));
    let kinds: Vec<&str> = audit["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for kind in [
        "context_shared",
        "context_unshared",
        "opted_in",
        "opted_out",
        "user_removed",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}
