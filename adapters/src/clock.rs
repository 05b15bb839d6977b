//! The host's clock for the core: [`Clock::now`] reads `CLOCK_BOOTTIME` (monotonic, and it
//! keeps counting while the machine is suspended, so a lease never outlives a suspend) and the
//! wall clock together, and [`Clock::until`] turns a core [`Instant`] deadline into a
//! [`Duration`] to sleep.
//!
//! This module owns the origin of the core's monotonic instants for one process. It never
//! sleeps and never hands the core a time earlier than one it already handed out.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::time::{ClockId, clock_gettime};
use outpost_core::time::{Instant, Now, UnixTime};

/// Why the clock could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read CLOCK_BOOTTIME: {0}")]
pub struct ClockError(#[from] nix::Error);

impl ClockError {
    /// The stable code, always `clock_unavailable`.
    pub fn code(&self) -> &'static str {
        "clock_unavailable"
    }
}

/// Reads `CLOCK_BOOTTIME` as a duration since boot: counts suspended time, never goes back.
pub fn boottime() -> Result<Duration, ClockError> {
    let ts = clock_gettime(ClockId::CLOCK_BOOTTIME)?;
    let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec()).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// Wall-clock seconds since the Unix epoch (zero if the clock is set before 1970).
pub fn wall_now() -> UnixTime {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    UnixTime(secs)
}

/// Wall-clock milliseconds since the Unix epoch (zero before 1970): what condition waits and
/// their events are stamped with.
pub fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The process's clock: instants count from `CLOCK_BOOTTIME` at the moment it was made, so
/// they start near zero; readings are clamped to never run backwards.
#[derive(Debug)]
pub struct Clock {
    origin: Duration,
    last: Mutex<Instant>,
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Result<Self, ClockError> {
        Ok(Self {
            origin: boottime()?,
            last: Mutex::new(Instant::from_origin(Duration::ZERO)),
        })
    }

    /// The monotonic instant now (suspend-aware).
    pub fn instant(&self) -> Instant {
        let since = boottime().map_or(Duration::ZERO, |t| t.saturating_sub(self.origin));
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let at = Instant::from_origin(since).max(*last);
        *last = at;
        at
    }

    /// Both clocks, read together.
    pub fn now(&self) -> Now {
        Now {
            instant: self.instant(),
            wall: wall_now(),
        }
    }

    /// How long from now until `deadline` (zero when it has passed).
    pub fn until(&self, deadline: Instant) -> Duration {
        deadline.saturating_duration_since(self.instant())
    }
}
