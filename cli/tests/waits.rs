//! Condition waits end to end with the real binary: a server, a daemon that checks the
//! condition on its machine, kill -9 between checks, the example health-check service, and
//! the continuation the match starts. Every count that matters is counted: matches recorded,
//! follow-ups run, checks that outlive a cancel.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, Server, lines, server_with_daemon, shell_capability, temp_dir, wait_for};
use serde_json::{Value, json};

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The example health-check service on `port`, once it listens.
struct Health(Child);

impl Health {
    fn start(port: u16) -> Health {
        let mut child = Command::new("sh")
            .arg(examples().join("health-check/serve.sh"))
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the health-check service starts");
        let out = child.stdout.take().expect("stdout");
        let mut first = String::new();
        BufReader::new(out).read_line(&mut first).expect("a line");
        assert!(first.contains("listening"), "{first}");
        Health(child)
    }
}

impl Drop for Health {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lets the context's runs and conditions reach `127.0.0.1:port`.
fn allow_loopback(server: &Server, name: &str, port: u16) {
    let (_, context) = server.api("GET", &format!("/v1/execution-contexts/{name}"), None);
    let mut grant = context["grant"].clone();
    grant["egress"] = json!({"mode": "allowlist", "hosts": [format!("127.0.0.1:{port}")]});
    let (status, answer) = server.api(
        "PATCH",
        &format!("/v1/execution-contexts/{name}/grant"),
        Some(grant),
    );
    assert_eq!(status, 200, "{answer}");
}

fn register(server: &Server, body: Value) -> Value {
    let (status, wait) = server.api("POST", "/v1/waits", Some(body));
    assert_eq!(status, 201, "{wait}");
    wait
}

fn show(server: &Server, id: &str) -> Value {
    let (status, wait) = server.api("GET", &format!("/v1/waits/{id}"), None);
    assert_eq!(status, 200, "{wait}");
    wait
}

/// The wait once `check` holds for it; a timeout shows where it is.
fn wait_until(server: &Server, id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    common::wait_for_explained(
        what,
        || {
            let w = show(server, id);
            check(&w).then_some(w)
        },
        || format!("the wait is: {}", show(server, id)),
    )
}

/// The rows of the daemon's waits table, read beside it.
fn daemon_wait_rows(home: &Path) -> usize {
    let conn = rusqlite::Connection::open_with_flags(
        home.join("state/daemon.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("the daemon's store");
    conn.query_row("SELECT COUNT(*) FROM waits", [], |r| r.get::<_, i64>(0))
        .expect("the waits table") as usize
}

/// The daemon's check threads (named `check N`) that are running now: state `R` in
/// `/proc/PID/task/TID/stat`. A thread waiting in the pool for its next check sleeps (`S`); one
/// spinning in a condition's loop is always running or runnable.
fn running_check_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|comm| comm.starts_with("check "))
                        && std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                            // `pid (comm) STATE ...`: the state follows the last `)`.
                            stat.rsplit_once(')')
                                .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
                        })
                })
                .count()
        })
        .unwrap_or(0)
}

/// The health condition that also counts the checks its wait's history (`read('events')`)
/// holds as ended: the history is kept with the wait, so it survives the daemon's kill -9.
const COUNTING_CONDITION: &str = "async ({ ctx }) => {
    const { value: events } = await ctx.read('events');
    const ended = events.filter((e) => e.kind === 'check_ended').length;
    let r;
    try { r = await ctx.fetch('http://127.0.0.1:PORT/health'); } catch (e) { return false; }
    if (r.status !== 200) return false;
    return { resumeText: 'health-check answers 200', payload: { ...JSON.parse(r.body), ended } };
}";

#[test]
fn a_wait_survives_kill_9_between_checks_matches_once_and_its_follow_up_runs_once() {
    let dir = temp_dir("wait-crash");
    let (server, mut daemon) = server_with_daemon(&dir, "box");
    let port = free_port();
    allow_loopback(&server, "box", port);
    let followed = dir.join("followed.log");
    let script = format!(
        "cat outpost-wait.json >> {log}\necho >> {log}\ncat outpost-wait.json\n",
        log = followed.display()
    );
    let wait = register(
        &server,
        json!({
            "context": "box",
            "condition": COUNTING_CONDITION.replace("PORT", &port.to_string()),
            "intervalMs": 1000,
            "reason": "run the report once the service is up",
            "then": {"capability": shell_capability("follow-up", &script)},
        }),
    );
    let id = wait["waitId"].as_str().expect("an id").to_owned();
    assert_eq!(wait["state"], "active");

    // Checked, not yet true: the service is down.
    wait_until(&server, &id, "two checks", |w| {
        w["checks"].as_u64() >= Some(2)
    });
    assert_eq!(
        daemon_wait_rows(&daemon.home),
        1,
        "the wait is on the daemon's disk"
    );
    daemon.kill();

    // The condition becomes true while the daemon is dead.
    let _health = Health::start(port);
    let home = daemon.home.clone();
    let daemon = Daemon::start(&home, "box", None, "tokio");
    let matched = wait_until(&server, &id, "the match", |w| w["state"] == "matched");
    assert_eq!(matched["resumeText"], "health-check answers 200");
    assert_eq!(matched["payload"]["status"], "ok");
    // The checks before the kill ended in its history, committed with the wait's rows.
    let ended = matched["payload"]["ended"].as_u64().unwrap_or(0);
    assert!(
        ended >= 2,
        "the history kept across kill -9: {}",
        matched["payload"]
    );
    assert!(
        matched["evidence"].to_string().contains("/health"),
        "{}",
        matched["evidence"]
    );
    let done = wait_until(&server, &id, "the follow-up", |w| {
        w["continuation"]["executionId"].is_string()
    });
    let exec_id = done["continuation"]["executionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let follow_up = server.wait_status(&exec_id, "exited");
    assert!(
        follow_up["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("health-check answers 200")),
        "the payload reached the follow-up: {follow_up}"
    );
    wait_for("the daemon to forget the acknowledged wait", || {
        (daemon_wait_rows(&home) == 0).then_some(())
    });

    // Crash both sides again: nothing is matched or followed twice.
    drop(daemon);
    let server = server.restart();
    let _daemon = Daemon::start(&home, "box", None, "tokio");
    server.wait_context("box", "the daemon back online", |c| c["online"] == true);
    let barrier = server.submit(&shell_capability("barrier", "echo after\n"), "box");
    server.wait_status(&barrier, "exited");
    let again = show(&server, &id);
    assert_eq!(again["state"], "matched");
    assert_eq!(again["continuation"]["executionId"], exec_id.as_str());
    assert_eq!(
        lines(&followed)
            .iter()
            .filter(|l| l.contains("waitId"))
            .count(),
        1,
        "the follow-up ran exactly once"
    );
}

#[test]
fn five_failing_checks_fail_the_wait_and_create_no_continuation() {
    let dir = temp_dir("wait-errors");
    let (server, _daemon) = server_with_daemon(&dir, "box");
    let wait = register(
        &server,
        json!({
            "context": "box",
            "condition": "async () => { throw new Error('the service is on fire'); }",
            "intervalMs": 1000,
            "then": {"capability": shell_capability("never", "echo never\n")},
        }),
    );
    let id = wait["waitId"].as_str().unwrap();
    let failed = wait_until(&server, id, "the wait to fail", |w| w["state"] == "failed");
    assert_eq!(failed["failReason"], "check_errors");
    assert_eq!(failed["checks"], 5);
    assert_eq!(failed["lastError"]["code"], "condition_threw");
    assert!(
        failed["lastError"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("on fire")),
        "{failed}"
    );
    assert_eq!(failed["continuation"]["state"], "none");
    assert!(failed["continuation"]["executionId"].is_null());
    // A finished wait may be registered again: a new wait, not the old one.
    let again = register(
        &server,
        json!({
            "context": "box",
            "condition": "async () => { throw new Error('the service is on fire'); }",
            "intervalMs": 1000,
            "then": {"capability": shell_capability("never", "echo never\n")},
        }),
    );
    assert_ne!(again["waitId"], wait["waitId"]);
    assert_eq!(again["deduplicated"], false);
}

#[test]
fn a_condition_that_loops_forever_is_stopped_at_30_s_and_one_that_calls_33_times_names_the_limit() {
    let dir = temp_dir("wait-limits");
    let (server, _daemon) = server_with_daemon(&dir, "box");
    let started = Instant::now();
    let forever = register(
        &server,
        json!({"context": "box", "condition": "async () => { for (;;) {} }", "intervalMs": 60000}),
    );
    let calls = register(
        &server,
        json!({
            "context": "box",
            "condition": "async ({ ctx }) => { for (let i = 0; i < 33; i++) await ctx.read('runs'); return false; }",
            "intervalMs": 60000,
        }),
    );
    let over = wait_until(
        &server,
        calls["waitId"].as_str().unwrap(),
        "the 33rd call to fail the check",
        |w| w["checks"].as_u64() >= Some(1),
    );
    assert_eq!(over["lastError"]["code"], "ctx_call_limit", "{over}");
    assert!(
        over["lastError"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("32")),
        "{over}"
    );
    let stopped = wait_until(
        &server,
        forever["waitId"].as_str().unwrap(),
        "the endless check to be stopped",
        |w| w["checks"].as_u64() >= Some(1),
    );
    let took = started.elapsed();
    assert_eq!(stopped["lastError"]["code"], "check_deadline", "{stopped}");
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(50),
        "stopped after {took:?}"
    );
    assert_eq!(
        stopped["state"], "active",
        "one failed check does not fail the wait"
    );
}

#[test]
fn a_post_a_credentialed_url_and_an_unlisted_host_are_refused_by_fetch() {
    let dir = temp_dir("wait-fetch");
    let (server, _daemon) = server_with_daemon(&dir, "box");
    let port = free_port();
    allow_loopback(&server, "box", port);
    let condition = format!(
        "async ({{ ctx }}) => {{
            const code = async (p) => {{ try {{ await p; return 'ok'; }} catch (e) {{ return e.code; }} }};
            return {{ resumeText: 'tried', payload: {{
                post: await code(ctx.fetch('http://127.0.0.1:{port}/health', {{ method: 'POST' }})),
                credentials: await code(ctx.fetch('http://ada:secret@127.0.0.1:{port}/health')),
                unlisted: await code(ctx.fetch('http://127.0.0.2:{port}/health')),
            }} }};
        }}"
    );
    let wait = register(&server, json!({"context": "box", "condition": condition}));
    let matched = wait_until(
        &server,
        wait["waitId"].as_str().unwrap(),
        "the tries",
        |w| w["state"] == "matched",
    );
    assert_eq!(
        matched["payload"],
        json!({"post": "fetch_refused", "credentials": "fetch_refused", "unlisted": "egress_denied"})
    );
}

#[test]
fn cancel_stops_a_running_check_before_the_wait_ends_cancelled() {
    let dir = temp_dir("wait-cancel");
    let (server, daemon) = server_with_daemon(&dir, "box");
    let pid = daemon.pid();
    let wait = register(
        &server,
        json!({"context": "box", "condition": "async () => { for (;;) {} }", "intervalMs": 60000}),
    );
    let id = wait["waitId"].as_str().unwrap();
    wait_for("the check to run", || {
        (running_check_threads(pid) == 1).then_some(())
    });
    let asked = Instant::now();
    let (status, cancelling) = server.api("POST", &format!("/v1/waits/{id}/cancel"), None);
    assert_eq!(status, 200, "{cancelling}");
    let ended = wait_until(&server, id, "the cancel", |w| w["state"] == "failed");
    assert_eq!(ended["failReason"], "cancelled");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "interrupted, not ended by its deadline: {:?}",
        asked.elapsed()
    );
    // The outcome is sent once the engine has returned; the thread then goes back to the pool
    // within microseconds. A check still spinning would run on to its 30 s deadline.
    let ended_at = Instant::now();
    while running_check_threads(pid) != 0 {
        assert!(
            ended_at.elapsed() < Duration::from_millis(500),
            "the check had not stopped when the wait ended"
        );
        std::thread::yield_now();
    }
    assert_eq!(ended["continuation"]["state"], "none");
}

/// `outpost wait …` with the real binary against the server's URL and the admin's token.
fn wait_cli(server: &Server, args: &[&std::ffi::OsStr]) -> (i32, Value, String) {
    let out = Command::new(common::binary())
        .arg("wait")
        .args(args)
        .args(["--server", &server.url, "--json"])
        .env("OUTPOST_TOKEN", &server.admin)
        .output()
        .expect("outpost wait runs");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_waits_for_the_health_check_then_runs_daily_report_through_the_cli() {
    let dir = temp_dir("wait-example");
    let (server, _daemon) = server_with_daemon(&dir, "box");
    let port = free_port();
    allow_loopback(&server, "box", port);
    let example = std::fs::read_to_string(examples().join("wait-for-health/condition.js"))
        .expect("the example's condition");
    assert!(
        example.contains("8787"),
        "the example names the service's port"
    );
    let condition = dir.join("condition.js");
    std::fs::write(&condition, example.replace("8787", &port.to_string())).unwrap();
    let then = examples().join("daily-report");
    let (code, wait, err) = wait_cli(
        &server,
        &[
            "register".as_ref(),
            "--context".as_ref(),
            "box".as_ref(),
            "--file".as_ref(),
            condition.as_os_str(),
            "--interval".as_ref(),
            "1s".as_ref(),
            "--reason".as_ref(),
            "report once the service is up".as_ref(),
            "--then".as_ref(),
            then.as_os_str(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let id = wait["waitId"].as_str().expect("an id").to_owned();
    let (code, again, _) = wait_cli(
        &server,
        &[
            "register".as_ref(),
            "--context".as_ref(),
            "box".as_ref(),
            "--file".as_ref(),
            condition.as_os_str(),
            "--interval".as_ref(),
            "1s".as_ref(),
            "--then".as_ref(),
            then.as_os_str(),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(
        again["waitId"],
        id.as_str(),
        "an identical active wait deduplicates"
    );
    assert_eq!(again["deduplicated"], true);
    wait_until(&server, &id, "a check", |w| w["checks"].as_u64() >= Some(1));
    let _health = Health::start(port);
    let matched = wait_until(&server, &id, "the follow-up", |w| {
        w["continuation"]["executionId"].is_string()
    });
    let report = server.wait_status(
        matched["continuation"]["executionId"].as_str().unwrap(),
        "exited",
    );
    assert!(
        report["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("# Daily report")),
        "{report}"
    );
    let (code, shown, _) = wait_cli(&server, &["show".as_ref(), id.as_ref()]);
    assert_eq!(code, 0);
    assert_eq!(shown["state"], "matched");
    assert_eq!(shown["reason"], "report once the service is up");
    assert_eq!(shown["continuation"]["state"], "started");
    let (code, listed, _) = wait_cli(&server, &["list".as_ref()]);
    assert_eq!(code, 0);
    assert!(listed.to_string().contains(&id), "{listed}");
}

#[test]
fn the_cli_cancels_a_wait_and_an_expired_one_creates_no_continuation() {
    let dir = temp_dir("wait-cli-end");
    let (server, _daemon) = server_with_daemon(&dir, "box");
    let condition = dir.join("never.js");
    std::fs::write(&condition, "async () => false\n").unwrap();
    let then = examples().join("daily-report");
    let register = |extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "register".as_ref(),
            "--context".as_ref(),
            "box".as_ref(),
            "--file".as_ref(),
            condition.as_os_str(),
            "--then".as_ref(),
            then.as_os_str(),
        ];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        let (code, wait, err) = wait_cli(&server, &args);
        assert_eq!(code, 0, "{err}");
        wait["waitId"].as_str().expect("an id").to_owned()
    };
    let expiring = register(&["--interval", "1s", "--expires-at", "+3s"]);
    let cancelled = register(&["--interval", "2s"]);
    let (code, answer, err) = wait_cli(&server, &["cancel".as_ref(), cancelled.as_ref()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        answer["state"] == "cancelling" || answer["state"] == "failed",
        "{answer}"
    );
    let ended = wait_until(&server, &cancelled, "the cancel", |w| {
        w["state"] == "failed"
    });
    assert_eq!(ended["failReason"], "cancelled");
    let expired = wait_until(&server, &expiring, "the expiry", |w| w["state"] == "failed");
    assert_eq!(expired["failReason"], "expired");
    for id in [&expiring, &cancelled] {
        let (code, shown, _) = wait_cli(&server, &["show".as_ref(), id.as_ref()]);
        assert_eq!(code, 0);
        assert!(
            shown["continuation"]["executionId"].is_null(),
            "no continuation: {shown}"
        );
    }
}

/// A wait's `exec` (host-command trust: the operator's wait, both switches on) runs in the
/// sandbox an operator's run gets, even where the owner lets the operator's own runs opt out:
/// it is PID 2 of its own namespace, and the user's home is out of its reach.
#[test]
fn a_wait_s_exec_runs_in_the_sandbox() {
    let dir = temp_dir("wait-exec");
    let user_home = dir.join("user");
    std::fs::create_dir_all(user_home.join(".ssh")).unwrap();
    std::fs::write(user_home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    let home = dir.join("home");
    let server = Server::start(&dir.join("server"), 0);
    let user_home_text = user_home.display().to_string();
    let daemon = Daemon::start_with(
        &home,
        "box",
        Some(&server.join),
        "tokio",
        &[("OUTPOST_KEYRING", "off"), ("HOME", &user_home_text)],
    );
    server.wait_context("box", "box online", |c| c["online"] == true);
    common::commands_switch(&home, "on");
    wait_for("the daemon to apply the grant with commands on", || {
        daemon.log_text().contains("commands=true").then_some(())
    });
    let script =
        format!("echo pid=$$; cat {user_home_text}/.ssh/id_ed25519 2>/dev/null || echo hidden");
    let wait = register(
        &server,
        json!({
            "context": "box",
            "condition": format!(
                "async ({{ ctx }}) => ({{ resumeText: 'seen', payload: await ctx.exec({{ command: '/bin/sh', args: ['-c', {script:?}] }}) }})"
            ),
            "intervalMs": 1000,
        }),
    );
    let id = wait["waitId"].as_str().unwrap();
    let matched = wait_until(&server, id, "the wait to match", |w| {
        w["state"] == "matched"
    });
    let stdout = matched["payload"]["stdout"].as_str().unwrap_or_default();
    assert_eq!(stdout, "pid=2\nhidden\n", "{matched}");
}
