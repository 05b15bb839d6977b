//! `outpost daemon` as a service, with the real binary and real tools: the systemd unit
//! passes `systemd-analyze verify` with nothing on stderr, the LaunchAgent plist parses with
//! python3's plistlib, neither holds a token or a passphrase; root and a binary in a
//! temporary or build folder are refused; where no service manager answers the files are
//! written and the exit status says nothing started. One runner per home: a second terminal
//! daemon exits naming the first, a service waits for it, a killed daemon's lock is taken
//! over. A revoked daemon writes `stopped.json`, exits 0 and does not start again; SIGTERM
//! mid-run drains: the run finishes and the server has its result before the daemon exits.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Daemon, Server, binary, lines, shell_capability, temp_dir, wait_for};
use serde_json::Value;

const PASSPHRASE: &str = "correct horse battery staple";

fn online(server: &Server, name: &str, want: bool) {
    server.wait_context(name, "the daemon's online state", |c| c["online"] == want);
}

/// An environment where no service manager can answer (no bus, an empty runtime folder),
/// with HOME and the XDG config folder in `dir`, so nothing outside the test is touched.
fn isolated(command: &mut Command, dir: &Path) {
    let runtime = dir.join("runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    command
        .env("HOME", dir.join("user"))
        .env("XDG_CONFIG_HOME", dir.join("user/.config"))
        .env("XDG_RUNTIME_DIR", &runtime)
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            format!("unix:path={}", dir.join("no-bus").display()),
        )
        .env("OUTPOST_KEYRING", "off")
        .env("OUTPOST_LOG", "info");
}

/// Starts `outpost daemon` from `program` on `home` with `env`, logging to a file.
fn spawn_daemon(
    program: &Path,
    dir: &Path,
    home: &Path,
    join: Option<&str>,
    env: &[(&str, &str)],
) -> Daemon {
    std::fs::create_dir_all(home).expect("home");
    let log = home.join(format!(
        "daemon-{}.log",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_nanos()
    ));
    let mut command = Command::new(program);
    command
        .args(["daemon", "--name", "box", "--home"])
        .arg(home);
    if let Some(join) = join {
        command.args(["--join", join]);
    }
    isolated(&mut command, dir);
    for (k, v) in env {
        command.env(k, v);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("outpost daemon starts");
    Daemon {
        child,
        home: home.to_path_buf(),
        log,
    }
}

/// `outpost daemon ARGS --home HOME` in the isolated environment, with `env`.
fn outpost(dir: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    outpost_from(&binary(), dir, home, args, env)
}

fn outpost_from(
    program: &Path,
    dir: &Path,
    home: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut command = Command::new(program);
    command.arg("daemon").args(args).arg("--home").arg(home);
    isolated(&mut command, dir);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("outpost runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const ALLOW: (&str, &str) = ("OUTPOST_SERVICE_TEST_ALLOW", "root,binary");

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_default()).unwrap_or(Value::Null)
}

/// A home that joined `server` (its key sealed with the passphrase when `passphrase`), its
/// daemon stopped again; returns the context id.
fn joined_home(server: &Server, dir: &Path, home: &Path, passphrase: bool) -> String {
    let env: &[(&str, &str)] = if passphrase {
        &[("OUTPOST_KEY_PASSPHRASE", PASSPHRASE)]
    } else {
        &[]
    };
    let mut daemon = spawn_daemon(&binary(), dir, home, Some(&server.join), env);
    online(server, "box", true);
    signal(daemon.child.id(), "TERM");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    json_file(&home.join("config/server.json"))["contextId"]
        .as_str()
        .expect("a context id")
        .to_owned()
}

/// What no unit file may hold: the passphrase, the join's and the admin's tokens, the file
/// key and the sealed key.
fn secrets(server: &Server, home: &Path) -> Vec<String> {
    let join = outpost_core::join::Join::parse(&server.join).expect("join");
    let mut secrets = vec![PASSPHRASE.to_owned(), join.token, server.admin.clone()];
    if let Ok(key) = std::fs::read_to_string(home.join("config/key.file")) {
        secrets.push(key.trim().to_owned());
    }
    let sealed = json_file(&home.join("config/key.enc"));
    secrets.push(
        sealed["ciphertext"]
            .as_str()
            .expect("ciphertext")
            .to_owned(),
    );
    secrets
}

fn holds_no_secret(what: &str, text: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{what} holds a secret: {text}"
        );
    }
    assert!(!text.contains("opt_"), "{what} holds a token: {text}");
}

#[test]
fn the_systemd_unit_verifies_holds_no_secret_and_is_written_where_no_manager_answers() {
    let dir = temp_dir("svc-unit");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let context_id = joined_home(&server, &dir, &home, true);
    let unit_name = format!("outpost-daemon-{context_id}.service");
    let unit_path = dir.join("user/.config/systemd/user").join(&unit_name);

    // Refusals, each with its code, before anything is written.
    let out = outpost(
        &dir,
        &home,
        &["install"],
        &[("OUTPOST_SERVICE_TEST_ALLOW", "root")],
    );
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[binary_vanishes]"), "{}", text(&out));
    assert!(text(&out).contains("cargo build folder"), "{}", text(&out));
    let copy = dir.join("bin/outpost");
    std::fs::create_dir_all(copy.parent().expect("bin")).expect("bin");
    std::fs::copy(binary(), &copy).expect("a copy in a temporary folder");
    let out = outpost_from(
        &copy,
        &dir,
        &home,
        &["install"],
        &[("OUTPOST_SERVICE_TEST_ALLOW", "root")],
    );
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[binary_vanishes]"), "{}", text(&out));
    assert!(text(&out).contains("temporary folder"), "{}", text(&out));
    let out = as_root(&dir, &home, &["install", "--print"]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[running_as_root]"), "{}", text(&out));
    let out = outpost(&dir, &home, &["install"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[passphrase_sealed]"), "{}", text(&out));
    assert!(!unit_path.exists(), "nothing written on a refusal");
    let not_joined = dir.join("fresh");
    std::fs::create_dir_all(&not_joined).expect("fresh");
    let out = outpost(&dir, &not_joined, &["install"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[not_joined]"), "{}", text(&out));
    assert!(
        text(&out).contains("outpost daemon --join"),
        "{}",
        text(&out)
    );

    // --print shows the unit and writes nothing.
    let out = outpost(&dir, &home, &["install", "--print", "--json"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(printed["path"], unit_path.to_string_lossy().as_ref());
    assert_eq!(printed["name"], unit_name.as_str());
    let unit = printed["text"].as_str().expect("text").to_owned();
    assert!(!unit_path.exists(), "--print writes nothing");

    // Install with the file key: the unit is written, no manager answers, exit 75.
    let out = outpost(
        &dir,
        &home,
        &["install", "--file-key"],
        &[ALLOW, ("OUTPOST_KEY_PASSPHRASE", PASSPHRASE)],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(75), "{said}");
    assert!(said.contains("no service manager answered"), "{said}");
    assert!(said.contains("nothing was started"), "{said}");
    assert!(
        said.contains(&format!("systemctl --user enable --now {unit_name}")),
        "{said}"
    );
    assert!(said.contains("sudo loginctl enable-linger"), "{said}");
    assert!(said.contains("file key"), "{said}");
    let written = std::fs::read_to_string(&unit_path).expect("the unit is written");
    assert_eq!(written, unit, "--print shows what install writes");
    for line in [
        "Restart=always",
        "RestartPreventExitStatus=0",
        "StartLimitBurst=5",
        "StartLimitIntervalSec=600",
        "WantedBy=default.target",
        "KillMode=mixed",
        "Environment=\"OUTPOST_DAEMON_SERVICE=systemd\"",
    ] {
        assert!(written.lines().any(|l| l == line), "{line} in\n{written}");
    }
    let unit_section = written.split("[Service]").next().expect("[Unit]");
    assert!(unit_section.contains("StartLimitBurst="), "{written}");
    assert!(written.contains(&context_id), "{written}");
    let exec = written
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert_eq!(
        exec,
        format!(
            "\"{}\" \"daemon\" \"--home\" \"{}\"",
            binary().canonicalize().expect("binary").display(),
            home.canonicalize().expect("home").display()
        )
    );
    assert!(written.contains("Environment=\"PATH=/"), "{written}");
    holds_no_secret("the unit", &written, &secrets(&server, &home));

    // systemd's own check, as a user unit: nothing on stderr.
    let runtime = dir.join("runtime");
    let verify = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(&unit_path)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("HOME", dir.join("user"))
        .env("XDG_CONFIG_HOME", dir.join("user/.config"))
        .output()
        .expect("systemd-analyze is installed (Debian's systemd package; .ci/run installs it)");
    assert_eq!(
        String::from_utf8_lossy(&verify.stderr),
        "",
        "systemd-analyze verify {}",
        unit_path.display()
    );
    assert!(verify.status.success());

    // The daemon the unit starts needs no passphrase now, and names its launcher.
    let mut service = spawn_daemon(
        &binary(),
        &dir,
        &home,
        None,
        &[("OUTPOST_DAEMON_SERVICE", "systemd")],
    );
    online(&server, "box", true);
    assert_eq!(
        json_file(&home.join("state/daemon.json"))["manager"],
        "systemd"
    );
    signal(service.child.id(), "TERM");
    assert_eq!(service.wait_exit(), 0, "{}", service.log_text());

    // Re-running install repairs the unit.
    std::fs::write(&unit_path, "[Service]\nExecStart=/bin/false\n").expect("damage");
    let out = outpost(&dir, &home, &["install", "--json"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["changed"], true, "{report}");
    assert_eq!(report["managerAnswered"], false, "{report}");
    assert_eq!(report["started"], false, "{report}");
    assert_eq!(report["keyWrapper"], "file", "{report}");
    assert_eq!(report["linger"], false, "{report}");
    assert_eq!(std::fs::read_to_string(&unit_path).expect("unit"), unit);

    // restart and uninstall: no manager answers, so 75; uninstall removes the file.
    let out = outpost(&dir, &home, &["restart"], &[]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let out = outpost(&dir, &home, &["uninstall"], &[]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(text(&out).contains("removed"), "{}", text(&out));
    assert!(!unit_path.exists());
    let out = outpost(&dir, &home, &["uninstall"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("nothing to do"), "{}", text(&out));
    let out = outpost(&dir, &home, &["restart"], &[]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[not_installed]"), "{}", text(&out));
    assert!(
        text(&out).contains("no service is installed"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `install --print` as uid 0: directly when the tests run as root, else in a user
/// namespace that maps this user to root.
fn as_root(dir: &Path, home: &Path, args: &[&str]) -> Output {
    let allow = ("OUTPOST_SERVICE_TEST_ALLOW", "binary");
    if nix_is_root() {
        return outpost(dir, home, args, &[allow]);
    }
    let mut command = Command::new("unshare");
    command
        .arg("--map-root-user")
        .arg(binary())
        .arg("daemon")
        .args(args)
        .arg("--home")
        .arg(home);
    isolated(&mut command, dir);
    command.env(allow.0, allow.1);
    command.output().expect("unshare runs")
}

fn nix_is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn the_launchagent_plist_parses_and_restarts_only_after_a_failure() {
    let dir = temp_dir("svc-plist");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let context_id = joined_home(&server, &dir, &home, false);
    let out = outpost(
        &dir,
        &home,
        &[
            "install",
            "--print",
            "--manager",
            "launchd",
            "--json",
            "--max-concurrent",
            "3",
        ],
        &[ALLOW],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let label = format!("outpost.daemon.{context_id}");
    assert_eq!(
        printed["path"],
        dir.join(format!("user/Library/LaunchAgents/{label}.plist"))
            .to_string_lossy()
            .as_ref()
    );
    let plist = printed["text"].as_str().expect("text");
    holds_no_secret("the plist", plist, &secrets(&server, &home));
    // A real plist parser: python3's plistlib, its result printed as JSON.
    let mut python = Command::new("python3")
        .args([
            "-c",
            "import json, plistlib, sys; print(json.dumps(plistlib.loads(sys.stdin.buffer.read())))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    use std::io::Write as _;
    python
        .stdin
        .take()
        .expect("stdin")
        .write_all(plist.as_bytes())
        .expect("write");
    let parsed = python.wait_with_output().expect("python3 ends");
    assert!(
        parsed.status.success(),
        "{}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let parsed: Value = serde_json::from_slice(&parsed.stdout).expect("JSON");
    assert_eq!(parsed["Label"], label.as_str());
    assert_eq!(parsed["RunAtLoad"], true);
    assert_eq!(
        parsed["KeepAlive"],
        serde_json::json!({"SuccessfulExit": false})
    );
    assert!(
        parsed["ThrottleInterval"].as_u64().is_some_and(|s| s > 0),
        "{parsed}"
    );
    assert!(
        parsed["ExitTimeOut"].as_u64().is_some_and(|s| s >= 300),
        "{parsed}"
    );
    let home_real = home.canonicalize().expect("home");
    assert_eq!(
        parsed["ProgramArguments"],
        serde_json::json!([
            binary().canonicalize().expect("binary").to_string_lossy(),
            "daemon",
            "--home",
            home_real.to_string_lossy(),
            "--max-concurrent",
            "3"
        ])
    );
    assert_eq!(
        parsed["EnvironmentVariables"]["OUTPOST_DAEMON_SERVICE"],
        "launchd"
    );
    assert!(
        parsed["EnvironmentVariables"]["PATH"]
            .as_str()
            .is_some_and(|p| p.starts_with('/'))
    );
    assert_eq!(
        parsed["EnvironmentVariables"].as_object().map(|o| o.len()),
        Some(2),
        "only PATH and OUTPOST_DAEMON_SERVICE: {parsed}"
    );
    assert_eq!(
        parsed["StandardErrorPath"],
        home_real
            .join("state/daemon.log")
            .to_string_lossy()
            .as_ref()
    );
    // Installed only on macOS.
    let out = outpost(&dir, &home, &["install", "--manager", "launchd"], &[ALLOW]);
    if cfg!(target_os = "macos") {
        assert_ne!(out.status.code(), Some(78), "{}", text(&out));
    } else {
        assert_eq!(out.status.code(), Some(78), "{}", text(&out));
        assert!(
            text(&out).contains("[manager_unsupported]"),
            "{}",
            text(&out)
        );
        assert!(!dir.join("user/Library").exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn lock_line(home: &Path) -> Value {
    let text = std::fs::read_to_string(home.join("state/daemon.lock")).unwrap_or_default();
    serde_json::from_str(text.trim()).unwrap_or(Value::Null)
}

fn status(dir: &Path, home: &Path) -> (i32, Value) {
    let out = outpost(dir, home, &["status", "--json"], &[]);
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
    )
}

#[test]
fn one_runner_per_home_a_second_daemon_names_the_first_and_a_service_waits() {
    let dir = temp_dir("svc-lock");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut first = spawn_daemon(&binary(), &dir, &home, Some(&server.join), &[]);
    online(&server, "box", true);
    let pid = first.child.id();
    assert_eq!(lock_line(&home)["pid"], pid);
    assert_eq!(lock_line(&home)["launcher"], "terminal");
    let (code, st) = status(&dir, &home);
    assert_eq!(code, 0, "{st}");
    assert_eq!(
        (st["running"].clone(), st["pid"].clone()),
        (true.into(), pid.into()),
        "{st}"
    );
    assert_eq!(st["manager"], "terminal");
    assert_eq!(st["outdated"], false, "{st}");

    // A second terminal daemon exits naming the first.
    let out = outpost(&dir, &home, &[], &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(78), "{said}");
    assert!(said.contains("[home_locked]"), "{said}");
    assert!(
        said.contains(&format!(
            "pid {pid}, started from terminal, version {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{said}"
    );

    // Installing meanwhile says the service will wait for it.
    let out = outpost(&dir, &home, &["install"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "a daemon runs on this home in a terminal (pid {pid}"
        )),
        "{}",
        text(&out)
    );

    // A service waits for the lock, then serves; it runs from a binary that is replaced
    // on disk afterwards, which status flags.
    let copy = dir.join("bin/outpost");
    std::fs::create_dir_all(copy.parent().expect("bin")).expect("bin");
    std::fs::copy(binary(), &copy).expect("copy");
    let mut service = spawn_daemon(
        &copy,
        &dir,
        &home,
        None,
        &[("OUTPOST_DAEMON_SERVICE", "systemd")],
    );
    wait_for("the service to wait for the lock", || {
        service
            .log_text()
            .contains("waiting for it to stop")
            .then_some(())
    });
    assert!(
        service.log_text().contains(&format!("pid {pid}")),
        "{}",
        service.log_text()
    );
    assert!(
        service.child.try_wait().expect("status").is_none(),
        "the service waits"
    );
    signal(pid, "TERM");
    assert_eq!(first.wait_exit(), 0, "{}", first.log_text());
    let service_pid = service.child.id();
    wait_for("the service to take the lock", || {
        (lock_line(&home)["pid"] == service_pid).then_some(())
    });
    assert_eq!(lock_line(&home)["launcher"], "systemd");
    online(&server, "box", true);
    let (_, st) = status(&dir, &home);
    assert_eq!(st["pid"], service_pid, "{st}");
    assert_eq!(st["manager"], "systemd", "{st}");
    assert_eq!(st["outdated"], false, "{st}");
    std::fs::remove_file(&copy).expect("rm");
    std::fs::copy(binary(), &copy).expect("a new binary");
    let (_, st) = status(&dir, &home);
    assert_eq!(st["outdated"], true, "{st}");
    assert!(
        st["outdatedWhy"]
            .as_str()
            .is_some_and(|w| w.contains("replaced")),
        "{st}"
    );

    // kill -9: the lock is free, its line stale; the next daemon takes it over and says so.
    service.kill();
    let (code, st) = status(&dir, &home);
    assert_eq!(code, 3, "{st}");
    assert_eq!(st["running"], false, "{st}");
    assert_eq!(st["leftBehind"]["pid"], service_pid, "{st}");
    let mut next = spawn_daemon(&binary(), &dir, &home, None, &[]);
    online(&server, "box", true);
    wait_for("the takeover to be logged", || {
        next.log_text().contains("took over the lock").then_some(())
    });
    assert!(
        next.log_text().contains(&format!("pid {service_pid}")),
        "{}",
        next.log_text()
    );
    assert_eq!(lock_line(&home)["pid"], next.child.id());
    assert_eq!(
        json_file(&home.join("state/daemon.json"))["pid"],
        next.child.id()
    );
    signal(next.child.id(), "TERM");
    assert_eq!(next.wait_exit(), 0, "{}", next.log_text());
    assert!(
        !home.join("state/daemon.json").exists(),
        "removed on a clean exit"
    );
    assert_eq!(lock_line(&home), Value::Null, "the lock line is emptied");
    let (code, st) = status(&dir, &home);
    assert_eq!((code, st["leftBehind"].clone()), (3, Value::Null), "{st}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_revoked_service_writes_stopped_json_exits_0_and_does_not_start_again() {
    let dir = temp_dir("svc-revoke");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = spawn_daemon(
        &binary(),
        &dir,
        &home,
        Some(&server.join),
        &[("OUTPOST_DAEMON_SERVICE", "systemd")],
    );
    online(&server, "box", true);
    let context_id = json_file(&home.join("config/server.json"))["contextId"]
        .as_str()
        .expect("context")
        .to_owned();
    let (status_code, body) = server.api("POST", "/v1/execution-contexts/box/revoke", None);
    assert_eq!(status_code, 200, "{body}");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    let stopped = json_file(&home.join("state/stopped.json"));
    assert_eq!(stopped["reason"], "revoked", "{stopped}");
    assert_eq!(stopped["contextId"], context_id.as_str(), "{stopped}");
    assert!(
        stopped["at"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{stopped}"
    );
    let log = daemon.log_text();
    assert!(
        log.contains("could not disable the service (best effort"),
        "{log}"
    );
    assert!(
        log.contains(&format!("outpost-daemon-{context_id}.service")),
        "{log}"
    );
    assert!(!home.join("state/daemon.json").exists());

    // Started again (by a manager or by hand) it refuses at once, exit 0.
    let out = outpost(&dir, &home, &[], &[("OUTPOST_DAEMON_SERVICE", "systemd")]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("[stopped_for_good]"), "{said}");
    assert!(said.contains("stopped.json"), "{said}");
    let (code, st) = status(&dir, &home);
    assert_eq!(code, 3, "{st}");
    assert_eq!(st["stopped"]["reason"], "revoked", "{st}");
    let out = outpost(&dir, &home, &["install"], &[ALLOW]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("[stopped_for_good]"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_mid_run_finishes_the_run_and_the_server_has_its_result_before_the_exit() {
    let dir = temp_dir("svc-drain");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = spawn_daemon(&binary(), &dir, &home, Some(&server.join), &[]);
    online(&server, "box", true);
    let (marks, go) = (dir.join("marks"), dir.join("go"));
    let script = format!(
        "echo started >> {m}\nwhile [ ! -e {g} ]; do sleep 0.05; done\necho finished\n",
        m = marks.display(),
        g = go.display()
    );
    let id = server.submit(&shell_capability("slow", &script), "box");
    wait_for("the run to start", || {
        (!lines(&marks).is_empty()).then_some(())
    });
    signal(daemon.child.id(), "TERM");
    wait_for("the daemon to drain", || {
        daemon
            .log_text()
            .contains("stopping: runs in flight finish")
            .then_some(())
    });
    // The draining daemon takes no new run.
    let late_mark = dir.join("late");
    let late = server.submit(
        &shell_capability("late", &format!("echo ran >> {}\n", late_mark.display())),
        "box",
    );
    assert!(
        daemon.child.try_wait().expect("status").is_none(),
        "it waits for the run"
    );
    std::fs::write(&go, b"").expect("go");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    // No waiting here: the result was acknowledged before the daemon exited.
    let (_, execution) = server.api("GET", &format!("/v1/executions/{id}"), None);
    assert_eq!(execution["status"], "exited", "{execution}");
    assert_eq!(execution["stdout"], "finished\n", "{execution}");
    assert!(
        !late_mark.exists(),
        "a run offered while draining never ran"
    );
    let (_, late) = server.api("GET", &format!("/v1/executions/{late}"), None);
    assert_ne!(late["status"], "exited", "{late}");
    assert!(
        daemon.log_text().contains("every result was delivered"),
        "{}",
        daemon.log_text()
    );
    assert!(!home.join("state/daemon.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
