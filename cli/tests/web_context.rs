//! The context page's daemon card and grant editor in a real browser (Debian's chromium,
//! headless), against a real daemon run by a stand-in for its service manager: pause (a run
//! for the machine is then refused as paused), logs, resume, update now, restart (the daemon
//! drains, exits 75 and comes back), and a grant changed through the editor and refused when
//! the editor's text is wrong. A screenshot of the card is kept.

mod browser;
mod common;

use browser::{Chromium, Page};
use common::{Server, Service, daemon_pid, temp_dir, wait_for};
use serde_json::{Value, json};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 900;

fn click(page: &Page, id: &str) {
    page.eval(&format!("document.getElementById('{id}').click()"));
}

/// Clicks the card's button `id` and waits for the daemon's answer to `action`.
fn ask(page: &Page, id: &str, action: &str, outcome: &str) {
    page.eval("delete document.body.dataset.daemonAnswer");
    click(page, id);
    page.wait_until(
        &format!("the daemon's answer to {action}"),
        &format!("document.body.dataset.daemonAnswer === '{action}:{outcome}'"),
    );
}

fn state(page: &Page) -> String {
    page.eval("document.getElementById('daemon-state').textContent")
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_daemon_card_pauses_resumes_shows_logs_and_restarts_a_real_daemon_and_the_grant_editor_saves()
{
    let dir = temp_dir("web-daemon-card");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let _service = Service::joined(&server, &dir, &home, "build-box");
    let exits = dir.join("exits");

    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = chromium.open(&format!("{}/", server.url));
    page.sign_in(&server.admin);
    page.wait_until(
        "the contexts table",
        "Array.from(document.querySelectorAll('#contexts tbody tr')).some(r => r.cells[0].textContent === 'build-box')",
    );
    page.eval("document.querySelector(\"#contexts button[data-context='build-box']\").click()");
    page.wait_until(
        "the context's page",
        "document.body.dataset.context === 'shown'",
    );
    assert_eq!(state(&page), "online, taking runs");
    assert_eq!(
        page.eval("document.getElementById('daemon-controls').hidden"),
        false
    );
    assert_eq!(
        page.eval("document.getElementById('daemon-resume').disabled"),
        true
    );

    // Pause: the card says so, and a run for the machine is refused as paused.
    ask(&page, "daemon-pause", "pause", "done");
    assert!(
        state(&page).contains("paused by an operator"),
        "{}",
        state(&page)
    );
    assert_eq!(
        page.eval("document.getElementById('daemon-pause').disabled"),
        true
    );
    let id = server.submit(
        &common::shell_capability("refused", "echo no\n"),
        "build-box",
    );
    let refused = server.wait_status(&id, "failed");
    assert_eq!(
        refused["error"]["code"], "execution_context_busy",
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("paused by an operator"),
        "{refused}"
    );

    // Logs: the daemon's own recent lines, the pause among them.
    ask(&page, "daemon-logs-button", "logs", "done");
    let logs = page.eval("document.getElementById('daemon-logs').textContent");
    let logs = logs.as_str().unwrap();
    assert!(logs.contains("paused"), "{logs}");
    assert_eq!(
        page.eval("document.getElementById('daemon-logs').hidden"),
        false
    );
    page.keep_screenshot("web-daemon-card-paused");

    ask(&page, "daemon-resume", "resume", "done");
    assert_eq!(state(&page), "online, taking runs");
    let id = server.submit(&common::shell_capability("runs", "echo yes\n"), "build-box");
    server.wait_status(&id, "exited");

    // Update now: the server publishes no release, and the daemon says so.
    ask(&page, "daemon-update", "update", "done");
    let answer = page.eval("document.getElementById('daemon-answer').textContent");
    assert!(
        answer.as_str().unwrap().contains("no daemon release"),
        "{answer}"
    );

    // The grant editor: a wrong line is refused in the page, a good grant is saved and in
    // force on the server.
    // Typed as a person would: the editor then holds edits a list's refresh keeps.
    let edit = |id: &str, value: &str| {
        page.eval(&format!(
            "(function () {{ var e = document.getElementById('{id}'); e.value = {value:?}; e.dispatchEvent(new Event('input', {{ bubbles: true }})); e.dispatchEvent(new Event('change', {{ bubbles: true }})); }})()"
        ));
    };
    edit("grant-folders", "nonsense");
    page.eval("delete document.body.dataset.grantAnswer");
    click(&page, "grant-save");
    page.wait_until(
        "the editor's refusal",
        "document.body.dataset.grantAnswer === 'invalid'",
    );
    edit("grant-folders", "");
    edit("grant-egress", "allowlist");
    edit("grant-hosts", "example.com:443, *.example.org");
    edit("grant-max", "1");
    // A run elsewhere refreshes the page; the edits stay.
    let refreshed = page.eval("document.body.dataset.refreshed || ''");
    let id = server.submit(&common::shell_capability("meanwhile", "echo m\n"), "cloud");
    server.wait_status(&id, "exited");
    page.wait_until(
        "the page to refresh itself",
        &format!("(document.body.dataset.refreshed || '') !== {refreshed}"),
    );
    assert_eq!(
        page.eval("document.getElementById('grant-hosts').value"),
        "example.com:443, *.example.org",
        "a refresh keeps unsaved edits"
    );
    let before = server.wait_context("build-box", "its grant", |_| true)["grantVersion"].clone();
    page.eval("delete document.body.dataset.grantAnswer");
    click(&page, "grant-save");
    page.wait_until(
        "the grant to be saved",
        "(document.body.dataset.grantAnswer || '').startsWith('saved:')",
    );
    let after = server.wait_context("build-box", "the new grant", |c| {
        c["grantVersion"] != before
    });
    assert_eq!(
        after["grant"]["egress"],
        json!({"mode": "allowlist", "hosts": ["example.com:443", "*.example.org"]}),
        "{after}"
    );
    assert_eq!(after["grant"]["limits"]["maxConcurrent"], 1, "{after}");
    let facts = page.table("context-facts");
    assert!(
        facts
            .iter()
            .any(|r| r[0] == "Grant" && r[1].contains("example.com:443")),
        "{facts:?}"
    );

    // Restart: the daemon drains, exits 75, and the stand-in starts it again.
    let before = wait_for("the daemon's pid", || daemon_pid(&home));
    ask(&page, "daemon-restart", "restart", "done");
    wait_for("the daemon to exit 75", || {
        std::fs::read_to_string(&exits)
            .ok()
            .filter(|t| t.lines().any(|l| l == "75"))
    });
    wait_for("the daemon to come back", || {
        daemon_pid(&home).filter(|pid| *pid != before)
    });
    server.wait_context("build-box", "online again", |c: &Value| {
        c["online"] == true && c["draining"] == false
    });
    page.eval("document.getElementById('context-back').click()");
    page.eval("document.querySelector(\"#contexts button[data-context='build-box']\").click()");
    page.wait_until(
        "the page to show the restarted daemon",
        "document.body.dataset.context === 'shown' && document.getElementById('daemon-state').textContent === 'online, taking runs'",
    );
    page.keep_screenshot("web-daemon-card");
    let audit = server.api("GET", "/v1/audit?limit=100", None).1;
    let kinds: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "daemon_control")
        .map(|e| e["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.len(),
        5,
        "pause, logs, resume, update, restart: {kinds:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lists on screen follow the server without a click: a daemon going offline, a new
/// run, a new audit row; and the runs list pages (50 a page) and keeps an older page a
/// person asked for rather than reading the first page again over it.
#[test]
fn lists_refresh_themselves_and_the_runs_list_pages() {
    let dir = temp_dir("web-live");
    let (server, mut daemon) = common::server_with_daemon(&dir, "build-box");
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = chromium.open(&format!("{}/", server.url));
    page.sign_in(&server.admin);
    page.wait_until(
        "build-box online and the change stream open",
        "document.body.dataset.live === 'on' && Array.from(document.querySelectorAll('#contexts tbody tr')).some(r => r.cells[0].textContent === 'build-box' && r.cells[1].textContent === 'online')",
    );

    daemon.kill();
    page.wait_until(
        "build-box to show offline by itself",
        "Array.from(document.querySelectorAll('#contexts tbody tr')).some(r => r.cells[0].textContent === 'build-box' && r.cells[1].textContent === 'offline')",
    );

    page.show_tab("runs");
    let script = common::shell_capability("live", "echo live\n");
    let ids: Vec<String> = (0..55).map(|_| server.submit(&script, "cloud")).collect();
    for id in &ids {
        server.wait_status(id, "exited");
    }
    let last = ids.last().unwrap();
    page.wait_until(
        "the newest run to appear by itself",
        &format!("document.querySelector(\"#runs button[data-execution-id='{last}']\") !== null"),
    );
    page.wait_until(
        "a full first page",
        "document.querySelectorAll('#runs tbody tr').length === 50",
    );
    assert_eq!(
        page.eval("document.getElementById('runs-older').hidden"),
        false
    );
    page.eval("document.getElementById('runs-older').click()");
    page.wait_until(
        "the older page below the first",
        "document.querySelectorAll('#runs tbody tr').length === 55",
    );
    assert_eq!(
        page.eval("document.getElementById('runs-older').hidden"),
        true
    );
    // A new run while an older page is shown: the list a person paged through stays.
    let refreshed = page.eval("document.body.dataset.refreshed || ''");
    let changes = page.eval("parseInt(document.body.dataset.changes, 10) || 0");
    let id = server.submit(&script, "cloud");
    server.wait_status(&id, "exited");
    page.wait_until(
        "the change to be taken",
        &format!("(parseInt(document.body.dataset.changes, 10) || 0) > {changes}"),
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#runs tbody tr').length"),
        55,
        "the pages shown stay"
    );
    page.show_tab("audit");
    page.wait_until("the audit", "document.body.dataset.loaded === 'audit'");
    let (status, _) = server.api(
        "POST",
        "/v1/execution-contexts/build-box/share",
        Some(serde_json::json!({"allMembers": true})),
    );
    assert_eq!(status, 200);
    page.wait_until(
        "the sharing to appear in the audit by itself",
        "Array.from(document.querySelectorAll('#audit tbody tr')).some(r => r.cells[1].textContent === 'context_shared')",
    );
    assert_ne!(
        page.eval("document.body.dataset.refreshed || ''"),
        refreshed
    );
    page.keep_screenshot("web-live-audit");
    let _ = std::fs::remove_dir_all(&dir);
}
