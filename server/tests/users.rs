//! User routes: tokens and scopes, bad bodies answered 4xx with a code (never 500, nothing
//! stored), users, chains, an execution on the server's own executor end to end, and a wait
//! that runs out.

mod common;

use common::{Machine, TestServer, bearer, http, inline, temp_dir};
use serde_json::json;

#[test]
fn tokens_are_checked_with_codes() {
    let dir = temp_dir("tokens");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let path = "/v1/execution-contexts";
    let none = http(addr, "GET", path, &[], b"");
    assert_eq!((none.status, none.code().as_str()), (401, "token_missing"));
    let forged = format!("opt_{}", "A".repeat(43));
    for token in [forged.as_str(), "opt_short", "not-a-token"] {
        let answer = http(addr, "GET", path, &[("authorization", &bearer(token))], b"");
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (401, "token_invalid"),
            "{token}"
        );
    }
    // The join's token may only register.
    let join = bearer(&server.join().token);
    let scoped = http(addr, "GET", path, &[("authorization", &join)], b"");
    assert_eq!(
        (scoped.status, scoped.code().as_str()),
        (403, "scope_missing")
    );
    assert!(
        scoped.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("execution_context:read")
    );
    // A user made by the admin has every scope but admin.
    let admin = bearer(&server.admin());
    let made = http(
        addr,
        "POST",
        "/v1/users",
        &[("authorization", &admin)],
        br#"{"name":"ada"}"#,
    );
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let ada = bearer(made.json()["token"].as_str().expect("token"));
    assert_eq!(
        http(addr, "GET", path, &[("authorization", &ada)], b"").status,
        200
    );
    let not_admin = http(
        addr,
        "POST",
        "/v1/users",
        &[("authorization", &ada)],
        br#"{"name":"bob"}"#,
    );
    assert_eq!(
        (not_admin.status, not_admin.code().as_str()),
        (403, "scope_missing")
    );
    let twice = http(
        addr,
        "POST",
        "/v1/users",
        &[("authorization", &admin)],
        br#"{"name":"ada"}"#,
    );
    assert_eq!((twice.status, twice.code().as_str()), (409, "user_exists"));

    // Each refusal is audited: who (when known), the route's pattern, the code, the address
    // — never the token.
    let chain = http(
        addr,
        "PUT",
        "/v1/chain",
        &[("authorization", &ada)],
        br#"{"chain":["cloud"]}"#,
    );
    assert_eq!(
        chain.status,
        200,
        "{}",
        String::from_utf8_lossy(&chain.body)
    );
    let audit = http(
        addr,
        "GET",
        "/v1/audit?limit=100",
        &[("authorization", &admin)],
        b"",
    )
    .json();
    let events = audit["events"].as_array().expect("events");
    let of = |kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| {
                format!(
                    "{} {}",
                    e["actor"].as_str().unwrap_or(""),
                    e["detail"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    let failed = of("sign_in_failed");
    assert_eq!(failed.len(), 4, "{failed:?}");
    assert!(
        failed.contains(
            &"unknown GET /v1/execution-contexts: token_missing from 127.0.0.1".to_owned()
        ),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .all(|f| !f.contains(&forged) && !f.contains("opt_short")),
        "{failed:?}"
    );
    let refused = of("call_refused");
    assert!(
        refused.contains(&"ada POST /v1/users: scope_missing from 127.0.0.1".to_owned()),
        "{refused:?}"
    );
    assert_eq!(of("chain_updated"), ["ada chain: cloud"]);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_oversized_and_mistyped_bodies_get_4xx_codes_and_store_nothing() {
    let dir = temp_dir("bodies");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = bearer(&server.admin());
    let auth = [
        ("authorization", admin.as_str()),
        ("content-type", "application/json"),
    ];
    let big = vec![b' '; (1 << 20) + 10];
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "POST",
            "/v1/executions",
            b"{not json".to_vec(),
            400,
            "malformed_json",
        ),
        ("POST", "/v1/executions", b"".to_vec(), 400, "invalid_body"),
        (
            "POST",
            "/v1/executions",
            br#"{"capability":1}"#.to_vec(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/executions",
            br#"{"capability":{"kind":"inline","manifest":"x","files":[]},"capability":2}"#
                .to_vec(),
            400,
            "duplicate_key",
        ),
        (
            "POST",
            "/v1/executions",
            br#"{"capability":{"kind":"inline","manifest":"x","files":[]},"waitSecs":1.5}"#
                .to_vec(),
            400,
            "float_not_allowed",
        ),
        (
            "POST",
            "/v1/executions",
            json!({"capability": {"kind":"inline","manifest":"name: x\n","files":[]}})
                .to_string()
                .into_bytes(),
            400,
            "invalid_manifest",
        ),
        (
            "POST",
            "/v1/executions",
            json!({"capability": inline("echo hi"), "context": "nowhere"})
                .to_string()
                .into_bytes(),
            404,
            "context_unknown",
        ),
        (
            "POST",
            "/v1/executions",
            json!({"capability": inline("echo hi"), "whenOffline": "queue", "queueMinutes": 0})
                .to_string()
                .into_bytes(),
            400,
            "queue_minutes_out_of_range",
        ),
        ("POST", "/v1/executions", big.clone(), 413, "body_too_large"),
        (
            "PUT",
            "/v1/chain",
            br#"{"chain":"cloud"}"#.to_vec(),
            400,
            "invalid_body",
        ),
        (
            "PUT",
            "/v1/chain",
            br#"{"chain":["cloud","cloud"]}"#.to_vec(),
            400,
            "invalid_chain",
        ),
        (
            "POST",
            "/v1/users",
            br#"{"name":7}"#.to_vec(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/users",
            br#"{"name":"x","scopes":["root"]}"#.to_vec(),
            400,
            "unknown_scope",
        ),
        ("POST", "/v1/users", big, 413, "body_too_large"),
    ];
    for (method, path, body, status, code) in cases {
        let answer = http(addr, method, path, &auth, &body);
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (status, code),
            "{method} {path} {}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
    }
    let bad_query = http(addr, "GET", "/v1/runs?limit=abc", &auth, b"");
    assert_eq!(
        (bad_query.status, bad_query.code().as_str()),
        (400, "invalid_query")
    );
    let runs = http(addr, "GET", "/v1/runs", &auth, b"").json();
    assert_eq!(runs, json!({"runs": []}), "no refused execution was stored");
    let unknown = http(addr, "GET", "/v1/executions/ex_nope", &auth, b"");
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (404, "execution_unknown")
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_execution_on_the_server_reaches_its_end_and_is_listed_with_ran_on() {
    let dir = temp_dir("cloud");
    // No executor is installed for shell on the server: the run is refused there, with a
    // code, never run elsewhere.
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let chain = http(addr, "PUT", "/v1/chain", &auth, br#"{"chain":["cloud"]}"#);
    assert_eq!(
        (chain.status, chain.json()),
        (
            200,
            json!({"chain": ["cloud"], "entries": [{"id": "cloud", "name": "cloud"}]})
        )
    );
    let body = json!({"capability": inline("echo hi"), "wait": true, "waitSecs": 30}).to_string();
    let answer = http(addr, "POST", "/v1/executions", &auth, body.as_bytes());
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let execution = answer.json();
    assert_eq!(execution["status"], "failed", "{execution}");
    assert_eq!(execution["error"]["code"], "not_permitted", "{execution}");
    assert_eq!(execution["ranOn"]["kind"], "cloud", "{execution}");
    assert!(execution["finishedAt"].is_u64());
    let id = execution["executionId"].as_str().expect("id").to_owned();
    let shown = http(
        addr,
        "GET",
        &format!("/v1/executions/{id}?waitSecs=1"),
        &auth,
        b"",
    )
    .json();
    assert_eq!(shown["status"], "failed");
    let runs = http(addr, "GET", "/v1/runs?limit=5", &auth, b"").json();
    assert_eq!(runs["runs"][0]["executionId"], id.as_str());
    let metrics =
        String::from_utf8_lossy(&http(addr, "GET", "/metrics", &[], b"").body).into_owned();
    assert!(
        metrics.contains("outpost_runs_total{status=\"failed\"} 1"),
        "{metrics}"
    );
    let audit = http(addr, "GET", "/v1/audit", &auth, b"").json();
    assert!(audit["events"].as_array().is_some_and(|e| !e.is_empty()));
    // The chain survives a restart.
    let server = server.restart();
    let chain = http(
        server.addr(),
        "GET",
        "/v1/chain",
        &[("authorization", admin.as_str())],
        b"",
    )
    .json();
    assert_eq!(chain["chain"], json!(["cloud"]), "{chain}");
    let again = http(
        server.addr(),
        "GET",
        &format!("/v1/executions/{id}"),
        &[("authorization", admin.as_str())],
        b"",
    )
    .json();
    assert_eq!(again["status"], "failed");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wait_that_runs_out_answers_with_the_execution_as_it_stands() {
    let dir = temp_dir("wait-runs-out");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    // A machine that registered and never connected: its executions wait in the queue.
    assert_eq!(Machine::new(31).register(&server, "away").status, 201);
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let body = json!({
        "capability": inline("echo hi"), "context": "away", "whenOffline": "queue",
        "wait": true, "waitSecs": 1,
    })
    .to_string();
    let asked = std::time::Instant::now();
    let answer = http(addr, "POST", "/v1/executions", &auth, body.as_bytes());
    assert!(
        asked.elapsed() >= std::time::Duration::from_secs(1),
        "it waited"
    );
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let execution = answer.json();
    assert_eq!(execution["status"], "pending", "{execution}");
    assert!(execution["finishedAt"].is_null(), "{execution}");
    let id = execution["executionId"].as_str().expect("id").to_owned();
    let shown = http(
        addr,
        "GET",
        &format!("/v1/executions/{id}?waitSecs=1"),
        &auth,
        b"",
    );
    assert_eq!(shown.status, 200);
    assert_eq!(shown.json()["status"], "pending", "{}", shown.json());
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
