//! The machine key sealed by a real OS keyring: a private session D-Bus (`dbus-daemon`) with
//! a real Secret Service (`gnome-keyring-daemon`, its login keyring unlocked), then the real
//! `outpost daemon` joining through it, starting again through it, and refused without it.

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{Daemon, Server, binary, temp_dir, wait_for};

/// A session bus and a Secret Service on it, killed on drop.
struct Session {
    bus: Child,
    keyring: Child,
    address: String,
    runtime: String,
}

impl Session {
    fn start(dir: &Path) -> Session {
        std::fs::create_dir_all(dir.join("data")).expect("session folder");
        let mut bus = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:path={}", dir.join("bus").display()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("dbus-daemon runs (Debian's dbus-daemon package)");
        let mut line = String::new();
        BufReader::new(bus.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the bus prints its address once it listens");
        let address = line.trim().to_owned();
        let runtime = dir.display().to_string();
        let mut keyring = Command::new("gnome-keyring-daemon")
            .args(["--unlock", "--components=secrets", "--foreground"])
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gnome-keyring-daemon runs (Debian's gnome-keyring package)");
        // The login keyring's password, on standard input, unlocks (and here creates) it.
        let mut stdin = keyring.stdin.take().expect("stdin");
        stdin.write_all(b"a test password").expect("password");
        drop(stdin);
        let session = Session {
            bus,
            keyring,
            address,
            runtime,
        };
        wait_for("the Secret Service on the bus", || {
            let out = Command::new("dbus-send")
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner",
                    "string:org.freedesktop.secrets",
                ])
                .env("DBUS_SESSION_BUS_ADDRESS", &session.address)
                .output()
                .expect("dbus-send runs");
            String::from_utf8_lossy(&out.stdout)
                .contains("boolean true")
                .then_some(())
        });
        session
    }

    fn env(&self) -> [(&str, &str); 3] {
        [
            ("OUTPOST_KEYRING", "on"),
            ("DBUS_SESSION_BUS_ADDRESS", &self.address),
            ("XDG_RUNTIME_DIR", &self.runtime),
        ]
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for child in [&mut self.keyring, &mut self.bus] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn sealed_wrapper(home: &Path) -> String {
    let text = std::fs::read_to_string(home.join("config/key.enc")).expect("key.enc");
    let sealed: serde_json::Value = serde_json::from_str(&text).expect("key.enc is JSON");
    sealed["wrapper"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_real_secret_service_wraps_the_machine_key_and_without_it_the_daemon_is_refused() {
    let dir = temp_dir("keyring");
    let session = Session::start(&dir.join("session"));
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");

    let mut daemon = Daemon::start_with(&home, "box", Some(&server.join), "tokio", &session.env());
    let first = server.wait_context("box", "box online", |c| c["online"] == true);
    daemon.kill();
    assert_eq!(sealed_wrapper(&home), "keyring", "{}", daemon.log_text());
    assert!(
        !home.join("config/key.file").exists(),
        "no file key when the keyring answers"
    );
    let sealed = std::fs::read(home.join("config/key.enc")).expect("key.enc");

    // The same key again, from the keyring: the same machine comes back online.
    let mut again = Daemon::start_with(&home, "box", None, "tokio", &session.env());
    server.wait_context("box", "box online again", |c| {
        c["online"] == true && c["id"] == first["id"]
    });
    again.kill();

    // Outside the session (no bus), the sealed key cannot open: a clear refusal, no change.
    let out = Command::new(binary())
        .args(["daemon", "--home"])
        .arg(&home)
        .env("OUTPOST_LOG", "warn")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env("XDG_RUNTIME_DIR", dir.join("no-session"))
        .output()
        .expect("outpost daemon runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("[keyring_unavailable]"), "{err}");
    assert_eq!(
        std::fs::read(home.join("config/key.enc")).expect("key.enc"),
        sealed,
        "nothing overwritten"
    );
    drop(session);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_session_bus_the_keyring_is_reported_and_the_file_key_used() {
    let dir = temp_dir("no-keyring");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let no_bus = [
        ("OUTPOST_KEYRING", "on"),
        ("DBUS_SESSION_BUS_ADDRESS", ""),
        ("XDG_RUNTIME_DIR", "/nonexistent"),
    ];
    let mut daemon = Daemon::start_with(&home, "box", Some(&server.join), "tokio", &no_bus);
    server.wait_context("box", "box online", |c| c["online"] == true);
    daemon.kill();
    assert_eq!(sealed_wrapper(&home), "file");
    let log = daemon.log_text();
    assert!(
        log.contains("the OS keyring does not answer") && log.contains("no session D-Bus"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every file under `dir`, recursively.
fn every_file(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files
}

#[test]
fn no_file_in_the_home_holds_the_machine_key_in_the_clear() {
    use base64::Engine as _;
    let dir = temp_dir("clear-key");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    // A key the test knows: written in the clear as an earlier build did, so the daemon
    // seals it and removes the clear file on its first start.
    let seed = [0x5au8, 0x17, 0xc3, 0x99].repeat(8);
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&seed);
    std::fs::create_dir_all(home.join("config")).expect("config");
    std::fs::write(home.join("config/machine.key"), &text).expect("clear key");
    for passphrase in [None, Some("a passphrase")] {
        let mut env = vec![("OUTPOST_KEYRING", "off")];
        if let Some(p) = passphrase {
            env.push(("OUTPOST_KEY_PASSPHRASE", p));
        }
        // The same key registers the same machine again: the same context.
        let name = "box";
        if passphrase.is_some() {
            // The same key, sealed again under a passphrase this time.
            let _ = std::fs::remove_dir_all(&home);
            std::fs::create_dir_all(home.join("config")).expect("config");
            std::fs::write(home.join("config/machine.key"), &text).expect("clear key");
        }
        let mut daemon = Daemon::start_with(&home, name, Some(&server.join), "tokio", &env);
        server.wait_context(name, "online", |c| c["online"] == true);
        let id = server.submit(&common::shell_capability("k", "echo ran\n"), name);
        server.wait_status(&id, "exited");
        daemon.kill();
        assert!(
            !home.join("config/machine.key").exists(),
            "the clear key is gone"
        );
        let needles = [seed.clone(), text.clone().into_bytes()];
        let files = every_file(&home);
        assert!(files.len() > 3, "{files:?}");
        for file in files {
            let bytes = std::fs::read(&file).unwrap_or_default();
            for needle in &needles {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                    "{} holds the machine key in the clear",
                    file.display()
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
