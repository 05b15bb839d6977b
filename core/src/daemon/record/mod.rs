//! The daemon's durable state as records: what its home's store (the result outbox) writes,
//! and what [`Daemon::restore`] rebuilds a daemon from after a crash.
//!
//! Three things survive a daemon crash: the grant in force (with its version), the runs it
//! handed to an executor and has no result for yet (*started*: never started again, and
//! reaped after a restart), and the *outbox* of results not yet acknowledged. A result is
//! journaled before its `run.result` is sent and leaves the outbox on `run.ack`. Runs only
//! accepted or still fetching their bundle die with the connection: nothing ran.
//!
//! At the end of each input the daemon compares this state with what it last journaled and
//! queues one [`Output::Persist`] per difference, ahead of every other output of that input.
//! A [`DaemonSnapshot`] is the state at once; folding the journal into an empty snapshot gives
//! the same snapshot. This module never reads a clock and never writes anything itself;
//! `docs/RECORDS.md` documents the format.

mod seen;
#[cfg(test)]
mod tests;

use crate::ids::RunId;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::runs::RunState;
use super::{Command, Daemon, DaemonConfig, Output, PendingResult};
use crate::keyset::KeySet;
use crate::record::{self, RecordError};
use crate::time::{Now, WallAnchor};
use crate::wire::{DaemonFrame, Grant};

pub use seen::{SEEN_RETENTION, SEEN_RETENTION_MS, SEEN_RUNS_KEPT, SeenRow, SeenRuns};

const RECORD_TYPE: &str = "daemon.record";
const SNAPSHOT_TYPE: &str = "daemon.snapshot";

/// The reason the host is asked to cancel (reap) a run a crashed daemon had started.
pub const RESTARTED_REASON: &str = "daemon_restarted";

/// One change to the daemon's durable state, to be written before the next output is carried
/// out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonRecord {
    /// When it was written, wall-clock milliseconds.
    pub written_ms: u64,
    /// What changed; [`DaemonRecord::durability`] says how far it must be written.
    pub change: DaemonChange,
}

/// What a [`DaemonRecord`] says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum DaemonChange {
    /// The grant in force, replacing the one before (before [`Command::ApplyGrant`]).
    Grant {
        /// Its version.
        version: u64,
        /// The grant in force from now on, as `welcome` or `grant.update` carried it.
        grant: Grant,
    },
    /// A committed run is handed to an executor (before [`Command::Execute`]).
    RunStarted {
        /// The committed run being started; a restart after a crash reaps its processes.
        run_id: RunId,
    },
    /// A started run ended without a result (cancelled on revoke, or reaped after a restart
    /// once the server has heard the daemon's `hello`).
    RunDropped {
        /// The started run dropped; its id is then remembered as seen ([`SeenRuns`]).
        run_id: RunId,
    },
    /// A result entered the outbox (before its `run.result` is sent); the run is no longer
    /// *started*.
    ResultPending {
        /// The run whose result entered the outbox; it must match the `runId` inside `frame`.
        run_id: RunId,
        /// The `run.result` frame's JSON text, sent again on every reconnect until acknowledged.
        frame: String,
    },
    /// A result left the outbox (`run.ack`, or the machine was revoked).
    ResultRemoved {
        /// The run whose result left the outbox; its id is then remembered as seen ([`SeenRuns`]).
        run_id: RunId,
    },
}

/// How far a [`DaemonRecord`] must be written before the host carries on (RECORDS.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Durability {
    /// Handed to the operating system, so it survives the daemon's process (kill -9) but
    /// maybe not the machine. Enough for a record whose loss in a machine crash breaks no
    /// promise (see [`DaemonRecord::durability`]).
    Process,
    /// On disk (for SQLite: committed with `synchronous=FULL`): it survives the machine.
    Disk,
}

impl DaemonChange {
    /// The change's `kind`, as its record is written (`runStarted`, `resultPending`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            DaemonChange::Grant { .. } => "grant",
            DaemonChange::RunStarted { .. } => "runStarted",
            DaemonChange::RunDropped { .. } => "runDropped",
            DaemonChange::ResultPending { .. } => "resultPending",
            DaemonChange::ResultRemoved { .. } => "resultRemoved",
        }
    }

    /// The run this change finishes with for good — a `resultRemoved` or `runDropped` —
    /// whose id is then remembered as seen ([`SeenRuns`]).
    pub fn finished_run(&self) -> Option<&str> {
        match self {
            DaemonChange::ResultRemoved { run_id } | DaemonChange::RunDropped { run_id } => {
                Some(run_id)
            }
            _ => None,
        }
    }
}

impl DaemonRecord {
    /// How durable this record must be before the next output is carried out.
    ///
    /// A result in the outbox and the grant in force must survive the machine. The others
    /// need only survive the process, because the machine crash that could lose them makes
    /// them moot: `runStarted` and `runDropped` serve to reap a run's processes after a
    /// process crash (a machine crash leaves none, and the server never offers a run id
    /// again, so nothing runs twice); a lost `resultRemoved` only sends its result once more,
    /// which the server acknowledges without recording it again.
    pub fn durability(&self) -> Durability {
        match self.change {
            DaemonChange::Grant { .. } | DaemonChange::ResultPending { .. } => Durability::Disk,
            DaemonChange::RunStarted { .. }
            | DaemonChange::RunDropped { .. }
            | DaemonChange::ResultRemoved { .. } => Durability::Process,
        }
    }

    /// The record's bytes (one JSON document, see `docs/RECORDS.md`).
    pub fn encode(&self) -> Vec<u8> {
        record::encode(RECORD_TYPE, self.written_ms, &self.change)
    }

    /// Reads a record strictly; cut, altered or newer-version bytes give a typed error, and an
    /// outbox frame must be that run's `run.result`.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let (written_ms, change) = record::decode(RECORD_TYPE, bytes)?;
        if let DaemonChange::ResultPending { run_id, frame } = &change {
            check_result_frame(run_id, frame)?;
        }
        Ok(Self { written_ms, change })
    }
}

/// The grant a daemon held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantRow {
    /// Its version.
    pub version: u64,
    /// The grant as `welcome` or `grant.update` carried it.
    pub grant: Grant,
}

/// A result waiting for `run.ack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutboxRow {
    /// The run whose result waits for `run.ack`; one row per run.
    pub run_id: RunId,
    /// The `run.result` frame's JSON text.
    pub frame: String,
}

/// The daemon's durable state at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DaemonSnapshot {
    /// When it was taken (or when the last record folded into it was written).
    #[serde(skip)]
    pub written_ms: u64,
    /// The grant in force, if a `welcome` ever brought one.
    pub grant: Option<GrantRow>,
    /// Runs handed to an executor with no result yet, sorted.
    pub started: Vec<RunId>,
    /// Results not yet acknowledged, sorted by run id.
    pub outbox: Vec<OutboxRow>,
    /// Run ids finished with and still refused (`run_seen`). Not in the snapshot document: a
    /// store keeps them beside it ([`SeenRuns`]), and the records after it add to them.
    #[serde(skip)]
    pub seen: SeenRuns,
}

impl DaemonSnapshot {
    /// The snapshot's bytes (one JSON document, see `docs/RECORDS.md`).
    pub fn encode(&self) -> Vec<u8> {
        record::encode(SNAPSHOT_TYPE, self.written_ms, self)
    }

    /// Reads a snapshot strictly; cut, altered or newer-version bytes give a typed error.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let (written_ms, mut snapshot): (u64, Self) = record::decode(SNAPSHOT_TYPE, bytes)?;
        snapshot.written_ms = written_ms;
        if snapshot.started.windows(2).any(|w| w[0] >= w[1])
            || snapshot
                .outbox
                .windows(2)
                .any(|w| w[0].run_id >= w[1].run_id)
        {
            return Err(RecordError::Shape("ids out of order or repeated".into()));
        }
        for row in &snapshot.outbox {
            check_result_frame(&row.run_id, &row.frame)?;
        }
        Ok(snapshot)
    }

    /// Folds a journal into this snapshot, in the order the records were written.
    pub fn replay<'a>(&mut self, journal: impl IntoIterator<Item = &'a DaemonRecord>) {
        for record in journal {
            self.apply(record);
        }
    }

    /// Applies one record.
    pub fn apply(&mut self, record: &DaemonRecord) {
        self.written_ms = record.written_ms;
        self.seen
            .apply(record.change.finished_run(), record.written_ms);
        match &record.change {
            DaemonChange::Grant { version, grant } => {
                self.grant = Some(GrantRow {
                    version: *version,
                    grant: grant.clone(),
                });
            }
            DaemonChange::RunStarted { run_id } => {
                if let Err(at) = self.started.binary_search(run_id) {
                    self.started.insert(at, run_id.clone());
                }
            }
            DaemonChange::RunDropped { run_id } => self.unstart(run_id),
            DaemonChange::ResultPending { run_id, frame } => {
                self.unstart(run_id);
                let row = OutboxRow {
                    run_id: run_id.clone(),
                    frame: frame.clone(),
                };
                match self.outbox.binary_search_by(|r| r.run_id.cmp(run_id)) {
                    Ok(at) => self.outbox[at] = row,
                    Err(at) => self.outbox.insert(at, row),
                }
            }
            DaemonChange::ResultRemoved { run_id } => {
                if let Ok(at) = self.outbox.binary_search_by(|r| r.run_id.cmp(run_id)) {
                    self.outbox.remove(at);
                }
            }
        }
    }

    fn unstart(&mut self, run_id: &str) {
        if let Ok(at) = self.started.binary_search_by(|r| r.as_str().cmp(run_id)) {
            self.started.remove(at);
        }
    }
}

/// An outbox frame must be the `run.result` of its own run.
fn check_result_frame(run_id: &str, frame: &str) -> Result<(), RecordError> {
    match DaemonFrame::from_json(frame.as_bytes()) {
        Ok(DaemonFrame::RunResult { run_id: id, .. }) if id == run_id => Ok(()),
        Ok(_) => Err(RecordError::Shape(format!(
            "the outbox frame of {run_id:?} is not its run.result"
        ))),
        Err(e) => Err(RecordError::Shape(format!(
            "the outbox frame of {run_id:?} does not read: {e}"
        ))),
    }
}

/// What the daemon last journaled, and the runs a crashed predecessor had started.
pub(super) struct DaemonJournal {
    anchor: WallAnchor,
    grant_version: Option<u64>,
    started: BTreeSet<RunId>,
    outbox: BTreeSet<RunId>,
    /// Started before the restart: never accepted again; forgotten once the server heard
    /// `hello` (it ends them `lost`).
    abandoned: BTreeSet<RunId>,
}

impl DaemonJournal {
    /// The wall-clock time of `at` as this process's clocks map it (what records carry).
    pub(super) fn wall_ms(&self, at: crate::time::Instant) -> u64 {
        self.anchor.wall_ms(at)
    }

    /// A journal for a process whose clocks read `now`, whose outbox already holds `pending`.
    pub(super) fn new<'a>(now: Now, pending: impl IntoIterator<Item = &'a RunId>) -> Self {
        Self {
            anchor: WallAnchor::new(now),
            grant_version: None,
            started: BTreeSet::new(),
            outbox: pending.into_iter().cloned().collect(),
            abandoned: BTreeSet::new(),
        }
    }

    /// Whether `run_id` was started by the process before a restart.
    pub(super) fn started_before_restart(&self, run_id: &str) -> bool {
        self.abandoned.contains(run_id)
    }
}

impl Daemon {
    /// A daemon rebuilt in a new process from `snapshot` (a stored snapshot with the journal
    /// written after it folded in). It asks to connect at once, re-applies the stored grant
    /// ([`Command::ApplyGrant`]), and asks the host to reap every run it had started
    /// ([`Command::Cancel`] with reason [`RESTARTED_REASON`]): those never run again, and its
    /// `hello` lists none of them, so the server ends them `lost`. The outbox is delivered on
    /// every connection until acknowledged.
    pub fn restore(
        config: DaemonConfig,
        keys: KeySet,
        snapshot: &DaemonSnapshot,
        now: Now,
    ) -> Self {
        let pending = snapshot
            .outbox
            .iter()
            .map(|row| PendingResult {
                run_id: row.run_id.clone(),
                frame: row.frame.clone().into_bytes(),
            })
            .collect();
        let mut daemon = Daemon::with_pending_results(config, keys, now, pending);
        daemon.seen = snapshot.seen.clone();
        let abandoned: BTreeSet<RunId> = snapshot.started.iter().cloned().collect();
        daemon.journal.started = abandoned.clone();
        daemon.journal.abandoned = abandoned.clone();
        if let Some(row) = &snapshot.grant {
            daemon.grant = Some((row.version, row.grant.clone()));
            daemon.journal.grant_version = Some(row.version);
            daemon.command(Command::ApplyGrant {
                version: row.version,
                grant: row.grant.clone(),
            });
        }
        for run_id in abandoned {
            daemon.command(Command::Cancel {
                run_id,
                reason: RESTARTED_REASON.into(),
            });
        }
        daemon
    }

    /// The durable state now. Taken between inputs, after the host wrote every record polled
    /// so far, it equals the journal folded into an empty snapshot.
    pub fn snapshot(&self) -> DaemonSnapshot {
        DaemonSnapshot {
            written_ms: self.journal.anchor.wall_ms(self.now.instant),
            grant: self.grant.as_ref().map(|(version, grant)| GrantRow {
                version: *version,
                grant: grant.clone(),
            }),
            started: self.started_now().into_iter().collect(),
            outbox: self
                .pending
                .iter()
                .map(|(run_id, frame)| OutboxRow {
                    run_id: run_id.clone(),
                    frame: String::from_utf8_lossy(frame).into_owned(),
                })
                .collect(),
            seen: self.seen.clone(),
        }
    }

    fn started_now(&self) -> BTreeSet<RunId> {
        let mut started = self.journal.abandoned.clone();
        started.extend(
            self.runs
                .iter()
                .filter(|(_, r)| matches!(r.state, RunState::Executing { .. }))
                .map(|(id, _)| id.clone()),
        );
        started
    }

    /// Queues a record for every difference between the durable state and what was last
    /// journaled, ahead of the outputs of the input that started at `mark`.
    pub(super) fn flush_journal(&mut self, mark: usize) {
        if self.is_ready() {
            // The server heard `hello` without them: they end `lost` there.
            self.journal.abandoned.clear();
        }
        let mut changes = Vec::new();
        if let Some((version, grant)) = &self.grant
            && self.journal.grant_version != Some(*version)
        {
            self.journal.grant_version = Some(*version);
            changes.push(DaemonChange::Grant {
                version: *version,
                grant: grant.clone(),
            });
        }
        let started = self.started_now();
        for run_id in started.difference(&self.journal.started) {
            changes.push(DaemonChange::RunStarted {
                run_id: run_id.clone(),
            });
        }
        for (run_id, frame) in &self.pending {
            if !self.journal.outbox.contains(run_id) {
                changes.push(DaemonChange::ResultPending {
                    run_id: run_id.clone(),
                    frame: String::from_utf8_lossy(frame).into_owned(),
                });
            }
        }
        for run_id in self.journal.started.difference(&started) {
            if !self.pending.contains_key(run_id) {
                changes.push(DaemonChange::RunDropped {
                    run_id: run_id.clone(),
                });
            }
        }
        for run_id in &self.journal.outbox {
            if !self.pending.contains_key(run_id) {
                changes.push(DaemonChange::ResultRemoved {
                    run_id: run_id.clone(),
                });
            }
        }
        if changes.is_empty() {
            return;
        }
        self.journal.started = started;
        self.journal.outbox = self.pending.keys().cloned().collect();
        let written_ms = self.journal.anchor.wall_ms(self.now.instant);
        for change in &changes {
            // As the fold of these records will: see `SeenRuns`.
            self.seen.apply(change.finished_run(), written_ms);
        }
        let tail = self.outputs.split_off(mark.min(self.outputs.len()));
        self.outputs.extend(
            changes
                .into_iter()
                .map(|change| Output::Persist(DaemonRecord { written_ms, change })),
        );
        self.outputs.extend(tail);
    }
}
