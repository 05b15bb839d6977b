//! A run, live, with the real binary: its output reaches `outpost execute` and any number of
//! `outpost runs logs -f` followers while it is still running; Ctrl-C cancels it (and it keeps
//! what it printed); a second Ctrl-C leaves it running and says how to follow it again;
//! `runs show`, `runs cancel` and the list's filters and pages find it later.

mod common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Daemon, Server, lines, server_with_daemon, shell_capability, temp_dir, wait_for};

/// A capability folder whose run prints `first`, waits for `dir/go`, then prints `second`.
fn gated_capability(dir: &Path) -> std::path::PathBuf {
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("capability folder");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: gated\nversion: 3\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\nlimits:\n  timeout_ms: 120000\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), gated_script(dir)).expect("script");
    cap
}

fn gated_script(dir: &Path) -> String {
    format!(
        "echo $$ >> {pids}\necho first\necho oops >&2\nwhile [ ! -e {go} ]; do sleep 0.05; done\necho second\n",
        pids = dir.join("pids").display(),
        go = dir.join("go").display(),
    )
}

/// `outpost ARGS` against `server`, its stdout and stderr piped.
fn spawn(server: &Server, args: &[&str]) -> Child {
    Command::new(common::binary())
        .args(args)
        .args(["--server", &server.url])
        .env("OUTPOST_TOKEN", &server.admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outpost runs")
}

/// The lines `out` prints, as they come.
fn line_feed<R: std::io::Read + Send + 'static>(out: R) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line of `feed`, within 30 s.
fn next_line(feed: &mpsc::Receiver<String>, what: &str) -> String {
    feed.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{what}: no line ({e})"))
}

fn stdout_of(child: &mut Child) -> ChildStdout {
    child.stdout.take().expect("stdout")
}

fn id_from_stderr(feed: &mpsc::Receiver<String>) -> String {
    let first = next_line(feed, "the execution id");
    first
        .strip_prefix("outpost: execution ")
        .unwrap_or_else(|| panic!("the id first, not {first:?}"))
        .to_owned()
}

/// `outpost execute CAP --context box` against `server`: the process, its stdout and stderr
/// lines as they come, and the execution id it printed first.
fn execute_gated(
    server: &Server,
    cap: &Path,
) -> (
    Child,
    mpsc::Receiver<String>,
    mpsc::Receiver<String>,
    String,
) {
    let mut execute = spawn(
        server,
        &["execute", cap.to_str().expect("utf-8"), "--context", "box"],
    );
    let out = line_feed(stdout_of(&mut execute));
    let err = line_feed(execute.stderr.take().expect("stderr"));
    let id = id_from_stderr(&err);
    (execute, out, err, id)
}

/// Every line `feed` still has, to the end of its stream (the reader may still hold the last
/// ones when the process has exited).
fn rest_of(feed: &mpsc::Receiver<String>) -> Vec<String> {
    let mut lines = Vec::new();
    while let Ok(line) = feed.recv_timeout(Duration::from_secs(30)) {
        lines.push(line);
    }
    lines
}

/// Waits for `execute` to end with 130 (cancelled, or left running) having said a line that
/// starts with `says` on stderr; all it said.
fn ended_130(execute: Child, err: &mpsc::Receiver<String>, says: &str) -> Vec<String> {
    let done = common::finish(execute, "outpost execute");
    let said = rest_of(err);
    assert_eq!(done.status.code(), Some(130), "{said:?}");
    assert!(said.iter().any(|l| l.starts_with(says)), "{said:?}");
    said
}

/// The pid the run wrote first to `dir/pids`, once it is there.
fn run_pid(dir: &Path) -> i32 {
    wait_for("the run's pid", || {
        lines(&dir.join("pids")).first()?.parse().ok()
    })
}

/// Waits until the daemon has stopped the run's process `pid` (a daemon killed before that
/// would leave the run to its next start).
fn stopped(pid: i32) {
    wait_for("the run's process to be stopped", || {
        common::process_gone(pid).then_some(())
    });
}

fn interrupt(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[test]
fn execute_and_followers_read_the_output_while_the_run_is_still_going() {
    let dir = temp_dir("live-output");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    let cap = gated_capability(&dir);
    let (execute, out, err, id) = execute_gated(&server, &cap);
    assert_eq!(next_line(&out, "execute's first line"), "first");
    assert_eq!(next_line(&err, "execute's stderr"), "oops");
    // Still running: it waits for `go`, which nobody has written.
    let (_, execution) = server.api("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(execution["status"], "running", "{execution}");
    // Two followers that join late get everything from the start, live.
    let mut followers: Vec<(Child, mpsc::Receiver<String>)> = (0..2)
        .map(|_| {
            let mut f = spawn(&server, &["runs", "logs", &id, "-f"]);
            let feed = line_feed(stdout_of(&mut f));
            (f, feed)
        })
        .collect();
    for (_, feed) in &followers {
        assert_eq!(next_line(feed, "a follower's first line"), "first");
    }
    // A follower not read until the run ended misses nothing.
    let mut stalled = spawn(&server, &["runs", "logs", &id, "-f"]);
    std::fs::write(dir.join("go"), b"").expect("go");
    assert_eq!(next_line(&out, "execute's second line"), "second");
    let done = common::finish(execute, "outpost execute");
    assert_eq!(done.status.code(), Some(0));
    let said = rest_of(&err);
    assert!(
        said.iter().any(|l| l == "Ran on box (your machine)."),
        "{said:?}"
    );
    assert_eq!(
        said.iter().filter(|l| l.as_str() == "oops").count(),
        0,
        "stderr was shown once, as it came: {said:?}"
    );
    for (mut f, feed) in followers.drain(..) {
        assert_eq!(next_line(&feed, "a follower's second line"), "second");
        let status = f.wait().expect("the follower ends");
        assert!(status.success(), "a follower ends with the run: {status}");
    }
    let mut rest = String::new();
    stdout_of(&mut stalled)
        .read_to_string(&mut rest)
        .expect("the stalled follower's output");
    assert_eq!(rest, "first\nsecond\n", "read late, it missed nothing");
    assert!(stalled.wait().expect("it ends").success());

    // After the fact: `runs logs` prints the stored output, `runs show` says what ran.
    let logs = common::outpost_as(&server, &server.admin, &["runs", "logs", &id]);
    assert_eq!(String::from_utf8_lossy(&logs.stdout), "first\nsecond\n");
    assert_eq!(String::from_utf8_lossy(&logs.stderr), "oops\n");
    let show = common::outpost_as(&server, &server.admin, &["runs", "show", &id]);
    let shown = String::from_utf8_lossy(&show.stdout);
    for part in [
        "capability:  gated (version 3)",
        "requester:   admin",
        "ran on:      Ran on box (your machine).",
        "exit code:   0",
        "--- stdout ---\nfirst\nsecond\n",
    ] {
        assert!(shown.contains(part), "{part:?} in:\n{shown}");
    }
    let json = common::outpost_as(&server, &server.admin, &["runs", "show", &id, "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(value["capability"], "gated");
    assert_eq!(value["capabilityVersion"], 3);
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_output_route_resumes_from_an_offset_and_refuses_a_bad_one() {
    let dir = temp_dir("live-resume");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    let id = server.submit(
        &shell_capability("two", "printf 'hello '; printf 'world\\n'; echo bad >&2"),
        "box",
    );
    server.wait_status(&id, "exited");
    let get = |path: &str, last: Option<&str>| {
        let mut request = ureq::get(&format!("{}{path}", server.url))
            .header("authorization", &format!("Bearer {}", server.admin));
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        let response = request
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .expect("answered");
        let status = response.status().as_u16();
        (
            status,
            response.into_body().read_to_string().unwrap_or_default(),
        )
    };
    let sse =
        |query: &str, last: Option<&str>| get(&format!("/v1/executions/{id}/output{query}"), last);
    let (status, all) = sse("", None);
    assert_eq!(status, 200);
    assert!(all.contains(r#""text":"hello world\n""#), "{all}");
    assert!(all.contains("event: end"), "{all}");
    // From stdout byte 6 and all of stderr: only "world\n".
    let (_, rest) = sse("?stdout=6&stderr=4", None);
    assert!(rest.contains(r#""offset":6,"text":"world\n""#), "{rest}");
    assert!(!rest.contains("hello") && !rest.contains("bad"), "{rest}");
    let (_, resumed) = sse("", Some("12.0"));
    assert!(resumed.contains(r#""text":"bad\n""#), "{resumed}");
    assert!(!resumed.contains("hello"), "{resumed}");
    let (status, bad) = sse("", Some("twelve"));
    assert_eq!(status, 400, "{bad}");
    assert!(bad.contains("invalid_last_event_id"), "{bad}");
    let (status, whole) = sse("", Some("0.0"));
    assert_eq!(status, 200, "{whole}");
    assert!(whole.contains("hello world"), "{whole}");
    let (status, missing) = get("/v1/executions/ex_nope/output", None);
    assert_eq!(status, 404, "{missing}");
    assert!(missing.contains("execution_unknown"), "{missing}");
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_cancels_the_run_and_the_run_keeps_what_it_printed() {
    let dir = temp_dir("live-cancel");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    let cap = gated_capability(&dir);
    let (execute, out, err, id) = execute_gated(&server, &cap);
    assert_eq!(next_line(&out, "the first line"), "first");
    let pid = run_pid(&dir);
    interrupt(&execute);
    let said = ended_130(
        execute,
        &err,
        &format!("outpost: cancelling {id}… press Ctrl-C again to leave it running"),
    );
    assert!(
        said.iter()
            .any(|l| l == "outpost: the run was cancelled (requested)"),
        "{said:?}"
    );
    let execution = server.wait_status(&id, "cancelled");
    assert_eq!(execution["stdout"], "first\n", "it keeps what it printed");
    assert_eq!(execution["stderr"], "oops\n");
    stopped(pid);
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_ctrl_c_leaves_the_run_going_and_runs_cancel_stops_it() {
    let dir = temp_dir("live-detach");
    let state = dir.join("server");
    let server = Server::start(&state, 0);
    let mut daemon = Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    let cap = gated_capability(&dir);
    let (execute, out, err, id) = execute_gated(&server, &cap);
    let first = out.recv_timeout(Duration::from_secs(30));
    assert_eq!(
        first.as_deref(),
        Ok("first"),
        "{:?} {:?} {}",
        err.try_iter().collect::<Vec<_>>(),
        server.api("GET", &format!("/v1/executions/{id}"), None),
        daemon.log_tail(20)
    );
    // With the server gone, the first Ctrl-C cannot cancel; the second leaves it running.
    let port = server.port;
    let mut server = server;
    server.kill();
    interrupt(&execute);
    wait_for("execute to say it cannot cancel", || {
        err.try_iter()
            .any(|l| l.starts_with(&format!("outpost: cannot cancel {id}")))
            .then_some(())
    });
    interrupt(&execute);
    ended_130(
        execute,
        &err,
        &format!("outpost: left {id} running; follow it with `outpost runs logs {id} -f`"),
    );
    let server = Server::start(&state, port);
    let running = server.wait_status(&id, "running");
    assert_eq!(running["status"], "running");
    let cancel = common::outpost_as(&server, &server.admin, &["runs", "cancel", &id]);
    assert!(cancel.status.success(), "{cancel:?}");
    assert_eq!(
        String::from_utf8_lossy(&cancel.stdout),
        format!("cancelled {id} (it was running)\n")
    );
    server.wait_status(&id, "cancelled");
    // The daemon stops the run's process (before it is killed itself, which would leave the
    // run to its next start).
    stopped(run_pid(&dir));
    let again = common::outpost_as(&server, &server.admin, &["runs", "cancel", &id, "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    assert_eq!(value["status"], "cancelled");
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_list_filters_and_pages() {
    let dir = temp_dir("live-list");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    let mut ids = Vec::new();
    for n in 0..5 {
        let script = if n == 2 { "exit 3" } else { "true" };
        let id = server.submit(&shell_capability(&format!("job{n}"), script), "box");
        server.wait_status(&id, "exited");
        ids.push(id);
    }
    let list = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["runs", "list", "--json"];
        all.extend_from_slice(args);
        let out = common::outpost_as(&server, &server.admin, &all);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let names = |value: &serde_json::Value| -> Vec<String> {
        value["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| r["capability"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(names(&list(&["--limit", "2"])), ["job4", "job3"]);
    assert_eq!(names(&list(&[])), ["job4", "job3", "job2", "job1", "job0"]);
    assert_eq!(names(&list(&["--context", "box", "--mine"])).len(), 5);
    assert!(names(&list(&["--context", "elsewhere"])).is_empty());
    assert!(names(&list(&["--status", "failed"])).is_empty());
    assert_eq!(names(&list(&["--since", "1h"])).len(), 5);
    assert!(names(&list(&["--since", "2000-01-01T00:00:00Z"])).len() == 5);
    // Pages through the API: no run twice, none missed.
    let (_, first) = server.api("GET", "/v1/runs?limit=2", None);
    let next = first["next"].as_str().expect("a next page").to_owned();
    let (_, second) = server.api("GET", &format!("/v1/runs?limit=2&before={next}"), None);
    let (_, third) = server.api(
        "GET",
        &format!(
            "/v1/runs?limit=2&before={}",
            second["next"].as_str().expect("a third page")
        ),
        None,
    );
    let paged: Vec<String> = [&first, &second, &third]
        .iter()
        .flat_map(|p| p["runs"].as_array().cloned().unwrap_or_default())
        .map(|r| r["executionId"].as_str().unwrap_or("").to_owned())
        .collect();
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(paged, newest_first);
    assert!(third.get("next").is_none(), "{third}");
    let bad = common::outpost_as(
        &server,
        &server.admin,
        &["runs", "list", "--status", "done"],
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("give one of pending, running"),
        "{bad:?}"
    );
    let table = common::outpost_as(&server, &server.admin, &["runs", "list"]);
    let text = String::from_utf8_lossy(&table.stdout);
    let header = text.lines().next().unwrap_or("");
    for column in [
        "CAPABILITY",
        "REQUESTER",
        "RAN ON",
        "STATUS",
        "STARTED",
        "DURATION",
    ] {
        assert!(header.contains(column), "{header}");
    }
    assert!(text.contains("job2") && text.contains("admin"), "{text}");
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_busy_context_queues_the_run_says_where_it_stands_and_then_runs_it() {
    let dir = temp_dir("live-busy");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    // Both of the machine's slots are taken until `go` exists.
    let holders: Vec<String> = (0..2)
        .map(|n| {
            server.submit(
                &shell_capability(&format!("hold{n}"), &gated_script(&dir)),
                "box",
            )
        })
        .collect();
    for id in &holders {
        server.wait_status(id, "running");
    }
    let cap = dir.join("quick");
    std::fs::create_dir_all(&cap).expect("capability folder");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: quick\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), "echo ran after the queue\n").expect("script");
    // A name that is not one: the refusal lists the names the caller can use.
    let typo = common::outpost_as(
        &server,
        &server.admin,
        &["execute", cap.to_str().expect("utf-8"), "--context", "bxo"],
    );
    assert!(
        String::from_utf8_lossy(&typo.stderr)
            .contains(r#"no context is named "bxo"; yours to use: box, or cloud"#),
        "{typo:?}"
    );
    // Without --when-busy, a busy machine refuses at once.
    let refused = common::outpost_as(
        &server,
        &server.admin,
        &["execute", cap.to_str().expect("utf-8"), "--context", "box"],
    );
    assert_eq!(refused.status.code(), Some(70), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("execution_context_busy"), "{said}");
    assert!(
        said.contains("`--when-busy queue`") && said.contains("`--fallback chain`"),
        "the command line's words, not the API's: {said}"
    );
    assert_eq!(
        said.matches("execution_context_busy").count(),
        1,
        "the refusal is printed once: {said}"
    );
    let mut execute = spawn(
        &server,
        &[
            "execute",
            cap.to_str().expect("utf-8"),
            "--context",
            "box",
            "--when-busy",
            "queue",
            "--queue-minutes",
            "5",
        ],
    );
    let out = line_feed(stdout_of(&mut execute));
    let err = line_feed(execute.stderr.take().expect("stderr"));
    let id = id_from_stderr(&err);
    assert_eq!(
        next_line(&err, "where it stands"),
        "outpost: waiting for box: every slot is taken (next in its queue, 5 min left)"
    );
    let (_, shown) = server.api("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(shown["status"], "pending", "{shown}");
    assert_eq!(shown["queue"]["position"], 1, "{shown}");
    assert_eq!(shown["queue"]["reason"], "busy", "{shown}");
    let show = common::outpost_as(&server, &server.admin, &["runs", "show", &id]);
    assert!(
        String::from_utf8_lossy(&show.stdout)
            .contains("queued:      waiting for box: every slot is taken"),
        "{show:?}"
    );
    std::fs::write(dir.join("go"), b"").expect("go");
    assert_eq!(
        next_line(&out, "the queued run's output"),
        "ran after the queue"
    );
    let done = common::finish(execute, "outpost execute");
    assert_eq!(done.status.code(), Some(0));
    for id in &holders {
        server.wait_status(id, "exited");
    }
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_persistent_service_started_by_execute_says_how_to_stop_it_and_runs_cancel_does() {
    let dir = temp_dir("live-service");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    let cap = dir.join("service");
    std::fs::create_dir_all(&cap).expect("capability folder");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: ticker\nenvironment: shell\nlifecycle: persistent\nentry: run.sh\nconfine: false\n",
    )
    .expect("manifest");
    std::fs::write(
        cap.join("run.sh"),
        format!(
            "echo $$ >> {}\necho up\nwhile true; do sleep 0.2; done\n",
            dir.join("pids").display()
        ),
    )
    .expect("script");
    let (execute, out, err, id) = execute_gated(&server, &cap);
    assert_eq!(
        next_line(&err, "how to stop it"),
        format!(
            "outpost: {id} is a persistent service: it runs until stopped (Ctrl-C here, or `outpost runs cancel {id}` from anywhere)"
        )
    );
    assert_eq!(next_line(&out, "the service's first line"), "up");
    let cancel = common::outpost_as(&server, &server.admin, &["runs", "cancel", &id]);
    assert!(cancel.status.success(), "{cancel:?}");
    let done = common::finish(execute, "outpost execute");
    let said = rest_of(&err);
    assert_eq!(done.status.code(), Some(130), "{said:?}");
    let execution = server.wait_status(&id, "cancelled");
    assert_eq!(execution["stdout"], "up\n", "{execution}");
    stopped(run_pid(&dir));
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}
