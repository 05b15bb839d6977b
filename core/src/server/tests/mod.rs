//! Direct tests of the dispatcher: a small harness plays the machines' daemons frame by frame
//! (no `Daemon`, no network), so each test says exactly what every machine answers.

mod harness;
mod resume;

use std::time::Duration;

use super::*;
use crate::keyset::test_root;
use crate::routing::{ChainEntry, WhenOffline};
use crate::sim::now_at;
use crate::wire::DaemonFrame;
use harness::{Harness, record, request};

/// Two machines on ada's chain, both hers.
fn two_machines() -> (Harness, ConnId, ConnId) {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.register(record("b", "ada", &[]));
    h.chain(
        "ada",
        vec![
            ChainEntry::Context("a".into()),
            ChainEntry::Context("b".into()),
        ],
    );
    let a = h.connect("a", 1);
    let b = h.connect("b", 1);
    (h, a, b)
}

#[test]
fn a_busy_machine_passes_the_run_to_the_next_one_on_the_chain() {
    let (mut h, a, b) = two_machines();
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    assert_eq!(h.requests(a), ["x1.1"]);
    assert!(h.requests(b).is_empty(), "one candidate at a time");
    h.daemon_says(
        "a",
        DaemonFrame::RunReject {
            run_id: "x1.1".into(),
            code: "busy".into(),
            message: "every slot is taken".into(),
        },
    );
    assert_eq!(h.requests(b), ["x1.2"], "the next hop has its own run id");
    h.daemon_says(
        "b",
        DaemonFrame::RunAccept {
            run_id: "x1.2".into(),
        },
    );
    assert_eq!(h.started_on("x1"), ["b"]);
    h.result("b", "x1.2");
    let finished = h.finished("x1");
    assert!(
        matches!(finished[..], [ExecutionOutcome::Completed(r)] if r.stdout == "hi"),
        "{finished:?}"
    );
    let ran_on = h.seen.iter().find_map(|o| match o {
        Output::Event(Event::ExecutionFinished { ran_on, .. }) => ran_on.clone(),
        _ => None,
    });
    assert!(ran_on.is_some(), "a placed run says where it ran");
}

/// The attempts an execution's `ranOn` lists, as `(context, outcome, reason)`.
fn attempts_of(h: &Harness, exec_id: &str) -> Vec<(String, String, String)> {
    h.seen
        .iter()
        .find_map(|o| match o {
            Output::Event(Event::ExecutionFinished {
                exec_id: e,
                ran_on: Some(ran_on),
                ..
            }) if e == exec_id => Some(ran_on.attempts.clone()),
            _ => None,
        })
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.id, a.outcome.as_str().to_owned(), a.reason))
        .collect()
}

#[test]
fn a_draining_machine_passes_runs_on_as_busy_with_the_reason_draining() {
    let (mut h, a, b) = two_machines();
    let draining = ("a".to_owned(), "busy".to_owned(), "draining".to_owned());
    // Offered before its status says so, it rejects with `draining`...
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    h.daemon_says(
        "a",
        DaemonFrame::RunReject {
            run_id: "x1.1".into(),
            code: "draining".into(),
            message: "the daemon is stopping".into(),
        },
    );
    assert_eq!(h.requests(b), ["x1.2"]);
    h.daemon_says(
        "b",
        DaemonFrame::RunAccept {
            run_id: "x1.2".into(),
        },
    );
    h.result("b", "x1.2");
    assert_eq!(attempts_of(&h, "x1"), std::slice::from_ref(&draining));
    // ...and once it does, it is not offered the next run at all.
    h.daemon_says(
        "a",
        DaemonFrame::Status {
            slots_used: 0,
            slots_total: 1,
            draining: true,
            paused: false,
        },
    );
    h.input(Input::Execute(Box::new(request(
        "x2",
        "ada",
        ExecuteTarget::chain(),
    ))));
    assert_eq!(h.requests(a), ["x1.1"], "nothing more for a");
    assert_eq!(h.requests(b), ["x1.2", "x2.1"]);
    h.daemon_says(
        "b",
        DaemonFrame::RunAccept {
            run_id: "x2.1".into(),
        },
    );
    h.result("b", "x2.1");
    assert_eq!(attempts_of(&h, "x2"), [draining]);
}

#[test]
fn a_machine_that_drops_before_committing_passes_the_run_on() {
    let (mut h, a, b) = two_machines();
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    assert_eq!(h.requests(a), ["x1.1"]);
    h.disconnect("a");
    assert_eq!(h.requests(b), ["x1.2"]);
    assert!(h.finished("x1").is_empty());
    // An offline machine is skipped without an offer.
    h.input(Input::Execute(Box::new(request(
        "x2",
        "ada",
        ExecuteTarget::chain(),
    ))));
    assert_eq!(
        h.requests(b),
        ["x1.2"],
        "b is busy with x1: x2 has nowhere to go"
    );
    assert!(
        matches!(h.finished("x2")[..], [ExecutionOutcome::Failed { .. }]),
        "{:?}",
        h.finished("x2")
    );
}

#[test]
fn a_run_waits_for_its_offline_machine_and_starts_when_it_comes_back() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    let target = ExecuteTarget {
        when_offline: WhenOffline::queue(2).expect("2 minutes"),
        ..ExecuteTarget::named("a")
    };
    h.input(Input::Execute(Box::new(request("x1", "ada", target))));
    assert!(h.finished("x1").is_empty(), "queued, not failed");
    let (until, reason) = h.server.next_deadline().expect("the queue's end");
    assert_eq!(reason, "queue");
    assert_eq!(until, now_at(h.elapsed + Duration::from_secs(120)).instant);
    h.advance(Duration::from_secs(60));
    let a = h.connect("a", 1);
    assert_eq!(
        h.requests(a),
        ["x1.1"],
        "dispatched as soon as it said hello"
    );
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x1.1".into(),
        },
    );
    h.result("a", "x1.1");
    assert!(matches!(
        h.finished("x1")[..],
        [ExecutionOutcome::Completed(_)]
    ));
}

#[test]
fn a_run_that_may_wait_for_its_machine_waits_when_the_machine_drops_under_its_offer() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    // Past a restart's grace: an offer cut now is not a restart's.
    h.advance(Duration::from_secs(600));
    let a = h.connect("a", 1);
    let target = ExecuteTarget {
        when_offline: WhenOffline::queue(2).expect("2 minutes"),
        ..ExecuteTarget::named("a")
    };
    h.input(Input::Execute(Box::new(request("x1", "ada", target))));
    assert_eq!(h.requests(a), ["x1.1"]);
    // Gone before it accepted: the caller asked to wait for it when offline.
    h.disconnect("a");
    assert!(h.finished("x1").is_empty(), "queued, not failed offline");
    let (_, reason) = h.server.next_deadline().expect("the queue's end");
    assert_eq!(reason, "queue");
    let a = h.connect("a", 1);
    let offered = h.requests(a);
    assert_eq!(
        offered.len(),
        1,
        "offered again once it is back: {offered:?}"
    );
    let run = offered[0].clone();
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: run.clone().into(),
        },
    );
    h.result("a", &run);
    assert!(matches!(
        h.finished("x1")[..],
        [ExecutionOutcome::Completed(_)]
    ));
    // One that may not wait fails, as before.
    let a_again = a;
    h.input(Input::Execute(Box::new(request(
        "x2",
        "ada",
        ExecuteTarget::named("a"),
    ))));
    assert_eq!(h.requests(a_again).len(), 2);
    h.disconnect("a");
    assert!(matches!(
        h.finished("x2")[..],
        [ExecutionOutcome::Failed { .. }]
    ));
}

#[test]
fn queued_runs_beyond_the_machine_s_slots_wait_for_a_free_slot_instead_of_failing_busy() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    let target = ExecuteTarget {
        when_offline: WhenOffline::queue(5).expect("5 minutes"),
        ..ExecuteTarget::named("a")
    };
    for id in ["x1", "x2", "x3"] {
        h.input(Input::Execute(Box::new(request(id, "ada", target.clone()))));
    }
    let a = h.connect("a", 1);
    let first = h.requests(a);
    assert_eq!(first.len(), 1, "one slot, one offer: {first:?}");
    for id in ["x1", "x2", "x3"] {
        assert!(h.finished(id).is_empty(), "{id} is not failed busy");
    }
    // Each result frees the slot for the next one waiting.
    let mut done = Vec::new();
    for _ in 0..3 {
        let offered = h.requests(a);
        let run = offered.last().expect("an offer").clone();
        h.daemon_says(
            "a",
            DaemonFrame::RunAccept {
                run_id: run.clone().into(),
            },
        );
        h.result("a", &run);
        done.push(run);
    }
    for id in ["x1", "x2", "x3"] {
        assert!(
            matches!(h.finished(id)[..], [ExecutionOutcome::Completed(_)]),
            "{id}: {:?}",
            h.finished(id)
        );
    }
}

/// A machine comes back without a run the server had committed to it (the server crashed
/// between the commit and sending it), with two runs queued for it that may wait while it is
/// busy. Its `hello` ends the lost run, which plans the queue, and makes the machine ready,
/// which plans the queue again from inside the first planning: each queued run is offered
/// once, the one the slots leave out waits, and none is offered again after it started.
#[test]
fn a_queue_planned_twice_at_once_offers_each_run_once() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.connect("a", 2);
    h.input(Input::Execute(Box::new(request(
        "x0",
        "ada",
        ExecuteTarget::named("a"),
    ))));
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x0.1".into(),
        },
    );
    h.disconnect("a");
    let waits = WhenOffline::queue(5).expect("5 minutes");
    let target = ExecuteTarget {
        when_offline: waits,
        when_busy: waits,
        ..ExecuteTarget::named("a")
    };
    for id in ["x1", "x2", "x3"] {
        h.input(Input::Execute(Box::new(request(id, "ada", target.clone()))));
    }
    // Back, holding nothing: x0 ended lost, two slots for three waiting runs.
    let a = h.connect("a", 2);
    assert!(matches!(h.finished("x0")[..], [ExecutionOutcome::Lost]));
    assert_eq!(h.requests(a), ["x1.1", "x2.1"], "each offered once");
    for run in ["x1.1", "x2.1"] {
        h.daemon_says("a", DaemonFrame::RunAccept { run_id: run.into() });
    }
    assert_eq!(h.started_on("x2"), ["a"], "x2's start is x2's");
    // x1's end frees a slot: for x3, which waited, and not for x2 again.
    h.result("a", "x1.1");
    assert_eq!(h.requests(a), ["x1.1", "x2.1", "x3.1"]);
    h.result("a", "x2.1");
    for id in ["x1", "x2"] {
        assert!(
            matches!(h.finished(id)[..], [ExecutionOutcome::Completed(_)]),
            "{id}: {:?}",
            h.finished(id)
        );
    }
    assert_eq!(
        h.requests(a),
        ["x1.1", "x2.1", "x3.1"],
        "nothing offered twice"
    );
}

#[test]
fn a_queued_run_fails_once_when_its_machine_does_not_come_back_in_time() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    let target = ExecuteTarget {
        when_offline: WhenOffline::queue(1).expect("1 minute"),
        ..ExecuteTarget::named("a")
    };
    h.input(Input::Execute(Box::new(request("x1", "ada", target))));
    h.advance(Duration::from_secs(59));
    assert!(h.finished("x1").is_empty());
    h.advance(Duration::from_secs(1));
    let finished = h.finished("x1");
    assert!(
        matches!(finished[..], [ExecutionOutcome::Failed { code, .. }] if code == "execution_context_queue_expired"),
        "{finished:?}"
    );
    assert_eq!(h.server.executions_in_flight(), 0);
    let (_, reason) = h.server.poll_timeout();
    assert_eq!(reason, "idle", "an expired queue leaves no timer behind");
    h.advance(Duration::from_secs(120));
    assert_eq!(h.finished("x1").len(), 1, "exactly once");
}

#[test]
fn revoking_a_machine_with_a_run_in_flight_cancels_it_and_refuses_the_machine() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.chain("ada", vec![ChainEntry::Context("a".into())]);
    let a = h.connect("a", 1);
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x1.1".into(),
        },
    );
    assert_eq!(h.started_on("x1"), ["a"]);
    h.input(Input::Revoke {
        context_id: "a".into(),
    });
    let types: Vec<String> = h.sent(a).into_iter().map(|(t, _)| t).collect();
    assert!(types.contains(&"revoked".to_owned()), "{types:?}");
    assert!(
        h.seen
            .iter()
            .any(|o| matches!(o, Output::Close { conn, code: 4001, .. } if *conn == a)),
        "closed as revoked"
    );
    let finished = h.finished("x1");
    assert!(
        matches!(finished[..], [ExecutionOutcome::Cancelled { reason }] if reason == "revoked"),
        "{finished:?}"
    );
    // A result that still arrives on the dead connection changes nothing.
    h.input(Input::Frame {
        conn: a,
        bytes: DaemonFrame::RunAccept {
            run_id: "x1.1".into(),
        }
        .to_json(),
    });
    assert_eq!(h.finished("x1").len(), 1);
    assert!(
        h.server.issue_ticket("a", [7; 48]).is_err(),
        "no new ticket"
    );
    h.input(Input::Execute(Box::new(request(
        "x2",
        "ada",
        ExecuteTarget::chain(),
    ))));
    assert!(matches!(
        h.finished("x2")[..],
        [ExecutionOutcome::Failed { .. }]
    ));
    assert_eq!(
        h.server.poll_timeout().1,
        "idle",
        "no timer left for a revoked machine"
    );
}

#[test]
fn access_is_checked_again_on_every_hop_and_on_runs_in_flight() {
    let mut h = Harness::new();
    // bob runs on ada's machines as a shared run: he must be opted in on each.
    h.register(record("a", "ada", &["bob"]));
    h.register(record("b", "ada", &["bob"]));
    h.chain(
        "bob",
        vec![
            ChainEntry::Context("a".into()),
            ChainEntry::Context("b".into()),
            ChainEntry::Cloud,
        ],
    );
    let a = h.connect("a", 1);
    let b = h.connect("b", 1);
    h.input(Input::Execute(Box::new(request(
        "x1",
        "bob",
        ExecuteTarget::chain(),
    ))));
    assert_eq!(h.requests(a), ["x1.1"]);
    // While a holds the offer, bob loses b.
    h.input(Input::UpdateAccess(record("b", "ada", &[])));
    h.daemon_says(
        "a",
        DaemonFrame::RunReject {
            run_id: "x1.1".into(),
            code: "busy".into(),
            message: "busy".into(),
        },
    );
    assert!(h.requests(b).is_empty(), "the hop saw that bob lost b");
    let on_cloud = h
        .seen
        .iter()
        .any(|o| matches!(o, Output::Command(Command::RunOnCloud(r)) if r.exec_id == "x1"));
    assert!(on_cloud, "fell through to the cloud");

    // A run already committed on a machine is cancelled when access goes.
    h.input(Input::Execute(Box::new(request(
        "x2",
        "bob",
        ExecuteTarget::chain(),
    ))));
    assert_eq!(h.requests(a), ["x1.1", "x2.1"]);
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x2.1".into(),
        },
    );
    h.input(Input::UpdateAccess(record("a", "ada", &[])));
    assert!(h.sent(a).contains(&("run.cancel".into(), "x2.1".into())));
    let finished = h.finished("x2");
    assert!(
        matches!(finished[..], [ExecutionOutcome::Cancelled { reason }] if reason == "access_lost"),
        "{finished:?}"
    );
}

#[test]
fn a_heartbeat_moves_only_its_machine_s_timer() {
    let (mut h, _, _) = two_machines();
    let (first, reason) = h.server.next_deadline().expect("a deadline");
    assert_eq!(reason, "silence");
    h.advance(Duration::from_secs(10));
    h.daemon_says(
        "a",
        DaemonFrame::Status {
            slots_used: 0,
            slots_total: 1,
            draining: false,
            paused: false,
        },
    );
    assert_eq!(
        h.server.next_deadline(),
        Some((first, "silence")),
        "b is still due first"
    );
    // At b's silence deadline only b is closed; a stays.
    h.advance(first.since_origin() - h.elapsed);
    assert!(h.conns.contains_key("a") && !h.conns.contains_key("b"));
    let (next, _) = h.server.next_deadline().expect("a's silence");
    assert_eq!(next, first.saturating_add(Duration::from_secs(10)));
}

#[test]
fn the_host_s_mistakes_are_errors_and_a_session_s_refusal_is_an_event() {
    let (mut h, a, _) = two_machines();
    let earlier = now_at(h.elapsed - Duration::from_millis(1));
    assert_eq!(
        h.server.handle_input(earlier, Input::Timeout),
        Err(ServerError::TimeWentBackwards)
    );
    // An execution id used again after the first one ended: its first run id is taken on
    // the machine, so the session refuses the offer and the run goes to the next candidate.
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x1.1".into(),
        },
    );
    h.result("a", "x1.1");
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    let refused = h.seen.iter().any(|o| {
        matches!(o, Output::Event(Event::SessionError { context_id, error: crate::session::SessionError::DuplicateRun(run) })
            if context_id == "a" && run == "x1.1")
    });
    assert!(refused, "the refusal is reported, not dropped");
    assert_eq!(h.requests(a), ["x1.1"], "not offered twice");
    assert_eq!(h.server.executions_in_flight(), 1, "still placed, on b");

    // Outputs left undrained pile up to a limit.
    let mut server = Server::new(
        Arc::new(test_root::frame_signer()),
        SessionConfig::new("template"),
        now_at(h.elapsed),
    );
    let now = now_at(h.elapsed);
    let mut refused = None;
    for n in 0..=crate::MAX_QUEUED_OUTPUTS + 1 {
        let r = request(&format!("c{n}"), "cyd", ExecuteTarget::chain());
        if let Err(e) = server.handle_input(now, Input::Execute(Box::new(r))) {
            refused = Some((n, e));
            break;
        }
    }
    let (n, error) = refused.expect("the backlog is refused");
    assert_eq!(error, ServerError::OutputBacklog);
    // Each execute queues its record and its events; the refusal comes with the first input
    // after more than the limit waited, and the refused input added nothing.
    let mut queued = 0;
    while !matches!(server.poll_output(), Output::Wait { .. }) {
        queued += 1;
    }
    assert!(
        queued > crate::MAX_QUEUED_OUTPUTS,
        "{queued} outputs were queued"
    );
    assert!(
        queued <= crate::MAX_QUEUED_OUTPUTS + 4,
        "no input was taken once over the limit: {queued} outputs after {n} inputs"
    );
    assert!(n <= crate::MAX_QUEUED_OUTPUTS + 1);
}

#[test]
fn a_lease_longer_than_the_idle_wait_still_ends_lost_after_its_deadline() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.chain("ada", vec![ChainEntry::Context("a".into())]);
    h.connect("a", 1);
    let mut long = request("x1", "ada", ExecuteTarget::chain());
    long.timeout_ms = 2 * 3600 * 1000;
    h.input(Input::Execute(Box::new(long)));
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x1.1".into(),
        },
    );
    assert_eq!(h.started_on("x1"), ["a"]);
    h.disconnect("a");
    assert_eq!(
        h.server.next_deadline().map(|(_, why)| why),
        Some("lease"),
        "the lease is in the table, beyond the idle wait"
    );
    // Committed at 1 s: the lease ends 30 s after its 2 h deadline.
    h.advance(Duration::from_secs(2 * 3600 + 29));
    assert!(h.finished("x1").is_empty(), "not before deadline + 30 s");
    assert_eq!(
        h.server.next_deadline().map(|(_, why)| why),
        Some("lease"),
        "the lease is still in the table"
    );
    h.advance(Duration::from_secs(2));
    assert!(
        matches!(h.finished("x1")[..], [ExecutionOutcome::Lost]),
        "{:?}",
        h.finished("x1")
    );
}

#[test]
fn a_lease_that_ends_as_a_ticket_is_issued_is_journaled_before_it_is_reported() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.chain("ada", vec![ChainEntry::Context("a".into())]);
    h.connect("a", 1);
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::chain(),
    ))));
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x1.1".into(),
        },
    );
    h.disconnect("a");
    // Time passes until just before the lease (10 s + 30 s from 1 s) ends, then a little
    // more, told by an input that wakes no session: the lease is due.
    h.advance(Duration::from_secs(39));
    h.elapsed += Duration::from_secs(2);
    h.input(Input::SetChain {
        user_id: "bob".into(),
        chain: Chain::default(),
    });
    assert!(h.finished("x1").is_empty());
    let seen_before = h.seen.len();
    h.server.issue_ticket("a", [7; 48]).expect("a ticket");
    h.drain();
    let after = &h.seen[seen_before..];
    let ended = after.iter().position(|o| {
        matches!(o, Output::Persist(r) if matches!(&r.change, ServerChange::ExecutionEnded(e) if e.exec_id == "x1"))
    });
    let reported = after.iter().position(
        |o| matches!(o, Output::Event(Event::ExecutionFinished { exec_id, .. }) if exec_id == "x1"),
    );
    assert!(
        matches!((ended, reported), (Some(e), Some(r)) if e < r),
        "the end is written before it is reported: {after:?}"
    );
}

#[test]
fn a_busy_machine_s_queue_is_served_in_order_of_arrival_and_says_where_each_stands() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    let a = h.connect("a", 1);
    let queued = ExecuteTarget {
        when_busy: WhenOffline::queue(5).expect("5 minutes"),
        ..ExecuteTarget::named("a")
    };
    // x0 takes the one slot; z3, m2, b1 (ids out of order on purpose) queue behind it.
    h.input(Input::Execute(Box::new(request(
        "x0",
        "ada",
        ExecuteTarget::named("a"),
    ))));
    for id in ["z3", "m2", "b1"] {
        h.input(Input::Execute(Box::new(request(id, "ada", queued.clone()))));
        assert!(h.finished(id).is_empty(), "{id} waits, not failed busy");
    }
    let place = h.server.queue_place("m2").expect("m2 is queued");
    assert_eq!((place.position, place.online), (2, true));
    assert_eq!(place.left, Duration::from_secs(300));
    assert!(h.server.queue_place("x0").is_none(), "x0 is not queued");
    // Without whenBusy, a busy machine still fails the run at once.
    h.input(Input::Execute(Box::new(request(
        "late",
        "ada",
        ExecuteTarget::named("a"),
    ))));
    assert!(matches!(
        h.finished("late")[..],
        [ExecutionOutcome::Failed { .. }]
    ));
    let mut order = Vec::new();
    for _ in 0..4 {
        let run = h.requests(a).last().expect("an offer").clone();
        order.push(run.split('.').next().unwrap_or_default().to_owned());
        h.daemon_says(
            "a",
            DaemonFrame::RunAccept {
                run_id: run.clone().into(),
            },
        );
        h.result("a", &run);
    }
    assert_eq!(order, ["x0", "z3", "m2", "b1"], "first come, first served");
}

#[test]
fn a_run_queued_for_a_busy_machine_fails_saying_no_slot_came_free() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    let a = h.connect("a", 1);
    // x0 holds the one slot past the queue's minute.
    let long = ExecuteRequest {
        timeout_ms: 600_000,
        ..request("x0", "ada", ExecuteTarget::named("a"))
    };
    h.input(Input::Execute(Box::new(long)));
    let run = h.requests(a).last().expect("x0's offer").clone();
    h.daemon_says("a", DaemonFrame::RunAccept { run_id: run.into() });
    let queued = ExecuteTarget {
        when_busy: WhenOffline::queue(1).expect("1 minute"),
        ..ExecuteTarget::named("a")
    };
    h.input(Input::Execute(Box::new(request("x1", "ada", queued))));
    // The machine stays connected and busy (its heartbeats keep it), x0 within its lease.
    for _ in 0..6 {
        h.advance(Duration::from_secs(10));
        h.daemon_says(
            "a",
            DaemonFrame::Status {
                slots_used: 1,
                slots_total: 1,
                draining: false,
                paused: false,
            },
        );
    }
    let finished = h.finished("x1");
    assert!(
        matches!(&finished[..], [ExecutionOutcome::Failed { code, message }]
            if code == "execution_context_queue_expired" && message.contains("no free slot")),
        "{finished:?}"
    );
}

#[test]
fn a_machine_without_the_environment_names_it_and_the_ones_that_still_run() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.connect("a", 1);
    let mut docker = request("x1", "ada", ExecuteTarget::named("a"));
    docker.environment = crate::wire::Environment::Docker;
    h.input(Input::Execute(Box::new(docker)));
    let (code, message, requester) = h
        .seen
        .iter()
        .find_map(|o| match o {
            Output::Event(Event::ExecutionFinished {
                outcome: ExecutionOutcome::Failed { code, message },
                requester,
                ..
            }) => Some((code.clone(), message.clone(), requester.clone())),
            _ => None,
        })
        .expect("the run failed to be placed");
    assert_eq!(code, "execution_context_unusable");
    assert!(
        message.starts_with(
            "box a cannot run docker capabilities now: its daemon has no working docker executor (environment_unavailable); its shell capabilities still run;"
        ),
        "{message}"
    );
    assert_eq!(requester, "ada", "the end names who asked");
}

#[test]
fn a_pause_that_crosses_an_offer_queues_a_run_that_may_wait_and_resume_offers_it_again() {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    let a = h.connect("a", 1);
    let may_wait = ExecuteTarget {
        when_busy: WhenOffline::queue(5).expect("5 minutes"),
        ..ExecuteTarget::named("a")
    };
    h.input(Input::Execute(Box::new(request("x1", "ada", may_wait))));
    assert_eq!(h.requests(a), ["x1.1"]);
    // The operator's pause reaches the daemon while the offer is in flight: its status says
    // paused, then it refuses the offer `draining`.
    h.daemon_says(
        "a",
        DaemonFrame::Status {
            slots_used: 0,
            slots_total: 1,
            draining: true,
            paused: true,
        },
    );
    h.daemon_says(
        "a",
        DaemonFrame::RunReject {
            run_id: "x1.1".into(),
            code: "draining".into(),
            message: "paused by an operator".into(),
        },
    );
    assert!(h.finished("x1").is_empty(), "x1 waits, not failed");
    assert!(
        h.server.queue_place("x1").is_some(),
        "in the machine's queue"
    );
    // Resumed: it is offered again.
    h.daemon_says(
        "a",
        DaemonFrame::Status {
            slots_used: 0,
            slots_total: 1,
            draining: false,
            paused: false,
        },
    );
    let offer = h.requests(a).last().expect("an offer").clone();
    assert_ne!(offer, "x1.1", "a new offer");
    h.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: offer.clone().into(),
        },
    );
    h.result("a", &offer);
    assert!(matches!(
        h.finished("x1")[..],
        [ExecutionOutcome::Completed(_)]
    ));
}
