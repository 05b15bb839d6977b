//! The process's clock: one monotonic origin taken at start, mapped both ways between the
//! core's [`Instant`] (time since that origin) and tokio's, plus the wall clock in seconds.
//!
//! It owns the only `Instant::now()` and `SystemTime::now()` the dispatcher sees; it never
//! sleeps and never decides anything.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use outpost_core::time::{Instant, Now, UnixTime};

/// The origin of the process's monotonic time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: tokio::time::Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub(crate) fn start() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }

    /// The core's `Now`: monotonic since the origin, and wall seconds.
    pub(crate) fn now(&self) -> Now {
        Now {
            instant: Instant::from_origin(self.origin.elapsed()),
            wall: wall_now(),
        }
    }

    /// The tokio instant of a core instant, for `sleep_until`.
    pub(crate) fn to_tokio(self, at: Instant) -> tokio::time::Instant {
        self.origin
            .checked_add(at.since_origin())
            .unwrap_or_else(|| self.origin + Duration::from_secs(365 * 24 * 3600))
    }
}

/// Wall-clock seconds since the Unix epoch.
pub(crate) fn wall_now() -> UnixTime {
    UnixTime(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

/// Wall-clock milliseconds since the Unix epoch (zero before 1970): what wait rows and their
/// events are stamped with.
pub(crate) fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
