//! What the HTTP layer answers before and around the routes (PROTOCOL §11): its own refusals
//! (a head too large, a target too long, a head that does not parse or does not arrive) in
//! the API's JSON error shape, the `Bearer` scheme read in any case, credentials judged
//! before a query, and what a bundle upload may be labelled.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Answer, TestServer, bearer, http, raw_from, temp_dir};
use serde_json::Value;

/// An error answer: its status, its code, and that it is the API's JSON error shape.
fn refusal(answer: &Answer) -> (u16, String) {
    assert_eq!(
        answer.header("content-type"),
        Some("application/json"),
        "{} {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    );
    let body = answer.json();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert_eq!(
        answer.header("content-length"),
        Some(answer.body.len().to_string().as_str())
    );
    (answer.status, answer.code())
}

fn raw(server: &TestServer, request: &[u8]) -> Answer {
    raw_from(std::net::Ipv4Addr::LOCALHOST, server.addr(), request)
}

#[test]
fn the_http_layer_answers_its_refusals_as_json_errors() {
    let dir = temp_dir("http-layer");
    let server = TestServer::start(&dir);
    let addr = server.addr();

    // A head over 64 KiB: one long header.
    let long = "a".repeat(70 * 1024);
    let request = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nx-long: {long}\r\n\r\n");
    assert_eq!(
        refusal(&raw(&server, request.as_bytes())),
        (431, "headers_too_large".into())
    );
    // More than 100 headers.
    let mut request = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n");
    for i in 0..120 {
        request.push_str(&format!("x-h{i}: {i}\r\n"));
    }
    request.push_str("\r\n");
    assert_eq!(
        refusal(&raw(&server, request.as_bytes())),
        (431, "headers_too_large".into())
    );
    // A target over 8 KiB (the head under 64 KiB), on a route that exists and one that
    // needs a token: the length is judged first.
    for path in ["/healthz", "/v1/runs"] {
        let target = format!("{path}?pad={}", "x".repeat(9 * 1024));
        let answer = http(addr, "GET", &target, &[], b"");
        assert_eq!(refusal(&answer), (414, "uri_too_long".into()), "{path}");
    }
    // A target of exactly 8 KiB is read.
    let pad = 8 * 1024 - "/healthz?pad=".len();
    let answer = http(
        addr,
        "GET",
        &format!("/healthz?pad={}", "x".repeat(pad)),
        &[],
        b"",
    );
    assert_eq!(answer.status, 200);
    // Request lines and headers that are not HTTP/1.1.
    for bad in [
        "GARBAGE\r\n\r\n".to_owned(),
        "GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n".to_owned(),
        format!("GET /he\x01lthz HTTP/1.1\r\nhost: {addr}\r\n\r\n"),
        format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nbad header: x\r\n\r\n"),
    ] {
        assert_eq!(
            refusal(&raw(&server, bad.as_bytes())),
            (400, "malformed_request".into()),
            "{bad:?}"
        );
    }
    // The same connection still serves well-formed requests before a refused one.
    let mut stream = TcpStream::connect(addr).expect("connect");
    let two = format!(
        "GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\nGET /healthz HTTP/1.1\r\nhost: {addr}\r\nx-long: {long}\r\n\r\n"
    );
    stream.write_all(two.as_bytes()).expect("write");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("{\"ok\":true}"), "{text}");
    assert!(text.contains("HTTP/1.1 431 "), "{text}");
    assert!(text.ends_with("\"code\":\"headers_too_large\",\"message\":\"the request head is larger than 64 KiB or has more than 100 headers\"}}"), "{text}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_head_that_does_not_arrive_in_time_is_answered_408_and_an_idle_connection_closed() {
    let dir = temp_dir("http-layer-408");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    // Half a head, then nothing: hyper gives up after 30 s.
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .expect("write");
    // An idle connection: nothing sent at all.
    let mut idle = TcpStream::connect(addr).expect("connect");
    let started = Instant::now();
    for s in [&slow, &idle] {
        s.set_read_timeout(Some(Duration::from_secs(90)))
            .expect("timeout");
    }
    let mut got = Vec::new();
    slow.read_to_end(&mut got).expect("the server closes");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(25), "{waited:?}");
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").expect("an answer");
    assert!(head.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(head.contains("content-type: application/json"), "{text}");
    let body: Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(body["error"]["code"], "request_timeout");
    let mut nothing = Vec::new();
    idle.read_to_end(&mut nothing).expect("the server closes");
    assert!(
        nothing.is_empty(),
        "an idle connection gets no answer: {}",
        String::from_utf8_lossy(&nothing)
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_bearer_scheme_is_read_in_any_case() {
    let dir = temp_dir("http-layer-bearer");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = server.admin();
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let value = format!("{scheme} {admin}");
        let answer = http(
            addr,
            "GET",
            "/v1/execution-contexts",
            &[("authorization", &value)],
            b"",
        );
        assert_eq!(answer.status, 200, "{scheme}: {}", answer.code());
    }
    for value in [
        format!("Basic {admin}"),
        format!("Bearer{admin}"),
        admin.clone(),
    ] {
        let answer = http(
            addr,
            "GET",
            "/v1/execution-contexts",
            &[("authorization", &value)],
            b"",
        );
        assert_eq!(refusal(&answer), (401, "token_missing".into()), "{value}");
    }
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn credentials_are_judged_before_the_query() {
    let dir = temp_dir("http-layer-query");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = bearer(&server.admin());
    let forged = bearer(&format!("opt_{}", "A".repeat(43)));
    let doc = http(addr, "GET", "/v1/openapi.json", &[], b"").json();
    // Every bearer route that reads a query.
    let mut routes = Vec::new();
    for (template, methods) in doc["paths"].as_object().expect("paths") {
        for (method, op) in methods.as_object().expect("methods") {
            let queries: Vec<&str> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str())
                .collect();
            if op["security"][0].get("bearer").is_some() && !queries.is_empty() {
                let path = template.replace("{id}", "ex_none");
                // Every parameter mistyped (a text one takes anything; a number one refuses).
                let query: Vec<String> = queries.iter().map(|q| format!("{q}=-1x")).collect();
                routes.push((method.to_ascii_uppercase(), path, query.join("&")));
            }
        }
    }
    assert!(routes.len() >= 4, "{routes:?}");
    for (method, path, query) in &routes {
        let target = format!("{path}?{query}");
        let cases = [
            (None, (401, "token_missing")),
            (Some(&forged), (401, "token_invalid")),
            (Some(&admin), (400, "invalid_query")),
        ];
        for (token, (status, code)) in cases {
            let headers: Vec<(&str, &str)> = token
                .map(|t| vec![("authorization", t.as_str())])
                .unwrap_or_default();
            let answer = http(addr, method, &target, &headers, b"");
            assert_eq!(
                refusal(&answer),
                (status, code.to_owned()),
                "{method} {target} with {headers:?}"
            );
        }
    }
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bundle_upload_is_labelled_json_or_octet_stream_or_not_at_all() {
    let dir = temp_dir("http-layer-bundle");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = bearer(&server.admin());
    let bundle = br#"{"type":"outpost.bundle","version":1,"manifest":"name: b\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n","files":[{"path":"run.sh","contentB64":"ZWNobyBoaQo"}]}"#;
    let sha = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(bundle))
    };
    let path = format!("/v1/bundles/{sha}");
    for label in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
    ] {
        let answer = http(
            addr,
            "PUT",
            &path,
            &[("authorization", &admin), ("content-type", label)],
            bundle,
        );
        assert_eq!(
            refusal(&answer),
            (415, "unsupported_media_type".into()),
            "{label}"
        );
    }
    // Nothing was stored: a run naming it finds no bundle.
    let run = serde_json::json!({"capability": {"kind": "digest", "sha256": sha, "size": bundle.len()}, "context": "cloud"});
    let answer = http(
        addr,
        "POST",
        "/v1/executions",
        &[("authorization", &admin)],
        run.to_string().as_bytes(),
    );
    assert_eq!(refusal(&answer), (404, "bundle_unknown".into()));
    let cases: [(Option<&str>, u16); 4] = [
        (Some("application/octet-stream"), 201),
        (Some("application/json; charset=utf-8"), 200),
        (Some("Application/JSON"), 200),
        (None, 200),
    ];
    for (label, status) in cases {
        let mut headers = vec![("authorization", admin.as_str())];
        if let Some(label) = label {
            headers.push(("content-type", label));
        }
        let answer = http(addr, "PUT", &path, &headers, bundle);
        assert_eq!(answer.status, status, "{label:?}: {:?}", answer.body);
        assert_eq!(answer.json()["sha256"], sha.as_str());
    }
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
