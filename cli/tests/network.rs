//! Joining across a real network: a server listening on every address (`0.0.0.0`) with a
//! self-signed certificate (`openssl req -x509` as it comes: CA:TRUE, no names) prints a join
//! that another machine can use — here a second network namespace the test makes, with its
//! own interface and address, whose daemon joins with nothing but the join string (no `--ca`,
//! no variable: the join pins the certificate), keeps trusting it across a restart, and runs
//! a capability; the CLI on the server's machine uses the same pin from the local join. A
//! plain-http server on every address is refused with what to do. Needs root (network
//! namespaces, veth) and `openssl`; `./test` runs as root in CI and installs both tools.

mod common;

use std::process::{Command, Stdio};

use common::{Server, temp_dir, wait_for};

/// A network namespace with one veth pair to this one; removed when dropped.
struct Namespace {
    name: String,
    host_side: String,
}

impl Namespace {
    /// `10.231.N.1` here, `10.231.N.2` there, and a default route back through here.
    fn new(tag: u8) -> Namespace {
        let pid = std::process::id() % 10_000;
        let name = format!("outpost-{pid}-{tag}");
        let (host_side, ns_side) = (format!("op{pid}h{tag}"), format!("op{pid}n{tag}"));
        let ns = Namespace {
            name: name.clone(),
            host_side: host_side.clone(),
        };
        let net = format!("10.231.{tag}");
        for args in [
            vec!["netns", "add", &name],
            vec![
                "link", "add", &host_side, "type", "veth", "peer", "name", &ns_side,
            ],
            vec!["link", "set", &ns_side, "netns", &name],
            vec!["addr", "add", &format!("{net}.1/24"), "dev", &host_side],
            vec!["link", "set", &host_side, "up"],
            vec![
                "-n",
                &name,
                "addr",
                "add",
                &format!("{net}.2/24"),
                "dev",
                &ns_side,
            ],
            vec!["-n", &name, "link", "set", &ns_side, "up"],
            vec!["-n", &name, "link", "set", "lo", "up"],
            vec![
                "-n",
                &name,
                "route",
                "add",
                "default",
                "via",
                &format!("{net}.1"),
            ],
        ] {
            let out = Command::new("ip").args(&args).output().unwrap_or_else(|e| {
                panic!("`ip` (Debian's iproute2; ./test installs it) cannot run: {e}")
            });
            assert!(
                out.status.success(),
                "ip {}: {} (network namespaces need root: run ./test as root)",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        ns
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_side])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn a_join_printed_for_every_address_is_usable_from_another_network_namespace() {
    let dir = temp_dir("network-join");
    std::fs::create_dir_all(&dir).expect("dir");
    let ns = Namespace::new(1);
    let (cert, key) = common::self_signed(&dir);
    let state = dir.join("server");
    let server = Server::start_with_listen(
        &state,
        "0.0.0.0:0",
        &[
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
    );
    let join = outpost_core::join::Join::parse(&server.join).expect("a join");
    let authority = join.url.trim_start_matches("https://");
    let addr: std::net::SocketAddr = authority.parse().expect("an address and a port");
    assert!(
        !addr.ip().is_loopback() && !addr.ip().is_unspecified(),
        "the join names an address other machines can use: {}",
        join.url
    );
    assert!(join.tls_sha256.is_some(), "the join pins the certificate");
    // The daemon lives in the other namespace: all it has is the join string.
    let home = dir.join("home");
    common::let_operator_opt_out(&home);
    let start_daemon = |join: Option<&str>| {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(dir.join("daemon.log"))
            .expect("log");
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &ns.name])
            .arg(common::binary())
            .args(["daemon", "--name", "faraway", "--home"])
            .arg(&home);
        if let Some(join) = join {
            command.args(["--join", join]);
        }
        command
            .env("OUTPOST_KEYRING", "off")
            .env_remove("OUTPOST_CA_FILE")
            .env("OUTPOST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the daemon starts in the namespace")
    };
    let online = |want: bool| {
        wait_for("the far daemon's state", || {
            // The CLI as the server's own machine runs it: the local join, its pin.
            let out = Command::new(common::binary())
                .args(["context", "list", "--json"])
                .env("OUTPOST_STATE", &state)
                .env_remove("OUTPOST_SERVER")
                .env_remove("OUTPOST_TOKEN")
                .env_remove("OUTPOST_CA_FILE")
                .output()
                .ok()?;
            let listed: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let ctx = listed["contexts"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "faraway")?
                .clone();
            (ctx["online"] == want).then_some(ctx)
        })
    };
    let mut daemon = start_daemon(Some(&server.join));
    online(true);
    // Restarted without the join, it trusts the certificate its first start pinned.
    let _ = daemon.kill();
    let _ = daemon.wait();
    online(false);
    let mut daemon = start_daemon(None);
    online(true);
    // The CLI on the server's machine: the local join's pin, no --ca.
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("capability folder");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: where\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\n",
    )
    .expect("manifest");
    std::fs::write(
        cap.join("run.sh"),
        "grep -q '10.231.1.2' /proc/net/fib_trie && echo inside\n",
    )
    .expect("script");
    let ran = Command::new(common::binary())
        .args([
            "execute",
            cap.to_str().expect("utf-8"),
            "--context",
            "faraway",
        ])
        .env("OUTPOST_STATE", &state)
        .env_remove("OUTPOST_SERVER")
        .env_remove("OUTPOST_TOKEN")
        .env_remove("OUTPOST_CA_FILE")
        .output()
        .expect("outpost execute runs");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "inside\n",
        "it ran in the other namespace: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(ran.status.success());
    // Without the join, the same certificate is refused with a sentence that says what to do.
    let stranger = Command::new(common::binary())
        .args(["runs", "list", "--server", &join.url])
        .env("OUTPOST_STATE", dir.join("elsewhere"))
        .env("OUTPOST_TOKEN", &server.admin)
        .env_remove("OUTPOST_CA_FILE")
        .output()
        .expect("outpost runs list runs");
    let said = String::from_utf8_lossy(&stranger.stderr);
    assert!(!stranger.status.success());
    assert!(
        said.contains("the server's TLS certificate is") && said.contains("the server's join"),
        "{said}"
    );
    assert!(!said.contains("UnknownIssuer"), "no rustls names: {said}");
    // Given as --ca, a default CA:TRUE certificate cannot be the server's own for a client
    // that checks names: the sentence says how to make one that can.
    let with_ca = Command::new(common::binary())
        .args(["runs", "list", "--server", &join.url, "--ca"])
        .arg(&cert)
        .env("OUTPOST_STATE", dir.join("elsewhere"))
        .env("OUTPOST_TOKEN", &server.admin)
        .output()
        .expect("outpost runs list runs");
    let said = String::from_utf8_lossy(&with_ca.stderr);
    assert!(
        !with_ca.status.success() && said.contains("CA:TRUE") && said.contains("CA:FALSE"),
        "{said}"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plain_http_server_on_every_address_is_refused_with_what_to_do() {
    let dir = temp_dir("network-plain");
    let out = Command::new(common::binary())
        .args(["serve", "--listen", "0.0.0.0:0", "--state"])
        .arg(dir.join("server"))
        .output()
        .expect("outpost serve runs");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("plain http") && said.contains("--tls-cert") && said.contains("--public-url"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_join_read_from_standard_input_stays_out_of_the_process_list() {
    use std::io::Write as _;
    let dir = temp_dir("network-join-stdin");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    common::let_operator_opt_out(&home);
    let mut daemon = Command::new(common::binary())
        .args(["daemon", "--name", "quiet", "--join-file", "-", "--home"])
        .arg(&home)
        .env("OUTPOST_KEYRING", "off")
        .env_remove("OUTPOST_JOIN")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the daemon starts");
    let mut stdin = daemon.stdin.take().expect("stdin");
    writeln!(stdin, "{}", server.join).expect("the join goes in");
    drop(stdin);
    server.wait_context("quiet", "the daemon to come online", |c| {
        c["online"] == true
    });
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", daemon.id())).expect("cmdline");
    let token = outpost_core::join::Join::parse(&server.join)
        .expect("a join")
        .token;
    let argv = String::from_utf8_lossy(&cmdline);
    assert!(
        !argv.contains(&token) && !argv.contains("outpost-join-v1"),
        "the process list shows no credential: {argv:?}"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
