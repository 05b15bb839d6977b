//! Who did what, when and where: the server logs one line per request (the route's pattern,
//! status, duration, caller — never a token), and `outpost audit` shows each run under its
//! requester with the context's name, failed sign-ins and refused calls, at RFC 3339 times.

mod common;

use std::process::Command;

use common::{Daemon, Server, api, binary, shell_capability, temp_dir, wait_for};
use serde_json::json;

/// Whether `text` begins with an RFC 3339 time with an offset (`2026-12-05T01:02:03+01:00`).
fn starts_with_rfc3339(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 25
        && [4, 7].iter().all(|&i| b[i] == b'-')
        && b[10] == b'T'
        && [13, 16, 22].iter().all(|&i| b[i] == b':')
        && (b[19] == b'+' || b[19] == b'-')
        && [
            0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23, 24,
        ]
        .iter()
        .all(|&i| b[i].is_ascii_digit())
}

#[test]
fn requests_are_logged_without_secrets_and_the_audit_says_who_did_what_where() {
    let dir = temp_dir("audit");
    let log = dir.join("server.log");
    let mut server = Server::start_logging(&dir.join("server"), &log);
    let (url, join, admin) = (
        server.url.clone(),
        server.join.clone(),
        server.admin.clone(),
    );
    let mut daemon = Daemon::start(&dir.join("home"), "build-box", Some(&join), "tokio");
    wait_for("the daemon to come online", || {
        let (_, ctx) = api(
            &url,
            &admin,
            "GET",
            "/v1/execution-contexts/build-box",
            None,
        );
        (ctx["online"] == true).then_some(())
    });
    let (status, ran) = api(
        &url,
        &admin,
        "POST",
        "/v1/executions",
        Some(json!({
            "capability": shell_capability("hello", "echo hi\n"),
            "context": "build-box",
            "wait": true,
            "waitSecs": 60,
        })),
    );
    assert_eq!(
        (status, ran["status"].as_str()),
        (201, Some("exited")),
        "{ran}"
    );
    let id = ran["executionId"].as_str().expect("an id").to_owned();
    let wrong = format!("opt_{}", "W".repeat(43));
    let (status, _) = api(&url, &wrong, "GET", "/v1/execution-contexts", None);
    assert_eq!(status, 401);

    // `outpost audit`: RFC 3339 times, the requester, the context's name.
    let out = Command::new(binary())
        .args(["audit", "--server", &url])
        .env("OUTPOST_TOKEN", &admin)
        .output()
        .expect("outpost audit runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert!(text.starts_with("AT "), "{text}");
    assert!(rows.iter().all(|r| starts_with_rfc3339(r)), "{text}");
    let run = rows
        .iter()
        .find(|r| r.contains(" run ") && r.contains(&id))
        .unwrap_or_else(|| panic!("the run's row in {text}"));
    let words: Vec<&str> = run.split_whitespace().collect();
    assert_eq!(words[1..4], ["run", "admin", "build-box"], "{run}");
    assert!(run.ends_with(&format!("{id} exited on build-box")), "{run}");
    assert!(
        rows.iter().any(|r| r.contains("sign_in_failed")
            && r.contains("unknown")
            && r.ends_with("GET /v1/execution-contexts: token_invalid from 127.0.0.1")),
        "{text}"
    );

    // The server's log: a line per request, with the route's pattern and the caller.
    server.kill();
    daemon.kill();
    let logged = std::fs::read_to_string(&log).expect("the server's log");
    let lines: Vec<&str> = logged.lines().filter(|l| l.contains(" request ")).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("method=POST route=/v1/executions ")
                && l.contains("status=201")
                && l.contains("caller=admin")),
        "{logged}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("route=/v1/execution-contexts ")
                && l.contains("status=401")
                && l.contains("code=token_invalid")),
        "{logged}"
    );
    assert!(
        lines.iter().any(|l| l.contains("caller=machine ")),
        "the daemon's signed calls name it: {logged}"
    );
    assert!(
        !logged.contains(&admin) && !logged.contains(&wrong),
        "no token in {logged}"
    );
    assert!(!logged.contains("ticket="), "no ticket in {logged}");
    let _ = std::fs::remove_dir_all(&dir);
}
