//! The answers a real server gives, held to the OpenAPI document it serves: a session that
//! calls every route (registering twice, uploading a bundle twice, registering a wait twice,
//! …) checks that each answer's status is documented for its route and that its body
//! validates against the documented schema, made strict for the check (a member the schema
//! does not name fails, so an answer cannot carry more than its schema says). Error answers
//! are held to the error schema the same way.

mod common;

use std::collections::BTreeSet;

use common::{
    Answer, Machine, TestServer, bearer, http, inline, parse_answer, request_bytes, temp_dir,
};
use serde_json::{Value, json};

/// Every object schema of `value` with its members named closes to members it does not name.
fn strict(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), json!(false));
            }
            map.values_mut().for_each(strict);
        }
        Value::Array(items) => items.iter_mut().for_each(strict),
        _ => {}
    }
}

/// The served document and what the session exercised.
struct Conformance {
    doc: Value,
    components: Value,
    /// (method, template, status) of every answer checked.
    seen: BTreeSet<(String, String, u16)>,
    failures: Vec<String>,
}

impl Conformance {
    fn new(doc: Value) -> Self {
        let mut components = doc["components"].clone();
        strict(&mut components);
        Self {
            doc,
            components,
            seen: BTreeSet::new(),
            failures: Vec::new(),
        }
    }

    /// Checks `answer` to `method template`.
    fn check(&mut self, method: &str, template: &str, answer: &Answer) -> Value {
        let label = format!("{method} {template} answered {}", answer.status);
        let op = &self.doc["paths"][template][method.to_ascii_lowercase()];
        assert!(op.is_object(), "{method} {template} is not documented");
        let documented = &op["responses"][answer.status.to_string()];
        self.seen
            .insert((method.to_owned(), template.to_owned(), answer.status));
        if !documented.is_object() {
            self.failures
                .push(format!("{label}, a status not documented"));
            return Value::Null;
        }
        let Some(schema) = documented["content"]["application/json"]["schema"].as_object() else {
            return Value::Null;
        };
        let body: Value = match serde_json::from_slice(&answer.body) {
            Ok(body) => body,
            Err(e) => {
                self.failures
                    .push(format!("{label} with a body that is not JSON: {e}"));
                return Value::Null;
            }
        };
        let mut root = Value::Object(schema.clone());
        root["components"] = self.components.clone();
        let validator = jsonschema::draft202012::new(&root).expect("the schema compiles");
        for error in validator.iter_errors(&body) {
            self.failures.push(format!(
                "{label}: {error} at {} in {body}",
                error.instance_path()
            ));
        }
        body
    }

    /// The operations with a JSON success answer that the session never saw succeed.
    fn unexercised(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (template, methods) in self.doc["paths"].as_object().expect("paths") {
            for (method, op) in methods.as_object().expect("methods") {
                let method = method.to_ascii_uppercase();
                for (status, answer) in op["responses"].as_object().expect("responses") {
                    let status: u16 = status.parse().expect("a status");
                    let json = answer["content"]["application/json"].is_object();
                    let key = (method.clone(), template.clone(), status);
                    if status < 300 && json && !self.seen.contains(&key) {
                        out.push(format!("{method} {template} {status}"));
                    }
                }
            }
        }
        out
    }
}

#[test]
fn every_answer_of_a_session_fits_the_served_document() {
    let dir = temp_dir("openapi");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let doc = http(addr, "GET", "/v1/openapi.json", &[], b"").json();
    let mut c = Conformance::new(doc);
    let call = |c: &mut Conformance, method: &str, template: &str, path: &str, body: Value| {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let answer = http(addr, method, path, &auth, &bytes);
        let json = c.check(method, template, &answer);
        (answer.status, json)
    };

    for path in [
        "/healthz",
        "/v1/openapi.json",
        "/v1/execution-contexts/server-keys",
    ] {
        let answer = http(addr, "GET", path, &[], b"");
        c.check("GET", path, &answer);
    }

    // A machine registers, twice (201, then 200), asks for a ticket and turns commands on.
    let machine = Machine::new(61);
    for expected in [201, 200] {
        let answer = machine.register(&server, "box");
        assert_eq!(answer.status, expected, "{:?}", answer.body);
        c.check("POST", "/v1/execution-contexts", &answer);
    }
    let signed = |c: &mut Conformance, method: &str, template: &str, path: &str, body: &[u8]| {
        let answer = machine.send_with(addr, method, path, body, &machine.nonce(), &[]);
        c.check(method, template, &answer);
        answer
    };
    let ticket = signed(
        &mut c,
        "POST",
        "/v1/execution-contexts/connect-ticket",
        "/v1/execution-contexts/connect-ticket",
        b"",
    );
    assert_eq!(ticket.status, 200);
    let switch = signed(
        &mut c,
        "POST",
        "/v1/execution-contexts/commands",
        "/v1/execution-contexts/commands",
        br#"{"enabled":true}"#,
    );
    assert_eq!(switch.status, 200);
    // Without a live run the hops refuse: the error answers are held to the error schema.
    for (template, body) in [
        (
            "/v1/execution-contexts/commands/authorize",
            &br#"{"runId":"run_none","command":"true","background":false}"#[..],
        ),
        (
            "/v1/execution-contexts/commands/jobs/authorize",
            br#"{"runId":"run_none","op":"poll","jobId":1}"#,
        ),
    ] {
        let refused = signed(&mut c, "POST", template, template, body);
        assert_eq!(refused.status, 409);
    }
    let release = signed(
        &mut c,
        "GET",
        "/v1/execution-contexts/daemon-release",
        "/v1/execution-contexts/daemon-release",
        b"",
    );
    assert_eq!(release.status, 404, "no release is published");

    // Contexts, grants, sharing, users.
    let contexts = "/v1/execution-contexts";
    let one = "/v1/execution-contexts/{context}";
    assert_eq!(call(&mut c, "GET", contexts, contexts, Value::Null).0, 200);
    assert_eq!(
        call(
            &mut c,
            "GET",
            one,
            "/v1/execution-contexts/box",
            Value::Null
        )
        .0,
        200
    );
    let grant = json!({"fs": [{"path": "/srv", "mode": "ro"}], "egress": {"mode": "allowlist",
        "hosts": ["example.com:443"]}, "commands": {"enabled": true}, "limits": {"maxConcurrent": 2}});
    let template = "/v1/execution-contexts/{context}/grant";
    let path = "/v1/execution-contexts/box/grant";
    assert_eq!(call(&mut c, "PATCH", template, path, grant).0, 200);
    let (status, nodes) = call(&mut c, "GET", "/v1/nodes", "/v1/nodes", Value::Null);
    assert_eq!(status, 200);
    assert_eq!(nodes["nodes"][0]["this"], true, "{nodes}");
    // No daemon is connected: the request is answered 409 `daemon_offline`, as documented.
    let template = "/v1/execution-contexts/{context}/daemon";
    let path = "/v1/execution-contexts/box/daemon";
    let (status, body) = call(&mut c, "POST", template, path, json!({"action": "pause"}));
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("daemon_offline"))
    );
    let template = "/v1/execution-contexts/{context}/share";
    let path = "/v1/execution-contexts/box/share";
    assert_eq!(
        call(&mut c, "POST", template, path, json!({"allMembers": true})).0,
        200
    );
    let (status, user) = call(
        &mut c,
        "POST",
        "/v1/users",
        "/v1/users",
        json!({"name": "ana"}),
    );
    assert_eq!(status, 201);
    let ana = bearer(user["token"].as_str().expect("a token"));
    for method in ["POST", "DELETE"] {
        let answer = http(
            addr,
            method,
            "/v1/execution-contexts/box/opt-in",
            &[("authorization", &ana)],
            b"",
        );
        assert_eq!(answer.status, 200, "{method} opt-in");
        c.check(method, "/v1/execution-contexts/{context}/opt-in", &answer);
    }

    // Chains, executions, runs.
    let chain = json!({"chain": ["box", "cloud"]});
    assert_eq!(call(&mut c, "PUT", "/v1/chain", "/v1/chain", chain).0, 200);
    assert_eq!(
        call(&mut c, "GET", "/v1/chain", "/v1/chain", Value::Null).0,
        200
    );
    let run =
        json!({"capability": inline("echo hi"), "context": "cloud", "wait": true, "waitSecs": 30});
    let (status, execution) = call(&mut c, "POST", "/v1/executions", "/v1/executions", run);
    assert_eq!(status, 201);
    let id = execution["executionId"].as_str().expect("an id").to_owned();
    let path = format!("/v1/executions/{id}?waitSecs=1");
    assert_eq!(
        call(&mut c, "GET", "/v1/executions/{id}", &path, Value::Null).0,
        200
    );
    // The change stream: its `ready` event, after which it stays open (read it, hang up).
    {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .write_all(&request_bytes(addr, "GET", "/v1/events", &auth, b""))
            .expect("a request");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("a timeout");
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&raw).contains("event: ready\ndata: {}\n\n\r\n") {
            let n = stream.read(&mut buf).expect("the ready event");
            assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&raw));
            raw.extend_from_slice(&buf[..n]);
        }
        let answer = parse_answer(&raw);
        assert_eq!(answer.status, 200);
        c.check("GET", "/v1/events", &answer);
    }
    let path = format!("/v1/executions/{id}/cancel");
    let template = "/v1/executions/{id}/cancel";
    assert_eq!(call(&mut c, "POST", template, &path, Value::Null).0, 200);
    assert_eq!(
        call(&mut c, "GET", "/v1/runs", "/v1/runs?limit=5", Value::Null).0,
        200
    );

    // A bundle, uploaded twice (201, then 200), then fetched by the machine.
    let bundle = br#"{"type":"outpost.bundle","version":1,"manifest":"name: b\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n","files":[{"path":"run.sh","contentB64":"ZWNobyBoaQo"}]}"#;
    let sha = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(bundle))
    };
    for expected in [201, 200] {
        let answer = http(addr, "PUT", &format!("/v1/bundles/{sha}"), &auth, bundle);
        assert_eq!(answer.status, expected);
        c.check("PUT", "/v1/bundles/{sha256}", &answer);
    }
    let fetched = signed(
        &mut c,
        "GET",
        "/v1/execution-contexts/bundles/{sha256}",
        &format!("/v1/execution-contexts/bundles/{sha}"),
        b"",
    );
    assert_eq!(fetched.body, bundle);

    // A wait, registered twice (201, then 200 deduplicated), listed, shown, cancelled.
    let wait = json!({"context": "box", "condition": "async () => false", "reason": "r"});
    let (status, first) = call(&mut c, "POST", "/v1/waits", "/v1/waits", wait.clone());
    assert_eq!((status, &first["deduplicated"]), (201, &json!(false)));
    let (status, again) = call(&mut c, "POST", "/v1/waits", "/v1/waits", wait);
    assert_eq!((status, &again["deduplicated"]), (200, &json!(true)));
    let wait_id = first["waitId"].as_str().expect("an id").to_owned();
    assert_eq!(
        call(
            &mut c,
            "GET",
            "/v1/waits",
            "/v1/waits?limit=10",
            Value::Null
        )
        .0,
        200
    );
    let path = format!("/v1/waits/{wait_id}");
    assert_eq!(
        call(&mut c, "GET", "/v1/waits/{id}", &path, Value::Null).0,
        200
    );
    let path = format!("/v1/waits/{wait_id}/cancel");
    assert_eq!(
        call(&mut c, "POST", "/v1/waits/{id}/cancel", &path, Value::Null).0,
        200
    );

    // Terminals: none open; the machine is offline, so opening one is refused.
    assert_eq!(
        call(&mut c, "GET", "/v1/terminals", "/v1/terminals", Value::Null).0,
        200
    );
    let template = "/v1/execution-contexts/{context}/terminals";
    let path = "/v1/execution-contexts/box/terminals";
    assert_eq!(call(&mut c, "POST", template, path, json!({})).0, 409);
    let template = "/v1/terminals/{terminal}/tickets";
    let path = "/v1/terminals/ex_none/tickets";
    assert_eq!(call(&mut c, "POST", template, path, Value::Null).0, 404);
    // Who the token is.
    assert_eq!(call(&mut c, "GET", "/v1/me", "/v1/me", Value::Null).0, 200);

    // Recordings: none yet (a terminal needs a machine); a recording that is not there.
    assert_eq!(
        call(
            &mut c,
            "GET",
            "/v1/recordings",
            "/v1/recordings",
            Value::Null
        )
        .0,
        200
    );
    let template = "/v1/terminals/{terminal}/recording";
    let path = "/v1/terminals/ex_none/recording";
    assert_eq!(call(&mut c, "GET", template, path, Value::Null).0, 404);

    // The audit log; then revoke, delete and remove.
    assert_eq!(
        call(
            &mut c,
            "GET",
            "/v1/audit",
            "/v1/audit?limit=50",
            Value::Null
        )
        .0,
        200
    );
    let template = "/v1/execution-contexts/{context}/revoke";
    let path = "/v1/execution-contexts/box/revoke";
    assert_eq!(call(&mut c, "POST", template, path, Value::Null).0, 200);
    assert_eq!(
        call(
            &mut c,
            "DELETE",
            one,
            "/v1/execution-contexts/box",
            Value::Null
        )
        .0,
        204
    );
    assert_eq!(
        call(
            &mut c,
            "DELETE",
            "/v1/users/{name}",
            "/v1/users/ana",
            Value::Null
        )
        .0,
        204
    );

    let (status, token) = call(
        &mut c,
        "POST",
        "/v1/join-tokens",
        "/v1/join-tokens",
        json!({"ttlSecs": 600, "uses": 2, "namePrefix": "ci-"}),
    );
    assert_eq!(status, 201, "{token}");
    assert_eq!(
        call(
            &mut c,
            "GET",
            "/v1/join-tokens",
            "/v1/join-tokens",
            Value::Null
        )
        .0,
        200
    );
    let path = format!("/v1/join-tokens/{}", token["id"].as_str().expect("an id"));
    assert_eq!(
        call(&mut c, "DELETE", "/v1/join-tokens/{id}", &path, Value::Null).0,
        200
    );

    // What a session without a daemon cannot reach: the answers of a live run's hops, of an
    // open terminal's tickets, of a published release and of a daemon asked from afar (the
    // CLI's tests, `daemon_control.rs`, get that one from a real daemon).
    let unreachable = [
        "POST /v1/execution-contexts/commands/authorize 200",
        "POST /v1/execution-contexts/commands/jobs/authorize 200",
        "POST /v1/execution-contexts/{context}/terminals 201",
        "POST /v1/terminals/{terminal}/tickets 201",
        "GET /v1/terminals/{terminal}/recording 200",
        "GET /v1/execution-contexts/daemon-release 200",
        "POST /v1/execution-contexts/{context}/daemon 200",
    ];
    let missed: Vec<String> = c
        .unexercised()
        .into_iter()
        .filter(|m| !unreachable.contains(&m.as_str()))
        .collect();
    assert!(missed.is_empty(), "never answered with success: {missed:?}");
    assert!(
        c.failures.is_empty(),
        "{} answers do not fit the document:\n{}",
        c.failures.len(),
        c.failures.join("\n")
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
