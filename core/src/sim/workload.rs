//! The simulated world's machines, users, chains and execute requests, drawn from the seed.

use crate::ids::ExecutionId;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::world::SimConfig;
use crate::daemon::DaemonConfig;
use crate::rng::SplitMix64;
use crate::routing::{
    Chain, ChainEntry, ExecuteTarget, Fallback, HOST_OPERATOR_ONLY_FEATURE, Requester, Requirement,
    WhenOffline,
};
use crate::server::{ContextRecord, ExecuteRequest};
use crate::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, FolderGrant, FolderMode, Grant,
    GrantLimits, InlineFile,
};

const USERS: [&str; 3] = ["ada", "bob", "cyd"];

pub(super) struct Workload {
    /// Per machine: its record, grant and daemon configuration.
    pub machines: Vec<(ContextRecord, Grant, DaemonConfig)>,
    /// The records as they are now (access faults change them).
    pub records: Vec<ContextRecord>,
    /// The grants as they are now.
    pub grants: Vec<Grant>,
    /// Each user's chain.
    pub chains: Vec<(String, Chain)>,
    /// Requests not yet submitted, by time.
    pub pending: VecDeque<(Duration, ExecuteRequest)>,
    /// Ids submitted so far.
    pub submitted: Vec<ExecutionId>,
    /// Every request, by id.
    pub requests: BTreeMap<ExecutionId, ExecuteRequest>,
    /// Whether a machine was revoked (at most one per seed).
    pub revoked_any: bool,
}

impl Workload {
    pub fn new(config: &SimConfig, rng: &mut SplitMix64) -> Self {
        let mut machines = Vec::new();
        for i in 0..config.machines {
            let id = format!("ec_{i}");
            let operator = USERS[i % 2].to_owned();
            let opted_in = USERS
                .iter()
                .filter(|u| **u != operator && rng.chance(1, 2))
                .map(|u| (*u).to_owned())
                .collect();
            let with_fs = i == 0;
            let grant = Grant {
                fs: if with_fs {
                    vec![FolderGrant {
                        path: format!("/home/{operator}/project"),
                        mode: FolderMode::Rw,
                    }]
                } else {
                    Vec::new()
                },
                egress: Egress::None,
                commands: CommandsGrant { enabled: false },
                limits: GrantLimits { max_concurrent: 8 },
                environments: None,
            };
            let mut environments = vec![Environment::Shell];
            if i == 1 {
                environments.push(Environment::Wasm);
            }
            let features = if with_fs {
                vec!["fs".to_owned(), HOST_OPERATOR_ONLY_FEATURE.to_owned()]
            } else {
                vec![HOST_OPERATOR_ONLY_FEATURE.to_owned()]
            };
            let daemon = DaemonConfig {
                max_concurrent: 1 + rng.below(3) as u32,
                features,
                environments,
                ..DaemonConfig::default()
            };
            let record = ContextRecord {
                id: id.into(),
                name: format!("box-{i}"),
                operator,
                operator_is_member: true,
                // Shared with every member: the opt-ins decide (faults flip them).
                shared_with_all_members: true,
                opted_in,
            };
            machines.push((record, grant, daemon));
        }
        let ids: Vec<String> = machines.iter().map(|(r, _, _)| r.id.to_string()).collect();
        let chain_of = |picks: &[usize], cloud: bool| {
            let mut entries: Vec<ChainEntry> = picks
                .iter()
                .filter_map(|p| ids.get(*p).cloned().map(ChainEntry::Context))
                .collect();
            if cloud {
                entries.push(ChainEntry::Cloud);
            }
            Chain::new(entries).unwrap_or_default()
        };
        let chains = vec![
            ("ada".to_owned(), chain_of(&[0, 1], true)),
            ("bob".to_owned(), chain_of(&[1, 2], true)),
            ("cyd".to_owned(), chain_of(&[2, 0], false)),
        ];

        let mut pending = VecDeque::new();
        let mut requests = BTreeMap::new();
        let spread = config.fault_phase.as_millis().max(1) as u64;
        let mut times: Vec<u64> = (0..config.executions).map(|_| rng.below(spread)).collect();
        times.sort_unstable();
        for (n, at) in times.into_iter().enumerate() {
            let request = random_request(n, &ids, rng);
            requests.insert(request.exec_id.clone(), request.clone());
            pending.push_back((Duration::from_millis(at), request));
        }
        let records = machines.iter().map(|(r, _, _)| r.clone()).collect();
        let grants = machines.iter().map(|(_, g, _)| g.clone()).collect();
        Self {
            machines,
            records,
            grants,
            chains,
            pending,
            submitted: Vec::new(),
            requests,
            revoked_any: false,
        }
    }

    /// Flips one user's opt-in (or, rarely, the operator's membership) on machine `i`.
    pub fn toggle_access(&mut self, i: usize, rng: &mut SplitMix64) -> ContextRecord {
        let record = &mut self.records[i];
        if rng.chance(1, 8) {
            record.operator_is_member = !record.operator_is_member;
        } else {
            let user = USERS[rng.below(USERS.len() as u64) as usize].to_owned();
            if user != record.operator {
                if let Some(at) = record.opted_in.iter().position(|u| *u == user) {
                    record.opted_in.remove(at);
                } else {
                    record.opted_in.push(user);
                }
            }
        }
        record.clone()
    }

    /// Changes machine `i`'s egress (never its slots, so slot checks stay exact).
    pub fn change_egress(&mut self, i: usize, rng: &mut SplitMix64) -> Grant {
        let grant = &mut self.grants[i];
        grant.egress = match rng.below(3) {
            0 => Egress::None,
            1 => Egress::All,
            _ => Egress::Allowlist {
                hosts: vec!["*.crates.io:443".into()],
            },
        };
        grant.clone()
    }
}

fn random_request(n: usize, ids: &[String], rng: &mut SplitMix64) -> ExecuteRequest {
    let requester = Requester {
        user_id: USERS[rng.below(USERS.len() as u64) as usize].to_owned(),
    };
    let pick = rng.below(100);
    let mut target = match pick {
        0..=39 => ExecuteTarget::chain(),
        40..=59 => ExecuteTarget::named(pick_id(ids, rng)),
        60..=74 => ExecuteTarget {
            fallback: Fallback::Chain,
            ..ExecuteTarget::named(pick_id(ids, rng))
        },
        75..=89 => {
            let waits = WhenOffline::queue(1 + rng.below(3) as u32)
                .unwrap_or_else(|_| WhenOffline::queue_default());
            // Half of them wait for a free slot too, as for the machine.
            let when_busy = if rng.chance(1, 2) {
                waits
            } else {
                WhenOffline::default()
            };
            ExecuteTarget {
                when_offline: waits,
                when_busy,
                ..ExecuteTarget::named(pick_id(ids, rng))
            }
        }
        _ => ExecuteTarget {
            requires: vec![Requirement::Fs],
            ..ExecuteTarget::chain()
        },
    };
    target.wants_commands = false;
    let environment = if rng.chance(1, 10) {
        Environment::Wasm
    } else {
        Environment::Shell
    };
    ExecuteRequest {
        exec_id: format!("x{n:03}").into(),
        requester,
        target,
        environment,
        capability: CapabilitySource::Inline {
            manifest: "name: sim\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: vec![InlineFile {
                path: "run.sh".into(),
                content_b64: crate::b64::encode(b"true\n"),
            }],
        },
        timeout_ms: 5_000 + rng.below(25_000),
    }
}

fn pick_id(ids: &[String], rng: &mut SplitMix64) -> String {
    ids[rng.below(ids.len() as u64) as usize].clone()
}
