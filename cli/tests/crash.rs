//! Crash safety with the real binary: kill -9 of the daemon mid-run and between its outbox
//! write and `run.ack`, kill -9 of the server mid-run; each time the capability appends a line
//! to a file, and afterwards we count: results lost, delivered twice, runs started twice.

mod common;

use std::path::Path;

use common::{Daemon, Server, lines, process_gone, shell_capability, temp_dir, wait_for};

/// A script that records that it started (and its pid), then waits for `go` to appear.
fn waiting_script(dir: &Path) -> String {
    format!(
        "echo started >> {count}\necho $$ >> {pids}\nwhile [ ! -e {go} ]; do sleep 0.05; done\necho finished\n",
        count = dir.join("count").display(),
        pids = dir.join("pids").display(),
        go = dir.join("go").display(),
    )
}

fn online(server: &Server, name: &str) {
    server.wait_context(name, "the daemon to come online", |c| c["online"] == true);
}

/// How many results the daemon's outbox holds.
fn outbox_results(home: &Path) -> usize {
    common::outbox(home).len()
}

#[test]
fn a_daemon_killed_mid_run_ends_the_run_lost_and_never_runs_it_again() {
    let dir = temp_dir("kill-mid-run");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    online(&server, "box");
    let id = server.submit(&shell_capability("wait", &waiting_script(&dir)), "box");
    let pid: i32 = wait_for("the run to start", || {
        lines(&dir.join("pids"))
            .first()
            .and_then(|p| p.parse().ok())
    });
    daemon.kill();
    assert!(
        !process_gone(pid),
        "the run outlives a kill -9 of its daemon"
    );
    let mut daemon = Daemon::start(&home, "box", None, "tokio");
    let execution = server.wait_status(&id, "lost");
    assert_eq!(execution["ranOn"]["name"], "box", "{execution}");
    // The restarted daemon reaped the process group its predecessor left.
    wait_for("the orphaned run to be reaped", || {
        process_gone(pid).then_some(())
    });
    std::fs::write(dir.join("go"), b"").expect("go");
    // Another run goes through, so the daemon is serving, and the lost one never re-ran.
    let (status, done) = server.api(
        "POST",
        "/v1/executions",
        Some(serde_json::json!({"capability": shell_capability("hi", "echo hi\n"), "context": "box", "wait": true, "waitSecs": 60})),
    );
    assert_eq!(status, 201, "{done}");
    assert_eq!(done["status"], "exited", "{done}");
    assert_eq!(
        lines(&dir.join("count")).len(),
        1,
        "the killed run started once"
    );
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_result_in_the_outbox_before_its_ack_is_delivered_exactly_once_after_a_kill() {
    let dir = temp_dir("kill-before-ack");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "blocking");
    online(&server, "box");
    let id = server.submit(&shell_capability("wait", &waiting_script(&dir)), "box");
    wait_for("the run to start", || {
        lines(&dir.join("pids")).first().cloned()
    });
    // The server stops answering: the result reaches the outbox and no ack can come.
    server.signal("STOP");
    std::fs::write(dir.join("go"), b"").expect("go");
    wait_for("the result in the outbox", || {
        (outbox_results(&home) == 1).then_some(())
    });
    daemon.kill();
    server.signal("CONT");
    let mut daemon = Daemon::start(&home, "box", None, "blocking");
    let execution = server.wait_status(&id, "exited");
    assert_eq!(execution["stdout"], "finished\n", "{execution}");
    assert_eq!(lines(&dir.join("count")).len(), 1, "ran once");
    wait_for("the outbox to empty after run.ack", || {
        (outbox_results(&home) == 0).then_some(())
    });
    let (_, runs) = server.api("GET", "/v1/runs?context=box", None);
    let runs = runs["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1, "one run record: {runs:?}");
    let metrics = server.metrics();
    assert!(
        metrics.contains("outpost_runs_total{status=\"exited\"} 1"),
        "delivered once: {metrics}"
    );
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_killed_mid_run_gets_the_result_exactly_once_and_keeps_queued_executions() {
    let dir = temp_dir("kill-server");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "smol");
    online(&server, "box");
    let id = server.submit(&shell_capability("wait", &waiting_script(&dir)), "box");
    wait_for("the run to start", || {
        lines(&dir.join("pids")).first().cloned()
    });
    // A second machine that is offline: its execution waits in the queue.
    let mut other = Daemon::start(&dir.join("home2"), "spare", Some(&server.join), "tokio");
    online(&server, "spare");
    other.kill();
    server.wait_context("spare", "spare to go offline", |c| c["online"] == false);
    let (status, queued) = server.api(
        "POST",
        "/v1/executions",
        Some(serde_json::json!({"capability": shell_capability("later", "echo later\n"), "context": "spare", "whenOffline": "queue"})),
    );
    assert!(status == 201 || status == 202, "{status} {queued}");
    let queued_id = queued["executionId"].as_str().expect("an id").to_owned();

    let mut server = server;
    server.kill();
    // The run finishes while the server is down; its result waits in the daemon's outbox.
    std::fs::write(dir.join("go"), b"").expect("go");
    wait_for("the result in the outbox", || {
        (outbox_results(&home) == 1).then_some(())
    });
    let server = server.restart();
    let execution = server.wait_status(&id, "exited");
    assert_eq!(execution["stdout"], "finished\n", "{execution}");
    assert_eq!(lines(&dir.join("count")).len(), 1, "ran once");
    let (_, q) = server.api("GET", &format!("/v1/executions/{queued_id}"), None);
    assert_eq!(q["status"], "pending", "the queued execution survived: {q}");
    // Its machine comes back: it runs there, once.
    let mut other = Daemon::start(&dir.join("home2"), "spare", None, "tokio");
    let later = server.wait_status(&queued_id, "exited");
    assert_eq!(later["stdout"], "later\n");
    assert!(
        server
            .metrics()
            .contains("outpost_runs_total{status=\"exited\"} 2"),
        "{}",
        server.metrics()
    );
    other.kill();
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `outpost execute` prints its execution's id at once and follows it across a kill -9 and
/// restart of the server, ending with the run's real outcome (its output and exit code),
/// the run started once.
#[test]
fn execute_follows_its_execution_across_a_server_restart() {
    use std::io::BufRead as _;

    let dir = temp_dir("execute-restart");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    online(&server, "box");
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("capability folder");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: waits\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\nlimits:\n  timeout_ms: 120000\n",
    )
    .expect("manifest");
    std::fs::write(
        cap.join("run.sh"),
        format!("{}exit 5\n", waiting_script(&dir)),
    )
    .expect("script");
    let mut execute = std::process::Command::new(common::binary())
        .args(["execute", cap.to_str().expect("utf-8"), "--context", "box"])
        .args(["--server", &server.url])
        .env("OUTPOST_TOKEN", &server.admin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("outpost execute runs");
    // The id comes first, before the run has done anything.
    let mut stderr = std::io::BufReader::new(execute.stderr.take().expect("stderr"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("a line");
    let id = first
        .trim()
        .strip_prefix("outpost: execution ")
        .unwrap_or_else(|| panic!("the id first, not {first:?}"))
        .to_owned();
    assert!(id.starts_with("ex_"), "{first}");
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).map(|_| text)
    });
    wait_for("the run to start", || {
        lines(&dir.join("pids")).first().cloned()
    });

    let server = server.restart();
    std::fs::write(dir.join("go"), b"").expect("go");
    let out = common::finish(execute, "outpost execute");
    let said = rest.join().expect("stderr reader").expect("stderr");
    assert_eq!(
        out.status.code(),
        Some(5),
        "the run's own exit code: {said}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "finished\n", "{said}");
    assert!(
        said.contains("asking again"),
        "it said it lost the server: {said}"
    );
    assert!(said.contains("Ran on box"), "{said}");
    let execution = server.wait_status(&id, "exited");
    assert_eq!(execution["exitCode"], 5, "{execution}");
    assert_eq!(lines(&dir.join("count")).len(), 1, "started once");
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}
