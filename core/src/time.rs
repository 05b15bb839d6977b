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
    /// The monotonic instant.
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
    at: Instant,
    why: &'static str,
}

impl NextWake {
    /// Starts from "idle": nothing to do before `now + IDLE_WAIT`.
    pub(crate) fn idle(now: Instant) -> Self {
        Self {
            at: now.saturating_add(IDLE_WAIT),
            why: "idle",
        }
    }

    /// Keeps `at` if it is earlier than what is kept.
    pub(crate) fn consider(&mut self, at: Instant, why: &'static str) {
        if at < self.at {
            self.at = at;
            self.why = why;
        }
    }

    /// The earliest time and why.
    pub(crate) fn get(self) -> (Instant, &'static str) {
        (self.at, self.why)
    }
}
