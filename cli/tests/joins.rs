//! Join tokens are credentials: an admin makes one bounded in uses, time and names, the
//! registration route holds a machine to those bounds with a code that says which one it
//! passed, a revoked or expired one registers nothing, and every registration records the
//! token it used.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{Server, temp_dir};

/// `outpost join ARGS --json` as the local admin; the answer.
fn join_json(server: &Server, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["join"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = common::outpost_as(server, &server.admin, &all);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A daemon named `name` joining with `join` (from a file) until it registers or fails;
/// how it ended and what it said when it failed.
fn register(dir: &Path, name: &str, join: &str) -> Result<common::Daemon, String> {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).expect("home");
    let file = dir.join(format!("{name}.join"));
    std::fs::write(&file, join).expect("join file");
    common::let_operator_opt_out(&home);
    let mut child = Command::new(common::binary())
        .args(["daemon", "--name", name, "--home"])
        .arg(&home)
        .arg("--join-file")
        .arg(&file)
        .env("OUTPOST_KEYRING", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the daemon starts");
    // Registered: the daemon saved its server file. Refused: it exited.
    let server_file = home.join("config/server.json");
    let ended = common::wait_for("the daemon to register or fail", || {
        if server_file.exists() {
            return Some(None);
        }
        child.try_wait().ok().flatten().map(Some)
    });
    match ended {
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Ok(common::Daemon::start(&home, name, None, "tokio"))
        }
        Some(status) => {
            let mut said = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut err, &mut said);
            }
            assert!(!status.success(), "it failed: {said}");
            Err(said)
        }
    }
}

#[test]
fn join_tokens_are_bounded_revocable_and_recorded() {
    let dir = temp_dir("joins");
    let server = Server::start(&dir.join("server"), 0);
    let listed = join_json(&server, &["list"]);
    assert_eq!(listed["joinTokens"][0]["id"], "jt_first", "{listed}");
    assert!(
        listed["joinTokens"][0].get("join").is_none(),
        "no secret in a list"
    );

    // One use, names starting with `ci-`.
    let once = join_json(&server, &["create", "--uses", "1", "--name-prefix", "ci-"]);
    let join = once["join"].as_str().expect("a join string").to_owned();
    let id = once["id"].as_str().expect("an id").to_owned();
    assert!(id.starts_with("jt_"), "{once}");
    let refused = register(&dir, "laptop", &join).err().expect("refused");
    assert!(refused.contains("join_name_refused"), "{refused}");
    let mut first = register(&dir, "ci-a", &join).expect("the first machine registers");
    let refused = register(&dir, "ci-b", &join).err().expect("refused");
    assert!(refused.contains("join_token_used_up"), "{refused}");
    let listed = join_json(&server, &["list"]);
    let token = listed["joinTokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .find(|t| t["id"] == id.as_str())
        .expect("listed")
        .clone();
    assert_eq!(
        (token["used"].clone(), token["usesLeft"].clone()),
        (1.into(), 0.into())
    );

    // Revoked: nothing registers with it; an expired one neither.
    let open = join_json(&server, &["create"]);
    let revoked = join_json(&server, &["revoke", open["id"].as_str().expect("id")]);
    assert_eq!(revoked["revoked"], true);
    let refused = register(&dir, "after-revoke", open["join"].as_str().expect("join"))
        .err()
        .expect("refused");
    assert!(refused.contains("token_invalid"), "{refused}");
    let brief = join_json(&server, &["create", "--ttl", "1s"]);
    // The token's second passes: time itself is what is tested here.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let refused = register(&dir, "too-late", brief["join"].as_str().expect("join"))
        .err()
        .expect("refused");
    assert!(refused.contains("token_expired"), "{refused}");

    // The registration records its token.
    let audit = common::outpost_as(&server, &server.admin, &["audit", "--json"]);
    let text = String::from_utf8_lossy(&audit.stdout);
    assert!(text.contains(&format!("ci-a (join token {id})")), "{text}");
    first.kill();
    let _ = std::fs::remove_dir_all(&dir);
}
