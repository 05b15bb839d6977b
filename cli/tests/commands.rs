//! Host commands end to end: a real server and daemon, capabilities that ask for commands
//! with `outpost command` on their run's socket, the authorize hop and the audit log, and the
//! owner's switch killing a background job's whole process group.

mod common;

use std::process::Command;

use common::{
    Daemon, Server, binary, commands_switch, job_pids, process_gone, shell_capability, temp_dir,
    wait_for,
};
use serde_json::Value;

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

    commands_switch(&home, "on");
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
    let pids = job_pids(&pids);
    assert!(pids.iter().all(|&p| !process_gone(p)), "{pids:?}");
    commands_switch(&home, "off");
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
    commands_switch(&home, "on");
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
    let pids = job_pids(&pids);
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
/// A home deep enough that its runs' folders cannot hold a socket themselves (a socket's
/// address is at most 107 bytes): the run still asks through `./.outpost-commands.sock`.
#[test]
fn a_run_in_a_deep_home_still_reaches_its_socket() {
    let dir = temp_dir("hc-deep");
    let home =
        dir.join("a-home-folder-with-a-name-long-enough-that-no-socket-address-fits-it-0123456789");
    let server = Server::start(&dir.join("s"), 0);
    let daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    commands_switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });
    let outpost = binary().display().to_string();
    let e = run(
        &server,
        "deep",
        &format!(
            "pwd\nreadlink .outpost-commands.sock\n'{outpost}' command run -- echo from-the-host\necho \"rc=$?\"\n"
        ),
    );
    let stdout = e["stdout"].as_str().unwrap();
    let folder = stdout.lines().next().unwrap_or_default();
    assert!(
        folder.len() + "/.outpost-commands.sock".len() > 107,
        "the run's folder is too deep for a socket: {folder}"
    );
    assert!(stdout.contains("from-the-host"), "{e}");
    assert!(stdout.contains("rc=0"), "{e}");
    // The socket was in a private folder of its own, linked from the run's folder; it goes
    // with the run.
    let socket = std::path::PathBuf::from(stdout.lines().nth(1).unwrap_or_default());
    let private = socket.parent().expect("a private folder").to_owned();
    assert!(
        private.starts_with(std::env::temp_dir()) && private != std::env::temp_dir(),
        "{e}"
    );
    wait_for("the private socket folder to go with the run", || {
        (!private.exists()).then_some(())
    });
    assert!(
        !daemon.log_text().contains("cannot serve host commands"),
        "{}",
        daemon.log_text()
    );
}

#[test]
fn a_drain_lets_background_host_commands_finish_and_report() {
    let dir = temp_dir("hcd");
    let home = dir.join("h");
    let server = Server::start(&dir.join("s"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    commands_switch(&home, "on");
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

/// `poll` and `kill` ask the server first (the job hop), which names the requester with their
/// access of now: another run of the same requester may poll a job it did not start, and once
/// the server's switch is off a poll is refused, whether or not the daemon has applied the
/// grant yet. The audit keeps 1,000 characters of a longer command, and no row for a poll.
#[test]
fn poll_and_kill_ask_the_server_first_with_the_requesters_access_now() {
    let dir = temp_dir("hcj");
    let home = dir.join("h");
    let server = Server::start(&dir.join("s"), 0);
    let daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    let context = server.wait_context("box", "box online", |c| c["online"] == true);
    commands_switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });
    let outpost = binary().display().to_string();
    let long = "x".repeat(1500);
    let started = run(
        &server,
        "starts",
        &format!(
            "'{outpost}' command run -- echo {long} > /dev/null\n'{outpost}' command start -- sleep 300\n"
        ),
    );
    assert_eq!(started["exitCode"], 0, "{started}");
    assert_eq!(started["stdout"], "1\n", "{started}");

    // Another run of the same requester, which asked for no command itself.
    let polled = run(
        &server,
        "polls",
        &format!("'{outpost}' command poll --json 1\n"),
    );
    assert_eq!(polled["exitCode"], 0, "{polled}");
    let answer: Value =
        serde_json::from_str(polled["stdout"].as_str().unwrap_or("")).expect("JSON");
    assert_eq!(answer["running"], true, "{answer}");

    // The server's switch goes off (a user's grant edit may turn it off).
    let mut grant = context["grant"].clone();
    grant["commands"]["enabled"] = Value::Bool(false);
    let (status, body) = server.api("PATCH", "/v1/execution-contexts/box/grant", Some(grant));
    assert_eq!(status, 200, "{body}");
    let refused = run(
        &server,
        "refused",
        &format!(
            "'{outpost}' command poll 1; echo \"rc=$?\"\n'{outpost}' command kill 1; echo \"rc=$?\"\n"
        ),
    );
    assert_eq!(refused["stdout"], "rc=1\nrc=1\n", "{refused}");
    assert_eq!(
        refused["stderr"]
            .as_str()
            .unwrap_or("")
            .matches("commands_off")
            .count(),
        2,
        "{refused}"
    );

    // Audited: the two commands only, the long one cut to 1,000 characters.
    let rows = audit(&server, "command_started");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let commands: Vec<String> = rows
        .iter()
        .map(|r| {
            let detail: Value =
                serde_json::from_str(r["detail"].as_str().unwrap_or("")).expect("JSON");
            detail["command"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    let cut = commands
        .iter()
        .find(|c| c.starts_with("echo x"))
        .expect("the long command's row");
    assert_eq!(cut.chars().count(), 1000, "{cut}");
    assert_eq!(*cut, format!("echo {}", &long[..995]));
    wait_for("the job's command_finished (commands_off)", || {
        audit(&server, "command_finished")
            .iter()
            .any(|e| e["detail"].as_str().unwrap_or("").contains("commands_off"))
            .then_some(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A drain waits for background host commands; a second SIGTERM stops at once: the job's
/// process group is killed, and its `command_finished` (`shutdown`) still reaches the audit.
#[test]
fn a_second_sigterm_kills_background_jobs_and_reports_them() {
    let dir = temp_dir("hcs");
    let home = dir.join("h");
    let server = Server::start(&dir.join("s"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    commands_switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });
    let pids = dir.join("pids");
    let script = format!(
        "'{}' command start -- sh -c 'sleep 300 & echo $$ $! > {}; wait'\n",
        binary().display(),
        pids.display()
    );
    let done = run(&server, "background", &script);
    assert_eq!(done["exitCode"], 0, "{done}");
    let pids = job_pids(&pids);
    let term = || {
        let status = Command::new("kill")
            .args(["-TERM", &daemon.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    };
    term();
    wait_for("the drain to begin", || {
        daemon.log_text().contains("stopping:").then_some(())
    });
    assert!(pids.iter().all(|&p| !process_gone(p)), "the drain waits");
    term();
    assert_eq!(daemon.wait_exit(), 130, "{}", daemon.log_tail(20));
    assert!(pids.iter().all(|&p| process_gone(p)), "{pids:?}");
    let finished = wait_for("the job's command_finished", || {
        let rows = audit(&server, "command_finished");
        (!rows.is_empty()).then_some(rows)
    });
    let text = serde_json::to_string(&finished).unwrap();
    assert!(text.contains(r#"\"reason\":\"shutdown\""#), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Commands turned on, then the server restarted with `--no-host-commands`: every ask is
/// refused `commands_off`, nothing starts, nothing is audited as started, and turning them on
/// again is refused `commands_disabled_on_server`.
#[test]
fn a_server_started_without_host_commands_refuses_every_ask_whatever_the_grant_says() {
    let dir = temp_dir("hc-off");
    let home = dir.join("h");
    let server = Server::start(&dir.join("s"), 0);
    let daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    commands_switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });
    let port = server.port;
    let state = server.state.clone();
    drop(server);
    let server = Server::start_with(&state, port, &[std::ffi::OsStr::new("--no-host-commands")]);
    let ctx = server.wait_context("box", "box back online", |c| c["online"] == true);
    assert_eq!(ctx["grant"]["commands"]["enabled"], false, "{ctx}");
    let outpost = binary().display().to_string();
    let marker = dir.join("ran");
    let refused = run(
        &server,
        "off-on-server",
        &format!(
            "'{outpost}' command run -- touch '{}'; echo \"rc=$?\"\n",
            marker.display()
        ),
    );
    assert!(
        refused["stdout"].as_str().unwrap().contains("rc=1"),
        "{refused}"
    );
    assert!(
        refused["stderr"].as_str().unwrap().contains("commands_off"),
        "{refused}"
    );
    assert!(!marker.exists(), "nothing ran");
    assert!(audit(&server, "command_started").is_empty());
    let out = Command::new(binary())
        .args(["context", "commands", "on", "--home"])
        .arg(&home)
        .env("OUTPOST_KEYRING", "off")
        .output()
        .expect("outpost context commands runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("commands_disabled_on_server"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
