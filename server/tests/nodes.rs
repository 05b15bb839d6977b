//! `GET /v1/nodes` across nodes: two servers over one PostgreSQL database (the second with a
//! copy of the first's `keys.json` alone) list each other by their heartbeats, a
//! daemon connected to one shows among that node's sessions on both, and a node that stops
//! leaves the list at once; a signed request spent on one node is a replay on the other.

mod common;

use std::path::{Path, PathBuf};
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

/// Two nodes over one new database: `a`, and `b` with a copy of a's `keys.json` (its root
/// key) in a folder of its own — the frame keys, admin token and join come from the database.
/// Returns the database's URL and both nodes with their folders.
fn two_nodes(tag: &str) -> (String, (PathBuf, TestServer), (PathBuf, TestServer)) {
    let url = common::postgres::database_for(&temp_dir(&format!("{tag}-database")));
    let a_dir = temp_dir(&format!("{tag}-a"));
    let a = start(&a_dir, &url);
    let b_dir = temp_dir(&format!("{tag}-b"));
    std::fs::create_dir_all(&b_dir).expect("b's folder");
    std::fs::copy(a_dir.join("keys.json"), b_dir.join("keys.json")).expect("a's keys.json");
    let b = start(&b_dir, &url);
    (url, (a_dir, a), (b_dir, b))
}

#[test]
fn nodes_over_one_database_list_each_other_and_one_that_stops_leaves_at_once() {
    let (_, (a_dir, a), (b_dir, b)) = two_nodes("nodes");
    // b had only a's keys.json: the database gave it the same admin token, join token and
    // frame keys, so both publish one key set.
    assert_eq!(a.admin(), b.admin());
    assert_eq!(a.join().token, b.join().token);
    let key_set = |server: &TestServer| {
        http(
            server.addr(),
            "GET",
            "/v1/execution-contexts/server-keys",
            &[],
            b"",
        )
        .body
    };
    assert_eq!(key_set(&a), key_set(&b), "one key set");
    let keys = |dir: &Path| std::fs::read(dir.join("keys.json")).expect("keys.json");
    assert_eq!(keys(&a_dir), keys(&b_dir));

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
    // a lists it as b does: since when it is online, and what its daemon announced.
    let (on_b, on_a) = (&here[0]["sessions"][0], &seen[1]["sessions"][0]);
    assert!(on_b["onlineSince"].as_u64().is_some(), "{on_b}");
    for field in ["onlineSince", "features", "paused", "slotsTotal"] {
        assert_eq!(on_a[field], on_b[field], "{field}: {on_a} against {on_b}");
    }
    // And so does the context as a shows it.
    let context = http(
        a.addr(),
        "GET",
        "/v1/execution-contexts/box",
        &[("authorization", &bearer(&a.admin()))],
        b"",
    )
    .json();
    assert_eq!(context["online"], true, "{context}");
    assert_eq!(context["onlineSince"], on_b["onlineSince"], "{context}");
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

/// A node whose database stops answering lets its daemons go once its heartbeat has gone
/// unwritten for 10 s: the daemon's socket is closed with 1001 and a new connection is refused
/// 503 `node_cut_off`; once the database answers again and a heartbeat is written, the node
/// takes daemons again.
#[test]
fn a_node_cut_off_from_its_database_lets_its_daemons_go_until_it_writes_its_heartbeat_again() {
    let mut pg = common::postgres::Postgres::start();
    let url = pg.database("cut_off");
    let dir = temp_dir("node-cut-off");
    let server = start(&dir, &url);
    let machine = Machine::new(91);
    assert_eq!(machine.register(&server, "box").status, 201);
    let mut daemon = Driver::new(&server);
    daemon.online(&server, &machine, "box");
    let connect = |server: &TestServer| {
        http(
            server.addr(),
            "GET",
            "/v1/execution-contexts/connect?ticket=otk_not-a-ticket",
            &[],
            b"",
        )
    };
    assert_eq!(
        connect(&server).code(),
        "ticket_malformed",
        "taking daemons"
    );

    pg.kill();
    let killed = Instant::now();
    let socket = daemon.socket.as_mut().expect("connected");
    let close = loop {
        match socket.read() {
            Ok(tungstenite::Message::Close(frame)) => break frame,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("the socket ended without a close: {e}"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(40),
            "no close within 40 s of the database's end"
        );
    };
    let close = close.expect("a close frame");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    assert!(
        killed.elapsed() >= Duration::from_secs(8),
        "not before its heartbeat went unwritten for the bound: {:?}",
        killed.elapsed()
    );
    let refused = connect(&server);
    assert_eq!(
        (refused.status, refused.code()),
        (503, "node_cut_off".to_owned()),
        "{}",
        refused.json()
    );
    let health = http(server.addr(), "GET", "/healthz", &[], b"");
    assert_eq!(
        (health.status, health.code()),
        (503, "node_cut_off".to_owned()),
        "a load balancer sees the node unhealthy"
    );

    pg.restart();
    let back = Instant::now();
    loop {
        let answer = connect(&server);
        if answer.code() == "ticket_malformed" {
            break;
        }
        assert_eq!(answer.code(), "node_cut_off", "{}", answer.json());
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "still cut off 30 s after the database came back"
        );
        // The pace of a check with no change signal to wait on: a heartbeat every 2 s.
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(http(server.addr(), "GET", "/healthz", &[], b"").status, 200);
    server.stop();
}

/// Two nodes and a machine whose daemon moves from one to the other mid-run: the node it
/// reconnects to takes the machine (its epoch moves on) and adopts the run the first node
/// committed, which ends once with the daemon's result; the first node lets the machine go
/// (by the owners' table, within a heartbeat or two) and from then on hands every execute for
/// it to the owner — named, waited on, or by a chain set through the other node — and passes
/// its cancels on; every run runs once.
#[test]
fn a_machine_that_moves_to_another_node_mid_run_ends_its_run_there_once() {
    let (_, (_, a), (_, b)) = two_nodes("moves");
    let auth = [("authorization", bearer(&a.admin()))];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let machine = Machine::new(93);
    assert_eq!(machine.register(&a, "box").status, 201);
    let mut daemon = Driver::new(&a);
    daemon.hold = true;
    daemon.online(&a, &machine, "box");

    let submit = |to: &TestServer, context: &str| {
        let body =
            serde_json::json!({"capability": common::inline("echo hi\n"), "context": context})
                .to_string();
        let answer = http(to.addr(), "POST", "/v1/executions", &auth, body.as_bytes());
        assert_eq!(answer.status, 201, "{}", answer.json());
        answer.json()["executionId"]
            .as_str()
            .expect("an id")
            .to_owned()
    };
    let execution = |on: &TestServer, id: &str| {
        http(
            on.addr(),
            "GET",
            &format!("/v1/executions/{id}"),
            &auth,
            b"",
        )
        .json()
    };
    let held = submit(&a, "box");
    daemon.pump_until(
        &a,
        &machine,
        "the run committed on a",
        Duration::from_secs(20),
        |d| d.executed.len() == 1,
    );
    assert_eq!(
        execution(&b, &held)["status"],
        "running",
        "b reads a's record"
    );

    // The daemon's connection to a breaks; it reconnects to b, holding the run.
    daemon.lose_socket();
    daemon.online(&b, &machine, "box");
    let run_id = daemon.executed[0].clone();
    daemon.finish(&run_id);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        daemon.pump(&b, &machine);
        let seen = execution(&a, &held);
        if seen["status"] == "exited" {
            assert_eq!(seen["stdout"], "hi\n", "{seen}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run never ended on b: {seen}"
        );
    }
    assert_eq!(
        daemon.executed,
        [run_id],
        "run once, on the daemon, whatever node"
    );

    // a lets box go by the owners' table (until then box is merely offline there); from then
    // on an execute submitted to a is handed to b and runs on the daemon.
    daemon.hold = false;
    let until_final = |daemon: &mut Driver, on: &TestServer, id: &str| loop {
        daemon.pump(&b, &machine);
        let seen = execution(on, id);
        if seen["status"] != "pending" && seen["status"] != "running" {
            break seen;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let id = submit(&a, "box");
        let ended = until_final(&mut daemon, &a, &id);
        if ended["status"] == "exited" {
            assert_eq!(ended["stdout"], "hi\n", "{ended}");
            break;
        }
        assert_eq!(
            ended["error"]["code"], "execution_context_offline",
            "{ended}"
        );
        assert!(
            Instant::now() < deadline,
            "a never handed box's runs to b: {ended}"
        );
    }
    assert_eq!(daemon.executed.len(), 2, "each execution ran once");

    // An execute with `wait` on a answers when b ends the run (b's commit wakes a).
    let addr = a.addr();
    let token = bearer(&a.admin());
    let waiting = std::thread::spawn(move || {
        let body = serde_json::json!({
            "capability": common::inline("echo hi\n"), "context": "box", "wait": true
        })
        .to_string();
        http(
            addr,
            "POST",
            "/v1/executions",
            &[("authorization", &token)],
            body.as_bytes(),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !waiting.is_finished() {
        daemon.pump(&b, &machine);
        assert!(
            Instant::now() < deadline,
            "a's waiting request never answered"
        );
    }
    let answer = waiting.join().expect("the waiting request");
    assert_eq!(answer.status, 201, "{}", answer.json());
    assert_eq!(answer.json()["status"], "exited", "{}", answer.json());
    assert_eq!(daemon.executed.len(), 3);

    // A chain set through b reaches a's dispatcher by the database: a routes by it, and
    // hands the run to b.
    let chain = serde_json::json!({"chain": ["box"]}).to_string();
    let set = http(b.addr(), "PUT", "/v1/chain", &auth, chain.as_bytes());
    assert_eq!(set.status, 200, "{}", set.json());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = serde_json::json!({"capability": common::inline("echo hi\n")}).to_string();
        let answer = http(a.addr(), "POST", "/v1/executions", &auth, body.as_bytes());
        assert_eq!(answer.status, 201, "{}", answer.json());
        let id = answer.json()["executionId"]
            .as_str()
            .expect("an id")
            .to_owned();
        let ended = until_final(&mut daemon, &a, &id);
        if ended["ranOn"]["name"] == "box" {
            assert_eq!(ended["status"], "exited", "{ended}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a never followed b's chain: {ended}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(daemon.executed.len(), 4);

    // A cancel asked of a, for a run a handed to b, reaches b: the run ends cancelled.
    daemon.hold = true;
    let held = submit(&a, "box");
    daemon.pump_until(
        &b,
        &machine,
        "the fifth run committed",
        Duration::from_secs(20),
        |d| d.executed.len() == 5,
    );
    let path = format!("/v1/executions/{held}/cancel");
    assert_eq!(http(a.addr(), "POST", &path, &auth, b"").status, 200);
    let ended = until_final(&mut daemon, &a, &held);
    assert_eq!(ended["status"], "cancelled", "{ended}");
    assert_eq!(daemon.executed.len(), 5, "nothing ran twice");
    b.stop();
    a.stop();
}

/// A node that dies has its machines taken by a live node, judged by the database's clock:
/// the live node's epoch fences the dead one out, it adopts the run the dead node committed,
/// and when the daemon comes back to it the run ends once with its result.
#[test]
fn a_live_node_takes_the_machines_and_runs_of_a_node_that_died() {
    let (url, (a_dir, a), (b_dir, b)) = two_nodes("dies");
    let auth_value = bearer(&a.admin());
    let auth = [("authorization", auth_value.as_str())];
    let machine = Machine::new(94);
    assert_eq!(machine.register(&b, "box").status, 201);
    let mut daemon = Driver::new(&b);
    daemon.hold = true;
    daemon.online(&b, &machine, "box");
    let body = serde_json::json!({"capability": common::inline("echo hi\n"), "context": "box"})
        .to_string();
    let answer = http(b.addr(), "POST", "/v1/executions", &auth, body.as_bytes());
    assert_eq!(answer.status, 201, "{}", answer.json());
    let held = answer.json()["executionId"]
        .as_str()
        .expect("an id")
        .to_owned();
    daemon.pump_until(
        &b,
        &machine,
        "the run committed on b",
        Duration::from_secs(20),
        |d| d.executed.len() == 1,
    );
    let node_of = |dir: &Path| {
        std::fs::read_to_string(dir.join("node-id"))
            .expect("the node's id")
            .trim()
            .to_owned()
    };
    let (a_id, b_id) = (node_of(&a_dir), node_of(&b_dir));
    let owner = || {
        common::postgres::psql(
            &url,
            "SELECT o.node_id FROM context_owner o JOIN contexts c ON c.id = o.context_id
             WHERE c.name = 'box'",
        )
        .trim()
        .to_owned()
    };
    assert_eq!(
        owner(),
        b_id,
        "b owns box while its daemon is connected there"
    );

    // b dies (its row goes with it: the database's clock judges it dead at once).
    b.stop();
    daemon.lose_socket();
    let died = Instant::now();
    while owner() != a_id {
        assert!(
            died.elapsed() < Duration::from_secs(20),
            "a never took box: {}",
            owner()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "a took the dead node's machine {:?} after b stopped",
        died.elapsed()
    );
    let seen = http(
        a.addr(),
        "GET",
        &format!("/v1/executions/{held}"),
        &auth,
        b"",
    )
    .json();
    assert_eq!(
        seen["status"], "running",
        "the committed run is held, not lost: {seen}"
    );

    // The daemon comes back, to a, holding the run: it ends once, with its result.
    daemon.online(&a, &machine, "box");
    let run_id = daemon.executed[0].clone();
    daemon.finish(&run_id);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        daemon.pump(&a, &machine);
        let seen = http(
            a.addr(),
            "GET",
            &format!("/v1/executions/{held}"),
            &auth,
            b"",
        )
        .json();
        if seen["status"] != "running" {
            assert_eq!(seen["status"], "exited", "{seen}");
            assert_eq!(seen["stdout"], "hi\n", "{seen}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run never ended on a: {seen}"
        );
    }
    assert_eq!(daemon.executed, [run_id], "run once");
    a.stop();
}

/// A grant update and a revoke asked of a node that does not own the machine are carried out
/// by the node that does, and answered once committed: the daemon connected there hears both.
#[test]
fn a_grant_and_a_revoke_asked_of_another_node_reach_the_machines_owner() {
    let (_, (_, a), (_, b)) = two_nodes("owner-requests");
    let auth_value = bearer(&a.admin());
    let auth = [("authorization", auth_value.as_str())];
    let machine = Machine::new(95);
    assert_eq!(machine.register(&b, "box").status, 201);
    let mut daemon = Driver::new(&b);
    daemon.online(&b, &machine, "box");
    let context =
        |on: &TestServer| http(on.addr(), "GET", "/v1/execution-contexts/box", &auth, b"").json();
    let before = context(&b)["grantVersion"]
        .as_u64()
        .expect("a grant version");
    let mut grant = context(&b)["grant"].clone();
    grant["limits"]["maxConcurrent"] = serde_json::json!(1);
    let body = grant.to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        // Until a learns that box is b's, box is simply a's to change.
        let answer = std::thread::scope(|s| {
            let request = s.spawn(|| {
                http(
                    a.addr(),
                    "PATCH",
                    "/v1/execution-contexts/box/grant",
                    &auth,
                    body.as_bytes(),
                )
            });
            while !request.is_finished() {
                daemon.pump(&b, &machine);
            }
            request.join().expect("the grant request")
        });
        if answer.status == 200 {
            break answer;
        }
        assert!(Instant::now() < deadline, "{}", answer.json());
    };
    assert_eq!(
        answer.json()["grantVersion"],
        before + 1,
        "{}",
        answer.json()
    );
    assert_eq!(
        context(&b)["grant"]["limits"]["maxConcurrent"],
        1,
        "b holds it"
    );

    // A revoke asked of a: b carries it out, and the daemon connected to b hears it.
    let revoked = std::thread::scope(|s| {
        let request = s.spawn(|| {
            http(
                a.addr(),
                "POST",
                "/v1/execution-contexts/box/revoke",
                &auth,
                b"",
            )
        });
        while !request.is_finished() {
            daemon.pump(&b, &machine);
        }
        request.join().expect("the revoke request")
    });
    assert_eq!(revoked.status, 200, "{}", revoked.json());
    assert_eq!(context(&a)["revoked"], true);
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.socket.is_some() {
        daemon.pump(&b, &machine);
        assert!(
            Instant::now() < deadline,
            "the daemon never heard the revoke"
        );
    }
    b.stop();
    a.stop();
}

/// A daemon whose ticket request reaches one node and whose WebSocket reaches another (a
/// load balancer that keeps no client on one node): the second node spends the shared
/// ticket, takes the machine and opens the session; the ticket opens nothing a second time,
/// on either node.
#[test]
fn a_ticket_issued_by_one_node_opens_the_socket_on_another_once() {
    let (url, (_, a), (_, b)) = two_nodes("shared-tickets");
    let machine = Machine::new(96);
    assert_eq!(machine.register(&a, "box").status, 201);
    let mut daemon = Driver::new(&b);
    daemon.tickets_from = Some(a.addr());
    daemon.online(&b, &machine, "box");
    let nodes_b = nodes(&b);
    assert_eq!(
        nodes_b[0]["sessions"][0]["name"], "box",
        "connected to b: {nodes_b:?}"
    );

    // Spent: the same ticket opens nothing again, on the node that issued it or the other.
    let (ticket, _) = machine.ticket(&a);
    let first = common::open_socket(b.addr(), &ticket);
    assert!(first.is_ok(), "the first use opens");
    // The upgrade is answered before the batch that spends the shared copy commits: once the
    // copy is gone, b has spent it.
    let (ticket_id, _) = outpost_core::ticket::connect_ticket_digest(&ticket).expect("a ticket");
    let kept = format!("SELECT count(*) FROM connect_tickets WHERE id = '{ticket_id}'");
    let deadline = Instant::now() + Duration::from_secs(20);
    while common::postgres::psql(&url, &kept).trim() != "0" {
        assert!(Instant::now() < deadline, "b never spent the shared copy");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(first);
    for (node, name) in [(&a, "a"), (&b, "b")] {
        match common::open_socket(node.addr(), &ticket) {
            // Refused before the upgrade: no node holds it any more.
            Err((status, body)) => assert_eq!(
                (
                    status,
                    serde_json::from_slice::<Value>(&body).unwrap()["error"]["code"].clone()
                ),
                (401, Value::from("ticket_unknown")),
                "{name}"
            ),
            // Or the node that issued it still holds its own copy: the shared one is spent.
            Ok(mut again) => {
                let closed = loop {
                    match again.read() {
                        Ok(tungstenite::Message::Close(frame)) => break frame,
                        Ok(_) => {}
                        Err(e) => panic!("{name}: the socket ended without a close: {e}"),
                    }
                };
                let closed = closed.expect("a close frame");
                assert_eq!(u16::from(closed.code), 1008, "{name}: {closed:?}");
            }
        }
    }
    b.stop();
    a.stop();
}

#[test]
fn a_bundle_uploaded_to_one_node_is_fetched_whole_from_another() {
    use sha2::Digest as _;
    let (_, (a_dir, a), (b_dir, b)) = two_nodes("bundles");
    let manifest = "name: shared\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";
    let files = [outpost_core::wire::InlineFile {
        path: "run.sh".into(),
        content_b64: outpost_core::b64::encode(&[b'#'; 200_000]),
    }];
    let bytes = outpost_core::wire::encode_bundle(manifest, &files);
    let sha = hex::encode(sha2::Sha256::digest(&bytes));
    let put = http(
        a.addr(),
        "PUT",
        &format!("/v1/bundles/{sha}"),
        &[("authorization", &bearer(&a.admin()))],
        &bytes,
    );
    assert_eq!(put.status, 201, "{}", put.code());
    let on_b = b_dir.join("bundles").join(&sha);
    assert!(
        a_dir.join("bundles").join(&sha).exists(),
        "a took the upload"
    );
    assert!(!on_b.exists(), "b has no file of it yet");
    // A daemon connected to b fetches it there: b writes its file from the row, once.
    let machine = Machine::new(81);
    assert_eq!(machine.register(&b, "fetcher").status, 201);
    let path = format!("/v1/execution-contexts/bundles/{sha}");
    for _ in 0..2 {
        let fetched = machine.send_with(b.addr(), "GET", &path, b"", &machine.nonce(), &[]);
        assert_eq!(fetched.status, 200, "{}", fetched.code());
        assert_eq!(fetched.body, bytes, "the bytes a took");
    }
    assert_eq!(std::fs::read(&on_b).expect("b's file"), bytes);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&on_b).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // An unknown digest is still unknown on either node.
    let unknown = format!("/v1/execution-contexts/bundles/{}", "ab".repeat(32));
    let answer = machine.send_with(b.addr(), "GET", &unknown, b"", &machine.nonce(), &[]);
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (404, "bundle_unknown")
    );
}

#[test]
fn a_wait_registered_through_another_node_reaches_the_connected_daemon_at_once() {
    let (_, (_, a), (_, b)) = two_nodes("waits");
    let machine = Machine::new(83);
    assert_eq!(machine.register(&a, "box").status, 201);
    let mut daemon = Driver::new(&b);
    daemon.online(&b, &machine, "box");
    // Registered through a, which does not own box: b sends it on the daemon's socket, with
    // no reconnection (before, it waited for the machine's next connection).
    let expires = (common::now_secs() + 3600) * 1000;
    let body = serde_json::json!({"context": "box", "condition": "async () => false",
                                  "intervalMs": 1000, "expiresAtMs": expires});
    let answer = http(
        a.addr(),
        "POST",
        "/v1/waits",
        &[("authorization", &bearer(&a.admin()))],
        body.to_string().as_bytes(),
    );
    assert_eq!(answer.status, 201, "{}", answer.json());
    let id = answer.json()["waitId"].as_str().expect("an id").to_owned();
    let session = daemon
        .socket
        .as_ref()
        .map(|s| s.get_ref().local_addr().ok());
    daemon.pump_until(
        &b,
        &machine,
        "the wait to reach the daemon on b",
        Duration::from_secs(10),
        |d| d.waits.contains(&id),
    );
    assert_eq!(
        daemon
            .socket
            .as_ref()
            .map(|s| s.get_ref().local_addr().ok()),
        session,
        "on the socket it had"
    );
}

#[test]
fn a_node_without_this_databases_root_key_is_refused_and_names_the_file_to_copy() {
    let (url, (_, a), _) = two_nodes("roots");
    // A state folder of its own with no keys.json: it would make a root key of its own.
    let bare = temp_dir("roots-bare");
    let try_start = |dir: &Path| {
        TestServer::try_start_on(
            dir,
            Registry::new(),
            Vec::new(),
            Limits::default(),
            Database::Postgres(url.clone()),
        )
        .map(TestServer::stop)
    };
    let text = try_start(&bare)
        .expect_err("a node without keys.json is refused")
        .to_string();
    assert!(
        text.contains("keys.json") && text.contains("copy"),
        "{text}"
    );
    assert!(!bare.join("admin.token").exists(), "nothing made: {text}");
    assert!(
        !bare.join("keys.json").exists(),
        "no root of its own: {text}"
    );
    // Another server's keys.json: its root opens nothing of this database's.
    let other = temp_dir("roots-other");
    TestServer::start_sqlite(&other).stop();
    let text = try_start(&other)
        .expect_err("another root is refused")
        .to_string();
    assert!(
        text.contains("not the one this database is served with"),
        "{text}"
    );
    // The cluster serves on.
    assert_eq!(nodes(&a).len(), 2);
}

#[test]
fn a_request_to_a_daemon_connected_to_another_node_is_answered_by_that_daemon() {
    let (_, (_, a), (_, b)) = two_nodes("control");
    let machine = Machine::new(85);
    assert_eq!(machine.register(&a, "box").status, 201);
    let mut daemon = Driver::answering_controls(&b);
    daemon.online(&b, &machine, "box");
    // Asked of a, which does not own box: b asks the daemon and writes its answer for a.
    let addr = a.addr();
    let admin = a.admin();
    let asking = std::thread::spawn(move || {
        http(
            addr,
            "POST",
            "/v1/execution-contexts/box/daemon",
            &[("authorization", &bearer(&admin))],
            br#"{"action":"pause"}"#,
        )
    });
    daemon.pump_until(
        &b,
        &machine,
        "the request to reach the daemon on b",
        Duration::from_secs(10),
        |d| !d.controls.is_empty(),
    );
    // The daemon's answer goes out on the socket; b writes it for a.
    while !asking.is_finished() {
        daemon.pump(&b, &machine);
    }
    let answer = asking.join().expect("the request");
    assert_eq!(answer.status, 200, "{}", answer.json());
    let body = answer.json();
    assert_eq!(body["action"], "pause");
    assert_eq!(body["outcome"], "done");
    assert_eq!(
        body["message"], "done by the test's daemon",
        "the daemon's own answer"
    );
    assert_eq!(daemon.controls, ["pause"], "asked once");
}
