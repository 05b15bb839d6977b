//! One conformance suite — the same functions — run against each daemon host (tokio, smol,
//! blocking) and the real server over real TCP: connect and verify `welcome`, a run round
//! trip, a cut connection mid-run (the held run finishes, its result arrives once), 1012
//! replaced, 4001 revoked, a tampered server frame (1002, nothing executed), a message over
//! the limit (1009), heartbeats on an idle connection, and a reader that stops reading (the
//! server pushes no more than its slots allow and refuses the rest; what was offered runs once
//! when it reads again).

mod common;

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::proxy::{Mode, Proxy};
use outpost_core::executor::Registry;
use outpost_core::grant::LocalPolicy;
use outpost_core::join::Join;
use outpost_daemon::{
    DaemonError, DaemonExit, DaemonOptions, HostKind, OwnedHost, ServerChoice, StopSignal,
    run_daemon,
};
use outpost_exec_shell::ShellExecutor;
use outpost_host::{HOME_VAR, OwnerFolders};
use outpost_server::{BlockingServer, ServeConfig};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(60);

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        // The poll's pace: `check` is asked again at the top of the loop.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-conf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

struct World {
    dir: PathBuf,
    server: Option<BlockingServer>,
    url: String,
    admin: String,
    join: Join,
    proxy: Proxy,
}

impl World {
    fn new(name: &str) -> World {
        World::with_heartbeat(name, ServeConfig::DEFAULT_HEARTBEAT)
    }

    fn with_heartbeat(name: &str, heartbeat: Duration) -> World {
        let dir = temp_dir(name);
        let server = BlockingServer::start(
            ServeConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                state_dir: dir.join("server"),
                tls: None,
                cloud: Vec::new(),
                public_url: None,
                node_url: None,
                rate_limits: Default::default(),
                terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
                heartbeat,
                limits: Default::default(),
                xterm_dir: None,
                // OUTPOST_TEST_DATABASE=postgres: the same suite over PostgreSQL.
                database: common::postgres::test_url(&dir.join("server")).map_or(
                    outpost_server::Database::Sqlite,
                    outpost_server::Database::Postgres,
                ),
            },
            Registry::new(),
            1,
        )
        .expect("the server starts");
        let running = server.running();
        let url = running.url.clone();
        let admin = running.admin_token.clone();
        let mut join = Join::parse(&running.join).expect("join");
        let proxy = Proxy::start(url.trim_start_matches("http://").to_owned());
        join.url = proxy.url.clone();
        World {
            dir,
            server: Some(server),
            url,
            admin,
            join,
            proxy,
        }
    }

    fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {}", self.admin);
        let answer = match method {
            "GET" => agent.get(&url).header("authorization", &auth).call(),
            _ => agent
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(body.map(|b| b.to_string()).unwrap_or_default().as_bytes()),
        }
        .expect("the server answers");
        let status = answer.status().as_u16();
        let text = answer.into_body().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Runs `echo WORD` on `box` and checks it printed `WORD`.
    fn runs_echo(&self, word: &str) {
        let (_, e) = self.api(
            "POST",
            "/v1/executions",
            Some(
                json!({"capability": shell(&format!("echo {word}\n")), "context": "box",
                        "wait": true, "waitSecs": 60}),
            ),
        );
        assert_eq!(e["stdout"], format!("{word}\n"), "{e}");
    }

    fn online(&self, name: &str) {
        wait_for("the daemon to come online", || {
            let (_, c) = self.api("GET", &format!("/v1/execution-contexts/{name}"), None);
            (c["online"] == true).then_some(())
        });
    }

    fn submit(&self, script: &str, context: &str) -> String {
        let (status, e) = self.api(
            "POST",
            "/v1/executions",
            Some(json!({"capability": shell(script), "context": context})),
        );
        assert!(status == 201 || status == 202, "{status} {e}");
        e["executionId"].as_str().expect("id").to_owned()
    }

    fn wait_end(&self, id: &str) -> Value {
        wait_for("the execution to end", || {
            let (_, e) = self.api("GET", &format!("/v1/executions/{id}"), None);
            (!matches!(e["status"].as_str(), Some("pending" | "running") | None)).then_some(e)
        })
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn shell(script: &str) -> Value {
    use base64::Engine as _;
    json!({
        "kind": "inline",
        "manifest": "name: conf\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\n",
        "files": [{"path": "run.sh", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script)}],
    })
}

struct RunningDaemon {
    stop: StopSignal,
    thread: Option<JoinHandle<Result<DaemonExit, DaemonError>>>,
    _host: OwnedHost,
}

impl RunningDaemon {
    fn start(kind: HostKind, home: &Path, server: ServerChoice) -> RunningDaemon {
        std::fs::create_dir_all(home).expect("home");
        let home = home.to_path_buf();
        let folders =
            OwnerFolders::from_vars(|n| (n == HOME_VAR).then(|| home.clone().into_os_string()))
                .expect("folders");
        let options = DaemonOptions {
            server,
            name: "box".into(),
            folders,
            max_concurrent: 2,
            ca_file: None,
            // These tests are about the protocol, not the sandbox (which needs the `outpost`
            // binary as its helper): the owner lets the operator's `confine: false` runs out.
            local: LocalPolicy {
                confinement: outpost_core::grant::ConfinementPolicy::OperatorMayOptOut,
                ..LocalPolicy::default()
            },
            features: Vec::new(),
            seed: 7,
            passphrase: None,
            launcher: outpost_daemon::Launcher::Terminal,
        };
        let mut registry = Registry::new();
        registry.register(Box::new(ShellExecutor::default()));
        let host = OwnedHost::new(kind).expect("host");
        let stop = StopSignal::new();
        let (h, s) = (host.host.clone(), stop.clone());
        let thread = std::thread::spawn(move || run_daemon(options, registry, h, s));
        RunningDaemon {
            stop,
            thread: Some(thread),
            _host: host,
        }
    }

    fn exit(&mut self) -> Result<DaemonExit, DaemonError> {
        let thread = self.thread.take().expect("running");
        wait_for("the daemon to stop", || thread.is_finished().then_some(()));
        thread.join().expect("no panic")
    }

    fn drain(mut self) -> DaemonExit {
        self.stop.raise();
        self.exit().expect("a clean stop")
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop.raise();
            self.stop.raise();
            let _ = self.exit();
        }
    }
}

fn count(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// Connects (the welcome verified), runs one capability, drains.
fn round_trip(kind: HostKind) {
    let world = World::new(&format!("rt-{}", kind.as_str()));
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let (status, e) = world.api(
        "POST",
        "/v1/executions",
        Some(json!({"capability": shell("echo hi\n"), "context": "box", "wait": true, "waitSecs": 60})),
    );
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["status"], "exited", "{e}");
    assert_eq!(e["stdout"], "hi\n");
    assert_eq!(e["ranOn"]["name"], "box");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// The TCP connection is cut while a run is held: it finishes, and after the reconnect its
/// result arrives exactly once.
fn cut_mid_run(kind: HostKind) {
    let world = World::new(&format!("cut-{}", kind.as_str()));
    let marks = world.dir.join("marks");
    let go = world.dir.join("go");
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let id = world.submit(
        &format!(
            "echo run >> {m}\nwhile [ ! -e {g} ]; do sleep 0.02; done\necho done\n",
            m = marks.display(),
            g = go.display()
        ),
        "box",
    );
    wait_for("the run to start", || (count(&marks) == 1).then_some(()));
    let before = world.proxy.upgrades();
    world.proxy.cut();
    std::fs::write(&go, b"").expect("go");
    wait_for("a reconnect", || {
        (world.proxy.upgrades() > before).then_some(())
    });
    let e = world.wait_end(&id);
    assert_eq!(e["status"], "exited", "{e}");
    assert_eq!(e["stdout"], "done\n");
    assert_eq!(count(&marks), 1, "ran once");
    let (_, runs) = world.api("GET", "/v1/runs?context=box", None);
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// A second daemon with the same key: the first is closed with 1012 and stops for good.
fn replaced(kind: HostKind) {
    let world = World::new(&format!("repl-{}", kind.as_str()));
    let home = world.dir.join("home");
    let mut first = RunningDaemon::start(kind, &home, ServerChoice::Join(world.join.clone()));
    world.online("box");
    let copy = world.dir.join("copy");
    std::fs::create_dir_all(copy.join("config")).expect("config");
    for file in ["key.enc", "key.file", "server.json"] {
        std::fs::copy(
            home.join("config").join(file),
            copy.join("config").join(file),
        )
        .expect("copy");
    }
    let second = RunningDaemon::start(kind, &copy, ServerChoice::Saved);
    assert_eq!(first.exit().expect("a planned stop"), DaemonExit::Replaced);
    world.online("box");
    assert_eq!(second.drain(), DaemonExit::Drained);
}

/// The operator revokes the machine: 4001, and the daemon stops for good.
fn revoked(kind: HostKind) {
    let world = World::new(&format!("rev-{}", kind.as_str()));
    let mut daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let (status, _) = world.api("POST", "/v1/execution-contexts/box/revoke", None);
    assert_eq!(status, 200);
    assert_eq!(daemon.exit().expect("a planned stop"), DaemonExit::Revoked);
    assert!(
        world.proxy.closes().iter().all(|c| *c != 1002),
        "{:?}",
        world.proxy.closes()
    );
}

/// A server frame altered on the way: the daemon closes with 1002 and runs nothing.
fn tampered(kind: HostKind) {
    let world = World::new(&format!("tamper-{}", kind.as_str()));
    let marks = world.dir.join("marks");
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    world.proxy.set_mode(Mode::TamperRunRequests);
    let id = world.submit(&format!("echo run >> {}\n", marks.display()), "box");
    wait_for("a 1002 close", || {
        world.proxy.closes().contains(&1002).then_some(())
    });
    assert!(world.proxy.tampered() >= 1);
    assert_eq!(count(&marks), 0, "nothing the tampered frame asked for ran");
    // The offer died with that connection: the execution ends without having run.
    let e = world.wait_end(&id);
    assert_eq!(e["status"], "failed", "{e}");
    assert_eq!(count(&marks), 0, "{e}");
    // Frames intact again: the daemon is back and runs.
    world.proxy.set_mode(Mode::Pass);
    world.online("box");
    let id = world.submit(&format!("echo run >> {}\n", marks.display()), "box");
    assert_eq!(world.wait_end(&id)["status"], "exited");
    assert_eq!(count(&marks), 1);
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// A message over 1 MiB: the daemon closes with 1009, reconnects and serves on.
fn oversized(kind: HostKind) {
    let world = World::new(&format!("big-{}", kind.as_str()));
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let before = world.proxy.upgrades();
    world.proxy.inject_oversized();
    wait_for("a 1009 close", || {
        world.proxy.closes().contains(&1009).then_some(())
    });
    wait_for("a reconnect", || {
        (world.proxy.upgrades() > before).then_some(())
    });
    world.online("box");
    world.runs_echo("again");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// Idle, the daemon sends its heartbeat (`status`) and the connection stays up.
fn heartbeats(kind: HostKind) {
    let world = World::new(&format!("hb-{}", kind.as_str()));
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let before = world.proxy.statuses();
    wait_for("a heartbeat", || {
        (world.proxy.statuses() > before).then_some(())
    });
    assert_eq!(world.proxy.upgrades(), 1, "no reconnect");
    world.online("box");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// A server that goes silent — here the proxy holds back everything it sends, as a dead NAT
/// entry or a half-open connection would — is noticed within three heartbeats: the daemon
/// closes with 1001 and reconnects once the path is back, and serves on. Before that, the
/// server's pings keep an idle connection up for longer than three heartbeats.
fn silent_server(kind: HostKind) {
    const HEARTBEAT: Duration = Duration::from_secs(1);
    let world = World::with_heartbeat(&format!("silent-{}", kind.as_str()), HEARTBEAT);
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let before = world.proxy.upgrades();
    // Idle for five heartbeats: the pings are all the daemon hears, and enough. Time itself:
    // nothing may happen in this window.
    std::thread::sleep(HEARTBEAT * 5);
    assert_eq!(
        world.proxy.upgrades(),
        before,
        "an idle connection stays up"
    );
    assert!(!world.proxy.closes().contains(&1001));
    world.proxy.set_mode(Mode::Hold);
    let held_at = Instant::now();
    wait_for("the daemon's 1001 close", || {
        world.proxy.closes().contains(&1001).then_some(())
    });
    let noticed = held_at.elapsed();
    assert!(
        noticed >= HEARTBEAT * 2 && noticed < HEARTBEAT * 3 + Duration::from_secs(5),
        "noticed after {noticed:?}"
    );
    world.proxy.set_mode(Mode::Pass);
    wait_for("a reconnect", || {
        (world.proxy.upgrades() > before).then_some(())
    });
    world.online("box");
    world.runs_echo("back");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// The daemon's reader stops while a dozen large executions arrive for its two slots: the
/// server pushes at most the two offers its slots allow (back-pressure by slot credit, so what
/// waits for a slow reader is bounded by its slots), refuses the rest at once with
/// `execution_context_busy` rather than queue them toward it, and once the reader reads again
/// the two offered run exactly once.
fn slow_reader(kind: HostKind) {
    const SUBMITTED: usize = 12;
    const SLOTS: usize = 2;
    // Under the 64 KiB past which the server keeps a capability on disk and offers it by
    // digest: these offers carry their bytes.
    const PADDING: usize = 40 * 1024;
    let world = World::new(&format!("slow-{}", kind.as_str()));
    let marks = world.dir.join("marks");
    let daemon = RunningDaemon::start(
        kind,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    world.proxy.set_mode(Mode::Hold);
    let mut capability = shell(&format!("echo run >> {}\n", marks.display()));
    {
        use base64::Engine as _;
        let padding = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vec![b'p'; PADDING]);
        capability["files"]
            .as_array_mut()
            .expect("files")
            .push(json!({"path": "padding.txt", "contentB64": padding}));
    }
    let ids: Vec<String> = (0..SUBMITTED)
        .map(|_| {
            let (status, e) = world.api(
                "POST",
                "/v1/executions",
                Some(json!({"capability": capability, "context": "box"})),
            );
            assert!(status == 201 || status == 202, "{status} {e}");
            e["executionId"].as_str().expect("id").to_owned()
        })
        .collect();
    let offer = PADDING * 4 / 3;
    wait_for("the two offers the slots allow", || {
        (world.proxy.held() >= SLOTS * offer).then_some(())
    });
    // However long the reader stays away, nothing more is pushed at it. Time itself: a
    // window in which nothing may happen.
    std::thread::sleep(Duration::from_millis(500));
    let held = world.proxy.held();
    assert!(
        held < (SLOTS + 1) * offer,
        "{held} bytes pushed at a reader that stopped, more than two offers of {offer}"
    );
    assert_eq!(count(&marks), 0, "nothing ran while the reader was away");
    world.proxy.set_mode(Mode::Pass);
    let ends: Vec<Value> = ids.iter().map(|id| world.wait_end(id)).collect();
    let exited = ends.iter().filter(|e| e["status"] == "exited").count();
    assert_eq!(exited, SLOTS, "the offered ones ran: {ends:?}");
    assert!(
        ends.iter()
            .filter(|e| e["status"] != "exited")
            .all(|e| e["error"]["code"] == "execution_context_busy"),
        "the rest were refused, not queued toward the stalled reader: {ends:?}"
    );
    assert_eq!(count(&marks), SLOTS, "each offered one ran exactly once");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// A run whose capped output is far longer once escaped as JSON (1 MiB of NUL bytes is six as
/// `\u0000`): its result arrives cut to fit one message and marked `truncated`, on the same
/// connection — never a message over the limit that the server closes with 1009 on every
/// resend.
#[test]
fn a_result_whose_output_escapes_past_the_message_limit_arrives_cut() {
    let world = World::new("escaped");
    let daemon = RunningDaemon::start(
        HostKind::Blocking,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let (status, e) = world.api(
        "POST",
        "/v1/executions",
        Some(json!({
            "capability": shell("echo the-start; head -c 1100000 /dev/zero\n"),
            "context": "box", "wait": true, "waitSecs": 60,
        })),
    );
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["status"], "exited", "{e:.300}");
    assert_eq!(e["truncated"], true);
    let stdout = e["stdout"].as_str().expect("stdout");
    assert!(stdout.starts_with("the-start\n"), "the beginning is kept");
    assert!(stdout.len() < 1 << 20);
    assert!(
        world.proxy.closes().is_empty(),
        "{:?}",
        world.proxy.closes()
    );
    assert_eq!(world.proxy.upgrades(), 1, "no reconnect");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

/// A daemon with no terminal executor announces no `pty`: opening a terminal on it is refused
/// with 409 `environment_unavailable`, and nothing is started or listed.
#[test]
fn a_terminal_on_a_daemon_without_a_pty_executor_is_refused() {
    let world = World::new("no-pty");
    let daemon = RunningDaemon::start(
        HostKind::Blocking,
        &world.dir.join("home"),
        ServerChoice::Join(world.join.clone()),
    );
    world.online("box");
    let (status, refused) = world.api(
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({"cols": 80, "rows": 24})),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["error"]["code"], "environment_unavailable",
        "{refused}"
    );
    let (_, listed) = world.api("GET", "/v1/terminals", None);
    assert_eq!(
        listed["terminals"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    let (_, runs) = world.api("GET", "/v1/runs?context=box", None);
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "{runs}");
    assert_eq!(daemon.drain(), DaemonExit::Drained);
}

macro_rules! conformance {
    ($host:ident, $kind:expr) => {
        mod $host {
            use super::*;
            #[test]
            fn round_trip() {
                super::round_trip($kind)
            }
            #[test]
            fn cut_mid_run() {
                super::cut_mid_run($kind)
            }
            #[test]
            fn replaced() {
                super::replaced($kind)
            }
            #[test]
            fn revoked() {
                super::revoked($kind)
            }
            #[test]
            fn tampered() {
                super::tampered($kind)
            }
            #[test]
            fn heartbeats() {
                super::heartbeats($kind)
            }
            #[test]
            fn oversized() {
                super::oversized($kind)
            }
            #[test]
            fn slow_reader() {
                super::slow_reader($kind)
            }
            #[test]
            fn silent_server() {
                super::silent_server($kind)
            }
        }
    };
}

#[cfg(feature = "tokio")]
conformance!(tokio, HostKind::Tokio);
#[cfg(feature = "smol")]
conformance!(smol, HostKind::Smol);
conformance!(blocking, HostKind::Blocking);
