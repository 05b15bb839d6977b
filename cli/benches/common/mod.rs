//! What the cli benches share: a temp folder per bench and a daemon run in the bench's own
//! process (`run_daemon` on a host of the kind asked for), stopped when dropped.
#![allow(dead_code)]

pub mod timeline;

use std::path::PathBuf;
use std::thread::JoinHandle;

use outpost_core::executor::Registry;
use outpost_core::grant::LocalPolicy;
use outpost_core::join::Join;
use outpost_core::wire::Environment;
use outpost_daemon::{
    DaemonError, DaemonExit, DaemonOptions, HostKind, OwnedHost, ServerChoice, StopSignal,
    run_daemon,
};
use outpost_host::{HOME_VAR, OwnerFolders};
use outpost_server::{BlockingServer, ServeConfig};
use serde_json::Value;
use std::time::Duration;

/// A fresh, empty folder for this bench process, named after `tag`.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A daemon joined as `name`, running on its own thread until dropped.
pub struct Daemon {
    stop: StopSignal,
    thread: Option<JoinHandle<Result<DaemonExit, DaemonError>>>,
    _host: OwnedHost,
}

impl Daemon {
    /// Starts a daemon over `home` with `slots` slots and the executors of `registry`.
    pub fn start(
        kind: HostKind,
        home: PathBuf,
        name: &str,
        join: &Join,
        slots: u32,
        registry: Registry,
    ) -> Daemon {
        Self::start_with_policy(
            kind,
            home,
            name,
            join,
            slots,
            registry,
            LocalPolicy::default(),
        )
    }

    /// As [`Daemon::start`], under the owner's policy `local`.
    pub fn start_with_policy(
        kind: HostKind,
        home: PathBuf,
        name: &str,
        join: &Join,
        slots: u32,
        registry: Registry,
        local: LocalPolicy,
    ) -> Daemon {
        std::fs::create_dir_all(&home).unwrap();
        let folders =
            OwnerFolders::from_vars(|n| (n == HOME_VAR).then(|| home.clone().into_os_string()))
                .unwrap();
        let options = DaemonOptions {
            server: ServerChoice::Join(join.clone()),
            name: name.into(),
            folders,
            max_concurrent: slots,
            ca_file: None,
            local,
            features: Vec::new(),
            seed: 1,
            passphrase: None,
            launcher: outpost_daemon::Launcher::Terminal,
        };
        let host = OwnedHost::new(kind).unwrap();
        let stop = StopSignal::new();
        let (h, s) = (host.host.clone(), stop.clone());
        let thread = Some(std::thread::spawn(move || {
            run_daemon(options, registry, h, s)
        }));
        Daemon {
            stop,
            thread,
            _host: host,
        }
    }
}

impl Drop for Daemon {
    /// Asks twice (stop at once, not a drain) and joins the daemon's thread.
    fn drop(&mut self) {
        self.stop.raise();
        self.stop.raise();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server's configuration for a bench: a free loopback port, no TLS, `state_dir`, `cloud`
/// as its own executors, every default.
pub fn serve_config(state_dir: PathBuf, cloud: Vec<Environment>) -> ServeConfig {
    ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_dir,
        tls: None,
        cloud,
        public_url: None,
        node_url: None,
        rate_limits: Default::default(),
        terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
        heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
        limits: Default::default(),
        xterm_dir: None,
        database: outpost_server::Database::Sqlite,
    }
}

/// A real server on a free loopback port with a temporary state folder (wasm as its `cloud`
/// executor), and a client that keeps its connections; removed when dropped.
pub struct World {
    server: Option<BlockingServer>,
    /// The server's base URL.
    pub url: String,
    /// The admin token.
    pub admin: String,
    /// How a daemon joins it.
    pub join: Join,
    /// The bench's folder for this world (server state, daemons' homes).
    pub dir: PathBuf,
    /// Where the server keeps its records.
    database: outpost_server::Database,
    agent: ureq::Agent,
}

impl World {
    /// Starts the server.
    pub fn new(tag: &str) -> World {
        Self::new_on(tag, outpost_server::Database::Sqlite)
    }

    /// Starts the server with its records in `database`.
    pub fn new_on(tag: &str, database: outpost_server::Database) -> World {
        Self::start_in(temp_dir(tag), database)
    }

    /// Another node of this world's cluster: a server on the same database, with a copy of
    /// this one's `keys.json` (the rest it reads from the database) in a state folder of its
    /// own.
    #[allow(dead_code)]
    pub fn another_node(&self, tag: &str) -> World {
        self.another_node_named(tag, "outpost-server")
    }

    /// [`World::another_node`] whose server's threads are named `threads`.
    #[allow(dead_code)]
    pub fn another_node_named(&self, tag: &str, threads: &str) -> World {
        let dir = temp_dir(tag);
        std::fs::create_dir_all(dir.join("server")).unwrap();
        std::fs::copy(
            self.dir.join("server/keys.json"),
            dir.join("server/keys.json"),
        )
        .unwrap();
        Self::start_named(dir, self.database.clone(), threads)
    }

    /// [`World::new_on`] whose server's threads are named `threads`.
    #[allow(dead_code)]
    pub fn new_named(tag: &str, database: outpost_server::Database, threads: &str) -> World {
        Self::start_named(temp_dir(tag), database, threads)
    }

    fn start_in(dir: PathBuf, database: outpost_server::Database) -> World {
        Self::start_named(dir, database, "outpost-server")
    }

    fn start_named(dir: PathBuf, database: outpost_server::Database, threads: &str) -> World {
        let server = Self::serve(&dir, &database, threads);
        let r = server.running();
        World {
            url: r.url.clone(),
            admin: r.admin_token.clone(),
            join: Join::parse(&r.join).unwrap(),
            server: Some(server),
            dir,
            database,
            // Every client keeps its connection, as a real one would: without room for the
            // throughput bench's 64 clients in the pool, most requests would open a new one.
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_idle_connections(64)
                .max_idle_connections_per_host(64)
                .build()
                .new_agent(),
        }
    }

    /// A server over `dir/server` and `database`, its threads named `threads`, serving.
    fn serve(
        dir: &std::path::Path,
        database: &outpost_server::Database,
        threads: &str,
    ) -> BlockingServer {
        BlockingServer::start_named(
            ServeConfig {
                database: database.clone(),
                ..serve_config(dir.join("server"), vec![Environment::Wasm])
            },
            Registry::new(),
            2,
            threads,
        )
        .unwrap()
    }

    /// Stops the server and starts it again over the same state (on another free port): how
    /// long the new one took from its start until it served. Daemons joined to the old one
    /// are not told where it went.
    pub fn restart(&mut self) -> Duration {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        let started = std::time::Instant::now();
        let server = Self::serve(&self.dir, &self.database, "outpost-server");
        let took = started.elapsed();
        self.url = server.running().url.clone();
        self.join = Join::parse(&server.running().join).unwrap();
        self.server = Some(server);
        took
    }

    /// `POST /v1/executions` with `body`, as admin; the answer.
    pub fn post(&self, body: &Value) -> Value {
        self.post_to("/v1/executions", body)
    }

    /// `POST path` with `body`, as admin; the answer (null if not JSON).
    pub fn post_to(&self, path: &str, body: &Value) -> Value {
        let text = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("authorization", &format!("Bearer {}", self.admin))
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// `GET path` as admin; the answer (null if not JSON).
    pub fn get(&self, path: &str) -> Value {
        let text = self
            .agent
            .get(&format!("{}{path}", self.url))
            .header("authorization", &format!("Bearer {}", self.admin))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Returns once the context `name` is online.
    pub fn online(&self, name: &str) {
        for _ in 0..1000 {
            if self.get(&format!("/v1/execution-contexts/{name}"))["online"] == true {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{name} never came online");
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A trivial wasm module (prints a line), for the round-trip benches.
pub const HELLO: &str = include_str!("../hello.wat");

/// The executors the daemons of the round-trip benches have: wasm only.
pub fn wasm_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register(Box::new(outpost_exec_wasm::WasmExecutor::new(
        outpost_exec_wasm::WasmConfig::default(),
    )));
    registry
}

/// [`HELLO`] as an inline capability.
pub fn hello_capability() -> Value {
    use base64::Engine as _;
    serde_json::json!({
        "kind": "inline",
        "manifest": "name: hello\nenvironment: wasm\nlifecycle: oneshot\nentry: module.wat\n",
        "files": [{"path": "module.wat", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(HELLO)}],
    })
}

/// `batch` executions of [`hello_capability`] through `world`, by `clients` clients at once,
/// each waiting for its execution before the next, client `t` on `box{t % 8}`.
pub fn run_batch(world: &std::sync::Arc<World>, batch: usize, clients: usize) {
    run_batch_across(std::slice::from_ref(world), batch, clients);
}

/// [`run_batch`] over the nodes of a cluster: client `t` submits to `nodes[t % len]`.
pub fn run_batch_across(nodes: &[std::sync::Arc<World>], batch: usize, clients: usize) {
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let world = nodes[t % nodes.len()].clone();
            std::thread::spawn(move || {
                let body = serde_json::json!({"capability": hello_capability(), "context": format!("box{}", t % 8), "wait": true, "waitSecs": 120});
                for _ in 0..batch / clients {
                    let e = world.post(&body);
                    assert_eq!(e["status"], "exited", "{e}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Eight daemons `box0`…`box7` over the nodes of a cluster, 8 slots each, online: `box{i}`
/// joins through `nodes[i % len]`, and is connected to that node.
pub fn eight_daemons_across(nodes: &[std::sync::Arc<World>]) -> Vec<Daemon> {
    let daemons = (0..8)
        .map(|i| {
            let world = &nodes[i % nodes.len()];
            Daemon::start(
                HostKind::Tokio,
                world.dir.join(format!("home{i}")),
                &format!("box{i}"),
                &world.join,
                8,
                wasm_registry(),
            )
        })
        .collect();
    for i in 0..8 {
        nodes[i % nodes.len()].online(&format!("box{i}"));
    }
    daemons
}

/// Eight daemons `box0`…`box7` of `world`, 8 slots each, online.
pub fn eight_daemons(world: &std::sync::Arc<World>) -> Vec<Daemon> {
    eight_daemons_across(std::slice::from_ref(world))
}

/// A viewer's WebSocket on a terminal.
#[allow(dead_code)]
pub type ViewerSocket =
    tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>;

/// One keystroke out on a viewer's socket and its echo back (the terminal in raw mode, echo
/// on, a program reading the keys): the time between.
#[allow(dead_code)]
pub fn keystroke(socket: &mut ViewerSocket) -> Duration {
    use tungstenite::Message;
    let start = std::time::Instant::now();
    socket
        .send(Message::Binary(b"k".to_vec().into()))
        .expect("a keystroke sent");
    loop {
        match socket.read().expect("the echo") {
            Message::Binary(bytes) if !bytes.is_empty() => {
                assert_eq!(&bytes[..], b"k", "one echoed byte");
                return start.elapsed();
            }
            Message::Close(frame) => panic!("closed while waiting for an echo: {frame:?}"),
            _ => {}
        }
    }
}
