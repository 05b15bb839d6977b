//! Start-up requests that wait out a server which is not answering yet.
//!
//! A daemon started at boot, or one of many machines joining at once, can find its server
//! unreachable, overloaded (5xx) or asking it to slow down (429). Those are tried again with
//! jittered backoff until they succeed or the owner stops the daemon; a refusal of the request
//! itself (a bad token, a key set that does not verify) ends the start at once. So does an
//! unreachable server on a first join, when [`Unreachable::Fails`] says so: a server never
//! reached is more likely a mistyped URL than one that is down. This module
//! owns only the waiting: it never decides what a request means.

use std::time::{Duration, Instant};

use outpost_core::daemon::Backoff;
use outpost_core::rng::SplitMix64;

use super::{STOP_POLL, StopSignal};
use outpost_adapters::http::HttpError;

/// Whether an unreachable server is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreachable {
    /// Try again (the server answered before: it will again).
    Waits,
    /// Fail at once (a first join).
    Fails,
}

/// How a patient request ended.
pub(crate) enum Patience<T> {
    /// It succeeded.
    Done(T),
    /// The owner stopped the daemon while it waited.
    Stopped,
}

/// Runs `request` until it succeeds, fails for good, or `stop` is raised. `what` names the
/// request in the log line each retry writes.
pub(crate) fn patiently<T>(
    what: &str,
    unreachable: Unreachable,
    stop: &StopSignal,
    mut request: impl FnMut() -> Result<T, HttpError>,
) -> Result<Patience<T>, HttpError> {
    let backoff = Backoff::default();
    let mut rng = SplitMix64::new(jitter_seed());
    let mut failures = 0u32;
    loop {
        if stop.count() > 0 {
            return Ok(Patience::Stopped);
        }
        match request() {
            Ok(value) => return Ok(Patience::Done(value)),
            Err(e)
                if e.is_transient()
                    && (unreachable == Unreachable::Waits
                        || !matches!(e, HttpError::Transport { .. })) =>
            {
                let floor = if e.status() == Some(429) {
                    Duration::from_secs(1)
                } else {
                    Duration::ZERO
                };
                let delay = backoff.delay(failures, &mut rng).max(floor);
                failures = failures.saturating_add(1);
                tracing::warn!(
                    code = e.code(),
                    retry_in_ms = delay.as_millis() as u64,
                    "{what}: {e}; trying again (Ctrl-C stops)"
                );
                if wait(delay, stop) {
                    return Ok(Patience::Stopped);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sleeps `delay` in slices; true when `stop` was raised meanwhile.
fn wait(delay: Duration, stop: &StopSignal) -> bool {
    let until = Instant::now() + delay;
    loop {
        if stop.count() > 0 {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(STOP_POLL));
    }
}

/// A seed that differs between daemons started in the same instant.
fn jitter_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return u64::from(std::process::id());
    }
    u64::from_le_bytes(bytes)
}
