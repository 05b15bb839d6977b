//! Three `outpost serve` nodes over one PostgreSQL database, crashed on purpose while 300
//! executions go to random nodes (docs/CLUSTER.md §7): the busiest node is killed -9 (and
//! started again), another is SIGSTOPped for 20 s, and a third is cut off from PostgreSQL
//! (the test's own TCP gate between it and the database drops every connection) for 15 s.
//! Four daemons, each behind a front that sends each of its connections to the next healthy
//! node in turn (`/healthz`, as a load balancer would), run shell capabilities that append a token to a
//! marker file. Afterwards every execution has ended, no token was appended twice, every
//! `exited` execution's token was appended exactly once, and every daemon is online again.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Daemon, Server, lines, shell_capability, temp_dir};
use serde_json::{Value, json};

/// How many executions the test submits.
const EXECUTIONS: usize = 300;

/// A TCP gate between one node and PostgreSQL: while cut, every connection through it is shut
/// down and new ones are refused at once (as a partition that resets would).
struct Gate {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Gate {
    fn new(to: u16) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a gate port");
        let port = listener.local_addr().expect("an address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (cut2, open2) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let mut held = open2.lock().unwrap();
                held.push(client.try_clone().expect("a clone"));
                held.push(server.try_clone().expect("a clone"));
                drop(held);
                pipe(client, server);
            }
        });
        Gate { port, cut, open }
    }

    /// Cuts (`true`) or mends the gate.
    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            for stream in self.open.lock().unwrap().drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Copies both ways between `a` and `b` until either side ends.
fn pipe(a: TcpStream, b: TcpStream) {
    let (mut a2, mut b2) = (
        a.try_clone().expect("a clone"),
        b.try_clone().expect("a clone"),
    );
    let (mut a, mut b) = (a, b);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut b);
        let _ = b.shutdown(Shutdown::Both);
        let _ = a.shutdown(Shutdown::Both);
    });
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut b2, &mut a2);
        let _ = a2.shutdown(Shutdown::Both);
        let _ = b2.shutdown(Shutdown::Both);
    });
}

/// Whether the node on `port` answers `/healthz` 200 within 300 ms.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(300),
    ) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(300)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(300)));
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: node\r\nconnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// A daemon's front, as a load balancer that keeps no client on one node: each connection
/// goes to the next healthy node in turn (so a daemon's ticket request and its WebSocket
/// usually reach different nodes).
fn front(ports: Vec<u16>, first: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a front port");
    let port = listener.local_addr().expect("an address").port();
    std::thread::spawn(move || {
        for (turn, client) in listener.incoming().flatten().enumerate() {
            let ports = ports.clone();
            let first = first + turn;
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    for i in 0..ports.len() {
                        let port = ports[(first + i) % ports.len()];
                        if healthy(port)
                            && let Ok(server) = TcpStream::connect(("127.0.0.1", port))
                        {
                            pipe(client, server);
                            return;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
    });
    port
}

/// One call with a short patience (a stopped node never answers); status 0 when none came.
fn call(base: &str, token: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let method = if body.is_some() { "POST" } else { "GET" };
    common::api_within(
        Duration::from_secs(3),
        base,
        token,
        method,
        path,
        body.cloned(),
    )
}

/// A node: its state folder, port, gate to the database, and its process while it runs.
struct Node {
    state: PathBuf,
    port: u16,
    args: Vec<std::ffi::OsString>,
    server: Option<Server>,
}

impl Node {
    fn start(&mut self) {
        let extra: Vec<&std::ffi::OsStr> = self.args.iter().map(|a| a.as_os_str()).collect();
        self.server = Some(Server::start_with(&self.state, self.port, &extra));
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.child.id())
    }

    /// Whether its process ended (a fence it lost, a database it could not reach).
    fn ended(&mut self) -> bool {
        match self.server.as_mut() {
            Some(s) => !matches!(s.child.try_wait(), Ok(None)),
            None => true,
        }
    }
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid}");
}

/// A small deterministic generator (the test's choices need no more).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn pg_url_through(url: &str, port: u16) -> String {
    // postgres://outpost@127.0.0.1:PORT/DB
    let (head, rest) = url.rsplit_once(':').expect("a port in the URL");
    let db = rest.split_once('/').map(|(_, db)| db).expect("a database");
    format!("{head}:{port}/{db}")
}

#[test]
fn three_nodes_crashed_on_purpose_lose_nothing_and_run_nothing_twice() {
    let dir = temp_dir("cluster-chaos");
    let pg = common::postgres::shared();
    let url = pg.database(&format!("chaos_{}", std::process::id()));
    let marker = dir.join("marker");
    let mut gates = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..3 {
        let gate = Gate::new(pg.port);
        let state = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&state).expect("a state folder");
        if i > 0 {
            // The root key only: the frame keys and tokens come from the database.
            std::fs::copy(dir.join("node0/keys.json"), state.join("keys.json"))
                .expect("the first node's keys.json");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut node = Node {
            state,
            port,
            args: vec![
                "--database".into(),
                pg_url_through(&url, gate.port).into(),
                "--heartbeat-secs".into(),
                "2".into(),
            ],
            server: None,
        };
        node.start();
        nodes.push(node);
        gates.push(gate);
    }
    let admin = nodes[0].server.as_ref().unwrap().admin.clone();
    let join = nodes[0].server.as_ref().unwrap().join.clone();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let mut daemons = Vec::new();
    for d in 0..4 {
        let front = front(ports.clone(), d % 3);
        let mut parsed = outpost_core::join::Join::parse(&join).expect("the join");
        parsed.url = format!("http://127.0.0.1:{front}");
        let home = dir.join(format!("d{d}"));
        daemons.push(Daemon::start(
            &home,
            &format!("d{d}"),
            Some(&parsed.encode()),
            "tokio",
        ));
    }
    let online = |base: &str| -> usize {
        let (_, contexts) = call(base, &admin, "/v1/execution-contexts", None);
        contexts["contexts"]
            .as_array()
            .map(|c| c.iter().filter(|c| c["online"] == true).count())
            .unwrap_or(0)
    };
    let started = Instant::now();
    common::wait_for("four daemons online", || {
        let total: usize = nodes
            .iter()
            .map(|n| {
                let (_, list) = call(&n.url(), &admin, "/v1/nodes", None);
                list["nodes"][0]["sessions"].as_array().map_or(0, Vec::len)
            })
            .sum();
        (total == 4).then_some(())
    });
    println!("four daemons online in {:?}", started.elapsed());

    // The submitter: 300 executions to random nodes, each for a random daemon (queued while
    // it is offline); a node that does not answer in 3 s is left for another.
    let submitted = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let submitter = {
        let (submitted, admin, marker) = (submitted.clone(), admin.clone(), marker.clone());
        std::thread::spawn(move || {
            let mut rng = Lcg(0x5eed);
            for i in 0..EXECUTIONS {
                let context = format!("d{}", rng.below(4));
                let first = rng.below(3);
                for attempt in 0..12 {
                    // A token per attempt: an attempt refused after its commit (a database
                    // cut mid-answer) may have been kept, and is then an execution of its own.
                    // Twelve attempts over the three nodes, each given 3 s.
                    let token = format!("t{i}a{attempt}");
                    let script = format!("echo {token} >> {}\necho {token}\n", marker.display());
                    let body = json!({
                        "capability": shell_capability("mark", &script),
                        "context": context,
                        "whenOffline": "queue",
                        "whenBusy": "queue",
                    });
                    let base = &urls[(first + attempt) % 3];
                    let (status, answer) = call(base, &admin, "/v1/executions", Some(&body));
                    if status == 201 || status == 202 {
                        let id = answer["executionId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        submitted.lock().unwrap().push((id, token.clone()));
                        break;
                    }
                }
                std::thread::sleep(Duration::from_millis(60));
            }
        })
    };

    // The crashes, while the executions go in.
    std::thread::sleep(Duration::from_secs(3));
    let sessions = |node: &Node| -> usize {
        let (_, list) = call(&node.url(), &admin, "/v1/nodes", None);
        list["nodes"][0]["sessions"].as_array().map_or(0, Vec::len)
    };
    let busiest = (0..3).max_by_key(|&i| sessions(&nodes[i])).expect("a node");
    let paused = (busiest + 1) % 3;
    let cut = (busiest + 2) % 3;
    println!("killing node {busiest} (-9), pausing node {paused}, cutting node {cut}");
    nodes[busiest].server.as_mut().unwrap().kill();
    std::thread::sleep(Duration::from_secs(1));
    nodes[busiest].start();
    let paused_pid = nodes[paused].pid().expect("running");
    signal(paused_pid, "STOP");
    let paused_at = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    gates[cut].set_cut(true);
    let cut_at = Instant::now();
    let mut restarts = 0;
    let mut mended = false;
    let mut resumed = false;
    // A supervisor: a node whose process ended (it lost a fence, or could not write a record)
    // is started again, as systemd would.
    while !(mended && resumed && submitter.is_finished()) {
        if !resumed && paused_at.elapsed() >= Duration::from_secs(20) {
            signal(paused_pid, "CONT");
            resumed = true;
        }
        if !mended && cut_at.elapsed() >= Duration::from_secs(15) {
            gates[cut].set_cut(false);
            mended = true;
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            let stopped = i == paused && !resumed;
            let cut_now = i == cut && !mended;
            if !stopped && !cut_now && node.ended() {
                node.start();
                restarts += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    submitter.join().expect("the submitter");
    println!(
        "crashes over at {:?}; {restarts} restarts",
        started.elapsed()
    );

    // Every daemon back, every execution ended.
    let deadline = Instant::now() + Duration::from_secs(120);
    let base = nodes[0].url();
    loop {
        for (i, node) in nodes.iter_mut().enumerate() {
            if node.ended() {
                node.start();
                restarts += 1;
                println!("node {i} started again");
            }
        }
        let (_, runs) = call(&base, &admin, "/v1/runs?limit=500", None);
        let runs = runs["runs"].as_array().cloned().unwrap_or_default();
        let open: Vec<&Value> = runs
            .iter()
            .filter(|r| r["status"] == "pending" || r["status"] == "running")
            .collect();
        let back = online(&base);
        if open.is_empty() && back == 4 && !runs.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for daemon in &daemons {
                println!("--- {}\n{}", daemon.log.display(), daemon.log_tail(15));
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} executions not ended, {back} daemons online: {:?}",
            open.len(),
            open.iter().take(5).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("everything ended at {:?}", started.elapsed());

    let (_, runs) = call(&base, &admin, "/v1/runs?limit=500", None);
    let runs = runs["runs"].as_array().cloned().unwrap_or_default();
    let appended = lines(&marker);
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    for token in &appended {
        *seen.entry(token.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}");
    let mut exited = 0;
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for run in &runs {
        let status = run["status"].as_str().unwrap_or_default().to_owned();
        *statuses.entry(status.clone()).or_default() += 1;
        if status == "exited" {
            exited += 1;
            let token = run["stdout"].as_str().unwrap_or_default().trim().to_owned();
            assert_eq!(
                seen.get(token.as_str()),
                Some(&1),
                "an exited execution's run appended its token once: {run}"
            );
        }
    }
    let known = submitted.lock().unwrap().len();
    println!(
        "{} executions recorded ({known} acknowledged to the submitter), {exited} exited, \
         {} tokens appended, statuses {statuses:?}, {restarts} node restarts",
        runs.len(),
        appended.len()
    );
    let recorded: std::collections::HashSet<&str> = runs
        .iter()
        .filter_map(|r| r["executionId"].as_str())
        .collect();
    for (id, token) in submitted.lock().unwrap().iter() {
        if !recorded.contains(id.as_str()) {
            let (status, seen) = call(&base, &admin, &format!("/v1/executions/{id}"), None);
            panic!("acknowledged {id} ({token}) is not listed: {status} {seen}");
        }
    }
    for run in runs.iter().filter(|r| r["status"] == "failed") {
        println!("failed: {}", run["error"]);
    }
    // A run may end `lost` (its daemon came back without it); nothing else may end it.
    let others: usize = statuses
        .iter()
        .filter(|(status, _)| *status != "exited" && *status != "lost")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(others, 0, "every execution ran or was lost: {statuses:?}");
    assert!(
        known * 20 >= EXECUTIONS * 19,
        "some node took almost every execution: {known} of {EXECUTIONS}"
    );
    assert!(
        exited * 10 >= runs.len() * 9,
        "most executions ran: {statuses:?}"
    );
    for daemon in &mut daemons {
        daemon.kill();
    }
    for node in &mut nodes {
        if let Some(server) = node.server.as_mut() {
            server.kill();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
