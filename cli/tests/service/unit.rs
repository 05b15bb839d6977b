//! The generated files: the systemd unit and the LaunchAgent plist, the refusals, and what
//! install, restart and uninstall do where no service manager answers.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::common::{Server, binary, temp_dir};
use crate::*;

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
