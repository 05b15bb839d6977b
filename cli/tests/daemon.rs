//! `outpost daemon`'s lifecycle with the real binary: revoke and replace stop it for good with
//! exit 0; a bad join, a plain-http join to a remote host, a key others can read and a second
//! daemon on one home are refused with a code and exit 78, and so are a wrong passphrase and a
//! tampered or cut `key.enc`, which stay as they were; `outpost execute` prints where the
//! run went and exits with the capability's code.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use common::{Daemon, Server, binary, temp_dir, wait_for};

fn online(server: &Server, name: &str) {
    server.wait_context(name, "the daemon to come online", |c| c["online"] == true);
}

#[test]
fn revoke_stops_the_daemon_for_good_with_exit_0() {
    let dir = temp_dir("revoke");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    online(&server, "box");
    let (status, body) = server.api("POST", "/v1/execution-contexts/box/revoke", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    assert!(
        daemon.log_text().contains("revoked"),
        "{}",
        daemon.log_text()
    );
    // Started again, it learns it is revoked and exits 0 without connecting.
    let mut again = Daemon::start(&home, "box", None, "tokio");
    assert_eq!(again.wait_exit(), 0, "{}", again.log_text());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_daemon_with_the_same_key_replaces_the_first() {
    let dir = temp_dir("replace");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut first = Daemon::start(&home, "box", Some(&server.join), "smol");
    online(&server, "box");
    // The same machine key in a copied home (a restored backup, a cloned disk).
    let copy = dir.join("copy");
    std::fs::create_dir_all(copy.join("config")).expect("config");
    for file in ["key.enc", "key.file", "server.json"] {
        std::fs::copy(
            home.join("config").join(file),
            copy.join("config").join(file),
        )
        .expect("copy");
    }
    let mut second = Daemon::start(&copy, "box", None, "blocking");
    assert_eq!(first.wait_exit(), 0, "{}", first.log_text());
    assert!(
        first.log_text().contains("replaced"),
        "{}",
        first.log_text()
    );
    online(&server, "box");
    assert!(
        second.child.try_wait().expect("status").is_none(),
        "the newer daemon serves"
    );
    second.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

fn daemon_output(args: &[&str], home: &std::path::Path) -> (i32, String) {
    daemon_output_with(args, home, &[])
}

/// `outpost daemon ARGS --home HOME` with `env` (an empty value removes a variable).
fn daemon_output_with(args: &[&str], home: &Path, env: &[(&str, &str)]) -> (i32, String) {
    let mut command = Command::new(binary());
    command
        .arg("daemon")
        .args(args)
        .arg("--home")
        .arg(home)
        .env("OUTPOST_LOG", "warn")
        .env("OUTPOST_KEYRING", "off");
    for (k, v) in env {
        if v.is_empty() {
            command.env_remove(k);
        } else {
            command.env(k, v);
        }
    }
    let out = command.output().expect("outpost daemon runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every file of the home's config folder with its bytes.
fn config_files(home: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(home.join("config"))
        .expect("config")
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap_or_default())
        })
        .collect();
    files.sort();
    files
}

/// `key.enc` with one character of its ciphertext changed (still base64url).
fn tampered(sealed: &[u8]) -> Vec<u8> {
    let mut doc: serde_json::Value = serde_json::from_slice(sealed).expect("key.enc is JSON");
    let mut text: Vec<char> = doc["ciphertext"]
        .as_str()
        .expect("ciphertext")
        .chars()
        .collect();
    text[3] = if text[3] == 'A' { 'B' } else { 'A' };
    doc["ciphertext"] = text.into_iter().collect::<String>().into();
    serde_json::to_vec_pretty(&doc).expect("JSON")
}

/// The machine key at rest, refused from outside: a wrong or missing passphrase, a
/// ciphertext altered by one character under a passphrase or a file key, and a cut `key.enc`
/// each exit 78 with their code, and leave every file of the config folder as it was.
#[test]
fn a_wrong_passphrase_and_a_tampered_or_cut_key_are_refused_and_nothing_is_overwritten() {
    let dir = temp_dir("key-refusals");
    let server = Server::start(&dir.join("server"), 0);
    let sealed_home = dir.join("passphrase");
    let mut daemon = Daemon::start_with(
        &sealed_home,
        "sealed",
        Some(&server.join),
        "tokio",
        &[
            ("OUTPOST_KEYRING", "off"),
            ("OUTPOST_KEY_PASSPHRASE", "right one"),
        ],
    );
    online(&server, "sealed");
    daemon.kill();
    let file_home = dir.join("file");
    let mut daemon = Daemon::start(&file_home, "filed", Some(&server.join), "tokio");
    online(&server, "filed");
    daemon.kill();

    let refused = |home: &Path, passphrase: &str, code: &str, says: &str| {
        let before = config_files(home);
        let (status, err) =
            daemon_output_with(&[], home, &[("OUTPOST_KEY_PASSPHRASE", passphrase)]);
        assert_eq!(status, 78, "{err}");
        assert!(err.contains(&format!("[{code}]")), "{code}: {err}");
        assert!(err.contains(says), "{says}: {err}");
        assert!(err.contains("nothing was changed"), "{err}");
        assert_eq!(config_files(home), before, "nothing overwritten: {err}");
    };
    refused(
        &sealed_home,
        "wrong one",
        "wrong_passphrase",
        "does not open",
    );
    let (status, err) = daemon_output_with(&[], &sealed_home, &[("OUTPOST_KEY_PASSPHRASE", "")]);
    assert_eq!(status, 78, "{err}");
    assert!(err.contains("[passphrase_required]"), "{err}");
    let key = sealed_home.join("config/key.enc");
    let good = std::fs::read(&key).expect("key.enc");
    std::fs::write(&key, tampered(&good)).expect("tamper");
    refused(&sealed_home, "right one", "wrong_passphrase", "altered");

    let key = file_home.join("config/key.enc");
    let good = std::fs::read(&key).expect("key.enc");
    std::fs::write(&key, tampered(&good)).expect("tamper");
    refused(
        &file_home,
        "",
        "key_unreadable",
        "does not open with key.file",
    );
    std::fs::write(&key, &good[..good.len() / 2]).expect("cut");
    refused(&file_home, "", "key_unreadable", "not a sealed machine key");

    // Put back as they were, both start again.
    std::fs::write(&key, &good).expect("restore");
    let mut daemon = Daemon::start(&file_home, "filed", None, "tokio");
    online(&server, "filed");
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_setups_are_refused_with_a_code_and_exit_78() {
    let dir = temp_dir("refusals");
    let home = dir.join("home");
    let (code, err) = daemon_output(&["--join", "outpost-join-v1.bm90IGpzb24"], &home);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not a join string"), "{err}");

    let (code, err) = daemon_output(&[], &home);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("[not_joined]"), "{err}");

    // A join whose server is plain http to a host that is not loopback.
    use base64::Engine as _;
    let json = r#"{"url":"http://10.20.30.40:8440","root":{"id":"root-x","publicKey":"0vfEcpLkOVZAMq1Ci0RfP2ThzJ80NyeIuy4gdUyYIRo"},"token":"opt_x"}"#;
    let join = format!(
        "outpost-join-v1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    );
    let (code, err) = daemon_output(&["--join", &join], &home);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("plain http"), "{err}");

    // A machine key others can read is never used.
    let server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    online(&server, "box");
    let (code, err) = daemon_output(&[], &home);
    assert_eq!(code, 78, "a second daemon on one home: {err}");
    assert!(err.contains("[home_locked]"), "{err}");
    daemon.kill();
    let key = home.join("config/key.file");
    assert_eq!(
        std::fs::metadata(&key).expect("key").permissions().mode() & 0o777,
        0o600
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (code, err) = daemon_output(&[], &home);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("[key_exposed]"), "{err}");

    // A first join to a server that is not there fails at once...
    let mut server = server;
    let join = server.join.clone();
    server.kill();
    let (code, err) = daemon_output(&["--join", &join], &dir.join("other-home"));
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("[server_keys_unavailable]"), "{err}");
    // ...while a joined machine waits for its server to come back, until it is stopped.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut waiting = Daemon::start(&home, "box", None, "tokio");
    wait_for("the daemon to say it waits for the server", || {
        let log = waiting.log_text();
        (log.contains("server_unreachable") && log.contains("trying again")).then_some(())
    });
    let signal = Command::new("kill")
        .args(["-TERM", &waiting.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(signal.success());
    assert_eq!(waiting.wait_exit(), 130, "{}", waiting.log_text());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn execute_prints_the_output_and_where_it_ran_and_exits_with_the_run_s_code() {
    let dir = temp_dir("execute");
    let server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start(&dir.join("home"), "build-box", Some(&server.join), "tokio");
    online(&server, "build-box");
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("cap");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: seven\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), "echo out\necho err >&2\nexit 7\n").expect("script");
    let run = |json: bool| {
        let mut command = Command::new(binary());
        command
            .arg("execute")
            .arg(&cap)
            .args(["--context", "build-box", "--server", &server.url])
            .env("OUTPOST_TOKEN", &server.admin);
        if json {
            command.arg("--json");
        }
        command.output().expect("outpost execute runs")
    };
    let out = run(false);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("err\n"), "{err}");
    assert!(err.contains("Ran on build-box (your machine)."), "{err}");
    let out = run(true);
    assert_eq!(out.status.code(), Some(7));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for field in [
        "status",
        "exitCode",
        "signal",
        "stdout",
        "stderr",
        "truncated",
        "ranOn",
        "ranOnText",
        "timing",
    ] {
        assert!(value.get(field).is_some(), "{field} in {value}");
    }
    for field in ["kind", "id", "name", "yours", "attempts", "fellBackToCloud"] {
        assert!(
            value["ranOn"].get(field).is_some(),
            "ranOn.{field} in {value}"
        );
    }
    for field in [
        "queueMs",
        "setupMs",
        "executeMs",
        "daemonMs",
        "serverMs",
        "transitMs",
    ] {
        assert!(value["timing"][field].is_u64(), "timing.{field} in {value}");
    }
    assert_eq!(value["status"], "exited");
    assert_eq!(value["exitCode"], 7);
    // `-- ARGS` come after the manifest's own args.
    let echo = dir.join("echo");
    std::fs::create_dir_all(&echo).expect("echo");
    std::fs::write(
        echo.join("manifest.yaml"),
        "name: echo\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nargs: [first]\n",
    )
    .expect("manifest");
    std::fs::write(echo.join("run.sh"), "echo \"$@\"\n").expect("script");
    let out = Command::new(binary())
        .arg("execute")
        .arg(&echo)
        .args([
            "--context",
            "build-box",
            "--server",
            &server.url,
            "--",
            "second",
            "third arg",
        ])
        .env("OUTPOST_TOKEN", &server.admin)
        .output()
        .expect("outpost execute runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "first second third arg\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the daemon's slot to free", || {
        let (_, c) = server.api("GET", "/v1/execution-contexts/build-box", None);
        (c["slotsUsed"] == 0).then_some(())
    });
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_capability_over_512_kib_travels_as_a_bundle_by_digest() {
    let dir = temp_dir("bundle");
    let server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start(
        &dir.join("home"),
        "build-box",
        Some(&server.join),
        "blocking",
    );
    online(&server, "build-box");
    let cap = dir.join("big");
    std::fs::create_dir_all(&cap).expect("cap");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: big\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), "wc -c < data.bin\n").expect("script");
    std::fs::write(cap.join("data.bin"), vec![b'x'; 700 * 1024]).expect("data");
    let out = Command::new(binary())
        .arg("execute")
        .arg(&cap)
        .args(["--context", "build-box", "--server", &server.url, "--json"])
        .env("OUTPOST_TOKEN", &server.admin)
        .output()
        .expect("outpost execute runs");
    let value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(value["status"], "exited", "{value}");
    assert_eq!(
        value["stdout"].as_str().map(str::trim),
        Some("716800"),
        "{value}"
    );

    // Refusals, each with its code and nothing stored.
    let digest = "0".repeat(64);
    let put = |path: &str, body: &[u8]| {
        let answer = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent()
            .put(&format!("{}{path}", server.url))
            .header("authorization", &format!("Bearer {}", server.admin))
            .send(body)
            .expect("answer");
        let status = answer.status().as_u16();
        let body: serde_json::Value =
            serde_json::from_str(&answer.into_body().read_to_string().unwrap_or_default())
                .unwrap_or_default();
        (
            status,
            body["error"]["code"].as_str().unwrap_or("").to_owned(),
        )
    };
    assert_eq!(
        put(&format!("/v1/bundles/{digest}"), b"{}"),
        (400, "digest_mismatch".into())
    );
    assert_eq!(
        put("/v1/bundles/NOT-HEX", b"{}"),
        (400, "invalid_digest".into())
    );
    let bytes = b"not a bundle";
    use sha2::Digest as _;
    let sha = hex::encode(sha2::Sha256::digest(bytes));
    assert_eq!(
        put(&format!("/v1/bundles/{sha}"), bytes),
        (400, "invalid_bundle".into())
    );
    let (status, body) = server.api(
        "POST",
        "/v1/executions",
        Some(serde_json::json!({"capability": {"kind": "digest", "sha256": sha, "size": 12}, "context": "build-box"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("bundle_unknown")),
        "{body}"
    );
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_json_daemon_server_and_root_and_a_queued_execute_work_as_named() {
    use std::io::BufRead as _;
    let dir = temp_dir("explicit");
    // `outpost serve --json` prints one JSON line: url, join, rootKey, stateDir, database.
    let mut serve = Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(dir.join("server"))
        .args(["--cloud", "wasm", "--json"])
        .env("OUTPOST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("outpost serve starts");
    let mut line = String::new();
    std::io::BufReader::new(serve.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a line");
    let started: serde_json::Value = serde_json::from_str(&line).expect("one JSON line");
    let url = started["url"].as_str().expect("url").to_owned();
    let root = started["rootKey"].as_str().expect("rootKey").to_owned();
    let join = outpost_core::join::Join::parse(started["join"].as_str().expect("join"))
        .expect("the join parses");
    assert_eq!(join.url, url);
    assert_eq!(
        started["stateDir"].as_str().map(std::path::PathBuf::from),
        Some(dir.join("server"))
    );
    assert_eq!(
        started["database"].as_str().map(std::path::PathBuf::from),
        Some(dir.join("server/outpost.db")),
        "the records' place: the SQLite file when --database is absent"
    );
    let admin = std::fs::read_to_string(dir.join("server/admin.token"))
        .expect("admin.token")
        .trim()
        .to_owned();
    let api = |method: &str, path: &str| common::api(&url, &admin, method, path, None);

    // `outpost daemon --server URL --root KEY` with the token in OUTPOST_TOKEN, no join.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let start = |extra: &[&str], token: Option<&str>| {
        let log = home.join(format!("daemon-{}.log", extra.len()));
        let mut command = Command::new(binary());
        command
            .args(["daemon", "--name", "box", "--home"])
            .arg(&home)
            .args(extra)
            .env("OUTPOST_LOG", "info")
            .stderr(std::fs::File::create(&log).expect("log"));
        if let Some(token) = token {
            command.env("OUTPOST_TOKEN", token);
        }
        Daemon {
            child: command.spawn().expect("outpost daemon starts"),
            home: home.clone(),
            log,
        }
    };
    let online = |want: bool| {
        wait_for("the context's online state", || {
            let (_, c) = api("GET", "/v1/execution-contexts/box");
            (c["online"] == want).then_some(())
        })
    };
    let mut daemon = start(&["--server", &url, "--root", &root], Some(&join.token));
    online(true);
    daemon.kill();
    online(false);

    // `outpost execute --when-offline queue --queue-minutes N` waits for the machine.
    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("cap");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: later\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), "echo later\n").expect("script");
    let execute = Command::new(binary())
        .arg("execute")
        .arg(&cap)
        .args([
            "--context",
            "box",
            "--when-offline",
            "queue",
            "--queue-minutes",
            "5",
            "--server",
            &url,
        ])
        .env("OUTPOST_TOKEN", &admin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("outpost execute runs");
    wait_for("the execution to wait in the queue", || {
        let (_, runs) = api("GET", "/v1/runs?context=box");
        (runs["runs"][0]["status"] == "pending").then_some(())
    });
    // The daemon comes back with what it saved (no flags): the queued run goes there.
    let mut daemon = start(&[], None);
    let out = common::finish(execute, "outpost execute");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "later\n");
    daemon.kill();
    let _ = serve.kill();
    let _ = serve.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
