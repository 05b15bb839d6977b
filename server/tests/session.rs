//! A daemon's session over the real WebSocket: the core's `Daemon` driven by hand
//! ([`common::driver`]) runs an execution to `exited`; oversized messages close
//! with 1009; revoke sends `revoked`, closes with 4001 and refuses the key from then on; a
//! second machine speaking for a terminal another holds is refused and the holder named.

mod common;

use std::time::{Duration, Instant as StdInstant};

use common::driver::Driver;
use common::{
    Machine, TestServer, bearer, close_code, http, inline, next_frame, open_socket, temp_dir,
};
use outpost_core::wire::{DaemonFrame, Environment};
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

/// Registers `machine` as `name` announcing `environments`; its context id.
fn register_announcing(
    server: &TestServer,
    machine: &Machine,
    name: &str,
    environments: &[&str],
) -> String {
    let body = json!({"name": name, "publicKey": machine.public_b64, "maxConcurrent": 2,
                      "environments": environments, "daemonVersion": "0.1.0"})
    .to_string();
    let token = bearer(&server.join().token);
    let answer = machine.send_with(
        server.addr(),
        "POST",
        "/v1/execution-contexts",
        body.as_bytes(),
        &machine.nonce(),
        &[("authorization", &token)],
    );
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    answer.json()["contextId"]
        .as_str()
        .expect("a context id")
        .to_owned()
}

/// One terminal has one runner: the machine holding its committed run. Another machine that
/// sends `pty.output` for it (three times) is refused: its bytes reach no viewer (the terminal
/// is still `starting`), and the server audits it once as `terminal.runner_refused` on the
/// holder's context, naming the refused machine and the holder with its connection. The
/// holder's own output then opens the terminal.
#[test]
fn a_second_runner_for_a_terminal_is_refused_naming_the_holder() {
    let dir = temp_dir("second-runner");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let holder_key = Machine::new(41);
    let spare_key = Machine::new(42);
    let holder_id = register_announcing(&server, &holder_key, "term-box", &["pty"]);
    let spare_id = register_announcing(&server, &spare_key, "spare-box", &["pty"]);
    let mut holder = Driver::with_environments(&server, vec![Environment::Pty]);
    let mut spare = Driver::with_environments(&server, vec![Environment::Pty]);
    // The terminal's run stays committed until the test ends it.
    holder.hold = true;
    holder.online(&server, &holder_key, "term-box");
    spare.online(&server, &spare_key, "spare-box");

    let opened = http(
        addr,
        "POST",
        "/v1/execution-contexts/term-box/terminals",
        &auth,
        b"{}",
    );
    assert_eq!(
        opened.status,
        201,
        "{}",
        String::from_utf8_lossy(&opened.body)
    );
    let terminal = opened.json()["terminalId"]
        .as_str()
        .expect("an id")
        .to_owned();
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while holder.executed.is_empty() {
        holder.pump(&server, &holder_key);
        assert!(
            StdInstant::now() < deadline,
            "the terminal's run was never committed"
        );
    }
    let run_id = holder.executed[0].clone();
    assert!(
        run_id.starts_with(&terminal),
        "{run_id} is {terminal}'s run"
    );
    let state = |server: &TestServer| {
        let listed = http(server.addr(), "GET", "/v1/terminals", &auth, b"").json();
        listed["terminals"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["terminalId"] == terminal.as_str()))
            .map(|t| t["state"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(state(&server), "starting");

    let intruder = DaemonFrame::PtyOutput {
        pty_id: run_id.clone(),
        data: outpost_core::b64::encode(b"not yours\r\n"),
    };
    for _ in 0..3 {
        spare.send_raw(&intruder);
    }
    // Its frames are handled before its hang-up: once it shows offline, all three were.
    spare
        .socket
        .take()
        .expect("connected")
        .close(None)
        .expect("a close");
    let refusals = |server: &TestServer| -> Vec<serde_json::Value> {
        let audit = http(server.addr(), "GET", "/v1/audit?limit=200", &auth, b"").json();
        audit["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["kind"] == "terminal.runner_refused")
            .cloned()
            .collect()
    };
    let deadline = StdInstant::now() + Duration::from_secs(30);
    loop {
        holder.pump(&server, &holder_key);
        let ctx = http(addr, "GET", "/v1/execution-contexts/spare-box", &auth, b"").json();
        if ctx["online"] == false && !refusals(&server).is_empty() {
            break;
        }
        assert!(
            StdInstant::now() < deadline,
            "the spare machine never went: {ctx}"
        );
    }
    let refused = refusals(&server);
    assert_eq!(refused.len(), 1, "audited once: {refused:?}");
    assert_eq!(refused[0]["contextId"], holder_id.as_str(), "{refused:?}");
    let detail = refused[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with(&format!(
            "{terminal} from {spare_id}: held by {holder_id} on connection "
        )),
        "{detail}"
    );
    assert_eq!(
        state(&server),
        "starting",
        "the intruder's bytes reached no one"
    );

    holder.send_raw(&DaemonFrame::PtyOutput {
        pty_id: run_id,
        data: outpost_core::b64::encode(b"$ "),
    });
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while state(&server) != "open" {
        holder.pump(&server, &holder_key);
        assert!(
            StdInstant::now() < deadline,
            "the holder's output never arrived"
        );
    }
    assert_eq!(refusals(&server).len(), 1);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
