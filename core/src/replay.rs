//! Replay protection for signed HTTP requests: freshness of `created` / `expires`, and
//! single use of each `nonce`, in bounded memory.
//!
//! A nonce is remembered only as long as a request carrying it could still be fresh; after
//! that the time checks alone refuse it, so the entry is evicted. If the cache is full of
//! entries that are all still live, the request is refused with
//! [`ReplayError::CacheFull`] — the cache never grows past its capacity.
//!
//! This module owns the decision "fresh and first use"; it never reads a clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::httpsig::VerifiedRequest;
use crate::time::UnixTime;

/// Limits of a [`ReplayGuard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayPolicy {
    /// How long after `created` a request is accepted, in seconds.
    pub max_age_secs: u64,
    /// How far the signer's clock may run ahead of ours, in seconds.
    pub max_skew_secs: u64,
    /// The most nonces remembered at once.
    pub capacity: usize,
    /// The longest nonce accepted, in bytes.
    pub max_nonce_len: usize,
}

impl Default for ReplayPolicy {
    fn default() -> Self {
        Self {
            max_age_secs: 300,
            max_skew_secs: 30,
            capacity: 100_000,
            max_nonce_len: 128,
        }
    }
}

/// Why a request was refused as stale or replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The signature lacks `created` or `nonce`.
    #[error("the signature has no {0}")]
    MissingParameter(&'static str),
    /// The nonce is longer than allowed.
    #[error("nonce of {0} bytes is too long")]
    NonceTooLong(usize),
    /// `created` is ahead of our clock by more than the allowed skew.
    #[error("created {created} is in the future (now {now})")]
    CreatedInFuture {
        /// The request's `created`.
        created: UnixTime,
        /// Our time.
        now: UnixTime,
    },
    /// `created` is older than the allowed age.
    #[error("created {created} is too old (now {now})")]
    TooOld {
        /// The request's `created`.
        created: UnixTime,
        /// Our time.
        now: UnixTime,
    },
    /// `expires` has passed.
    #[error("signature expired at {expires} (now {now})")]
    Expired {
        /// The request's `expires`.
        expires: UnixTime,
        /// Our time.
        now: UnixTime,
    },
    /// The nonce was already used by this key.
    #[error("nonce already used")]
    NonceReplayed,
    /// Every slot holds a live nonce.
    #[error("replay cache is full")]
    CacheFull,
}

impl ReplayError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ReplayError::MissingParameter(_) => "missing_parameter",
            ReplayError::NonceTooLong(_) => "nonce_too_long",
            ReplayError::CreatedInFuture { .. } => "created_in_future",
            ReplayError::TooOld { .. } => "signature_too_old",
            ReplayError::Expired { .. } => "signature_expired",
            ReplayError::NonceReplayed => "nonce_replayed",
            ReplayError::CacheFull => "replay_cache_full",
        }
    }
}

type NonceKey = (String, String);

/// Remembers recently used nonces, per key id.
#[derive(Debug, Clone)]
pub struct ReplayGuard {
    policy: ReplayPolicy,
    /// Nonce → the last time a request carrying it could still be fresh.
    seen: HashMap<NonceKey, UnixTime>,
    /// The same entries, soonest expiry first, for eviction.
    expiry: BinaryHeap<Reverse<(UnixTime, NonceKey)>>,
}

impl ReplayGuard {
    /// An empty guard.
    pub fn new(policy: ReplayPolicy) -> Self {
        Self {
            policy,
            seen: HashMap::new(),
            expiry: BinaryHeap::new(),
        }
    }

    /// Nonces remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True when no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Checks a verified request's freshness and consumes its nonce.
    pub fn check_request(
        &mut self,
        req: &VerifiedRequest,
        now: UnixTime,
    ) -> Result<(), ReplayError> {
        let created = req
            .params
            .created
            .ok_or(ReplayError::MissingParameter("created"))?;
        let nonce = req
            .params
            .nonce
            .as_deref()
            .ok_or(ReplayError::MissingParameter("nonce"))?;
        self.check(
            &req.keyid,
            nonce,
            UnixTime(created),
            req.params.expires.map(UnixTime),
            now,
        )
    }

    /// Checks freshness and consumes `nonce` for `keyid`. On any refusal nothing is
    /// remembered.
    pub fn check(
        &mut self,
        keyid: &str,
        nonce: &str,
        created: UnixTime,
        expires: Option<UnixTime>,
        now: UnixTime,
    ) -> Result<(), ReplayError> {
        let p = self.policy;
        if nonce.len() > p.max_nonce_len {
            return Err(ReplayError::NonceTooLong(nonce.len()));
        }
        if created > now.plus_secs(p.max_skew_secs) {
            return Err(ReplayError::CreatedInFuture { created, now });
        }
        let fresh_until = created.plus_secs(p.max_age_secs);
        if now > fresh_until {
            return Err(ReplayError::TooOld { created, now });
        }
        let valid_until = match expires {
            Some(e) => {
                let until = e.plus_secs(p.max_skew_secs);
                if now > until {
                    return Err(ReplayError::Expired { expires: e, now });
                }
                until.min(fresh_until)
            }
            None => fresh_until,
        };
        self.evict(now);
        let key = (keyid.to_owned(), nonce.to_owned());
        if self.seen.contains_key(&key) {
            return Err(ReplayError::NonceReplayed);
        }
        if self.seen.len() >= p.capacity {
            return Err(ReplayError::CacheFull);
        }
        self.seen.insert(key.clone(), valid_until);
        self.expiry.push(Reverse((valid_until, key)));
        Ok(())
    }

    /// Forgets every nonce whose requests can no longer be fresh at `now`.
    pub fn evict(&mut self, now: UnixTime) {
        while let Some(Reverse((until, _))) = self.expiry.peek() {
            if *until >= now {
                break;
            }
            if let Some(Reverse((_, key))) = self.expiry.pop() {
                self.seen.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(capacity: usize) -> ReplayGuard {
        ReplayGuard::new(ReplayPolicy {
            capacity,
            ..ReplayPolicy::default()
        })
    }

    #[test]
    fn a_nonce_is_accepted_once_per_key() {
        let mut g = guard(10);
        let now = UnixTime(1_000);
        assert!(
            g.check("k", "n1", now, Some(now.plus_secs(60)), now)
                .is_ok()
        );
        assert_eq!(
            g.check("k", "n1", now, Some(now.plus_secs(60)), now)
                .unwrap_err()
                .code(),
            "nonce_replayed"
        );
        assert!(g.check("other-key", "n1", now, None, now).is_ok());
    }

    #[test]
    fn freshness() {
        let mut g = guard(10);
        let now = UnixTime(10_000);
        let code = |g: &mut ReplayGuard, created: u64, expires: Option<u64>| {
            g.check(
                "k",
                &format!("{created}-{expires:?}"),
                UnixTime(created),
                expires.map(UnixTime),
                now,
            )
            .map_err(|e| e.code())
        };
        assert_eq!(code(&mut g, 10_031, None), Err("created_in_future"));
        assert_eq!(code(&mut g, 10_030, None), Ok(()));
        assert_eq!(code(&mut g, 9_699, None), Err("signature_too_old"));
        assert_eq!(code(&mut g, 9_700, None), Ok(()));
        assert_eq!(code(&mut g, 9_950, Some(9_969)), Err("signature_expired"));
        assert_eq!(code(&mut g, 9_950, Some(9_970)), Ok(()));
        assert!(g.check("k", &"x".repeat(129), now, None, now).is_err());
    }

    #[test]
    fn memory_is_bounded_and_expired_entries_make_room() {
        let mut g = guard(3);
        let t0 = UnixTime(1_000);
        for n in ["a", "b", "c"] {
            g.check("k", n, t0, Some(t0.plus_secs(10)), t0).unwrap();
        }
        assert_eq!(
            g.check("k", "d", t0, None, t0).unwrap_err().code(),
            "replay_cache_full"
        );
        assert_eq!(g.len(), 3);
        // After the entries' requests could no longer be fresh, they are evicted.
        let later = t0.plus_secs(41);
        g.check("k", "d", later, None, later).unwrap();
        assert_eq!(g.len(), 1);
        // And the old nonce is refused by time, not by memory.
        assert_eq!(
            g.check("k", "a", t0, Some(t0.plus_secs(10)), later)
                .unwrap_err()
                .code(),
            "signature_expired"
        );
    }
}
