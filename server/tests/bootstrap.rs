//! First start and restart: the state folder's files and modes, the join, tokens that
//! survive a restart, and the operations routes.

mod common;

use std::os::unix::fs::PermissionsExt as _;

use common::{TestServer, bearer, http, temp_dir};
use outpost_core::join::Join;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn first_start_creates_the_state_folder_with_private_modes_and_a_join_that_parses() {
    let dir = temp_dir("first");
    let server = TestServer::start(&dir);
    assert_eq!(mode(&dir), 0o700);
    for file in ["keys.json", "admin.token", "join"] {
        assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
    }
    assert_eq!(
        dir.join("outpost.db").exists(),
        !common::on_postgres(),
        "the records are in the SQLite file, unless the server keeps them in PostgreSQL"
    );
    let join_text = std::fs::read_to_string(dir.join("join")).expect("join");
    let join = Join::parse(&join_text).expect("the join file parses");
    assert_eq!(join.url, server.running().url);
    assert_eq!(join_text.trim(), server.running().join);
    let admin = std::fs::read_to_string(dir.join("admin.token")).expect("admin.token");
    assert_eq!(admin.trim(), server.admin());
    assert!(server.admin().starts_with("opt_") && server.admin().len() == 47);
    // The key set verifies under the join's root, and names the root the join pins.
    let keys = server.keys();
    assert_eq!(keys.root(), join.root.id);
    assert!(!keys.keys().is_empty());
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restart_keeps_the_root_and_the_tokens() {
    let dir = temp_dir("restart");
    let server = TestServer::start(&dir);
    let (admin, join) = (server.admin(), server.join());
    let keys_before = std::fs::read(dir.join("keys.json")).expect("keys");
    let server = server.restart();
    assert_eq!(server.admin(), admin);
    let again = server.join();
    assert_eq!(again.root, join.root);
    assert_eq!(again.token, join.token);
    assert_eq!(
        std::fs::read(dir.join("keys.json")).expect("keys"),
        keys_before
    );
    // The admin token still works after the restart.
    let answer = http(
        server.addr(),
        "GET",
        "/v1/execution-contexts",
        &[("authorization", &bearer(&admin))],
        b"",
    );
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn operations_routes_answer_and_openapi_lists_every_route_with_its_schemas() {
    let dir = temp_dir("ops");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let health = http(addr, "GET", "/healthz", &[], b"");
    assert_eq!(
        (health.status, health.json()),
        (200, serde_json::json!({"ok": true}))
    );
    let metrics = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    for name in [
        "outpost_connected_daemons 0",
        "outpost_dispatch_latency_seconds_count 0",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }
    let doc = http(addr, "GET", "/v1/openapi.json", &[], b"").json();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    let expected = [
        ("post", "/v1/execution-contexts"),
        ("post", "/v1/execution-contexts/connect-ticket"),
        ("get", "/v1/execution-contexts/connect"),
        ("get", "/v1/execution-contexts/server-keys"),
        ("post", "/v1/executions"),
        ("get", "/v1/executions/{id}"),
        ("post", "/v1/executions/{id}/cancel"),
        ("get", "/v1/runs"),
        ("get", "/v1/execution-contexts"),
        ("get", "/v1/execution-contexts/{context}"),
        ("post", "/v1/execution-contexts/{context}/daemon"),
        ("patch", "/v1/execution-contexts/{context}/grant"),
        ("post", "/v1/execution-contexts/{context}/revoke"),
        ("delete", "/v1/execution-contexts/{context}"),
        ("get", "/v1/chain"),
        ("put", "/v1/chain"),
        ("post", "/v1/users"),
        ("get", "/v1/audit"),
        ("get", "/healthz"),
        ("get", "/metrics"),
        ("get", "/v1/openapi.json"),
        ("put", "/v1/bundles/{sha256}"),
        ("get", "/v1/execution-contexts/bundles/{sha256}"),
        ("post", "/v1/execution-contexts/{context}/share"),
        ("post", "/v1/execution-contexts/{context}/opt-in"),
        ("delete", "/v1/execution-contexts/{context}/opt-in"),
        ("delete", "/v1/users/{name}"),
        ("post", "/v1/execution-contexts/commands"),
        ("post", "/v1/execution-contexts/commands/authorize"),
        ("post", "/v1/execution-contexts/commands/jobs/authorize"),
        ("get", "/v1/execution-contexts/daemon-release"),
        ("get", "/v1/execution-contexts/daemon-release/{sha512}"),
        ("post", "/v1/execution-contexts/{context}/terminals"),
        ("get", "/v1/terminals"),
        ("post", "/v1/terminals/{terminal}/tickets"),
        ("get", "/v1/terminals/{terminal}/connect"),
        ("get", "/v1/recordings"),
        ("get", "/v1/me"),
        ("get", "/v1/terminals/{terminal}/recording"),
        ("post", "/v1/waits"),
        ("get", "/v1/waits"),
        ("get", "/v1/waits/{id}"),
        ("post", "/v1/waits/{id}/cancel"),
        ("get", "/v1/executions/{id}/output"),
        ("get", "/v1/events"),
        ("get", "/v1/nodes"),
        ("post", "/v1/join-tokens"),
        ("get", "/v1/join-tokens"),
        ("delete", "/v1/join-tokens/{id}"),
    ];
    let count: usize = paths
        .values()
        .map(|m| m.as_object().map_or(0, |m| m.len()))
        .sum();
    assert_eq!(
        count,
        expected.len(),
        "routes documented: {:?}",
        paths.keys()
    );
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for (method, path) in expected {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        // Every schema a route names exists.
        let text = op.to_string();
        for piece in text.split("#/components/schemas/").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(
                schemas.contains_key(&name),
                "{method} {path} names missing schema {name}"
            );
        }
    }
    let execute = &doc["paths"]["/v1/executions"]["post"];
    let codes = execute["responses"]["400"]["x-error-codes"].to_string();
    assert!(
        codes.contains("invalid_manifest") && codes.contains("invalid_body"),
        "{codes}"
    );
    // Every error answer is JSON with a code, unknown routes too.
    let missing = http(addr, "GET", "/v1/nothing-here", &[], b"");
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "not_found")
    );
    let wrong = http(addr, "DELETE", "/healthz", &[], b"");
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (405, "method_not_allowed")
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
