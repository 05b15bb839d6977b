//! The web page's Terminal tab in a real browser, through the real server relay and daemon:
//! typing reaches a login shell, a window resize reaches `stty size`, a second tab sees the
//! same screen, a closed tab's session ends in the audit, and recorded sessions (one of them
//! `vi` with a resize) play back in the page to the screen the live session showed.
//! The routes and messages are docs/PROTOCOL.md's "Viewer WebSocket messages".

mod browser;
mod common;

use browser::{Chromium, Page};
use common::{Daemon, Server, temp_dir, wait_for};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 800;

fn server_with_daemon(dir: &std::path::Path) -> (Server, Daemon) {
    common::server_with_daemon(dir, "build-box")
}

/// A tab signed in, on the Terminal tab, with `build-box` to choose.
fn terminal_tab(chromium: &Chromium, server: &Server) -> Page {
    let page = chromium.open(&format!("{}/", server.url));
    page.sign_in(&server.admin);
    page.wait_until("signed in", "document.body.dataset.signedIn === 'yes'");
    page.show_tab("terminal");
    page.wait_until(
        "build-box to be offered",
        "Array.from(document.getElementById('terminal-context').options).some(o => o.value === 'build-box')",
    );
    page
}

/// Whether some row of the page's terminal screen is exactly `line` (trailing blanks aside).
fn screen_has(page: &Page, what: &str, line: &str) {
    let line = serde_json::to_string(line).expect("JSON");
    page.wait_until(
        what,
        &format!("window.outpostScreen().some(l => l.trimEnd() === {line})"),
    );
}

/// The terminal's screen as text: its rows, trailing blanks and blank rows left out.
fn trimmed(page: &Page) -> Vec<String> {
    let screen: Vec<String> =
        serde_json::from_value(page.eval("window.outpostScreen()")).expect("the screen");
    screen
        .iter()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Types a command line into the terminal and presses Enter.
fn run_line(page: &Page, command: &str) {
    page.eval("document.querySelector('#terminal .xterm-helper-textarea').focus()");
    page.type_text(command);
    page.press("Enter");
}

/// Opens a terminal on build-box from the page and waits until it is live with a prompt.
fn open_terminal(page: &Page) {
    page.eval("document.getElementById('terminal-open').click()");
    page.wait_until(
        "the terminal to be live",
        "document.body.dataset.terminal === 'live' || document.body.dataset.terminal === 'ready'",
    );
    page.wait_until(
        "a prompt",
        "window.outpostScreen().some(l => l.trim().length > 0)",
    );
}

#[test]
fn typing_echo_six_times_seven_in_the_page_shows_42() {
    let dir = temp_dir("web-term-echo");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = terminal_tab(&chromium, &server);
    open_terminal(&page);
    run_line(&page, "echo $((6*7))");
    screen_has(&page, "42 on the screen", "42");
    // The command line itself is echoed as typed: the keystrokes went through unchanged.
    page.wait_until(
        "the echoed command line",
        "window.outpostScreen().some(l => l.includes('echo $((6*7))'))",
    );
    let (_, list) = server.api("GET", "/v1/terminals", None);
    let terminals = list["terminals"].as_array().expect("terminals");
    assert_eq!(terminals.len(), 1, "{list}");
    assert_eq!(terminals[0]["context"], "build-box");
    assert_eq!(terminals[0]["state"], "open");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resizing_the_window_changes_stty_size() {
    let dir = temp_dir("web-term-resize");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = terminal_tab(&chromium, &server);
    open_terminal(&page);
    // The page's size, as the server knows it.
    let size = |page: &Page| -> (u64, u64) {
        let v = page.eval("window.outpostTerminal()");
        (
            v["rows"].as_u64().expect("rows"),
            v["cols"].as_u64().expect("cols"),
        )
    };
    let server_size = || -> (u64, u64) {
        let (_, list) = server.api("GET", "/v1/terminals", None);
        let t = &list["terminals"][0];
        (
            t["rows"].as_u64().unwrap_or(0),
            t["cols"].as_u64().unwrap_or(0),
        )
    };
    let (rows, cols) = size(&page);
    assert!(rows > 10 && cols > 40, "{rows}x{cols}");
    wait_for("the server to have the page's size", || {
        (server_size() == (rows, cols)).then_some(())
    });
    run_line(&page, "stty size");
    screen_has(&page, "the first stty size", &format!("{rows} {cols}"));
    page.tab
        .set_bounds(headless_chrome::types::Bounds::Normal {
            left: None,
            top: None,
            width: Some(f64::from(WIDTH * 3 / 4)),
            height: Some(f64::from(HEIGHT * 3 / 4)),
        })
        .expect("the window resizes");
    let (small_rows, small_cols) = wait_for("the terminal to fit the smaller window", || {
        let now = size(&page);
        (now.0 < rows && now.1 < cols).then_some(now)
    });
    wait_for("the server to have the new size", || {
        (server_size() == (small_rows, small_cols)).then_some(())
    });
    run_line(&page, "stty size");
    screen_has(
        &page,
        "stty size after the resize",
        &format!("{small_rows} {small_cols}"),
    );
    // The page's list of open terminals follows: open, at the new size.
    page.wait_until(
        "the terminals list to show the new size",
        &format!(
            "Array.from(document.querySelectorAll('#terminals tbody tr')).some(r => r.cells[2].textContent === 'open' && r.cells[4].textContent === '{small_cols}×{small_rows}')"
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_tab_joins_and_sees_the_same_screen() {
    let dir = temp_dir("web-term-second");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let first = terminal_tab(&chromium, &server);
    open_terminal(&first);
    run_line(&first, "echo marker-$((40+2))");
    screen_has(&first, "the marker in the first tab", "marker-42");
    // A second tab (its own sessionStorage: it signs in again) joins from the list.
    let second = terminal_tab(&chromium, &server);
    second.wait_until(
        "the open terminal in the list",
        "document.querySelector('#terminals button.join') !== null",
    );
    // Whatever the second tab sends during its replay is counted: it must be nothing.
    second.eval(
        "(() => { window.sentDuringReplay = 0; const orig = WebSocket.prototype.send; WebSocket.prototype.send = function (d) { if (document.body.dataset.terminal === 'replay') { window.sentDuringReplay++; } return orig.call(this, d); }; return true; })()",
    );
    second.eval("document.querySelector('#terminals button.join').click()");
    screen_has(
        &second,
        "the replayed marker in the second tab",
        "marker-42",
    );
    second.wait_until("live", "document.body.dataset.terminal === 'live'");
    assert_eq!(second.eval("window.sentDuringReplay"), 0);
    // Live output reaches both tabs.
    run_line(&first, "echo both-$((1+1))");
    screen_has(&first, "live output in the first tab", "both-2");
    screen_has(&second, "live output in the second tab", "both-2");
    let (_, list) = server.api("GET", "/v1/terminals", None);
    assert_eq!(list["terminals"][0]["viewers"], 2, "{list}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn closing_a_tab_ends_its_session_in_the_audit() {
    let dir = temp_dir("web-term-audit");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let first = terminal_tab(&chromium, &server);
    open_terminal(&first);
    let second = terminal_tab(&chromium, &server);
    second.wait_until(
        "the open terminal in the list",
        "document.querySelector('#terminals button.join') !== null",
    );
    second.eval("document.querySelector('#terminals button.join').click()");
    second.wait_until(
        "the second viewer to be on",
        "document.body.dataset.terminal === 'live' || document.body.dataset.terminal === 'ready'",
    );
    let count = |kind: &str| -> usize {
        let (_, audit) = server.api("GET", "/v1/audit", None);
        audit["events"]
            .as_array()
            .map(|e| e.iter().filter(|e| e["kind"] == kind).count())
            .unwrap_or(0)
    };
    wait_for("two sessions started", || {
        (count("terminal.session.started") == 2).then_some(())
    });
    assert_eq!(count("terminal.session.ended"), 0);
    // The tab goes away without a close message: the server still records the end.
    second.tab.close(false).expect("the tab closes");
    wait_for("the closed tab's session to end", || {
        (count("terminal.session.ended") == 1).then_some(())
    });
    // The first tab's Audit tab shows it, by whom.
    first.show_tab("audit");
    let rows = first.table("audit");
    let ended = rows
        .iter()
        .find(|r| r[1] == "terminal.session.ended")
        .unwrap_or_else(|| panic!("terminal.session.ended in {rows:?}"));
    assert_eq!(ended[2], "admin");
    assert_eq!(ended[3], "build-box", "the context by name: {ended:?}");
    // The first viewer is still on.
    let (_, list) = server.api("GET", "/v1/terminals", None);
    assert_eq!(list["terminals"][0]["viewers"], 1, "{list}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session opened in the page is recorded; played back in the page at 64× it ends on the
/// same screen the live session ended on, and a seek to the start clears it again.
#[test]
fn a_recorded_session_plays_back_in_the_page_to_the_same_final_screen() {
    let dir = temp_dir("web-term-playback");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = terminal_tab(&chromium, &server);
    open_terminal(&page);
    run_line(&page, "echo played-$((6*7))");
    screen_has(&page, "the echo", "played-42");
    page.eval("document.getElementById('terminal-close').click()");
    page.wait_until(
        "the terminal to close",
        "document.body.dataset.terminal === 'closed'",
    );
    // The live session's last screen: the page keeps it after the close.
    let live: Vec<String> =
        serde_json::from_value(page.eval("window.outpostScreen()")).expect("the live screen");
    let id = wait_for("the recording's end to be stored", || {
        let (_, recs) = server.api("GET", "/v1/recordings", None);
        let row = &recs["recordings"][0];
        row["endedAt"]
            .is_u64()
            .then(|| row["terminalId"].as_str().map(str::to_owned))
            .flatten()
    });
    page.show_tab("terminal");
    let button = format!("#recordings button.play[data-terminal-id='{id}']");
    page.wait_until(
        "the recording's Play button",
        &format!("document.querySelector(\"{button}\") !== null"),
    );
    page.eval("document.getElementById('player-speed').value = '64'");
    page.eval(&format!("document.querySelector(\"{button}\").click()"));
    page.wait_until(
        "the playback to end",
        "document.body.dataset.player === 'done'",
    );
    // The same screen, line for line (blank rows and trailing blanks aside).
    let lines: Vec<String> = live
        .iter()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    let expected = serde_json::to_string(&lines).expect("JSON");
    page.wait_until(
        "the played screen to be the live session's last screen",
        &format!(
            "JSON.stringify(window.outpostScreen().map(l => l.trimEnd()).filter(l => l.length > 0)) === {}",
            serde_json::to_string(&expected).expect("JSON")
        ),
    );
    page.keep_screenshot("web-terminal-playback");
    let state = page.eval("window.outpostPlayer()");
    assert_eq!(state["terminalId"], id.as_str(), "{state}");
    assert_eq!(state["done"], true, "{state}");
    // A seek to the start shows the screen as it began: not the echo.
    page.eval(
        "(() => { const s = document.getElementById('player-seek'); s.value = 0; s.dispatchEvent(new Event('input')); })()",
    );
    page.wait_until(
        "the start of the recording",
        "!window.outpostScreen().some(l => l.includes('played-42'))",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session that ran `vi` and was resized, played back from its audit row: the player pauses
/// and resumes, draws vi's full screen as the live session showed it after the resize, and
/// ends at the session's last size on the screen the live session ended on.
#[test]
fn a_vi_session_with_a_resize_plays_back_from_the_audit_to_the_same_screen_and_size() {
    let dir = temp_dir("web-term-vi");
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "the recorded line\n").expect("the file to edit");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = terminal_tab(&chromium, &server);
    open_terminal(&page);
    let size = |page: &Page| -> (u64, u64) {
        let v = page.eval("window.outpostTerminal()");
        (
            v["cols"].as_u64().expect("cols"),
            v["rows"].as_u64().expect("rows"),
        )
    };
    let first = size(&page);
    run_line(&page, &format!("vi -u NONE {}", notes.display()));
    screen_has(&page, "vi showing the file", "the recorded line");
    page.tab
        .set_bounds(headless_chrome::types::Bounds::Normal {
            left: None,
            top: None,
            width: Some(f64::from(WIDTH * 3 / 4)),
            height: Some(f64::from(HEIGHT * 3 / 4)),
        })
        .expect("the window resizes");
    let resized = wait_for("the terminal to fit the smaller window", || {
        let now = size(&page);
        (now.0 < first.0 && now.1 < first.1).then_some(now)
    });
    wait_for("the server to have the new size", || {
        let (_, list) = server.api("GET", "/v1/terminals", None);
        let t = &list["terminals"][0];
        ((t["cols"].as_u64(), t["rows"].as_u64()) == (Some(resized.0), Some(resized.1)))
            .then_some(())
    });
    // vi redraws for the new size; then a change made after the resize.
    page.eval("document.querySelector('#terminal .xterm-helper-textarea').focus()");
    page.press("Escape");
    page.type_text(":s/recorded/\\U&/");
    page.press("Enter");
    screen_has(&page, "vi's changed line", "the RECORDED line");
    let vi_screen = trimmed(&page);
    page.keep_screenshot("web-terminal-vi-live");
    // vi quits (its full screen gives the shell's back), then the terminal is closed.
    page.type_text(":q!");
    page.press("Enter");
    page.wait_until(
        "the shell's screen back after vi",
        "!window.outpostScreen().some(l => l.startsWith('~'))",
    );
    run_line(&page, "echo after-vi-$((6*7))");
    screen_has(&page, "the echo after vi", "after-vi-42");
    page.eval("document.getElementById('terminal-close').click()");
    page.wait_until(
        "the terminal to close",
        "document.body.dataset.terminal === 'closed'",
    );
    let live = trimmed(&page);
    let id = wait_for("the recording's end to be stored", || {
        let (_, recs) = server.api("GET", "/v1/recordings", None);
        let row = &recs["recordings"][0];
        row["endedAt"]
            .is_u64()
            .then(|| row["terminalId"].as_str().map(str::to_owned))
            .flatten()
    });

    // The audit's session row plays it. While it plays, the page itself watches each screen
    // it draws for vi's, as the live session showed it.
    page.show_tab("audit");
    let button = format!("#audit button.play[data-terminal-id='{id}']");
    page.wait_until(
        "the audit row's Play recording button",
        &format!("document.querySelector(\"{button}\") !== null"),
    );
    page.eval(&format!(
        "(() => {{ const want = {}; window.sawVi = false; window.sawViTimer = setInterval(() => {{ if (JSON.stringify(window.outpostScreen().map(l => l.trimEnd()).filter(l => l.length > 0)) === want) {{ window.sawVi = true; }} }}, 2); return true; }})()",
        serde_json::to_string(&serde_json::to_string(&vi_screen).expect("JSON")).expect("JSON")
    ));
    page.eval("document.getElementById('player-speed').value = '1'");
    page.eval(&format!("document.querySelector(\"{button}\").click()"));
    page.wait_until(
        "the playback to start on the Terminal tab",
        "document.body.dataset.tab === 'terminal' && document.body.dataset.player === 'playing'",
    );
    page.eval("document.getElementById('player-pause').click()");
    page.wait_until("the pause", "document.body.dataset.player === 'paused'");
    let paused = page.eval("window.outpostPlayer()");
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["done"], false, "paused before the end: {paused}");
    // Resumed at the same speed: vi's screen passes by (the page watches for it), then the end.
    page.eval("document.getElementById('player-pause').click()");
    page.wait_until(
        "vi's screen, as the live session showed it, during the playback",
        "window.sawVi === true",
    );
    page.eval(
        "(() => { const s = document.getElementById('player-speed'); s.value = '64'; s.dispatchEvent(new Event('change')); })()",
    );
    page.wait_until(
        "the playback to end",
        "document.body.dataset.player === 'done'",
    );
    page.eval("clearInterval(window.sawViTimer)");
    assert_eq!(
        size(&page),
        resized,
        "the player ends at the session's last size"
    );
    let expected = serde_json::to_string(&live).expect("JSON");
    page.wait_until(
        "the played screen to be the live session's last screen",
        &format!(
            "JSON.stringify(window.outpostScreen().map(l => l.trimEnd()).filter(l => l.length > 0)) === {}",
            serde_json::to_string(&expected).expect("JSON")
        ),
    );
    page.keep_screenshot("web-terminal-vi-playback");
    let _ = std::fs::remove_dir_all(&dir);
}
