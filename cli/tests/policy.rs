//! The machine owner's local policy across the wire: `outpost context policy` edits it on the
//! machine, the server's grant is intersected with it (the narrower mode wins), and a running
//! daemon applies an edit to its next run. Real server, real daemon, real Landlock runs.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Daemon, Server, binary, temp_dir, wait_for};
use serde_json::{Value, json};

/// `outpost context policy ARGS --home HOME --json`: exit code, stdout JSON, stderr.
fn policy(home: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(binary())
        .args(["context", "policy"])
        .args(args)
        .arg("--home")
        .arg(home)
        .arg("--json")
        .output()
        .expect("outpost context policy runs");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A confined shell capability running `script`.
fn confined(script: &str) -> Value {
    use base64::Engine as _;
    json!({
        "kind": "inline",
        "manifest": "name: folders\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\n",
        "files": [{"path": "run.sh", "contentB64": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(script)}],
    })
}

/// An execution that requires host folders: its status and the whole answer.
fn requiring_fs(server: &Server) -> (String, Value) {
    let (_, e) = server.api(
        "POST",
        "/v1/executions",
        Some(json!({"capability": confined("true\n"), "context": "box", "requires": ["fs"], "wait": true, "waitSecs": 60})),
    );
    (e["status"].as_str().unwrap_or("?").to_owned(), e)
}

fn run(server: &Server, script: &str) -> Value {
    let (status, e) = server.api(
        "POST",
        "/v1/executions",
        Some(
            json!({"capability": confined(script), "context": "box", "wait": true, "waitSecs": 60}),
        ),
    );
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["status"], "exited", "{e}");
    e
}

#[test]
fn the_grant_meets_the_local_policy_and_an_edit_applies_to_the_next_run() {
    let dir = temp_dir("policy");
    let home = dir.join("home");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::write(data.join("note.txt"), "hello\n").expect("note");
    let data = data.canonicalize().expect("realpath");
    let data_text = data.display().to_string();

    // Refusals leave the policy as it was.
    let (code, _, err) = policy(&home, &["allow", "/nonexistent/folder"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("allow a folder that exists"), "{err}");
    std::fs::create_dir_all(home.join("config")).expect("config");
    let (code, _, err) = policy(
        &home,
        &["allow", &home.join("config").display().to_string()],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("[folder_denied]"), "{err}");
    let (code, shown, err) = policy(&home, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(shown["folders"], json!([]), "absent means none");

    let (code, shown, err) = policy(&home, &["allow", &data_text, "--mode", "ro"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(shown["folders"], json!([{"path": data_text, "mode": "ro"}]));

    let server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    let context = server.wait_context("box", "box online", |c| c["online"] == true);
    // The server grants the folder read-write; the owner allows read-only: ro wins.
    let mut grant = context["grant"].clone();
    grant["fs"] = json!([{"path": data_text, "mode": "rw"}]);
    let (status, answer) = server.api(
        "PATCH",
        "/v1/execution-contexts/box/grant",
        Some(grant.clone()),
    );
    assert_eq!(status, 200, "{answer}");

    let script = format!(
        "cat {data}/note.txt\nif echo x > {data}/written.txt 2>/dev/null; then echo wrote; else echo refused; fi\n",
        data = data_text
    );
    // While the policy mounts a granted folder the machine says `fs`: such runs route here.
    wait_for("fs announced", || {
        (requiring_fs(&server).0 == "exited").then_some(())
    });
    // The context says what a run there sees: the folder, read-only.
    server.wait_context("box", "the folder a run sees, read-only", |c| {
        c["sandbox"]["mounts"] == json!([{"path": data_text, "mode": "ro"}])
    });
    let e = run(&server, &script);
    assert_eq!(e["stdout"], "hello\nrefused\n", "{e}");
    assert!(!data.join("written.txt").exists());

    // The owner widens the policy while the daemon runs: the next run may write.
    let (code, _, err) = policy(&home, &["allow", &data_text, "--mode", "rw"]);
    assert_eq!(code, 0, "{err}");
    server.wait_context("box", "the folder a run sees, read-write", |c| {
        c["sandbox"]["mounts"] == json!([{"path": data_text, "mode": "rw"}])
    });
    let e = run(&server, &script);
    assert_eq!(e["stdout"], "hello\nwrote\n", "{e}");
    assert!(data.join("written.txt").exists());

    // The owner removes the folder: the next run sees nothing of it.
    let (code, shown, err) = policy(&home, &["remove", &data_text]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(shown["folders"], json!([]));
    let e = run(
        &server,
        &format!("if cat {data_text}/note.txt 2>/dev/null; then echo read; else echo unseen; fi\n"),
    );
    assert_eq!(e["stdout"], "unseen\n", "{e}");
    server.wait_context("box", "no folder a run sees", |c| {
        c["sandbox"]["mounts"] == json!([])
    });
    // ...and it stops saying `fs`.
    let (status, e) = wait_for("fs withdrawn", || {
        let (status, e) = requiring_fs(&server);
        (status != "exited").then_some((status, e))
    });
    assert_eq!(status, "failed", "{e}");
    assert_eq!(e["error"]["code"], "no_local_fs", "{e}");
    let (code, _, err) = policy(&home, &["remove", &data_text]);
    assert_ne!(code, 0, "removing twice: {err}");
    assert!(err.contains("[folder_not_allowed]"), "{err}");

    daemon.kill();
    let log = daemon.log_text();
    assert!(log.contains("the local policy changed"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn audit_lists_what_the_server_did_as_a_table_and_as_json() {
    let dir = temp_dir("audit");
    let home = dir.join("home");
    let server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    let (status, _) = server.api("POST", "/v1/execution-contexts/box/revoke", Some(json!({})));
    assert_eq!(status, 200);
    daemon.wait_exit();
    let audit = |json: bool| {
        let mut command = Command::new(binary());
        command
            .args(["audit", "--server", &server.url])
            .env("OUTPOST_TOKEN", &server.admin);
        if json {
            command.arg("--json");
        }
        let out = command.output().expect("outpost audit runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let events: Value = serde_json::from_str(&audit(true)).expect("JSON");
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.iter().any(|k| k.contains("revoke")), "{kinds:?}");
    assert!(kinds.iter().any(|k| k.contains("regist")), "{kinds:?}");
    let table = audit(false);
    assert!(table.starts_with("AT"), "{table}");
    assert!(table.contains("revoke"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn host_commands_are_turned_on_only_from_the_machine_and_off_from_either_side() {
    let dir = temp_dir("commands");
    let home = dir.join("home");
    let mut server = Server::start(&dir.join("server"), 0);
    let mut daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    let context = server.wait_context("box", "box online", |c| c["online"] == true);
    let commands = |state: &str| {
        let out = Command::new(binary())
            .args(["context", "commands", state, "--home"])
            .arg(&home)
            .arg("--json")
            .env("OUTPOST_KEYRING", "off")
            .output()
            .expect("outpost context commands runs");
        (
            out.status.code().unwrap_or(-1),
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let patch = |server: &Server, enabled: bool| {
        let mut grant = context["grant"].clone();
        grant["commands"] = json!({ "enabled": enabled });
        server.api("PATCH", "/v1/execution-contexts/box/grant", Some(grant))
    };
    let enabled = |server: &Server| {
        let (_, c) = server.api("GET", "/v1/execution-contexts/box", None);
        c["grant"]["commands"]["enabled"].clone()
    };

    // A user cannot turn them on from the server side.
    let (status, e) = patch(&server, true);
    assert_eq!(status, 403, "{e}");
    assert_eq!(e["error"]["code"], "commands_opt_in_local");
    assert_eq!(enabled(&server), false);

    // The owner, on the machine, can.
    let (code, out, err) = commands("on");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["server"], true, "{out}");
    assert_eq!(enabled(&server), true);
    let policy: Value =
        serde_json::from_slice(&std::fs::read(home.join("config/policy.json")).expect("policy"))
            .expect("JSON");
    assert_eq!(policy["commandsEnabled"], true);
    let (_, audit) = server.api("GET", "/v1/audit", None);
    assert!(audit.to_string().contains("commands_enabled"), "{audit}");

    // Either side turns them off; the server side cannot turn them back on.
    let (status, e) = patch(&server, false);
    assert_eq!(status, 200, "{e}");
    assert_eq!(enabled(&server), false);
    assert_eq!(patch(&server, true).0, 403);
    let (code, _, err) = commands("off");
    assert_eq!(code, 0, "{err}");

    // A server that cannot be reached: the local switch still moves, and the exit says so.
    daemon.kill();
    server.kill();
    let (code, _, err) = commands("on");
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("the server was not told"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The credential denylist inside a mounted folder, symlinks included: the owner's `~/.ssh`
/// (the daemon's `HOME`) reached through a symlink in a folder the grant and the policy both
/// mount is refused to a wasm volume (`path_refused`, naming the denylist) and unreadable to a
/// confined shell run, which still reads the folder itself.
#[test]
fn a_symlink_inside_a_mounted_folder_does_not_reach_the_credential_denylist() {
    use base64::Engine as _;
    let dir = temp_dir("denylist");
    let (home, user, data) = (dir.join("home"), dir.join("user"), dir.join("data"));
    std::fs::create_dir_all(user.join(".ssh")).expect(".ssh");
    std::fs::write(user.join(".ssh/id_ed25519"), "PRIVATE KEY\n").expect("key");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::write(data.join("note.txt"), "hello\n").expect("note");
    std::os::unix::fs::symlink(user.join(".ssh"), data.join("keys")).expect("symlink");
    let data = data.canonicalize().expect("realpath");
    let data_text = data.display().to_string();
    let (code, _, err) = policy(&home, &["allow", &data_text, "--mode", "ro"]);
    assert_eq!(code, 0, "{err}");

    let server = Server::start(&dir.join("server"), 0);
    let user_text = user.display().to_string();
    let mut daemon = Daemon::start_with(
        &home,
        "box",
        Some(&server.join),
        "tokio",
        &[("OUTPOST_KEYRING", "off"), ("HOME", &user_text)],
    );
    let context = server.wait_context("box", "box online", |c| c["online"] == true);
    let mut grant = context["grant"].clone();
    grant["fs"] = json!([{"path": data_text, "mode": "ro"}]);
    let (status, answer) = server.api("PATCH", "/v1/execution-contexts/box/grant", Some(grant));
    assert_eq!(status, 200, "{answer}");
    wait_for("fs announced", || {
        (requiring_fs(&server).0 == "exited").then_some(())
    });

    let encode = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    let wasm = json!({
        "kind": "inline",
        "manifest": format!("name: keys\nenvironment: wasm\nlifecycle: oneshot\nentry: main.wat\nvolumes:\n  - {{host: {data_text}/keys, guest: /keys, mode: ro}}\n"),
        "files": [{"path": "main.wat", "contentB64": encode("(module (memory (export \"memory\") 1) (func (export \"_start\")))\n")}],
    });
    let (_, e) = server.api(
        "POST",
        "/v1/executions",
        Some(json!({"capability": wasm, "context": "box", "wait": true, "waitSecs": 60})),
    );
    assert_eq!(e["status"], "failed", "{e}");
    assert_eq!(e["error"]["code"], "path_refused", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("credential denylist"),
        "{e}"
    );

    let e = run(
        &server,
        &format!(
            "cat {data_text}/note.txt\nif cat {data_text}/keys/id_ed25519 2>/dev/null; then echo read; else echo refused; fi\n"
        ),
    );
    assert_eq!(e["stdout"], "hello\nrefused\n", "{e}");
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}
