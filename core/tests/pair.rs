//! Protocol tests: a session and a daemon driven together in memory.

use std::time::Duration;

mod common;

use common::spec;
use outpost_core::daemon::{self, Command};
use outpost_core::session::{self, Event, RunOutcome};
use outpost_core::sim::{Pair, PairConfig, PairError};
use outpost_core::wire::{CapabilitySource, Environment, InlineFile, RunStatus, close_code};

fn submit(pair: &mut Pair, run_id: &str) -> Result<(), PairError> {
    pair.session_input(session::Input::Submit(spec(run_id)))
}

fn ended(pair: &Pair, run_id: &str) -> Vec<RunOutcome> {
    pair.session_events
        .iter()
        .filter_map(|e| match e {
            Event::RunEnded { run_id: r, outcome } if r == run_id => Some(outcome.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn connect_then_run_to_completion() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    assert!(pair.daemon.is_ready() && pair.session.is_ready());
    submit(&mut pair, "r1")?;
    assert_eq!(pair.executor.started, vec!["r1".to_string()]);
    pair.advance(Duration::from_millis(250))?;
    pair.finish("r1", 3)?;
    let outcomes = ended(&pair, "r1");
    assert_eq!(outcomes.len(), 1);
    let RunOutcome::Completed(result) = &outcomes[0] else {
        panic!("expected a result, got {outcomes:?}");
    };
    assert_eq!(result.status, RunStatus::Exited);
    assert_eq!(result.exit_code, Some(3));
    let server_ms = result.timing.server_ms.unwrap();
    assert!(server_ms >= 250);
    assert_eq!(
        result.timing.transit_ms,
        Some(server_ms - result.timing.daemon_ms)
    );
    assert!(
        pair.daemon.pending_results().is_empty(),
        "the ack cleared the result"
    );
    Ok(())
}

#[test]
fn byte_by_byte_delivery_gives_the_same_outcome() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig {
        max_chunk: 1,
        ..PairConfig::default()
    })?;
    submit(&mut pair, "r1")?;
    pair.finish("r1", 0)?;
    assert!(matches!(ended(&pair, "r1")[..], [RunOutcome::Completed(_)]));
    Ok(())
}

#[test]
fn dispatch_never_overshoots_the_slots() -> Result<(), PairError> {
    let mut config = PairConfig::default();
    config.daemon.max_concurrent = 2;
    let mut pair = Pair::connected(config)?;
    // Three submits before any accept can arrive: the third is busy at once.
    let now = outpost_core::sim::now_at(pair.elapsed);
    for id in ["a", "b", "c"] {
        pair.session
            .handle_input(now, session::Input::Submit(spec(id)))?;
    }
    pair.drive()?;
    assert_eq!(ended(&pair, "c"), vec![RunOutcome::Busy]);
    assert_eq!(pair.executor.running.len(), 2);
    pair.finish("a", 0)?;
    submit(&mut pair, "d")?;
    assert_eq!(pair.executor.running.len(), 2);
    Ok(())
}

#[test]
fn a_result_survives_a_disconnect_and_is_recorded_once() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    pair.network_up = false;
    pair.disconnect()?;
    pair.finish("r1", 0)?; // finishes while offline: held as pending
    assert_eq!(pair.daemon.pending_results().len(), 1);
    pair.network_up = true;
    pair.advance(Duration::from_secs(2))?;
    assert!(pair.daemon.is_ready());
    assert!(matches!(ended(&pair, "r1")[..], [RunOutcome::Completed(_)]));
    assert!(pair.daemon.pending_results().is_empty());
    assert_eq!(
        pair.executor.started,
        vec!["r1".to_string()],
        "never re-run"
    );
    Ok(())
}

#[test]
fn a_restarted_daemon_delivers_its_persisted_result_once() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    pair.network_up = false;
    pair.disconnect()?;
    pair.finish("r1", 7)?;
    pair.restart_daemon()?;
    pair.network_up = true;
    pair.advance(Duration::from_secs(2))?;
    let outcomes = ended(&pair, "r1");
    assert!(matches!(&outcomes[..], [RunOutcome::Completed(r)] if r.exit_code == Some(7)));
    Ok(())
}

#[test]
fn a_silent_daemon_loses_its_lease_after_deadline_plus_grace() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    pair.network_up = false;
    pair.disconnect()?;
    pair.advance(Duration::from_secs(10 + 29))?;
    assert!(
        ended(&pair, "r1").is_empty(),
        "not lost before deadline + 30 s"
    );
    pair.advance(Duration::from_secs(2))?;
    assert_eq!(ended(&pair, "r1"), vec![RunOutcome::Lost]);
    // The daemon cancelled the run itself at its deadline: nothing is left running.
    assert!(pair.executor.running.is_empty());
    assert_eq!(pair.executor.cancelled, vec!["r1".to_string()]);
    Ok(())
}

#[test]
fn a_reconnect_without_the_run_ends_it_lost_at_once() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    pair.restart_daemon()?; // the run died with the machine
    pair.advance(Duration::from_secs(2))?;
    assert!(pair.daemon.is_ready());
    assert_eq!(ended(&pair, "r1"), vec![RunOutcome::Lost]);
    Ok(())
}

#[test]
fn a_tampered_frame_closes_the_connection_and_runs_nothing() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    pair.tamper = Some(Box::new(|frame: Vec<u8>| {
        String::from_utf8(frame)
            .unwrap()
            .replace("\"r1\"", "\"r2\"")
            .into_bytes()
    }));
    submit(&mut pair, "r1")?;
    assert!(pair.executor.started.is_empty());
    assert!(pair.daemon_events.iter().any(|e| matches!(
        e,
        daemon::Event::ProtocolViolation {
            code: "bad_signature",
            ..
        }
    )));
    assert!(
        pair.daemon_closes
            .contains(&(close_code::PROTOCOL_ERROR, "bad_signature".into()))
    );
    assert_eq!(ended(&pair, "r1"), vec![RunOutcome::Offline]);
    // Untampered, the daemon reconnects and works again.
    pair.tamper = None;
    pair.advance(Duration::from_secs(2))?;
    assert!(pair.daemon.is_ready());
    Ok(())
}

#[test]
fn revoke_cancels_runs_and_stops_the_daemon_for_good() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    pair.session_input(session::Input::Revoke).unwrap();
    assert_eq!(
        ended(&pair, "r1"),
        vec![RunOutcome::Cancelled {
            reason: "revoked".into()
        }]
    );
    assert!(pair.executor.running.is_empty());
    assert!(pair.daemon.is_stopped());
    let stop = Command::Stop { forever: true };
    assert!(pair.daemon_commands.contains(&stop));
    pair.advance(Duration::from_secs(600))?;
    let after_stop = pair.daemon_commands.iter().skip_while(|c| **c != stop);
    assert!(
        !after_stop.into_iter().any(|c| *c == Command::Connect),
        "never reconnects"
    );
    Ok(())
}

#[test]
fn a_second_connection_replaces_the_first_with_1012() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    let issued = pair.session.issue_ticket([9; 48]).unwrap();
    pair.session_input(session::Input::Connect {
        conn: 99,
        ticket: issued.ticket.expose_secret(),
    })?;
    assert!(pair.session_closes.contains(&close_code::REPLACED));
    assert!(pair.daemon.is_stopped());
    assert!(
        pair.daemon_commands
            .contains(&Command::Stop { forever: true })
    );
    Ok(())
}

#[test]
fn grant_updates_apply_at_once() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    let mut grant = PairConfig::default().grant;
    grant.limits.max_concurrent = 1;
    pair.session_input(session::Input::UpdateGrant(grant.clone()))?;
    assert!(
        pair.daemon_commands
            .contains(&Command::ApplyGrant { version: 2, grant })
    );
    assert_eq!(pair.daemon.slots_total(), 1);
    Ok(())
}

#[test]
fn drain_finishes_runs_delivers_results_and_stops() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    pair.daemon_input(daemon::Input::Drain).unwrap();
    assert!(!pair.daemon.is_stopped(), "r1 is still running");
    submit(&mut pair, "r2")?;
    assert!(matches!(
        &ended(&pair, "r2")[..],
        [RunOutcome::Busy] | [RunOutcome::Rejected { .. }]
    ));
    pair.finish("r1", 0)?;
    assert!(matches!(ended(&pair, "r1")[..], [RunOutcome::Completed(_)]));
    assert!(pair.daemon.is_stopped());
    assert!(
        pair.daemon_commands
            .contains(&Command::Stop { forever: false })
    );
    Ok(())
}

#[test]
fn a_suspend_past_the_deadline_cancels_the_run() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    // The machine sleeps for an hour; the boot-time clock jumps.
    pair.advance(Duration::from_secs(3600))?;
    assert!(pair.executor.running.is_empty());
    assert_eq!(pair.executor.cancelled, vec!["r1".to_string()]);
    Ok(())
}

#[test]
fn digest_capabilities_are_checked_before_running() -> Result<(), PairError> {
    use sha2::Digest as _;
    let mut pair = Pair::connected(PairConfig::default())?;
    let bundle = b"bundle bytes".to_vec();
    let sha = hex::encode(sha2::Sha256::digest(&bundle));
    pair.bundles.insert(sha.clone(), b"other bytes".to_vec());
    let mut bad = spec("bad");
    bad.capability = CapabilitySource::Digest {
        sha256: sha.clone(),
        size: 12,
    };
    pair.session_input(session::Input::Submit(bad)).unwrap();
    assert!(pair.executor.started.is_empty(), "a mismatch never runs");
    assert!(
        matches!(&ended(&pair, "bad")[..], [RunOutcome::Completed(r)]
        if r.error.as_ref().is_some_and(|e| e.code == "digest_mismatch"))
    );
    pair.bundles.insert(sha.clone(), bundle);
    let mut good = spec("good");
    good.capability = CapabilitySource::Digest {
        sha256: sha,
        size: 12,
    };
    pair.session_input(session::Input::Submit(good)).unwrap();
    assert_eq!(pair.executor.started, vec!["good".to_string()]);
    Ok(())
}

#[test]
fn the_grant_decides_which_environments_may_run() -> Result<(), PairError> {
    let mut config = PairConfig::default();
    config.grant.environments = Some(vec![Environment::Wasm]);
    config.daemon.environments = vec![Environment::Shell, Environment::Wasm];
    let mut pair = Pair::connected(config)?;
    submit(&mut pair, "r1")?;
    assert!(pair.executor.started.is_empty());
    assert!(matches!(&ended(&pair, "r1")[..],
        [RunOutcome::Rejected { code, .. }] if code == "environment_not_granted"));
    Ok(())
}

#[test]
fn oversized_inline_capabilities_are_refused() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    let mut big = spec("big");
    big.capability = CapabilitySource::Inline {
        manifest: String::new(),
        files: vec![InlineFile {
            path: "blob".into(),
            content_b64: outpost_core::b64::encode(&vec![0u8; 600 * 1024]),
        }],
    };
    pair.session_input(session::Input::Submit(big)).unwrap();
    assert!(matches!(&ended(&pair, "big")[..],
        [RunOutcome::Rejected { code, .. }] if code == "invalid_capability"));
    Ok(())
}

#[test]
fn the_pair_returns_what_a_machine_refuses() -> Result<(), PairError> {
    let mut pair = Pair::connected(PairConfig::default())?;
    submit(&mut pair, "r1")?;
    assert_eq!(
        submit(&mut pair, "r1"),
        Err(PairError::Session(session::SessionError::DuplicateRun(
            "r1".into()
        )))
    );
    pair.advance(Duration::from_secs(1))?;
    pair.elapsed = Duration::from_millis(500); // a host whose clock went back
    assert_eq!(
        pair.advance(Duration::ZERO),
        Err(PairError::Session(session::SessionError::TimeWentBackwards))
    );
    Ok(())
}
