//! The sandbox, proved with the real binary as server, daemon and client on the real kernel:
//! with the owner's default policy an operator's run and a shared member's run alike cannot
//! read the user's `~/.ssh`, the daemon's key, or a folder outside their grants, cannot write
//! outside their own places, cannot signal the daemon and cannot reach a server on the host's
//! loopback; `operator-may-opt-out` lets the operator's own `confine: false` run out and
//! nobody else's; an allowlist reaches exactly what it names, through the egress gate, and
//! every refusal lands in the audit log.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Daemon, Server, api, binary, temp_dir};
use serde_json::{Value, json};

use common::outpost_as as outpost;

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn new_user(server: &Server, name: &str) -> String {
    let (status, made) = server.api("POST", "/v1/users", Some(json!({ "name": name })));
    assert_eq!(status, 201, "{made}");
    made["token"].as_str().expect("a token").to_owned()
}

/// A shell capability running `script`, its manifest ending with `extra`.
fn capability(script: &str, extra: &str) -> Value {
    use base64::Engine as _;
    json!({
        "kind": "inline",
        "manifest": format!("name: probe\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n{extra}"),
        "files": [{"path": "run.sh", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script)}],
    })
}

fn run(server: &Server, token: &str, capability: Value) -> Value {
    let body = json!({"capability": capability, "context": "box", "wait": true, "waitSecs": 60});
    let (status, e) = api(&server.url, token, "POST", "/v1/executions", Some(body));
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["status"], "exited", "{e}");
    e
}

/// A TCP server on the host's loopback that answers every connection with `answer` (as an
/// HTTP response) and counts them.
fn loopback_server(answer: &'static str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    (port, count)
}

/// One line per probe, `NAME: yes` when the run could do it.
fn probes(checks: &[(&str, String)]) -> String {
    let mut script = String::from(
        "t() { if sh -c \"$2\" >/dev/null 2>&1; then echo \"$1: yes\"; else echo \"$1: no\"; fi; }\n",
    );
    for (name, command) in checks {
        script.push_str(&format!("t {name} '{command}'\n"));
    }
    script
}

fn answers(e: &Value) -> Vec<String> {
    e["stdout"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_default_policy_holds_the_operator_s_and_a_member_s_runs_alike() {
    let dir = temp_dir("sandbox-default");
    let user_home = dir.join("user-home");
    std::fs::create_dir_all(user_home.join(".ssh")).unwrap();
    std::fs::write(user_home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let home = dir.join("home");
    let server = Server::start(&dir.join("server"), 0);
    let ana = new_user(&server, "ana");
    let bo = new_user(&server, "bo");
    let mut join = outpost_core::join::Join::parse(&server.join).unwrap();
    join.token = ana.clone();
    let user_home_text = user_home.display().to_string();
    let mut daemon = Daemon::start_sandboxed(
        &home,
        "box",
        Some(&join.encode()),
        "tokio",
        &[("OUTPOST_KEYRING", "off"), ("HOME", &user_home_text)],
    );
    let context = server.wait_context("box", "box online", |c| c["online"] == true);
    assert_eq!(context["grant"]["egress"]["mode"], "none", "{context}");
    // The daemon says what its sandbox enforces; the server shows it with the context.
    assert_eq!(
        context["sandbox"],
        json!({"confinement": "required", "landlock": true, "namespaces": true, "scopes": true, "mounts": []}),
        "{context}"
    );
    let shown = ok(outpost(&server, &ana, &["context", "show", "box"]));
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("sandbox: every shell and terminal run sandboxed (Landlock yes"),
        "{shown}"
    );
    ok(outpost(
        &server,
        &ana,
        &["context", "share", "box", "--all-members", "on"],
    ));
    ok(outpost(&server, &bo, &["context", "opt-in", "box"]));
    // A member sees the machine's sandbox, not the folders its operator's runs see.
    let (status, seen) = api(&server.url, &bo, "GET", "/v1/execution-contexts/box", None);
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["sandbox"]["confinement"], "required", "{seen}");
    assert_eq!(seen["sandbox"]["mounts"], Value::Null, "{seen}");
    let key = std::fs::read_dir(home.join("config"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("key."))
        })
        .expect("the daemon's key file");
    let (port, connections) = loopback_server("host service");
    // A Unix socket of the machine's (as the Docker engine's or a tmux server's would be):
    // Landlock alone lets a run connect to any socket it can name.
    let host_socket = outside.join("host.sock");
    let _listening = std::os::unix::net::UnixListener::bind(&host_socket).unwrap();
    let checks = [
        (
            "read-ssh",
            format!("cat {}/.ssh/id_ed25519", user_home.display()),
        ),
        ("read-key", format!("cat {}", key.display())),
        // Empty when hidden: a read that finds a line is a read of the secret.
        ("read-shadow", "grep -q : /etc/shadow".to_owned()),
        (
            "read-outside",
            format!("cat {}/secret.txt", outside.display()),
        ),
        (
            "write-outside",
            format!("echo x > {}/new.txt", outside.display()),
        ),
        ("write-home", "echo x > $HOME/f && cat $HOME/f".to_owned()),
        ("write-tmp", "echo x > $TMPDIR/f".to_owned()),
        ("signal-daemon", format!("kill -0 {}", daemon.pid())),
        (
            "connect-host-socket",
            format!(
                "/usr/bin/python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect(\\\"{}\\\")\"",
                host_socket.display()
            ),
        ),
        (
            "connect-loopback",
            format!(
                "/usr/bin/python3 -c \"import socket; socket.create_connection((\\\"127.0.0.1\\\", {port}), 2)\""
            ),
        ),
    ];
    let expected: Vec<String> = checks
        .iter()
        .map(|(name, _)| {
            let yes = matches!(*name, "write-home" | "write-tmp");
            format!("{name}: {}", if yes { "yes" } else { "no" })
        })
        .collect();
    for (who, token) in [("operator", &ana), ("member", &bo)] {
        let e = run(&server, token, capability(&probes(&checks), ""));
        assert_eq!(answers(&e), expected, "{who}: {e}");
    }
    assert!(!outside.join("new.txt").exists());
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no connection reached the host"
    );
    // A run's private home goes with it, once the server has its result.
    let leftovers = || -> Vec<_> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("outpost-run-"))
            .filter(|e| {
                std::fs::read_dir(e.path().join("home"))
                    .map(|mut d| d.any(|f| f.is_ok_and(|f| f.file_name() == "f")))
                    .unwrap_or(false)
            })
            .map(|e| e.path())
            .collect()
    };
    common::wait_for("the runs' private homes to go", || {
        leftovers().is_empty().then_some(())
    });

    // The owner lets the operator opt out: ana's `confine: false` run sees the home; bo's,
    // with the same manifest on the same machine, still cannot.
    let out = Command::new(binary())
        .args([
            "context",
            "policy",
            "confinement",
            "operator-may-opt-out",
            "--json",
            "--home",
        ])
        .arg(&home)
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&ok(out).stdout).unwrap();
    assert_eq!(shown["confinement"], "operator-may-opt-out", "{shown}");
    assert_eq!(shown["runs"]["shared"]["sandboxed"], "always", "{shown}");
    assert_eq!(shown["kernel"]["landlock"], true, "{shown}");
    // The running daemon announces the owner's new rule.
    server.wait_context("box", "the new rule announced", |c| {
        c["sandbox"]["confinement"] == "operator-may-opt-out"
    });
    let read = probes(&checks[..1]);
    let hers = run(&server, &ana, capability(&read, "confine: false\n"));
    assert_eq!(answers(&hers), ["read-ssh: yes"], "{hers}");
    let his = run(&server, &bo, capability(&read, "confine: false\n"));
    assert_eq!(answers(&his), ["read-ssh: no"], "{his}");
    // Without `confine: false`, ana's run is sandboxed all the same.
    let asked = run(&server, &ana, capability(&read, ""));
    assert_eq!(answers(&asked), ["read-ssh: no"], "{asked}");
    // Once a sandboxed run is over, the daemon keeps a warm sandbox ready for the next one,
    // and a daemon that stops takes it, and its private folder, with it.
    let warm_of = |pid: u32| -> Vec<String> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("outpost-run-warm-{pid}-")))
            .collect()
    };
    let pid = daemon.pid();
    let warm = || warm_of(pid);
    common::wait_for("the daemon's warm sandbox", || {
        (!warm().is_empty()).then_some(())
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_tail(20));
    assert!(warm().is_empty(), "{:?}", warm());

    // The same machine started again (joined already, so no join).
    let start_again = || {
        Daemon::start_sandboxed(
            &home,
            "box",
            None,
            "tokio",
            &[("OUTPOST_KEYRING", "off"), ("HOME", &user_home_text)],
        )
    };
    // A daemon killed outright leaves no warm sandbox running (its folder waits for the next
    // start's sweep): the helper finds that no run will come, and ends.
    let mut daemon = start_again();
    server.wait_context("box", "box online again", |c| c["online"] == true);
    let asked = run(&server, &ana, capability(&read, ""));
    assert_eq!(answers(&asked), ["read-ssh: no"], "{asked}");
    let pid = daemon.pid();
    common::wait_for("the restarted daemon's warm sandbox", || {
        (!warm_of(pid).is_empty()).then_some(())
    });
    let marker = format!("outpost-run-warm-{pid}-");
    let helpers = || -> usize {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(&marker))
            .count()
    };
    common::wait_for("the warm sandbox's processes", || {
        (helpers() > 0).then_some(())
    });
    daemon.kill();
    common::wait_for("the warm sandbox's processes to end", || {
        (helpers() == 0).then_some(())
    });
    // Its folder stays until the next start, which sweeps the folders of dead daemons.
    assert!(!warm_of(pid).is_empty(), "the killed daemon's warm folder");
    let _daemon = start_again();
    server.wait_context("box", "box online after the kill", |c| c["online"] == true);
    assert_eq!(warm_of(pid), Vec::<String>::new(), "swept at the start");
}

#[test]
fn an_allowlist_reaches_what_it_names_through_the_gate_and_audits_the_rest() {
    let dir = temp_dir("sandbox-gate");
    let (allowed, allowed_hits) = loopback_server("allowed service");
    let (other, other_hits) = loopback_server("other service");
    let server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start_sandboxed(
        &dir.join("home"),
        "box",
        Some(&server.join),
        "tokio",
        &[("OUTPOST_KEYRING", "off")],
    );
    server.wait_context("box", "box online", |c| c["online"] == true);
    let allowlist = format!("127.0.0.1:{allowed},localhost:{other}");
    let out = Command::new(binary())
        .args([
            "context",
            "grant",
            "box",
            "--egress",
            &allowlist,
            "--json",
            "--server",
            &server.url,
        ])
        .env("OUTPOST_TOKEN", &server.admin)
        .output()
        .unwrap();
    let granted: Value = serde_json::from_slice(&ok(out).stdout).unwrap();
    assert_eq!(granted["grant"]["egress"]["mode"], "allowlist", "{granted}");
    let script = format!(
        r#"/usr/bin/python3 - <<'PY'
import os, socket, urllib.request, urllib.error
def http(url):
    try:
        return "ok " + urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return "refused %d %s" % (e.code, e.read().decode().replace("\n", " | "))
    except Exception as e:
        return "error %s" % e
def connect(target):
    s = socket.create_connection(("127.0.0.1", 3128), 5)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = s.recv(4096).decode(errors="replace")
    if not head.startswith("HTTP/1.1 200"):
        return "refused " + head.split("\r\n")[0]
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    answer = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
    return "ok " + answer.decode().split("\r\n\r\n", 1)[-1]
def direct(port):
    try:
        socket.create_connection(("127.0.0.1", port), 2)
        return "connected"
    except OSError as e:
        return "error %s" % e.strerror
print("proxy:", os.environ.get("HTTPS_PROXY"))
print("http-allowed:", http("http://127.0.0.1:{allowed}/"))
print("connect-allowed:", connect("127.0.0.1:{allowed}"))
print("http-other-port:", http("http://127.0.0.1:{other}/"))
print("http-name-into-machine:", http("http://localhost:{other}/"))
print("direct:", direct({allowed}))
PY
"#
    );
    let e = run(&server, &server.admin, capability(&script, ""));
    let lines = answers(&e);
    let line = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no {key} in {e}"))
            .to_owned()
    };
    assert_eq!(line("proxy"), "http://127.0.0.1:3128");
    assert_eq!(line("http-allowed"), "ok allowed service", "{e}");
    assert_eq!(line("connect-allowed"), "ok allowed service", "{e}");
    let refused = line("http-other-port");
    assert!(
        refused.starts_with("refused 403")
            && refused.contains(&format!("127.0.0.1:{other}"))
            && refused.contains("allowlist")
            && refused.contains("outpost context grant"),
        "{refused}"
    );
    let rebind = line("http-name-into-machine");
    assert!(
        rebind.starts_with("refused 403") && rebind.contains("resolves to 127.0.0.1"),
        "{rebind}"
    );
    assert!(line("direct").starts_with("error"), "{e}");
    assert_eq!(
        allowed_hits.load(Ordering::SeqCst),
        2,
        "the HTTP request and the tunnel"
    );
    assert_eq!(
        other_hits.load(Ordering::SeqCst),
        0,
        "nothing reached the other port"
    );
    // Each refusal is in the audit log, with the run and the destination.
    let run_id = e["executionId"].as_str().unwrap();
    let (status, audit) = server.api("GET", "/v1/audit", None);
    assert_eq!(status, 200, "{audit}");
    let denied: Vec<&Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|ev| ev["kind"] == "egress_denied")
        .collect();
    assert_eq!(denied.len(), 2, "{audit}");
    for ev in &denied {
        assert!(ev["detail"].as_str().unwrap().contains(run_id), "{ev}");
    }
    let details: Vec<&str> = denied
        .iter()
        .map(|ev| ev["detail"].as_str().unwrap())
        .collect();
    for destination in [format!("127.0.0.1:{other}"), format!("localhost:{other}")] {
        assert!(
            details.iter().any(|d| d.contains(&destination)),
            "{details:?}"
        );
    }
    assert!(
        denied.iter().all(|ev| ev["contextId"].is_string()),
        "{audit}"
    );
    daemon.kill();
}
