//! An idle connected daemon sleeps: its driver waits for the core's next timer or an event
//! (a stop, a policy edit, a frame), the wasm engine's epoch thread sleeps while no module
//! runs, and the blocking host's socket thread has no poll timeout. What is left is the
//! heartbeat.
//!
//! Counted, not timed: the context switches of every thread of the real `outpost daemon`
//! process (`/proc/PID/task/*/status`) over a window, on the tokio and the blocking host.
//! Before this was made event-driven an idle daemon made about 108 a second; the heartbeat
//! (15 s here) needs a handful per beat. Then it is woken by what it waits for, well before
//! its next heartbeat: an edit of the owner's policy file, and SIGTERM.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Daemon, Server, temp_dir, wait_for_explained};

/// How long the daemon is watched.
const WINDOW: Duration = Duration::from_secs(10);

/// The most context switches per second an idle daemon may make here: a heartbeat every
/// 15 s costs a few; a 100 ms poll anywhere would cost ten a second.
const MOST_PER_SECOND: f64 = 1.0;

/// Voluntary and involuntary context switches of each thread of `pid` so far, by thread id.
fn switches(pid: u32) -> BTreeMap<String, u64> {
    let mut by_thread = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the daemon runs") {
        let task = task.unwrap();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let made = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum::<u64>();
        by_thread.insert(task.file_name().to_string_lossy().into_owned(), made);
    }
    by_thread
}

/// The switches made between two readings: by the threads there at the second (a thread
/// that ended in between is not counted; an idle daemon starts and ends none).
fn made_between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    after
        .iter()
        .map(|(tid, n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

fn idle_daemon_sleeps(host: &str) {
    let dir = temp_dir(&format!("idle-{host}"));
    let server = Server::start(&dir.join("server"), 0);
    let daemon = Daemon::start(&dir.join("home"), "idle", Some(&server.join), host);
    server.wait_context("idle", "the daemon to come online", |c| c["online"] == true);
    // Its start-up is over once the first update check has come back (this server publishes
    // no release): from then on nothing is due but the heartbeat.
    wait_for_explained(
        "the daemon's first update check",
        || {
            daemon
                .log_text()
                .contains("the update check took nothing")
                .then_some(())
        },
        || daemon.log_tail(20),
    );
    let before = switches(daemon.child.id());
    // Time itself: the daemon is left idle for the window whose wake-ups are counted.
    std::thread::sleep(WINDOW);
    let made = made_between(&before, &switches(daemon.child.id()));
    let per_second = made as f64 / WINDOW.as_secs_f64();
    let rss_kib = std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    // The figures themselves, for the record (`--nocapture` shows them; this is a test
    // build, so its memory is above a release build's).
    eprintln!(
        "an idle {host} daemon: {made} context switches in {} s ({per_second:.2}/s), {rss_kib} KiB resident",
        WINDOW.as_secs()
    );
    assert!(
        per_second <= MOST_PER_SECOND,
        "an idle {host} daemon made {made} context switches in {} s ({per_second:.1}/s)\n{}",
        WINDOW.as_secs(),
        daemon.log_tail(20)
    );
    // Asleep, not gone: the server still has it online.
    server.wait_context("idle", "the daemon to be online still", |c| {
        c["online"] == true
    });
    // Asleep, yet woken by what it waits for, well before its next heartbeat would wake it:
    // the owner's policy edited in place of the CLI (a new file renamed over the old one)...
    let home = dir.join("home");
    let file = home.join("config/policy.json");
    let mut policy: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("policy.json")).expect("JSON");
    policy["commandsEnabled"] = true.into();
    let edited = Instant::now();
    std::fs::write(home.join("config/policy.json.new"), policy.to_string()).expect("write");
    std::fs::rename(home.join("config/policy.json.new"), &file).expect("rename");
    wait_for_explained(
        "the daemon to notice the owner's policy edit",
        || {
            daemon
                .log_text()
                .contains("the owner turned host commands on")
                .then_some(())
        },
        || daemon.log_tail(20),
    );
    assert!(
        edited.elapsed() < WOKEN_WITHIN,
        "the policy edit was noticed after {:?}, not at once",
        edited.elapsed()
    );
    // ...and a stop (SIGTERM drains: nothing runs, so it ends at once, exit 0).
    let mut daemon = daemon;
    let stopped = Instant::now();
    let signal = Command::new("kill")
        .args(["-TERM", &daemon.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(signal.success());
    assert_eq!(daemon.wait_exit(), 0, "{}", daemon.log_tail(20));
    assert!(
        stopped.elapsed() < WOKEN_WITHIN,
        "SIGTERM was acted on after {:?}, not at once",
        stopped.elapsed()
    );
}

/// Well under the 15 s heartbeat: what is noticed this soon woke the daemon itself.
const WOKEN_WITHIN: Duration = Duration::from_secs(10);

#[test]
fn an_idle_daemon_on_tokio_sleeps_between_heartbeats() {
    idle_daemon_sleeps("tokio");
}

#[test]
fn an_idle_daemon_on_the_blocking_host_sleeps_between_heartbeats() {
    idle_daemon_sleeps("blocking");
}
