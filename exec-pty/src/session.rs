//! Finding and signalling what belongs to a terminal: the processes of its session (a job
//! control shell puts each job in a process group of its own, so the session, not one
//! group, is the unit) and any process that still has the terminal open after leaving the
//! session (`setsid`).
//!
//! Linux's `/proc` answers both questions; where it is missing, only the session leader's
//! process group is signalled. This module never reads a process's memory or environment,
//! and never signals the daemon itself.

use std::path::Path;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Hangs the session up, as a closed terminal would: `SIGHUP` then `SIGCONT` (so a stopped
/// job can act on it) to every process of session `sid`.
pub(crate) fn hang_up(sid: i32) {
    for signal in [Signal::SIGHUP, Signal::SIGCONT] {
        let _ = killpg(Pid::from_raw(sid), signal);
        for pid in session_members(sid) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

/// `SIGKILL` to every process of session `sid` and every process holding `tty` open, until
/// none is found (a few rounds, for processes forked meanwhile).
pub(crate) fn kill_remains(sid: i32, tty: Option<&Path>) {
    for _ in 0..4 {
        let _ = killpg(Pid::from_raw(sid), Signal::SIGKILL);
        let mut found = session_members(sid);
        if let Some(tty) = tty {
            found.extend(holders(tty));
        }
        if found.is_empty() {
            return;
        }
        for pid in found {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Live processes (not zombies) other than this one, with their `/proc/<pid>/stat` fields
/// after the command name.
fn processes() -> Vec<(i32, String)> {
    let me = i32::try_from(std::process::id()).unwrap_or(-1);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        if pid == me {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = stat.rsplit_once(')')?.1.trim_start().to_owned();
        (!after.starts_with('Z')).then_some((pid, after))
    })
    .collect()
}

/// The processes of session `sid`.
pub(crate) fn session_members(sid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, fields)| {
            // state ppid pgrp session …
            fields
                .split_whitespace()
                .nth(3)
                .and_then(|s| s.parse().ok())
                == Some(sid)
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// The processes with a file descriptor open on `tty`.
pub(crate) fn holders(tty: &Path) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(pid, _)| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(Result::ok)
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == tty))
            })
        })
        .map(|(pid, _)| pid)
        .collect()
}
