//! The daemon store gives back, after being reopened, the outbox and started runs it was
//! handed; a restored daemon then reports `pendingResults` and reaps what it had started.

use outpost_adapters::store::DaemonStore;
use outpost_core::daemon::{
    Command, Daemon, DaemonChange, DaemonConfig, DaemonRecord, Output, RESTARTED_REASON,
};
use outpost_core::keyset::KeySet;
use outpost_core::wire::{DaemonFrame, Grant, RunResult, RunStatus, Timing};

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

#[test]
fn an_outbox_survives_reopening_and_acknowledged_results_do_not() {
    let dir = std::env::temp_dir().join(format!("outpost-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("daemon.db");
    let _ = std::fs::remove_file(&path);
    {
        let (mut store, state) = DaemonStore::open(&path).unwrap();
        assert!(state.outbox.is_empty() && state.started.is_empty());
        store
            .append(&[
                record(DaemonChange::Grant {
                    version: 2,
                    grant: Grant::nothing(),
                }),
                record(DaemonChange::RunStarted {
                    run_id: "r1".into(),
                }),
                record(DaemonChange::RunStarted {
                    run_id: "r2".into(),
                }),
            ])
            .unwrap();
        store
            .append(&[record(DaemonChange::ResultPending {
                run_id: "r1".into(),
                frame: result_frame("r1"),
            })])
            .unwrap();
        store
            .append(&[
                record(DaemonChange::ResultPending {
                    run_id: "r3".into(),
                    frame: result_frame("r3"),
                }),
                record(DaemonChange::ResultRemoved {
                    run_id: "r3".into(),
                }),
            ])
            .unwrap();
        // Dropped without any shutdown step, as after kill -9.
    }
    for _ in 0..2 {
        let (_store, state) = DaemonStore::open(&path).unwrap();
        let outbox: Vec<&str> = state.outbox.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(outbox, ["r1"]);
        assert_eq!(state.started, ["r2"]);
        assert_eq!(state.grant.as_ref().map(|g| g.version), Some(2));
        assert_eq!(state.outbox[0].frame, result_frame("r1"));
        // The daemon restored from it holds r1's result for `pendingResults` and reaps r2.
        let now = outpost_adapters::clock::Clock::new().unwrap().now();
        let keys = KeySet::trusted(0, Vec::new()).unwrap();
        let mut daemon = Daemon::restore(DaemonConfig::default(), keys, &state, now);
        let pending: Vec<String> = daemon
            .pending_results()
            .into_iter()
            .map(|p| p.run_id)
            .collect();
        assert_eq!(pending, ["r1"]);
        let mut reaped = Vec::new();
        loop {
            match daemon.poll_output() {
                Output::Wait { .. } => break,
                Output::Command(Command::Cancel { run_id, reason }) => {
                    reaped.push((run_id, reason))
                }
                _ => {}
            }
        }
        assert_eq!(reaped, [("r2".to_owned(), RESTARTED_REASON.to_owned())]);
    }
    // A file that is not a store is a typed error.
    let bad = dir.join("not.db");
    std::fs::write(&bad, b"not sqlite at all, just text that is long enough").unwrap();
    assert_eq!(DaemonStore::open(&bad).unwrap_err().code(), "store_failed");
    std::fs::remove_dir_all(&dir).unwrap();
}
