//! One runner per home, a stop for good, and a drain, with real daemons and a real server.

use std::path::Path;

use serde_json::Value;

use crate::common::{binary, lines, shell_capability, temp_dir, wait_for};
use crate::*;

fn lock_line(home: &Path) -> Value {
    let text = std::fs::read_to_string(home.join("state/daemon.lock")).unwrap_or_default();
    serde_json::from_str(text.trim()).unwrap_or(Value::Null)
}

fn status(dir: &Path, home: &Path) -> (i32, Value) {
    let out = outpost(dir, home, &["status", "--json"], &[]);
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
    )
}

#[test]
fn one_runner_per_home_a_second_daemon_names_the_first_and_a_service_waits() {
    let dir = temp_dir("svc-lock");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut first = spawn_daemon(&binary(), &dir, &home, Some(&server.join), &[]);
    online(&server, "box", true);
    let pid = first.child.id();
    assert_eq!(lock_line(&home)["pid"], pid);
    assert_eq!(lock_line(&home)["launcher"], "terminal");
    let (code, st) = status(&dir, &home);
    assert_eq!(code, 0, "{st}");
    assert_eq!(
        (st["running"].clone(), st["pid"].clone()),
        (true.into(), pid.into()),
        "{st}"
    );
    assert_eq!(st["manager"], "terminal");
    assert_eq!(st["outdated"], false, "{st}");

    // A second terminal daemon exits naming the first.
    let out = outpost(&dir, &home, &[], &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(78), "{said}");
    assert!(said.contains("[home_locked]"), "{said}");
    assert!(
        said.contains(&format!(
            "pid {pid}, started from terminal, version {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{said}"
    );

    // Installing meanwhile says the service will wait for it.
    let out = outpost(&dir, &home, &["install"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "a daemon runs on this home in a terminal (pid {pid}"
        )),
        "{}",
        text(&out)
    );

    // A service waits for the lock, then serves; it runs from a binary that is replaced
    // on disk afterwards, which status flags.
    let copy = dir.join("bin/outpost");
    std::fs::create_dir_all(copy.parent().expect("bin")).expect("bin");
    std::fs::copy(binary(), &copy).expect("copy");
    let mut service = spawn_daemon(
        &copy,
        &dir,
        &home,
        None,
        &[("OUTPOST_DAEMON_SERVICE", "systemd")],
    );
    wait_for("the service to wait for the lock", || {
        service
            .log_text()
            .contains("waiting for it to stop")
            .then_some(())
    });
    assert!(
        service.log_text().contains(&format!("pid {pid}")),
        "{}",
        service.log_text()
    );
    assert!(
        service.child.try_wait().expect("status").is_none(),
        "the service waits"
    );
    signal(pid, "TERM");
    assert_eq!(first.wait_exit(), 0, "{}", first.log_text());
    let service_pid = service.child.id();
    wait_for("the service to take the lock", || {
        (lock_line(&home)["pid"] == service_pid).then_some(())
    });
    assert_eq!(lock_line(&home)["launcher"], "systemd");
    online(&server, "box", true);
    let (_, st) = status(&dir, &home);
    assert_eq!(st["pid"], service_pid, "{st}");
    assert_eq!(st["manager"], "systemd", "{st}");
    assert_eq!(st["outdated"], false, "{st}");
    std::fs::remove_file(&copy).expect("rm");
    std::fs::copy(binary(), &copy).expect("a new binary");
    let (_, st) = status(&dir, &home);
    assert_eq!(st["outdated"], true, "{st}");
    assert!(
        st["outdatedWhy"]
            .as_str()
            .is_some_and(|w| w.contains("replaced")),
        "{st}"
    );

    // kill -9: the lock is free, its line stale; the next daemon takes it over and says so.
    service.kill();
    let (code, st) = status(&dir, &home);
    assert_eq!(code, 3, "{st}");
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["leftBehind"]["pid"], service_pid, "{st}");
    let mut next = spawn_daemon(&binary(), &dir, &home, None, &[]);
    online(&server, "box", true);
    wait_for("the takeover to be logged", || {
        next.log_text().contains("took over the lock").then_some(())
    });
    assert!(
        next.log_text().contains(&format!("pid {service_pid}")),
        "{}",
        next.log_text()
    );
    assert_eq!(lock_line(&home)["pid"], next.child.id());
    assert_eq!(
        json_file(&home.join("state/daemon.json"))["pid"],
        next.child.id()
    );
    signal(next.child.id(), "TERM");
    assert_eq!(next.wait_exit(), 0, "{}", next.log_text());
    assert!(
        !home.join("state/daemon.json").exists(),
        "removed on a clean exit"
    );
    assert_eq!(lock_line(&home), Value::Null, "the lock line is emptied");
    let (code, st) = status(&dir, &home);
    assert_eq!((code, st["leftBehind"].clone()), (3, Value::Null), "{st}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_revoked_service_writes_stopped_json_exits_0_and_does_not_start_again() {
    let dir = temp_dir("svc-revoke");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = spawn_daemon(
        &binary(),
        &dir,
        &home,
        Some(&server.join),
        &[("OUTPOST_DAEMON_SERVICE", "systemd")],
    );
    online(&server, "box", true);
    let context_id = json_file(&home.join("config/server.json"))["contextId"]
        .as_str()
        .expect("context")
        .to_owned();
    let (status_code, body) = server.api("POST", "/v1/execution-contexts/box/revoke", None);
    assert_eq!(status_code, 200, "{body}");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    let stopped = json_file(&home.join("state/stopped.json"));
    assert_eq!(stopped["reason"], "revoked", "{stopped}");
    assert_eq!(stopped["contextId"], context_id.as_str(), "{stopped}");
    assert!(
        stopped["at"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{stopped}"
    );
    let log = daemon.log_text();
    assert!(
        log.contains("could not disable the service (best effort"),
        "{log}"
    );
    assert!(
        log.contains(&format!("outpost-daemon-{context_id}.service")),
        "{log}"
    );
    assert!(!home.join("state/daemon.json").exists());

    // Started again (by a manager or by hand) it refuses at once, exit 0.
    let out = outpost(&dir, &home, &[], &[("OUTPOST_DAEMON_SERVICE", "systemd")]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("[stopped_for_good]"), "{said}");
    assert!(said.contains("stopped.json"), "{said}");
    let (code, st) = status(&dir, &home);
    assert_eq!(code, 3, "{st}");
    assert_eq!(st["stopped"]["reason"], "revoked", "{st}");
    let out = outpost(&dir, &home, &["install"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[stopped_for_good]"), "{}", text(&out));

    // The operator deletes the machine; the owner removes stopped.json and starts it again:
    // the server no longer knows it, which stops it for good too.
    let (status_code, body) = server.api("DELETE", "/v1/execution-contexts/box", None);
    assert!(
        status_code == 200 || status_code == 204,
        "{status_code} {body}"
    );
    std::fs::remove_file(home.join("state/stopped.json")).expect("rm stopped.json");
    let out = outpost(&dir, &home, &[], &[("OUTPOST_DAEMON_SERVICE", "systemd")]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("[unregistered]"), "{said}");
    assert!(
        said.contains("could not disable the service (best effort"),
        "{said}"
    );
    let stopped = json_file(&home.join("state/stopped.json"));
    assert_eq!(stopped["reason"], "unregistered", "{stopped}");
    assert_eq!(stopped["contextId"], context_id.as_str(), "{stopped}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_mid_run_finishes_the_run_and_the_server_has_its_result_before_the_exit() {
    let dir = temp_dir("svc-drain");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = spawn_daemon(&binary(), &dir, &home, Some(&server.join), &[]);
    online(&server, "box", true);
    let (marks, go) = (dir.join("marks"), dir.join("go"));
    let script = format!(
        "echo started >> {m}\nwhile [ ! -e {g} ]; do sleep 0.05; done\necho finished\n",
        m = marks.display(),
        g = go.display()
    );
    let id = server.submit(&shell_capability("slow", &script), "box");
    wait_for("the run to start", || {
        (!lines(&marks).is_empty()).then_some(())
    });
    signal(daemon.child.id(), "TERM");
    wait_for("the daemon to drain", || {
        daemon
            .log_text()
            .contains("stopping: runs in flight")
            .then_some(())
    });
    // The draining daemon takes no new run.
    let late_mark = dir.join("late");
    let late = server.submit(
        &shell_capability("late", &format!("echo ran >> {}\n", late_mark.display())),
        "box",
    );
    assert!(
        daemon.child.try_wait().expect("status").is_none(),
        "it waits for the run"
    );
    std::fs::write(&go, b"").expect("go");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    // No waiting here: the result was acknowledged before the daemon exited.
    let (_, execution) = server.api("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(execution["status"], "exited", "{execution}");
    assert_eq!(execution["stdout"], "finished\n", "{execution}");
    assert!(
        !late_mark.exists(),
        "a run offered while draining never ran"
    );
    // It was refused with `draining`: busy until the daemon stops, and said so.
    let (_, late) = server.api("GET", &format!("/v1/executions/{late}"), None);
    assert_eq!(late["status"], "failed", "{late}");
    assert_eq!(late["error"]["code"], "execution_context_busy", "{late}");
    assert!(
        late["error"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("box is draining"),
        "{late}"
    );
    assert!(
        daemon.log_text().contains("every result was delivered"),
        "{}",
        daemon.log_text()
    );
    assert!(!home.join("state/daemon.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
