//! Token buckets per key (a context id, a source address) for signed machine requests and
//! connects. A refused request learns how many seconds until a token is back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// How big a bucket is and how fast it refills.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests allowed in a burst.
    pub burst: f64,
    /// Tokens added per second.
    pub per_sec: f64,
}

impl Rate {
    /// `per_sec` requests a second with a burst of `burst_secs` seconds' worth (at least
    /// one request).
    pub fn per_second(per_sec: f64, burst_secs: f64) -> Self {
        Self {
            burst: (per_sec * burst_secs).max(1.0),
            per_sec,
        }
    }
}

/// The limits on signed machine requests and WebSocket connects (PROTOCOL §11.6: a refusal is
/// 429 `rate_limited` with `Retry-After`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    /// Per source address: what a fleet behind one NAT shares.
    pub per_address: Rate,
    /// Per context: what one machine (or a leaked token for it) may do.
    pub per_context: Rate,
}

impl RateLimits {
    /// The default requests a second per source address.
    pub const DEFAULT_PER_ADDRESS: f64 = 10.0;
    /// The default requests a second per context.
    pub const DEFAULT_PER_CONTEXT: f64 = 5.0;
    /// A source address may burst three seconds' worth (a fleet restarting at once).
    pub const ADDRESS_BURST_SECS: f64 = 3.0;
    /// A context may burst four seconds' worth (a daemon's start: register, keys, ticket).
    pub const CONTEXT_BURST_SECS: f64 = 4.0;

    /// `per_address` and `per_context` requests a second, with their bursts.
    pub fn new(per_address: f64, per_context: f64) -> Self {
        Self {
            per_address: Rate::per_second(per_address, Self::ADDRESS_BURST_SECS),
            per_context: Rate::per_second(per_context, Self::CONTEXT_BURST_SECS),
        }
    }
}

impl Default for RateLimits {
    /// 10 a second with a burst of 30 per address; 5 a second with a burst of 20 per context.
    fn default() -> Self {
        Self::new(Self::DEFAULT_PER_ADDRESS, Self::DEFAULT_PER_CONTEXT)
    }
}

/// Buckets for one kind of key.
pub(crate) struct Limiter {
    rate: Rate,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// The most keys a limiter tracks before it forgets full buckets.
const MAX_KEYS: usize = 100_000;

impl Limiter {
    /// A limiter with `rate` for every key.
    pub(crate) fn new(rate: Rate) -> Self {
        Self {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `key`; `Err(seconds)` to wait when there is none.
    pub(crate) fn take(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_KEYS {
            let rate = self.rate;
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() * rate.per_sec < rate.burst
            });
        }
        let (tokens, at) = buckets
            .entry(key.to_owned())
            .or_insert((self.rate.burst, now));
        let refilled = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate.per_sec)
            .min(self.rate.burst);
        *at = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            Ok(())
        } else {
            *tokens = refilled;
            let wait = ((1.0 - refilled) / self.rate.per_sec).ceil();
            Err((wait as u64).max(1))
        }
    }
}
