//! The run ids a daemon has finished with and still refuses (`run_seen`): a run id runs at
//! most once on a machine, whatever the server sends again.
//!
//! A run id is *seen* while the daemon holds its run (accepted, started, or with a result in
//! the outbox) — those the daemon's own tables answer — and, once its result was acknowledged
//! or the run dropped, for [`SEEN_RETENTION`] more, here. The set is part of the durable
//! state without a record of its own: the records `resultRemoved` and `runDropped` each put
//! their run id in it, to be forgotten [`SEEN_RETENTION`] after the record was written. A
//! store keeps the set beside the snapshot document rather than inside it (table `seen_runs`,
//! `docs/RECORDS.md` §4), so an earlier daemon — an update's fallback — still reads the
//! snapshot.
//!
//! It is bounded twice, by one rule that the live daemon and the fold of its journal apply
//! alike, record by record, so both give the same set: whenever a record written at `W` is
//! applied, ids whose time ran out (`untilMs <= W`) are forgotten, and beyond
//! [`SEEN_RUNS_KEPT`] ids the ones that run out first go (ties: the lowest run id). This
//! module never reads a clock.

use crate::ids::RunId;
use std::collections::{BTreeMap, BTreeSet};

/// How long a finished run id is refused after its result was acknowledged (or the run
/// dropped): the longest lease (a run's 24 h timeout plus the 30 s a server waits past the
/// deadline) and an hour's margin.
pub const SEEN_RETENTION_MS: u64 = 25 * 3600 * 1000;

/// [`SEEN_RETENTION_MS`] as a duration.
pub const SEEN_RETENTION: std::time::Duration = std::time::Duration::from_millis(SEEN_RETENTION_MS);

/// The most finished run ids a daemon remembers at once (at most about 10 MiB): a daemon
/// that finishes more runs than this within [`SEEN_RETENTION`] forgets the oldest first.
pub const SEEN_RUNS_KEPT: usize = 65_536;

/// One remembered run id, as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRow {
    /// The finished run's id (acknowledged or dropped), refused with `run_seen` if offered again.
    pub run_id: RunId,
    /// Until when (wall-clock milliseconds) a request for it is refused.
    pub until_ms: u64,
}

/// Finished run ids, each refused until its time runs out. A store writes it as
/// [`SeenRow`]s (sorted by run id) and reads it back with `SeenRuns::try_from`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenRuns {
    by_id: BTreeMap<RunId, u64>,
    by_time: BTreeSet<(u64, RunId)>,
}

impl SeenRuns {
    /// Whether `run_id` is remembered.
    pub fn contains(&self, run_id: &str) -> bool {
        self.by_id.contains_key(run_id)
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Applies a record written at `written_ms`: remembers `finished` (the run id a
    /// `resultRemoved` or `runDropped` names) for [`SEEN_RETENTION_MS`], then forgets what ran
    /// out at `written_ms` and what is beyond [`SEEN_RUNS_KEPT`].
    pub fn apply(&mut self, finished: Option<&str>, written_ms: u64) {
        if let Some(run_id) = finished {
            self.insert(run_id.into(), written_ms.saturating_add(SEEN_RETENTION_MS));
        }
        while let Some((until, _)) = self.by_time.first()
            && (*until <= written_ms || self.by_time.len() > SEEN_RUNS_KEPT)
        {
            if let Some((_, run_id)) = self.by_time.pop_first() {
                self.by_id.remove(&run_id);
            }
        }
    }

    fn insert(&mut self, run_id: RunId, until_ms: u64) {
        if let Some(old) = self.by_id.insert(run_id.clone(), until_ms) {
            self.by_time.remove(&(old, run_id.clone()));
        }
        self.by_time.insert((until_ms, run_id));
    }
}

impl SeenRuns {
    /// The remembered ids, sorted by run id.
    pub fn rows(&self) -> impl Iterator<Item = SeenRow> + '_ {
        self.by_id.iter().map(|(run_id, until_ms)| SeenRow {
            run_id: run_id.clone(),
            until_ms: *until_ms,
        })
    }
}

impl TryFrom<Vec<SeenRow>> for SeenRuns {
    type Error = String;

    fn try_from(rows: Vec<SeenRow>) -> Result<Self, String> {
        if rows.windows(2).any(|w| w[0].run_id >= w[1].run_id) {
            return Err("seen run ids out of order or repeated".into());
        }
        if rows.len() > SEEN_RUNS_KEPT {
            return Err(format!("more than {SEEN_RUNS_KEPT} seen run ids"));
        }
        let mut seen = SeenRuns::default();
        for row in rows {
            seen.insert(row.run_id, row.until_ms);
        }
        Ok(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_remembered_for_the_retention_then_forgotten_by_a_later_record() {
        let mut seen = SeenRuns::default();
        seen.apply(Some("r1"), 1_000);
        assert!(seen.contains("r1"));
        // A record just before the time runs out keeps it; one at the time forgets it.
        seen.apply(None, 1_000 + SEEN_RETENTION_MS - 1);
        assert!(seen.contains("r1"));
        seen.apply(None, 1_000 + SEEN_RETENTION_MS);
        assert!(!seen.contains("r1"));
    }

    #[test]
    fn beyond_the_cap_the_first_to_run_out_goes_first() {
        let mut seen = SeenRuns::default();
        for i in 0..SEEN_RUNS_KEPT as u64 + 2 {
            seen.apply(Some(&format!("run_{i:06}")), i);
        }
        assert_eq!(seen.len(), SEEN_RUNS_KEPT);
        assert!(!seen.contains("run_000000") && !seen.contains("run_000001"));
        assert!(seen.contains("run_000002"));
    }

    #[test]
    fn the_stored_form_is_sorted_and_reads_back_the_same() {
        let mut seen = SeenRuns::default();
        seen.apply(Some("b"), 5);
        seen.apply(Some("a"), 7);
        let rows: Vec<SeenRow> = seen.rows().collect();
        assert_eq!(rows[0].run_id, "a");
        assert_eq!(SeenRuns::try_from(rows), Ok(seen));
        let unsorted = vec![
            SeenRow {
                run_id: "b".into(),
                until_ms: 1,
            },
            SeenRow {
                run_id: "a".into(),
                until_ms: 1,
            },
        ];
        assert!(SeenRuns::try_from(unsorted).is_err());
    }
}
