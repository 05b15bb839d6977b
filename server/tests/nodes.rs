//! `GET /v1/nodes` across nodes: two servers over one PostgreSQL database (the second with a
//! copy of the first's keys, admin token and join) list each other by their heartbeats, a
//! daemon connected to one shows among that node's sessions on both, and a node that stops
//! leaves the list at once; a signed request spent on one node is a replay on the other.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::driver::Driver;
use common::{Machine, TestServer, bearer, http, temp_dir};
use outpost_core::executor::Registry;
use outpost_server::{Database, Limits};
use serde_json::Value;

fn nodes(server: &TestServer) -> Vec<Value> {
    let answer = http(
        server.addr(),
        "GET",
        "/v1/nodes",
        &[("authorization", &bearer(&server.admin()))],
        b"",
    );
    assert_eq!(answer.status, 200);
    answer.json()["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls `server`'s list (a heartbeat is written every 2 s) until `done` holds, 20 s at most.
fn nodes_until(server: &TestServer, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = nodes(server);
        if done(&list) {
            return list;
        }
        assert!(Instant::now() < deadline, "{what}: {list:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start(state: &Path, url: &str) -> TestServer {
    TestServer::start_on(
        state,
        Registry::new(),
        Vec::new(),
        Limits::default(),
        Database::Postgres(url.to_owned()),
    )
}

#[test]
fn nodes_over_one_database_list_each_other_and_one_that_stops_leaves_at_once() {
    let url = common::postgres::database_for(&temp_dir("nodes-database"));
    let a_dir = temp_dir("node-a");
    let a = start(&a_dir, &url);
    // The second node: the same keys and tokens, its own folder.
    let b_dir = temp_dir("node-b");
    std::fs::create_dir_all(&b_dir).expect("b's folder");
    for file in ["keys.json", "admin.token", "join"] {
        std::fs::copy(a_dir.join(file), b_dir.join(file)).expect("a state file");
    }
    let b = start(&b_dir, &url);
    assert_eq!(a.admin(), b.admin());

    let a_url = a.running().url.clone();
    let b_url = b.running().url.clone();
    for (here, there, server) in [(&a_url, &b_url, &a), (&b_url, &a_url, &b)] {
        let list = nodes_until(server, "the other node is listed", |l| l.len() == 2);
        assert_eq!(list[0]["this"], true, "the answering node first");
        assert_eq!(&list[0]["url"], here.as_str());
        assert_eq!(list[1]["this"], false);
        assert_eq!(&list[1]["url"], there.as_str());
        assert_ne!(list[0]["nodeId"], list[1]["nodeId"]);
    }

    // A daemon connected to b: b's session, as b shows it and, by b's heartbeat, as a does.
    let machine = Machine::new(77);
    assert_eq!(machine.register(&b, "box").status, 201);
    let mut daemon = Driver::new(&b);
    daemon.online(&b, &machine, "box");
    let here = nodes(&b);
    assert_eq!(here[0]["sessions"][0]["name"], "box", "{here:?}");
    let seen = nodes_until(&a, "b's session seen from a", |l| {
        l.get(1).is_some_and(|n| n["sessions"][0]["name"] == "box")
    });
    assert!(
        seen[0]["sessions"].as_array().unwrap().is_empty(),
        "none on a"
    );
    drop(daemon);

    // A signed request (as a load balancer in front of both would pass it: the same host) is
    // spent once across the nodes.
    let other = Machine::new(78);
    let token = bearer(&a.join().token);
    let request = other.signed_request(
        a.addr(),
        "POST",
        "/v1/execution-contexts",
        &other.register_body("box2"),
        &other.nonce(),
        &[("authorization", &token)],
    );
    let send = |to: &TestServer| {
        common::exchange(
            std::net::TcpStream::connect(to.addr()).expect("connect"),
            &request,
        )
    };
    let first = send(&a);
    assert_eq!(first.status, 201, "spent on a: {}", first.json());
    let again = send(&b);
    assert_eq!(
        (again.status, again.code()),
        (401, "nonce_replayed".to_owned()),
        "a replay on b"
    );

    b.stop();
    let after = nodes(&a);
    assert_eq!(after.len(), 1, "a stopped node leaves at once: {after:?}");
    assert_eq!(after[0]["this"], true);
    a.stop();
}
