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
        world.server_disk.written > 0,
        "registrations and chains were written"
    );
    world.server_disk.corrupt_last();
    world.restart_server(false);
    let violation = world.checker.violation.clone().unwrap_or_default();
    assert!(violation.contains("does not read"), "{violation}");
}
