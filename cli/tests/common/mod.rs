//! The real `outpost` binary as a server and as daemons, in temporary folders, with an HTTP
//! client for the API and helpers that wait for a condition (never for a fixed time).

#![allow(dead_code)]

#[path = "../../../server/tests/common/postgres.rs"]
pub mod postgres;
pub mod viewer;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any condition may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The `outpost` under test: `OUTPOST_TEST_BIN` when set (a target folder shared between
/// worktrees may hold another worktree's build at the usual path), else cargo's.
pub fn binary() -> PathBuf {
    std::env::var_os("OUTPOST_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_outpost")))
}

/// A fresh folder under the system's temporary folder.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outpost-e2e-{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

/// Polls `check` every 50 ms until it gives a value; fails the test after [`PATIENCE`].
pub fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for_explained(what, check, String::new)
}

/// [`wait_for`], and on a timeout the failure also shows what `explain` says (a log's tail).
pub fn wait_for_explained<T>(
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    explain: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            explain()
        );
        // The poll's pace: `check` is asked again at the top of the loop.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` to end and collects what it printed; after [`PATIENCE`] it is killed
/// and the test fails with what it printed so far, so a program that never ends fails its
/// test instead of hanging the run.
pub fn finish(child: Child, what: &str) -> std::process::Output {
    let pid = child.id();
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match ended.recv_timeout(PATIENCE) {
        Ok(output) => output.unwrap_or_else(|e| panic!("waiting for {what}: {e}")),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let output = ended
                .recv_timeout(PATIENCE)
                .ok()
                .and_then(Result::ok)
                .map(|o| {
                    format!(
                        "stdout: {}\nstderr: {}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .unwrap_or_default();
            panic!("{what} did not end within {PATIENCE:?} and was killed\n{output}");
        }
    }
}

/// A running `outpost serve`.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub join: String,
    pub admin: String,
    pub state: PathBuf,
    pub port: u16,
}

impl Server {
    /// Starts a server with `state` on `port` (0: a free one) and waits for its join line.
    pub fn start(state: &Path, port: u16) -> Server {
        Server::start_with(state, port, &[])
    }

    /// [`Server::start`] with `extra` arguments to `outpost serve`.
    pub fn start_with(state: &Path, port: u16, extra: &[&std::ffi::OsStr]) -> Server {
        Server::start_at(state, &format!("127.0.0.1:{port}"), extra, None)
    }

    /// A server listening on `listen` (`0.0.0.0:0`: every address, a free port), with
    /// `extra` arguments.
    #[allow(dead_code)]
    pub fn start_with_listen(state: &Path, listen: &str, extra: &[&std::ffi::OsStr]) -> Server {
        Server::start_at(state, listen, extra, None)
    }

    /// [`Server::start`] on a free port, logging at `info` to the file `log`.
    #[allow(dead_code)]
    pub fn start_logging(state: &Path, log: &Path) -> Server {
        Server::start_at(state, "127.0.0.1:0", &[], Some(log))
    }

    fn start_at(
        state: &Path,
        listen: &str,
        extra: &[&std::ffi::OsStr],
        log: Option<&Path>,
    ) -> Server {
        let (level, stderr) = match log {
            Some(log) => (
                "info",
                Stdio::from(std::fs::File::create(log).expect("log")),
            ),
            None => ("warn", Stdio::inherit()),
        };
        let mut command = Command::new(binary());
        command
            .args(["serve", "--listen", listen, "--state"])
            .arg(state)
            .args(["--cloud", "shell"])
            .args(extra);
        // OUTPOST_TEST_DATABASE=postgres: the records in a database of the tests' PostgreSQL
        // cluster named after the state folder (a restart over it finds them).
        if let Some(url) = postgres::test_url(state) {
            command.arg("--database").arg(url);
        }
        let mut child = command
            .env("OUTPOST_LOG", level)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("outpost serve starts");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut url = String::new();
        let mut join = String::new();
        for line in lines.by_ref() {
            let line = line.expect("a line");
            if let Some(rest) = line.strip_prefix("listening on ") {
                url = rest.to_owned();
            } else if let Some(rest) = line.strip_prefix("join: ") {
                join = rest.to_owned();
                break;
            }
        }
        assert!(
            !url.is_empty() && !join.is_empty(),
            "serve printed its lines"
        );
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let admin = std::fs::read_to_string(state.join("admin.token"))
            .expect("admin.token")
            .trim()
            .to_owned();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port");
        Server {
            child,
            url,
            join,
            admin,
            state: state.to_path_buf(),
            port,
        }
    }

    /// kill -9.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The same state folder and port, started again.
    pub fn restart(mut self) -> Server {
        self.kill();
        Server::start(&self.state.clone(), self.port)
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        api(&self.url, &self.admin, method, path, body)
    }

    /// `GET /metrics` as text (empty when it does not answer).
    pub fn metrics(&self) -> String {
        ureq::get(&format!("{}/metrics", self.url))
            .call()
            .ok()
            .and_then(|r| r.into_body().read_to_string().ok())
            .unwrap_or_default()
    }

    /// The context's view, once `check` holds for it.
    pub fn wait_context(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        wait_for(what, || {
            let (status, ctx) = self.api("GET", &format!("/v1/execution-contexts/{name}"), None);
            (status == 200 && check(&ctx)).then_some(ctx)
        })
    }

    /// The execution, once its status is `status`.
    /// Waits for execution `id` to reach `status`; a timeout shows where it is.
    pub fn wait_status(&self, id: &str, status: &str) -> Value {
        let path = format!("/v1/executions/{id}");
        wait_for_explained(
            &format!("{id} to be {status}"),
            || {
                let (_, e) = self.api("GET", &path, None);
                (e["status"] == status).then_some(e)
            },
            || format!("it is: {}", self.api("GET", &path, None).1),
        )
    }

    /// Starts an execution of `capability` on `context` without waiting for it.
    pub fn submit(&self, capability: &Value, context: &str) -> String {
        let (status, e) = self.api(
            "POST",
            "/v1/executions",
            Some(serde_json::json!({"capability": capability, "context": context})),
        );
        assert!(status == 201 || status == 202, "submitted: {status} {e}");
        e["executionId"].as_str().expect("an id").to_owned()
    }
}

/// A server in `dir/server` and a daemon named `name` (home `dir/home`) joined to it, once the
/// daemon is online.
#[allow(dead_code)]
pub fn server_with_daemon(dir: &Path, name: &str) -> (Server, Daemon) {
    let server = Server::start(&dir.join("server"), 0);
    let daemon = Daemon::start(&dir.join("home"), name, Some(&server.join), "tokio");
    server.wait_context(name, "the daemon to come online", |c| c["online"] == true);
    (server, daemon)
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One HTTP call; the status and the JSON body (null when empty or not JSON).
pub fn api(base: &str, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    api_within(Duration::from_secs(30), base, token, method, path, body)
}

/// [`api`] that gives up after `patience` (status 0 when no answer came in time).
pub fn api_within(
    patience: Duration,
    base: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(patience))
        .build()
        .new_agent();
    api_through(&agent, base, token, method, path, body)
}

/// [`api`] through `agent` (one that trusts a test's own certificates, say); status 0 when
/// no answer came.
pub fn api_through(
    agent: &ureq::Agent,
    base: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{base}{path}");
    let auth = format!("Bearer {token}");
    let response = match method {
        "GET" => agent.get(&url).header("authorization", &auth).call(),
        "DELETE" => agent.delete(&url).header("authorization", &auth).call(),
        _ => {
            let text = body.map(|b| b.to_string()).unwrap_or_default();
            let request = if method == "PATCH" {
                agent.patch(&url)
            } else if method == "PUT" {
                agent.put(&url)
            } else {
                agent.post(&url)
            };
            request
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(text.as_bytes())
        }
    };
    match response {
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.into_body().read_to_string().unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// A running `outpost daemon`.
pub struct Daemon {
    pub child: Child,
    pub home: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts a daemon on `home`; `join` on first start. The OS keyring is off (a developer's
    /// login keyring is not the test's to fill); [`Daemon::start_with`] sets it otherwise.
    pub fn start(home: &Path, name: &str, join: Option<&str>, host: &str) -> Daemon {
        Daemon::start_with(home, name, join, host, &[("OUTPOST_KEYRING", "off")])
    }

    /// [`Daemon::start`] with `env` added to the environment (an empty value removes one).
    ///
    /// The tests that are not about the sandbox count their runs in files outside the run's
    /// folders and read their pids, so the owner of their machine lets the operator opt out
    /// (`confinement: operator-may-opt-out`) and [`shell_capability`] says `confine: false`;
    /// [`Daemon::start_sandboxed`] keeps the owner's default policy.
    pub fn start_with(
        home: &Path,
        name: &str,
        join: Option<&str>,
        host: &str,
        env: &[(&str, &str)],
    ) -> Daemon {
        let_operator_opt_out(home);
        Daemon::start_sandboxed(home, name, join, host, env)
    }

    /// [`Daemon::start_with`] under the owner's own policy (by default every run sandboxed).
    pub fn start_sandboxed(
        home: &Path,
        name: &str,
        join: Option<&str>,
        host: &str,
        env: &[(&str, &str)],
    ) -> Daemon {
        std::fs::create_dir_all(home).expect("home");
        let log = home.join(format!(
            "daemon-{}.log",
            Instant::now().elapsed().as_nanos()
        ));
        let mut command = Command::new(binary());
        command
            .args(["daemon", "--name", name, "--host", host, "--home"])
            .arg(home);
        if let Some(join) = join {
            command.args(["--join", join]);
        }
        for (key, value) in env {
            if value.is_empty() {
                command.env_remove(key);
            } else {
                command.env(key, value);
            }
        }
        let child = command
            .env("OUTPOST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("outpost daemon starts");
        Daemon {
            child,
            home: home.to_path_buf(),
            log,
        }
    }

    /// kill -9.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its process id.
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM: the daemon drains and exits 0.
    #[allow(dead_code)]
    pub fn signal_term(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM");
    }

    /// Its exit code, once it exits.
    pub fn wait_exit(&mut self) -> i32 {
        let child = &mut self.child;
        wait_for("the daemon to exit", || {
            child
                .try_wait()
                .ok()
                .flatten()
                .map(|s| s.code().unwrap_or(-1))
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log, for a failure message.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `outpost context commands on|off` for the daemon's home (the owner's switch, and the
/// signed machine route that sets the server's).
pub fn commands_switch(home: &Path, state: &str) {
    let out = Command::new(binary())
        .args(["context", "commands", state, "--home"])
        .arg(home)
        .env("OUTPOST_KEYRING", "off")
        .output()
        .expect("outpost context commands runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `outpost context policy ARGS --home HOME`, as the machine's owner runs it; it must succeed.
pub fn owner_policy(home: &Path, args: &[&str]) {
    let out = Command::new(binary())
        .args(["context", "policy"])
        .args(args)
        .arg("--home")
        .arg(home)
        .output()
        .expect("outpost context policy runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `outpost ARGS --server URL` as the holder of `token`.
pub fn outpost_as(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .args(["--server", &server.url])
        .env("OUTPOST_TOKEN", token)
        .output()
        .expect("outpost runs")
}

/// Writes `confinement: operator-may-opt-out` into the local policy of the daemon home
/// `home` (an `OUTPOST_HOME`), unless the policy already says a rule.
pub fn let_operator_opt_out(home: &Path) {
    let file = home.join("config/policy.json");
    let mut policy: serde_json::Value = std::fs::read(&file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    if policy.get("confinement").is_none() {
        policy["confinement"] = "operator-may-opt-out".into();
        std::fs::create_dir_all(home.join("config")).expect("config");
        std::fs::write(&file, policy.to_string()).expect("policy.json");
    }
}

/// An inline shell capability running `script`, asking to run unsandboxed where the owner
/// lets the operator opt out (see [`Daemon::start_with`]).
pub fn shell_capability(name: &str, script: &str) -> Value {
    use base64::Engine as _;
    let content = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script);
    serde_json::json!({
        "kind": "inline",
        "manifest": format!("name: {name}\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\nlimits:\n  timeout_ms: 120000\n"),
        "files": [{"path": "run.sh", "contentB64": content}],
    })
}

/// The lines of a file (none if it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The two pids that a job `sh -c 'sleep 300 & echo $$ $! > FILE; wait'` wrote to `file`.
pub fn job_pids(file: &Path) -> Vec<i32> {
    wait_for("the job's pids", || {
        let text = std::fs::read_to_string(file).ok()?;
        let pids: Vec<i32> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        (pids.len() == 2).then_some(pids)
    })
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// The run ids in a daemon's outbox: its SQLite file read beside the daemon, the snapshot with
/// the journal folded in, as the daemon itself reads it at start.
pub fn outbox(home: &Path) -> Vec<String> {
    use outpost_core::daemon::{DaemonRecord, DaemonSnapshot};
    let Ok(conn) = rusqlite::Connection::open_with_flags(
        home.join("state/daemon.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    ) else {
        return Vec::new();
    };
    let mut snapshot = conn
        .query_row("SELECT bytes FROM snapshot WHERE id = 1", [], |r| {
            r.get::<_, Vec<u8>>(0)
        })
        .ok()
        .and_then(|bytes| DaemonSnapshot::decode(&bytes).ok())
        .unwrap_or_default();
    if let Ok(mut stmt) = conn.prepare("SELECT bytes FROM records ORDER BY seq")
        && let Ok(rows) = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))
    {
        for bytes in rows.flatten() {
            if let Ok(record) = DaemonRecord::decode(&bytes) {
                snapshot.apply(&record);
            }
        }
    }
    snapshot
        .outbox
        .into_iter()
        .map(|row| row.run_id.into_string())
        .collect()
}

/// `outpost daemon` under a stand-in for its service manager: a loop that starts it again
/// whenever it exits non-zero, as the generated systemd unit does (`Restart=always`,
/// `RestartPreventExitStatus=0`), writing each exit code to `exits` and the daemon's stderr
/// to `log`. Stopped, with its daemon, however the test ends.
pub struct Service {
    child: Child,
    home: PathBuf,
}

impl Service {
    /// Joins a daemon named `name` on `home` to `server` from a terminal, stops it (exit 0),
    /// and runs it under the stand-in from then on, once online with requests from afar;
    /// exit codes go to `dir/exits`.
    pub fn joined(server: &Server, dir: &Path, home: &Path, name: &str) -> Service {
        let mut first = Daemon::start(home, name, Some(&server.join), "tokio");
        server.wait_context(name, "online", |c| c["online"] == true);
        first.signal_term();
        assert_eq!(first.wait_exit(), 0, "{}", first.log_text());
        let service = Service::start(home, name, &dir.join("exits"), &dir.join("service.log"));
        server.wait_context(name, "online under the stand-in", |c| {
            c["online"] == true && c["control"] == true
        });
        service
    }

    /// Starts the stand-in for the joined daemon home `home`, named `name`.
    pub fn start(home: &Path, name: &str, exits: &Path, log: &Path) -> Service {
        let script = format!(
            "while :; do \"$0\" daemon --name {name} --host tokio --home '{home}' 2>>'{log}'; code=$?; echo $code >> '{exits}'; [ $code -eq 0 ] && break; sleep 0.2; done",
            home = home.display(),
            log = log.display(),
            exits = exits.display(),
        );
        let child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg(binary())
            .env("OUTPOST_DAEMON_SERVICE", "systemd")
            .env("OUTPOST_KEYRING", "off")
            .env("OUTPOST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the stand-in starts");
        Service {
            child,
            home: home.to_path_buf(),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("pkill")
            .args([
                "-KILL",
                "-f",
                "--",
                &format!("--home {}", self.home.display()),
            ])
            .status();
    }
}

/// The pid of the daemon connected on `home`, as its `state/connection.json` says.
pub fn daemon_pid(home: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(home.join("state/connection.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    (v["connected"] == true)
        .then(|| v["pid"].as_u64())
        .flatten()
}

/// A default self-signed certificate and its key in `dir` (`cert.pem`, `key.pem`), as
/// `openssl req -x509` makes them.
#[allow(dead_code)]
pub fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=outpost-test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| {
            panic!("openssl (Debian's openssl; ./test installs it) cannot run: {e}")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}
