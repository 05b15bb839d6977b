//! Two `outpost serve` nodes over one PostgreSQL database, each serving HTTPS with its own
//! self-signed certificate and no front before them (docs/CLUSTER.md §3): a join lists both
//! nodes' URLs and certificates, and a daemon that joined through the first moves to the
//! second when the first is killed -9 — while it runs, and when it starts again from what its
//! first start saved — and runs what is submitted there. The CLI on the second node's machine
//! trusts the first's certificate through its local join too.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Daemon, Server, shell_capability, temp_dir, wait_for};
use outpost_adapters::tls::Trust;
use outpost_core::join::Join;
use serde_json::{Value, json};

/// A node of the test's cluster with its own certificate (`dir/cert.pem`, `dir/key.pem`).
fn node(dir: &Path, database: &str) -> Server {
    std::fs::create_dir_all(dir).expect("a state folder");
    let (cert, key) = common::self_signed(dir);
    Server::start_with(
        dir,
        0,
        &[
            "--database".as_ref(),
            database.as_ref(),
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
    )
}

/// `GET path` (no body) or `POST path` (a body) on `server` over HTTPS, trusting the
/// certificates `pins` names.
fn call(server: &Server, pins: &[String], path: &str, body: Option<Value>) -> (u16, Value) {
    let trust = Trust::public().pinning_all(pins.iter().map(String::as_str));
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build();
    let agent = outpost_adapters::https::agent(config, &trust);
    let method = if body.is_some() { "POST" } else { "GET" };
    common::api_through(&agent, &server.url, &server.admin, method, path, body)
}

/// Whether `server` lists `name` among the sessions of its own node.
fn holds(server: &Server, pins: &[String], name: &str) -> bool {
    let (status, nodes) = call(server, pins, "/v1/nodes", None);
    status == 200
        && nodes["nodes"].as_array().is_some_and(|nodes| {
            nodes.iter().any(|n| {
                n["this"] == true
                    && n["sessions"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| s["name"] == name))
            })
        })
}

/// Submits a shell run to `name` through `server` and waits for it to exit 0.
fn runs_through(server: &Server, pins: &[String], name: &str, marker: &Path, token: &str) {
    let capability = shell_capability(
        &format!("mark-{token}"),
        &format!("echo {token} >> {}", marker.display()),
    );
    let (status, submitted) = call(
        server,
        pins,
        "/v1/executions",
        Some(json!({"capability": capability, "context": name})),
    );
    assert!(
        status == 201 || status == 202,
        "submitted: {status} {submitted}"
    );
    let id = submitted["executionId"].as_str().expect("an id").to_owned();
    let done = wait_for(&format!("{token} to exit"), || {
        let (_, e) = call(server, pins, &format!("/v1/executions/{id}"), None);
        (e["status"] == "exited").then_some(e)
    });
    assert_eq!(done["exitCode"], 0, "{done}");
}

#[test]
fn a_daemon_moves_to_the_next_url_its_join_lists_when_its_node_is_killed() {
    let dir = temp_dir("cluster-join");
    let database = common::postgres::shared().database(&format!("join_{}", std::process::id()));
    let mut a = node(&dir.join("a"), &database);
    std::fs::create_dir_all(dir.join("b")).expect("b's folder");
    std::fs::copy(dir.join("a/keys.json"), dir.join("b/keys.json")).expect("keys.json");
    let b = node(&dir.join("b"), &database);
    let pin_of = |server: &Server| {
        Join::parse(&server.join)
            .expect("a join")
            .tls_sha256
            .expect("a node serving HTTPS pins its certificate")
    };
    let (pin_a, pin_b) = (pin_of(&a), pin_of(&b));
    assert_ne!(pin_a, pin_b, "each node has its own certificate");

    // b started while a was live: the join it printed lists b, then a.
    let printed = Join::parse(&b.join).expect("b's join");
    assert_eq!(printed.urls(), [b.url.clone(), a.url.clone()]);
    assert_eq!(printed.pins(), [pin_b.clone(), pin_a.clone()]);

    // A join made by a lists a, then b.
    let pins = vec![pin_a.clone(), pin_b.clone()];
    let (status, made) = call(&a, &pins, "/v1/join-tokens", Some(json!({})));
    assert_eq!(status, 201, "{made}");
    let join = Join::parse(made["join"].as_str().expect("a join")).expect("it parses");
    assert_eq!(join.urls(), [a.url.clone(), b.url.clone()]);
    assert_eq!(join.pins(), pins);

    // The daemon joins through a, the first URL, and saves both.
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "roamer", Some(&join.encode()), "tokio");
    wait_for("a to hold roamer", || {
        holds(&a, &pins, "roamer").then_some(())
    });
    let saved: Value = serde_json::from_slice(
        &std::fs::read(home.join("config/server.json")).expect("server.json"),
    )
    .expect("its JSON");
    assert_eq!(saved["url"], a.url.as_str(), "{saved}");
    assert_eq!(saved["urls"], json!([b.url]), "{saved}");
    assert_eq!(saved["tlsSha256"], pin_a.as_str(), "{saved}");
    assert_eq!(saved["tlsPins"], json!([pin_b]), "{saved}");
    let marker = dir.join("marker");
    runs_through(&a, &pins, "roamer", &marker, "first");

    // The CLI on b's machine asked of a: b's local join lists a, so a's certificate is pinned.
    let out = std::process::Command::new(common::binary())
        .args(["context", "list", "--json"])
        .env("OUTPOST_STATE", dir.join("b"))
        .env("OUTPOST_SERVER", &a.url)
        .env_remove("OUTPOST_TOKEN")
        .env_remove("OUTPOST_CA_FILE")
        .output()
        .expect("outpost context list runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    assert!(
        listed["contexts"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["name"] == "roamer")),
        "{listed}"
    );

    // a dies: the daemon reaches b, with b's certificate, and runs what b is given.
    a.kill();
    let killed = std::time::Instant::now();
    wait_for_explained_hold(&b, &pins, &daemon);
    eprintln!("held by b {:?} after a was killed", killed.elapsed());
    runs_through(&b, &pins, "roamer", &marker, "second");
    assert!(
        daemon
            .log_text()
            .contains("trying the next one the join listed"),
        "the daemon says why it moved: {}",
        daemon.log_tail(30)
    );

    // Started again with a still dead, from what its first start saved alone.
    daemon.kill();
    let restarted = std::time::Instant::now();
    let daemon = Daemon::start(&home, "roamer", None, "tokio");
    wait_for_explained_hold(&b, &pins, &daemon);
    eprintln!(
        "held by b {:?} after the daemon started again",
        restarted.elapsed()
    );
    runs_through(&b, &pins, "roamer", &marker, "third");
    assert_eq!(common::lines(&marker), ["first", "second", "third"]);
}

/// Waits until `b` holds roamer, showing the daemon's log if it never does.
fn wait_for_explained_hold(b: &Server, pins: &[String], daemon: &Daemon) {
    common::wait_for_explained(
        "b to hold roamer",
        || holds(b, pins, "roamer").then_some(()),
        || daemon.log_tail(30),
    );
}
