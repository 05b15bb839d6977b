//! Executions that have not ended are bounded per user, per context and by the bytes of
//! inline capabilities one user's hold: one more is answered 429 `queue_full` with
//! `Retry-After`, an end makes room, and a restarted server counts what it restored
//! (PROTOCOL §11.4).

mod common;

use common::{Answer, Machine, TestServer, bearer, http, inline, temp_dir};
use outpost_core::b64;
use outpost_server::Limits;
use serde_json::{Value, json};

fn queue(server: &TestServer, capability: Value, context: &str) -> Answer {
    let body = json!({"capability": capability, "context": context,
                      "whenOffline": "queue", "queueMinutes": 60});
    http(
        server.addr(),
        "POST",
        "/v1/executions",
        &[("authorization", &bearer(&server.admin()))],
        body.to_string().as_bytes(),
    )
}

fn queued(answer: &Answer) -> String {
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.json()["status"], "pending");
    answer.json()["executionId"]
        .as_str()
        .expect("an id")
        .to_owned()
}

fn assert_full(answer: &Answer, says: &str) {
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (429, "queue_full"),
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.header("retry-after"), Some("30"));
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains(says), "{message}");
}

fn limits() -> Limits {
    Limits {
        pending_per_user: 8,
        pending_per_context: 5,
        pending_bytes_per_user: 64 * 1024,
        ..Limits::default()
    }
}

#[test]
fn executions_not_ended_are_bounded_per_context_and_per_user_and_an_end_makes_room() {
    let state = temp_dir("queue-caps");
    let server = TestServer::start_limited(&state, limits());
    for (seed, name) in [(31, "box-a"), (32, "box-b")] {
        assert_eq!(Machine::new(seed).register(&server, name).status, 201);
    }
    let mut on_a: Vec<String> = (0..5)
        .map(|_| queued(&queue(&server, inline("echo a"), "box-a")))
        .collect();
    assert_full(&queue(&server, inline("echo a"), "box-a"), "this context");
    // Another context of the same user still has room, up to the user's bound.
    let on_b: Vec<String> = (0..3)
        .map(|_| queued(&queue(&server, inline("echo b"), "box-b")))
        .collect();
    assert_full(&queue(&server, inline("echo b"), "box-b"), "8 executions");
    // A refused execute stored nothing.
    let runs = http(
        server.addr(),
        "GET",
        "/v1/runs?limit=500",
        &[("authorization", &bearer(&server.admin()))],
        b"",
    );
    assert_eq!(runs.json()["runs"].as_array().map(Vec::len), Some(8));
    // An end makes room.
    let cancelled = http(
        server.addr(),
        "POST",
        &format!("/v1/executions/{}/cancel", on_a.remove(0)),
        &[("authorization", &bearer(&server.admin()))],
        b"",
    );
    assert_eq!(cancelled.json()["status"], "cancelled");
    on_a.push(queued(&queue(&server, inline("echo a"), "box-a")));
    assert_full(&queue(&server, inline("echo a"), "box-a"), "8 executions");

    // A restarted server counts the executions it restored.
    let state = server.state.clone();
    server.stop();
    let server = TestServer::start_limited(&state, limits());
    assert_full(&queue(&server, inline("echo b"), "box-b"), "8 executions");
    let cancelled = http(
        server.addr(),
        "POST",
        &format!("/v1/executions/{}/cancel", on_b[0]),
        &[("authorization", &bearer(&server.admin()))],
        b"",
    );
    assert_eq!(cancelled.json()["status"], "cancelled");
    assert_full(&queue(&server, inline("echo a"), "box-a"), "this context");
    queued(&queue(&server, inline("echo b"), "box-b"));
    server.stop();
}

#[test]
fn the_inline_capabilities_one_user_keeps_waiting_are_bounded_in_bytes() {
    let state = temp_dir("queue-bytes");
    let server = TestServer::start_limited(&state, limits());
    assert_eq!(Machine::new(33).register(&server, "box-c").status, 201);
    let big = |fill: u8| {
        let mut capability = inline("echo big");
        capability["files"]
            .as_array_mut()
            .expect("files")
            .push(json!({"path": "data.bin", "contentB64": b64::encode(&[fill; 30 * 1024])}));
        capability
    };
    // Two of about 40 KiB of base64 each would hold 80 KiB: the second is refused.
    queued(&queue(&server, big(1), "box-c"));
    assert_full(
        &queue(&server, big(2), "box-c"),
        "bytes of inline capabilities",
    );
    // A small one still fits.
    queued(&queue(&server, inline("echo small"), "box-c"));
    server.stop();
}
