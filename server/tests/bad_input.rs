//! Bad input on every route of the OpenAPI document the server serves (so a new route is
//! covered without touching this file): malformed, mistyped, incomplete, oversized and
//! mislabelled bodies, bad percent-encoding in path and query, wrong methods, and missing,
//! wrong and out-of-scope credentials. Each answer must be a 4xx (never a 5xx) carrying
//! `{"error":{"code","message"}}`, and the store must be as it was before.
//!
//! Also: registrations of one key racing each other answer 201 once and 200 otherwise.

mod common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};

use common::{Answer, Machine, TestServer, bearer, http_from, inline, raw_from, temp_dir};
use serde_json::{Value, json};

/// Every scope a token may hold (PROTOCOL §11.2).
const SCOPES: [&str; 6] = [
    "execution_context:create",
    "execution_context:read",
    "execution_context:execute",
    "execution_context:delete",
    "execution_context:command",
    "admin",
];

/// The server's body limit (PROTOCOL §11).
const MAX_BODY: usize = 1 << 20;

/// A loopback source address of its own for each request, so the per-address rate limit
/// of the machine routes never stands in for the answer under test.
fn source() -> Ipv4Addr {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    Ipv4Addr::new(
        127,
        10 + (n / 62_500) as u8,
        ((n / 250) % 250) as u8,
        (n % 250 + 1) as u8,
    )
}

fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    if method == "GET" && path.starts_with("/v1/events") {
        return stream_head(addr, path, headers, body);
    }
    http_from(source(), addr, method, path, headers, body)
}

/// A request to the change stream, which stays open when it is granted: its answer up to its
/// first event (or, refused, all of it), then the connection is dropped.
fn stream_head(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    use std::io::{Read as _, Write as _};
    let mut stream = common::connect_from(source(), addr);
    let _ = stream.write_all(&common::request_bytes(addr, "GET", path, headers, body));
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("a timeout");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&raw).into_owned();
        let streaming = text.starts_with("HTTP/1.1 200");
        if streaming && text.contains("\n\n\r\n") {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    common::parse_answer(&raw)
}

/// What the store holds, table by table, except the spent nonces (a refused signed request
/// may spend its nonce: that is what makes it single-use).
fn fingerprint(state: &Path) -> BTreeMap<&'static str, String> {
    let db = common::TestDb::open(state);
    let queries = [
        (
            "users",
            "SELECT count(*) || ':' || coalesce(string_agg(name, ',' ORDER BY name), '') FROM users",
        ),
        (
            "tokens",
            "SELECT count(*) || ':' || coalesce(sum(revoked), 0) FROM tokens",
        ),
        (
            "contexts",
            "SELECT count(*) || ':' || coalesce(string_agg(id || '/' || name || '/' || grant_version || '/' || revoked, ',' ORDER BY id || '/' || name || '/' || grant_version || '/' || revoked), '') FROM contexts",
        ),
        (
            "machine_keys",
            "SELECT count(*) || ':' || coalesce(sum(revoked), 0) FROM machine_keys",
        ),
        (
            "executions",
            "SELECT count(*) || ':' || coalesce(string_agg(id || '/' || status, ',' ORDER BY id || '/' || status), '') FROM executions",
        ),
        // A refused call is audited (`sign_in_failed`, `call_refused`): that is its record,
        // not a change of state.
        (
            "audit",
            "SELECT count(*) || '' FROM audit WHERE kind NOT IN ('sign_in_failed', 'call_refused', 'refusals_suppressed')",
        ),
        (
            "waits",
            "SELECT count(*) || ':' || coalesce(string_agg(id || '/' || state, ',' ORDER BY id || '/' || state), '') FROM waits",
        ),
        (
            "records",
            "SELECT count(*) || ':' || coalesce(sum(seq), 0) FROM records",
        ),
    ];
    // One query for all (one round trip when the database is PostgreSQL).
    let all = queries
        .iter()
        .map(|(_, sql)| format!("({sql})"))
        .collect::<Vec<_>>()
        .join(", ");
    let values = db.row(&format!("SELECT {all}"));
    assert_eq!(values.len(), queries.len(), "one value per table");
    queries
        .iter()
        .map(|(table, _)| *table)
        .zip(values)
        .collect()
}

/// What the API shows an admin: contexts, runs, audit and chain.
fn views(addr: SocketAddr, admin: &str) -> Value {
    let auth = bearer(admin);
    let get = |path: &str| {
        let answer = send(addr, "GET", path, &[("authorization", &auth)], b"");
        assert_eq!(answer.status, 200, "GET {path}");
        answer.json()
    };
    let mut contexts = get("/v1/execution-contexts");
    // Whether a daemon is online is not what this test looks at.
    if let Some(list) = contexts["contexts"].as_array_mut() {
        for c in list {
            if let Some(c) = c.as_object_mut() {
                c.remove("online");
                c.remove("slotsUsed");
            }
        }
    }
    json!({
        "contexts": contexts,
        "runs": get("/v1/runs?limit=500")["runs"].as_array().map(Vec::len),
        "audit": get("/v1/audit?limit=1000")["events"].as_array().map(|events| {
            events
                .iter()
                .filter(|e| {
                    !matches!(
                        e["kind"].as_str(),
                        Some("sign_in_failed" | "call_refused" | "refusals_suppressed")
                    )
                })
                .count()
        }),
        "chain": get("/v1/chain"),
    })
}

/// What an answer must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A 4xx with an error body.
    Refused,
    /// Anything but a 5xx; an error body if it is a 4xx (input the route may ignore).
    NoServerError,
}

/// One request to send.
struct Case {
    label: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Sent as it is instead of building a request from the fields above.
    raw: Option<Vec<u8>>,
    expect: Expect,
    /// The operation (method, path template) whose documented error codes an error answer
    /// must be among; `None` when the request may reach another route or none.
    documented: Option<(String, String)>,
}

/// How a route authenticates, from its `security`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Security {
    None,
    Bearer(String),
    Signed,
    SignedBearer(String),
    Ticket,
}

/// One operation of the document.
struct Route {
    method: String,
    template: String,
    security: Security,
    body_schema: Option<String>,
    required: Vec<String>,
    query: Vec<String>,
}

fn routes(doc: &Value) -> Vec<Route> {
    let mut out = Vec::new();
    let paths = doc["paths"].as_object().expect("paths");
    for (template, methods) in paths {
        for (method, op) in methods.as_object().expect("methods") {
            let sec = &op["security"][0];
            let scope = |name: &str| {
                sec[name][0]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| panic!("{method} {template}: {name} without a scope"))
            };
            let security = match (
                sec.get("bearer").is_some(),
                sec.get("httpSignature").is_some(),
                sec.get("ticket").is_some(),
            ) {
                (false, false, false) => Security::None,
                (true, false, false) => Security::Bearer(scope("bearer")),
                (false, true, false) => Security::Signed,
                (true, true, false) => Security::SignedBearer(scope("bearer")),
                (false, false, true) => Security::Ticket,
                other => panic!("{method} {template}: unexpected security {other:?}"),
            };
            let body_schema = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .map(|r| r.trim_start_matches("#/components/schemas/").to_owned());
            let required = body_schema
                .as_deref()
                .map(|name| {
                    // A schema without a `required` list requires nothing.
                    doc["components"]["schemas"][name]["required"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let query = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect();
            out.push(Route {
                method: method.to_ascii_uppercase(),
                template: template.clone(),
                security,
                body_schema,
                required,
                query,
            });
        }
    }
    out
}

/// The state a request may refer to: an admin, the join token, tokens lacking each scope, a
/// registered machine and its context, a finished execution.
struct Fixture {
    server: TestServer,
    addr: SocketAddr,
    admin: String,
    join: String,
    /// Per scope, a token that lacks it (and `admin`).
    lacking: BTreeMap<String, String>,
    registered: Machine,
    newcomer: Machine,
    execution: String,
    /// The digest of a stored bundle.
    bundle: String,
    /// The SHA-512 of the published daemon release's binary.
    release: String,
}

impl Fixture {
    fn new(dir: &Path) -> Fixture {
        let server = TestServer::start(dir);
        let addr = server.addr();
        let admin = server.admin();
        let join = server.join().token;
        let auth = bearer(&admin);
        let mut lacking = BTreeMap::new();
        for (i, scope) in SCOPES.iter().enumerate() {
            let scopes: Vec<&str> = SCOPES
                .iter()
                .copied()
                .filter(|s| *s != "admin" && s != scope)
                .collect();
            let body = json!({"name": format!("lacks-{i}"), "scopes": scopes}).to_string();
            let made = send(
                addr,
                "POST",
                "/v1/users",
                &[("authorization", &auth)],
                body.as_bytes(),
            );
            assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
            let token = made.json()["token"].as_str().expect("token").to_owned();
            lacking.insert((*scope).to_owned(), token);
        }
        let registered = Machine::new(41);
        let join_auth = bearer(&join);
        let answer = registered.send_with_from(
            source(),
            addr,
            "POST",
            "/v1/execution-contexts",
            &registered.register_body("box"),
            &registered.nonce(),
            &[("authorization", &join_auth)],
        );
        assert_eq!(
            answer.status,
            201,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        let body = json!({"capability": inline("echo hi"), "context": "cloud", "wait": true,
                          "waitSecs": 30})
        .to_string();
        let ran = send(
            addr,
            "POST",
            "/v1/executions",
            &[("authorization", &auth)],
            body.as_bytes(),
        );
        assert_eq!(ran.status, 201, "{}", String::from_utf8_lossy(&ran.body));
        let execution = ran.json()["executionId"].as_str().expect("id").to_owned();
        // A stored bundle, for the routes that name one by digest.
        let bundle_bytes = br#"{"type":"outpost.bundle","version":1,"manifest":"name: b\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n","files":[{"path":"run.sh","contentB64":"ZWNobyBoaQo"}]}"#;
        let bundle = {
            use sha2::Digest as _;
            hex::encode(sha2::Sha256::digest(bundle_bytes))
        };
        let stored = send(
            addr,
            "PUT",
            &format!("/v1/bundles/{bundle}"),
            &[("authorization", &auth)],
            bundle_bytes,
        );
        assert_eq!(
            stored.status,
            201,
            "{}",
            String::from_utf8_lossy(&stored.body)
        );
        // A published daemon release, for the routes that serve one.
        let script = dir.join("release.sh");
        std::fs::write(&script, "#!/bin/sh\necho '{\"version\":\"9.9.9\"}'\n")
            .expect("release script");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let release = outpost_server::releases::publish_daemon(dir, &script)
            .expect("published")
            .sha512;
        Fixture {
            release,
            bundle,
            server,
            addr,
            admin,
            join,
            lacking,
            registered,
            newcomer: Machine::new(42),
            execution,
        }
    }

    /// `template` with each `{param}` replaced by `value(param)`.
    fn path(&self, template: &str, value: &dyn Fn(&str) -> String) -> String {
        template
            .split('/')
            .map(
                |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(name) => value(name),
                    None => segment.to_owned(),
                },
            )
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The value of a path parameter that names something that exists.
    fn existing(&self, param: &str) -> String {
        match param {
            "id" => self.execution.clone(),
            "context" => "box".to_owned(),
            "sha256" => self.bundle.clone(),
            "sha512" => self.release.clone(),
            "name" => "lacks-0".to_owned(),
            "terminal" => "ex_no_such_terminal".to_owned(),
            other => panic!("no fixture for the path parameter {{{other}}}: add one here"),
        }
    }

    /// A body the route would accept.
    fn valid_body(&self, schema: &str) -> Value {
        match schema {
            "ExecuteRequest" => json!({"capability": inline("echo hi"), "context": "cloud"}),
            "Grant" => json!({"egress": {"mode": "none"}, "limits": {"maxConcurrent": 1}}),
            "Chain" => json!({"chain": ["cloud"]}),
            "UserRequest" => json!({"name": "zed"}),
            "JoinTokenRequest" => json!({"ttlSecs": 60, "uses": 1, "namePrefix": "ci-"}),
            "ShareRequest" => json!({"allMembers": true}),
            "DaemonControl" => json!({"action": "logs", "lines": 10}),
            "CommandsSwitch" => json!({"enabled": false}),
            "TerminalOpen" => json!({"cols": 80, "rows": 24}),
            "WaitRequest" => json!({"context": "box", "condition": "async () => false"}),
            "CommandAuthorize" => json!({"runId": "run_none", "command": "echo hi",
                "cwd": "/tmp", "envKeys": ["GREETING"], "background": false}),
            "JobAuthorize" => json!({"runId": "run_none", "op": "poll", "jobId": 1}),
            "RegisterRequest" => serde_json::from_slice(&self.newcomer.register_body("newbox"))
                .expect("the register body is JSON"),
            // Another bundle than the one the path names: its digest does not match.
            "BundleDocument" => json!({"type": "outpost.bundle", "version": 1,
                "manifest": "name: c\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
                "files": [{"path": "run.sh", "contentB64": "ZWNobyBoaQo"}]}),
            other => panic!("no valid body for the schema {other}: add one here"),
        }
    }

    /// Credentials that pass the route's authentication, as headers.
    fn good_auth(&self, route: &Route, path: &str, body: &[u8]) -> Vec<(String, String)> {
        match &route.security {
            Security::None | Security::Ticket => Vec::new(),
            Security::Bearer(_) => vec![("authorization".into(), bearer(&self.admin))],
            Security::Signed => self.registered.sign_as(
                self.addr,
                &route.method,
                path,
                body,
                &self.registered.key_id,
                &self.registered.nonce(),
            ),
            Security::SignedBearer(_) => {
                let mut h = self.newcomer.sign_as(
                    self.addr,
                    &route.method,
                    path,
                    body,
                    &self.newcomer.key_id,
                    &self.newcomer.nonce(),
                );
                h.push(("authorization".into(), bearer(&self.join)));
                h
            }
        }
    }

    /// A bearer token that has every scope but `scope`.
    fn without(&self, scope: &str) -> String {
        self.lacking
            .get(scope)
            .unwrap_or_else(|| panic!("no token lacking {scope}"))
            .clone()
    }
}

fn json_type() -> [(&'static str, Vec<u8>); 5] {
    [
        ("array", b"[]".to_vec()),
        ("number", b"7".to_vec()),
        ("string", b"\"x\"".to_vec()),
        ("null", b"null".to_vec()),
        ("boolean", b"true".to_vec()),
    ]
}

/// A value of another JSON type than `v`, never `null` (which an optional member takes).
fn mistyped(v: &Value) -> Value {
    match v {
        Value::String(_) => json!(7),
        Value::Number(_) => json!("7"),
        Value::Bool(_) => json!("true"),
        Value::Array(_) => json!({"x": 1}),
        Value::Object(_) => json!([1]),
        Value::Null => json!([]),
    }
}

fn cases_for(fx: &Fixture, route: &Route) -> Vec<Case> {
    let mut out = Vec::new();
    let name = format!("{} {}", route.method, route.template);
    let path = fx.path(&route.template, &|p| fx.existing(p));
    let missing_path = fx.path(&route.template, &|p| match p {
        "id" => "ex_nope".to_owned(),
        _ => "nope".to_owned(),
    });
    let case =
        |label: &str, path: &str, headers: Vec<(String, String)>, body: Vec<u8>, expect: Expect| {
            Case {
                label: format!("{name}: {label}"),
                method: route.method.clone(),
                path: path.to_owned(),
                headers,
                body,
                raw: None,
                expect,
                documented: Some((route.method.clone(), route.template.clone())),
            }
        };
    let json_ct = || ("content-type".to_owned(), "application/json".to_owned());
    let big = vec![b' '; MAX_BODY + 10];

    if let Some(schema) = &route.body_schema {
        let valid = fx.valid_body(schema);
        let valid_bytes = valid.to_string().into_bytes();
        // Bodies are checked before anything else can succeed, so the good credentials (for a
        // signed route: a bearer token, unsigned) make these about the body alone.
        let auth = |body: &[u8]| {
            let mut h = match &route.security {
                Security::SignedBearer(_) => vec![("authorization".into(), bearer(&fx.join))],
                _ => fx.good_auth(route, &path, body),
            };
            h.push(json_ct());
            h
        };
        let mut bodies: Vec<(String, Vec<u8>)> = vec![
            ("malformed JSON".into(), b"{not json".to_vec()),
            ("truncated JSON".into(), b"{\"a\":".to_vec()),
            ("two values".into(), b"{} {}".to_vec()),
            ("invalid UTF-8".into(), b"{\"a\":\"\xff\xfe\"}".to_vec()),
            ("empty body".into(), Vec::new()),
            ("whitespace body".into(), b"   ".to_vec()),
            ("empty object".into(), b"{}".to_vec()),
            (
                "unknown members only".into(),
                br#"{"zzUnknown":1,"other":{"x":[]}}"#.to_vec(),
            ),
            ("lone surrogate".into(), br#"{"zz":"\ud800"}"#.to_vec()),
            (
                "too deep".into(),
                format!("{{\"zz\":{}{}}}", "[".repeat(40), "]".repeat(40)).into_bytes(),
            ),
        ];
        // Every member of a join token request is optional: `{}` asks for an unbounded token,
        // which is no bad input.
        if schema == "JoinTokenRequest" {
            bodies.retain(|(label, _)| label != "empty object");
        }
        for (t, bytes) in json_type() {
            bodies.push((format!("a JSON {t} instead of an object"), bytes));
        }
        let Value::Object(members) = &valid else {
            panic!("{name}: the valid body is not an object")
        };
        for field in &route.required {
            let mut without = members.clone();
            without.remove(field);
            bodies.push((
                format!("required {field} missing"),
                Value::Object(without).to_string().into_bytes(),
            ));
        }
        for (field, value) in members {
            let mut changed = members.clone();
            changed.insert(field.clone(), mistyped(value));
            bodies.push((
                format!("{field} mistyped"),
                Value::Object(changed).to_string().into_bytes(),
            ));
        }
        if let Some((first, value)) = members.iter().next() {
            let text = valid.to_string();
            let dup = format!("{{\"{first}\":{value},{}", &text[1..]);
            bodies.push((format!("{first} given twice"), dup.into_bytes()));
        }
        for (label, extra) in [
            ("a float member", "1.5"),
            ("an exponent member", "1e3"),
            ("an integer beyond 2^53", "99999999999999999999"),
        ] {
            let text = valid.to_string();
            let with = format!("{},\"zzExtra\":{extra}}}", &text[..text.len() - 1]);
            bodies.push((format!("valid body with {label}"), with.into_bytes()));
        }
        for (label, body) in bodies {
            out.push(case(&label, &path, auth(&body), body, Expect::Refused));
        }
        out.push(case(
            "body over the limit",
            &path,
            auth(&big),
            big.clone(),
            Expect::Refused,
        ));
        // The same, chunked, with no length declared.
        let mut raw = format!(
            "{} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ntransfer-encoding: chunked\r\ncontent-type: application/json\r\n",
            route.method, fx.addr
        );
        for (n, v) in auth(b"") {
            if n != "content-type" {
                raw.push_str(&format!("{n}: {v}\r\n"));
            }
        }
        raw.push_str("\r\n");
        let mut raw = raw.into_bytes();
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..(MAX_BODY / chunk.len() + 1) {
            raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            raw.extend_from_slice(&chunk);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        let mut chunked = case(
            "chunked body over the limit",
            &path,
            Vec::new(),
            Vec::new(),
            Expect::Refused,
        );
        chunked.raw = Some(raw);
        out.push(chunked);
        // A valid body labelled as something else.
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let mut h = fx.good_auth(route, &path, &valid_bytes);
            h.push(("content-type".into(), ct.into()));
            out.push(case(
                &format!("content-type {ct}"),
                &path,
                h,
                valid_bytes.clone(),
                Expect::Refused,
            ));
        }
        // Credentials, each with a body that would otherwise be taken.
        if let Security::Bearer(scope) | Security::SignedBearer(scope) = &route.security {
            let forged = format!("opt_{}", "A".repeat(43));
            let lacking = fx.without(scope);
            let tokens: Vec<(String, Option<String>)> = vec![
                ("no token".into(), None),
                (
                    "a token that is not one".into(),
                    Some(bearer("not-a-token")),
                ),
                ("a forged token".into(), Some(bearer(&forged))),
                (
                    "a Basic credential".into(),
                    Some("Basic YWRtaW46YWRtaW4=".into()),
                ),
                ("a token lacking the scope".into(), Some(bearer(&lacking))),
            ];
            for (label, value) in tokens {
                let mut h = match &route.security {
                    Security::SignedBearer(_) => fx
                        .good_auth(route, &path, &valid_bytes)
                        .into_iter()
                        .filter(|(n, _)| n != "authorization")
                        .collect(),
                    _ => Vec::new(),
                };
                h.push(json_ct());
                if let Some(v) = value {
                    h.push(("authorization".into(), v));
                }
                out.push(case(
                    &format!("valid body, {label}"),
                    &path,
                    h,
                    valid_bytes.clone(),
                    Expect::Refused,
                ));
            }
        }
        if let Security::Signed | Security::SignedBearer(_) = &route.security {
            let mut h = vec![json_ct()];
            if let Security::SignedBearer(_) = &route.security {
                h.push(("authorization".into(), bearer(&fx.join)));
            }
            out.push(case(
                "valid body, no signature",
                &path,
                h.clone(),
                valid_bytes.clone(),
                Expect::Refused,
            ));
            let mut forged = h;
            forged.push((
                "signature-input".into(),
                "outpost=(\"@method\");keyid=\"mk_x\"".into(),
            ));
            forged.push(("signature".into(), "outpost=:AAAA:".into()));
            out.push(case(
                "valid body, a forged signature",
                &path,
                forged,
                valid_bytes.clone(),
                Expect::Refused,
            ));
        }
        // A bad query on a route that takes a body: the body is bad too, so nothing may pass.
        out.push(case(
            "bad percent-encoding in the query, malformed body",
            &format!("{path}?%FF=%FE&x=%ZZ&%"),
            auth(b"{"),
            b"{".to_vec(),
            Expect::Refused,
        ));
    } else {
        // A route without a body ignores one; it must still never fail on it.
        let (target, expect) = if route.method == "GET" {
            (path.clone(), Expect::NoServerError)
        } else {
            // Aimed at nothing that exists, so a request that gets through changes nothing.
            (missing_path.clone(), Expect::Refused)
        };
        for (label, body) in [
            ("malformed JSON body", b"{not json".to_vec()),
            ("body over the limit", big.clone()),
        ] {
            let mut h = if route.security == Security::Signed {
                Vec::new()
            } else {
                fx.good_auth(route, &target, &body)
            };
            h.push(json_ct());
            out.push(case(label, &target, h, body, expect));
        }
        match &route.security {
            Security::Bearer(scope) => {
                let forged = format!("opt_{}", "A".repeat(43));
                for (label, value) in [
                    ("no token", None),
                    ("a token that is not one", Some(bearer("opt_short"))),
                    ("a forged token", Some(bearer(&forged))),
                    // The scheme is read in any case (RFC 9110): the token decides.
                    (
                        "lowercase bearer, a forged token",
                        Some(format!("bearer {forged}")),
                    ),
                    (
                        "a token lacking the scope",
                        Some(bearer(&fx.without(scope))),
                    ),
                ] {
                    let h = value
                        .map(|v| vec![("authorization".to_owned(), v)])
                        .unwrap_or_default();
                    out.push(case(label, &path, h, Vec::new(), Expect::Refused));
                }
            }
            Security::Signed => {
                out.push(case(
                    "no signature",
                    &path,
                    Vec::new(),
                    Vec::new(),
                    Expect::Refused,
                ));
                let stranger = Machine::new(43);
                let h = stranger.sign_as(
                    fx.addr,
                    &route.method,
                    &path,
                    b"",
                    &stranger.key_id,
                    &stranger.nonce(),
                );
                out.push(case(
                    "signed by an unknown key",
                    &path,
                    h,
                    Vec::new(),
                    Expect::Refused,
                ));
                let h = vec![
                    ("signature-input".into(), "outpost=();keyid=\"x\"".into()),
                    ("signature".into(), "outpost=:%%:".into()),
                ];
                out.push(case(
                    "a garbled signature",
                    &path,
                    h,
                    Vec::new(),
                    Expect::Refused,
                ));
            }
            Security::Ticket => {
                let unknown = format!("otk_{}", "A".repeat(64));
                for (label, query) in [
                    ("no ticket", String::new()),
                    ("an empty ticket", "?ticket=".to_owned()),
                    ("a malformed ticket", "?ticket=otk_short".to_owned()),
                    ("an unknown ticket", format!("?ticket={unknown}")),
                    ("a percent-encoded ticket", "?ticket=%FF%FE".to_owned()),
                ] {
                    out.push(case(
                        label,
                        &format!("{path}{query}"),
                        Vec::new(),
                        Vec::new(),
                        Expect::Refused,
                    ));
                }
            }
            Security::None | Security::SignedBearer(_) => {}
        }
        // Bad percent-encoding in the query.
        let mut query: Vec<String> = route.query.iter().map(|q| format!("{q}=%FF")).collect();
        query.push("%ZZ=%".into());
        let h = fx.good_auth(route, &target, b"");
        out.push(case(
            "bad percent-encoding in the query",
            &format!("{target}?{}", query.join("&")),
            h,
            Vec::new(),
            expect,
        ));
        for q in &route.query {
            let h = fx.good_auth(route, &target, b"");
            out.push(case(
                &format!("{q} of the wrong type"),
                &format!("{target}?{q}=-1x"),
                h,
                Vec::new(),
                expect,
            ));
        }
    }

    // Bad percent-encoding in the path: in each parameter, or in the last segment.
    for bad in ["%FF", "%C3%28", "%ZZ", "%", "%00"] {
        let has_params = route.template.contains('{');
        let bad_path = if has_params {
            fx.path(&route.template, &|_| bad.to_owned())
        } else {
            format!("{}{bad}", route.template)
        };
        let mut h = fx.good_auth(route, &bad_path, b"{");
        h.push(json_ct());
        let mut bad_case = case(
            &format!("{bad} in the path"),
            &bad_path,
            h,
            b"{".to_vec(),
            Expect::Refused,
        );
        if !has_params {
            bad_case.documented = None;
        }
        out.push(bad_case);
    }
    out
}

fn other_method(methods: &[&str]) -> Option<&'static str> {
    ["DELETE", "PATCH", "PUT", "POST", "GET"]
        .into_iter()
        .find(|m| !methods.contains(m))
}

/// Checks one answer; the failure, if any, as a line of the report.
fn check(case: &Case, answer: &Answer) -> Option<String> {
    let head = String::from_utf8_lossy(&answer.body[..answer.body.len().min(120)]).into_owned();
    if answer.status >= 500 {
        return Some(format!("{} answered {} {head}", case.label, answer.status));
    }
    if case.expect == Expect::Refused && !(400..500).contains(&answer.status) {
        return Some(format!(
            "{} was taken: {} {head}",
            case.label, answer.status
        ));
    }
    if answer.status >= 400 {
        let body: Option<Value> = serde_json::from_slice(&answer.body).ok();
        let code = body
            .as_ref()
            .and_then(|b| b["error"]["code"].as_str())
            .unwrap_or("");
        let message = body
            .as_ref()
            .and_then(|b| b["error"]["message"].as_str())
            .unwrap_or("");
        let snake = code
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
        if code.is_empty() || message.is_empty() || !snake {
            return Some(format!(
                "{} answered {} without an error code: {head}",
                case.label, answer.status
            ));
        }
        let json_type = answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"));
        if !json_type {
            return Some(format!(
                "{} answered {} with content-type {:?}",
                case.label,
                answer.status,
                answer.header("content-type")
            ));
        }
    }
    None
}

/// An error answer whose code the document does not list for the route and status.
fn undocumented(doc: &Value, case: &Case, answer: &Answer) -> Option<String> {
    let (method, template) = case.documented.as_ref()?;
    if answer.status < 400 {
        return None;
    }
    let code = answer.code();
    if ["not_found", "method_not_allowed"].contains(&code.as_str()) {
        return None;
    }
    let listed = &doc["paths"][template][method.to_ascii_lowercase()]["responses"]
        [answer.status.to_string()]["x-error-codes"];
    let found = listed
        .as_array()
        .is_some_and(|codes| codes.iter().any(|c| c == code.as_str()));
    (!found).then(|| {
        format!(
            "{} answered {} {code}, which the document does not list for {method} {template}",
            case.label, answer.status
        )
    })
}

#[test]
fn every_route_refuses_bad_input_with_a_4xx_code_and_stores_nothing() {
    let dir = temp_dir("bad-input");
    let fx = Fixture::new(&dir);
    let addr = fx.addr;
    let doc = send(addr, "GET", "/v1/openapi.json", &[], b"").json();
    let routes = routes(&doc);
    assert!(
        routes.len() >= 20,
        "the document lists {} routes",
        routes.len()
    );
    let mut cases: Vec<Case> = routes.iter().flat_map(|r| cases_for(&fx, r)).collect();
    let mut by_path: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in &routes {
        by_path.entry(&r.template).or_default().push(&r.method);
    }
    for (template, methods) in &by_path {
        if let Some(method) = other_method(methods) {
            let path = fx.path(template, &|p| fx.existing(p));
            cases.push(Case {
                label: format!("{method} {template}: a method the route does not take"),
                method: method.to_owned(),
                path,
                headers: vec![("authorization".into(), bearer(&fx.admin))],
                body: b"{".to_vec(),
                raw: None,
                expect: Expect::Refused,
                documented: None,
            });
        }
    }

    let mut stored = fingerprint(&dir);
    let shown = views(addr, &fx.admin);
    let mut failures = Vec::new();
    let mut server_errors = 0;
    for case in &cases {
        let answer = match &case.raw {
            Some(raw) => raw_from(source(), addr, raw),
            None => {
                let h: Vec<(&str, &str)> = case
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                send(addr, &case.method, &case.path, &h, &case.body)
            }
        };
        if answer.status >= 500 {
            server_errors += 1;
        }
        if let Some(failure) = check(case, &answer) {
            failures.push(failure);
        } else if let Some(failure) = undocumented(&doc, case, &answer) {
            failures.push(failure);
        }
        let now = fingerprint(&dir);
        if now != stored {
            failures.push(format!(
                "{} changed the store: {stored:?} -> {now:?}",
                case.label
            ));
            stored = now;
        }
    }
    let shown_after = views(addr, &fx.admin);
    if shown_after != shown {
        failures.push(format!("the API shows {shown_after} after, {shown} before"));
    }
    eprintln!(
        "bad input: {} routes, {} cases, {} answered 5xx, {} failures",
        routes.len(),
        cases.len(),
        server_errors,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    fx.server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_registrations_of_one_key_answer_201_once_and_200_otherwise() {
    const THREADS: usize = 8;
    let dir = temp_dir("register-race");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let join = bearer(&server.join().token);
    for round in 0..12u8 {
        let machine = Arc::new(Machine::new(100 + round));
        let barrier = Arc::new(Barrier::new(THREADS));
        let name = format!("race-{round}");
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (machine, barrier, join, name) =
                    (machine.clone(), barrier.clone(), join.clone(), name.clone());
                let from = source();
                std::thread::spawn(move || {
                    let body = machine.register_body(&name);
                    let nonce = machine.nonce();
                    barrier.wait();
                    machine.send_with_from(
                        from,
                        addr,
                        "POST",
                        "/v1/execution-contexts",
                        &body,
                        &nonce,
                        &[("authorization", &join)],
                    )
                })
            })
            .collect();
        let answers: Vec<Answer> = threads
            .into_iter()
            .map(|t| t.join().expect("the thread ends"))
            .collect();
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 201).count(),
            1,
            "round {round}: {statuses:?}"
        );
        assert!(
            statuses.iter().all(|s| *s == 200 || *s == 201),
            "round {round}: {statuses:?} {:?}",
            answers
                .iter()
                .map(|a| String::from_utf8_lossy(&a.body).into_owned())
                .collect::<Vec<_>>()
        );
        let ids: Vec<Value> = answers
            .iter()
            .map(|a| a.json()["contextId"].clone())
            .collect();
        assert!(
            ids.iter().all(|id| id == &ids[0] && id.is_string()),
            "{ids:?}"
        );
    }
    // Different keys racing for one name: one context, the others refused with a code.
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (barrier, join) = (barrier.clone(), join.clone());
            let from = source();
            std::thread::spawn(move || {
                let machine = Machine::new(150 + i as u8);
                let body = machine.register_body("same-name");
                let nonce = machine.nonce();
                barrier.wait();
                machine.send_with_from(
                    from,
                    addr,
                    "POST",
                    "/v1/execution-contexts",
                    &body,
                    &nonce,
                    &[("authorization", &join)],
                )
            })
        })
        .collect();
    let answers: Vec<Answer> = threads
        .into_iter()
        .map(|t| t.join().expect("the thread ends"))
        .collect();
    let outcome: Vec<(u16, String)> = answers
        .iter()
        .map(|a| {
            (
                a.status,
                if a.status == 201 {
                    String::new()
                } else {
                    a.code()
                },
            )
        })
        .collect();
    assert_eq!(
        outcome.iter().filter(|(s, _)| *s == 201).count(),
        1,
        "{outcome:?}"
    );
    assert!(
        outcome
            .iter()
            .all(|(s, c)| *s == 201 || (*s == 409 && c == "context_name_taken")),
        "{outcome:?}"
    );
    let admin = bearer(&server.admin());
    let listed = send(
        addr,
        "GET",
        "/v1/execution-contexts",
        &[("authorization", &admin)],
        b"",
    )
    .json();
    assert_eq!(
        listed["contexts"].as_array().map(Vec::len),
        Some(13),
        "{listed}"
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
