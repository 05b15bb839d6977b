//! Token buckets per key (a context id, a source address) for signed machine requests and
//! connects. A refused request learns how many seconds until a token is back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// How big a bucket is and how fast it refills.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    /// Requests allowed in a burst.
    pub(crate) burst: f64,
    /// Tokens added per second.
    pub(crate) per_sec: f64,
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
