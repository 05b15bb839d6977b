//! Signed self-update with real processes: `outpost serve --publish-daemon BINARY` signs a
//! release with the server's root key; a daemon downloads, verifies, stages and proves it,
//! drains, and hands over by exec — with no run lost or run twice. A release signed by
//! another server's root, a binary whose digest differs and a cut binary are each refused,
//! and nothing changes. A hand-over waits for a background host command that ends in time;
//! runs and host commands that outlast its limit are stopped, reported once, and the update
//! takes over. Updates switched off (policy or variable) stage nothing.
//!
//! The "new version" is this build started through a two-line script that sets
//! `OUTPOST_TEST_VERSION=0.2.0`, which a debug build reads as its version; a debug build
//! also takes the hand-over's 24 h limit from `OUTPOST_TEST_HAND_OVER_MS`.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use common::{
    Daemon, Server, binary, commands_switch, job_pids, lines, outbox, process_gone,
    shell_capability, temp_dir, wait_for, wait_for_explained,
};
use serde_json::{Value, json};

const NEW: &str = "0.2.0";

/// A script that runs this build as version [`NEW`].
fn new_version(dir: &Path) -> PathBuf {
    let path = dir.join("outpost-new");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nOUTPOST_TEST_VERSION={NEW} exec {} \"$@\"\n",
            binary().display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn publishing(state: &Path, release: &Path) -> Server {
    Server::start_with(
        state,
        0,
        &[OsStr::new("--publish-daemon"), release.as_os_str()],
    )
}

/// The version a live process runs as (its environment says when it is the update).
fn runs_as_new(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| {
            env.split(|b| *b == 0)
                .any(|kv| kv == format!("OUTPOST_TEST_VERSION={NEW}").as_bytes())
        })
        .unwrap_or(false)
}

fn update_state(home: &Path) -> Value {
    std::fs::read(home.join("state/update-state.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

#[test]
fn a_signed_update_is_staged_proven_and_handed_over_with_no_run_lost_or_repeated() {
    let dir = temp_dir("update");
    let release = new_version(&dir);
    let server = publishing(&dir.join("server"), &release);
    let home = dir.join("home");
    let log = dir.join("runs.log");

    // Register with updates off, then queue work while the machine is away.
    let mut first = Daemon::start_with(
        &home,
        "box",
        Some(&server.join),
        "tokio",
        &[
            ("OUTPOST_KEYRING", "off"),
            ("OUTPOST_DAEMON_AUTO_UPDATE", "0"),
        ],
    );
    server.wait_context("box", "box online", |c| c["online"] == true);
    first.kill();
    server.wait_context("box", "box offline", |c| c["online"] == false);
    // As many as it has slots; the first two hold until the update is staged, so the
    // hand-over must wait for their results.
    let go = dir.join("go");
    let script = |n: usize| {
        format!(
            "echo start {n} >> {log}\nwhile [ ! -e {go} ]; do sleep 0.05; done\necho {n}\n",
            log = log.display(),
            go = go.display()
        )
    };
    let mut ids: Vec<String> = (0..2)
        .map(|n| {
            let script = script(n);
            let (status, e) = server.api(
                "POST",
                "/v1/executions",
                Some(json!({"capability": shell_capability(&format!("u{n}"), &script), "context": "box", "whenOffline": "queue"})),
            );
            assert!(status == 201 || status == 202, "{status} {e}");
            e["executionId"].as_str().expect("id").to_owned()
        })
        .collect();

    // Now with updates on: it takes runs, finds the release, drains and hands over.
    let daemon = Daemon::start(&home, "box", None, "tokio");
    let pid = daemon.child.id();
    wait_for("the update staged while two runs are held", || {
        let text = daemon.log_text();
        (text.contains("handing over to the update once")
            && text.matches("run started").count() == 2)
            .then_some(())
    });
    assert!(!runs_as_new(pid), "no hand-over while runs are in flight");
    std::fs::write(&go, b"").expect("go");
    wait_for("the daemon to run as the update", || {
        runs_as_new(pid).then_some(())
    });
    // The update takes the next runs.
    server.wait_context("box", "box online again", |c| c["online"] == true);
    for n in 2..6 {
        let id = server.submit(&shell_capability(&format!("u{n}"), &script(n)), "box");
        server.wait_status(&id, "exited");
        ids.push(id);
    }
    for id in &ids {
        let e = wait_for("the execution to end", || {
            let (_, e) = server.api("GET", &format!("/v1/executions/{id}?waitSecs=10"), None);
            (e["status"] != "pending" && e["status"] != "running").then_some(e)
        });
        assert_eq!(e["status"], "exited", "{e}");
    }
    let mut starts: BTreeMap<String, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).expect("log").lines() {
        *starts.entry(line.to_owned()).or_default() += 1;
    }
    assert_eq!(starts.len(), 6, "every run started: {starts:?}");
    assert!(starts.values().all(|n| *n == 1), "none twice: {starts:?}");
    let text = daemon.log_text();
    assert!(
        text.contains("the update is verified, staged and proven to start"),
        "{text}"
    );
    assert!(text.contains("handing over to the update"), "{text}");
    let state = update_state(&home);
    assert_eq!(state["current"]["version"], NEW, "{state}");
    assert_eq!(state["current"]["onTrial"], true, "{state}");
    let staged = home.join(format!("state/updates/outpost-{NEW}"));
    assert_eq!(
        std::fs::read(&staged).expect("staged"),
        std::fs::read(&release).expect("release"),
        "the staged binary is the published one"
    );
    // The installed binary was never touched.
    assert!(binary().exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Registers `home` with `server` (updates off), turns host commands on there, and leaves the
/// machine offline, so work can be queued for the daemon that will find the update.
fn offline_with_commands_on(server: &Server, home: &Path) {
    let mut first = Daemon::start_with(
        home,
        "box",
        Some(&server.join),
        "tokio",
        &[
            ("OUTPOST_KEYRING", "off"),
            ("OUTPOST_DAEMON_AUTO_UPDATE", "0"),
        ],
    );
    server.wait_context("box", "box online", |c| c["online"] == true);
    commands_switch(home, "on");
    wait_for("the grant with commands on", || {
        first.log_text().contains("commands=true").then_some(())
    });
    first.kill();
    server.wait_context("box", "box offline", |c| c["online"] == false);
}

/// Queues `script` for the offline `box`; returns the execution's id.
fn queue(server: &Server, name: &str, script: &str) -> String {
    let (status, e) = server.api(
        "POST",
        "/v1/executions",
        Some(json!({"capability": shell_capability(name, script), "context": "box", "whenOffline": "queue"})),
    );
    assert!(status == 201 || status == 202, "{status} {e}");
    e["executionId"].as_str().expect("id").to_owned()
}

/// The `command_finished` audit rows' details.
fn commands_finished(server: &Server) -> Vec<Value> {
    let (_, log) = server.api("GET", "/v1/audit?limit=500", None);
    log["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "command_finished")
        .filter_map(|e| serde_json::from_str(e["detail"].as_str()?).ok())
        .collect()
}

/// A hand-over waits for a background host command that finishes in time: the update takes
/// over only after the job ended on its own and its `command_finished` was sent.
#[test]
fn a_hand_over_waits_for_a_background_host_command_that_finishes() {
    let dir = temp_dir("update-job");
    let release = new_version(&dir);
    let server = publishing(&dir.join("server"), &release);
    let home = dir.join("home");
    offline_with_commands_on(&server, &home);
    let (go, ended) = (dir.join("go"), dir.join("ended"));
    let id = queue(
        &server,
        "job",
        &format!(
            "'{}' command start -- sh -c 'while [ ! -e {go} ]; do sleep 0.05; done; echo ended > {ended}'\n",
            binary().display(),
            go = go.display(),
            ended = ended.display()
        ),
    );
    let daemon = Daemon::start(&home, "box", None, "tokio");
    let pid = daemon.child.id();
    assert_eq!(server.wait_status(&id, "exited")["exitCode"], 0);
    wait_for("the update staged while the job runs", || {
        daemon
            .log_text()
            .contains("handing over to the update once")
            .then_some(())
    });
    assert!(!runs_as_new(pid), "no hand-over while the job runs");
    assert!(!ended.exists());
    std::fs::write(&go, b"").expect("go");
    wait_for("the daemon to run as the update", || {
        runs_as_new(pid).then_some(())
    });
    assert!(ended.exists(), "the job ran to its end");
    let finished = wait_for("the job's command_finished", || {
        let rows = commands_finished(&server);
        (!rows.is_empty()).then_some(rows)
    });
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["reason"], "exited", "{finished:?}");
    // The old version reported the job, then handed over.
    let text = daemon.log_text();
    let reported = text.find("host command finished").expect("reported");
    let handed = text
        .rfind("handing over to the update")
        .expect("handed over");
    assert!(reported < handed, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs and background host commands that outlast the hand-over's limit (24 h; this debug
/// build takes `OUTPOST_TEST_HAND_OVER_MS`) are stopped and the update takes over anyway: the
/// held run's result arrives once, from the outbox; the job's process group is gone and its
/// `command_finished` (`shutdown`) is audited.
#[test]
fn runs_and_host_commands_that_outlast_the_hand_over_are_stopped_and_the_update_takes_over() {
    let dir = temp_dir("update-overdue");
    let release = new_version(&dir);
    let server = publishing(&dir.join("server"), &release);
    let home = dir.join("home");
    offline_with_commands_on(&server, &home);
    let (pids, log, never) = (dir.join("pids"), dir.join("runs.log"), dir.join("never"));
    let id = queue(
        &server,
        "held",
        &format!(
            "'{}' command start -- sh -c 'sleep 300 & echo $$ $! > {pids}; wait'\necho start >> {log}\nwhile [ ! -e {never} ]; do sleep 0.05; done\n",
            binary().display(),
            pids = pids.display(),
            log = log.display(),
            never = never.display()
        ),
    );
    let daemon = Daemon::start_with(
        &home,
        "box",
        None,
        "tokio",
        &[
            ("OUTPOST_KEYRING", "off"),
            ("OUTPOST_TEST_HAND_OVER_MS", "4000"),
        ],
    );
    let pid = daemon.child.id();
    let job = job_pids(&pids);
    wait_for("the update staged while the run is held", || {
        daemon
            .log_text()
            .contains("handing over to the update once")
            .then_some(())
    });
    assert!(!runs_as_new(pid), "the hand-over waits its limit first");
    wait_for("the daemon to run as the update", || {
        runs_as_new(pid).then_some(())
    });
    let text = daemon.log_text();
    assert!(
        text.contains("outlasted the update's hand-over limit of 4 s"),
        "{text}"
    );
    assert!(job.iter().all(|&p| process_gone(p)), "{job:?}");
    let execution = server.wait_status(&id, "cancelled");
    assert_eq!(lines(&log), ["start"], "started once: {execution}");
    wait_for("the result acknowledged", || {
        outbox(&home).is_empty().then_some(())
    });
    let metrics = server.metrics();
    assert!(
        metrics.contains("outpost_runs_total{status=\"cancelled\"} 1"),
        "delivered once: {metrics}"
    );
    let finished = wait_for("the job's command_finished", || {
        let rows = commands_finished(&server);
        (!rows.is_empty()).then_some(rows)
    });
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["reason"], "shutdown", "{finished:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a fresh daemon against `server`, waits for its update check to take nothing, and
/// returns the code it logged; nothing was staged and it still runs as the old version.
fn refused(server: &Server, home: &Path, name: &str) -> String {
    let mut daemon = Daemon::start(home, name, Some(&server.join), "tokio");
    let line = wait_for("the update check to refuse", || {
        daemon
            .log_text()
            .lines()
            .find(|l| l.contains("the update check took nothing"))
            .map(str::to_owned)
    });
    assert!(!runs_as_new(daemon.child.id()), "still the old version");
    assert!(
        !home.join(format!("state/updates/outpost-{NEW}")).exists(),
        "nothing staged"
    );
    // The check can be refused before the daemon's connection is up: submit once it is.
    server.wait_context(name, "the daemon online", |c| c["online"] == true);
    let id = server.submit(&shell_capability("still", "echo still\n"), name);
    let path = format!("/v1/executions/{id}");
    let done = wait_for_explained(
        "the run after the refused update",
        || {
            let (_, e) = server.api("GET", &path, None);
            (e["status"] == "exited").then_some(e)
        },
        || {
            format!(
                "{}\n{}",
                server.api("GET", &path, None).1,
                daemon.log_tail(30)
            )
        },
    );
    assert_eq!(done["stdout"], "still\n");
    daemon.kill();
    let state = update_state(home);
    assert!(
        state["nextCheckAt"].as_u64().unwrap_or(0) > 0,
        "it backs off: {state}"
    );
    state["lastError"].as_str().unwrap_or(&line).to_owned()
}

#[test]
fn a_foreign_signature_a_digest_mismatch_and_a_cut_binary_are_refused_and_nothing_changes() {
    let dir = temp_dir("update-refused");
    let release = new_version(&dir);
    let server = publishing(&dir.join("server"), &release);
    let releases = dir.join("server/releases");
    let document = std::fs::read(releases.join("daemon-release.json")).expect("document");
    let signed: Value = serde_json::from_slice(&document).expect("JSON");
    let bin = releases.join(format!(
        "{}.bin",
        signed["sha512"].as_str().expect("sha512")
    ));
    let original = std::fs::read(&bin).expect("binary");

    // Signed by another server's root (the same binary, a real signature, the wrong key).
    let other = publishing(&dir.join("other"), &release);
    std::fs::copy(
        dir.join("other/releases/daemon-release.json"),
        releases.join("daemon-release.json"),
    )
    .expect("copy");
    drop(other);
    assert_eq!(
        refused(&server, &dir.join("home-a"), "box-a"),
        "unknown_root"
    );

    // The right document, a binary of the same length with one byte changed.
    std::fs::write(releases.join("daemon-release.json"), &document).expect("restore");
    let mut altered = original.clone();
    let last = altered.len() - 2;
    altered[last] ^= 0x20;
    std::fs::write(&bin, &altered).expect("alter");
    assert_eq!(
        refused(&server, &dir.join("home-b"), "box-b"),
        "digest_mismatch"
    );

    // A cut download.
    std::fs::write(&bin, &original[..original.len() / 2]).expect("cut");
    assert_eq!(
        refused(&server, &dir.join("home-c"), "box-c"),
        "release_truncated"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A daemon of a server that publishes a newer release, started on `home` with `env`: it says
/// at start that updates are off, runs work, never checks, stages nothing and stays the
/// version it is.
fn stays_as_it_is(name: &str, policy: Option<&str>, env: &[(&str, &str)]) {
    let dir = temp_dir(name);
    let release = new_version(&dir);
    let server = publishing(&dir.join("server"), &release);
    let home = dir.join("home");
    if let Some(policy) = policy {
        std::fs::create_dir_all(home.join("config")).expect("config");
        let path = home.join("config/policy.json");
        std::fs::write(&path, policy).expect("policy");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let mut daemon = Daemon::start_with(&home, "box", Some(&server.join), "tokio", env);
    wait_for("the daemon to say updates are off", || {
        daemon
            .log_text()
            .contains("automatic updates are off")
            .then_some(())
    });
    server.wait_context("box", "box online", |c| c["online"] == true);
    let id = server.submit(&shell_capability("kept", "echo kept\n"), "box");
    assert_eq!(server.wait_status(&id, "exited")["stdout"], "kept\n");
    let text = daemon.log_text();
    assert!(!text.contains("automatic updates are on"), "{text}");
    assert!(!text.contains("update check"), "no check: {text}");
    assert!(!text.contains("handing over"), "{text}");
    assert!(!runs_as_new(daemon.child.id()), "still the old version");
    assert!(
        !home.join("state/updates").exists(),
        "nothing was downloaded or staged"
    );
    assert!(update_state(&home)["current"].is_null());
    daemon.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The local policy's `"autoUpdate": false` keeps the daemon as it is.
#[test]
fn auto_update_false_in_the_local_policy_keeps_the_daemon_as_it_is() {
    stays_as_it_is(
        "update-off",
        Some(r#"{"autoUpdate": false}"#),
        &[("OUTPOST_KEYRING", "off")],
    );
}

/// `OUTPOST_DAEMON_AUTO_UPDATE=0` keeps the daemon as it is, with no policy at all.
#[test]
fn outpost_daemon_auto_update_0_keeps_the_daemon_as_it_is() {
    stays_as_it_is(
        "update-var-off",
        None,
        &[
            ("OUTPOST_KEYRING", "off"),
            ("OUTPOST_DAEMON_AUTO_UPDATE", "0"),
        ],
    );
}

/// `outpost serve --json --publish-daemon BINARY` names the release it publishes in
/// `publishedDaemon`: the version the binary reports, its SHA-512 and size.
#[test]
fn serve_json_names_the_published_daemon() {
    let dir = temp_dir("update-json");
    let release = new_version(&dir);
    let mut child = std::process::Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--json", "--state"])
        .arg(dir.join("server"))
        .arg("--publish-daemon")
        .arg(&release)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("outpost serve starts");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("a line");
    let _ = child.kill();
    let _ = child.wait();
    let started: Value = serde_json::from_str(&line).expect("one JSON line");
    let published = &started["publishedDaemon"];
    let bytes = std::fs::read(&release).expect("release");
    assert_eq!(published["version"], NEW, "{started}");
    assert_eq!(published["size"], bytes.len() as u64, "{started}");
    assert_eq!(
        published["sha512"],
        outpost_core::release::sha512_hex(&bytes),
        "{started}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// "Update now" from afar: a daemon whose scheduled check found nothing (no release then,
/// and the next one hours away) checks at once when asked, stages the release its server
/// publishes now, answers with it, and hands over.
#[test]
fn an_update_asked_for_from_afar_checks_at_once_and_hands_over() {
    let dir = temp_dir("update-now");
    let release = new_version(&dir);
    let state = dir.join("server");
    let server = Server::start(&state, 0);
    let home = dir.join("home");
    let daemon = Daemon::start(&home, "box", Some(&server.join), "tokio");
    server.wait_context("box", "box online", |c| c["online"] == true);
    wait_for("the scheduled check to find no release", || {
        daemon.log_text().contains("no_release").then_some(())
    });
    // The server now publishes a release; the daemon reconnects but checks again only in
    // hours.
    let port = server.port;
    drop(server);
    let server = Server::start_with(
        &state,
        port,
        &[OsStr::new("--publish-daemon"), release.as_os_str()],
    );
    server.wait_context("box", "box back", |c| {
        c["online"] == true && c["control"] == true
    });
    let pid = daemon.child.id();
    assert!(!runs_as_new(pid));
    let (status, answer) = server.api(
        "POST",
        "/v1/execution-contexts/box/daemon",
        Some(json!({"action": "update"})),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "done", "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(NEW),
        "the answer names the staged version: {answer}"
    );
    wait_for("the daemon to run as the update", || {
        runs_as_new(pid).then_some(())
    });
    server.wait_context("box", "box online as the update", |c| c["online"] == true);
    let _ = std::fs::remove_dir_all(&dir);
}
