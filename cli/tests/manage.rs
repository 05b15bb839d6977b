//! The management commands against a real server: `context list|show|revoke|delete`,
//! `chain set|show`, `runs list`, `user add`, each with `--json`; errors exit non-zero with a
//! message that names the cause.

mod common;

use std::process::{Command, Output};

use common::{Daemon, Server, temp_dir};
use serde_json::Value;

fn outpost(server: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(common::binary())
        .args(args)
        .args(["--server", &server.url])
        .env("OUTPOST_TOKEN", token)
        .output()
        .expect("outpost runs")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn contexts_chains_runs_and_users_are_managed_from_the_command_line() {
    let dir = temp_dir("manage");
    let server = Server::start(&dir.join("server"), 0);
    let admin = server.admin.clone();
    let mut daemon = Daemon::start(&dir.join("home"), "build-box", Some(&server.join), "tokio");
    server.wait_context("build-box", "online", |c| c["online"] == true);

    let list = json(&outpost(&server, &admin, &["context", "list", "--json"]));
    let contexts = list["contexts"].as_array().expect("contexts");
    assert_eq!(contexts.len(), 1, "{list}");
    assert_eq!(contexts[0]["name"], "build-box");
    let shown = json(&outpost(
        &server,
        &admin,
        &["context", "show", "build-box", "--json"],
    ));
    assert_eq!(shown["online"], true, "{shown}");
    let text = outpost(&server, &admin, &["context", "list"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("build-box"));

    let chain = json(&outpost(
        &server,
        &admin,
        &["chain", "set", "build-box,cloud", "--json"],
    ));
    let id = shown["id"].as_str().expect("an id");
    assert_eq!(chain["chain"], serde_json::json!([id, "cloud"]), "{chain}");
    assert_eq!(
        chain["entries"],
        serde_json::json!([{"id": id, "name": "build-box"}, {"id": "cloud", "name": "cloud"}]),
        "{chain}"
    );
    let chain = json(&outpost(&server, &admin, &["chain", "show", "--json"]));
    assert_eq!(chain["chain"][1], "cloud", "{chain}");
    assert_eq!(chain["entries"][0]["name"], "build-box", "{chain}");
    // A person reads the names they typed, not the ids.
    for args in [&["chain", "set", "build-box,cloud"][..], &["chain", "show"]] {
        let out = outpost(&server, &admin, args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.trim(), "chain: build-box → cloud", "{args:?}");
    }
    let bad = outpost(&server, &admin, &["chain", "set", "cloud,build-box"]);
    assert!(!bad.status.success(), "cloud must come last");

    let cap = dir.join("cap");
    std::fs::create_dir_all(&cap).expect("cap");
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: hi\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .expect("manifest");
    std::fs::write(cap.join("run.sh"), "echo hi\n").expect("script");
    let ran = outpost(
        &server,
        &admin,
        &[
            "execute",
            cap.to_str().expect("utf-8"),
            "--context",
            "build-box",
        ],
    );
    assert!(ran.status.success());
    let runs = json(&outpost(
        &server,
        &admin,
        &["runs", "list", "--context", "build-box", "--json"],
    ));
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");

    let user = json(&outpost(&server, &admin, &["user", "add", "ana", "--json"]));
    let token = user["token"].as_str().expect("a token").to_owned();
    // Ana sees none of the admin's machines.
    let hers = json(&outpost(&server, &token, &["context", "list", "--json"]));
    assert_eq!(hers["contexts"].as_array().map(Vec::len), Some(0), "{hers}");
    let denied = outpost(&server, "opt_wrong", &["context", "list"]);
    assert!(!denied.status.success());
    assert!(!String::from_utf8_lossy(&denied.stderr).is_empty());

    let revoked = json(&outpost(
        &server,
        &admin,
        &["context", "revoke", "build-box", "--json"],
    ));
    assert_eq!(revoked["revoked"], true, "{revoked}");
    assert_eq!(daemon.wait_exit(), 0);
    let deleted = json(&outpost(
        &server,
        &admin,
        &["context", "delete", "build-box", "--json"],
    ));
    assert_eq!(deleted["deleted"], "build-box");
    let runs = json(&outpost(&server, &admin, &["runs", "list", "--json"]));
    let run = &runs["runs"][0];
    assert_eq!(
        run["ranOn"]["name"], "build-box",
        "the record keeps the name: {runs}"
    );
    let gone = outpost(&server, &admin, &["context", "show", "build-box"]);
    assert!(!gone.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--rate-per-address` sets the connect and machine-request limit: at 1 a second (a burst
/// of 3), the fourth unsigned connect-ticket request in a row is 429 `rate_limited`; at the
/// default the same burst passes. A rate that is not a positive number, for either flag, is
/// refused at start.
#[test]
fn serve_takes_its_rate_limits_from_flags() {
    let dir = temp_dir("rates");
    let refused = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(dir.join("never"))
        .args(["--rate-per-address", "0"])
        .output()
        .expect("outpost runs");
    assert_eq!(refused.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("requests per second"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!dir.join("never").exists(), "nothing was made");
    let refused = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(dir.join("never"))
        .arg("--rate-per-context=-1")
        .output()
        .expect("outpost runs");
    assert_eq!(refused.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--rate-per-context"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!dir.join("never").exists(), "nothing was made");

    let statuses = |server: &Server| -> Vec<u16> {
        (0..4)
            .map(|_| {
                server
                    .api("POST", "/v1/execution-contexts/connect-ticket", None)
                    .0
            })
            .collect()
    };
    let slow = Server::start_with(
        &dir.join("slow"),
        0,
        &["--rate-per-address".as_ref(), "1".as_ref()],
    );
    assert_eq!(statuses(&slow), [401, 401, 401, 429]);
    drop(slow);
    let default = Server::start(&dir.join("default"), 0);
    assert_eq!(statuses(&default), [401, 401, 401, 401]);
    drop(default);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_grant_is_changed_from_the_command_line_keeping_what_is_not_named() {
    let dir = temp_dir("grant");
    let server = Server::start(&dir.join("server"), 0);
    let admin = server.admin.clone();
    let _daemon = Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "online", |c| c["online"] == true);
    let before = json(&outpost(
        &server,
        &admin,
        &["context", "show", "box", "--json"],
    ));
    let version = before["grantVersion"].as_u64().expect("a version");
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let folder = format!("{}:ro", shared.display());
    let changed = json(&outpost(
        &server,
        &admin,
        &[
            "context",
            "grant",
            "box",
            "--fs",
            &folder,
            "--egress",
            "api.example.com:443,*.crates.io",
            "--max-concurrent",
            "1",
            "--json",
        ],
    ));
    assert_eq!(
        changed["grantVersion"].as_u64(),
        Some(version + 1),
        "{changed}"
    );
    let grant = &changed["grant"];
    assert_eq!(
        grant["fs"][0]["path"],
        shared.display().to_string(),
        "{grant}"
    );
    assert_eq!(grant["fs"][0]["mode"], "ro");
    assert_eq!(grant["egress"]["mode"], "allowlist");
    assert_eq!(
        grant["egress"]["hosts"],
        serde_json::json!(["api.example.com:443", "*.crates.io"])
    );
    assert_eq!(grant["limits"]["maxConcurrent"], 1);
    // What is not named stays; the text form says what the grant now allows.
    let text = outpost(
        &server,
        &admin,
        &["context", "grant", "box", "--egress", "none"],
    );
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    let said = String::from_utf8_lossy(&text.stdout);
    assert!(
        said.contains(&format!("folders {} (ro)", shared.display()))
            && said.contains("network none")
            && said.contains("at most 1 runs"),
        "{said}"
    );
    let cleared = json(&outpost(
        &server,
        &admin,
        &["context", "grant", "box", "--no-fs", "--json"],
    ));
    assert_eq!(cleared["grant"]["fs"], serde_json::json!([]), "{cleared}");
    // Mistakes are refused before anything is sent, with what to do.
    for bad in [
        &["context", "grant", "box", "--fs", "/data"][..],
        &["context", "grant", "box", "--commands", "on"][..],
        &["context", "grant", "box", "--fs", "/a:ro", "--no-fs"][..],
    ] {
        let out = outpost(&server, &admin, bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let after = json(&outpost(
        &server,
        &admin,
        &["context", "show", "box", "--json"],
    ));
    assert_eq!(after["grantVersion"].as_u64(), Some(version + 3));
}
