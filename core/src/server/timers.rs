//! The dispatcher's wake-up tables: one entry per key (a machine's session, a queued
//! execution), ordered by time, so the next wake and the entries due are found in O(log n)
//! instead of by asking every session.
//!
//! It only stores what it is told: the dispatcher must update a key's entry whenever the
//! thing behind it changed (after every input it fed a session), and it never decides what a
//! timer means.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hash};
use std::mem::replace;

use crate::time::Instant;

/// SipHash with fixed keys: the same in every process, and core draws no randomness.
pub(super) type FixedHasher = BuildHasherDefault<DefaultHasher>;

/// Wake-ups keyed by `K`: at most one per key.
#[derive(Debug)]
pub(super) struct WakeTable<K: Ord + Hash + Clone> {
    by_time: BTreeSet<(Instant, K)>,
    /// Each key's entry, by hash: a fixed-key hasher, so no randomness and no ordering needed.
    by_key: HashMap<K, (Instant, &'static str), FixedHasher>,
    /// The first entry of `by_time` with its reason, kept up to date by every `set`, so the
    /// dispatcher's next wake-up (asked for on every drain) costs no tree walk.
    earliest: Option<(Instant, K, &'static str)>,
}

impl<K: Ord + Hash + Clone> Default for WakeTable<K> {
    fn default() -> Self {
        Self {
            by_time: BTreeSet::new(),
            by_key: HashMap::default(),
            earliest: None,
        }
    }
}

impl<K: Ord + Hash + Clone> WakeTable<K> {
    /// Sets (`Some`) or clears (`None`) the wake-up of `key`, replacing the one it had.
    pub(super) fn set(&mut self, key: &K, wake: Option<(Instant, &'static str)>) {
        let old = match wake {
            Some(w) => self.by_key.insert(key.clone(), w),
            None => self.by_key.remove(key),
        };
        if old == wake {
            return;
        }
        if let Some((at, _)) = old {
            self.by_time.remove(&(at, key.clone()));
        }
        if let Some((at, _)) = wake {
            self.by_time.insert((at, key.clone()));
        }
        match (wake, &self.earliest) {
            (Some((at, why)), earliest)
                if earliest
                    .as_ref()
                    .is_none_or(|(t, k, _)| (at, key) < (*t, k)) =>
            {
                self.earliest = Some((at, key.clone(), why));
            }
            (_, Some((_, k, _))) if k == key => {
                // The earliest entry moved later, changed its reason or went: find the next.
                self.earliest = self.by_time.first().and_then(|(t, k)| {
                    let (_, why) = self.by_key.get(k)?;
                    Some((*t, k.clone(), *why))
                });
            }
            _ => {}
        }
    }

    /// The earliest wake-up and why.
    pub(super) fn first(&self) -> Option<(Instant, &'static str)> {
        self.earliest.as_ref().map(|(at, _, why)| (*at, *why))
    }

    /// Keys whose wake-up is at or before `now`, earliest first (they stay in the table until
    /// set again).
    pub(super) fn due(&self, now: Instant) -> Vec<K> {
        self.by_time
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// How many keys have a wake-up.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// One machine's entry in [`SessionWakes`].
#[derive(Debug, Clone, Copy)]
struct SlotWake {
    /// Orders like the machine's context id.
    rank: u64,
    wake: Option<(Instant, &'static str)>,
}

/// Ordered by time, then rank (so ties fall as the context ids would), carrying the storage
/// position and the reason, so the earliest entry needs no second lookup.
type TimeEntry = (Instant, u64, u32, &'static str);

/// The machines' session wake-ups, by storage position: at most one per machine. A heartbeat
/// moves one entry without hashing or comparing strings, and the earliest entry is kept at
/// hand for every drain.
#[derive(Debug, Default)]
pub(super) struct SessionWakes {
    slots: Vec<SlotWake>,
    by_time: BTreeSet<TimeEntry>,
    earliest: Option<TimeEntry>,
}

impl SessionWakes {
    /// Adds the next position, with `rank` and no wake-up.
    pub(super) fn push(&mut self, rank: u64) {
        self.slots.push(SlotWake { rank, wake: None });
    }

    /// Sets (`Some`) or clears (`None`) the wake-up of the machine at `slot`.
    pub(super) fn set(&mut self, slot: usize, wake: Option<(Instant, &'static str)>) {
        let entry = &mut self.slots[slot];
        let rank = entry.rank;
        let old = replace(&mut entry.wake, wake);
        if old == wake {
            return;
        }
        let at = |w: (Instant, &'static str)| (w.0, rank, slot as u32, w.1);
        let old = old.map(at);
        let new = wake.map(at);
        if let Some(old) = old {
            self.by_time.remove(&old);
        }
        if let Some(new) = new {
            self.by_time.insert(new);
        }
        match (new, self.earliest) {
            (Some(new), earliest) if earliest.is_none_or(|e| new < e) => {
                self.earliest = Some(new);
            }
            (_, Some(earliest)) if Some(earliest) == old => {
                // The earliest entry moved later, changed its reason or went: find the next.
                self.earliest = self.by_time.first().copied();
            }
            _ => {}
        }
    }

    /// The earliest wake-up and why.
    pub(super) fn first(&self) -> Option<(Instant, &'static str)> {
        self.earliest.map(|(at, _, _, why)| (at, why))
    }

    /// Positions whose wake-up is at or before `now`, earliest first (they stay in the table
    /// until set again).
    pub(super) fn due(&self, now: Instant) -> Vec<usize> {
        self.by_time
            .iter()
            .take_while(|(at, ..)| *at <= now)
            .map(|&(_, _, slot, _)| slot as usize)
            .collect()
    }

    /// Gives every position the rank `rank(slot)`, keeping its wake-up.
    pub(super) fn rerank(&mut self, rank: impl Fn(usize) -> u64) {
        self.by_time.clear();
        self.earliest = None;
        for slot in 0..self.slots.len() {
            let wake = self.slots[slot].wake.take();
            self.slots[slot].rank = rank(slot);
            self.set(slot, wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> Instant {
        Instant::from_origin(Duration::from_secs(secs))
    }

    #[test]
    fn keeps_one_entry_per_key_and_finds_the_earliest_and_the_due() {
        let mut t = WakeTable::<String>::default();
        let (a, b) = ("a".to_owned(), "b".to_owned());
        t.set(&a, Some((at(10), "silence")));
        t.set(&b, Some((at(5), "lease")));
        assert_eq!(t.first(), Some((at(5), "lease")));
        t.set(&b, Some((at(20), "lease")));
        assert_eq!(t.len(), 2, "a moved entry replaces the old one");
        assert_eq!(t.first(), Some((at(10), "silence")));
        assert_eq!(t.due(at(9)), Vec::<String>::new());
        assert_eq!(t.due(at(20)), vec![a.clone(), b.clone()]);
        t.set(&a, None);
        assert_eq!(t.due(at(20)), vec![b.clone()]);
        t.set(&b, None);
        assert_eq!(t.first(), None);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_earliest_entry_follows_every_change_as_a_fresh_walk_would_find_it() {
        let mut t = WakeTable::<u32>::default();
        let mut state = 0x9e37_79b9_u64;
        for _ in 0..5_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let key = (state >> 33) as u32 % 16;
            let wake = match (state >> 20) % 4 {
                0 => None,
                1 => Some((at((state >> 40) % 50), "lease")),
                _ => Some((at((state >> 40) % 50), "silence")),
            };
            t.set(&key, wake);
            let walked = t.by_time.first().map(|(at, k)| (*at, t.by_key[k].1));
            assert_eq!(t.first(), walked);
        }
    }

    #[test]
    fn session_wakes_fall_in_time_then_rank_order_and_follow_every_change() {
        let mut t = SessionWakes::default();
        // Positions 0..4 with ranks that order them 3, 1, 0, 2.
        for rank in [30, 20, 40, 10] {
            t.push(rank);
        }
        t.set(0, Some((at(5), "silence")));
        t.set(1, Some((at(5), "lease")));
        t.set(3, Some((at(9), "hello timeout")));
        assert_eq!(
            t.first(),
            Some((at(5), "lease")),
            "a tie goes to the lower rank"
        );
        assert_eq!(t.due(at(9)), vec![1, 0, 3]);
        t.rerank(|slot| [30, 40, 20, 10][slot]);
        assert_eq!(
            t.first(),
            Some((at(5), "silence")),
            "ranks changed, wake-ups kept"
        );
        assert_eq!(t.due(at(9)), vec![0, 1, 3]);
        t.set(0, None);
        assert_eq!(t.first(), Some((at(5), "lease")));
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..5_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let slot = (state >> 33) as usize % 4;
            let wake = match (state >> 20) % 4 {
                0 => None,
                1 => Some((at((state >> 40) % 20), "lease")),
                _ => Some((at((state >> 40) % 20), "silence")),
            };
            t.set(slot, wake);
            let walked = t.by_time.first().map(|&(at, _, _, why)| (at, why));
            assert_eq!(t.first(), walked);
            let by_time: Vec<usize> = t.by_time.iter().map(|e| e.2 as usize).collect();
            let mut expected: Vec<usize> = (0..4).filter(|&s| t.slots[s].wake.is_some()).collect();
            expected.sort_by_key(|&s| (t.slots[s].wake.map(|w| w.0), t.slots[s].rank));
            assert_eq!(by_time, expected);
        }
    }
}
