//! A daemon's session over the real WebSocket: the core's `Daemon` driven by hand
//! ([`common::driver`]) runs an execution to `exited`; oversized messages close
//! with 1009; revoke sends `revoked`, closes with 4001 and refuses the key from then on; a
//! second machine speaking for a terminal another holds is refused and the holder named.

mod common;

use std::time::{Duration, Instant as StdInstant};

use common::driver::Driver;
use common::{
    Machine, TestServer, bearer, close_code, http, inline, next_frame, online_context, open_socket,
    say_hello, temp_dir,
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
    // The answer, made from the row the end's commit returned, is what a read of it shows.
    let id = execution["executionId"].as_str().expect("an id");
    let read = http(
        addr,
        "GET",
        &format!("/v1/executions/{id}"),
        &[("authorization", &admin)],
        b"",
    );
    assert_eq!(read.json(), execution);
    // Counted before the waiting request is woken; over PostgreSQL, the end's notice may
    // wake it first.
    let metrics = metrics_showing(addr, "outpost_runs_total{status=\"exited\"} 1");
    assert!(metrics.contains("outpost_connected_daemons 1"), "{metrics}");
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
    // A run asked of it is refused saying it was revoked, not that no such context exists.
    let body = json!({"capability": inline("echo hi\n"), "context": "gone-box"}).to_string();
    let refused = http(addr, "POST", "/v1/executions", &auth, body.as_bytes());
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (409, "context_revoked"),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("gone-box was revoked")),
        "{}",
        String::from_utf8_lossy(&refused.body)
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
        pty_id: run_id.clone().into(),
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
        pty_id: run_id.into(),
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

/// A daemon written from the document alone, by hand: it says hello with 2 slots and never
/// announces again, and it lets offers go unanswered. The grant's cap of 1 applies at once;
/// an unanswered offer is withdrawn after 5 s and passes as busy; a result for a run it never
/// held is acknowledged, not recorded, and counted.
#[test]
fn a_hand_written_daemon_meets_the_live_cap_the_offer_deadline_and_unknown_results() {
    let dir = temp_dir("hand-daemon");
    let server = TestServer::start(&dir);
    let machine = Machine::new(23);
    assert_eq!(machine.register(&server, "hand").status, 201);
    let (ticket, _) = machine.ticket(&server);
    let mut socket = open_socket(server.addr(), &ticket).expect("the socket opens");
    let frame_type = |bytes: &[u8]| -> (String, serde_json::Value) {
        let v: serde_json::Value = serde_json::from_slice(bytes).expect("json");
        (v["type"].as_str().unwrap_or_default().to_owned(), v)
    };
    assert_eq!(frame_type(&next_frame(&mut socket)).0, "welcome");
    say_hello(&mut socket);
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let addr = server.addr();
    let context = || http(addr, "GET", "/v1/execution-contexts/hand", &auth, b"").json();
    assert_eq!(online_context(addr, &auth, "hand")["slotsTotal"], 2);
    let patched = http(
        addr,
        "PATCH",
        "/v1/execution-contexts/hand/grant",
        &auth,
        br#"{"egress":{"mode":"none"},"limits":{"maxConcurrent":1}}"#,
    );
    assert_eq!(patched.status, 200, "{}", patched.json());
    assert_eq!(frame_type(&next_frame(&mut socket)).0, "grant.update");
    assert_eq!(
        context()["slotsTotal"],
        1,
        "capped at once, without a new hello"
    );
    let submit = || {
        let body = json!({"capability": inline("echo hi\n"), "context": "hand"}).to_string();
        let answer = http(addr, "POST", "/v1/executions", &auth, body.as_bytes());
        assert_eq!(answer.status, 201, "{}", answer.json());
        answer.json()["executionId"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let first = submit();
    let second = submit();
    let (kind, offer) = frame_type(&next_frame(&mut socket));
    assert_eq!(kind, "run.request");
    let execution =
        |id: &str| http(addr, "GET", &format!("/v1/executions/{id}"), &auth, b"").json();
    let e = execution(&second);
    assert_eq!(e["status"], "failed", "the one slot is taken: {e}");
    assert_eq!(e["error"]["code"], "execution_context_busy", "{e}");
    // The offer goes unanswered: withdrawn after 5 s, the execution passes as busy.
    let asked = StdInstant::now();
    let deadline = StdInstant::now() + Duration::from_secs(20);
    let e = loop {
        let e = execution(&first);
        if e["status"] != "pending" {
            break e;
        }
        assert!(StdInstant::now() < deadline, "{e}");
        // The poll's pace: the execution is read again.
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(e["status"], "failed", "{e}");
    assert_eq!(e["error"]["code"], "execution_context_busy", "{e}");
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "{:?}",
        asked.elapsed()
    );
    // Ended by the offer's timer, and nothing has been read from this socket since (no
    // pong, no frame has reached the server): the gauge follows the end all the same.
    metrics_showing(addr, "outpost_executions_pending 0");
    let (kind, cancel) = frame_type(&next_frame(&mut socket));
    assert_eq!(
        (kind.as_str(), &cancel["runId"]),
        ("run.cancel", &offer["runId"])
    );
    assert_eq!(cancel["reason"], "offer_unanswered");
    // A result for a run this machine never held: acknowledged, counted, not recorded.
    let stranger = json!({"type": "run.result", "runId": "ex_nobody.1", "status": "exited",
        "exitCode": 0, "stdout": "", "stderr": "", "truncated": false,
        "timing": {"queueMs": 0, "setupMs": 0, "executeMs": 0, "daemonMs": 0}});
    socket
        .send(Message::text(stranger.to_string()))
        .expect("result");
    let (kind, ack) = frame_type(&next_frame(&mut socket));
    assert_eq!(
        (kind.as_str(), &ack["runId"]),
        ("run.ack", &json!("ex_nobody.1"))
    );
    // Counted as the ack leaves, which may reach this socket first.
    metrics_showing(addr, "outpost_unknown_results_total 1");
    let runs = http(addr, "GET", "/v1/runs?limit=500", &auth, b"").json();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "{runs}");
}

/// The server's metrics once they show `line` (read again until then, 10 s at most).
fn metrics_showing(addr: std::net::SocketAddr, line: &str) -> String {
    let deadline = StdInstant::now() + Duration::from_secs(10);
    loop {
        let metrics = http(addr, "GET", "/metrics", &[], b"");
        let text = String::from_utf8_lossy(&metrics.body).into_owned();
        if text.contains(line) {
            return text;
        }
        assert!(StdInstant::now() < deadline, "no {line:?} in {text}");
        // The poll's pace: the metrics are read again.
        std::thread::sleep(Duration::from_millis(20));
    }
}
