//! Time as the host hands it in. `core` never reads a clock.
//!
//! Two clocks, for two jobs:
//! - [`UnixTime`] is wall-clock time in whole seconds since the Unix epoch. Signatures, key
//!   validity windows, tickets and replay windows use it, because the peer shares it.
//! - [`Instant`] is a monotonic instant the host counts from any origin it likes. Leases,
//!   retries and heartbeats use it, because wall time can jump.

use core::fmt;
use core::time::Duration;

/// Wall-clock time: whole seconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixTime(pub u64);

impl UnixTime {
    /// The time `secs` seconds after the epoch.
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs)
    }

    /// Seconds since the epoch.
    pub const fn as_secs(self) -> u64 {
        self.0
    }

    /// This time plus `secs` seconds, saturating at the end of time.
    pub const fn plus_secs(self, secs: u64) -> Self {
        Self(self.0.saturating_add(secs))
    }

    /// This time minus `secs` seconds, saturating at the epoch.
    pub const fn minus_secs(self, secs: u64) -> Self {
        Self(self.0.saturating_sub(secs))
    }
}

impl fmt::Display for UnixTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0)
    }
}

/// A monotonic instant, counted by the host from an origin of its choosing.
///
/// Only differences between instants mean anything. A host must pass a clock that keeps
/// counting while the machine is suspended (on Linux `CLOCK_BOOTTIME`), so that a lease
/// does not outlive a suspend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The instant `since_origin` after the host's origin.
    pub const fn from_origin(since_origin: Duration) -> Self {
        Self(since_origin)
    }

    /// How long after the host's origin this instant is.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// This instant plus `d`, saturating.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

/// What the host says the time is: both clocks, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// The monotonic reading: leases, timers and backoff use it; it must count through suspend.
    pub instant: Instant,
    /// The wall-clock time.
    pub wall: UnixTime,
}

/// How long a role with no timer at all waits before it asks to be called again: the
/// `Wait` every role returns when nothing is due.
pub(crate) const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// The earliest of several wake-up times, with the reason for it: how each role computes the
/// `Wait` it returns last from `poll_output`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NextWake {
    now: Instant,
    next: Option<(Instant, &'static str)>,
}

impl NextWake {
    /// Starts from "idle": no timer yet; [`NextWake::get`] says `now + IDLE_WAIT` until one is
    /// considered.
    pub(crate) fn idle(now: Instant) -> Self {
        Self { now, next: None }
    }

    /// Keeps `at` if it is earlier than every timer considered so far.
    pub(crate) fn consider(&mut self, at: Instant, why: &'static str) {
        if self.next.is_none_or(|(kept, _)| at < kept) {
            self.next = Some((at, why));
        }
    }

    /// The earliest timer, or `now + IDLE_WAIT` ("idle") when none is earlier: when a role
    /// that drains until `Wait` must be called back.
    pub(crate) fn get(self) -> (Instant, &'static str) {
        let idle = self.now.saturating_add(IDLE_WAIT);
        match self.next {
            Some((at, why)) if at < idle => (at, why),
            _ => (idle, "idle"),
        }
    }

    /// The earliest timer however far away, `None` when there is none: what a table of many
    /// machines' wake-ups keeps, so a timer beyond `IDLE_WAIT` is never forgotten.
    pub(crate) fn timer(self) -> Option<(Instant, &'static str)> {
        self.next
    }
}

/// Fixes, for one process, how its monotonic clock maps onto wall-clock milliseconds, so that
/// the same [`Instant`] always gets the same wall time in the records the process writes.
///
/// Records carry deadlines in wall time because a new process counts its [`Instant`]s from a
/// new origin. The anchor is read once, when the machine is built or restored, from a [`Now`]
/// whose wall time is whole seconds: the mapping is exact within a process and good to about
/// one second across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallAnchor {
    /// Wall-clock milliseconds at the host's monotonic origin (may be negative for a host whose
    /// monotonic origin is far in the past).
    wall_ms_at_origin: i128,
}

/// How far apart two readings of [`Now::wall`] (whole seconds) may be for the same moment.
pub const WALL_PRECISION_MS: u64 = 1000;

/// The largest wall-clock millisecond value a record holds (the strict JSON reader's range).
pub const MAX_WALL_MS: u64 = crate::json::MAX_SAFE_INTEGER as u64;

impl WallAnchor {
    /// The anchor of a process whose clocks read `now`.
    pub fn new(now: Now) -> Self {
        let wall_ms = i128::from(now.wall.as_secs()) * 1000;
        Self {
            wall_ms_at_origin: wall_ms - now.instant.since_origin().as_millis() as i128,
        }
    }

    /// `at` in wall-clock milliseconds since the epoch, clamped to `0..=MAX_WALL_MS`.
    pub fn wall_ms(self, at: Instant) -> u64 {
        let ms = self.wall_ms_at_origin + at.since_origin().as_millis() as i128;
        ms.clamp(0, i128::from(MAX_WALL_MS)) as u64
    }
}

/// Moves a time point a record holds in wall-clock milliseconds (`at_ms`) onto the monotonic
/// clock of the process reading it at `now`.
///
/// The point keeps its distance from the moment the record was written (`written_ms`); the
/// time that has passed since is `now`'s wall time minus `written_ms`. When wall time went
/// backwards, no more than [`WALL_PRECISION_MS`] of it is believed: a clock set back extends a
/// deadline by at most that much beyond what it had left when it was written. Within that
/// precision the rebase is exact: the new process's [`WallAnchor`] maps the rebased instant
/// back to `at_ms`. Points that end up before the monotonic origin saturate at the origin.
pub fn rebase(at_ms: u64, written_ms: u64, now: Now) -> Instant {
    let now_ms = i128::from(now.wall.as_secs()) * 1000;
    let passed = (now_ms - i128::from(written_ms)).max(-i128::from(WALL_PRECISION_MS));
    let offset = i128::from(at_ms) - i128::from(written_ms);
    let target = now.instant.since_origin().as_millis() as i128 + offset - passed;
    let ms = target.clamp(0, i128::from(u64::MAX)) as u64;
    Instant::from_origin(Duration::from_millis(ms))
}

#[cfg(test)]
mod rebase_tests {
    use super::*;

    fn now(instant_ms: u64, wall_secs: u64) -> Now {
        Now {
            instant: Instant::from_origin(Duration::from_millis(instant_ms)),
            wall: UnixTime(wall_secs),
        }
    }

    #[test]
    fn an_anchor_maps_instants_to_wall_milliseconds_and_back_across_processes() {
        let old = now(5_000, 1_000);
        let anchor = WallAnchor::new(old);
        let deadline = Instant::from_origin(Duration::from_millis(65_000));
        let written = anchor.wall_ms(old.instant);
        assert_eq!(written, 1_000_000);
        assert_eq!(anchor.wall_ms(deadline), 1_060_000);
        // A new process, counting from a new origin, 20 s of wall time later.
        let new = now(100, 1_020);
        let rebased = rebase(anchor.wall_ms(deadline), written, new);
        assert_eq!(rebased, Instant::from_origin(Duration::from_millis(40_100)));
    }

    #[test]
    fn a_past_point_stays_in_the_past_and_saturates_at_the_origin() {
        // Committed 3 s before the write; the new process reads it 10 s later.
        let at = rebase(997_000, 1_000_000, now(50_000, 1_010));
        assert_eq!(at, Instant::from_origin(Duration::from_millis(37_000)));
        let at = rebase(997_000, 1_000_000, now(1_000, 1_010));
        assert_eq!(at, Instant::from_origin(Duration::ZERO));
    }

    #[test]
    fn wall_time_going_backwards_never_extends_a_deadline() {
        // 60 s left when written; the wall clock was then set back ten minutes: at most the
        // clock's precision is believed.
        let at = rebase(1_060_000, 1_000_000, now(7_000, 1_000 - 600));
        assert_eq!(at, Instant::from_origin(Duration::from_millis(68_000)));
        // Wall time jumping forward past the deadline expires it at once (or earlier).
        let at = rebase(1_060_000, 1_000_000, now(7_000, 1_000 + 3600));
        assert!(at <= Instant::from_origin(Duration::from_millis(7_000)));
    }

    #[test]
    fn a_rebased_point_maps_back_to_its_wall_time_within_the_clocks_precision() {
        // The writer's anchor put the write 400 ms after the reader's whole-second reading.
        let reader = now(3_000, 999);
        let at = rebase(1_010_000, 999_400, reader);
        assert_eq!(WallAnchor::new(reader).wall_ms(at), 1_010_000);
    }

    #[test]
    fn wall_milliseconds_are_clamped_to_what_a_record_can_hold() {
        let anchor = WallAnchor::new(now(0, 1_000));
        let far = Instant::from_origin(Duration::from_secs(u64::MAX / 2));
        assert_eq!(anchor.wall_ms(far), MAX_WALL_MS);
        let anchor = WallAnchor::new(now(10_000_000, 0));
        assert_eq!(anchor.wall_ms(Instant::from_origin(Duration::ZERO)), 0);
    }
}
