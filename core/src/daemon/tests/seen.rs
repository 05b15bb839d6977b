//! A run id runs at most once on a machine, whatever the server sends: repeats are refused
//! with `run_seen` while the run is held, after its result was acknowledged (for the
//! retention), and after a restart.

use super::*;
use crate::daemon::{SEEN_RETENTION, SeenRuns};

fn rejected_codes(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Transmit(bytes) => {
                let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
                (v["type"] == "run.reject").then(|| v["code"].as_str().unwrap().to_owned())
            }
            _ => None,
        })
        .collect()
}

fn executes(outputs: &[Output]) -> usize {
    outputs
        .iter()
        .filter(|o| matches!(o, Output::Command(Command::Execute(_))))
        .count()
}

/// Runs `run_id` through request, commit, result and ack.
fn run_to_ack(s: &mut Server, run_id: &str) {
    assert_eq!(sent(&s.request(run_id)), ["run.accept"]);
    let out = s.send(ServerFrame::RunCommit {
        run_id: run_id.into(),
    });
    assert_eq!(executes(&out), 1);
    s.input(Input::RunFinished {
        run_id: run_id.into(),
        result: exited(0, 1),
    });
    s.send(ServerFrame::RunAck {
        run_id: run_id.into(),
    });
    assert!(s.daemon.pending_results().is_empty());
}

#[test]
fn a_run_resent_after_its_ack_is_refused_and_never_runs_again() {
    let mut s = Server::ready(2);
    run_to_ack(&mut s, "r1");
    let out = s.request("r1");
    assert_eq!(rejected_codes(&out), ["run_seen"]);
    assert!(out.contains(&Output::Event(Event::RunRejected {
        run_id: "r1".into(),
        refusal: Refusal::RunSeen,
    })));
    let out = s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    assert_eq!(
        executes(&out),
        0,
        "the re-sent commit starts nothing: {out:?}"
    );
    assert_eq!(s.daemon.slots_used(), 0, "no slot is held for it");
}

#[test]
fn a_repeat_of_a_held_run_is_refused_and_the_held_run_goes_on() {
    let mut s = Server::ready(2);
    s.request("r1");
    assert_eq!(rejected_codes(&s.request("r1")), ["run_seen"], "accepted");
    let out = s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    assert_eq!(executes(&out), 1, "the held run still starts once");
    assert_eq!(rejected_codes(&s.request("r1")), ["run_seen"], "executing");
    s.input(Input::RunFinished {
        run_id: "r1".into(),
        result: exited(0, 1),
    });
    assert_eq!(
        rejected_codes(&s.request("r1")),
        ["run_seen"],
        "in the outbox"
    );
    assert_eq!(s.daemon.pending_results().len(), 1, "the result is kept");
}

/// Lets `d` pass with the server alive all along (a ping at the end of it).
fn pass(s: &mut Server, d: Duration) {
    s.elapsed += d;
    s.input(Input::ServerAlive);
}

#[test]
fn a_seen_run_is_refused_until_the_retention_has_passed_and_a_record_was_written() {
    let mut s = Server::ready(2);
    run_to_ack(&mut s, "r1");
    pass(&mut s, SEEN_RETENTION - Duration::from_secs(1));
    run_to_ack(&mut s, "r2");
    assert_eq!(rejected_codes(&s.request("r1")), ["run_seen"]);
    pass(&mut s, Duration::from_secs(2));
    // Forgetting happens with the next record (here: r3's start), as the fold does.
    run_to_ack(&mut s, "r3");
    assert_eq!(
        sent(&s.request("r1")),
        ["run.accept"],
        "forgotten after the retention"
    );
    assert_eq!(rejected_codes(&s.request("r2")), ["run_seen"]);
}

#[test]
fn seen_run_ids_survive_a_restart_through_the_records() {
    let mut s = Server::ready(2);
    let mut journal = Vec::new();
    for run_id in ["r1", "r2"] {
        assert_eq!(sent(&s.request(run_id)), ["run.accept"]);
        let mut out = s.send(ServerFrame::RunCommit {
            run_id: run_id.into(),
        });
        out.extend(s.input(Input::RunFinished {
            run_id: run_id.into(),
            result: exited(0, 1),
        }));
        out.extend(s.send(ServerFrame::RunAck {
            run_id: run_id.into(),
        }));
        journal.extend(out.into_iter().filter_map(|o| match o {
            Output::Persist(r) => Some(r),
            _ => None,
        }));
    }
    let mut folded = DaemonSnapshot::default();
    folded.replay(&journal);
    assert!(folded.seen.contains("r1") && folded.seen.contains("r2"));
    assert_eq!(
        folded.seen,
        s.daemon.snapshot().seen,
        "the fold equals the live set"
    );
    // The store keeps the set as rows beside the snapshot document.
    let rows: Vec<_> = folded.seen.rows().collect();
    let mut stored = DaemonSnapshot::decode(&folded.encode()).unwrap();
    stored.seen = SeenRuns::try_from(rows).unwrap();
    let mut restarted = Daemon::restore(
        DaemonConfig::default(),
        test_keys(),
        &stored,
        now_at(Duration::from_secs(60)),
    );
    let mut t = Server {
        daemon: {
            restarted
                .handle_input(
                    now_at(Duration::from_secs(60)),
                    Input::Connected {
                        session_id: SESSION.into(),
                    },
                )
                .unwrap();
            restarted
        },
        frames: FrameSigner::new(SESSION),
        key: test_root::frame_signer(),
        elapsed: Duration::from_secs(60),
    };
    t.drain();
    t.send(ServerFrame::Welcome {
        context_id: "ec_unit".into(),
        protocol: crate::wire::PROTOCOL_VERSION,
        grant_version: 1,
        grant: grant(8),
        heartbeat_secs: 15,
        features: Vec::new(),
    });
    assert!(t.daemon.is_ready());
    let out = t.request("r1");
    assert_eq!(rejected_codes(&out), ["run_seen"]);
    let out = t.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    assert_eq!(executes(&out), 0, "nothing runs twice across the restart");
}
