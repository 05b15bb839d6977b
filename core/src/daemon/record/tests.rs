//! The daemon's records: the fold, the strict reader, and a restore that never re-runs.

use crate::ids::RunId;
use std::time::Duration;

use super::*;
use crate::sim::{now_at, test_keys};
use crate::wire::{RunResult, RunStatus, Timing};

fn result_frame(run_id: &str) -> String {
    let frame = DaemonFrame::RunResult {
        run_id: run_id.into(),
        result: RunResult {
            status: RunStatus::Exited,
            exit_code: Some(0),
            signal: None,
            stdout: "hi\n".into(),
            stderr: String::new(),
            truncated: false,
            timing: Timing::default(),
            error: None,
            egress_denied: Vec::new(),
        },
    };
    String::from_utf8(frame.to_json()).unwrap()
}

fn record(change: DaemonChange) -> DaemonRecord {
    DaemonRecord {
        written_ms: 1_767_225_600_000,
        change,
    }
}

fn journal() -> Vec<DaemonRecord> {
    vec![
        record(DaemonChange::Grant {
            version: 3,
            grant: Grant::nothing(),
        }),
        record(DaemonChange::RunStarted {
            run_id: "a.1".into(),
        }),
        record(DaemonChange::RunStarted {
            run_id: "b.1".into(),
        }),
        record(DaemonChange::RunStarted {
            run_id: "c.1".into(),
        }),
        record(DaemonChange::ResultPending {
            run_id: "a.1".into(),
            frame: result_frame("a.1"),
        }),
        record(DaemonChange::RunDropped {
            run_id: "c.1".into(),
        }),
        record(DaemonChange::ResultPending {
            run_id: "d.1".into(),
            frame: result_frame("d.1"),
        }),
        record(DaemonChange::ResultRemoved {
            run_id: "d.1".into(),
        }),
    ]
}

#[test]
fn the_journal_folds_into_grant_started_runs_and_outbox() {
    let mut state = DaemonSnapshot::default();
    state.replay(&journal());
    assert_eq!(state.grant.as_ref().map(|g| g.version), Some(3));
    assert_eq!(state.started, vec!["b.1".to_owned()]);
    let outbox: Vec<&str> = state.outbox.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(outbox, vec!["a.1"]);
    assert!(
        state.seen.contains("c.1") && state.seen.contains("d.1"),
        "acknowledged and dropped runs are remembered"
    );
    assert!(!state.seen.contains("a.1") && !state.seen.contains("b.1"));
}

#[test]
fn each_changes_kind_is_the_kind_its_record_is_written_with() {
    let mut kinds: Vec<&str> = Vec::new();
    for r in journal() {
        let written = serde_json::to_value(&r.change).expect("a change encodes");
        assert_eq!(written["kind"], r.change.kind(), "{:?}", r.change);
        kinds.push(r.change.kind());
    }
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        5,
        "the journal holds every kind of change: {kinds:?}"
    );
}

#[test]
fn records_and_snapshots_round_trip_and_refuse_what_was_tampered_with() {
    for r in journal() {
        let bytes = r.encode();
        assert_eq!(DaemonRecord::decode(&bytes), Ok(r));
        for end in 0..bytes.len() {
            assert!(DaemonRecord::decode(&bytes[..end]).is_err());
        }
        for at in 0..bytes.len() {
            let mut tampered = bytes.clone();
            tampered[at] = tampered[at].wrapping_add(1);
            let _ = DaemonRecord::decode(&tampered);
        }
    }
    let mut state = DaemonSnapshot::default();
    state.replay(&journal());
    // The seen run ids travel beside the document (a store's own table), not in it.
    let mut read = DaemonSnapshot::decode(&state.encode()).unwrap();
    assert!(read.seen.is_empty() && !state.seen.is_empty());
    read.seen = SeenRuns::try_from(state.seen.rows().collect::<Vec<_>>()).unwrap();
    assert_eq!(read, state);
    let other = record(DaemonChange::ResultPending {
        run_id: "x.1".into(),
        frame: result_frame("y.1"),
    });
    assert!(matches!(
        DaemonRecord::decode(&other.encode()),
        Err(RecordError::Shape(_))
    ));
    let mut unsorted = state.clone();
    unsorted.started = vec!["z".into(), "a".into()];
    assert!(matches!(
        DaemonSnapshot::decode(&unsorted.encode()),
        Err(RecordError::Shape(_))
    ));
    assert!(matches!(
        DaemonSnapshot::decode(&journal()[0].encode()),
        Err(RecordError::WrongType { .. })
    ));
}

#[test]
fn a_restored_daemon_reaps_and_never_reruns_what_it_had_started_and_resends_its_outbox() {
    let mut state = DaemonSnapshot::default();
    state.replay(&journal());
    let now = now_at(Duration::from_secs(1));
    let mut daemon = Daemon::restore(DaemonConfig::default(), test_keys(), &state, now);
    let mut commands = Vec::new();
    loop {
        match daemon.poll_output() {
            Output::Wait { .. } => break,
            Output::Command(c) => commands.push(c),
            other => panic!("nothing else before connecting: {other:?}"),
        }
    }
    assert!(commands.contains(&Command::Connect));
    assert!(commands.contains(&Command::ApplyGrant {
        version: 3,
        grant: Grant::nothing(),
    }));
    assert!(commands.contains(&Command::Cancel {
        run_id: "b.1".into(),
        reason: RESTARTED_REASON.into(),
    }));
    assert!(daemon.journal.started_before_restart("b.1"));
    let pending: Vec<RunId> = daemon
        .pending_results()
        .into_iter()
        .map(|p| p.run_id)
        .collect();
    assert_eq!(pending, vec![RunId::new("a.1")]);
    let mut snapshot = daemon.snapshot();
    snapshot.written_ms = state.written_ms;
    assert_eq!(snapshot, state, "a restored daemon's state is what it read");
}
