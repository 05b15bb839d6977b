//! Sharing over the real API: an operator shares a machine with every member, members opt
//! in and out, the refusals carry their access codes, a removed operator's machine fails
//! closed for everyone, and all of it survives a restart. The machine registers with a
//! signed request and never connects: access is decided before being online is.

mod common;

use common::{Answer, Machine, TestServer, bearer, http, inline, temp_dir};
use serde_json::{Value, json};

struct Users {
    admin: String,
    ana: String,
    bo: String,
    cy: String,
}

fn call(server: &TestServer, token: &str, method: &str, path: &str, body: Value) -> Answer {
    let auth = bearer(token);
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    http(
        server.addr(),
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        &bytes,
    )
}

fn user(server: &TestServer, name: &str) -> String {
    let made = call(
        server,
        &server.admin(),
        "POST",
        "/v1/users",
        json!({ "name": name }),
    );
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    made.json()["token"].as_str().expect("a token").to_owned()
}

/// Ana registers `box` with a token of her own: she is its operator.
fn setup(server: &TestServer) -> Users {
    let users = Users {
        admin: server.admin(),
        ana: user(server, "ana"),
        bo: user(server, "bo"),
        cy: user(server, "cy"),
    };
    let machine = Machine::new(21);
    let auth = bearer(&users.ana);
    let registered = machine.send_with(
        server.addr(),
        "POST",
        "/v1/execution-contexts",
        &machine.register_body("box"),
        &machine.nonce(),
        &[("authorization", &auth)],
    );
    assert_eq!(
        registered.status,
        201,
        "{}",
        String::from_utf8_lossy(&registered.body)
    );
    assert_eq!(registered.json()["operator"], "ana");
    users
}

/// The error code an execution on `box` by `token` ends with (`None` when it did not fail).
fn refusal(server: &TestServer, token: &str, extra: Value) -> Option<String> {
    let mut body =
        json!({"capability": inline("echo hi\n"), "context": "box", "wait": true, "waitSecs": 10});
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    let answer = call(server, token, "POST", "/v1/executions", body);
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let e = answer.json();
    e["error"]["code"].as_str().map(str::to_owned)
}

fn context(server: &TestServer, token: &str) -> Answer {
    call(
        server,
        token,
        "GET",
        "/v1/execution-contexts/box",
        Value::Null,
    )
}

fn listed(server: &TestServer, token: &str) -> Vec<String> {
    let list = call(server, token, "GET", "/v1/execution-contexts", Value::Null).json();
    list["contexts"]
        .as_array()
        .expect("contexts")
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn an_operator_shares_members_opt_in_and_the_refusals_name_their_code() {
    let dir = temp_dir("sharing");
    let server = TestServer::start(&dir);
    let u = setup(&server);

    // Not shared: bo cannot see it, opt in, share it, or run on it.
    assert!(listed(&server, &u.bo).is_empty());
    assert_eq!(context(&server, &u.bo).code(), "not_yours");
    let opt = call(
        &server,
        &u.bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    assert_eq!((opt.status, opt.code().as_str()), (403, "not_shared"));
    assert!(
        opt.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("--all-members on")
    );
    let share = call(
        &server,
        &u.bo,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": true}),
    );
    assert_eq!((share.status, share.code().as_str()), (403, "not_yours"));
    // Not told to opt in to what is not shared with them.
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("not_shared")
    );

    // Bad share bodies are refused with a code.
    for bad in [
        json!({}),
        json!({"allMembers": "yes"}),
        json!({"allMembers": true, "x": 1}),
    ] {
        let answer = call(
            &server,
            &u.ana,
            "POST",
            "/v1/execution-contexts/box/share",
            bad.clone(),
        );
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (400, "invalid_body"),
            "{bad}"
        );
    }

    let shared = call(
        &server,
        &u.ana,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": true}),
    );
    assert_eq!(
        shared.status,
        200,
        "{}",
        String::from_utf8_lossy(&shared.body)
    );
    assert_eq!(shared.json()["sharedWithAllMembers"], true);
    assert_eq!(shared.json()["optedIn"], json!([]));
    assert_eq!(listed(&server, &u.bo), ["box"]);
    assert_eq!(context(&server, &u.bo).status, 200);
    // Shared is not opted in.
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("not_opted_in")
    );
    let own = call(
        &server,
        &u.ana,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    assert_eq!((own.status, own.code().as_str()), (409, "own_context"));

    let opted = call(
        &server,
        &u.bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    assert_eq!(
        opted.status,
        200,
        "{}",
        String::from_utf8_lossy(&opted.body)
    );
    assert_eq!(opted.json()["optedIn"], json!(["bo"]));
    let cy_opted = call(
        &server,
        &u.cy,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    assert_eq!(
        cy_opted.json()["optedIn"],
        json!(["cy"]),
        "a member sees only their own opt-in"
    );
    assert_eq!(
        context(&server, &u.ana).json()["optedIn"],
        json!(["bo", "cy"])
    );
    assert_eq!(
        context(&server, &u.admin).json()["optedIn"],
        json!(["bo", "cy"])
    );

    // Opted in, bo's run gets past access (the machine is offline) but never takes folders
    // or commands.
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("execution_context_offline")
    );
    assert_eq!(
        refusal(&server, &u.bo, json!({"requires": ["fs"]})).as_deref(),
        Some("fs_operator_only")
    );
    assert_eq!(
        refusal(&server, &u.bo, json!({"wantsCommands": true})).as_deref(),
        Some("commands_operator_only")
    );
    // The operator's own run that wants commands learns they are off.
    assert_eq!(
        refusal(&server, &u.ana, json!({"wantsCommands": true})).as_deref(),
        Some("commands_off")
    );

    // Survives a restart.
    let server = server.restart();
    let shown = context(&server, &u.ana).json();
    assert_eq!(shown["sharedWithAllMembers"], true, "{shown}");
    assert_eq!(shown["optedIn"], json!(["bo", "cy"]));
    assert_eq!(
        refusal(&server, &u.bo, json!({"requires": ["fs"]})).as_deref(),
        Some("fs_operator_only")
    );

    // Cy opts out (twice: idempotent); unsharing drops bo's opt-in too.
    for _ in 0..2 {
        let out = call(
            &server,
            &u.cy,
            "DELETE",
            "/v1/execution-contexts/box/opt-in",
            Value::Null,
        );
        assert_eq!(out.status, 200, "{}", String::from_utf8_lossy(&out.body));
        assert_eq!(out.json()["optedIn"], json!([]));
    }
    let off = call(
        &server,
        &u.ana,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": false}),
    );
    assert_eq!(off.json()["sharedWithAllMembers"], false);
    assert_eq!(off.json()["optedIn"], json!([]));
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("not_shared")
    );
    assert!(listed(&server, &u.bo).is_empty());
    // Sharing again asks for a fresh opt-in.
    call(
        &server,
        &u.admin,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": true}),
    );
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("not_opted_in")
    );

    let audit = call(&server, &u.admin, "GET", "/v1/audit", Value::Null).json();
    let kinds: Vec<&str> = audit["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    for kind in [
        "context_shared",
        "context_unshared",
        "opted_in",
        "opted_out",
        // bo's 403s (`not_yours`, `not_shared`) are refused calls.
        "call_refused",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == "opted_out").count(),
        1,
        "{kinds:?}"
    );
    let events = audit["events"].as_array().expect("events");
    // Each run's end names its requester, never the dispatcher.
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "run" && e["actor"] == "bo"),
        "{audit}"
    );
    assert!(
        !events.iter().any(|e| e["actor"] == "dispatcher"),
        "{audit}"
    );
    let refused = events
        .iter()
        .find(|e| e["kind"] == "call_refused" && e["actor"] == "bo")
        .expect("bo's refused call");
    let detail = refused["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("POST /v1/execution-contexts/{context}/")
            && detail.contains(" from 127.0.0.1"),
        "{refused}"
    );
    // Events about a context carry its name beside its id.
    let opted = events
        .iter()
        .find(|e| e["kind"] == "opted_in")
        .expect("opted_in");
    assert_eq!(opted["contextName"], "box", "{opted}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_removed_operator_s_machine_takes_nobody_s_runs() {
    let dir = temp_dir("removed");
    let server = TestServer::start(&dir);
    let u = setup(&server);
    call(
        &server,
        &u.ana,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": true}),
    );
    call(
        &server,
        &u.bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("execution_context_offline")
    );

    let me = call(&server, &u.admin, "DELETE", "/v1/users/admin", Value::Null);
    assert_eq!((me.status, me.code().as_str()), (409, "cannot_remove_self"));
    let nobody = call(&server, &u.admin, "DELETE", "/v1/users/nobody", Value::Null);
    assert_eq!(
        (nobody.status, nobody.code().as_str()),
        (404, "user_unknown")
    );
    let not_admin = call(&server, &u.bo, "DELETE", "/v1/users/ana", Value::Null);
    assert_eq!(
        (not_admin.status, not_admin.code().as_str()),
        (403, "scope_missing")
    );

    for _ in 0..2 {
        let removed = call(&server, &u.admin, "DELETE", "/v1/users/ana", Value::Null);
        assert_eq!(
            removed.status,
            204,
            "{}",
            String::from_utf8_lossy(&removed.body)
        );
    }
    // Ana's tokens stop working; her machine fails closed for everyone else.
    assert_eq!(context(&server, &u.ana).code(), "token_invalid");
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("operator_left")
    );
    assert_eq!(
        refusal(&server, &u.admin, json!({})).as_deref(),
        Some("operator_left")
    );
    assert_eq!(
        refusal(&server, &u.cy, json!({})).as_deref(),
        Some("operator_left")
    );
    assert_eq!(context(&server, &u.admin).json()["operatorIsMember"], false);
    let again = call(
        &server,
        &u.admin,
        "POST",
        "/v1/users",
        json!({"name": "ana"}),
    );
    assert_eq!((again.status, again.code().as_str()), (409, "user_exists"));

    // Removing an opted-in member drops their opt-in.
    let server = server.restart();
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("operator_left")
    );
    let removed = call(&server, &u.admin, "DELETE", "/v1/users/bo", Value::Null);
    assert_eq!(removed.status, 204);
    assert_eq!(context(&server, &u.admin).json()["optedIn"], json!([]));
    let audit = call(&server, &u.admin, "GET", "/v1/audit", Value::Null).json();
    let removals = audit["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "user_removed")
        .count();
    assert_eq!(removals, 2, "{audit}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_removal_a_crash_cut_short_is_finished_at_start() {
    let dir = temp_dir("removal-crash");
    let server = TestServer::start(&dir);
    let u = setup(&server);
    call(
        &server,
        &u.ana,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": true}),
    );
    call(
        &server,
        &u.bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    server.stop();
    // The users table says ana was removed; the dispatcher's records never heard of it.
    common::TestDb::open(&dir).execute("UPDATE users SET removed_at = 1 WHERE name = 'ana'");
    let server = TestServer::start(&dir);
    assert_eq!(
        refusal(&server, &u.bo, json!({})).as_deref(),
        Some("operator_left")
    );
    assert_eq!(context(&server, &u.admin).json()["operatorIsMember"], false);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
