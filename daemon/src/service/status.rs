//! `outpost daemon status` and `outpost daemon logs`.
//!
//! `status` reads `state/daemon.json` and probes `state/daemon.lock` (a daemon holds it for
//! its whole life): running or stopped, pid, version, who started it, how it stands with its
//! server (`state/connection.json`: connected since when, the last error, the next retry,
//! slots in use), the service's unit,
//! `stopped.json` when there is one, and whether the running daemon is older than this
//! binary — its version is lower, or its binary was replaced on disk since it started
//! (Linux: `/proc/PID/exe` reads `… (deleted)`). `logs` reads the user journal for a systemd
//! unit, and `state/daemon.log` otherwise (which a daemon started in a terminal keeps, and
//! the LaunchAgent writes). Neither ever
//! writes a file or signals the daemon.

use std::io::{Read as _, Seek as _, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::lock::{Holder, Launcher, LockState, probe};
use crate::status::{Connection, Running, Stopped, read_connection, read_running, read_stopped};
use serde::Serialize;

use super::{EXIT_NOT_RUNNING, Manager, ServiceError, Target, launchd, systemd};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Service {
    manager: Manager,
    name: String,
    path: PathBuf,
    installed: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    running: bool,
    pid: Option<u32>,
    version: Option<String>,
    manager: Option<Launcher>,
    started_at: Option<String>,
    binary: Option<String>,
    this_version: &'static str,
    outdated: bool,
    outdated_why: Option<String>,
    context_id: Option<String>,
    /// How the running daemon stands with its server.
    connection: Option<Connection>,
    state_dir: PathBuf,
    /// The holder line of a daemon that ended without cleaning up (killed, crashed).
    left_behind: Option<Holder>,
    stopped: Option<Stopped>,
    stopped_advice: Option<String>,
    service: Option<Service>,
}

/// `0.1.10` > `0.1.9`: numeric parts compared in order, anything after `-` or `+` ignored.
fn older(theirs: &str, ours: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> {
        v.split(['-', '+'])
            .next()
            .unwrap_or("")
            .split('.')
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    parts(theirs) < parts(ours)
}

fn outdated(running: &Running) -> Option<String> {
    let ours = env!("CARGO_PKG_VERSION");
    if older(&running.version, ours) {
        return Some(format!(
            "it runs outpost {} and this binary is {ours}",
            running.version
        ));
    }
    let exe = std::fs::read_link(format!("/proc/{}/exe", running.pid)).ok()?;
    exe.to_string_lossy().ends_with(" (deleted)").then(|| {
        format!(
            "its binary {} was replaced on disk after it started",
            running.binary.as_deref().unwrap_or("?")
        )
    })
}

fn report(target: &Target) -> Result<Report, ServiceError> {
    let state = &target.folders.state;
    let lock = probe(state)?;
    let file = read_running(state)?;
    let stopped = read_stopped(state)?;
    let context_id = target.joined().ok().map(|s| s.context_id);
    let (running, holder, left_behind) = match lock {
        LockState::Held { holder } => (true, holder, None),
        LockState::Free { left } => (false, None, left),
    };
    // daemon.json speaks for the holder when it names the same process.
    let file = file.filter(|f| running && holder.as_ref().is_none_or(|h| h.pid == f.pid));
    let why = file.as_ref().and_then(outdated);
    let pid = file
        .as_ref()
        .map(|f| f.pid)
        .or(holder.as_ref().map(|h| h.pid));
    // Only the running daemon's own file speaks for it.
    let connection = read_connection(state)
        .ok()
        .flatten()
        .filter(|c| running && Some(c.pid) == pid);
    let service = context_id.as_ref().and_then(|id| {
        let manager = Manager::native();
        let path = manager.service_path(id).ok()?;
        Some(Service {
            manager,
            name: manager.service_name(id),
            installed: path.exists(),
            path,
        })
    });
    Ok(Report {
        running,
        pid,
        version: file
            .as_ref()
            .map(|f| f.version.clone())
            .or(holder.as_ref().map(|h| h.version.clone())),
        manager: file
            .as_ref()
            .map(|f| f.manager)
            .or(holder.as_ref().map(|h| h.launcher)),
        started_at: file.as_ref().map(|f| f.started_at.clone()),
        binary: file.as_ref().and_then(|f| f.binary.clone()),
        this_version: env!("CARGO_PKG_VERSION"),
        outdated: why.is_some(),
        outdated_why: why,
        context_id,
        connection,
        state_dir: state.clone(),
        left_behind,
        stopped_advice: stopped
            .as_ref()
            .map(|s| s.advice(state, &target.folders.config)),
        stopped,
        service,
    })
}

/// `outpost daemon status`: exits 0 when a daemon runs on the home, 3 when not.
pub fn status(home: Option<&Path>, json: bool, out: &mut dyn Write) -> Result<u8, ServiceError> {
    let target = Target::resolve(home)?;
    let r = report(&target)?;
    if json {
        say!(out, "{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        print(&r, out);
    }
    Ok(if r.running { 0 } else { EXIT_NOT_RUNNING })
}

fn print(r: &Report, out: &mut dyn Write) {
    if r.running {
        say!(
            out,
            "running: pid {}, outpost {}, started from {}{}",
            r.pid.map_or("?".into(), |p| p.to_string()),
            r.version.as_deref().unwrap_or("?"),
            r.manager.map_or("?", Launcher::as_str),
            r.started_at
                .as_deref()
                .map(|at| format!(" at {at}"))
                .unwrap_or_default()
        );
    } else {
        say!(out, "stopped: no daemon runs on {}", r.state_dir.display());
    }
    if let Some(left) = &r.left_behind {
        say!(
            out,
            "the last daemon ({left}) ended without cleaning up (killed or crashed)"
        );
    }
    if let Some(c) = &r.connection {
        print_connection(c, out);
    }
    if let Some(id) = &r.context_id {
        say!(out, "context: {id}");
    }
    if let Some(s) = &r.service {
        say!(
            out,
            "service: {} {} ({})",
            s.manager.as_str(),
            s.name,
            if s.installed {
                format!("installed at {}", s.path.display())
            } else {
                "not installed".into()
            }
        );
    }
    if let Some(why) = &r.outdated_why {
        say!(
            out,
            "outdated: {why}; run `outpost daemon restart` to run this binary (outpost {})",
            r.this_version
        );
    }
    if let (Some(stopped), Some(advice)) = (&r.stopped, &r.stopped_advice) {
        say!(
            out,
            "stopped for good ({}, {}): {advice}",
            stopped.reason.as_str(),
            stopped.at
        );
    }
}

fn print_connection(c: &Connection, out: &mut dyn Write) {
    if c.connected {
        say!(out, "connected to {} since {}", c.server, c.since);
    } else {
        let retry = c
            .next_retry_at
            .as_deref()
            .map(|at| format!("; next try at {at}"))
            .unwrap_or_default();
        say!(
            out,
            "not connected to {} (since {}){retry}",
            c.server,
            c.since
        );
    }
    if let (Some(error), Some(at)) = (&c.last_error, &c.last_error_at) {
        say!(out, "last error at {at}: {error}");
    }
    say!(
        out,
        "slots: {} of {} in use{}",
        c.slots_in_use,
        c.slots,
        if c.draining {
            " (stopping: no new runs)"
        } else if c.paused {
            " (paused by an operator: no new runs until resumed)"
        } else {
            ""
        }
    );
}

/// `outpost daemon logs`.
pub fn logs(
    home: Option<&Path>,
    lines: u32,
    follow: bool,
    out: &mut dyn Write,
) -> Result<u8, ServiceError> {
    let target = Target::resolve(home)?;
    let file = target.folders.state.join(launchd::LOG_FILE);
    // A systemd unit logs to the journal; a daemon started in a terminal keeps its own file
    // (and launchd writes the LaunchAgent's there).
    let started_by = read_running(&target.folders.state)
        .ok()
        .flatten()
        .map(|r| r.manager);
    let unit = (Manager::native() == Manager::Systemd)
        .then(|| target.joined().ok())
        .flatten()
        .map(|joined| joined.context_id)
        .filter(|id| match started_by {
            Some(launcher) => launcher == Launcher::Systemd,
            // None runs: the installed unit's journal is where the service logs.
            None => Manager::Systemd.service_path(id).is_ok_and(|p| p.exists()),
        });
    if let Some(context_id) = unit {
        let name = systemd::unit_name(&context_id);
        if let Some(code) = systemd::journal(&name, lines, follow) {
            return Ok(u8::try_from(code).unwrap_or(1));
        }
        if !file.exists() {
            say!(
                out,
                "journalctl is not installed: a systemd unit logs to the user journal only, and no {} is there",
                file.display()
            );
            return Ok(1);
        }
    }
    tail(&file, lines, follow, out)
}

/// The last `lines` lines of `file`; with `follow`, then what is appended, until killed.
fn tail(file: &Path, lines: u32, follow: bool, out: &mut dyn Write) -> Result<u8, ServiceError> {
    let io = |e| ServiceError::Io {
        path: file.to_path_buf(),
        source: e,
    };
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            say!(out, "no log yet: {} is not there", file.display());
            return Ok(1);
        }
        Err(e) => return Err(io(e)),
    };
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(io)?;
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines as usize);
    for line in &all[from..] {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    if !follow {
        return Ok(0);
    }
    let mut at = f.stream_position().map_err(io)?;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let len = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        if len < at {
            at = 0; // truncated or rotated
        }
        if len > at {
            f.seek(SeekFrom::Start(at)).map_err(io)?;
            let mut more = Vec::new();
            f.read_to_end(&mut more).map_err(io)?;
            at += more.len() as u64;
            let _ = out.write_all(&more);
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::older;

    #[test]
    fn versions_compare_by_number() {
        assert!(older("0.1.9", "0.1.10"));
        assert!(older("0.0.1", "0.1.0"));
        assert!(!older("0.1.0", "0.1.0"));
        assert!(!older("0.2.0-rc1", "0.1.9"));
    }
}
