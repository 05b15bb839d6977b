//! The clock is monotonic and counts from CLOCK_BOOTTIME.

use std::time::Duration;

use outpost_adapters::clock::{Clock, boottime, wall_now};
use outpost_core::time::Instant;

#[test]
fn instants_never_go_back_and_follow_boottime() {
    let before = boottime().unwrap();
    let clock = Clock::new().unwrap();
    let mut last = clock.instant();
    for _ in 0..10_000 {
        let now = clock.instant();
        assert!(now >= last, "{now:?} < {last:?}");
        last = now;
    }
    // Time itself: the clock must advance by a known span before the next reading.
    std::thread::sleep(Duration::from_millis(30));
    let later = clock.instant();
    let after = boottime().unwrap();
    assert!(later.since_origin() >= Duration::from_millis(30));
    // The instant is BOOTTIME minus the clock's origin, which lies between the two readings.
    assert!(later.since_origin() <= after - before);
    // CLOCK_BOOTTIME is at least CLOCK_MONOTONIC (it adds the time spent suspended).
    let monotonic = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    let monotonic = Duration::new(monotonic.tv_sec() as u64, monotonic.tv_nsec() as u32);
    assert!(boottime().unwrap() >= monotonic);
}

#[test]
fn a_deadline_maps_to_the_time_left_and_saturates_once_passed() {
    let clock = Clock::new().unwrap();
    let now = clock.now();
    assert!(now.wall.as_secs() > 1_700_000_000);
    assert!(wall_now() >= now.wall);
    let deadline = now.instant.saturating_add(Duration::from_secs(60));
    let left = clock.until(deadline);
    assert!(
        left <= Duration::from_secs(60) && left > Duration::from_secs(59),
        "{left:?}"
    );
    assert_eq!(
        clock.until(Instant::from_origin(Duration::ZERO)),
        Duration::ZERO
    );
}
