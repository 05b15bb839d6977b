//! Warm helpers: one sandbox per network kind made ahead of its run, so a run that comes
//! skips the helper's start (an exec of the whole binary), the namespaces, PID 1 and the
//! system part of its root — the part of a sandboxed run's set-up that does not depend on
//! the run (see the helper's `--warm`).
//!
//! A warm helper serves one run and is never reused: the next one is started in the
//! background when that run is over. It waits on its stdin, so it costs no CPU while it
//! waits, and it ends, running nothing, when the process that started it ends. This file owns
//! the pool and the warm helpers' private folders; what a run may see is decided, and written
//! to the helper, by [`super::spawn_piped`].

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::SUBCOMMAND;

/// The network a warm helper was made with: the host's, or a namespace of its own with
/// loopback up (egress `none`, or an allowlist whose gate is bridged in when the run comes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Net {
    Host,
    Loopback,
}

impl Net {
    /// The kind a run with `egress` needs.
    pub(crate) fn of(egress: &outpost_core::wire::Egress) -> Net {
        match egress {
            outpost_core::wire::Egress::All => Net::Host,
            _ => Net::Loopback,
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Net::Host => "host",
            Net::Loopback => "loopback",
        }
    }
}

/// A warm helper: its process (stdin, the run's way in; stdout and stderr piped; a process
/// group of its own) and its private folder (`home`, `tmp`, `root`), which the run it serves
/// takes over.
#[derive(Debug)]
pub(crate) struct Warm {
    pub child: Child,
    pub scratch: PathBuf,
    /// The FIFO its PID 1 reports the run's end on (see [`super::report_fifo`]).
    pub report: Option<std::fs::File>,
}

type Key = (PathBuf, Net);

#[derive(Default)]
struct Pool {
    ready: BTreeMap<Key, Warm>,
    /// Being started now.
    filling: Vec<Key>,
    /// Set by [`retire`]: no helper is started any more.
    retired: bool,
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// Told whenever a helper being made is ready, or failed.
fn filled() -> &'static Condvar {
    static FILLED: OnceLock<Condvar> = OnceLock::new();
    FILLED.get_or_init(Condvar::new)
}

/// How long a run waits for a warm helper that is being made, rather than start a cold one
/// beside it (which would compete with it for the CPU, and be slower than the wait).
const WAIT_FOR_FILLING: Duration = Duration::from_millis(50);

/// The warm helper of `helper` for `net`, if one is ready or being made (then it waits for
/// it, at most [`WAIT_FOR_FILLING`]); the next is made ready by [`prime`] when the run it
/// serves is over.
pub(crate) fn take(helper: &Path, net: Net) -> Option<Warm> {
    let key = (helper.to_path_buf(), net);
    let until = Instant::now() + WAIT_FOR_FILLING;
    let mut pool = pool().lock().ok()?;
    loop {
        if let Some(warm) = pool.ready.remove(&key) {
            return Some(warm);
        }
        let left = until.saturating_duration_since(Instant::now());
        if !pool.filling.contains(&key) || left.is_zero() {
            return None;
        }
        pool = filled().wait_timeout(pool, left).ok()?.0;
    }
}

/// Whether a warm helper of `helper` for `net` is ready.
pub(crate) fn ready(helper: &Path, net: Net) -> bool {
    pool()
        .lock()
        .is_ok_and(|pool| pool.ready.contains_key(&(helper.to_path_buf(), net)))
}

/// Makes a warm helper of `helper` for `net` ready in the background, unless one is.
pub(crate) fn prime(helper: &Path, net: Net) {
    fill((helper.to_path_buf(), net));
}

/// Starts a warm helper for `key` on a thread of its own, unless one is ready or starting.
fn fill(key: Key) {
    {
        let Ok(mut pool) = pool().lock() else { return };
        if pool.retired || pool.ready.contains_key(&key) || pool.filling.contains(&key) {
            return;
        }
        pool.filling.push(key.clone());
    }
    let starting = key.clone();
    let started = std::thread::Builder::new()
        .name("outpost-warm-sandbox".into())
        .spawn(move || {
            let warm = start(&key.0, key.1);
            let Ok(mut pool) = pool().lock() else { return };
            pool.filling.retain(|k| *k != key);
            match warm {
                Ok(warm) if !pool.retired => {
                    pool.ready.insert(key, warm);
                }
                Ok(warm) => discard(warm),
                // The run that would have taken it starts its helper itself, and reports
                // what fails there.
                Err(_) => {}
            }
            filled().notify_all();
        });
    if started.is_err()
        && let Ok(mut pool) = pool().lock()
    {
        pool.filling.retain(|k| *k != starting);
        filled().notify_all();
    }
}

/// Held by a test to hold starts before they make anything (see the tests below).
#[cfg(test)]
static START_GATE: Mutex<()> = Mutex::new(());

/// Starts one warm helper.
fn start(helper: &Path, net: Net) -> Result<Warm, String> {
    #[cfg(test)]
    drop(START_GATE.lock());
    let scratch = super::scratch_folder("warm").map_err(|e| e.to_string())?;
    for dir in ["home", "tmp", "root"] {
        let made = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(scratch.join(dir));
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(format!("the warm helper's {dir}: {e}"));
        }
    }
    let report = super::report_fifo(&scratch);
    let mut command = Command::new(helper);
    command
        .args([SUBCOMMAND, "--warm", "--net", net.arg(), "--root"])
        .arg(scratch.join("root"));
    if let Some((path, _)) = &report {
        command.arg("--report").arg(path);
    }
    let child = command
        .current_dir("/")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    match child {
        Ok(child) => Ok(Warm {
            child,
            scratch,
            report: report.map(|(_, file)| file),
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&scratch);
            Err(format!("cannot start {}: {e}", helper.display()))
        }
    }
}

/// Ends a warm helper that will serve no run, and removes its folder.
pub(crate) fn discard(mut warm: Warm) {
    let _ = warm.child.kill();
    let _ = warm.child.wait();
    let _ = std::fs::remove_dir_all(&warm.scratch);
}

/// How long [`retire`] waits for the helpers being started to be ready, so that it ends them
/// and removes their folders too (a start takes milliseconds: an exec and a few folders).
const WAIT_FOR_STARTS: Duration = Duration::from_secs(5);

/// Ends every warm helper of this process and starts no more: for a daemon, a server or a
/// demo that is stopping. A helper still being started is waited for (at most
/// [`WAIT_FOR_STARTS`]) and ended by its own thread, which finds the pool retired, so no
/// folder is left behind. A process killed outright leaves its helpers' folders to
/// [`super::sweep_leftovers`] at the next start; the helpers themselves end with it.
pub fn retire() {
    // The pool holds no invariant a panic elsewhere could break half-way: a poisoned lock
    // is taken all the same, so that the helpers it holds are still ended.
    let mut pool = pool().lock().unwrap_or_else(PoisonError::into_inner);
    pool.retired = true;
    let ready = std::mem::take(&mut pool.ready);
    let until = Instant::now() + WAIT_FOR_STARTS;
    while !pool.filling.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        pool = filled()
            .wait_timeout(pool, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    drop(pool);
    for warm in ready.into_values() {
        discard(warm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folders of this process's warm helpers in the temporary folder.
    fn folders() -> Vec<String> {
        let marker = format!("outpost-run-warm-{}-", std::process::id());
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&marker))
            .collect()
    }

    #[test]
    fn a_helper_being_started_when_the_pool_retires_is_ended_with_its_folder() {
        // Any program stands in for the helper: the pool only starts it and waits on it.
        let helper = Path::new("/bin/sh");
        let gate = START_GATE.lock().unwrap();
        prime(helper, Net::Host);
        assert_eq!(pool().lock().unwrap().filling.len(), 1, "held at the gate");
        let retiring = std::thread::spawn(retire);
        // `retire` holds the pool's lock from marking it retired until it waits for the
        // start: once the mark shows, it waits.
        while !pool().lock().unwrap().retired {
            std::thread::yield_now();
        }
        drop(gate);
        retiring.join().unwrap();
        let retired = pool().lock().unwrap();
        assert!(retired.filling.is_empty() && retired.ready.is_empty());
        drop(retired);
        assert_eq!(folders(), Vec::<String>::new());
        // A retired pool starts no helper.
        prime(helper, Net::Loopback);
        assert!(pool().lock().unwrap().filling.is_empty());
        assert!(take(helper, Net::Loopback).is_none());
    }
}
