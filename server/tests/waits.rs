//! Condition waits over the real API and the real WebSocket: bad registrations get typed
//! errors; identical active registrations deduplicate and a finished wait registers again;
//! a daemon (the core's `Daemon` driven by hand, the test deciding each check) gets the waits
//! it missed when it comes up, its match is recorded once however often it arrives, starts
//! one continuation carrying `outpost-wait.json`, and a requester who lost access gets none.

mod common;

use std::time::{Duration, Instant as StdInstant};

use common::{Answer, Machine, Socket, TestServer, bearer, http, inline, now_secs, open_socket};
use outpost_core::b64;
use outpost_core::daemon::{self, Capability, Daemon, DaemonConfig};
use outpost_core::time::{Instant, Now, UnixTime};
use outpost_core::wait::CheckOutcome;
use outpost_core::wire::{CapabilitySource, Environment, RunResult, RunStatus, Timing};
use serde_json::{Value, json};
use tungstenite::Message;

fn call(server: &TestServer, token: &str, method: &str, path: &str, body: &Value) -> Answer {
    let auth = bearer(token);
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    http(
        server.addr(),
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        &bytes,
    )
}

fn register(server: &TestServer, token: &str, body: &Value) -> Answer {
    call(server, token, "POST", "/v1/waits", body)
}

/// The id of a wait whose registration answered 201.
fn created(registered: &Answer) -> String {
    assert_eq!(
        registered.status,
        201,
        "{}",
        String::from_utf8_lossy(&registered.body)
    );
    registered.json()["waitId"]
        .as_str()
        .expect("an id")
        .to_owned()
}

fn show(server: &TestServer, token: &str, id: &str) -> Value {
    let answer = call(
        server,
        token,
        "GET",
        &format!("/v1/waits/{id}"),
        &Value::Null,
    );
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    answer.json()
}

fn now_ms() -> u64 {
    now_secs() * 1000
}

/// The core's daemon over a real socket; the test is its executor and its condition engine.
struct Driver {
    daemon: Daemon,
    machine: Machine,
    origin: StdInstant,
    socket: Option<Socket>,
    /// Whether a check matches now (else it returns `false`).
    matching: bool,
    /// Capabilities of the runs it executed.
    executed: Vec<CapabilitySource>,
    /// The `wait.matched` frames it sent, as sent.
    matched_frames: Vec<Vec<u8>>,
    /// How many `wait.ack` frames arrived.
    acks: usize,
}

impl Driver {
    fn new(server: &TestServer, machine: Machine) -> Driver {
        let config = DaemonConfig {
            environments: vec![Environment::Shell],
            ..DaemonConfig::default()
        };
        let mut driver = Driver {
            daemon: Daemon::new(
                config,
                server.keys(),
                Now {
                    instant: Instant::from_origin(Duration::ZERO),
                    wall: UnixTime(now_secs()),
                },
            ),
            machine,
            origin: StdInstant::now(),
            socket: None,
            matching: false,
            executed: Vec::new(),
            matched_frames: Vec::new(),
            acks: 0,
        };
        driver.drain(server);
        driver
    }

    fn now(&self) -> Now {
        Now {
            instant: Instant::from_origin(self.origin.elapsed()),
            wall: UnixTime(now_secs()),
        }
    }

    fn input(&mut self, input: daemon::Input) {
        let now = self.now();
        self.daemon
            .handle_input(now, input)
            .expect("the daemon takes the input");
    }

    fn send_raw(&mut self, bytes: Vec<u8>) {
        let text = String::from_utf8(bytes).expect("frames are UTF-8");
        if let Some(socket) = self.socket.as_mut() {
            socket.send(Message::Text(text.into())).expect("send");
        }
    }

    fn drain(&mut self, server: &TestServer) {
        loop {
            match self.daemon.poll_output() {
                daemon::Output::Wait { .. } => return,
                daemon::Output::Transmit(bytes) => {
                    if String::from_utf8_lossy(&bytes).contains("\"wait.matched\"") {
                        self.matched_frames.push(bytes.clone());
                    }
                    self.send_raw(bytes);
                }
                daemon::Output::Close { .. } => self.socket = None,
                daemon::Output::Command(daemon::Command::Connect) => {
                    let (ticket, session_id) = self.machine.ticket(server);
                    let socket = open_socket(server.addr(), &ticket).expect("the socket opens");
                    socket
                        .get_ref()
                        .set_read_timeout(Some(Duration::from_millis(50)))
                        .expect("a read timeout");
                    self.socket = Some(socket);
                    self.input(daemon::Input::Connected { session_id });
                }
                daemon::Output::Command(daemon::Command::Execute(execute)) => {
                    if let Capability::Inline(source) = &execute.capability {
                        self.executed.push(source.clone());
                    }
                    let result = RunResult {
                        status: RunStatus::Exited,
                        exit_code: Some(0),
                        signal: None,
                        stdout: "continued\n".into(),
                        stderr: String::new(),
                        truncated: false,
                        timing: Timing::default(),
                        error: None,
                        egress_denied: Vec::new(),
                    };
                    let run_id = execute.run_id.clone();
                    self.input(daemon::Input::RunFinished { run_id, result });
                }
                daemon::Output::Command(daemon::Command::CheckWait { wait_id, check, .. }) => {
                    let outcome = if self.matching {
                        CheckOutcome::Matched {
                            resume_text: "the build is green".into(),
                            payload: Some(r#"{"build":7}"#.into()),
                            evidence: r#"[{"call":"read"}]"#.into(),
                        }
                    } else {
                        CheckOutcome::NotYet
                    };
                    self.input(daemon::Input::WaitChecked {
                        wait_id,
                        check,
                        outcome,
                    });
                }
                daemon::Output::Command(daemon::Command::StopCheck { wait_id, check }) => {
                    self.input(daemon::Input::WaitChecked {
                        wait_id,
                        check,
                        outcome: CheckOutcome::Stopped,
                    });
                }
                daemon::Output::Command(_)
                | daemon::Output::Persist(_)
                | daemon::Output::SaveWait { .. }
                | daemon::Output::ForgetWait { .. }
                | daemon::Output::Event(_) => {}
            }
        }
    }

    /// Reads what arrived (at most one message) and feeds it, then the time.
    fn pump(&mut self, server: &TestServer) {
        if let Some(socket) = self.socket.as_mut() {
            match socket.read() {
                Ok(Message::Text(t)) => {
                    let bytes = t.as_bytes().to_vec();
                    if String::from_utf8_lossy(&bytes).contains("\"wait.ack\"") {
                        self.acks += 1;
                    }
                    self.input(daemon::Input::Frame(bytes));
                }
                Ok(Message::Close(frame)) => {
                    self.socket = None;
                    let code = frame.map(|f| u16::from(f.code));
                    self.input(daemon::Input::Disconnected { code });
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("the socket failed: {e}"),
            }
        }
        self.input(daemon::Input::Timeout);
        self.drain(server);
    }

    /// Pumps until `done` holds (checked against the server's answers), at most 30 s.
    fn until(&mut self, server: &TestServer, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = StdInstant::now() + Duration::from_secs(30);
        while !done(self) {
            assert!(StdInstant::now() < deadline, "timed out waiting for {what}");
            self.pump(server);
        }
    }
}

impl Driver {
    /// Pumps until `box` is online.
    fn until_online(&mut self, server: &TestServer, admin: &str) {
        self.until(server, "the machine to come up", |_| {
            call(
                server,
                admin,
                "GET",
                "/v1/execution-contexts/box",
                &Value::Null,
            )
            .json()["online"]
                == true
        });
    }

    /// Registers `body` as `admin` and pumps until the wait was checked once; its id.
    fn checked_once(&mut self, server: &TestServer, admin: &str, body: &Value) -> String {
        let id = created(&register(server, admin, body));
        self.until(server, "a check", |_| {
            show(server, admin, &id)["checks"].as_u64() >= Some(1)
        });
        id
    }
}

/// A server with `box` registered by the join's token (operated by `admin`).
fn setup(name: &str, seed: u8) -> (TestServer, Machine, String) {
    let dir = common::temp_dir(name);
    let server = TestServer::start(&dir);
    let machine = Machine::new(seed);
    let registered = machine.register(&server, "box");
    assert_eq!(registered.status, 201);
    let admin = server.admin();
    (server, machine, admin)
}

#[test]
fn bad_registrations_get_typed_errors_never_a_500() {
    let (server, _machine, admin) = setup("wait-bad", 41);
    let ok = json!({"context": "box", "condition": "async () => false"});
    let with = |patch: Value| {
        let mut body = ok.clone();
        for (k, v) in patch.as_object().expect("an object") {
            body[k] = v.clone();
        }
        body
    };
    let digest = json!({"capability": {"kind": "digest", "sha256": "a".repeat(64), "size": 10}});
    let cases = [
        (with(json!({"condition": ""})), 400, "invalid_condition"),
        (
            with(json!({"condition": "x".repeat(64 * 1024 + 1)})),
            400,
            "invalid_condition",
        ),
        (
            with(json!({"intervalMs": 999})),
            400,
            "interval_out_of_range",
        ),
        (
            with(json!({"intervalMs": 86_400_001u64})),
            400,
            "interval_out_of_range",
        ),
        (
            with(json!({"expiresAtMs": 1000})),
            400,
            "expires_in_the_past",
        ),
        (with(json!({"context": "nowhere"})), 404, "context_unknown"),
        (with(json!({"context": "cloud"})), 400, "cloud_cannot_wait"),
        (with(json!({"then": digest})), 400, "then_not_inline"),
        (
            with(
                json!({"then": {"capability": {"kind": "inline", "manifest": "nope", "files": []}}}),
            ),
            400,
            "invalid_manifest",
        ),
        (with(json!({"then": 7})), 400, "invalid_body"),
        (with(json!({"intervalMs": "30s"})), 400, "invalid_body"),
        (json!({"condition": "x"}), 400, "invalid_body"),
        (json!([1]), 400, "invalid_body"),
    ];
    for (body, status, code) in cases {
        let answer = register(&server, &admin, &body);
        let shown = String::from_utf8_lossy(&answer.body)
            .chars()
            .take(300)
            .collect::<String>();
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (status, code),
            "{shown}"
        );
    }
    let malformed = http(
        server.addr(),
        "POST",
        "/v1/waits",
        &[("authorization", &bearer(&admin))],
        b"{\"context\": ",
    );
    assert_eq!(malformed.status, 400);
    let missing = call(&server, &admin, "GET", "/v1/waits/wait_nope", &Value::Null);
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "wait_unknown")
    );
    let cancel = call(
        &server,
        &admin,
        "POST",
        "/v1/waits/wait_nope/cancel",
        &Value::Null,
    );
    assert_eq!(
        (cancel.status, cancel.code().as_str()),
        (404, "wait_unknown")
    );
    let anonymous = http(server.addr(), "GET", "/v1/waits", &[], b"");
    assert_eq!(anonymous.status, 401);
    server.stop();
}

#[test]
fn identical_active_waits_deduplicate_and_another_user_sees_none_of_them() {
    let (server, _machine, admin) = setup("wait-dedupe", 42);
    let body = json!({"context": "box", "condition": "async () => false", "intervalMs": 5000,
                      "reason": "deploy"});
    let first = register(&server, &admin, &body);
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let first = first.json();
    assert_eq!(first["state"], "active");
    assert_eq!(first["deduplicated"], false);
    assert_eq!(first["intervalMs"], 5000);
    assert_eq!(first["context"], "box");
    assert_eq!(first["continuation"]["state"], "none");
    let id = first["waitId"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("wait_"), "{id}");
    // The same again (the reason is not part of the identity): the same wait.
    let again = register(
        &server,
        &admin,
        &json!({"context": "box",
        "condition": "async () => false", "intervalMs": 5000, "reason": "other"}),
    );
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["waitId"], id.as_str());
    assert_eq!(again.json()["deduplicated"], true);
    // Another interval is another wait.
    let other = register(
        &server,
        &admin,
        &json!({"context": "box",
        "condition": "async () => false", "intervalMs": 6000}),
    );
    assert_eq!(other.status, 201);
    assert_ne!(other.json()["waitId"], id.as_str());
    let list = call(&server, &admin, "GET", "/v1/waits", &Value::Null).json();
    assert_eq!(list["waits"].as_array().map(Vec::len), Some(2), "{list}");
    // Someone else neither lists nor reads them.
    let made = call(
        &server,
        &admin,
        "POST",
        "/v1/users",
        &json!({"name": "eve"}),
    );
    let eve = made.json()["token"].as_str().expect("a token").to_owned();
    let theirs = call(&server, &eve, "GET", "/v1/waits", &Value::Null).json();
    assert_eq!(theirs, json!({"waits": []}));
    let peek = call(
        &server,
        &eve,
        "GET",
        &format!("/v1/waits/{id}"),
        &Value::Null,
    );
    assert_eq!((peek.status, peek.code().as_str()), (404, "wait_unknown"));
    // Nor may they wait on a machine that is not shared with them.
    let refused = register(&server, &eve, &body);
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (403, "not_shared")
    );
    // The waits survive a restart.
    let server = server.restart();
    assert_eq!(show(&server, &admin, &id)["state"], "active");
    server.stop();
}

#[test]
fn a_match_is_recorded_once_starts_one_continuation_and_a_finished_wait_registers_again() {
    let (server, machine, admin) = setup("wait-match", 43);
    let then = json!({"capability": inline("cat outpost-wait.json\n")});
    let body = json!({"context": "box", "condition": "async () => ({resumeText: 'go'})",
                      "intervalMs": 1000, "then": then});
    // Registered while the machine is offline: it gets the wait when it comes up.
    let id = created(&register(&server, &admin, &body));
    let mut driver = Driver::new(&server, machine);
    // It is checked (not matching yet) and its progress shows.
    driver.until(&server, "a check to show", |_| {
        show(&server, &admin, &id)["checks"].as_u64() >= Some(1)
    });
    let progress = show(&server, &admin, &id);
    assert_eq!(progress["state"], "active");
    assert!(progress["nextCheckAtMs"].as_u64() > Some(0), "{progress}");
    driver.matching = true;
    driver.until(&server, "the match and its continuation", |d| {
        let w = show(&server, &admin, &id);
        w["state"] == "matched" && w["continuation"]["state"] == "started" && !d.executed.is_empty()
    });
    let matched = show(&server, &admin, &id);
    assert_eq!(matched["resumeText"], "the build is green");
    assert_eq!(matched["payload"], json!({"build": 7}));
    assert_eq!(matched["evidence"], json!([{"call": "read"}]));
    assert!(matched["endedAtMs"].as_u64() > Some(0));
    let continuation = &matched["continuation"];
    assert_eq!(continuation["id"], format!("{id}.then"));
    let exec_id = continuation["executionId"]
        .as_str()
        .expect("an execution")
        .to_owned();
    assert_eq!(exec_id, format!("ex_{id}.then"));
    // The continuation carries the match.
    let CapabilitySource::Inline { files, .. } = &driver.executed[0] else {
        panic!("an inline continuation");
    };
    let file = files
        .iter()
        .find(|f| f.path == "outpost-wait.json")
        .expect("outpost-wait.json");
    let content: Value =
        serde_json::from_slice(&b64::decode(&file.content_b64).expect("base64")).expect("JSON");
    assert_eq!(
        content,
        json!({"waitId": id, "resumeText": "the build is green", "payload": {"build": 7}})
    );
    driver.until(&server, "the continuation to end", |_| {
        let e = call(
            &server,
            &admin,
            "GET",
            &format!("/v1/executions/{exec_id}"),
            &Value::Null,
        );
        e.json()["status"] == "exited"
    });
    // The same match again (a daemon sends it until acknowledged): acknowledged, nothing new.
    let acks = driver.acks;
    let frame = driver.matched_frames[0].clone();
    driver.send_raw(frame.clone());
    driver.send_raw(frame);
    driver.until(&server, "both repeats to be acknowledged", |d| {
        d.acks >= acks + 2
    });
    let after = show(&server, &admin, &id);
    assert_eq!(after["continuation"], matched["continuation"]);
    assert_eq!(after["endedAtMs"], matched["endedAtMs"]);
    assert_eq!(driver.executed.len(), 1, "one continuation");
    let runs = call(&server, &admin, "GET", "/v1/runs", &Value::Null).json();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    // Cancelling an ended wait answers its end.
    let cancel = call(
        &server,
        &admin,
        "POST",
        &format!("/v1/waits/{id}/cancel"),
        &Value::Null,
    );
    assert_eq!(cancel.json()["state"], "matched");
    // A finished wait may be registered again: a new wait.
    let again = register(&server, &admin, &body);
    assert_eq!(again.status, 201);
    assert_ne!(again.json()["waitId"], id.as_str());
    server.stop();
}

#[test]
fn a_cancelled_wait_ends_cancelled_and_starts_nothing() {
    let (server, machine, admin) = setup("wait-cancel", 44);
    let mut driver = Driver::new(&server, machine);
    driver.until_online(&server, &admin);
    let body = json!({"context": "box", "condition": "async () => false", "intervalMs": 1000,
                      "expiresAtMs": now_ms() + 3_600_000,
                      "then": {"capability": inline("echo no\n")}});
    let id = driver.checked_once(&server, &admin, &body);
    let cancel = call(
        &server,
        &admin,
        "POST",
        &format!("/v1/waits/{id}/cancel"),
        &Value::Null,
    );
    assert_eq!(cancel.status, 200);
    assert!(
        matches!(
            cancel.json()["state"].as_str(),
            Some("cancelling" | "failed")
        ),
        "{}",
        cancel.json()
    );
    driver.until(&server, "the daemon to confirm", |_| {
        show(&server, &admin, &id)["state"] == "failed"
    });
    let ended = show(&server, &admin, &id);
    assert_eq!(ended["failReason"], "cancelled");
    assert_eq!(ended["continuation"]["state"], "none");
    // Cancelling again answers the end.
    let again = call(
        &server,
        &admin,
        "POST",
        &format!("/v1/waits/{id}/cancel"),
        &Value::Null,
    );
    assert_eq!(again.json()["state"], "failed");
    assert!(driver.executed.is_empty());
    server.stop();
}

#[test]
fn a_requester_who_lost_access_gets_no_continuation() {
    let dir = common::temp_dir("wait-access");
    let server = TestServer::start(&dir);
    let admin = server.admin();
    let token = |name: &str| {
        let made = call(
            &server,
            &admin,
            "POST",
            "/v1/users",
            &json!({ "name": name }),
        );
        made.json()["token"].as_str().expect("a token").to_owned()
    };
    let (ana, bo) = (token("ana"), token("bo"));
    let machine = Machine::new(45);
    let registered = machine.send_with(
        server.addr(),
        "POST",
        "/v1/execution-contexts",
        &machine.register_body("box"),
        &machine.nonce(),
        &[("authorization", &bearer(&ana))],
    );
    assert_eq!(registered.status, 201);
    let share = call(
        &server,
        &ana,
        "POST",
        "/v1/execution-contexts/box/share",
        &json!({"allMembers": true}),
    );
    assert_eq!(
        share.status,
        200,
        "{}",
        String::from_utf8_lossy(&share.body)
    );
    let body = json!({"context": "box", "condition": "async () => false", "intervalMs": 1000,
                      "then": {"capability": inline("echo hi\n")}});
    let early = register(&server, &bo, &body);
    assert_eq!((early.status, early.code().as_str()), (403, "not_opted_in"));
    let opt_in = call(
        &server,
        &bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        &json!({}),
    );
    assert_eq!(
        opt_in.status,
        200,
        "{}",
        String::from_utf8_lossy(&opt_in.body)
    );
    let id = created(&register(&server, &bo, &body));
    let mut driver = Driver::new(&server, machine);
    driver.until(&server, "a check", |_| {
        show(&server, &bo, &id)["checks"].as_u64() >= Some(1)
    });
    let out = call(
        &server,
        &bo,
        "DELETE",
        "/v1/execution-contexts/box/opt-in",
        &Value::Null,
    );
    assert_eq!(out.status, 200, "{}", String::from_utf8_lossy(&out.body));
    driver.matching = true;
    driver.until(&server, "the match and its continuation's fate", |_| {
        let w = show(&server, &bo, &id);
        w["state"] == "matched" && w["continuation"]["state"] != "pending"
    });
    let wait = show(&server, &bo, &id);
    assert_eq!(wait["continuation"]["state"], "access_lost", "{wait}");
    assert_eq!(wait["continuation"]["error"], "not_opted_in");
    assert_eq!(wait["continuation"]["executionId"], Value::Null);
    assert_eq!(wait["resumeText"], "the build is green");
    assert!(driver.executed.is_empty());
    server.stop();
}

#[test]
fn revoking_a_context_ends_its_open_waits_and_refuses_new_ones() {
    let (server, machine, admin) = setup("wait-revoke", 46);
    let mut driver = Driver::new(&server, machine);
    driver.until_online(&server, &admin);
    let body = json!({"context": "box", "condition": "async () => false", "intervalMs": 1000,
                      "then": {"capability": inline("echo never\n")}});
    let id = driver.checked_once(&server, &admin, &body);
    let revoked = call(
        &server,
        &admin,
        "POST",
        "/v1/execution-contexts/box/revoke",
        &Value::Null,
    );
    assert_eq!(revoked.status, 200, "{}", revoked.json());
    let ended = show(&server, &admin, &id);
    assert_eq!(ended["state"], "failed", "{ended}");
    assert_eq!(ended["failReason"], "context_revoked");
    assert!(ended["endedAtMs"].as_u64().is_some(), "{ended}");
    assert_eq!(ended["nextCheckAtMs"], Value::Null);
    assert_eq!(ended["continuation"]["state"], "none");
    let again = register(&server, &admin, &body);
    assert_eq!(
        (again.status, again.code().as_str()),
        (409, "context_revoked")
    );
    assert!(driver.executed.is_empty());
    server.stop();
}

/// The wait once its continuation left `pending` (the restarted server resumes it as it starts).
fn unpended(server: &TestServer, admin: &str, id: &str) -> Value {
    let deadline = StdInstant::now() + Duration::from_secs(30);
    loop {
        let w = show(server, admin, id);
        if w["continuation"]["state"] != "pending" {
            return w;
        }
        assert!(StdInstant::now() < deadline, "still pending: {w}");
        // The poll's pace: the wait is shown again.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A crash between recording a match and submitting its follow-up leaves the continuation
/// `pending`: the next start submits it once; one between submitting and settling leaves it
/// `pending` with its execution already there: the next start settles it without submitting
/// again.
#[test]
fn a_pending_continuation_is_submitted_once_after_a_restart() {
    let (server, machine, admin) = setup("wait-pending", 47);
    let mut driver = Driver::new(&server, machine);
    driver.until_online(&server, &admin);
    let body = json!({"context": "box", "condition": "async () => false", "intervalMs": 60000,
                      "then": {"capability": inline("echo resumed\n")}});
    let id = driver.checked_once(&server, &admin, &body);
    drop(driver);
    let state = server.state.clone();
    server.stop();
    // What a crash right after the match's transaction leaves: a matched wait, its
    // continuation pending, no execution yet.
    let columns = "context_id, context_name, requester, source, interval_ms, expires_at_ms, \
                   reason, then_json, created_at_ms, checks, consecutive_errors";
    common::TestDb::open(&state).execute(&format!(
        "INSERT INTO waits (id, dedupe_key, state, resume_text, payload, evidence, \
         ended_at_ms, continuation_state, {columns}) \
         SELECT 'wait_crashed', dedupe_key || '.crashed', 'matched', 'it is up', \
         '{{\"n\":1}}', '[]', created_at_ms, 'pending', {columns} FROM waits WHERE id = '{id}'"
    ));

    let server = TestServer::start(&state);
    let exec_id = "ex_wait_crashed.then";
    let started = unpended(&server, &admin, "wait_crashed");
    assert_eq!(started["continuation"]["state"], "started", "{started}");
    assert_eq!(started["continuation"]["executionId"], exec_id);
    let execution = call(
        &server,
        &admin,
        "GET",
        &format!("/v1/executions/{exec_id}"),
        &Value::Null,
    );
    assert_eq!(execution.status, 200, "{}", execution.json());
    let state = server.state.clone();
    server.stop();

    // A crash after the submission, before it was settled: pending again, execution there.
    let db = common::TestDb::open(&state);
    db.execute(
        "UPDATE waits SET continuation_state = 'pending', continuation_execution_id = NULL \
         WHERE id = 'wait_crashed'",
    );
    // A mark on the execution's row: a second submission would write the row anew.
    db.execute(&format!(
        "UPDATE executions SET finished_at = 42 WHERE id = '{exec_id}'"
    ));
    let server = TestServer::start(&state);
    let settled = unpended(&server, &admin, "wait_crashed");
    assert_eq!(settled["continuation"]["state"], "started");
    assert_eq!(settled["continuation"]["executionId"], exec_id);
    let again = call(
        &server,
        &admin,
        "GET",
        &format!("/v1/executions/{exec_id}"),
        &Value::Null,
    );
    assert_eq!(again.json()["createdAt"], execution.json()["createdAt"]);
    assert_eq!(
        again.json()["finishedAt"],
        42,
        "the execution's row is the one from before the restart, not a new submission"
    );
    server.stop();
}
