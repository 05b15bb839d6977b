//! Operators' requests for a daemon from afar (PROTOCOL §4.7), driven through a session and a
//! daemon in memory: what reaches the daemon's host, what comes back, and what a pause does to
//! offers.

mod common;

use common::spec;
use outpost_core::daemon::{self, Command};
use outpost_core::session::{self, ControlAnswer, ControlOrder, Event, RunOutcome};
use outpost_core::sim::{Pair, PairConfig, PairError};
use outpost_core::wire::{
    ControlAction, ControlOutcome, DaemonFrame, FEATURE_CONTROL, MAX_CONTROL_LINES, close_code,
};

fn with_control() -> PairConfig {
    let mut config = PairConfig::default();
    config.daemon.features = vec![FEATURE_CONTROL.to_owned()];
    config
}

fn order(id: &str, action: ControlAction) -> session::Input {
    session::Input::Control(ControlOrder {
        control_id: id.into(),
        action,
        lines: 0,
    })
}

fn answers(pair: &Pair) -> Vec<ControlAnswer> {
    pair.session_events
        .iter()
        .filter_map(|e| match e {
            Event::ControlAnswered(a) => Some((**a).clone()),
            _ => None,
        })
        .collect()
}

fn controls(pair: &Pair) -> Vec<(String, String, u32)> {
    pair.daemon_commands
        .iter()
        .filter_map(|c| match c {
            Command::Control {
                control_id,
                action,
                lines,
            } => Some((control_id.clone(), action.clone(), *lines)),
            _ => None,
        })
        .collect()
}

fn result(id: &str, action: &str, lines: Vec<String>) -> daemon::Input {
    daemon::Input::ControlAnswered(DaemonFrame::ControlResult {
        control_id: id.into(),
        action: action.into(),
        outcome: ControlOutcome::Done,
        code: String::new(),
        message: "done".into(),
        lines,
    })
}

#[test]
fn a_request_reaches_the_daemons_host_and_its_answer_comes_back() -> Result<(), PairError> {
    let mut pair = Pair::connected(with_control())?;
    pair.session_input(session::Input::Control(ControlOrder {
        control_id: "ctl_1".into(),
        action: ControlAction::Logs,
        lines: 20,
    }))?;
    assert_eq!(controls(&pair), [("ctl_1".into(), "logs".into(), 20)]);
    assert!(answers(&pair).is_empty(), "nothing answered yet");
    pair.daemon_input(result("ctl_1", "logs", vec!["one".into(), "two".into()]))?;
    let got = answers(&pair);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].control_id, "ctl_1");
    assert_eq!(got[0].outcome, ControlOutcome::Done);
    assert_eq!(got[0].lines, ["one", "two"]);
    assert!(got[0].from_daemon);
    Ok(())
}

#[test]
fn a_daemon_without_the_feature_or_offline_is_answered_by_the_session_at_once()
-> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    pair.session_input(order("ctl_1", ControlAction::Pause))?;
    assert!(controls(&pair).is_empty(), "nothing was sent to the daemon");
    let got = answers(&pair);
    assert_eq!(
        (got[0].outcome, got[0].code.as_str(), got[0].from_daemon),
        (ControlOutcome::Failed, "control_unsupported", false)
    );

    let mut pair = Pair::connected(with_control())?;
    pair.disconnect()?;
    pair.network_up = false;
    pair.session_input(order("ctl_2", ControlAction::Restart))?;
    let got = answers(&pair);
    assert_eq!(got[0].code, "daemon_offline");
    assert!(controls(&pair).is_empty());
    Ok(())
}

#[test]
fn a_paused_daemon_takes_no_run_until_resumed_and_says_so_after_a_reconnect()
-> Result<(), PairError> {
    let mut pair = Pair::connected(with_control())?;
    pair.daemon_input(daemon::Input::Pause)?;
    assert!(pair.session.is_paused() && pair.session.is_draining());
    assert!(!pair.daemon.is_stopped(), "a pause never stops the daemon");

    pair.session_input(session::Input::Submit(spec("r1")))?;
    assert!(pair.executor.started.is_empty(), "nothing ran while paused");
    let ended: Vec<RunOutcome> = pair
        .session_events
        .iter()
        .filter_map(|e| match e {
            Event::RunEnded { outcome, .. } => Some(outcome.clone()),
            _ => None,
        })
        .collect();
    assert!(
        !ended.is_empty() && ended.iter().all(RunOutcome::not_started),
        "the run ended without starting: {ended:?}"
    );

    // The pause outlives the connection: the daemon says so again on the next one.
    pair.disconnect()?;
    assert!(!pair.session.is_paused(), "offline: nothing is known");
    pair.advance(std::time::Duration::from_secs(2))?;
    assert!(pair.session.is_ready());
    assert!(pair.session.is_paused(), "paused again after the reconnect");

    pair.daemon_input(daemon::Input::Resume)?;
    assert!(!pair.session.is_paused() && !pair.session.is_draining());
    assert!(
        pair.session_events
            .iter()
            .any(|e| matches!(e, Event::Resumed)),
        "the session told its host that runs may flow again"
    );
    pair.session_input(session::Input::Submit(spec("r2")))?;
    assert_eq!(pair.executor.started, ["r2"]);
    Ok(())
}

#[test]
fn an_answer_past_its_bounds_closes_the_connection() -> Result<(), PairError> {
    let mut pair = Pair::connected(with_control())?;
    pair.session_input(order("ctl_1", ControlAction::Logs))?;
    let lines = vec!["x".to_owned(); MAX_CONTROL_LINES as usize + 1];
    pair.daemon_input(result("ctl_1", "logs", lines))?;
    assert!(answers(&pair).is_empty(), "the answer was not passed on");
    assert!(
        pair.session_closes.contains(&close_code::PROTOCOL_ERROR),
        "{:?}",
        pair.session_closes
    );
    Ok(())
}
