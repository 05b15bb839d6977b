//! `outpost daemon status` says how a daemon stands with its server, and `outpost daemon
//! logs` reads the log a daemon started in a terminal keeps.

use std::path::Path;

use serde_json::Value;

use crate::common::{binary, lines, shell_capability, temp_dir, wait_for};
use crate::*;

fn status(dir: &Path, home: &Path) -> Value {
    let out = outpost(dir, home, &["status", "--json"], &[]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The status, once `check` holds for its `connection`.
fn status_when(dir: &Path, home: &Path, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, || {
        let st = status(dir, home);
        check(&st["connection"]).then_some(st)
    })
}

#[test]
fn status_says_connected_slots_and_the_last_error_and_logs_reads_the_daemons_own_log() {
    let dir = temp_dir("svc-standing");
    let mut server = Server::start(&dir.join("server"), 0);
    let home = dir.join("home");
    let mut daemon = spawn_daemon(&binary(), &dir, &home, Some(&server.join), &[]);
    online(&server, "box", true);

    // Connected, to which server, since when, with both slots free.
    let st = status_when(&dir, &home, "the daemon to be connected", |c| {
        c["connected"] == true
    });
    let c = &st["connection"];
    assert_eq!(c["server"], server.url.as_str(), "{st}");
    assert_eq!(
        (c["slots"].clone(), c["slotsInUse"].clone()),
        (2.into(), 0.into()),
        "{st}"
    );
    assert!(
        c["since"].as_str().is_some_and(|s| s.ends_with('Z')),
        "{st}"
    );
    assert_eq!(c["nextRetryAt"], Value::Null, "{st}");
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"), "{st}");
    let out = outpost(&dir, &home, &["status"], &[]);
    let said = text(&out);
    assert!(
        said.contains(&format!("connected to {} since ", server.url)),
        "{said}"
    );
    assert!(said.contains("slots: 0 of 2 in use"), "{said}");

    // A run holds a slot while it runs.
    let (marks, go) = (dir.join("marks"), dir.join("go"));
    let script = format!(
        "echo started >> {m}\nwhile [ ! -e {g} ]; do sleep 0.05; done\n",
        m = marks.display(),
        g = go.display()
    );
    let id = server.submit(&shell_capability("slow", &script), "box");
    wait_for("the run to start", || {
        (!lines(&marks).is_empty()).then_some(())
    });
    status_when(&dir, &home, "a slot in use", |c| c["slotsInUse"] == 1);
    std::fs::write(&go, b"").expect("go");
    server.wait_status(&id, "exited");
    status_when(&dir, &home, "the slot to be free again", |c| {
        c["slotsInUse"] == 0
    });

    // The server goes: not connected, why, and when the next try is.
    server.kill();
    let st = status_when(
        &dir,
        &home,
        "the daemon to notice the server is gone",
        |c| c["connected"] == false && c["nextRetryAt"].is_string() && c["lastError"].is_string(),
    );
    let out = outpost(&dir, &home, &["status"], &[]);
    let said = text(&out);
    assert!(
        said.contains(&format!("not connected to {} (since ", server.url)),
        "{said}"
    );
    assert!(said.contains("; next try at "), "{said}");
    assert!(said.contains("last error at "), "{said}");
    assert_eq!(st["running"], true, "{st}");

    // The daemon started in this terminal keeps its own log, which `daemon logs` reads.
    let log = home.join("state/daemon.log");
    assert!(log.exists(), "a terminal daemon keeps {}", log.display());
    let out = outpost(&dir, &home, &["logs", "-n", "200"], &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("connected"), "{said}");
    assert!(said.contains("run finished"), "{said}");
    assert!(!said.contains('\u{1b}'), "no colours in the file: {said}");

    // Stopped: status says so, and the log keeps how it ended.
    signal(daemon.child.id(), "TERM");
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_text());
    let st = status(&dir, &home);
    assert_eq!(
        (st["running"].clone(), st["connection"].clone()),
        (false.into(), Value::Null),
        "{st}"
    );
    assert!(
        !home.join("state/connection.json").exists(),
        "removed on a clean exit"
    );
    let kept = std::fs::read_to_string(&log).expect("the log");
    assert!(kept.contains("outpost: stopped"), "{kept}");
    let _ = std::fs::remove_dir_all(&dir);
}
