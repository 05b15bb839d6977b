//! In-memory harnesses that drive the state machines without any I/O: [`Pair`] (one session,
//! one daemon) for protocol tests, and the seeded multi-daemon simulation used by
//! `examples/simulate.rs`.
//!
//! Test support only: this module exists with the `test-support` feature (core's own tests,
//! benches and examples turn it on) and never in a production build.
//!
//! Everything here is deterministic: time is simulated, randomness comes from a seed, and
//! the same seed gives the same transcript. Byte streams between the two sides go through the
//! length-prefixed codec and may be cut at arbitrary points.

mod checker;
mod executor;
mod pair;
mod workload;
mod world;

pub use checker::WaitCounts;
pub use executor::FakeExecutor;
pub use pair::{DRIVE_BOUND, Pair, PairConfig, PairError, Tamper, test_keys};
pub use world::{ClusterCounts, SimConfig, SimReport, simulate};

use std::time::Duration;

use crate::time::{Instant, Now, UnixTime};

/// The simulated clock's origin: wall time 2026-01-01T00:00:00Z.
pub const WALL_ORIGIN: u64 = 1_767_225_600;

/// The `now` of a process that started at `started`, after `elapsed` of simulated time: its
/// monotonic instants count from its own start, as a real process's do, while wall time is
/// the world's. A restarted role gets a new `started`, so its restore must rebase every
/// deadline it reads from its records.
pub fn now_in_process(elapsed: Duration, started: Duration) -> Now {
    Now {
        instant: Instant::from_origin(elapsed.saturating_sub(started)),
        wall: UnixTime(WALL_ORIGIN + elapsed.as_secs()),
    }
}

/// The simulated `now` after `elapsed`.
pub fn now_at(elapsed: Duration) -> Now {
    Now {
        instant: Instant::from_origin(elapsed),
        wall: UnixTime(WALL_ORIGIN + elapsed.as_secs()),
    }
}
