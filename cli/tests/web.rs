//! The web UI `outpost serve` serves, in a real browser (Debian's chromium, headless): the real
//! binary as server and daemon, the page signed in with a real token, its tables checked
//! against what the API says, its Content-Security-Policy enforced by the browser, and a
//! screenshot of it read back pixel by pixel.

mod browser;
mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::Command;

use browser::{Chromium, Page};
use common::{Daemon, Server, binary, temp_dir};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 800;

/// A server with one joined daemon `build-box`, online.
fn server_with_daemon(dir: &std::path::Path) -> (Server, Daemon) {
    common::server_with_daemon(dir, "build-box")
}

/// The value of the row `name` of a facts table (a run's or a context's), or "".
fn fact_of(facts: &[Vec<String>], name: &str) -> String {
    facts
        .iter()
        .find(|r| r.first().is_some_and(|n| n == name))
        .and_then(|r| r.get(1).cloned())
        .unwrap_or_default()
}

/// A signed-in page showing the contexts table with `build-box` online.
fn signed_in(chromium: &Chromium, server: &Server) -> Page {
    let page = chromium.open(&format!("{}/", server.url));
    page.sign_in(&server.admin);
    page.wait_until(
        "the contexts table to list build-box online",
        "Array.from(document.querySelectorAll('#contexts tbody tr')).some(r => r.cells[0].textContent === 'build-box' && r.cells[1].textContent === 'online')",
    );
    page
}

#[test]
fn signing_in_with_a_token_lists_a_joined_daemon_online() {
    let dir = temp_dir("web-sign-in");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = signed_in(&chromium, &server);
    let (_, ctx) = server.api("GET", "/v1/execution-contexts/build-box", None);
    let rows = page.table("contexts");
    let row = rows
        .iter()
        .find(|r| r[0] == "build-box")
        .expect("a build-box row");
    assert_eq!(row[1], "online");
    assert_eq!(
        row[2],
        format!("{}/{}", ctx["slotsUsed"], ctx["slotsTotal"]),
        "{rows:?}"
    );
    let max = ctx["grant"]["limits"]["maxConcurrent"].to_string();
    assert!(
        row[3].contains(&format!("at most {max} at once")),
        "{row:?}"
    );
    assert!(row[3].contains("network: "), "{row:?}");
    let version = ctx["daemonVersion"].as_str().expect("a daemon version");
    assert!(!version.is_empty());
    // The machine's sandbox, as its daemon announced it (its owner lets the operator opt out).
    assert_eq!(row[4], "operator may opt out", "{row:?}");
    assert_eq!(row[5], version);
    // The token lives in this tab's sessionStorage only, and survives a reload.
    assert_eq!(
        page.eval("sessionStorage.getItem('outpost.token')"),
        server.admin.as_str()
    );
    assert_eq!(page.eval("localStorage.length"), 0);
    assert_eq!(page.eval("document.cookie"), "");
    page.tab.reload(false, None).expect("reloads");
    page.wait_until(
        "the reloaded page to be signed in",
        "document.body.dataset.signedIn === 'yes' && document.querySelectorAll('#contexts tbody tr').length > 0",
    );
    // Signing out forgets it.
    page.eval("document.getElementById('sign-out').click()");
    assert_eq!(
        page.eval("sessionStorage.getItem('outpost.token')"),
        serde_json::Value::Null
    );
    assert_eq!(page.eval("document.getElementById('app').hidden"), true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_token_shows_the_server_s_refusal_and_nothing_else() {
    let dir = temp_dir("web-wrong-token");
    let server = Server::start(&dir.join("server"), 0);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = chromium.open(&format!("{}/", server.url));
    page.sign_in("op_not-a-real-token");
    let shown = page.wait_until(
        "the sign-in error",
        "!document.getElementById('sign-in-error').hidden && document.getElementById('sign-in-error').textContent",
    );
    let shown = shown.as_str().expect("text");
    assert!(
        shown.starts_with("Sign-in failed: token_invalid"),
        "{shown}"
    );
    assert_eq!(page.eval("document.getElementById('app').hidden"), true);
    assert_eq!(page.eval("document.body.dataset.signedIn"), "no");
    assert_eq!(
        page.eval("sessionStorage.getItem('outpost.token')"),
        serde_json::Value::Null
    );
    // The right token after a wrong one works.
    page.eval("document.getElementById('token').value = ''");
    page.sign_in(&server.admin);
    page.wait_until(
        "signed in",
        "document.body.dataset.signedIn === 'yes' && document.getElementById('sign-in-error').hidden",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_and_audit_tabs_show_a_run_made_with_outpost_execute() {
    let dir = temp_dir("web-runs");
    let (server, _daemon) = server_with_daemon(&dir);
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("cap");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: hello\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), "echo hello\nexit 3\n").expect("script");
    let out = Command::new(binary())
        .arg("execute")
        .arg(&cap)
        .args(["--context", "build-box", "--server", &server.url, "--json"])
        .env("OUTPOST_TOKEN", &server.admin)
        .output()
        .expect("outpost execute runs");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let (_, runs) = server.api("GET", "/v1/runs", None);
    let run = runs["runs"][0].clone();
    let id = run["executionId"].as_str().expect("an id").to_owned();
    assert_eq!(run["ranOnText"], result["ranOnText"]);

    // A run on the server's cloud too: it has no server-side total, only the daemon-side one.
    let cloud_id = server.submit(&common::shell_capability("cloud-run", "echo up\n"), "cloud");
    server.wait_status(&cloud_id, "exited");

    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = signed_in(&chromium, &server);
    page.show_tab("runs");
    let rows = page.table("runs");
    let cloud = rows
        .iter()
        .find(|r| r[0] == cloud_id)
        .expect("the cloud run's row");
    assert!(
        cloud[4].contains(" ms")
            && !cloud[4].contains("undefined")
            && cloud[4]
                .split(' ')
                .next()
                .is_some_and(|n| n.parse::<u64>().is_ok()),
        "a cloud run's time in milliseconds: {cloud:?}"
    );
    let row = rows.iter().find(|r| r[0] == id).expect("the run's row");
    assert_eq!(row[1], "exited (exit 3)");
    assert_eq!(row[2], result["ranOnText"].as_str().expect("ranOnText"));
    assert!(row[2].contains("build-box"), "{row:?}");
    assert!(row[3].ends_with('Z') && row[3].len() == 20, "{row:?}");
    assert_eq!(
        row[4],
        format!(
            "{} ms (ran {} ms)",
            result["timing"]["serverMs"], result["timing"]["executeMs"]
        )
    );

    page.show_tab("audit");
    let rows = page.table("audit");
    let (_, ctx) = server.api("GET", "/v1/execution-contexts/build-box", None);
    let row = rows
        .iter()
        .find(|r| r[1] == "run" && r[4].starts_with(&id))
        .unwrap_or_else(|| panic!("the run's audit row in {rows:?}"));
    assert_eq!(row[4], format!("{id} exited on build-box"));
    // The context by name; its id on hover.
    assert_eq!(row[3], "build-box");
    let titles = page.eval(
        "Array.from(document.querySelectorAll('#audit tbody tr')).map(r => r.cells[3] ? r.cells[3].title : '')",
    );
    assert!(
        titles
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == ctx["id"].as_str().expect("an id")),
        "{titles}"
    );
    assert_eq!(
        row[2], "admin",
        "the requester, not the dispatcher: {row:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plain HTTP listener on another port (another origin): what it was asked for.
struct OtherOrigin {
    listener: TcpListener,
    port: u16,
}

impl OtherOrigin {
    fn start() -> OtherOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("address").port();
        OtherOrigin { listener, port }
    }

    /// Every request that reached it so far, answered with a script that marks the page.
    fn requests(&self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok((mut stream, _)) = self.listener.accept() {
            stream.set_nonblocking(false).expect("blocking");
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let body = "window.fromAnotherOrigin = true;";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/javascript\r\naccess-control-allow-origin: *\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        }
        out
    }
}

#[test]
fn the_content_security_policy_refuses_anything_from_another_origin() {
    let dir = temp_dir("web-csp");
    let server = Server::start(&dir.join("server"), 0);
    // The policy is on every file of the UI.
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    for path in [
        "/",
        "/ui/app.js",
        "/ui/app.css",
        "/ui/xterm.js",
        "/ui/xterm.css",
    ] {
        let response = agent
            .get(&format!("{}{path}", server.url))
            .call()
            .expect("answers");
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let policy = response
            .headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            policy.starts_with("default-src 'self';"),
            "{path}: {policy}"
        );
        assert!(
            policy.contains(&format!(
                "connect-src 'self' ws://127.0.0.1:{port} wss://127.0.0.1:{port};",
                port = server.port
            )),
            "{path}: {policy}"
        );
    }
    let other = OtherOrigin::start();
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = chromium.open(&format!("{}/", server.url));
    page.wait_until(
        "the page's own scripts to run",
        "document.body.dataset.signedIn === 'no'",
    );
    // A script from another origin: the browser refuses it before asking for it.
    let violation = page.eval(&format!(
        "new Promise(resolve => {{
            document.addEventListener('securitypolicyviolation',
                e => resolve({{uri: e.blockedURI, directive: e.effectiveDirective}}), {{once: true}});
            const s = document.createElement('script');
            s.src = 'http://127.0.0.1:{port}/evil.js';
            document.head.appendChild(s);
        }})",
        port = other.port
    ));
    assert_eq!(
        violation["uri"],
        format!("http://127.0.0.1:{}/evil.js", other.port)
    );
    assert_eq!(violation["directive"], "script-src-elem");
    // An inline script is refused too.
    let inline = page.eval(
        "new Promise(resolve => {
            document.addEventListener('securitypolicyviolation',
                e => resolve(e.effectiveDirective), {once: true});
            const s = document.createElement('script');
            s.textContent = 'window.inlineRan = true;';
            document.head.appendChild(s);
        })",
    );
    assert_eq!(inline, "script-src-elem");
    // A fetch and a WebSocket to another origin fail.
    let fetched = page.eval(&format!(
        "fetch('http://127.0.0.1:{}/data').then(() => 'loaded', e => 'refused: ' + e.name)",
        other.port
    ));
    assert_eq!(fetched, "refused: TypeError");
    let socket = page.eval(&format!(
        "new Promise(resolve => {{
            document.addEventListener('securitypolicyviolation',
                e => resolve(e.effectiveDirective), {{once: true}});
            try {{ new WebSocket('ws://127.0.0.1:{}/x'); }} catch (e) {{ resolve('threw ' + e.name); }}
        }})",
        other.port
    ));
    assert_eq!(socket, "connect-src");
    assert_eq!(page.eval("window.fromAnotherOrigin === true"), false);
    assert_eq!(page.eval("window.inlineRan === true"), false);
    assert!(
        other.requests().is_empty(),
        "the other origin was asked for something"
    );
    // Everything the page loaded came from its own origin; what it tried elsewhere got no
    // answer (status 0, nothing transferred).
    let loaded = page.eval(
        "Array.from(new Set(performance.getEntriesByType('resource').filter(e => e.responseStatus !== 0).map(e => new URL(e.name).origin)))",
    );
    assert_eq!(loaded, serde_json::json!([server.url]));
    let elsewhere = page.eval(
        "performance.getEntriesByType('resource').filter(e => new URL(e.name).origin !== location.origin).map(e => [e.name, e.responseStatus, e.transferSize])",
    );
    assert_eq!(
        elsewhere,
        serde_json::json!([[format!("http://127.0.0.1:{}/evil.js", other.port), 0, 0]])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_terminal_tab_runs_the_bundled_xterm_or_says_how_to_get_it() {
    let dir = temp_dir("web-xterm");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = signed_in(&chromium, &server);
    page.eval("document.querySelector('#tabs button[data-tab=terminal]').click()");
    let bundled = page.eval("!!(window.OutpostXterm && window.OutpostXterm.Terminal)");
    if bundled == true {
        // The bundle the build made from node-xterm runs: a terminal is drawn and fits the
        // window, and the page has the build's version.
        let version = page.eval("window.OutpostXterm.version");
        let package = std::env::var_os("OUTPOST_XTERM_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "/usr/share/nodejs/xterm".into())
            .join("package.json");
        if let Ok(text) = std::fs::read_to_string(package) {
            let package: serde_json::Value = serde_json::from_str(&text).expect("package.json");
            assert_eq!(version, package["version"]);
        }
        page.wait_until(
            "xterm.js to draw its canvas",
            "document.querySelector('#terminal .xterm canvas') !== null",
        );
        assert_eq!(
            page.eval("document.getElementById('terminal-unavailable').hidden"),
            true
        );
        assert_eq!(
            page.eval("document.getElementById('terminal-open').disabled"),
            false
        );
        let size = page.eval("window.outpostScreen().length");
        assert!(size.as_u64().is_some_and(|rows| rows > 10), "{size}");
        let options = page.eval(
            "Array.from(document.getElementById('terminal-context').options).map(o => o.value)",
        );
        assert_eq!(options, serde_json::json!(["build-box"]));
    } else {
        // Built without node-xterm: the tab says so plainly, with the fix.
        let text = page.wait_until(
            "the unavailable notice",
            "!document.getElementById('terminal-unavailable').hidden && document.getElementById('terminal-unavailable').textContent",
        );
        let text = text.as_str().expect("text");
        assert!(text.starts_with("The terminal is unavailable"), "{text}");
        assert!(
            text.contains("node-xterm") && text.contains("rebuild"),
            "{text}"
        );
        assert_eq!(
            page.eval("document.getElementById('terminal-open').disabled"),
            true
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The RGB of pixel (x, y) in a decoded RGBA or RGB image.
fn pixel(info: &png::OutputInfo, data: &[u8], x: u32, y: u32) -> [u8; 3] {
    let channels = info.color_type.samples();
    let at = (y as usize * info.width as usize + x as usize) * channels;
    [data[at], data[at + 1], data[at + 2]]
}

#[test]
fn a_screenshot_of_the_signed_in_page_shows_its_header_and_the_online_badge() {
    let dir = temp_dir("web-screenshot");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = signed_in(&chromium, &server);
    // The window's viewport: its full width, its height less what headless chromium keeps
    // for the window's own frame.
    let viewport = page.eval("[window.innerWidth, window.innerHeight, window.devicePixelRatio]");
    let (view_w, view_h) = (
        viewport[0].as_u64().expect("width") as u32,
        viewport[1].as_u64().expect("height") as u32,
    );
    assert_eq!(viewport[2], 1, "{viewport}");
    assert_eq!(view_w, WIDTH, "{viewport}");
    assert!(view_h > HEIGHT / 2 && view_h <= HEIGHT, "{viewport}");
    let badge = page.eval(
        "(() => { const r = document.querySelector('#contexts .badge.online').getBoundingClientRect(); return [Math.round(r.left + r.width / 2), Math.round(r.top + r.height / 2)]; })()",
    );
    // Kept for people to look at, and read back here.
    let shot = std::fs::read(page.keep_screenshot("web-contexts")).expect("the screenshot");
    let decoder = png::Decoder::new(std::io::Cursor::new(&shot));
    let mut reader = decoder.read_info().expect("a valid PNG header");
    let mut data = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut data).expect("a valid PNG image");
    assert_eq!((info.width, info.height), (view_w, view_h));
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    // Not blank: many colours (text is anti-aliased), and mostly the white background.
    let mut colours = std::collections::HashSet::new();
    let mut white = 0usize;
    for y in 0..view_h {
        for x in 0..view_w {
            let p = pixel(&info, &data, x, y);
            colours.insert(p);
            white += usize::from(p == [255, 255, 255]);
        }
    }
    assert!(colours.len() > 20, "{} colours", colours.len());
    assert!(
        white > (WIDTH * HEIGHT / 2) as usize,
        "{white} white pixels"
    );
    // The header bar is the page's navy (#1d3557) at its left edge, and the contexts table's
    // online badge is drawn green (#1a7f37) where the page laid it out.
    assert_eq!(pixel(&info, &data, 2, 2), [0x1d, 0x35, 0x57]);
    let (bx, by) = (
        badge[0].as_u64().expect("x") as u32,
        badge[1].as_u64().expect("y") as u32,
    );
    let green = (bx.saturating_sub(12)..bx + 12)
        .flat_map(|x| (by.saturating_sub(3)..by + 3).map(move |y| (x, y)))
        .filter(|&(x, y)| pixel(&info, &data, x, y) == [0x1a, 0x7f, 0x37])
        .count();
    assert!(
        green > 20,
        "{green} green pixels around the badge at {bx},{by}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Before sign-in only the sign-in form shows (no tabs, no empty table); once signed in the
/// header names the user; the audit shows contexts by name; and in a window 400 px wide the
/// header and the form wrap instead of spilling out of the page.
#[test]
fn sign_in_states_show_only_what_they_should_and_a_narrow_window_still_fits() {
    let dir = temp_dir("web-states");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = chromium.open(&format!("{}/", server.url));
    page.set_viewport(400, HEIGHT);
    page.wait_until(
        "the signed-out page",
        "document.body.dataset.signedIn === 'no'",
    );
    let shown = |id: &str| {
        page.eval(&format!(
            "getComputedStyle(document.getElementById('{id}')).display !== 'none'"
        ))
    };
    assert_eq!(shown("app"), false, "no tabs or tables before sign-in");
    assert_eq!(shown("sign-in"), true);
    let fits = "document.documentElement.scrollWidth <= window.innerWidth";
    assert_eq!(page.eval(fits), true, "the sign-in page fits 400 px");
    page.keep_screenshot("web-narrow-signed-out");
    page.sign_in(&server.admin);
    page.wait_until("signed in", "document.body.dataset.signedIn === 'yes'");
    assert_eq!(shown("app"), true);
    assert_eq!(shown("sign-in"), false);
    page.wait_until(
        "the user named in the header",
        "document.getElementById('who').textContent === 'signed in as admin (admin)'",
    );
    let header = page.eval(
        "(() => { const h = document.querySelector('header').getBoundingClientRect(); return [h.width, h.height]; })()",
    );
    assert!(
        header[0].as_f64().unwrap() <= 400.0 && header[1].as_f64().unwrap() < 120.0,
        "the header wraps within the window: {header}"
    );
    page.keep_screenshot("web-narrow-signed-in");
    page.show_tab("audit");
    page.wait_until(
        "an audit row about build-box",
        "Array.from(document.querySelectorAll('#audit tbody tr')).some(r => r.cells[3] && r.cells[3].textContent === 'build-box')",
    );
    let ids = page.eval(
        "Array.from(document.querySelectorAll('#audit tbody tr')).filter(r => r.cells[3] && r.cells[3].textContent.startsWith('ec_')).length",
    );
    assert_eq!(ids, 0, "contexts are shown by name, not by id");
    page.eval("document.getElementById('sign-out').click()");
    assert_eq!(shown("app"), false, "signed out: the tabs go");
    assert_eq!(page.eval("document.getElementById('who').textContent"), "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run's page: what it is and where it ran, its output as it prints it (followed live while
/// it runs), and a Cancel button that ends it — the page shows the end as it comes.
#[test]
fn a_run_s_page_follows_its_output_live_and_cancels_it() {
    let dir = temp_dir("web-run-page");
    let (server, _daemon) = server_with_daemon(&dir);
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = signed_in(&chromium, &server);
    let id = server.submit(
        &common::shell_capability(
            "slow-printer",
            "echo first-line; echo to-stderr >&2; exec sleep 300\n",
        ),
        "build-box",
    );
    server.wait_status(&id, "running");
    page.show_tab("runs");
    page.eval(&format!(
        "document.querySelector(\"#runs button[data-execution-id='{id}']\").click()"
    ));
    page.wait_until(
        "the run's output, followed while it runs",
        "document.getElementById('run-stdout').textContent.includes('first-line') && document.getElementById('run-stderr').textContent.includes('to-stderr')",
    );
    assert_eq!(page.eval("document.body.dataset.run"), "live");
    let facts = page.table("run-facts");
    let fact = |name: &str| fact_of(&facts, name);
    assert!(fact("Capability").starts_with("slow-printer"), "{facts:?}");
    assert_eq!(fact("Requester"), "admin", "{facts:?}");
    assert_eq!(fact("Asked for"), "build-box", "{facts:?}");
    assert!(fact("Status").starts_with("running"), "{facts:?}");
    assert_eq!(
        page.eval("document.getElementById('run-cancel').disabled"),
        false
    );
    page.keep_screenshot("web-run-live");
    page.eval("document.getElementById('run-cancel').click()");
    page.wait_until(
        "the run's end, as its stream brings it",
        "document.body.dataset.run === 'ended'",
    );
    let facts = page.table("run-facts");
    assert!(
        fact_of(&facts, "Status").starts_with("cancelled"),
        "{facts:?}"
    );
    assert!(
        fact_of(&facts, "Where").contains("build-box"),
        "where it ran, once it ended: {facts:?}"
    );
    assert_eq!(
        page.eval("document.getElementById('run-cancel').disabled"),
        true
    );
    let (_, e) = server.api("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(e["status"], "cancelled", "{e}");
    // Back to the list, which shows the run as it ended.
    page.eval("document.getElementById('run-back').click()");
    page.wait_until(
        "the runs list again",
        &format!(
            "Array.from(document.querySelectorAll('#runs tbody tr')).some(r => r.cells[0].textContent === '{id}' && r.cells[1].textContent.startsWith('cancelled'))"
        ),
    );
    // The filter bar asks the server: by status, by context, by requester.
    let filter = |context: &str, status: &str, requester: &str| {
        page.eval("delete document.body.dataset.filtered");
        page.eval(&format!(
            "(() => {{ document.getElementById('runs-context').value = '{context}'; document.getElementById('runs-status').value = '{status}'; document.getElementById('runs-requester').value = '{requester}'; document.getElementById('runs-filter').requestSubmit(); }})()"
        ));
        page.wait_until(
            "the filtered list",
            "document.body.dataset.filtered === 'yes'",
        );
        page.table("runs")
    };
    let listed = |rows: &[Vec<String>]| rows.iter().any(|r| r[0] == id);
    assert!(listed(&filter("", "cancelled", "")));
    assert!(listed(&filter("build-box", "cancelled", "admin")));
    let none = filter("", "exited", "");
    assert!(!listed(&none), "{none:?}");
    let nobody = filter("", "", "nobody");
    assert_eq!(
        nobody,
        [["No runs yet.".to_owned()]],
        "another requester's runs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A context's page: its state, what a run there can see (sandbox and grant), who may use
/// it, and its recent runs, each opening the run's page.
#[test]
fn a_context_s_page_shows_its_state_grant_and_recent_runs() {
    let dir = temp_dir("web-context-page");
    let (server, _daemon) = server_with_daemon(&dir);
    let id = server.submit(
        &common::shell_capability("context-page-run", "echo here\n"),
        "build-box",
    );
    server.wait_status(&id, "exited");
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = signed_in(&chromium, &server);
    page.eval("document.querySelector(\"#contexts button[data-context='build-box']\").click()");
    page.wait_until(
        "the context's page",
        "document.body.dataset.context === 'shown'",
    );
    let facts = page.table("context-facts");
    let fact = |name: &str| fact_of(&facts, name);
    assert!(
        fact("State").starts_with("online, taking runs; daemon "),
        "{facts:?}"
    );
    assert_eq!(fact("Operator"), "admin", "{facts:?}");
    // Online since the daemon's connection became ready, which is after it registered.
    let (_, ctx) = server.api("GET", "/v1/execution-contexts/build-box", None);
    let since = ctx["onlineSince"]
        .as_u64()
        .expect("onlineSince while online");
    assert!(since >= ctx["registeredAt"].as_u64().unwrap(), "{ctx}");
    assert!(
        fact("Online since").starts_with("20") && fact("Online since").ends_with('Z'),
        "a time: {facts:?}"
    );
    assert!(fact("Slots").ends_with("in use"), "{facts:?}");
    assert!(fact("Environments").contains("shell"), "{facts:?}");
    assert_eq!(fact("Sandbox"), "operator may opt out", "{facts:?}");
    assert!(fact("Grant").contains("at most"), "{facts:?}");
    assert!(!fact("Shared").is_empty(), "{facts:?}");
    let runs = page.table("context-runs");
    assert!(
        runs.iter()
            .any(|r| r[0] == id && r[1].starts_with("exited")),
        "{runs:?}"
    );
    assert_eq!(
        page.eval("document.getElementById('grant-editor').hidden"),
        false,
        "the admin may change the grant"
    );
    page.keep_screenshot("web-context-page");
    page.eval(&format!(
        "Array.from(document.querySelectorAll('#context-runs button')).find(b => b.textContent === '{id}').click()"
    ));
    page.wait_until("the run's page", "document.body.dataset.run === 'ended'");
    assert_eq!(page.eval("document.body.dataset.tab"), "runs");

    // A member of a shared context sees its page but neither the grant editor nor the
    // daemon's controls: changing either is the operator's and the admins' alone.
    let (status, made) = server.api(
        "POST",
        "/v1/users",
        Some(serde_json::json!({"name": "mia"})),
    );
    assert_eq!(status, 201, "{made}");
    let (status, shared) = server.api(
        "POST",
        "/v1/execution-contexts/build-box/share",
        Some(serde_json::json!({"allMembers": true})),
    );
    assert_eq!(status, 200, "{shared}");
    let member = chromium.open(&format!("{}/", server.url));
    member.sign_in(made["token"].as_str().expect("a token"));
    member.wait_until(
        "build-box listed for the member",
        "Array.from(document.querySelectorAll('#contexts tbody tr')).some(r => r.cells[0].textContent === 'build-box')",
    );
    member.eval("document.querySelector(\"#contexts button[data-context='build-box']\").click()");
    member.wait_until(
        "the context's page for the member",
        "document.body.dataset.context === 'shown'",
    );
    assert_eq!(
        member.eval("document.getElementById('grant-editor').hidden"),
        true,
        "no grant editor for a member"
    );
    assert_eq!(
        member.eval("document.getElementById('daemon-controls').hidden"),
        true,
        "no daemon controls for a member"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `outpost serve --xterm-dir DIR` reads xterm.js from DIR when the page asks: without a
/// package there the script says what is missing, and a package put there later is served
/// at the next request, with no rebuild and no restart.
#[test]
fn xterm_is_read_at_run_time_from_the_folder_serve_names() {
    let dir = temp_dir("web-xterm-dir");
    let package = dir.join("xterm");
    std::fs::create_dir_all(&package).expect("the folder");
    let server = Server::start_with(
        &dir.join("server"),
        0,
        &[std::ffi::OsStr::new("--xterm-dir"), package.as_os_str()],
    );
    let script = || -> String {
        ureq::get(&format!("{}/ui/xterm.js", server.url))
            .call()
            .expect("the script is served")
            .into_body()
            .with_config()
            .limit(16 << 20)
            .read_to_string()
            .expect("text")
    };
    let missing = script();
    assert!(
        missing.starts_with("window.OutpostXterm = { missing: ")
            && missing.contains(&package.display().to_string()),
        "{missing}"
    );
    // The page says what is missing and how to get it, instead of a black box.
    let chromium = Chromium::start(WIDTH, HEIGHT);
    let page = chromium.open(&format!("{}/", server.url));
    page.sign_in(&server.admin);
    page.wait_until("signed in", "document.body.dataset.signedIn === 'yes'");
    page.eval("document.querySelector('#tabs button[data-tab=terminal]').click()");
    let text = page.wait_until(
        "the unavailable notice",
        "!document.getElementById('terminal-unavailable').hidden && document.getElementById('terminal-unavailable').textContent",
    );
    let text = text.as_str().expect("text");
    assert!(
        text.starts_with("The terminal is unavailable")
            && text.contains(&package.display().to_string())
            && text.contains("apt-get install node-xterm")
            && text.contains("--xterm-dir"),
        "{text}"
    );
    assert_eq!(
        page.eval("document.getElementById('terminal').hidden"),
        true
    );
    assert_eq!(
        page.eval("document.getElementById('terminal-open').disabled"),
        true
    );
    page.keep_screenshot("web-terminal-unavailable");
    // Installed later (Debian's package, its links followed).
    let installed = Command::new("cp")
        .arg("-rLT")
        .arg("/usr/share/nodejs/xterm")
        .arg(&package)
        .status()
        .expect("cp runs (node-xterm is installed by ./test)");
    assert!(installed.success());
    let bundle = script();
    assert!(
        bundle.starts_with("// xterm.js "),
        "{}",
        &bundle[..200.min(bundle.len())]
    );
    assert!(bundle.contains("window.OutpostXterm = { version: "));
    // The same server, the page reloaded: the terminal draws.
    page.tab.reload(true, None).expect("reloads");
    page.wait_until("signed in", "document.body.dataset.signedIn === 'yes'");
    page.eval("document.querySelector('#tabs button[data-tab=terminal]').click()");
    page.wait_until(
        "xterm.js to draw its canvas",
        "document.querySelector('#terminal .xterm canvas') !== null",
    );
    assert_eq!(
        page.eval("document.getElementById('terminal-unavailable').hidden"),
        true
    );
    let _ = std::fs::remove_dir_all(&dir);
}
