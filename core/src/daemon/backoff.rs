//! Capped exponential backoff with seeded jitter.

use std::time::Duration;

use crate::rng::SplitMix64;

/// Reconnect delays: `initial · 2^failures`, capped at `max`, then jittered to between half
/// and all of that ("equal jitter"), so a fleet that lost its server does not return in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub initial: Duration,
    /// The cap on `initial · 2^failures`, before jitter; jitter never makes a delay longer.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The delay before the attempt that follows `failures` consecutive failures.
    pub fn delay(&self, failures: u32, rng: &mut SplitMix64) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX))
            .min(self.max);
        let half = exp / 2;
        let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(rng.below(spread.saturating_add(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_caps_and_jitters_deterministically() {
        let b = Backoff::default();
        let mut rng = SplitMix64::new(1);
        let d0 = b.delay(0, &mut rng);
        assert!(d0 >= Duration::from_millis(250) && d0 <= Duration::from_millis(500));
        let d5 = b.delay(5, &mut rng);
        assert!(d5 >= Duration::from_secs(8) && d5 <= Duration::from_secs(16));
        for f in [7, 20, 40, u32::MAX] {
            let d = b.delay(f, &mut rng);
            assert!(
                d >= Duration::from_secs(30) && d <= Duration::from_secs(60),
                "{d:?}"
            );
        }
        let mut a = SplitMix64::new(9);
        let mut c = SplitMix64::new(9);
        assert_eq!(b.delay(3, &mut a), b.delay(3, &mut c));
    }
}
