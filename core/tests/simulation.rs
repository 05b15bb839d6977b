//! The deterministic simulation: same seed, same transcript; seeds pass their invariants.

use outpost_core::sim::{SimConfig, simulate};

#[test]
fn the_same_seed_gives_the_same_transcript() {
    let config = SimConfig {
        keep_transcript: true,
        ..SimConfig::new(7)
    };
    let a = simulate(&config);
    let b = simulate(&config);
    assert!(
        a.transcript.len() > 20,
        "a real transcript: {} lines",
        a.transcript.len()
    );
    assert_eq!(a.transcript, b.transcript);
    assert_eq!(a.transcript_hash, b.transcript_hash);
    let other = simulate(&SimConfig {
        keep_transcript: true,
        ..SimConfig::new(8)
    });
    assert_ne!(a.transcript_hash, other.transcript_hash);
}

#[test]
fn seeds_hold_every_invariant_and_finish_every_execution() {
    for seed in 0..40 {
        let report = simulate(&SimConfig::new(seed));
        assert_eq!(report.violation, None, "seed {seed}");
        assert_eq!(report.finished, 24, "seed {seed}: every execution finished");
    }
}

#[test]
fn without_faults_runs_complete_on_machines() {
    let report = simulate(&SimConfig {
        faults: false,
        keep_transcript: true,
        ..SimConfig::new(3)
    });
    assert_eq!(report.violation, None);
    assert_eq!(report.faults, 0);
    let on_machines = report
        .transcript
        .iter()
        .filter(|l| l.contains("completed: Ran on box-"))
        .count();
    assert!(on_machines > 5, "{:#?}", report.transcript);
}

/// A machine revoked while it was away, with a run still executing, is refused its next
/// ticket and stops for good. The stopped daemon used to keep that run and ask to be woken
/// for its deadline forever, so this seed spun for minutes.
#[test]
fn a_daemon_stopped_for_good_with_a_run_in_flight_does_not_spin() {
    let report = simulate(&SimConfig::new(93_895_660));
    assert_eq!(report.violation, None);
    assert_eq!(report.finished, 24, "every execution finished");
    let per_second = report.steps as f64 / report.elapsed.as_secs_f64();
    assert!(
        per_second < 10.0,
        "{} host steps in {:?}",
        report.steps,
        report.elapsed
    );
}

/// A node paused long enough to be judged dead, whose executions another node took over and
/// ended, wakes still holding one parked in its restart grace; once it takes that
/// execution's machine back it must not offer or end it again. Its writes of any execution
/// need its own fence, which the take-over deleted, so it stops instead. This seed (three
/// nodes) wrote the execution's end twice before.
#[test]
fn a_node_judged_dead_offers_and_ends_nothing_it_lost() {
    let report = simulate(&SimConfig {
        nodes: 3,
        ..SimConfig::new(1315)
    });
    assert_eq!(report.violation, None);
    assert!(report.finished > 0, "executions finished");
}

/// Waits registered during the fault phase end exactly once (the checker's invariants), and
/// across the seeds some are restored from a crashed daemon's disk while they are still open.
#[test]
fn waits_end_once_across_crashes_and_restarts() {
    let (mut registered, mut matched, mut restored) = (0, 0, 0);
    for seed in 0..40 {
        let report = simulate(&SimConfig {
            keep_transcript: true,
            ..SimConfig::new(seed)
        });
        assert_eq!(report.violation, None, "seed {seed}");
        let w = report.waits;
        assert_eq!(
            w.registered,
            w.matched + w.failed + w.revoked,
            "seed {seed}: every wait ended: {w:?}"
        );
        registered += w.registered;
        matched += w.matched;
        restored += report
            .transcript
            .iter()
            .filter(|l| l.contains("restored with") && !l.ends_with(" 0 waits"))
            .count();
    }
    assert!(registered >= 80, "{registered} waits");
    assert!(
        matched * 2 > registered,
        "{matched} of {registered} matched"
    );
    assert!(restored >= 10, "{restored} restarts restored open waits");
}
