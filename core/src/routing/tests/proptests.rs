//! Properties of `plan` and `next_after` over generated contexts, chains and targets.

use proptest::prelude::*;

use super::*;

const IDS: [&str; 4] = ["ec_0", "ec_1", "ec_2", "ec_3"];
const USERS: [&str; 3] = [ANA, BO, "u_cy"];

fn context(id: &'static str) -> impl Strategy<Value = ContextView> {
    (
        (
            any::<bool>(),
            any::<bool>(),
            prop::option::weighted(0.2, Just("revoked")),
            0..2usize,
        ),
        (
            prop::sample::subsequence(vec![BO, "u_cy"], 0..=2),
            any::<bool>(),
            any::<bool>(),
        ),
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.9)),
    )
        .prop_map(
            move |(
                (online, busy, unusable, operator),
                (opted_in, fs, local_fs),
                (commands, modern, member),
            )| {
                ContextView {
                    id: id.into(),
                    name: id.trim_start_matches("ec_").into(),
                    operator: USERS[operator].into(),
                    online,
                    busy,
                    draining: false,
                    paused: false,
                    unusable: unusable.map(Into::into),
                    features: if modern {
                        vec![HOST_OPERATOR_ONLY_FEATURE.into()]
                    } else {
                        Vec::new()
                    },
                    grant_has_fs: fs,
                    local_fs_available: fs && local_fs,
                    commands_enabled: commands,
                    // Opt-ins count only while the machine is shared (as the server keeps them).
                    shared_with_all_members: !opted_in.is_empty(),
                    opted_in: opted_in.into_iter().map(Into::into).collect(),
                    operator_is_member: member,
                }
            },
        )
}

fn contexts() -> impl Strategy<Value = Vec<ContextView>> {
    (
        context(IDS[0]),
        context(IDS[1]),
        context(IDS[2]),
        context(IDS[3]),
    )
        .prop_map(|(a, b, c, d)| vec![a, b, c, d])
}

fn any_chain() -> impl Strategy<Value = Chain> {
    (Just(IDS.to_vec()).prop_shuffle(), 0..=3usize, any::<bool>()).prop_map(|(ids, n, cloud)| {
        let mut entries: Vec<ChainEntry> = ids[..n]
            .iter()
            .map(|id| ChainEntry::Context((*id).into()))
            .collect();
        if cloud {
            entries.push(ChainEntry::Cloud);
        }
        Chain::new(entries).unwrap()
    })
}

fn target() -> impl Strategy<Value = ExecuteTarget> {
    let context = prop::option::of(prop::sample::select(vec![
        "ec_0", "ec_1", "ec_2", "ec_3", "cloud",
    ]));
    let requires = prop::sample::subsequence(vec![Requirement::Fs, Requirement::Lan], 0..=2);
    (
        context,
        any::<bool>(),
        requires,
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(context, fallback, requires, queue, wants_commands)| ExecuteTarget {
                context: context.map(Into::into),
                fallback: if fallback {
                    Fallback::Chain
                } else {
                    Fallback::None
                },
                requires,
                when_offline: if queue {
                    WhenOffline::queue_default()
                } else {
                    WhenOffline::Fail
                },
                when_busy: WhenOffline::Fail,
                wants_commands,
            },
        )
}

/// The order candidates must keep: the named context, then the chain (or the server).
fn expected_order(target: &ExecuteTarget, chain: &Chain) -> Vec<ChainEntry> {
    let mut order: Vec<ChainEntry> = target
        .context
        .clone()
        .map(ChainEntry::from)
        .into_iter()
        .collect();
    order.extend(chain.entries().iter().cloned());
    order.push(ChainEntry::Cloud);
    order
}

fn is_subsequence(part: &[ChainEntry], whole: &[ChainEntry]) -> bool {
    let mut rest = whole.iter();
    part.iter().all(|p| rest.any(|w| w == p))
}

fn check_route(
    route: &Route,
    requester: &Requester,
    target: &ExecuteTarget,
    chain: &Chain,
    views: &[ContextView],
) -> Result<(), TestCaseError> {
    let candidates = route.candidates();
    // A named context (with `fallback: chain`), the chain's contexts, then the server.
    prop_assert!(candidates.len() <= Chain::MAX_CONTEXTS + 2);
    prop_assert!(is_subsequence(candidates, &expected_order(target, chain)));
    if !target.requires.is_empty() {
        prop_assert!(!candidates.contains(&ChainEntry::Cloud));
        prop_assert_ne!(route.current(), &Candidate::Cloud);
    }
    if let Some(named) = target
        .context
        .as_deref()
        .filter(|_| target.fallback == Fallback::None)
    {
        prop_assert!(candidates.iter().all(|c| c.id() == named));
    }
    if let Candidate::Context { id, run, .. } = route.current() {
        let view = views.iter().find(|v| &v.id == id);
        prop_assert!(view.is_some());
        if let Some(view) = view {
            prop_assert_eq!(check_access(requester, view, target), Ok(*run));
            prop_assert!(view.online && !view.busy && view.unusable.is_none());
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn plan_and_every_hop_respect_order_access_and_requirements(
        views in contexts(), fresh in contexts(), chain in any_chain(), target in target(), who in 0..3usize
    ) {
        let requester = user(USERS[who]);
        match plan(&requester, &target, &chain, &views) {
            Ok(Plan::Dispatch(route)) => {
                check_route(&route, &requester, &target, &chain, &views)?;
                // The daemon rejects every dispatch as busy; views change between hops.
                let mut route = route;
                for hop in 0..=Chain::MAX_CONTEXTS + 2 {
                    let views = if hop % 2 == 0 { &fresh } else { &views };
                    match route.next_after(AttemptOutcome::Busy, "busy", &requester, &target, views) {
                        Ok(next) => {
                            check_route(&next, &requester, &target, &chain, views)?;
                            route = next;
                        }
                        Err(err) => {
                            // Every candidate, plus the server skipped for `requires`.
                            prop_assert!(err.attempts().len() <= Chain::MAX_CONTEXTS + 3);
                            break;
                        }
                    }
                    prop_assert!(hop < Chain::MAX_CONTEXTS + 2, "more hops than candidates");
                }
            }
            Ok(Plan::Queue(queued)) => {
                prop_assert_eq!(target.context.as_deref(), Some(queued.id.as_str()));
                let view = views.iter().find(|v| v.id == queued.id);
                prop_assert!(view.is_some_and(|v| !v.online && check_access(&requester, v, &target).is_ok()));
            }
            Err(err) => {
                let cloud_attempt = err.attempts().iter().any(|a| a.id == CLOUD_ID);
                prop_assert!(!cloud_attempt || !target.requires.is_empty());
            }
        }
    }
}
