//! Condition waits through the daemon: `wait.*` frames in, rows, checks and reports out.

use super::*;
use crate::wait::{CheckError, CheckOutcome, WaitRow};

fn register(s: &mut Server, wait_id: &str, interval_ms: u64) -> Vec<Output> {
    s.send(ServerFrame::WaitRegister {
        wait_id: wait_id.into(),
        requester: "alice".into(),
        source: "async () => false".into(),
        interval_ms,
        expires_at_ms: None,
        operator: true,
    })
}

fn checks(outputs: &[Output]) -> Vec<(String, u64)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Command(Command::CheckWait { wait_id, check, .. }) => {
                Some((wait_id.to_string(), *check))
            }
            _ => None,
        })
        .collect()
}

fn saved(outputs: &[Output]) -> Vec<WaitRow> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::SaveWait { row, .. } => Some((**row).clone()),
            _ => None,
        })
        .collect()
}

fn matched() -> CheckOutcome {
    CheckOutcome::Matched {
        resume_text: "healthy".into(),
        payload: Some(r#"{"status":200}"#.into()),
        evidence: "[]".into(),
    }
}

fn frame_json(outputs: &[Output], kind: &str) -> Vec<serde_json::Value> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Transmit(bytes) => serde_json::from_slice::<serde_json::Value>(bytes).ok(),
            _ => None,
        })
        .filter(|v| v["type"] == kind)
        .collect()
}

impl Server {
    fn checked(&mut self, wait_id: &str, check: u64, outcome: CheckOutcome) -> Vec<Output> {
        self.input(Input::WaitChecked {
            wait_id: wait_id.into(),
            check,
            outcome,
        })
    }

    /// Cuts the connection and lets the daemon come back on a new session.
    fn reconnect(&mut self, session: &str) -> Vec<Output> {
        self.input(Input::Disconnected { code: Some(1006) });
        for _ in 0..600 {
            let out = self.advance(Duration::from_millis(500));
            if out.contains(&Output::Command(Command::Connect)) {
                self.input(Input::Connected {
                    session_id: session.into(),
                });
                self.frames = FrameSigner::new(session);
                return self.send(ServerFrame::Welcome {
                    context_id: "ec_unit".into(),
                    protocol: crate::wire::PROTOCOL_VERSION,
                    grant_version: 1,
                    grant: grant(8),
                    heartbeat_secs: 15,
                    features: Vec::new(),
                });
            }
        }
        panic!("the daemon never reconnected");
    }
}

#[test]
fn a_registered_wait_is_saved_before_its_first_check_and_checked_again_after_its_interval() {
    let mut s = Server::ready(2);
    let out = register(&mut s, "w1", 2_000);
    assert!(
        matches!(&out[..], [
            Output::SaveWait { row, .. },
            Output::Command(Command::CheckWait { wait_id, check: 1, requester, .. }),
        ] if row.spec.wait_id == "w1" && wait_id == "w1" && requester == "alice"),
        "the row is written before the check starts: {out:?}"
    );
    let out = s.checked("w1", 1, CheckOutcome::NotYet);
    assert_eq!(saved(&out).len(), 1, "the check count is saved: {out:?}");
    let status = frame_json(&out, "wait.status");
    assert_eq!(status.len(), 1, "the server hears the progress: {out:?}");
    assert_eq!(status[0]["checks"], 1);
    assert_eq!(status[0]["consecutiveErrors"], 0);
    assert!(status[0]["nextCheckAtMs"].as_u64().is_some());
    assert!(checks(&out).is_empty());
    assert!(checks(&s.advance(Duration::from_millis(1_900))).is_empty());
    assert_eq!(
        checks(&s.advance(Duration::from_millis(100))),
        [("w1".to_owned(), 2)]
    );
    assert!(
        register(&mut s, "w1", 2_000).is_empty(),
        "a repeated registration changes nothing"
    );
}

#[test]
fn a_match_is_saved_then_sent_and_its_row_goes_on_ack() {
    let mut s = Server::ready(2);
    register(&mut s, "w1", 1_000);
    let out = s.checked("w1", 1, matched());
    let first_save = out
        .iter()
        .position(|o| matches!(o, Output::SaveWait { row, .. } if row.ending.is_some()));
    let first_send = out.iter().position(|o| matches!(o, Output::Transmit(_)));
    assert!(
        first_save.is_some() && first_save < first_send,
        "the ending is on disk before it is sent: {out:?}"
    );
    let sent = frame_json(&out, "wait.matched");
    assert_eq!(sent.len(), 1, "{out:?}");
    assert_eq!(sent[0]["waitId"], "w1");
    assert_eq!(sent[0]["resumeText"], "healthy");
    assert_eq!(sent[0]["payload"], r#"{"status":200}"#);
    assert_eq!(sent[0]["continuationId"], "w1.then");
    assert_eq!(sent[0]["checks"], 1);
    assert!(
        // Less than three silent heartbeats, so the connection stays up for the ack.
        checks(&s.advance(Duration::from_secs(40))).is_empty(),
        "a match is never checked again"
    );
    let out = s.send(ServerFrame::WaitAck {
        wait_id: "w1".into(),
    });
    assert_eq!(
        out,
        [Output::ForgetWait {
            wait_id: "w1".into()
        }]
    );
    assert_eq!(s.daemon.wait_count(), 0);
}

#[test]
fn an_unacknowledged_ending_is_sent_again_on_every_connection_and_never_while_offline() {
    let mut s = Server::ready(2);
    register(&mut s, "w1", 1_000);
    s.input(Input::Disconnected { code: Some(1006) });
    let out = s.checked("w1", 1, matched());
    assert!(
        frame_json(&out, "wait.matched").is_empty(),
        "offline: nothing is sent"
    );
    assert!(saved(&out).iter().any(|r| r.ending.is_some()));
    let out = s.reconnect("sess_2");
    let again = frame_json(&out, "wait.matched");
    assert_eq!(again.len(), 1, "sent after hello: {out:?}");
    assert_eq!(sent(&out)[0], "hello");
    let out = s.reconnect("sess_3");
    assert_eq!(
        frame_json(&out, "wait.matched"),
        again,
        "the same match, with the same continuation id"
    );
}

#[test]
fn a_cancel_stops_the_running_check_and_reports_cancelled_once_it_stopped() {
    let mut s = Server::ready(2);
    register(&mut s, "w1", 1_000);
    let out = s.send(ServerFrame::WaitCancel {
        wait_id: "w1".into(),
    });
    assert!(
        out.contains(&Output::Command(Command::StopCheck {
            wait_id: "w1".into(),
            check: 1
        })),
        "{out:?}"
    );
    assert!(
        saved(&out).iter().any(|r| r.stopping.is_some()),
        "the stop is saved before it is asked for: {out:?}"
    );
    assert!(
        frame_json(&out, "wait.failed").is_empty(),
        "not before it stopped"
    );
    let out = s.checked("w1", 1, matched());
    let failed = frame_json(&out, "wait.failed");
    assert_eq!(failed.len(), 1, "{out:?}");
    assert_eq!(failed[0]["reason"], "cancelled");
    assert!(
        frame_json(&out, "wait.matched").is_empty(),
        "a cancelled wait never matches"
    );
}

#[test]
fn five_failing_checks_fail_the_wait_with_the_last_error() {
    let mut s = Server::ready(2);
    register(&mut s, "w1", 1_000);
    let mut out = Vec::new();
    for check in 1..=5 {
        if check > 1 {
            assert_eq!(
                checks(&s.advance(Duration::from_secs(1))),
                [("w1".to_owned(), check)]
            );
        }
        out = s.checked(
            "w1",
            check,
            CheckOutcome::Failed(CheckError {
                code: "condition_threw".into(),
                message: format!("boom {check}"),
                at_ms: 1,
            }),
        );
    }
    let failed = frame_json(&out, "wait.failed");
    assert_eq!(failed.len(), 1, "{out:?}");
    assert_eq!(failed[0]["reason"], "check_errors");
    assert_eq!(failed[0]["checks"], 5);
    assert_eq!(failed[0]["lastError"]["message"], "boom 5");
}

#[test]
fn a_restored_daemon_checks_its_active_waits_at_once_and_reports_its_ended_ones() {
    let mut s = Server::ready(2);
    register(&mut s, "active", 30_000);
    let mut rows: Vec<(u64, WaitRow)> = Vec::new();
    let mut keep = |out: &[Output]| {
        for o in out {
            if let Output::SaveWait { row, written_ms } = o {
                rows.retain(|(_, r)| r.spec.wait_id != row.spec.wait_id);
                rows.push((*written_ms, (**row).clone()));
            }
        }
    };
    keep(&s.checked("active", 1, CheckOutcome::NotYet));
    keep(&register(&mut s, "done", 1_000));
    s.input(Input::Disconnected { code: Some(1006) });
    keep(&s.checked("done", 1, matched()));

    // A new process, 40 s later: the active wait's check is overdue.
    let later = now_at(s.elapsed + Duration::from_secs(40));
    let mut daemon = Daemon::new(DaemonConfig::default(), test_keys(), later);
    daemon.restore_waits(rows);
    let mut out = Vec::new();
    loop {
        match daemon.poll_output() {
            Output::Wait { .. } => break,
            o => out.push(o),
        }
    }
    assert_eq!(checks(&out), [("active".to_owned(), 2)], "{out:?}");
    assert!(
        frame_json(&out, "wait.matched").is_empty(),
        "not connected yet"
    );
    let mut s = Server {
        daemon,
        frames: FrameSigner::new("sess_new"),
        key: test_root::frame_signer(),
        elapsed: s.elapsed + Duration::from_secs(40),
    };
    s.input(Input::Connected {
        session_id: "sess_new".into(),
    });
    let out = s.send(ServerFrame::Welcome {
        context_id: "ec_unit".into(),
        protocol: crate::wire::PROTOCOL_VERSION,
        grant_version: 1,
        grant: grant(8),
        heartbeat_secs: 15,
        features: Vec::new(),
    });
    let matched = frame_json(&out, "wait.matched");
    assert_eq!(matched.len(), 1, "{out:?}");
    assert_eq!(matched[0]["waitId"], "done");
}
