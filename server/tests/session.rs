//! A daemon's session over the real WebSocket: the core's `Daemon` driven by hand
//! ([`common::driver`]) runs an execution to `exited`; oversized messages close
//! with 1009; revoke sends `revoked`, closes with 4001 and refuses the key from then on.

mod common;

use std::time::{Duration, Instant as StdInstant};

use common::driver::Driver;
use common::{
    Machine, TestServer, bearer, close_code, http, inline, next_frame, open_socket, temp_dir,
};
use serde_json::json;
use tungstenite::Message;
use tungstenite::protocol::frame::coding::CloseCode;

#[test]
fn a_daemon_driven_over_the_websocket_runs_an_execution_to_exited() {
    let dir = temp_dir("roundtrip");
    let server = TestServer::start(&dir);
    let machine = Machine::new(21);
    assert_eq!(machine.register(&server, "build-box").status, 201);
    let mut driver = Driver::new(&server);
    driver.drain(&server, &machine);
    // Wait until the context shows online (the daemon said hello).
    let admin = bearer(&server.admin());
    let deadline = StdInstant::now() + Duration::from_secs(20);
    loop {
        driver.pump(&server, &machine);
        let ctx = http(
            server.addr(),
            "GET",
            "/v1/execution-contexts/build-box",
            &[("authorization", &admin)],
            b"",
        )
        .json();
        if ctx["online"] == true {
            assert_eq!(ctx["slotsTotal"], 2);
            break;
        }
        assert!(
            StdInstant::now() < deadline,
            "the daemon never came online: {ctx}"
        );
    }
    let addr = server.addr();
    let body = json!({
        "capability": inline("echo hi\n"),
        "context": "build-box", "wait": true, "waitSecs": 30,
    })
    .to_string();
    let token = admin.clone();
    let request = std::thread::spawn(move || {
        http(
            addr,
            "POST",
            "/v1/executions",
            &[("authorization", &token)],
            body.as_bytes(),
        )
    });
    while !request.is_finished() {
        driver.pump(&server, &machine);
        assert!(
            StdInstant::now() < deadline + Duration::from_secs(30),
            "the execution never ended"
        );
    }
    let answer = request.join().expect("the request thread");
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let execution = answer.json();
    assert_eq!(execution["status"], "exited", "{execution}");
    assert_eq!(execution["exitCode"], 0);
    assert_eq!(execution["stdout"], "hi\n");
    assert_eq!(execution["ranOn"]["kind"], "context");
    assert_eq!(execution["ranOn"]["name"], "build-box");
    assert_eq!(execution["ranOnText"], "Ran on build-box (your machine).");
    assert!(execution["timing"]["serverMs"].is_u64(), "{execution}");
    assert_eq!(driver.executed.len(), 1, "run exactly once");
    let metrics =
        String::from_utf8_lossy(&http(addr, "GET", "/metrics", &[], b"").body).into_owned();
    assert!(metrics.contains("outpost_connected_daemons 1"), "{metrics}");
    assert!(
        metrics.contains("outpost_runs_total{status=\"exited\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("outpost_dispatch_latency_seconds_count 1"),
        "{metrics}"
    );
    let runs = http(
        addr,
        "GET",
        "/v1/runs?context=build-box",
        &[("authorization", &admin)],
        b"",
    )
    .json();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1));
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_message_over_one_mebibyte_is_closed_with_1009() {
    let dir = temp_dir("big");
    let server = TestServer::start(&dir);
    let machine = Machine::new(22);
    assert_eq!(machine.register(&server, "big-box").status, 201);
    let (ticket, _) = machine.ticket(&server);
    let mut socket = open_socket(server.addr(), &ticket).expect("opens");
    let _welcome = next_frame(&mut socket);
    let big = "x".repeat((1 << 20) + 1);
    socket.send(Message::Text(big.into())).expect("send");
    assert_eq!(close_code(&mut socket), Some(1009));
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn revoke_closes_with_4001_refuses_the_key_and_delete_removes_the_context() {
    let dir = temp_dir("revoke");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let machine = Machine::new(23);
    assert_eq!(machine.register(&server, "gone-box").status, 201);
    let (ticket, _) = machine.ticket(&server);
    let mut socket = open_socket(addr, &ticket).expect("opens");
    let _welcome = next_frame(&mut socket);
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let early = http(
        addr,
        "DELETE",
        "/v1/execution-contexts/gone-box",
        &auth,
        b"",
    );
    assert_eq!(
        (early.status, early.code().as_str()),
        (409, "context_not_revoked")
    );
    let revoked = http(
        addr,
        "POST",
        "/v1/execution-contexts/gone-box/revoke",
        &auth,
        b"",
    );
    assert_eq!(
        revoked.status,
        200,
        "{}",
        String::from_utf8_lossy(&revoked.body)
    );
    assert_eq!(revoked.json()["revoked"], true);
    let frame = next_frame(&mut socket);
    assert!(String::from_utf8_lossy(&frame).contains("\"revoked\""));
    assert_eq!(
        close_code(&mut socket),
        Some(u16::from(CloseCode::Library(4001)))
    );
    let refused = machine.send_with(
        addr,
        "POST",
        "/v1/execution-contexts/connect-ticket",
        b"",
        &machine.nonce(),
        &[],
    );
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (403, "context_revoked")
    );
    let again = machine.register(&server, "gone-box");
    assert_eq!(
        (again.status, again.code().as_str()),
        (403, "context_revoked")
    );
    let deleted = http(
        addr,
        "DELETE",
        "/v1/execution-contexts/gone-box",
        &auth,
        b"",
    );
    assert_eq!(deleted.status, 204);
    let missing = http(addr, "GET", "/v1/execution-contexts/gone-box", &auth, b"");
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "context_unknown")
    );
    // A restart does not bring it back.
    let server = server.restart();
    let list = http(
        server.addr(),
        "GET",
        "/v1/execution-contexts",
        &[("authorization", admin.as_str())],
        b"",
    )
    .json();
    assert_eq!(list, json!({"contexts": []}));
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
