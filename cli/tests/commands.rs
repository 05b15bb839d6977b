//! Host commands end to end: a real server and daemon, capabilities that ask for commands
//! with `outpost command` on their run's socket, the authorize hop and the audit log, and the
//! owner's switch killing a background job's whole process group.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Daemon, Server, binary, process_gone, shell_capability, temp_dir, wait_for};
use serde_json::Value;

/// `outpost context commands on|off` for the daemon's home.
fn switch(home: &Path, state: &str) {
    let out = Command::new(binary())
        .args(["context", "commands", state, "--home"])
        .arg(home)
        .env("OUTPOST_KEYRING", "off")
        .output()
        .expect("outpost context commands runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `script` on `box` and returns the finished execution.
fn run(server: &Server, name: &str, script: &str) -> Value {
    let id = server.submit(&shell_capability(name, script), "box");
    wait_for(&format!("{name} to finish"), || {
        let (_, e) = server.api("GET", &format!("/v1/executions/{id}"), None);
        (e["status"] != "pending" && e["status"] != "running").then_some(e)
    })
}

/// The audit events of `kind`.
fn audit(server: &Server, kind: &str) -> Vec<Value> {
    let (_, log) = server.api("GET", "/v1/audit?limit=500", None);
    log["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

#[test]
fn a_run_asks_for_host_commands_through_its_socket_under_both_switches() {
    // Short: the socket's path (under the run's folder) must fit a Unix socket address.
    let dir = temp_dir("hc");
    let home = dir.join("h");
    let server = Server::start(&dir.join("s"), 0);
    let daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    let outpost = binary().display().to_string();

    // Off: the run's ask is refused and nothing starts.
    let off = run(
        &server,
        "off",
        &format!("'{outpost}' command run -- echo never; echo \"rc=$?\"\n"),
    );
    assert!(off["stdout"].as_str().unwrap().contains("rc=1"), "{off}");
    assert!(
        off["stderr"].as_str().unwrap().contains("commands_off"),
        "{off}"
    );
    assert!(!off["stdout"].as_str().unwrap().contains("never"), "{off}");

    switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });

    // A foreground command, then a background job polled and killed.
    let script = format!(
        r#"B='{outpost}'
"$B" command run --env GREETING_KEY=hidden-value-123 -- echo hi
echo "run_rc=$?"
JOB=$("$B" command start -- sh -c 'echo started; exec sleep 300')
echo "job=$JOB"
i=0
until "$B" command poll "$JOB" 2>/dev/null | grep -q started; do
  i=$((i+1)); [ "$i" -gt 600 ] && break; sleep 0.05
done
"$B" command poll "$JOB"
echo "poll_rc=$?"
"$B" command kill "$JOB"
echo "kill_rc=$?"
"$B" command poll --json "$JOB"
"#
    );
    let done = run(&server, "asks", &script);
    let stdout = done["stdout"].as_str().unwrap_or_default();
    assert_eq!(done["exitCode"], 0, "{done}");
    assert!(stdout.starts_with("hi\nrun_rc=0\njob=1\n"), "{done}");
    assert!(stdout.contains("started\npoll_rc=0\n"), "{done}");
    assert!(stdout.contains("kill_rc=0"), "{done}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).expect("JSON");
    assert_eq!(last["running"], false, "{last}");
    assert_eq!(last["status"], "killed", "{last}");

    // The audit log: starts with env keys and never values, and finishes from the daemon.
    let started = wait_for("two command_started rows", || {
        let rows = audit(&server, "command_started");
        (rows.len() == 2).then_some(rows)
    });
    let text = serde_json::to_string(&started).unwrap();
    assert!(text.contains("GREETING_KEY"), "{text}");
    assert!(!text.contains("hidden-value-123"), "{text}");
    assert!(text.contains("echo hi"), "{text}");
    let finished = wait_for("two command_finished rows", || {
        let rows = audit(&server, "command_finished");
        (rows.len() == 2).then_some(rows)
    });
    let text = serde_json::to_string(&finished).unwrap();
    assert!(text.contains(r#"\"reason\":\"exited\""#), "{text}");
    assert!(text.contains(r#"\"reason\":\"killed\""#), "{text}");

    // A background job outlives its run; turning the switch off kills its process group.
    let pids = dir.join("pids");
    let script = format!(
        "'{outpost}' command start -- sh -c 'sleep 300 & echo $$ $! > {}; wait'\n",
        pids.display()
    );
    let done = run(&server, "leaves", &script);
    assert_eq!(done["exitCode"], 0, "{done}");
    let pids: Vec<i32> = wait_for("the job's pids", || {
        let text = std::fs::read_to_string(&pids).ok()?;
        let pids: Vec<i32> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        (pids.len() == 2).then_some(pids)
    });
    assert!(pids.iter().all(|&p| !process_gone(p)), "{pids:?}");
    switch(&home, "off");
    wait_for("the job's process group to be killed", || {
        pids.iter().all(|&p| process_gone(p)).then_some(())
    });
    wait_for("its command_finished row", || {
        audit(&server, "command_finished")
            .iter()
            .any(|e| e["detail"].as_str().unwrap_or("").contains("commands_off"))
            .then_some(())
    });

    // Revoking the machine kills every job's process group too, and its daemon stops.
    switch(&home, "on");
    wait_for("the daemon to apply commands on again", || {
        (daemon.log_text().matches("commands=true").count() >= 2).then_some(())
    });
    let pids = dir.join("pids2");
    let script = format!(
        "'{outpost}' command start -- sh -c 'sleep 300 & echo $$ $! > {}; wait'\n",
        pids.display()
    );
    let done = run(&server, "revoked", &script);
    assert_eq!(done["exitCode"], 0, "{done}");
    let pids: Vec<i32> = wait_for("the second job's pids", || {
        let text = std::fs::read_to_string(&pids).ok()?;
        let pids: Vec<i32> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        (pids.len() == 2).then_some(pids)
    });
    assert!(pids.iter().all(|&p| !process_gone(p)), "{pids:?}");
    let (status, body) = server.api("POST", "/v1/execution-contexts/box/revoke", None);
    assert_eq!(status, 200, "{body}");
    wait_for("revoke to kill the job's process group", || {
        pids.iter().all(|&p| process_gone(p)).then_some(())
    });
    let mut daemon = daemon;
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_tail(20));
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM drains: a background job that a finished run started runs on to its own end (it is
/// not killed), its `command_finished` reaches the server's audit as `exited`, and only then
/// does the daemon exit 0.
#[test]
fn a_drain_lets_background_host_commands_finish_and_report() {
    let dir = temp_dir("hcd");
    let home = dir.join("h");
    let server = Server::start(&dir.join("s"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });
    let (go, ended) = (dir.join("go"), dir.join("ended"));
    let script = format!(
        "'{}' command start -- sh -c 'while [ ! -e {go} ]; do sleep 0.05; done; echo ended > {ended}'\n",
        binary().display(),
        go = go.display(),
        ended = ended.display()
    );
    let done = run(&server, "background", &script);
    assert_eq!(done["exitCode"], 0, "{done}");

    let status = Command::new("kill")
        .args(["-TERM", &daemon.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    wait_for("the drain to begin", || {
        daemon.log_text().contains("stopping:").then_some(())
    });
    // The job was not killed by the drain: once let go, it writes its mark.
    std::fs::write(&go, b"").expect("go");
    wait_for("the job to end on its own", || ended.exists().then_some(()));
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_tail(20));
    let finished = audit(&server, "command_finished");
    assert!(
        finished
            .iter()
            .any(|e| e["detail"].as_str().unwrap_or("").contains("exited")),
        "{finished:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
