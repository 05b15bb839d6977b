//! Two `outpost serve` nodes over one PostgreSQL database, the daemon of `box` connected to
//! the second (docs/CLUSTER.md §3): a terminal asked of the first is opened, viewed, listed
//! and given new tickets through the first, relayed to the second, whose relay holds it; and
//! a run's output followed through the first comes while the run is still running.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::viewer::Viewer;
use common::{Daemon, Server, api, shell_capability, temp_dir, wait_for};
use serde_json::{Value, json};

/// Node `a` (the machine is not connected to it), node `b` (it is), and the daemon.
struct Cluster {
    dir: PathBuf,
    a: Server,
    b: Server,
    _daemon: Daemon,
}

fn cluster(tag: &str) -> Cluster {
    let dir = temp_dir(tag);
    let url = common::postgres::shared().database(&format!("{tag}_{}", std::process::id()));
    let database: [&std::ffi::OsStr; 2] = ["--database".as_ref(), url.as_ref()];
    let (a_state, b_state) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a_state).expect("a state folder");
    std::fs::create_dir_all(&b_state).expect("a state folder");
    let a = Server::start_with(&a_state, 0, &database);
    std::fs::copy(a_state.join("keys.json"), b_state.join("keys.json")).expect("keys.json");
    let b = Server::start_with(&b_state, 0, &database);
    let mut join = outpost_core::join::Join::parse(&a.join).expect("the join");
    join.url = b.url.clone();
    let daemon = Daemon::start(&dir.join("home"), "box", Some(&join.encode()), "tokio");
    // `a` knows where box is from b's heartbeat.
    wait_for("b's heartbeat to list box", || {
        let (_, nodes) = a.api("GET", "/v1/nodes", None);
        nodes["nodes"]
            .as_array()?
            .iter()
            .any(|n| {
                n["this"] == false
                    && n["nodeUrl"] == b.url.as_str()
                    && n["sessions"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| s["name"] == "box"))
            })
            .then_some(())
    });
    Cluster {
        dir,
        a,
        b,
        _daemon: daemon,
    }
}

/// `terminal`'s row in `server`'s `GET /v1/terminals`, and whether a node went unreached.
fn listed(server: &Server, terminal: &str) -> (Option<Value>, bool) {
    let (status, body) = server.api("GET", "/v1/terminals", None);
    assert_eq!(status, 200, "{body}");
    let row = body["terminals"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["terminalId"] == terminal))
        .cloned();
    (row, body.get("unreachedNodes").is_some())
}

#[test]
fn a_terminal_asked_of_a_node_its_machine_is_not_connected_to_is_relayed_to_the_one_it_is() {
    let c = cluster("relay_terminal");
    let (status, opened) = c.a.api(
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({"cols": 80, "rows": 24})),
    );
    assert_eq!(status, 201, "opened through a: {opened}");
    let terminal = opened["terminalId"].as_str().expect("an id").to_owned();
    let mut first = Viewer::connect(&c.a, &terminal, opened["ticket"].as_str().unwrap());
    first.until("live", |v| v.said("live").is_some());
    first.type_keys("echo $((6*7))-relayed\r");
    first.until("the shell's answer", |v| v.shows("42-relayed"));

    // Both nodes list it, once, b's relay holding it.
    for node in [&c.a, &c.b] {
        let (row, unreached) = listed(node, &terminal);
        let row = row.unwrap_or_else(|| panic!("{} lists the terminal", node.url));
        assert_eq!(row["context"], "box");
        assert_eq!(row["viewers"], 1, "{row}");
        assert!(!unreached, "every node answered");
    }
    let (_, all) = c.a.api("GET", "/v1/terminals", None);
    assert_eq!(
        all["terminals"].as_array().map(Vec::len),
        Some(1),
        "listed once: {all}"
    );

    // A ticket bought of a joins a second viewer through a, who is shown the screen again.
    let (status, bought) = api(
        &c.a.url,
        &c.a.admin,
        "POST",
        &format!("/v1/terminals/{terminal}/tickets"),
        None,
    );
    assert_eq!(status, 201, "{bought}");
    let ticket = bought["ticket"].as_str().expect("a ticket").to_owned();
    let mut second = Viewer::connect(&c.a, &terminal, &ticket);
    second.until("the replay", |v| {
        v.said("live").is_some() && v.shows("42-relayed")
    });
    // The ticket is spent, whichever node it is shown to again.
    for node in [&c.a, &c.b] {
        let url = format!(
            "ws://127.0.0.1:{}/v1/terminals/{terminal}/connect?ticket={ticket}",
            node.port
        );
        match tungstenite::connect(url) {
            Err(tungstenite::Error::Http(answer)) => assert_eq!(answer.status(), 401),
            other => panic!("a spent ticket opened a socket: {:?}", other.map(|_| ())),
        }
    }
    // Keys typed by the second viewer reach the shell on b, and the first sees the answer.
    second.type_keys("exit 3\r");
    first.until("the exit", |v| v.said("exit").is_some());
    assert_eq!(first.said("exit").unwrap()["exitCode"], 3);
    let execution = c.a.wait_status(&terminal, "exited");
    assert_eq!(execution["exitCode"], 3, "{execution}");
}

/// `GET /v1/terminals` on `server` as a relay from node `by` meant for node `to` would ask it.
fn relayed_list(server: &Server, by: &str, to: &str) -> (u16, Value) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let answer = agent
        .get(&format!("{}/v1/terminals", server.url))
        .header("authorization", &format!("Bearer {}", server.admin))
        .header("outpost-relayed-by", by)
        .header("outpost-relayed-to", to)
        .call()
        .expect("an answer");
    let status = answer.status().as_u16();
    let text = answer.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn a_relay_that_reaches_a_node_it_was_not_meant_for_is_refused_there() {
    let c = cluster("relay_misdirected");
    let (_, nodes) = c.a.api("GET", "/v1/nodes", None);
    let id = |this: bool| {
        nodes["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["this"] == this))
            .and_then(|n| n["nodeId"].as_str())
            .expect("a node id")
            .to_owned()
    };
    let (a_id, b_id) = (id(true), id(false));
    // Meant for b, it reached a (an address that leads elsewhere): refused, not answered.
    let (status, body) = relayed_list(&c.a, &b_id, &b_id);
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "node_unreachable", "{body}");
    // From a itself (its own address led back to it): refused too.
    let (status, body) = relayed_list(&c.a, &a_id, &a_id);
    assert_eq!(status, 502, "{body}");
    // Meant for a, from b: answered with a's own terminals, not relayed again.
    let (status, body) = relayed_list(&c.a, &b_id, &a_id);
    assert_eq!(status, 200, "{body}");
    assert!(body.get("unreachedNodes").is_none(), "{body}");
}

#[test]
fn a_run_s_output_followed_through_another_node_comes_while_the_run_runs() {
    let c = cluster("relay_output");
    let go = c.dir.join("go");
    let script = format!(
        "echo first\nwhile [ ! -e {go} ]; do sleep 0.05; done\necho second\n",
        go = go.display()
    );
    let id = c.a.submit(&shell_capability("gated", &script), "box");
    c.a.wait_status(&id, "running");
    let mut follower = Command::new(common::binary())
        .args(["runs", "logs", &id, "-f", "--server", &c.a.url])
        .env("OUTPOST_TOKEN", &c.a.admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outpost runs logs");
    let (tx, lines) = mpsc::channel();
    let out = follower.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = |what: &str| {
        lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{what}: no line ({e})"))
    };
    // The run waits for `go`: its first line came through a before the run could end.
    assert_eq!(next("the first line, live"), "first");
    let (_, running) = c.a.api("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(running["status"], "running", "{running}");
    std::fs::write(&go, b"").expect("go");
    assert_eq!(next("the second line"), "second");
    let done = common::finish(follower, "outpost runs logs -f");
    assert_eq!(done.status.code(), Some(0), "{done:?}");
}

#[test]
fn a_node_url_the_other_nodes_may_not_use_stops_the_start_and_says_what_to_give() {
    let dir = temp_dir("relay_node_url");
    // Plain HTTP to another machine: the other nodes would send bearer tokens in the clear.
    let out = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(dir.join("state"))
        .args(["--node-url", "http://10.0.0.5:8440"])
        .env("OUTPOST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outpost serve starts");
    let done = common::finish(out, "outpost serve with a bad --node-url");
    assert_ne!(done.status.code(), Some(0), "{done:?}");
    let said = String::from_utf8_lossy(&done.stderr);
    assert!(said.contains("--node-url http://10.0.0.5:8440"), "{said}");
    assert!(said.contains("https://"), "it says what to give: {said}");
}
