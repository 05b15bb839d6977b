//! Terminals across the wire, with the real binary as server and daemon and a WebSocket
//! viewer: a login shell opened on `box` answers `echo $((6*7))` with 42, Ctrl-C reaches its
//! foreground program, python3's REPL answers, a resize reaches
//! `stty size`, a second viewer joins late and is shown the screen again, a ticket is used
//! once, a viewer that drops without a close is audited as dropped, and `exit` ends the
//! terminal with its exit code.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, api, temp_dir, wait_for};
use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

type Socket = WebSocket<MaybeTlsStream<TcpStream>>;

/// A viewer: its socket and everything it has been shown.
struct Viewer {
    socket: Socket,
    screen: Vec<u8>,
    texts: Vec<Value>,
    closed: Option<u16>,
}

impl Viewer {
    fn connect(server: &Server, terminal: &str, ticket: &str) -> Viewer {
        let url = format!(
            "ws://127.0.0.1:{}/v1/terminals/{terminal}/connect?ticket={ticket}",
            server.port
        );
        let (socket, _) = tungstenite::connect(url).expect("the viewer socket opens");
        if let MaybeTlsStream::Plain(tcp) = socket.get_ref() {
            tcp.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("a read timeout");
        }
        Viewer {
            socket,
            screen: Vec::new(),
            texts: Vec::new(),
            closed: None,
        }
    }

    /// Reads until `done` says so, failing after 20 s with what was shown.
    fn until(&mut self, what: &str, done: impl Fn(&Viewer) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen: {:?}; messages: {:?}",
                String::from_utf8_lossy(&self.screen),
                self.texts
            );
            match self.socket.read() {
                Ok(Message::Binary(bytes)) => self.screen.extend_from_slice(&bytes),
                Ok(Message::Text(text)) => {
                    self.texts
                        .push(serde_json::from_str(&text).expect("a JSON text message"));
                }
                Ok(Message::Close(frame)) => {
                    self.closed = Some(frame.map(|f| u16::from(f.code)).unwrap_or(1005));
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    if self.closed.is_none() {
                        self.closed = Some(1006);
                    }
                    assert!(done(self), "the socket ended before {what}");
                    return;
                }
            }
        }
    }

    fn shows(&self, text: &str) -> bool {
        String::from_utf8_lossy(&self.screen).contains(text)
    }

    fn said(&self, kind: &str) -> Option<&Value> {
        self.texts.iter().find(|t| t["type"] == kind)
    }

    fn type_keys(&mut self, keys: &str) {
        self.socket
            .send(Message::Binary(keys.as_bytes().to_vec().into()))
            .expect("keys sent");
    }

    fn control(&mut self, message: Value) {
        self.socket
            .send(Message::Text(message.to_string().into()))
            .expect("a control message sent");
    }
}

fn audit(server: &Server) -> Vec<Value> {
    let (status, body) = server.api("GET", "/v1/audit?limit=200", None);
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_login_shell_through_the_relay_answers_resizes_replays_and_exits() {
    let dir = temp_dir("terminal");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    assert!(
        server.api("GET", "/v1/execution-contexts/box", None).1["environments"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e == "pty")),
        "the daemon announces its terminal executor"
    );

    // Someone who does not operate the machine never gets a terminal on it.
    let (status, made) = server.api("POST", "/v1/users", Some(json!({"name": "bo"})));
    assert_eq!(status, 201, "{made}");
    let bo = made["token"].as_str().expect("a token").to_owned();
    let (status, refused) = api(
        &server.url,
        &bo,
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({})),
    );
    assert!(
        (status == 403 && refused["error"]["code"] == "pty_operator_only")
            || (status == 404 && refused["error"]["code"] == "context_unknown"),
        "{status} {refused}"
    );
    let (status, bad) = server.api(
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({"cols": 0})),
    );
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_body"))
    );

    let (status, opened) = server.api(
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({"cols": 100, "rows": 30})),
    );
    assert_eq!(status, 201, "{opened}");
    let terminal = opened["terminalId"].as_str().expect("an id").to_owned();
    let ticket = opened["ticket"].as_str().expect("a ticket").to_owned();
    assert_eq!(opened["role"], "operator");

    let mut first = Viewer::connect(&server, &terminal, &ticket);
    first.until("ready", |v| v.said("ready").is_some());
    let ready = first.said("ready").expect("ready").clone();
    assert_eq!(
        (ready["cols"].as_u64(), ready["rows"].as_u64()),
        (Some(100), Some(30))
    );
    assert_eq!(ready["role"], "operator");

    // A ticket is spent once.
    let url = format!(
        "ws://127.0.0.1:{}/v1/terminals/{terminal}/connect?ticket={ticket}",
        server.port
    );
    match tungstenite::connect(url) {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!(
            "a spent ticket must be refused, got {:?}",
            other.map(|_| ())
        ),
    }

    first.type_keys("echo $((6*7))\r");
    first.until("42", |v| v.shows("42\r\n"));

    // Ctrl-C reaches the foreground program, and a REPL answers through the relay.
    first.type_keys("echo sleeping-$((2+2)); sleep 97\r");
    first.until("the sleep", |v| v.shows("sleeping-4\r\n"));
    // The echo's output comes before the shell has made `sleep` the terminal's foreground
    // job: Ctrl-C goes in once `ps` shows it there (`+`).
    common::wait_for("sleep 97 in the terminal's foreground", || {
        let ps = std::process::Command::new("ps")
            .args(["-eo", "stat=,args="])
            .output()
            .ok()?;
        String::from_utf8_lossy(&ps.stdout)
            .lines()
            .any(|l| {
                l.trim_end().ends_with("sleep 97")
                    && l.split_whitespace().next().is_some_and(|s| s.contains('+'))
            })
            .then_some(())
    });
    first.type_keys("\x03");
    first.type_keys("echo back-$((1+1))\r");
    first.until("the prompt after Ctrl-C", |v| v.shows("back-2\r\n"));
    first.type_keys("python3 -q\r");
    first.until("the python prompt", |v| v.shows(">>> "));
    first.type_keys("7*8\r");
    first.until("python's answer", |v| v.shows("56\r\n"));
    first.type_keys("exit()\r");

    first.control(json!({"type": "resize", "cols": 120, "rows": 40}));
    first.type_keys("stty size\r");
    first.until("the new size", |v| v.shows("40 120"));

    // A second viewer joins late and sees the screen again.
    let (status, joined) = server.api("POST", &format!("/v1/terminals/{terminal}/tickets"), None);
    assert_eq!(status, 201, "{joined}");
    let mut second = Viewer::connect(&server, &terminal, joined["ticket"].as_str().unwrap());
    second.until("the replay", |v| v.said("live").is_some());
    assert!(second.said("replay").is_some(), "{:?}", second.texts);
    assert!(
        second.shows("42") && second.shows("40 120"),
        "the screen again"
    );
    let (status, listed) = server.api("GET", "/v1/terminals", None);
    assert_eq!(status, 200, "{listed}");
    let row = listed["terminals"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["terminalId"] == terminal.as_str()))
        .cloned()
        .expect("the terminal is listed");
    assert_eq!(
        (row["viewers"].as_u64(), row["state"].as_str()),
        (Some(2), Some("open"))
    );

    // The second viewer's connection drops without a close: audited as dropped.
    drop(second);
    wait_for("the dropped viewer's session end in the audit", || {
        audit(&server)
            .iter()
            .find(|e| {
                e["kind"] == "terminal.session.ended"
                    && e["detail"].as_str().is_some_and(|d| d.contains("dropped"))
            })
            .cloned()
    });

    first.type_keys("exit 3\r");
    first.until("the exit", |v| {
        v.said("exit").is_some() && v.closed.is_some()
    });
    assert_eq!(first.said("exit").unwrap()["exitCode"], 3);
    let execution = server.wait_status(&terminal, "exited");
    assert_eq!(execution["exitCode"], 3, "{execution}");
    let kinds: Vec<String> = audit(&server)
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect();
    for kind in ["terminal.session.started", "terminal.session.ended"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
}

#[test]
fn outpost_attach_drives_a_terminal_from_a_pipe_and_exits_with_the_program_s_code() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let dir = temp_dir("attach");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    assert!(
        server.api("GET", "/v1/execution-contexts/box", None).1["environments"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e == "pty")),
        "the daemon announces its terminal executor"
    );
    let mut attach = Command::new(common::binary())
        .args(["attach", "box", "--server", &server.url])
        .env("OUTPOST_TOKEN", &server.admin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outpost attach starts");
    // Typed at once: the keys wait for the shell to come up.
    attach
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"echo $((6*7))\nexit 5\n")
        .expect("keys written");
    let out = common::finish(attach, "outpost attach");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("42\r\n"), "{stdout}");
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, body) = server.api("GET", "/v1/terminals", None);
    assert!(
        body["terminals"]
            .as_array()
            .is_some_and(|t| t.iter().all(|t| t["state"] != "open")),
        "the terminal is gone once its program exited: {body}"
    );
}

#[test]
fn attach_joins_an_open_terminal_and_the_detach_key_leaves_it_running() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let dir = temp_dir("detach");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let (status, opened) = server.api(
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({})),
    );
    assert_eq!(status, 201, "{opened}");
    let terminal = opened["terminalId"].as_str().expect("an id").to_owned();
    let mut attach = Command::new(common::binary())
        .args([
            "attach",
            "box",
            "--terminal",
            &terminal,
            "--detach-key",
            "ctrl-a",
        ])
        .args(["--server", &server.url])
        .env("OUTPOST_TOKEN", &server.admin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outpost attach starts");
    let mut keys = attach.stdin.take().expect("stdin");
    keys.write_all(b"echo joined-$((20+1))\n")
        .expect("keys written");
    // Ctrl-A detaches once the shell has answered: wait for the answer on stdout first.
    let mut stdout = attach.stdout.take().expect("stdout");
    // The reader drains stdout to its end (attach must never write to a closed pipe) and says
    // when the answer has been shown.
    let (answered, shown) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read as _;
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&all).contains("joined-21\r\n") {
                let _ = answered.send(());
            }
        }
    });
    shown
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the shell's answer is shown");
    keys.write_all(&[0x01]).expect("the detach key");
    let out = common::finish(attach, "outpost attach");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("detached"), "{stderr}");
    let (_, listed) = server.api("GET", "/v1/terminals", None);
    let row = listed["terminals"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["terminalId"] == terminal.as_str()))
        .cloned()
        .expect("the terminal is still listed");
    assert_eq!(row["state"], "open", "detaching leaves it running: {row}");
    let (status, bad) = server.api("POST", "/v1/terminals/ex_nothing/tickets", None);
    assert_eq!(
        (status, &bad["error"]["code"]),
        (404, &json!("terminal_unknown"))
    );
}
