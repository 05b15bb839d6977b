//! The daemon store gives back, after being reopened, the outbox and started runs it was
//! handed; a restored daemon then reports `pendingResults` and reaps what it had started.

use outpost_core::daemon::{
    Command, Daemon, DaemonChange, DaemonConfig, DaemonRecord, Durability, Output, RESTARTED_REASON,
};
use outpost_core::keyset::KeySet;
use outpost_core::wire::{DaemonFrame, Grant, RunResult, RunStatus, Timing};
use outpost_daemon::store::DaemonStore;

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
        // The acknowledged r3 is remembered (`run_seen`), from the journal on the first
        // opening and from the table the compaction wrote on the second.
        assert!(state.seen.contains("r3") && !state.seen.contains("r1"));
        // The daemon restored from it holds r1's result for `pendingResults` and reaps r2.
        let now = outpost_adapters::clock::Clock::new().unwrap().now();
        let keys = KeySet::trusted(0, Vec::new()).unwrap();
        let mut daemon = Daemon::restore(DaemonConfig::default(), keys, &state, now);
        let pending: Vec<String> = daemon
            .pending_results()
            .into_iter()
            .map(|p| p.run_id.into_string())
            .collect();
        assert_eq!(pending, ["r1"]);
        let mut reaped = Vec::new();
        loop {
            match daemon.poll_output() {
                Output::Wait { .. } => break,
                Output::Command(Command::Cancel { run_id, reason }) => {
                    reaped.push((run_id.into_string(), reason))
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

#[test]
fn the_key_set_in_force_survives_reopening_until_a_new_join_forgets_it() {
    let dir = std::env::temp_dir().join(format!("outpost-store-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("daemon.db");
    let _ = std::fs::remove_file(&path);
    {
        let (mut store, _) = DaemonStore::open(&path).unwrap();
        assert_eq!(store.key_set().unwrap(), None);
        store.save_key_set(Some((2, "{\"v\":2}"))).unwrap();
        store.save_key_set(Some((3, "{\"v\":3}"))).unwrap();
    }
    let (mut store, _) = DaemonStore::open(&path).unwrap();
    assert_eq!(store.key_set().unwrap(), Some((3, "{\"v\":3}".to_owned())));
    store.save_key_set(None).unwrap();
    assert_eq!(store.key_set().unwrap(), None);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs test `test` of this binary again as a child with `var` naming `path`, waits (at most
/// a minute) for it to print a line ending in `said`, then kills it with `kill -9`.
fn write_then_kill_9(test: &str, var: &str, path: &std::path::Path, said: &'static str) {
    use std::io::BufRead as _;
    let mut writer = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(var, path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = writer.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The harness prints `test NAME ... ` first, on the same line.
        let saw = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.ends_with(said));
        let _ = tx.send(saw);
    });
    let saw = rx.recv_timeout(std::time::Duration::from_secs(60));
    if saw != Ok(true) {
        let _ = writer.kill();
        panic!("the writer of {test} did not say {said:?}: {saw:?}");
    }
    let killed = std::process::Command::new("kill")
        .args(["-9", &writer.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = writer.wait();
}

/// Records that need only survive the process (`runStarted`, `resultRemoved`: committed
/// without a flush) are there after a kill -9 of the process that wrote them, alone and
/// after a flushed one.
#[test]
fn records_kept_for_the_process_survive_a_kill_9() {
    const CHILD: &str = "OUTPOST_STORE_DURABILITY_CHILD";
    if let Some(path) = std::env::var_os(CHILD) {
        let (mut store, _) = DaemonStore::open(std::path::Path::new(&path)).unwrap();
        let started = |id: &str| record(DaemonChange::RunStarted { run_id: id.into() });
        assert_eq!(started("a").durability(), Durability::Process);
        store.append(&[started("r1")]).unwrap();
        let pending = record(DaemonChange::ResultPending {
            run_id: "r1".into(),
            frame: result_frame("r1"),
        });
        assert_eq!(pending.durability(), Durability::Disk);
        store.append(&[pending, started("r2")]).unwrap();
        store.append(&[started("r3")]).unwrap();
        let removed = record(DaemonChange::ResultRemoved {
            run_id: "r1".into(),
        });
        assert_eq!(removed.durability(), Durability::Process);
        store.append(&[removed]).unwrap();
        println!("appended");
        loop {
            std::thread::park();
        }
    }
    let dir = std::env::temp_dir().join(format!("outpost-store-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("daemon.db");
    let _ = std::fs::remove_file(&path);
    write_then_kill_9(
        "records_kept_for_the_process_survive_a_kill_9",
        CHILD,
        &path,
        "appended",
    );
    let (_store, state) = DaemonStore::open(&path).unwrap();
    assert_eq!(state.started, ["r2", "r3"]);
    assert!(state.outbox.is_empty(), "{:?}", state.outbox);
    std::fs::remove_dir_all(&dir).unwrap();
}

mod waits {
    //! The wait schedule over the real store, across a kill -9 of the process that wrote it.

    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use outpost_core::time::{Instant, Now, UnixTime};
    use outpost_core::wait::{
        CheckOutcome, Ending, Input, Output, Schedule, ScheduleConfig, WaitSpec,
    };
    use outpost_daemon::store::{DaemonStore, WaitWrite};

    const WALL0: u64 = 1_767_225_600;
    const CHILD: &str = "OUTPOST_WAIT_STORE_CHILD";

    fn now(ms: u64) -> Now {
        Now {
            instant: Instant::from_origin(Duration::from_millis(ms)),
            wall: UnixTime(WALL0 + ms / 1000),
        }
    }

    /// Feeds one input and writes what it saved, as the daemon's driver does; the checks it
    /// started come back.
    fn drive(s: &mut Schedule, store: &mut DaemonStore, at: u64, input: Input) -> Vec<String> {
        s.handle_input(now(at), input).unwrap();
        let mut outputs = Vec::new();
        loop {
            match s.poll_output() {
                Output::Wait { .. } => break,
                o => outputs.push(o),
            }
        }
        let written_ms = WALL0 * 1000 + at;
        let writes: Vec<WaitWrite<'_>> = outputs
            .iter()
            .filter_map(|o| match o {
                Output::Save(row) => Some(WaitWrite::Save { row, written_ms }),
                Output::Forget { wait_id } => Some(WaitWrite::Forget(wait_id)),
                _ => None,
            })
            .collect();
        store.write_waits(&writes).unwrap();
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Check { wait_id, .. } => Some(wait_id.to_string()),
                _ => None,
            })
            .collect()
    }

    fn spec(id: &str) -> WaitSpec {
        WaitSpec {
            wait_id: id.into(),
            requester: "ann".into(),
            source: "async ({ ctx }) => false".into(),
            interval_ms: 60_000,
            expires_at_ms: None,
            operator: false,
        }
    }

    fn checked(id: &str, outcome: CheckOutcome) -> Input {
        Input::Checked {
            wait_id: id.into(),
            check: 1,
            outcome,
        }
    }

    /// The child: registers three waits, checks one to `false`, matches one, leaves one
    /// running, says so and waits to be killed.
    fn child(path: &Path) -> ! {
        let (mut store, _) = DaemonStore::open(path).unwrap();
        let mut s = Schedule::new(ScheduleConfig::default(), now(0));
        for id in ["idle", "matched", "running"] {
            drive(&mut s, &mut store, 0, Input::Register(spec(id)));
        }
        drive(
            &mut s,
            &mut store,
            500,
            checked("idle", CheckOutcome::NotYet),
        );
        let matched = CheckOutcome::Matched {
            resume_text: "it is up".into(),
            payload: None,
            evidence: "[]".into(),
        };
        drive(&mut s, &mut store, 500, checked("matched", matched));
        println!("saved");
        loop {
            std::thread::park();
        }
    }

    #[test]
    fn waits_written_before_a_kill_9_resume_and_a_match_is_not_checked_again() {
        if let Some(path) = std::env::var_os(CHILD) {
            child(Path::new(&path));
        }
        let dir = std::env::temp_dir().join(format!("outpost-waits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("daemon.db");
        let _ = std::fs::remove_file(&path);
        super::write_then_kill_9(
            "waits::waits_written_before_a_kill_9_resume_and_a_match_is_not_checked_again",
            CHILD,
            &path,
            "saved",
        );

        let (mut store, _) = DaemonStore::open(&path).unwrap();
        let rows = store.waits().unwrap();
        let ids: Vec<&str> = rows.iter().map(|(_, r)| r.spec.wait_id.as_str()).collect();
        assert_eq!(ids, ["idle", "matched", "running"]);
        // A new process, 10 s later on the wall clock, its monotonic clock from zero.
        let mut s = Schedule::restore(ScheduleConfig::default(), now(10_000), rows);
        let started = drive(&mut s, &mut store, 10_000, Input::Connected);
        assert_eq!(
            started,
            ["running"],
            "the check that died with the writer runs again"
        );
        assert_eq!(s.view("idle").unwrap().checks, 1);
        assert!(matches!(
            s.view("matched").unwrap().ending,
            Some(Ending::Matched { .. })
        ));
        assert_eq!(
            drive(&mut s, &mut store, 60_499, Input::Timeout),
            Vec::<String>::new()
        );
        assert_eq!(
            drive(&mut s, &mut store, 60_500, Input::Timeout),
            ["idle"],
            "60 s after its check, counted across the restart"
        );
        drive(
            &mut s,
            &mut store,
            60_600,
            Input::Acked {
                wait_id: "matched".into(),
            },
        );
        let left: Vec<String> = store
            .waits()
            .unwrap()
            .into_iter()
            .map(|(_, r)| r.spec.wait_id.into_string())
            .collect();
        assert_eq!(
            left,
            ["idle", "running"],
            "an acknowledged ending leaves the store"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unreadable_wait_row_is_refused_naming_the_wait() {
        let dir = std::env::temp_dir().join(format!("outpost-waits-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("daemon.db");
        let _ = std::fs::remove_file(&path);
        drop(DaemonStore::open(&path).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO waits (wait_id, bytes) VALUES ('w9', X'7b2276223a')",
            [],
        )
        .unwrap();
        drop(conn);
        let (store, _) = DaemonStore::open(&path).unwrap();
        let err = store.waits().unwrap_err();
        assert_eq!(err.code(), "store_corrupt");
        assert!(err.to_string().contains("wait w9"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A new store in a folder of its own (folder, file, store) and a schedule at time 0.
    fn empty_store(tag: &str) -> (PathBuf, PathBuf, DaemonStore, Schedule) {
        let dir = std::env::temp_dir().join(format!("outpost-wait-{tag}-{}", std::process::id()));
        // Its -wal and -shm too: a crashed run's would be read into the new file.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("daemon.db");
        let (store, _) = DaemonStore::open(&path).unwrap();
        let s = Schedule::new(ScheduleConfig::default(), now(0));
        (dir, path, store, s)
    }

    #[test]
    fn saving_a_wait_again_changes_its_row_in_place_one_page_of_the_wal() {
        let (dir, path, mut store, mut s) = empty_store("inplace");
        for n in 0..200 {
            drive(
                &mut s,
                &mut store,
                0,
                Input::Register(spec(&format!("w{n:03}"))),
            );
        }
        // Another connection counts the WAL's frames: emptied first, then after one save.
        let counter = rusqlite::Connection::open(&path).unwrap();
        let checkpoint = |mode: &str| -> (i64, i64, i64) {
            let pragma = format!("PRAGMA wal_checkpoint({mode})");
            let read = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?));
            counter.query_row(&pragma, [], read).unwrap()
        };
        assert_eq!(
            checkpoint("TRUNCATE"),
            (0, 0, 0),
            "not busy, the WAL emptied"
        );
        let rows = store.waits().unwrap();
        let (written_ms, row) = &rows[117];
        let again = [WaitWrite::Save {
            row,
            written_ms: written_ms + 1,
        }];
        store.write_waits(&again).unwrap();
        assert_eq!(
            checkpoint("PASSIVE").1,
            1,
            "one page written: the row's own"
        );
        let (_, read) = &store.waits().unwrap()[117];
        assert_eq!(read, row);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_waits_events_survive_reopening_go_when_named_and_go_with_its_row() {
        use outpost_daemon::store::{WAIT_EVENTS_KEPT, WaitEventRow};
        let (dir, path, mut store, mut s) = empty_store("events");
        drive(&mut s, &mut store, 0, Input::Register(spec("kept")));
        drive(&mut s, &mut store, 0, Input::Register(spec("gone")));
        let event = |seq: u64, wait_id: &str| WaitEventRow {
            seq,
            wait_id: wait_id.into(),
            at_ms: WALL0 * 1000 + seq,
            kind: "check_ended".into(),
            detail: format!(r#"{{"check":{seq}}}"#),
        };
        let events: Vec<WaitEventRow> = (1..=150)
            .map(|n| event(n, if n % 2 == 0 { "kept" } else { "gone" }))
            .collect();
        let writes: Vec<WaitWrite<'_>> = events.iter().map(WaitWrite::Event).collect();
        store.write_waits(&writes).unwrap();
        // Only a wait with a row keeps events across a reopen; 150 events hold 75 each.
        let orphan = event(151, "never-registered");
        store.write_waits(&[WaitWrite::Event(&orphan)]).unwrap();
        drop(store);
        let (mut store, _) = DaemonStore::open(&path).unwrap();
        let read = store.wait_events().unwrap();
        assert_eq!(read.len(), 150, "the orphan went, the rest stayed");
        assert_eq!(read[1], event(2, "kept"));
        assert!(read.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");
        // Past the limit, the writer names the oldest of that wait, and they go in the same
        // commit; a number stored nowhere changes nothing.
        let more: Vec<WaitEventRow> = (200..260).map(|n| event(n, "kept")).collect();
        let mut writes: Vec<WaitWrite<'_>> = more.iter().map(WaitWrite::Event).collect();
        writes.extend((2..=70).step_by(2).map(WaitWrite::DropEvent));
        writes.push(WaitWrite::DropEvent(9_999));
        // An event added and named in the same write list goes too.
        let passing = event(300, "kept");
        writes.push(WaitWrite::Event(&passing));
        writes.push(WaitWrite::DropEvent(300));
        store.write_waits(&writes).unwrap();
        let kept: Vec<u64> = store
            .wait_events()
            .unwrap()
            .into_iter()
            .filter(|e| e.wait_id == "kept")
            .map(|e| e.seq)
            .collect();
        assert_eq!(kept.len(), WAIT_EVENTS_KEPT);
        assert_eq!(
            kept.first(),
            Some(&72),
            "the newest hundred: 72..150 even, then 200..259"
        );
        assert_eq!(kept.last(), Some(&259));
        // Forgetting a wait deletes its events with its row, in the same transaction.
        store.write_waits(&[WaitWrite::Forget("gone")]).unwrap();
        let left = store.wait_events().unwrap();
        assert!(left.iter().all(|e| e.wait_id == "kept"));
        assert_eq!(left.len(), WAIT_EVENTS_KEPT);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_store_and_its_wal_and_shm_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt as _;
    // The usual umask: SQLite alone would make these files 0644.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let dir = std::env::temp_dir().join(format!("outpost-store-mode-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("daemon.db");
    let (mut store, _) = DaemonStore::open(&path).unwrap();
    store
        .append(&[record(DaemonChange::RunStarted {
            run_id: "r1".into(),
        })])
        .unwrap();
    for name in ["daemon.db", "daemon.db-wal", "daemon.db-shm"] {
        let mode = std::fs::metadata(dir.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name} is {:o}", mode & 0o777);
    }
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
