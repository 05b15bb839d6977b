//! A server that stops answering, with real processes: `outpost serve` stopped with SIGSTOP
//! while `outpost daemon` is connected. The daemon notices the silence within three
//! heartbeats and comes back when the server does; the server, resumed after longer than a
//! run's lease, records the result that waited in its socket instead of calling the run lost.

mod common;

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use common::{Daemon, Server, shell_capability, temp_dir, wait_for};
use serde_json::json;

/// Sends `signal` to the server's process.
fn signal(server: &Server, signal: &str) {
    server.signal(signal);
}

#[test]
fn a_stopped_server_is_noticed_by_its_daemon_which_comes_back_after() {
    let dir = temp_dir("liveness-stop");
    let server = Server::start_with(
        &dir.join("server"),
        0,
        &[OsStr::new("--heartbeat-secs"), OsStr::new("1")],
    );
    let daemon = Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    signal(&server, "STOP");
    let stopped = Instant::now();
    wait_for("the daemon to notice the silent server", || {
        daemon
            .log_text()
            .contains("the server sent nothing for 3 s")
            .then_some(())
    });
    let noticed = stopped.elapsed();
    assert!(
        noticed < Duration::from_secs(10),
        "noticed after {noticed:?}\n{}",
        daemon.log_tail(20)
    );
    signal(&server, "CONT");
    // The server's listing still says online from before the stop until it has read the
    // closed connection: wait for the daemon's second session, then for the listing.
    wait_for("the daemon to connect again", || {
        (daemon.log_text().matches("connected session=").count() >= 2).then_some(())
    });
    server.wait_context("box", "the daemon to come back", |c| c["online"] == true);
    let (status, e) = server.api(
        "POST",
        "/v1/executions",
        Some(
            json!({"capability": shell_capability("back", "echo back\n"), "context": "box",
                    "wait": true, "waitSecs": 60}),
        ),
    );
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["stdout"], "back\n", "{e}\n{}", daemon.log_tail(20));
}

#[test]
fn a_server_stopped_past_a_run_s_lease_records_the_result_that_waited_for_it() {
    let dir = temp_dir("liveness-frozen");
    let server = Server::start(&dir.join("server"), 0);
    let daemon = Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    // A lease of 2 s + 30 s of grace; the run itself takes a second.
    let mut capability = shell_capability("quick", "sleep 1; echo done\n");
    capability["manifest"] = json!(
        "name: quick\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nlimits:\n  timeout_ms: 2000\n"
    );
    let id = server.submit(&capability, "box");
    server.wait_status(&id, "running");
    signal(&server, "STOP");
    let stopped = Instant::now();
    // The result is written and sent: it waits in the stopped server's socket.
    wait_for("the result in the daemon's outbox", || {
        let run = format!("{id}.1");
        common::outbox(&daemon.home).contains(&run).then_some(())
    });
    // Stopped for longer than the lease: time itself (a stopped server observes nothing).
    std::thread::sleep(Duration::from_secs(40).saturating_sub(stopped.elapsed()));
    signal(&server, "CONT");
    let e = wait_for("the execution to end", || {
        let (_, e) = server.api("GET", &format!("/v1/executions/{id}"), None);
        (e["status"] != "running").then_some(e)
    });
    assert_eq!(e["status"], "exited", "{e}\n{}", daemon.log_tail(20));
    assert_eq!(e["stdout"], "done\n", "{e}");
    let metrics = server.metrics();
    assert!(
        !metrics.contains("outpost_runs_total{status=\"lost\"}"),
        "{metrics}"
    );
}

#[test]
fn a_restarted_server_waits_for_its_daemon_before_failing_what_it_had_offered() {
    let dir = temp_dir("liveness-restart");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let marks = dir.join("marks");
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    // The daemon stops answering: what the server offers now stays offered, not committed.
    let stop = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &daemon.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    };
    stop("STOP");
    let capability = shell_capability("mark", &format!("echo ran >> {}\n", marks.display()));
    let ids: Vec<String> = (0..2).map(|_| server.submit(&capability, "box")).collect();
    // Its two slots hold the offers; the server dies before anyone answers them.
    let server = server.restart();
    stop("CONT");
    for id in &ids {
        let e = server.wait_status(id, "exited");
        assert_eq!(e["ranOn"]["name"], "box", "{e}");
    }
    assert_eq!(
        common::lines(&marks).len(),
        ids.len(),
        "each ran exactly once\n{}",
        daemon.log_tail(20)
    );
    daemon.kill();
}
