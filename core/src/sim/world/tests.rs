//! The simulation's restarts go through the records.

use super::*;

#[test]
fn restarts_are_restored_from_the_disks_and_every_seed_holds() {
    let mut restarts = 0;
    let mut records = 0;
    for seed in 0..30 {
        let report = simulate(&SimConfig::new(seed));
        assert_eq!(report.violation, None, "seed {seed}");
        restarts += report.restarts;
        records += report.records;
    }
    assert!(restarts > 30, "{restarts} restarts");
    assert!(records > 30 * 24, "{records} records");
}

#[test]
fn a_crash_on_a_disk_that_does_not_read_is_a_violation() {
    let mut world = World::new(&SimConfig::new(1));
    world.pump_all();
    assert!(
        world.store.written > 0,
        "registrations and chains were written"
    );
    world.store.corrupt_last();
    world.restart_node(0, false);
    let violation = world.checker.violation.clone().unwrap_or_default();
    assert!(violation.contains("does not read"), "{violation}");
}

#[test]
fn a_cluster_of_three_nodes_hands_off_fences_and_takes_over_and_every_seed_holds() {
    let mut totals = ClusterCounts::default();
    for seed in 0..30 {
        let report = simulate(&SimConfig {
            nodes: 3,
            ..SimConfig::new(seed)
        });
        assert_eq!(report.violation, None, "seed {seed}");
        assert_eq!(report.finished, 24, "seed {seed}: every execution ended");
        totals.add(&report.cluster);
    }
    // The faults reach every path the cluster has: not a world where nothing moves.
    assert!(totals.handoffs > 30, "{totals:?}");
    assert!(totals.takes > 30, "{totals:?}");
    assert!(totals.taken_from_dead > 10, "{totals:?}");
    assert!(totals.fenced > 3, "{totals:?}");
    assert!(totals.notices_lost > 10, "{totals:?}");
}

#[test]
fn a_lone_node_never_hands_off_or_is_fenced() {
    for seed in 0..10 {
        let report = simulate(&SimConfig::new(seed));
        assert_eq!(report.violation, None, "seed {seed}");
        let c = report.cluster;
        assert_eq!(
            (c.handoffs, c.takes, c.taken_from_dead, c.fenced),
            (0, 0, 0, 0)
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_cluster_transcript() {
    let config = SimConfig {
        nodes: 3,
        ..SimConfig::new(7)
    };
    let (a, b) = (simulate(&config), simulate(&config));
    assert_eq!(a.transcript_hash, b.transcript_hash);
    assert_eq!(a.cluster.handoffs, b.cluster.handoffs);
}
