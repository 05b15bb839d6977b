//! The process's clock: the adapters' suspend-aware clock (`CLOCK_BOOTTIME`, so a lease or
//! a deadline counts the time the machine slept), mapped to tokio's instants for
//! `sleep_until`, and the wall clock the rest of the server stamps records with.
//!
//! It owns the dispatcher's only reading of the monotonic clock; it never sleeps and never
//! decides anything. The wall clock is the adapters' (`wall_now`, `wall_now_ms`), the one
//! every part of outpost reads.

use std::sync::Arc;
use std::time::Duration;

pub(crate) use outpost_adapters::clock::{ClockError, wall_now, wall_now_ms};
use outpost_core::time::{Instant, Now};

/// The process's monotonic origin, shared by every task that reads the time.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    inner: Arc<outpost_adapters::clock::Clock>,
}

impl Clock {
    /// A clock whose origin is now; refused when the system has no `CLOCK_BOOTTIME`.
    pub(crate) fn start() -> Result<Self, ClockError> {
        Ok(Self {
            inner: Arc::new(outpost_adapters::clock::Clock::new()?),
        })
    }

    /// The core's `Now`: monotonic since the origin (never backwards), and wall seconds.
    pub(crate) fn now(&self) -> Now {
        self.inner.now()
    }

    /// The tokio instant of a core instant, for `sleep_until`: now plus what is left until
    /// it (a deadline past is now).
    pub(crate) fn to_tokio(&self, at: Instant) -> tokio::time::Instant {
        let left = self
            .inner
            .until(at)
            .min(Duration::from_secs(365 * 24 * 3600));
        tokio::time::Instant::now() + left
    }
}
