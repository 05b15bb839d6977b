//! `outpost daemon` as a service, with the real binary and real tools.
//!
//! - `unit`: the systemd unit passes `systemd-analyze verify` with nothing on stderr, the
//!   LaunchAgent plist parses with python3's plistlib, neither holds a token or a passphrase;
//!   root and a binary in a temporary or build folder are refused; where no service manager
//!   answers the files are written and the exit status says nothing started.
//! - `manager`: with stand-in `systemctl` / `journalctl` / `loginctl` first on `PATH` (no
//!   service manager runs here), install enables and starts the unit, a repair restarts it,
//!   `logs` reads its journal, `restart` and `uninstall` call the manager, a manager's refusal
//!   exits 1, and a revoked service disables its own unit.
//! - `runner`: one runner per home (a second terminal daemon exits naming the first, a
//!   service waits for it, a killed daemon's lock is taken over); a revoked daemon writes
//!   `stopped.json`, exits 0 and does not start again; SIGTERM mid-run drains: the run
//!   finishes and the server has its result before the daemon exits.
//! - `standing`: `status` says connected or not, to which server, since when, the last error,
//!   the next retry and the slots in use; `logs` reads the log a terminal daemon keeps.

#[path = "../common/mod.rs"]
mod common;
mod manager;
mod runner;
mod standing;
mod unit;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Daemon, Server, binary};
use serde_json::Value;

pub(crate) const PASSPHRASE: &str = "correct horse battery staple";

pub(crate) fn online(server: &Server, name: &str, want: bool) {
    server.wait_context(name, "the daemon's online state", |c| c["online"] == want);
}

/// An environment where no service manager can answer (no bus, an empty runtime folder),
/// with HOME and the XDG config folder in `dir`, so nothing outside the test is touched.
pub(crate) fn isolated(command: &mut Command, dir: &Path) {
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
pub(crate) fn spawn_daemon(
    program: &Path,
    dir: &Path,
    home: &Path,
    join: Option<&str>,
    env: &[(&str, &str)],
) -> Daemon {
    std::fs::create_dir_all(home).expect("home");
    common::let_operator_opt_out(home);
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
pub(crate) fn outpost(dir: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    outpost_from(&binary(), dir, home, args, env)
}

pub(crate) fn outpost_from(
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

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) const ALLOW: (&str, &str) = ("OUTPOST_SERVICE_TEST_ALLOW", "root,binary");

pub(crate) fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

pub(crate) fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_default()).unwrap_or(Value::Null)
}

/// A home that joined `server` (its key sealed with the passphrase when `passphrase`), its
/// daemon stopped again; returns the context id.
pub(crate) fn joined_home(server: &Server, dir: &Path, home: &Path, passphrase: bool) -> String {
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
pub(crate) fn secrets(server: &Server, home: &Path) -> Vec<String> {
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

pub(crate) fn holds_no_secret(what: &str, text: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{what} holds a secret: {text}"
        );
    }
    assert!(!text.contains("opt_"), "{what} holds a token: {text}");
}
