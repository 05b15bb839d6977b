//! Terminals across the wire, with the real binary as server and daemon and a WebSocket
//! viewer: a login shell opened on `box` answers `echo $((6*7))` with 42, Ctrl-C reaches its
//! foreground program, python3's REPL answers, a resize reaches
//! `stty size`, a second viewer joins late and is shown the screen again, a ticket is used
//! once, a viewer that drops without a close is audited as dropped, and `exit` ends the
//! terminal with its exit code. Then: `less` and `vi` full screen through the relay, a dropped
//! viewer re-dialling, the idle limit, a read-only watcher, a replay without terminal queries
//! (answered by no late viewer), a stalled viewer dropped as `slow_viewer` while another
//! keeps receiving, and a shared context's member refused a terminal.

mod common;

use std::time::{Duration, Instant};

use common::viewer::{Viewer, contains};
use common::{Server, api, temp_dir, wait_for};
use serde_json::{Value, json};
use tungstenite::Message;

fn audit(server: &Server) -> Vec<Value> {
    let (status, body) = server.api("GET", "/v1/audit?limit=200", None);
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().cloned().unwrap_or_default()
}

/// The details of `terminal`'s audit events of `kind`, oldest first.
fn audited(server: &Server, terminal: &str, kind: &str) -> Vec<String> {
    let mut details: Vec<String> = audit(server)
        .iter()
        .filter(|e| e["kind"] == kind)
        .filter_map(|e| e["detail"].as_str())
        .filter(|d| d.starts_with(&format!("{terminal} ")))
        .map(str::to_owned)
        .collect();
    details.reverse();
    details
}

/// Opens a login shell on `box` as the admin (its operator) and joins it: the terminal's id
/// and its operator's viewer, ready.
fn open_terminal(server: &Server) -> (String, Viewer) {
    let (status, opened) = server.api(
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({"cols": 80, "rows": 24})),
    );
    assert_eq!(status, 201, "{opened}");
    let terminal = opened["terminalId"].as_str().expect("an id").to_owned();
    let mut viewer = Viewer::connect(server, &terminal, opened["ticket"].as_str().unwrap());
    viewer.until("ready", |v| v.said("live").is_some());
    (terminal, viewer)
}

/// A new ticket for `terminal` bought with `token`, and its role.
fn ticket(server: &Server, token: &str, terminal: &str) -> (String, String) {
    let (status, body) = api(
        &server.url,
        token,
        "POST",
        &format!("/v1/terminals/{terminal}/tickets"),
        None,
    );
    assert_eq!(status, 201, "{body}");
    (
        body["ticket"].as_str().expect("a ticket").to_owned(),
        body["role"].as_str().expect("a role").to_owned(),
    )
}

/// `terminal`'s row in `GET /v1/terminals` (as the admin sees it), if it is listed.
fn listed(server: &Server, terminal: &str) -> Option<Value> {
    let (status, body) = server.api("GET", "/v1/terminals", None);
    assert_eq!(status, 200, "{body}");
    body["terminals"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["terminalId"] == terminal))
        .cloned()
}

/// Sets an interactive prompt whose text appears only when the shell shows it (the typed line
/// echoes `$((20+3))`, the prompt shows `23`), and waits for it.
const PROMPT: &str = "ready-23> ";
fn set_prompt(viewer: &mut Viewer) {
    viewer.type_keys("PS1='ready-$((20+3))> '\r");
    viewer.until("the prompt", |v| v.shows(PROMPT));
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

    // Someone who does not operate the machine never gets a terminal on it, even with the
    // machine shared with every member and opted in: a shared run never opens a terminal.
    let (status, made) = server.api("POST", "/v1/users", Some(json!({"name": "bo"})));
    assert_eq!(status, 201, "{made}");
    let bo = made["token"].as_str().expect("a token").to_owned();
    let (status, shared) = server.api(
        "POST",
        "/v1/execution-contexts/box/share",
        Some(json!({"allMembers": true})),
    );
    assert_eq!(
        (status, &shared["sharedWithAllMembers"]),
        (200, &json!(true)),
        "{shared}"
    );
    let (status, opted) = api(
        &server.url,
        &bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        None,
    );
    assert_eq!(status, 200, "{opted}");
    let (status, refused) = api(
        &server.url,
        &bo,
        "POST",
        "/v1/execution-contexts/box/terminals",
        Some(json!({})),
    );
    assert_eq!(
        (status, &refused["error"]["code"]),
        (403, &json!("pty_operator_only")),
        "{refused}"
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
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default());
            assert!(body.contains("ticket_invalid"), "{body}");
        }
        other => panic!(
            "a spent ticket must be refused, got {:?}",
            other.map(|_| ())
        ),
    }
    // Text that is no viewer ticket at all (a daemon's, here) says so.
    let url = format!(
        "ws://127.0.0.1:{}/v1/terminals/{terminal}/connect?ticket=otk_{}",
        server.port,
        "A".repeat(64)
    );
    match tungstenite::connect(url) {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default());
            assert!(body.contains("ticket_malformed"), "{body}");
        }
        other => panic!(
            "a daemon's ticket opens no viewer, got {:?}",
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

/// `less` and `vi` take the whole screen through the relay: `less` switches to the alternate
/// screen, shows one page, pages on a space and gives the screen back on `q`; `vi` shows the
/// file, a substitution typed through the relay changes it on screen, and `:q!` leaves the
/// file unchanged. The shell's prompt comes back after each.
#[test]
fn less_and_vi_run_full_screen_through_the_relay_and_give_the_prompt_back() {
    let dir = temp_dir("fullscreen");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let pages = dir.join("pages.txt");
    let text: String = (1..=200).map(|i| format!("line-{i}\n")).collect();
    std::fs::write(&pages, text).expect("the file to page");
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "the vi test line\n").expect("the file to edit");
    let (_terminal, mut viewer) = open_terminal(&server);
    set_prompt(&mut viewer);

    let at = viewer.mark();
    viewer.type_keys(&format!("less {}\r", pages.display()));
    viewer.until("less's first page", |v| {
        v.shows_after(at, "\x1b[?1049h") && v.shows_after(at, "line-23")
    });
    assert!(
        viewer.shows_after(at, "line-1\r") && !viewer.shows_after(at, "line-30\r"),
        "one screen at a time: {:?}",
        String::from_utf8_lossy(&viewer.screen[at..])
    );
    let at = viewer.mark();
    viewer.type_keys(" ");
    viewer.until("the next page", |v| v.shows_after(at, "line-46"));
    let at = viewer.mark();
    viewer.type_keys("q");
    viewer.until("the normal screen and the prompt after less", |v| {
        v.shows_after(at, "\x1b[?1049l") && v.shows_after(at, PROMPT)
    });

    let at = viewer.mark();
    viewer.type_keys(&format!("vi -u NONE {}\r", notes.display()));
    viewer.until("vi showing the file", |v| {
        v.shows_after(at, "the vi test line") && v.shows_after(at, "~")
    });
    let at = viewer.mark();
    // An ex command every vi knows, typed through the relay, changes the buffer on screen.
    viewer.type_keys("\x1b:s/test/\\U&/\r");
    viewer.until("vi's changed line", |v| v.shows_after(at, "TEST"));
    let at = viewer.mark();
    viewer.type_keys(":q!\r");
    viewer.until("the prompt after vi", |v| v.shows_after(at, PROMPT));
    assert_eq!(
        std::fs::read_to_string(&notes).expect("the file"),
        "the vi test line\n",
        "`:q!` left the file as it was"
    );
    viewer.type_keys("exit\r");
    viewer.until("the exit", |v| v.closed.is_some());
}

/// A viewer whose connection drops (no close frame) is audited `dropped`; the same user buys
/// a fresh ticket, re-dials, is shown the screen again and types on.
#[test]
fn a_viewer_that_drops_redials_with_a_fresh_ticket_and_sees_the_screen_again() {
    let dir = temp_dir("redial");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let (terminal, mut first) = open_terminal(&server);
    first.type_keys("echo before-$((40+2))\r");
    first.until("the first answer", |v| v.shows("before-42\r\n"));
    first.drop_without_close();
    let ended = wait_for("the dropped session in the audit", || {
        let ended = audited(&server, &terminal, "terminal.session.ended");
        (!ended.is_empty()).then_some(ended)
    });
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(
        ended[0].starts_with(&format!("{terminal} operator dropped after ")),
        "{ended:?}"
    );
    let row = listed(&server, &terminal).expect("the terminal is listed");
    assert_eq!(
        (row["state"].as_str(), row["viewers"].as_u64()),
        (Some("open"), Some(0)),
        "the terminal outlives its viewer: {row}"
    );

    let (again, role) = ticket(&server, &server.admin, &terminal);
    assert_eq!(role, "operator");
    let mut second = Viewer::connect(&server, &terminal, &again);
    second.until("the replay", |v| v.said("live").is_some());
    assert!(
        contains(second.replay(), b"before-42\r\n"),
        "the screen again: {:?}",
        String::from_utf8_lossy(second.replay())
    );
    second.type_keys("echo after-$((50+5))\r");
    second.until("an answer after re-dialling", |v| v.shows("after-55\r\n"));
    let started = audited(&server, &terminal, "terminal.session.started");
    assert_eq!(
        started,
        [
            format!("{terminal} operator"),
            format!("{terminal} operator")
        ],
        "two sessions"
    );
    assert_eq!(
        audited(&server, &terminal, "terminal.session.ended").len(),
        1,
        "the second session is still open"
    );
    second.type_keys("exit\r");
    second.until("the exit", |v| v.closed.is_some());
}

/// `outpost serve --terminal-idle-secs N` sets the idle limit: a terminal with a viewer stays
/// open past it; once its last viewer has gone for N seconds it is closed, audited
/// `terminal.closed` with `idle`, and no new ticket is sold for it. 0 is refused at start.
#[test]
fn a_terminal_with_no_viewer_closes_after_the_server_s_idle_limit() {
    use std::process::Command;
    let dir = temp_dir("idle");
    let refused = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(dir.join("never"))
        .args(["--terminal-idle-secs", "0"])
        .output()
        .expect("outpost runs");
    assert_eq!(refused.status.code(), Some(2), "a usage error");
    assert!(!dir.join("never").exists(), "nothing was made");

    const IDLE: Duration = Duration::from_secs(3);
    let server = Server::start_with(
        &dir.join("server"),
        0,
        &["--terminal-idle-secs".as_ref(), "3".as_ref()],
    );
    let _daemon = common::Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    let (terminal, mut viewer) = open_terminal(&server);
    // Watched for twice the limit: still open.
    let joined = Instant::now();
    viewer.until("twice the idle limit with a viewer", |_| {
        joined.elapsed() > 2 * IDLE
    });
    viewer.type_keys("echo still-$((3*3))\r");
    viewer.until("an answer past the limit", |v| v.shows("still-9\r\n"));
    assert!(audited(&server, &terminal, "terminal.closed").is_empty());

    viewer.socket.close(None).expect("the viewer says goodbye");
    viewer.until("the close's answer", |v| v.closed.is_some());
    let left = Instant::now();
    let closed = wait_for("the idle close in the audit", || {
        let closed = audited(&server, &terminal, "terminal.closed");
        (!closed.is_empty()).then_some(closed)
    });
    let after = left.elapsed();
    assert_eq!(closed, [format!("{terminal} idle")]);
    assert!(
        after + Duration::from_millis(500) >= IDLE,
        "closed {after:?} after the viewer left; the limit is {IDLE:?}"
    );
    let ended = audited(&server, &terminal, "terminal.session.ended");
    assert!(
        ended.len() == 1 && ended[0].starts_with(&format!("{terminal} operator closed after ")),
        "{ended:?}"
    );
    let (status, gone) = server.api("POST", &format!("/v1/terminals/{terminal}/tickets"), None);
    assert_eq!(
        (status, &gone["error"]["code"]),
        (404, &json!("terminal_unknown"))
    );
    // The program was hung up (SIGHUP): its execution ends `cancelled`.
    let execution = wait_for("the terminal's execution to end", || {
        let (_, e) = server.api("GET", &format!("/v1/executions/{terminal}"), None);
        (!matches!(e["status"].as_str(), Some("pending" | "running"))).then_some(e)
    });
    assert_eq!(
        (&execution["status"], &execution["signal"]),
        (&json!("cancelled"), &json!(1)),
        "hung up: {execution}"
    );
}

/// An admin who is not the terminal's operator watches it: the replay and live output reach
/// them, but their keys, sizes and `close` are refused with `read_only_viewer` and never reach
/// the shell, while the operator's still do.
#[test]
fn a_watcher_sees_the_terminal_and_its_keys_and_sizes_are_refused() {
    let dir = temp_dir("watcher");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let (status, made) = server.api(
        "POST",
        "/v1/users",
        Some(json!({"name": "ada", "scopes": ["admin"]})),
    );
    assert_eq!(status, 201, "{made}");
    let ada = made["token"].as_str().expect("a token").to_owned();
    let (terminal, mut operator) = open_terminal(&server);
    operator.type_keys("echo op-$((1+1))\r");
    operator.until("the operator's answer", |v| v.shows("op-2\r\n"));

    let (watching, role) = ticket(&server, &ada, &terminal);
    assert_eq!(role, "watcher");
    let mut watcher = Viewer::connect(&server, &terminal, &watching);
    watcher.until("the watcher's replay", |v| v.said("live").is_some());
    assert_eq!(watcher.said("ready").expect("ready")["role"], "watcher");
    assert!(contains(watcher.replay(), b"op-2\r\n"), "the screen so far");

    watcher.type_keys("echo read-only-keys-$((3+4))\r");
    watcher.control(json!({"type": "resize", "cols": 50, "rows": 10}));
    watcher.control(json!({"type": "close"}));
    watcher.until("three refusals", |v| v.errors().len() == 3);
    assert_eq!(watcher.errors(), ["read_only_viewer"; 3]);

    let at = (operator.mark(), watcher.mark());
    operator.type_keys("stty size; echo op-$((5+5))\r");
    operator.until("the operator's keys still work", |v| {
        v.shows_after(at.0, "op-10\r\n")
    });
    watcher.until("live output to the watcher", |v| {
        v.shows_after(at.1, "op-10\r\n")
    });
    for (who, viewer, at) in [("operator", &operator, at.0), ("watcher", &watcher, at.1)] {
        assert!(
            viewer.shows_after(at, "24 80\r\n"),
            "{who}: the size is the operator's, not the watcher's"
        );
        assert!(
            !viewer.shows("read-only-keys"),
            "{who}: the watcher's keys never reached the shell"
        );
    }
    let row = listed(&server, &terminal).expect("listed");
    assert_eq!(
        (row["state"].as_str(), row["viewers"].as_u64()),
        (Some("open"), Some(2)),
        "the watcher's close closed nothing: {row}"
    );
    let started = audited(&server, &terminal, "terminal.session.started");
    assert!(
        started.contains(&format!("{terminal} watcher")),
        "{started:?}"
    );
    assert!(
        audit(&server)
            .iter()
            .any(|e| e["kind"] == "terminal.session.started" && e["actor"] == "ada"),
        "the watcher is named in the audit"
    );
    operator.type_keys("exit\r");
    operator.until("the exit", |v| v.closed.is_some());
    watcher.until("the watcher told of the exit", |v| v.said("exit").is_some());
}

/// The answers a terminal emulator (xterm.js) would type back for the queries in `bytes`:
/// a cursor position report for `CSI 6 n`, a status report for `CSI 5 n`, device attributes
/// for `CSI c`.
fn emulator_answers(bytes: &[u8]) -> Vec<u8> {
    let mut answers = Vec::new();
    for at in 0..bytes.len() {
        let rest = &bytes[at..];
        if rest.starts_with(b"\x1b[6n") {
            answers.extend_from_slice(b"\x1b[24;1R");
        } else if rest.starts_with(b"\x1b[5n") {
            answers.extend_from_slice(b"\x1b[0n");
        } else if rest.starts_with(b"\x1b[c") {
            answers.extend_from_slice(b"\x1b[?1;2c");
        }
    }
    answers
}

/// Coder #3666 end to end: a program prints terminal queries (a cursor position request and a
/// device-attributes request), then reads a line. The live viewer gets the queries untouched;
/// a viewer that joins late gets a replay without them, so the late viewer — answering what
/// it is shown, as an emulator does — types nothing back, and the program reads exactly what
/// was typed.
#[test]
fn a_late_viewer_s_replay_carries_no_terminal_query_and_nothing_is_answered_back() {
    let dir = temp_dir("queries");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let (terminal, mut first) = open_terminal(&server);
    let at = first.mark();
    first.type_keys(
        "printf 'q-\\033[6n\\033[c-end\\n'; IFS= read -r -t 60 line; printf 'got:%q\\n' \"$line\"\r",
    );
    first.until("the queries, live and untouched", |v| {
        v.shows_after(at, "q-\x1b[6n\x1b[c-end")
    });

    let (late_ticket, role) = ticket(&server, &server.admin, &terminal);
    assert_eq!(role, "operator");
    let mut late = Viewer::connect(&server, &terminal, &late_ticket);
    late.until("the late viewer's replay", |v| v.said("live").is_some());
    let replay = late.replay().to_vec();
    assert!(
        contains(&replay, b"q-") && contains(&replay, b"-end"),
        "the text around the queries is replayed: {:?}",
        String::from_utf8_lossy(&replay)
    );
    assert!(
        !contains(&replay, b"\x1b[6n") && !contains(&replay, b"\x1b[c"),
        "no query in the replay: {:?}",
        String::from_utf8_lossy(&replay)
    );
    // The late viewer answers whatever queries it was shown, then types a line.
    let answers = emulator_answers(&late.screen);
    if !answers.is_empty() {
        late.socket
            .send(Message::Binary(answers.into()))
            .expect("answers sent");
    }
    late.type_keys("typed\r");
    late.until("what the program read", |v| v.shows("got:"));
    late.until("the whole line", |v| {
        v.shows("got:typed\r\n") || v.shows("got:$'")
    });
    assert!(
        late.shows("got:typed\r\n"),
        "the program read only what was typed: {:?}",
        String::from_utf8_lossy(&late.screen)
    );
    first.until("the first viewer sees it too", |v| v.shows("got:typed\r\n"));
    late.type_keys("exit\r");
    late.until("the exit", |v| v.closed.is_some());
}

/// A viewer that stops reading while a program floods the terminal is dropped once more than
/// its queue limit is unwritten: audited `slow_viewer`, told `closed` with `slow_viewer` and
/// closed with 4002 — while the other viewer keeps receiving, interrupts the flood and gets
/// its prompt back.
#[test]
fn a_stalled_viewer_is_dropped_as_slow_and_the_other_keeps_receiving() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = temp_dir("slow");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let (terminal, mut reader) = open_terminal(&server);
    let (stalled_ticket, _) = ticket(&server, &server.admin, &terminal);
    let mut stalled = Viewer::connect(&server, &terminal, &stalled_ticket);
    stalled.until("the stalled viewer joined", |v| v.said("live").is_some());
    // From here on the stalled viewer reads nothing until it has been dropped.
    reader.keep = Some(64 * 1024);
    let dropped = Arc::new(AtomicBool::new(false));
    let reading = {
        let dropped = dropped.clone();
        std::thread::spawn(move || {
            reader
                .type_keys("yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnop\r");
            reader.until("the stalled viewer dropped", |_| {
                dropped.load(Ordering::SeqCst)
            });
            let during = reader.received;
            reader.type_keys("\x03");
            reader.type_keys("echo after-flood-$((3+3))\r");
            reader.until("the prompt after the flood", |v| {
                v.shows("after-flood-6\r\n")
            });
            (reader, during)
        })
    };
    let ended = wait_for("the stalled viewer dropped as slow", || {
        audited(&server, &terminal, "terminal.session.ended")
            .into_iter()
            .find(|d| d.contains(" slow_viewer "))
    });
    assert!(
        ended.starts_with(&format!("{terminal} operator slow_viewer after ")),
        "{ended}"
    );
    assert_eq!(
        listed(&server, &terminal).expect("listed")["viewers"].as_u64(),
        Some(1),
        "the other viewer stays"
    );
    dropped.store(true, Ordering::SeqCst);
    // Now it reads what the kernel held for it, then is told why and closed.
    stalled.keep = Some(64 * 1024);
    stalled.until("the stalled viewer's close", |v| v.closed.is_some());
    assert_eq!(stalled.closed, Some(4002));
    assert_eq!(
        stalled.said("closed").expect("told why")["reason"],
        "slow_viewer"
    );
    let (reader, during) = reading.join().expect("the reading viewer");
    assert!(
        during > 4 * 1024 * 1024,
        "the reading viewer kept receiving the flood: {during} bytes"
    );
    assert!(reader.received > during);
    let row = listed(&server, &terminal).expect("listed");
    assert_eq!(row["state"], "open", "the terminal went on: {row}");
}

/// Every session is recorded as it is relayed. One that ran `vi` and a resize: its export is
/// an asciicast v2 file the real `asciinema play` plays to the same text, its output ends with
/// what the live viewer was shown, its sizes are in it and keystrokes are not (the server
/// keeps input only when told to); the audit rows link to it, `outpost terminal play` plays
/// it, and another user can neither list nor read it.
#[test]
fn a_session_is_recorded_and_its_export_plays_in_asciinema() {
    use std::process::Command;
    let dir = temp_dir("recording");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "the recorded line\n").expect("the file to edit");
    let (terminal, mut viewer) = open_terminal(&server);
    set_prompt(&mut viewer);
    viewer.control(json!({"type": "resize", "cols": 100, "rows": 30}));
    let at = viewer.mark();
    viewer.type_keys("stty size\r");
    viewer.until("the new size", |v| v.shows_after(at, "30 100"));
    let at = viewer.mark();
    viewer.type_keys(&format!("vi -u NONE {}\r", notes.display()));
    viewer.until("vi showing the file", |v| {
        v.shows_after(at, "the recorded line")
    });
    let at = viewer.mark();
    viewer.type_keys("\x1b:s/recorded/\\U&/\r");
    viewer.until("vi's changed line", |v| v.shows_after(at, "RECORDED"));
    let at = viewer.mark();
    viewer.type_keys(":q!\r");
    viewer.until("the prompt after vi", |v| v.shows_after(at, PROMPT));
    viewer.type_keys("exit\r");
    viewer.until("the exit", |v| v.closed.is_some());

    let row = wait_for("the recording's end to be stored", || {
        let (status, listed) = server.api("GET", "/v1/recordings?context=box", None);
        assert_eq!(status, 200, "{listed}");
        listed["recordings"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["terminalId"] == terminal.as_str()))
            .filter(|r| !r["endedAt"].is_null())
            .cloned()
    });
    assert_eq!(row["recordsInput"], false, "{row}");
    assert_eq!(row["truncated"], false, "{row}");
    assert_eq!(row["openedBy"], "admin", "{row}");

    let export = common::outpost_as(&server, &server.admin, &["terminal", "export", &terminal]);
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let text = String::from_utf8(export.stdout).expect("a recording is UTF-8 text");
    assert_eq!(text.len() as u64, row["size"].as_u64().unwrap(), "{row}");
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).expect("a JSON header");
    assert_eq!(header["version"], 2, "{header}");
    assert_eq!(
        (header["width"].as_u64(), header["height"].as_u64()),
        (Some(80), Some(24))
    );
    let events: Vec<(f64, String, String)> = lines
        .map(|l| serde_json::from_str(l).expect("an event line"))
        .collect();
    assert!(
        events.windows(2).all(|w| w[0].0 <= w[1].0),
        "time goes forward"
    );
    assert!(
        events.iter().any(|e| e.1 == "r" && e.2 == "100x30"),
        "the resize is recorded"
    );
    assert!(
        events.iter().all(|e| e.1 != "i"),
        "no keystrokes without --record-terminal-input"
    );
    let output: String = events
        .iter()
        .filter(|e| e.1 == "o")
        .map(|e| e.2.as_str())
        .collect();
    let live = String::from_utf8_lossy(&viewer.screen[viewer.live_from.unwrap()..]).into_owned();
    assert!(
        output.ends_with(&live),
        "the recorded output ends with what the viewer was shown live"
    );
    assert!(output.contains("RECORDED") && output.contains("30 100"));

    // The real asciinema plays the export (cut pauses so that it takes no time).
    let cast = dir.join("session.cast");
    std::fs::write(&cast, &text).expect("the export written");
    let played = Command::new("asciinema")
        .args(["play", "-i", "0.01"])
        .arg(&cast)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("asciinema runs (Debian's asciinema; ./test installs it)");
    assert!(
        played.status.success(),
        "asciinema play: {}",
        String::from_utf8_lossy(&played.stderr)
    );
    assert!(
        String::from_utf8_lossy(&played.stdout).ends_with(&live),
        "asciinema plays the same output"
    );
    let ours = common::outpost_as(
        &server,
        &server.admin,
        &["terminal", "play", &terminal, "--idle-limit", "0.01"],
    );
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        output,
        "outpost terminal play"
    );
    for bad in ["--idle-limit=-1", "--speed=0", "--speed=NaN"] {
        let refused = common::outpost_as(
            &server,
            &server.admin,
            &["terminal", "play", &terminal, bad],
        );
        assert!(!refused.status.success(), "{bad} is refused");
        let says = String::from_utf8_lossy(&refused.stderr);
        let flag = bad.split('=').next().unwrap();
        assert!(says.contains(flag), "{bad}: {says}");
    }

    // The audit rows say where the recording is.
    let (_, log) = server.api("GET", "/v1/audit?limit=200", None);
    let linked: Vec<&Value> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("terminal."))
        })
        .filter(|e| {
            e["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with(&format!("{terminal} ")))
        })
        .collect();
    assert!(
        linked
            .iter()
            .any(|e| e["kind"] == "terminal.session.started"),
        "{linked:?}"
    );
    for event in &linked {
        assert_eq!(
            event["recording"],
            format!("/v1/terminals/{terminal}/recording"),
            "{event}"
        );
    }

    // Who may watch it follows who may read the run: not another user.
    let (status, made) = server.api("POST", "/v1/users", Some(json!({"name": "eve"})));
    assert_eq!(status, 201, "{made}");
    let eve = made["token"].as_str().expect("a token").to_owned();
    let (status, body) = api(
        &server.url,
        &eve,
        "GET",
        &format!("/v1/terminals/{terminal}/recording"),
        None,
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("recording_unknown"))
    );
    let (status, listed) = api(&server.url, &eve, "GET", "/v1/recordings", None);
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["recordings"], json!([]), "{listed}");
}

/// A server started with `--record-terminal-input` keeps keystrokes only on machines whose
/// owner allows it (`outpost context policy record-input on`), and says so on the terminal,
/// the context and the recording.
#[test]
fn input_is_recorded_only_when_the_server_is_told_to_and_the_owner_allows_it() {
    let dir = temp_dir("recording-input");
    let server = Server::start_with(
        &dir.join("s"),
        0,
        &[std::ffi::OsStr::new("--record-terminal-input")],
    );
    let home = dir.join("h");
    let _daemon = common::Daemon::start(&home, "box", Some(&server.join), "tokio");
    let ctx = server.wait_context("box", "box online", |c| c["online"] == true);
    assert_eq!(
        ctx["recordsTerminalInput"], false,
        "the owner has not said yes: {ctx}"
    );
    let (terminal, mut viewer) = open_terminal(&server);
    let row = listed(&server, &terminal).expect("the terminal is listed");
    assert_eq!(row["recordsInput"], false, "{row}");
    viewer.type_keys("exit\r");
    viewer.until("the exit", |v| v.closed.is_some());

    // The owner allows it: the daemon says so at once, and the next session keeps keystrokes.
    common::owner_policy(&home, &["record-input", "on"]);
    server.wait_context("box", "the owner's yes to reach the server", |c| {
        c["recordsTerminalInput"] == true
    });
    let (terminal, mut viewer) = open_terminal(&server);
    let row = listed(&server, &terminal).expect("the terminal is listed");
    assert_eq!(row["recordsInput"], true, "{row}");
    viewer.type_keys("echo typed-$((2+2))\r");
    viewer.until("the echo", |v| v.shows("typed-4"));
    viewer.type_keys("exit\r");
    viewer.until("the exit", |v| v.closed.is_some());
    let text = wait_for("the recording's end", || {
        let export = common::outpost_as(&server, &server.admin, &["terminal", "export", &terminal]);
        let text = String::from_utf8_lossy(&export.stdout).into_owned();
        let (_, listed) = server.api("GET", "/v1/recordings", None);
        let ended = listed["recordings"]
            .as_array()?
            .iter()
            .any(|r| r["terminalId"] == terminal.as_str() && r["endedAt"].is_u64());
        (ended && export.status.success()).then_some(text)
    });
    assert!(
        text.contains("\"i\", \"echo typed-$((2+2))\\r\""),
        "the keystrokes are in it: {text}"
    );
}

/// kill -9 of the server mid-session: what was stored stays, and the next start ends the
/// recording at its last stored event with a marker, so it lists as ended and plays.
#[test]
fn a_recording_cut_by_a_killed_server_is_ended_at_the_next_start() {
    let dir = temp_dir("recording-cut");
    let server = Server::start(&dir.join("s"), 0);
    let _daemon = common::Daemon::start(&dir.join("h"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    let (terminal, mut viewer) = open_terminal(&server);
    viewer.type_keys("echo stored-$((6*7))\r");
    viewer.until("the echo", |v| v.shows("stored-42"));
    wait_for("the output to be stored", || {
        let export = common::outpost_as(&server, &server.admin, &["terminal", "export", &terminal]);
        String::from_utf8_lossy(&export.stdout)
            .contains("stored-42")
            .then_some(())
    });
    drop(viewer);
    let server = server.restart();
    let (_, listed) = server.api("GET", "/v1/recordings", None);
    let row = listed["recordings"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["terminalId"] == terminal.as_str()))
        .cloned()
        .expect("the recording is listed");
    assert!(row["endedAt"].is_u64(), "ended at the restart: {row}");
    let export = common::outpost_as(&server, &server.admin, &["terminal", "export", &terminal]);
    let text = String::from_utf8_lossy(&export.stdout);
    assert!(text.contains("stored-42"), "{text}");
    assert!(
        text.trim_end().ends_with(
            "\"the server stopped before the session ended; what followed was not recorded\"]"
        ),
        "{text}"
    );
    assert_eq!(row["size"].as_u64(), Some(text.len() as u64), "{row}");
}

/// A member who is no admin watches the recording of a terminal she opened on her own machine:
/// she lists it and reads it, and so does an admin; another member neither lists nor reads it.
#[test]
fn a_member_watches_the_recording_of_her_own_terminal_and_no_other_member_does() {
    let dir = temp_dir("recording-member");
    let server = Server::start(&dir.join("server"), 0);
    let user = |name: &str| -> String {
        let (status, made) = server.api("POST", "/v1/users", Some(json!({"name": name})));
        assert_eq!(status, 201, "{made}");
        made["token"].as_str().expect("a token").to_owned()
    };
    let (ana, eve) = (user("ana"), user("eve"));
    let mut join = outpost_core::join::Join::parse(&server.join).expect("a join");
    join.token = ana.clone();
    let _daemon = common::Daemon::start(&dir.join("home"), "anabox", Some(&join.encode()), "tokio");
    server.wait_context("anabox", "ana's machine online", |c| c["online"] == true);
    let (status, opened) = api(
        &server.url,
        &ana,
        "POST",
        "/v1/execution-contexts/anabox/terminals",
        Some(json!({"cols": 80, "rows": 24})),
    );
    assert_eq!(status, 201, "{opened}");
    let terminal = opened["terminalId"].as_str().expect("an id").to_owned();
    let mut viewer = Viewer::connect(&server, &terminal, opened["ticket"].as_str().unwrap());
    viewer.until("ready", |v| v.said("live").is_some());
    set_prompt(&mut viewer);
    viewer.type_keys("echo hers-$((6*7))\r");
    viewer.until("her echo", |v| v.shows("hers-42"));
    viewer.type_keys("exit\r");
    viewer.until("the exit", |v| v.closed.is_some());
    let path = format!("/v1/terminals/{terminal}/recording");
    let mine = wait_for("her recording's end to be stored", || {
        let (status, listed) = api(&server.url, &ana, "GET", "/v1/recordings", None);
        assert_eq!(status, 200, "{listed}");
        listed["recordings"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["terminalId"] == terminal.as_str()))
            .filter(|r| !r["endedAt"].is_null())
            .cloned()
    });
    assert_eq!(mine["openedBy"], "ana", "{mine}");
    let read = |token: &str| -> (u16, String) {
        let response = ureq::get(&format!("{}{path}", server.url))
            .header("Authorization", &format!("Bearer {token}"))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .expect("an answer");
        let status = response.status().as_u16();
        (
            status,
            response.into_body().read_to_string().unwrap_or_default(),
        )
    };
    let (status, text) = read(&ana);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("hers-42"), "her session's output: {text}");
    assert_eq!(
        read(&server.admin).0,
        200,
        "an admin watches every recording"
    );
    let (status, text) = read(&eve);
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("recording_unknown"), "{text}");
    let (_, listed) = api(&server.url, &eve, "GET", "/v1/recordings", None);
    assert_eq!(listed["recordings"], json!([]), "{listed}");
    let _ = std::fs::remove_dir_all(&dir);
}
