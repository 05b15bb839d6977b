//! Machine routes over real sockets: a signed registration, a ticket, the WebSocket and its
//! signed welcome; replayed nonces (also after a restart) and reused tickets refused.

mod common;

use common::{Machine, TestServer, bearer, http, next_frame, now_secs, open_socket, temp_dir};
use outpost_core::sign::FrameVerifier;
use outpost_core::time::UnixTime;
use outpost_core::wire::ServerFrame;

#[test]
fn a_machine_registers_gets_a_ticket_and_verifies_the_signed_welcome() {
    let dir = temp_dir("welcome");
    let server = TestServer::start(&dir);
    let machine = Machine::new(7);
    let first = machine.register(&server, "build-box");
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let body = first.json();
    let context_id = body["contextId"].as_str().expect("contextId").to_owned();
    assert!(context_id.starts_with("ec_"));
    assert_eq!(body["keyId"], machine.key_id.as_str());
    assert_eq!(body["operator"], "admin");
    assert_eq!(body["grantVersion"], 1);
    // Registering again with the same key is idempotent.
    let again = machine.register(&server, "build-box");
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["contextId"], context_id.as_str());
    // Another key may not take a live name of the same operator.
    let other = Machine::new(8).register(&server, "build-box");
    assert_eq!(
        (other.status, other.code().as_str()),
        (409, "context_name_taken")
    );

    let (ticket, session_id) = machine.ticket(&server);
    assert!(ticket.starts_with("otk_"));
    let mut socket = open_socket(server.addr(), &ticket).expect("the socket opens");
    let welcome = next_frame(&mut socket);
    let mut verifier = FrameVerifier::new(server.keys(), session_id);
    let verified = verifier
        .verify(&welcome, UnixTime(now_secs()))
        .expect("the welcome verifies under the pinned root's key set");
    assert_eq!(verified.seq, 1);
    match verified.frame {
        ServerFrame::Welcome { context_id: id, .. } => assert_eq!(id, context_id),
        other => panic!("expected welcome, got {other:?}"),
    }
    // A used ticket is refused before any upgrade.
    let (status, body) = open_socket(server.addr(), &ticket).expect_err("the ticket was used");
    assert_eq!(status, 401);
    assert!(String::from_utf8_lossy(&body).contains("ticket_unknown"));
    let malformed = open_socket(server.addr(), "otk_nope").expect_err("malformed");
    assert_eq!(malformed.0, 401);
    assert!(String::from_utf8_lossy(&malformed.1).contains("ticket_malformed"));
    let forged = format!("otk_{}", "A".repeat(64));
    let unknown = open_socket(server.addr(), &forged).expect_err("never issued");
    assert_eq!(unknown.0, 401);
    assert!(String::from_utf8_lossy(&unknown.1).contains("ticket_unknown"));
    drop(socket);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replayed_signed_request_is_refused_also_after_a_restart() {
    let dir = temp_dir("replay");
    let server = TestServer::start(&dir);
    let machine = Machine::new(9);
    assert_eq!(machine.register(&server, "replay-box").status, 201);
    let addr = server.addr();
    let path = "/v1/execution-contexts/connect-ticket";
    let headers = machine.sign_as(addr, "POST", path, b"", &machine.key_id, "the-one-nonce");
    let send = |addr| {
        let h: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        http(addr, "POST", path, &h, b"")
    };
    assert_eq!(send(addr).status, 200);
    let replay = send(addr);
    assert_eq!(
        (replay.status, replay.code().as_str()),
        (401, "nonce_replayed")
    );
    let server = server.restart();
    // Same bytes, same Host (the port changed: re-sign for the new authority, same nonce).
    let headers = machine.sign_as(
        server.addr(),
        "POST",
        path,
        b"",
        &machine.key_id,
        "the-one-nonce",
    );
    let h: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let after = http(server.addr(), "POST", path, &h, b"");
    assert_eq!(
        (after.status, after.code().as_str()),
        (401, "nonce_replayed")
    );
    // A fresh nonce still works after the restart: the key is remembered.
    let (ticket, _) = machine.ticket(&server);
    assert!(ticket.starts_with("otk_"));
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn signatures_and_registration_bodies_are_checked_with_codes() {
    let dir = temp_dir("sigs");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let machine = Machine::new(11);
    let token = bearer(&server.join().token);
    let body = machine.register_body("sig-box");
    // Signed, but with a keyid that is not the body's key's id.
    let signed = machine.sign_as(
        addr,
        "POST",
        "/v1/execution-contexts",
        &body,
        "mk_other",
        "n1",
    );
    let mut h: Vec<(&str, &str)> = signed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    h.push(("authorization", &token));
    let mismatch = http(addr, "POST", "/v1/execution-contexts", &h, &body);
    assert_eq!(
        (mismatch.status, mismatch.code().as_str()),
        (400, "key_id_mismatch")
    );
    // No signature at all.
    let unsigned = http(
        addr,
        "POST",
        "/v1/execution-contexts",
        &[("authorization", &token)],
        &body,
    );
    assert_eq!(unsigned.status, 401);
    assert_eq!(unsigned.code(), "missing_signature");
    // A body altered after signing.
    let signed = machine.sign_as(
        addr,
        "POST",
        "/v1/execution-contexts",
        &body,
        &machine.key_id,
        "n2",
    );
    let mut h: Vec<(&str, &str)> = signed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    h.push(("authorization", &token));
    let altered = machine.register_body("sig-boy");
    let tampered = http(addr, "POST", "/v1/execution-contexts", &h, &altered);
    assert_eq!(
        (tampered.status, tampered.code().as_str()),
        (401, "content_digest_mismatch")
    );
    // A bad name, signed correctly.
    let bad = machine.send_with(
        addr,
        "POST",
        "/v1/execution-contexts",
        &machine.register_body("Build Box"),
        &machine.nonce(),
        &[("authorization", &token)],
    );
    assert_eq!((bad.status, bad.code().as_str()), (400, "invalid_name"));
    // Registering needs the bearer token too.
    let no_token = machine.send_with(
        addr,
        "POST",
        "/v1/execution-contexts",
        &body,
        &machine.nonce(),
        &[],
    );
    assert_eq!(
        (no_token.status, no_token.code().as_str()),
        (401, "token_missing")
    );
    // An unregistered key cannot get a ticket.
    let stranger = Machine::new(12);
    let refused = stranger.send_with(
        addr,
        "POST",
        "/v1/execution-contexts/connect-ticket",
        b"",
        &stranger.nonce(),
        &[],
    );
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (401, "unknown_key")
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn machine_requests_from_one_address_are_rate_limited_with_retry_after() {
    let dir = temp_dir("rate");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let mut limited = None;
    for _ in 0..200 {
        let answer = http(
            addr,
            "POST",
            "/v1/execution-contexts/connect-ticket",
            &[],
            b"",
        );
        if answer.status == 429 {
            limited = Some(answer);
            break;
        }
        assert_eq!(answer.status, 401);
    }
    let limited = limited.expect("the bucket ran dry");
    assert_eq!(limited.code(), "rate_limited");
    let retry: u64 = limited
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_command_authorize_hop_refuses_a_run_that_is_not_live_and_audits_nothing() {
    let dir = temp_dir("authorize");
    let server = TestServer::start(&dir);
    let machine = Machine::new(31);
    assert_eq!(machine.register(&server, "cmd-box").status, 201);
    let body = serde_json::json!({"runId": "run_nope", "command": "echo hi",
        "cwd": "/tmp", "envKeys": ["GREETING"], "background": false})
    .to_string();
    let answer = machine.send_with(
        server.addr(),
        "POST",
        "/v1/execution-contexts/commands/authorize",
        body.as_bytes(),
        &machine.nonce(),
        &[],
    );
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (409, "run_not_live"),
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    // Unsigned, it is refused before anything is looked at.
    let unsigned = http(
        server.addr(),
        "POST",
        "/v1/execution-contexts/commands/authorize",
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(unsigned.status, 401);
    let audit = http(
        server.addr(),
        "GET",
        "/v1/audit",
        &[("authorization", &bearer(&server.admin()))],
        b"",
    )
    .json();
    assert!(!audit.to_string().contains("command_started"), "{audit}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
