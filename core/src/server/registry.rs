//! The dispatcher's registered machines: stored by position, found by context id through a
//! hash index, walked in context-id order through a sorted index, and each given a *rank*, a
//! number that orders like its context id, so the wake-up table breaks ties between machines
//! as the ids would without comparing strings.
//!
//! Machines are only ever added (a revoked machine stays, refusing its daemon). It never
//! decides anything about a session; it only finds them.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use super::Machine;
use super::timers::FixedHasher;

/// Room left between neighbouring ranks when they are handed out afresh, so a machine that
/// registers between two others usually fits without renumbering.
const RANK_GAP: u64 = 1 << 32;

/// Every registered machine. See the module docs.
#[derive(Default)]
pub(super) struct Registry {
    machines: Vec<Machine>,
    ranks: Vec<u64>,
    by_id: HashMap<String, u32, FixedHasher>,
    in_order: BTreeMap<String, u32>,
}

impl Registry {
    /// Where `id` is stored.
    pub(super) fn slot(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).map(|&s| s as usize)
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(super) fn get(&self, id: &str) -> Option<&Machine> {
        self.slot(id).map(|s| &self.machines[s])
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Machine> {
        let slot = self.slot(id)?;
        Some(&mut self.machines[slot])
    }

    /// How many machines are registered (their slots are `0..len`).
    pub(super) fn len(&self) -> usize {
        self.machines.len()
    }

    /// The machine stored at `slot` (a position this registry handed out).
    pub(super) fn at(&self, slot: usize) -> &Machine {
        &self.machines[slot]
    }

    pub(super) fn at_mut(&mut self, slot: usize) -> &mut Machine {
        &mut self.machines[slot]
    }

    /// The rank of the machine at `slot`: ranks order like the context ids.
    pub(super) fn rank(&self, slot: usize) -> u64 {
        self.ranks[slot]
    }

    /// Every machine, in context-id order.
    pub(super) fn in_order(&self) -> impl Iterator<Item = &Machine> {
        self.in_order.values().map(|&s| &self.machines[s as usize])
    }

    /// Every context id, in order.
    pub(super) fn ids(&self) -> impl Iterator<Item = &String> {
        self.in_order.keys()
    }

    /// Adds a machine not registered yet; returns its slot and whether every rank changed
    /// (the new id fitted between no two ranks), so keys handed out before are stale.
    pub(super) fn insert(&mut self, id: String, machine: Machine) -> (usize, bool) {
        debug_assert!(!self.by_id.contains_key(&id));
        let slot = u32::try_from(self.machines.len()).expect("fewer than 2^32 machines");
        let rank_of = |s: Option<(&String, &u32)>| s.map(|(_, &s)| self.ranks[s as usize]);
        let below = rank_of(
            self.in_order
                .range::<str, _>((Bound::Unbounded, Bound::Excluded(id.as_str())))
                .next_back(),
        );
        let above = rank_of(
            self.in_order
                .range::<str, _>((Bound::Excluded(id.as_str()), Bound::Unbounded))
                .next(),
        );
        let low = below.unwrap_or(0);
        let rank = match above {
            None => low.checked_add(RANK_GAP),
            Some(high) if high - low >= 2 => Some(low + (high - low) / 2),
            Some(_) => None,
        };
        self.machines.push(machine);
        self.ranks.push(rank.unwrap_or(0));
        self.by_id.insert(id.clone(), slot);
        self.in_order.insert(id, slot);
        if rank.is_none() {
            let gap = u64::MAX / (self.in_order.len() as u64 + 1);
            for (i, &s) in self.in_order.values().enumerate() {
                self.ranks[s as usize] = (i as u64 + 1) * gap;
            }
        }
        (slot as usize, rank.is_none())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::keyset::test_root;
    use crate::server::ContextRecord;
    use crate::session::{Session, SessionConfig};
    use crate::sim::now_at;
    use crate::wire::{CommandsGrant, Egress, Grant, GrantLimits};

    fn machine(id: &str) -> Machine {
        let grant = Grant {
            fs: Vec::new(),
            egress: Egress::None,
            commands: CommandsGrant { enabled: false },
            limits: GrantLimits { max_concurrent: 1 },
            environments: None,
        };
        let record = ContextRecord {
            id: id.into(),
            name: id.to_owned(),
            operator: "u".into(),
            operator_is_member: true,
            shared_with_all_members: false,
            opted_in: Vec::new(),
        };
        let signer = Arc::new(test_root::frame_signer());
        let now = now_at(std::time::Duration::from_secs(1));
        let session = Session::new(SessionConfig::new(id), grant, signer, now);
        Machine {
            record,
            session,
            elsewhere: false,
        }
    }

    #[test]
    fn ranks_order_like_the_ids_whatever_order_machines_register_in() {
        let mut registry = Registry::default();
        let mut reranked = 0;
        // Descending ids always land below the lowest rank, halving the room each time, so
        // the ranks must be handed out afresh now and then.
        let ids: Vec<String> = (0..200)
            .map(|i| match i % 3 {
                0 => format!("a{:05}", 100_000 - i),
                1 => format!("m{i}"),
                _ => format!("z{:05}", i),
            })
            .collect();
        for (n, id) in ids.iter().enumerate() {
            let (slot, again) = registry.insert(id.clone(), machine(id));
            assert_eq!(slot, n, "machines are stored in registration order");
            reranked += usize::from(again);
            let by_rank: Vec<&str> = {
                let mut slots: Vec<usize> = (0..=n).collect();
                slots.sort_by_key(|&s| registry.rank(s));
                slots.iter().map(|&s| ids[s].as_str()).collect()
            };
            let by_id: Vec<&str> = registry.ids().map(String::as_str).collect();
            assert_eq!(by_rank, by_id);
        }
        assert!(reranked > 0, "the test reaches a full re-ranking");
        assert_eq!(registry.slot("m1"), Some(1));
        assert_eq!(registry.at(1).session.context_id(), "m1");
        assert!(registry.get("absent").is_none());
    }
}
