//! The service manager's answering path: `install`, `logs`, `restart`, `uninstall` and a
//! revoked service's own `disable`, when `systemctl --user` answers.
//!
//! No service manager runs where these tests run (a container has no systemd user instance and
//! no bus), so `systemctl`, `journalctl` and `loginctl` are small stand-in scripts put first on
//! `PATH` — outpost finds the tools there, as it finds the real ones. They log every argv they
//! get and answer as the real tools do: `show-environment` succeeds, `is-active` follows
//! `enable --now` / `disable`, `loginctl` says linger is on. This is the one place the tests
//! use a stand-in; the generated unit itself is checked by the real `systemd-analyze` (`unit`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{Server, binary, lines, temp_dir};
use crate::*;

/// The stand-in tools in `dir/fakebin`, logging to `dir/tools.log`; returns the `PATH` that
/// puts them first.
fn stand_in_tools(dir: &Path) -> String {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).expect("fakebin");
    let log = dir.join("tools.log");
    let active = dir.join("unit-active");
    let tools = [
        (
            "systemctl",
            format!(
                r#"echo "systemctl $*" >> '{log}'
[ "$1" = --user ] || {{ echo "only --user is expected" >&2; exit 2; }}
case "$2" in
  show-environment) echo "PATH=/usr/bin"; exit 0 ;;
  is-active) [ -e '{active}' ]; exit $? ;;
  enable)
    if [ "$FAKE_SYSTEMCTL_REFUSE" = enable ]; then
      echo "Failed to enable unit: Access denied" >&2; exit 1
    fi
    [ "$3" = --now ] && touch '{active}'; exit 0 ;;
  disable) rm -f '{active}'; exit 0 ;;
  *) exit 0 ;;
esac"#,
                log = log.display(),
                active = active.display()
            ),
        ),
        (
            "journalctl",
            format!(
                "echo \"journalctl $*\" >> '{}'\necho \"a journal line of $3\"\n",
                log.display()
            ),
        ),
        (
            "loginctl",
            format!(
                "echo \"loginctl $*\" >> '{}'\necho Linger=yes\n",
                log.display()
            ),
        ),
    ];
    for (name, body) in tools {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("a tool");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The tools' calls so far, and forgets them.
fn calls(dir: &Path) -> Vec<String> {
    let log = dir.join("tools.log");
    let seen = lines(&log);
    let _ = std::fs::remove_file(&log);
    seen
}

fn unit_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("user/.config/systemd/user").join(name)
}

#[test]
fn install_logs_restart_uninstall_and_a_revoked_service_drive_systemctl() {
    let dir = temp_dir("svc-manager");
    let server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let context_id = joined_home(&server, &dir, &home, false);
    let name = format!("outpost-daemon-{context_id}.service");
    let path = stand_in_tools(&dir);
    let with_tools = [("PATH", path.as_str()), ALLOW];

    // A manager that answers and refuses: exit 1 with its words, never "started".
    let out = outpost(
        &dir,
        &home,
        &["install"],
        &[
            ("PATH", path.as_str()),
            ALLOW,
            ("FAKE_SYSTEMCTL_REFUSE", "enable"),
        ],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("[service_manager_failed]"), "{said}");
    assert!(said.contains("Access denied"), "{said}");
    assert!(!said.contains("started"), "{said}");
    calls(&dir);

    // install: the unit is written, reloaded, enabled and started; linger is on.
    let out = outpost(&dir, &home, &["install", "--json"], &with_tools);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["managerAnswered"], true, "{report}");
    assert_eq!(report["started"], true, "{report}");
    assert_eq!(report["linger"], true, "{report}");
    assert!(unit_path(&dir, &name).exists());
    let ran = calls(&dir);
    for call in [
        "systemctl --user show-environment".to_owned(),
        "systemctl --user daemon-reload".to_owned(),
        format!("systemctl --user enable --now {name}"),
    ] {
        assert!(ran.contains(&call), "{call} in {ran:?}");
    }
    assert!(
        !ran.iter().any(|c| c.contains(" restart ")),
        "a fresh unit is not restarted: {ran:?}"
    );
    assert!(
        ran.iter().any(|c| c.starts_with("loginctl show-user")),
        "{ran:?}"
    );

    // A damaged unit is repaired and, the service being active, restarted.
    std::fs::write(unit_path(&dir, &name), "[Service]\nExecStart=/bin/false\n").expect("damage");
    let out = outpost(&dir, &home, &["install", "--json"], &with_tools);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["changed"], true, "{report}");
    assert!(
        calls(&dir).contains(&format!("systemctl --user restart {name}")),
        "the repair takes effect"
    );

    // logs: the unit's user journal.
    let out = outpost(&dir, &home, &["logs", "-n", "7"], &with_tools);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("a journal line of {name}")),
        "{}",
        text(&out)
    );
    assert_eq!(
        calls(&dir),
        [format!("journalctl --user -u {name} -n 7 --no-pager")]
    );

    // restart.
    let out = outpost(&dir, &home, &["restart"], &with_tools);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("restarted {name}")),
        "{}",
        text(&out)
    );
    assert!(calls(&dir).contains(&format!("systemctl --user restart {name}")));

    // uninstall: stopped, disabled, removed, reloaded.
    let out = outpost(&dir, &home, &["uninstall"], &with_tools);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("stopped and disabled {name}")),
        "{}",
        text(&out)
    );
    assert!(!unit_path(&dir, &name).exists());
    let ran = calls(&dir);
    assert!(
        ran.contains(&format!("systemctl --user disable --now {name}")),
        "{ran:?}"
    );
    assert_eq!(
        ran.last().map(String::as_str),
        Some("systemctl --user daemon-reload")
    );

    // A service's daemon that is revoked disables its own unit, and exits 0.
    let mut service = spawn_daemon(
        &binary(),
        &dir,
        &home,
        None,
        &[
            ("PATH", path.as_str()),
            ("OUTPOST_DAEMON_SERVICE", "systemd"),
        ],
    );
    online(&server, "box", true);
    let (status, body) = server.api("POST", "/v1/execution-contexts/box/revoke", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(service.wait_exit(), 0, "{}", service.log_text());
    let ran = calls(&dir);
    assert!(
        ran.contains(&format!("systemctl --user disable {name}")),
        "{ran:?}"
    );
    assert!(
        service.log_text().contains("disabled the service"),
        "{}",
        service.log_text()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
