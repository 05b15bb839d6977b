//! Signed self-update: the daemon takes a newer release its server publishes, and only one
//! that the root key it pins signed.
//!
//! A check ([`check`], shortly after the daemon first connects and every ~4 h ± 30 min)
//! fetches the release document,
//! verifies it against the pinned root, and for a strictly newer version for this OS and CPU
//! downloads the binary, refuses it unless its length and SHA-512 are the release's, stages
//! it in `state/updates/outpost-VERSION` (0700), and proves that `BINARY version --json`
//! prints that version. The driver then drains — runs in flight finish and their results are
//! acknowledged — and exits [`DaemonExit::Updated`](super::DaemonExit::Updated); the binary
//! hands over by exec ([`hand_over`]).
//!
//! The installed binary is never overwritten (it may be a package's, or a build folder's).
//! Instead every start goes through [`at_start`]: an older binary execs the newest proven
//! one, so a service manager that restarts the installed path runs the update. A staged
//! version on trial that exits before [`TRIAL`] (it never marked itself proven) falls back to
//! the binary that started it, and [`BAD_AFTER`] such starts mark it bad for good. Failed
//! checks back off from 1 h, doubling to 24 h; all of it lives in `state/update-state.json`.
//! Off with the local policy's `"autoUpdate": false` or `OUTPOST_DAEMON_AUTO_UPDATE=0`.
//!
//! This module owns those files and decisions. It never runs a capability and never
//! replaces a file it did not write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outpost_core::keyset::PinnedRoots;
use outpost_core::release::{Release, Version, verify_release};
use serde::{Deserialize, Serialize};

use super::home::write_private;
use outpost_adapters::http::{HttpError, SignedClient};

/// The update state's file name in the state folder.
pub const UPDATE_STATE_FILE: &str = "update-state.json";
/// The variable that switches updates off (`0`, `off`, `false`, `no`).
pub const AUTO_UPDATE_VAR: &str = "OUTPOST_DAEMON_AUTO_UPDATE";
/// How long a new version must run before it counts as proven.
pub const TRIAL: Duration = Duration::from_secs(60);
/// Quick exits after which a version is marked bad.
pub const BAD_AFTER: u32 = 3;
/// How long after the daemon first connects its first update check starts.
pub const FIRST_CHECK_DELAY: Duration = Duration::from_secs(2);

/// The time between checks, before jitter.
pub const CHECK_EVERY: Duration = Duration::from_secs(4 * 3600);
/// The jitter either side of [`CHECK_EVERY`].
pub const CHECK_JITTER: Duration = Duration::from_secs(30 * 60);
/// The first backoff after a failed check; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(3600);
/// The cap on the doubling backoff after failed checks: a day.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// The longest a hand-over waits for runs in flight and background host commands to finish;
/// then they are stopped (results stay in the outbox, for the new version to deliver) and the
/// update takes over anyway.
pub const HAND_OVER_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// A debug build takes the hand-over's limit from this variable, in milliseconds, when set
/// (the update tests' way to see runs and host commands outlast it); a release build ignores
/// it and always waits [`HAND_OVER_LIMIT`].
pub const TEST_HAND_OVER_VAR: &str = "OUTPOST_TEST_HAND_OVER_MS";

/// How long a hand-over waits for runs and host commands: [`HAND_OVER_LIMIT`] (a debug build:
/// [`TEST_HAND_OVER_VAR`] when set).
pub fn hand_over_limit() -> Duration {
    if cfg!(debug_assertions)
        && let Some(ms) = std::env::var(TEST_HAND_OVER_VAR)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
    {
        return Duration::from_millis(ms);
    }
    HAND_OVER_LIMIT
}

/// A debug build reads its version from this variable when set (the update tests' way to
/// run one build as two versions); a release build ignores it.
pub const TEST_VERSION_VAR: &str = "OUTPOST_TEST_VERSION";

/// The version this process runs as.
pub fn running_version() -> Version {
    if cfg!(debug_assertions)
        && let Some(v) = std::env::var(TEST_VERSION_VAR)
            .ok()
            .and_then(|t| Version::parse(&t).ok())
    {
        return v;
    }
    Version::parse(env!("CARGO_PKG_VERSION")).unwrap_or(Version(0, 0, 0))
}

/// Whether updates are on: neither the variable nor the local policy switched them off.
pub fn enabled(policy_says: Option<bool>) -> bool {
    let off_by_var = matches!(
        std::env::var(AUTO_UPDATE_VAR).as_deref(),
        Ok("0" | "off" | "false" | "no")
    );
    !off_by_var && policy_says != Some(false)
}

/// What `update-state.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateState {
    /// The newest staged version, which every older binary hands over to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Staged>,
    /// Versions that exited early [`BAD_AFTER`] times: never taken again.
    #[serde(default)]
    pub bad: Vec<String>,
    /// Early exits counted per version.
    #[serde(default)]
    pub quick_exits: BTreeMap<String, u32>,
    /// Consecutive failed checks.
    #[serde(default)]
    pub failures: u32,
    /// No check before this (Unix seconds), after a failure.
    #[serde(default)]
    pub next_check_at: u64,
    /// The code of the last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A staged binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Staged {
    /// Its version.
    pub version: String,
    /// Where it is.
    pub binary: PathBuf,
    /// Whether it ran for [`TRIAL`] once.
    pub proven: bool,
    /// Whether a start of it is on trial now.
    pub on_trial: bool,
    /// The version that staged it (the one to fall back to).
    pub from: String,
}

impl UpdateState {
    /// The state in `state_dir` (none yet: the default; unreadable: the default, logged).
    pub fn load(state_dir: &Path) -> UpdateState {
        let path = state_dir.join(UPDATE_STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), "the update state does not read ({e}); starting it afresh");
                UpdateState::default()
            }),
            Err(_) => UpdateState::default(),
        }
    }

    /// Writes it (0600, whole).
    pub fn save(&self, state_dir: &Path) -> Result<(), UpdateError> {
        let mut text = serde_json::to_vec_pretty(self).unwrap_or_default();
        text.push(b'\n');
        write_private(&state_dir.join(UPDATE_STATE_FILE), &text)
            .map_err(|e| UpdateError::Io(e.to_string()))
    }

    fn failed(&mut self, code: &str, now: u64) {
        self.failures = self.failures.saturating_add(1);
        let backoff = FIRST_BACKOFF
            .saturating_mul(1u32 << (self.failures - 1).min(5))
            .min(MAX_BACKOFF);
        self.next_check_at = now + backoff.as_secs();
        self.last_error = Some(code.to_owned());
    }
}

/// Why a check took nothing.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The server could not be asked, or refused.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The release or its binary is refused.
    #[error(transparent)]
    Release(#[from] outpost_core::release::ReleaseError),
    /// The staged binary does not prove its version.
    #[error("the staged binary does not say it is {want}: {reason}")]
    NotProven {
        /// The version the release names.
        want: String,
        /// What it said or why it could not run.
        reason: String,
    },
    /// A file of the update could not be written.
    #[error("writing the update: {0}")]
    Io(String),
}

impl UpdateError {
    /// The stable code: the HTTP or release error's, or `update_not_proven` / `update_unwritable`.
    pub fn code(&self) -> &str {
        match self {
            UpdateError::Http(e) => e.code(),
            UpdateError::Release(e) => e.code(),
            UpdateError::NotProven { .. } => "update_not_proven",
            UpdateError::Io(_) => "update_unwritable",
        }
    }
}

/// What a check found.
#[derive(Debug)]
pub enum Checked {
    /// Nothing newer (or updates are backing off).
    Nothing,
    /// A newer version is staged and proven to start: hand over once drained.
    Staged(Staged),
}

/// One check: fetch, verify, download, stage, prove. Records the outcome in the state file.
/// A check during the backoff after failed ones does nothing, unless `forced` (an operator
/// asked for it).
pub fn check(
    client: &SignedClient,
    roots: &PinnedRoots,
    state_dir: &Path,
    now: u64,
    forced: bool,
) -> Result<Checked, UpdateError> {
    let mut state = UpdateState::load(state_dir);
    if now < state.next_check_at && !forced {
        return Ok(Checked::Nothing);
    }
    let outcome = fetch_and_stage(client, roots, state_dir, &state);
    match &outcome {
        Ok(Checked::Staged(staged)) => {
            state.current = Some(staged.clone());
            state.failures = 0;
            state.next_check_at = 0;
            state.last_error = None;
        }
        Ok(Checked::Nothing) => {
            state.failures = 0;
            state.last_error = None;
        }
        // A server that publishes nothing is not a failure worth backing off for.
        Err(UpdateError::Http(e)) if e.code() == "no_release" => {}
        Err(e) => state.failed(e.code(), now),
    }
    state.save(state_dir)?;
    outcome
}

fn fetch_and_stage(
    client: &SignedClient,
    roots: &PinnedRoots,
    state_dir: &Path,
    state: &UpdateState,
) -> Result<Checked, UpdateError> {
    let document = client.daemon_release()?;
    let release: Release = verify_release(&document, roots)?;
    let running = running_version();
    let version = release.version.to_string();
    if !release.is_update_for(running, std::env::consts::OS, std::env::consts::ARCH)
        || state.bad.contains(&version)
        || state
            .current
            .as_ref()
            .is_some_and(|c| c.version == version && c.proven)
    {
        return Ok(Checked::Nothing);
    }
    tracing::info!(version = %version, size = release.size, "a signed daemon release is newer than this one; downloading it");
    let binary = client.daemon_binary(&release.sha512, release.size)?;
    release.check_binary(&binary)?;
    let dir = state_dir.join("updates");
    std::fs::create_dir_all(&dir).map_err(|e| UpdateError::Io(e.to_string()))?;
    let path = dir.join(format!("outpost-{version}"));
    write_executable(&path, &binary).map_err(|e| UpdateError::Io(e.to_string()))?;
    prove(&path, release.version)?;
    tracing::info!(version = %version, binary = %path.display(), "the update is verified, staged and proven to start");
    Ok(Checked::Staged(Staged {
        version,
        binary: path,
        proven: false,
        on_trial: false,
        from: running.to_string(),
    }))
}

fn write_executable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let temp = path.with_extension("partial");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path)
}

/// Runs `binary version --json` and checks it prints `want`.
fn prove(binary: &Path, want: Version) -> Result<(), UpdateError> {
    let not = |reason: String| UpdateError::NotProven {
        want: want.to_string(),
        reason,
    };
    let out = std::process::Command::new(binary)
        .args(["version", "--json"])
        .env_remove(TEST_VERSION_VAR)
        .output()
        .map_err(|e| not(e.to_string()))?;
    let said: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| not(format!("not JSON: {e}")))?;
    match said["version"].as_str() {
        Some(v) if v == want.to_string() => Ok(()),
        other => Err(not(format!("it said {other:?}"))),
    }
}

/// What a start should do.
#[derive(Debug, PartialEq, Eq)]
pub enum AtStart {
    /// Run this process as it is.
    Run,
    /// Exec this newer binary instead (the start is recorded as its trial when unproven).
    HandOver(PathBuf),
}

/// The launcher rule, at every start: an older binary hands over to the newest staged
/// version unless that version failed its trial; a version on trial that never proved itself
/// counts a quick exit here and falls back.
pub fn at_start(state_dir: &Path) -> AtStart {
    let mut state = UpdateState::load(state_dir);
    let running = running_version();
    let Some(current) = state.current.clone() else {
        return AtStart::Run;
    };
    let Ok(target) = Version::parse(&current.version) else {
        return AtStart::Run;
    };
    if target <= running {
        if target < running {
            // A newer binary was installed by hand: it wins, the staged one is moot.
            state.current = None;
            let _ = state.save(state_dir);
        }
        return AtStart::Run;
    }
    if current.on_trial && !current.proven {
        let exits = state
            .quick_exits
            .entry(current.version.clone())
            .or_insert(0);
        *exits += 1;
        let exits = *exits;
        if exits >= BAD_AFTER {
            tracing::error!(version = %current.version, exits, "the update exited early {exits} times: it is marked bad and never taken again");
            state.bad.push(current.version.clone());
        } else {
            tracing::warn!(version = %current.version, exits, "the update exited within its first minute: falling back to {running}");
        }
        state.current = None;
        let now = unix_now();
        state.failed("update_exited_early", now);
        let _ = state.save(state_dir);
        return AtStart::Run;
    }
    if !current.binary.exists() {
        state.current = None;
        let _ = state.save(state_dir);
        return AtStart::Run;
    }
    if !current.proven
        && let Some(c) = state.current.as_mut()
    {
        c.on_trial = true;
        if state.save(state_dir).is_err() {
            return AtStart::Run;
        }
    }
    AtStart::HandOver(current.binary)
}

/// Marks the running version proven (it ran for [`TRIAL`]).
pub fn mark_proven(state_dir: &Path) {
    let mut state = UpdateState::load(state_dir);
    let running = running_version().to_string();
    if let Some(c) = state.current.as_mut()
        && c.version == running
        && !c.proven
    {
        c.proven = true;
        c.on_trial = false;
        state.quick_exits.remove(&running);
        if state.save(state_dir).is_ok() {
            tracing::info!(version = %running, "the update ran its first minute: it is proven");
        }
    }
}

/// Replaces this process with `binary`, given this process's arguments. Returns only when
/// the exec failed.
pub fn hand_over(binary: &Path) -> std::io::Error {
    use std::os::unix::process::CommandExt as _;
    let mut args = std::env::args_os();
    let _ = args.next();
    tracing::info!(binary = %binary.display(), "handing over to the update");
    std::process::Command::new(binary)
        .args(args)
        .env_remove(TEST_VERSION_VAR)
        .exec()
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    outpost_adapters::clock::wall_now().0
}

/// When the next periodic check is due after `now`: [`CHECK_EVERY`] ± [`CHECK_JITTER`].
pub fn next_check_after(now: std::time::Instant, jitter_seed: u64) -> std::time::Instant {
    let spread = CHECK_JITTER.as_secs() * 2;
    let offset = jitter_seed % (spread + 1);
    now + CHECK_EVERY - CHECK_JITTER + Duration::from_secs(offset)
}

/// The driver's update timetable: when to check next, whether a check is out, and when the
/// running version has run long enough to be proven.
#[derive(Debug)]
pub(crate) struct Schedule {
    on: bool,
    /// `None` until the daemon first connected.
    next_check: Option<std::time::Instant>,
    checking: bool,
    /// A staged update is being handed over to (the daemon drains, then exits `Updated`):
    /// since when, and how long it may wait ([`hand_over_limit`]).
    hand_over: Option<(std::time::Instant, Duration)>,
    prove_at: Option<std::time::Instant>,
    seed: outpost_core::rng::SplitMix64,
    /// An operator asked for a check now: the next one ignores the backoff after failures.
    forced: bool,
}

impl Schedule {
    /// A timetable whose first check comes [`FIRST_CHECK_DELAY`] after the daemon first
    /// connects ([`Schedule::connected`]), when `on`.
    pub(crate) fn new(on: bool, seed: u64) -> Self {
        let now = std::time::Instant::now();
        Self {
            on,
            next_check: None,
            checking: false,
            hand_over: None,
            prove_at: Some(now + TRIAL),
            seed: outpost_core::rng::SplitMix64::new(seed),
            forced: false,
        }
    }

    /// The daemon is connected (each time it is): the first check is booked after the first.
    /// A check then comes after the runs that waited for this daemon were offered to it, so
    /// a hand-over's drain takes them along rather than turning them away.
    pub(crate) fn connected(&mut self) {
        if self.next_check.is_none() {
            self.next_check = Some(std::time::Instant::now() + FIRST_CHECK_DELAY);
        }
    }

    /// True when a check should start now (and books the one after it).
    pub(crate) fn check_due(&mut self) -> bool {
        let now = std::time::Instant::now();
        let due = self.next_check.is_some_and(|at| now >= at);
        if !self.on || self.checking || self.handing_over() || !due {
            return false;
        }
        self.checking = true;
        self.next_check = Some(next_check_after(now, self.seed.next_u64()));
        true
    }

    /// Whether updates are on here (the owner's policy and the variable allow them).
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// An operator asked for a check now: it starts at the driver's next look (or, when one
    /// runs already, that one answers), and it ignores the backoff after failed checks.
    pub(crate) fn check_now(&mut self) {
        self.next_check = Some(std::time::Instant::now());
        self.forced = true;
    }

    /// Whether the check [`Schedule::check_due`] just started was asked for by an operator
    /// (true once).
    pub(crate) fn take_forced(&mut self) -> bool {
        std::mem::take(&mut self.forced)
    }

    /// Begins handing over to a staged update, waiting at most `limit` for the drain.
    pub(crate) fn begin_hand_over(&mut self, limit: Duration) {
        self.hand_over = Some((std::time::Instant::now(), limit));
    }

    /// Whether a staged update is being handed over to.
    pub(crate) fn handing_over(&self) -> bool {
        self.hand_over.is_some()
    }

    /// True once a hand-over has waited its whole limit.
    pub(crate) fn hand_over_overdue(&self) -> bool {
        self.hand_over
            .is_some_and(|(since, limit)| since.elapsed() >= limit)
    }

    /// A check came back.
    pub(crate) fn checked(&mut self) {
        self.checking = false;
    }

    /// The next moment the driver must look at this timetable (a check or the proof due, a
    /// hand-over's limit), if any: the driver sleeps until then, not on a tick.
    pub(crate) fn next_due(&self) -> Option<std::time::Instant> {
        let check = self
            .next_check
            .filter(|_| self.on && !self.checking && !self.handing_over());
        let hand_over = self.hand_over.map(|(since, limit)| since + limit);
        [check, self.prove_at, hand_over]
            .into_iter()
            .flatten()
            .min()
    }

    /// True once, when this process has run for [`TRIAL`].
    pub(crate) fn prove_due(&mut self) -> bool {
        match self.prove_at {
            Some(at) if std::time::Instant::now() >= at => {
                self.prove_at = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_check_waits_for_the_first_connection() {
        let mut schedule = Schedule::new(true, 1);
        assert!(!schedule.check_due(), "not connected yet");
        schedule.connected();
        let booked = schedule.next_check;
        schedule.connected();
        assert_eq!(schedule.next_check, booked, "a reconnect books nothing new");
        schedule.next_check = Some(std::time::Instant::now());
        assert!(schedule.check_due());
        let mut off = Schedule::new(false, 1);
        off.connected();
        off.next_check = Some(std::time::Instant::now());
        assert!(!off.check_due(), "updates are off");
    }

    #[test]
    fn a_hand_over_is_overdue_only_after_its_limit() {
        let mut schedule = Schedule::new(true, 1);
        assert!(!schedule.hand_over_overdue(), "no hand-over yet");
        schedule.begin_hand_over(HAND_OVER_LIMIT);
        assert!(schedule.handing_over());
        assert!(!schedule.hand_over_overdue(), "24 h have not passed");
        assert!(!schedule.check_due(), "no check while handing over");
        schedule.begin_hand_over(Duration::ZERO);
        assert!(schedule.hand_over_overdue());
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("outpost-update-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn staged(d: &Path, version: &str) -> UpdateState {
        let binary = d.join(format!("outpost-{version}"));
        std::fs::write(&binary, b"#!/bin/sh\n").unwrap();
        UpdateState {
            current: Some(Staged {
                version: version.into(),
                binary,
                proven: false,
                on_trial: false,
                from: running_version().to_string(),
            }),
            ..UpdateState::default()
        }
    }

    #[test]
    fn an_older_binary_hands_over_and_a_version_that_exits_early_falls_back_then_turns_bad() {
        let d = dir("trial");
        let newer = Version(running_version().0 + 1, 0, 0).to_string();
        for attempt in 1..=BAD_AFTER {
            let mut state = UpdateState::load(&d);
            state.current = staged(&d, &newer).current;
            state.save(&d).unwrap();
            // The first start hands over and puts the new version on trial...
            assert!(matches!(at_start(&d), AtStart::HandOver(_)));
            assert!(UpdateState::load(&d).current.unwrap().on_trial);
            // ...which never marked itself proven: the next start falls back.
            assert_eq!(at_start(&d), AtStart::Run, "attempt {attempt}");
            let after = UpdateState::load(&d);
            assert!(after.current.is_none());
            assert_eq!(after.quick_exits[&newer], attempt);
            assert_eq!(after.bad.contains(&newer), attempt == BAD_AFTER);
            assert!(after.next_check_at > unix_now(), "a failed trial backs off");
        }
    }

    #[test]
    fn a_proven_update_is_run_on_every_start_and_a_newer_binary_by_hand_wins() {
        let d = dir("proven");
        let newer = Version(running_version().0 + 1, 0, 0).to_string();
        let mut state = staged(&d, &newer);
        if let Some(c) = state.current.as_mut() {
            c.proven = true;
        }
        state.save(&d).unwrap();
        for _ in 0..3 {
            assert!(matches!(at_start(&d), AtStart::HandOver(_)));
        }
        assert!(UpdateState::load(&d).quick_exits.is_empty());
        // A staged version older than this binary is dropped.
        let older = staged(&d, "0.0.1");
        older.save(&d).unwrap();
        assert_eq!(at_start(&d), AtStart::Run);
        assert!(UpdateState::load(&d).current.is_none());
    }

    #[test]
    fn failures_back_off_from_an_hour_doubling_to_a_day() {
        let mut state = UpdateState::default();
        let waits: Vec<u64> = (0..7)
            .map(|_| {
                state.failed("digest_mismatch", 1000);
                state.next_check_at - 1000
            })
            .collect();
        assert_eq!(waits, [3600, 7200, 14400, 28800, 57600, 86400, 86400]);
        assert_eq!(state.last_error.as_deref(), Some("digest_mismatch"));
    }
}
