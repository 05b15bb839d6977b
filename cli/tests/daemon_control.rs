//! Operators' requests for a daemon from afar with the real binaries (PROTOCOL §4.7): pause
//! holds new runs (`draining`) until resume, across a kill -9; logs come back; the owner's
//! local policy refuses what it does not list; a terminal daemon refuses a restart, and a
//! daemon under a service manager (a stand-in loop that restarts a non-zero exit, as the
//! generated systemd unit does) drains, exits 75 and comes back without losing or repeating
//! a run. Every request is audited.

mod common;

use serde_json::{Value, json};

use common::{
    Daemon, Server, Service, daemon_pid, outpost_as, owner_policy, shell_capability, temp_dir,
    wait_for,
};

fn ask(server: &Server, name: &str, body: Value) -> (u16, Value) {
    server.api(
        "POST",
        &format!("/v1/execution-contexts/{name}/daemon"),
        Some(body),
    )
}

fn audited(server: &Server) -> Vec<Value> {
    let (_, audit) = server.api("GET", "/v1/audit?limit=200", None);
    audit["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["kind"] == "daemon_control")
        .collect()
}

#[test]
fn pause_holds_runs_until_resume_across_a_kill_and_the_owner_decides_what_is_allowed() {
    let dir = temp_dir("ctl-pause");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "ctl-box", Some(&server.join), "tokio");
    server.wait_context("ctl-box", "online", |c| {
        c["online"] == true && c["control"] == true
    });

    // The one node lists the daemon connected to it.
    let (status, nodes) = server.api("GET", "/v1/nodes", None);
    assert_eq!(status, 200, "{nodes}");
    assert_eq!(nodes["nodes"].as_array().map(Vec::len), Some(1), "{nodes}");
    assert_eq!(nodes["nodes"][0]["url"], server.url.as_str(), "{nodes}");
    assert_eq!(
        nodes["nodes"][0]["sessions"][0]["name"], "ctl-box",
        "{nodes}"
    );

    let (status, paused) = ask(&server, "ctl-box", json!({"action": "pause"}));
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["outcome"], "done", "{paused}");
    assert!(paused["controlId"].as_str().unwrap().starts_with("ctl_"));
    server.wait_context("ctl-box", "the pause to show", |c| {
        c["paused"] == true && c["draining"] == true
    });

    // A run for the paused machine waits; it never starts there.
    let marker = dir.join("ran");
    let script = format!("echo ran >> {}\n", marker.display());
    let (status, refused) = server.api(
        "POST",
        "/v1/executions",
        Some(json!({"capability": shell_capability("refused", &script), "context": "ctl-box"})),
    );
    assert!(status < 300, "{refused}");
    let refused = server.wait_status(refused["executionId"].as_str().unwrap(), "failed");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("paused by an operator"),
        "{refused}"
    );
    let (status, held) = server.api(
        "POST",
        "/v1/executions",
        Some(json!({"capability": shell_capability("held", &script), "context": "ctl-box", "whenBusy": "queue"})),
    );
    assert!(status < 300, "{held}");
    let id = held["executionId"].as_str().unwrap().to_owned();
    let held = server.wait_status(&id, "pending");
    assert!(!marker.exists(), "nothing ran while paused: {held}");

    // The pause outlives a kill -9: the daemon comes back paused.
    daemon.kill();
    server.wait_context("ctl-box", "offline", |c| c["online"] == false);
    let _daemon = Daemon::start(&home, "ctl-box", None, "tokio");
    server.wait_context("ctl-box", "back, still paused", |c| {
        c["online"] == true && c["paused"] == true
    });
    assert!(!marker.exists(), "still nothing ran");

    let (status, resumed) = ask(&server, "ctl-box", json!({"action": "resume"}));
    assert_eq!(
        (status, &resumed["outcome"]),
        (200, &json!("done")),
        "{resumed}"
    );
    server.wait_status(&id, "exited");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "ran\n",
        "the held run ran once, after the resume"
    );

    // Logs, through the CLI: the daemon's own recent lines, its requests among them.
    let out = outpost_as(
        &server,
        &server.admin,
        &[
            "context", "daemon", "ctl-box", "logs", "--lines", "50", "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let logs: Value = serde_json::from_slice(&out.stdout).expect("json");
    let lines = logs["lines"].as_array().expect("lines");
    assert!(!lines.is_empty() && lines.len() <= 50, "{logs}");
    assert!(
        lines
            .iter()
            .any(|l| l.as_str().unwrap().contains("resumed")),
        "{logs}"
    );

    // A terminal daemon has no service manager to start it again: restart is refused.
    let (_, restart) = ask(&server, "ctl-box", json!({"action": "restart"}));
    assert_eq!(
        (&restart["outcome"], &restart["code"]),
        (&json!("refused"), &json!("no_service_manager")),
        "{restart}"
    );
    // No release published: update now says so and changes nothing.
    let (_, update) = ask(&server, "ctl-box", json!({"action": "update"}));
    assert_eq!(update["outcome"], "done", "{update}");
    assert!(
        update["message"]
            .as_str()
            .unwrap()
            .contains("no daemon release"),
        "{update}"
    );

    // The owner allows only pause and resume from now on: logs are refused, exit 1.
    owner_policy(&home, &["control", "pause,resume"]);
    let refused = wait_for("the daemon to read its new policy", || {
        let out = outpost_as(
            &server,
            &server.admin,
            &["context", "daemon", "ctl-box", "logs", "--json"],
        );
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        (v["code"] == "refused_by_owner").then_some((out.status.code(), v))
    });
    assert_eq!(refused.0, Some(1), "{}", refused.1);
    assert!(refused.1.get("lines").is_none(), "no line left the machine");

    // Bad requests are typed errors; an unknown context is 404.
    let (status, bad) = ask(&server, "ctl-box", json!({"action": "shutdown"}));
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_body")),
        "{bad}"
    );
    let (status, bad) = ask(&server, "ctl-box", json!({"action": "logs", "lines": 500}));
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_body")),
        "{bad}"
    );
    let (status, _) = ask(&server, "nowhere", json!({"action": "pause"}));
    assert_eq!(status, 404);

    // Offline: nothing can be asked.
    drop(_daemon);
    server.wait_context("ctl-box", "offline", |c| c["online"] == false);
    let (status, offline) = ask(&server, "ctl-box", json!({"action": "pause"}));
    assert_eq!(
        (status, &offline["error"]["code"]),
        (409, &json!("daemon_offline")),
        "{offline}"
    );

    let rows = audited(&server);
    let outcomes: Vec<String> = rows
        .iter()
        .map(|r| {
            let d: Value = serde_json::from_str(r["detail"].as_str().unwrap()).unwrap();
            format!(
                "{}:{}",
                d["action"].as_str().unwrap(),
                d["outcome"].as_str().unwrap()
            )
        })
        .collect();
    for expected in [
        "pause:done",
        "resume:done",
        "logs:done",
        "restart:refused",
        "update:done",
        "logs:refused",
        "pause:failed",
    ] {
        assert!(
            outcomes.iter().any(|o| o == expected),
            "{expected} in {outcomes:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restart_drains_the_running_run_and_the_service_manager_starts_the_daemon_again() {
    let dir = temp_dir("ctl-restart");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    // Joined once from a terminal, then stopped: the stand-in runs it from now on.
    let service = Service::joined(&server, &dir, &home, "ctl-svc");
    let exits = dir.join("exits");
    let before = wait_for("the daemon's pid", || daemon_pid(&home));

    // A run that is still going when the restart is asked for.
    let started = dir.join("started");
    let go = dir.join("go");
    let script = format!(
        "echo start >> {}\nwhile [ ! -e {} ]; do sleep 0.05; done\necho finished\n",
        started.display(),
        go.display()
    );
    let id = server.submit(&shell_capability("long", &script), "ctl-svc");
    wait_for("the run to start", || started.exists().then_some(()));

    let (status, restart) = ask(&server, "ctl-svc", json!({"action": "restart"}));
    assert_eq!(
        (status, &restart["outcome"]),
        (200, &json!("done")),
        "{restart}"
    );
    server.wait_context("ctl-svc", "draining", |c| c["draining"] == true);
    assert!(!exits.exists(), "it waits for the run in flight");
    std::fs::write(&go, "").unwrap();

    let run = server.wait_status(&id, "exited");
    assert_eq!(run["stdout"], "finished\n", "{run}");
    wait_for("the daemon to exit 75", || {
        std::fs::read_to_string(&exits)
            .ok()
            .filter(|t| t.lines().next() == Some("75"))
    });
    let after = wait_for("the daemon to come back", || {
        daemon_pid(&home).filter(|pid| *pid != before)
    });
    assert_ne!(before, after);
    server.wait_context("ctl-svc", "online again, taking runs", |c| {
        c["online"] == true && c["draining"] == false
    });
    assert_eq!(
        std::fs::read_to_string(&started).unwrap(),
        "start\n",
        "the run started once"
    );
    let id = server.submit(&shell_capability("after", "echo after\n"), "ctl-svc");
    server.wait_status(&id, "exited");

    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}
