//! Time the dispatcher did not run: a pause of its process never ends a run `lost` for the
//! silence it caused, and a restart gives the machines time to come back.

use super::*;

fn one_machine() -> (Harness, ConnId) {
    let mut h = Harness::new();
    h.register(record("a", "ada", &[]));
    h.chain("ada", vec![ChainEntry::Context("a".into())]);
    let a = h.connect("a", 1);
    (h, a)
}

/// Offers `x1` to machine `a` by name.
fn offer_x1(h: &mut Harness) {
    h.input(Input::Execute(Box::new(request(
        "x1",
        "ada",
        ExecuteTarget::named("a"),
    ))));
}

/// Offers `x1` through ada's chain and has `a` accept it: its lease (10 s + 30 s) runs.
fn commit_x1(h: &mut Harness) {
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
}

#[test]
fn a_paused_server_does_not_blame_the_daemon_for_its_own_silence() {
    let (mut h, _) = one_machine();
    commit_x1(&mut h);
    // The lease is 10 s + 30 s. The process stops for two minutes; the result waits in its
    // socket, and on resume its timer comes first.
    h.pause(Duration::from_secs(120));
    h.input(Input::Timeout);
    assert!(
        h.finished("x1").is_empty(),
        "not lost: {:?}",
        h.finished("x1")
    );
    assert!(
        h.seen
            .iter()
            .any(|o| matches!(o, Output::Event(Event::Paused { .. }))),
        "the pause is reported"
    );
    assert!(h.conns.contains_key("a"), "nor dropped for silence");
    h.result("a", "x1.1");
    assert!(matches!(
        h.finished("x1")[..],
        [ExecutionOutcome::Completed(_)]
    ));
}

#[test]
fn a_daemon_that_stays_silent_after_the_pause_still_loses_its_lease() {
    let (mut h, _) = one_machine();
    commit_x1(&mut h);
    h.pause(Duration::from_secs(120));
    h.input(Input::Timeout);
    h.advance(Duration::from_secs(41));
    assert!(
        matches!(h.finished("x1")[..], [ExecutionOutcome::Lost]),
        "{:?}",
        h.finished("x1")
    );
}

#[test]
fn an_unanswered_offer_passes_as_busy_with_its_reason() {
    let (mut h, _) = one_machine();
    offer_x1(&mut h);
    h.advance(crate::session::OFFER_TIMEOUT);
    let [ExecutionOutcome::Failed { code, .. }] = h.finished("x1")[..] else {
        panic!("{:?}", h.finished("x1"));
    };
    assert_eq!(code, "execution_context_busy");
    let ran_on = h.seen.iter().find_map(|o| match o {
        Output::Event(Event::ExecutionFinished { exec_id, line, .. }) if exec_id == "x1" => {
            Some(line.clone())
        }
        _ => None,
    });
    assert!(ran_on.is_some_and(|l| l.contains("busy")));
    let a = h.conns["a"];
    assert_eq!(
        h.sent(a).last(),
        Some(&("run.cancel".to_owned(), "x1.1".to_owned())),
        "the offer is withdrawn"
    );
}

/// A dispatcher restarted from `h`'s state, machine `a` registered and offline.
fn restarted(h: &Harness) -> Harness {
    let snapshot = h.server.snapshot();
    let mut r = Harness::new();
    r.elapsed = h.elapsed;
    r.server = Server::restore(
        Arc::new(test_root::frame_signer()),
        SessionConfig::new("template"),
        &snapshot,
        now_at(r.elapsed),
    );
    r.drain();
    r
}

#[test]
fn a_restarted_server_waits_for_its_machines_before_failing_what_was_offered() {
    let (mut h, _) = one_machine();
    offer_x1(&mut h);
    // Offered, not committed, when the server dies.
    let mut r = restarted(&h);
    assert!(r.finished("x1").is_empty(), "not failed offline at once");
    r.advance(Duration::from_secs(3));
    let a = r.connect("a", 1);
    assert_eq!(r.requests(a), ["x1.2"], "offered again once it is back");
    r.daemon_says(
        "a",
        DaemonFrame::RunAccept {
            run_id: "x1.2".into(),
        },
    );
    r.result("a", "x1.2");
    assert!(matches!(
        r.finished("x1")[..],
        [ExecutionOutcome::Completed(_)]
    ));
}

#[test]
fn after_the_grace_a_machine_still_offline_is_routed_around_as_usual() {
    let (mut h, _) = one_machine();
    offer_x1(&mut h);
    let mut r = restarted(&h);
    // A new execution during the grace waits too.
    r.input(Input::Execute(Box::new(request(
        "x2",
        "ada",
        ExecuteTarget::named("a"),
    ))));
    r.advance(RESTART_GRACE - Duration::from_secs(1));
    assert!(r.finished("x1").is_empty() && r.finished("x2").is_empty());
    r.advance(Duration::from_secs(1));
    for exec_id in ["x1", "x2"] {
        let [ExecutionOutcome::Failed { code, .. }] = r.finished(exec_id)[..] else {
            panic!("{exec_id}: {:?}", r.finished(exec_id));
        };
        assert_eq!(code, "execution_context_offline", "{exec_id}");
    }
}
