//! Properties of the grant decisions over generated folders, policies and hosts.

use proptest::prelude::*;

use super::*;
use crate::wire::{Egress, FolderMode};

/// Paths under `/h` from a small alphabet, so folders often nest and collide.
fn path() -> impl Strategy<Value = CanonicalPath> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "ab", ".ssh", ".aws", "x"]),
        0..4,
    )
    .prop_map(|parts| {
        let mut text = String::from("/h");
        for part in parts {
            text.push('/');
            text.push_str(part);
        }
        CanonicalPath::new(text).unwrap()
    })
}

fn mode() -> impl Strategy<Value = FolderMode> {
    prop_oneof![Just(FolderMode::Ro), Just(FolderMode::Rw)]
}

fn folders() -> impl Strategy<Value = Vec<(CanonicalPath, FolderMode)>> {
    prop::collection::vec((path(), mode()), 0..5)
}

fn denylist() -> impl Strategy<Value = CredentialDenylist> {
    prop::collection::vec(path(), 0..3).prop_map(|extra| {
        let home = CanonicalPath::new("/h").unwrap();
        let config = CanonicalPath::new("/h/a/x").unwrap();
        CredentialDenylist::for_home(&home, &config).with_extra(extra)
    })
}

fn policy(local: Vec<(CanonicalPath, FolderMode)>) -> LocalPolicy {
    LocalPolicy {
        daemon_control: None,
        record_terminal_input: false,
        folders: local
            .into_iter()
            .map(|(path, mode)| LocalFolder { path, mode })
            .collect(),
        commands_enabled: false,
        auto_update: None,
        confinement: Default::default(),
    }
}

/// DNS names from a small alphabet.
fn host_name() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z0-9]{1,6}", 1..4)
        .prop_map(|labels| format!("{}.com", labels.join(".")))
}

proptest! {
    #[test]
    fn mounts_stay_inside_both_sides_and_outside_the_denylist(
        grant in folders(), local in folders(), deny in denylist()
    ) {
        let mounts = effective_mounts(&grant, &policy(local.clone()), &deny);
        for m in &mounts {
            let backed = grant.iter().any(|(g, gm)| {
                g.contains(&m.path)
                    && local.iter().any(|(l, lm)| l.contains(&m.path) && m.mode <= *gm && m.mode <= *lm)
            });
            prop_assert!(backed, "{m:?} is not backed by a grant folder and a local folder");
            prop_assert!(deny.denying(&m.path).is_none(), "{m:?} is denylisted");
            for excluded in &m.excluded {
                prop_assert!(m.path.contains(excluded) && deny.denying(excluded).is_some());
            }
        }
    }

    #[test]
    fn check_path_never_allows_denylisted_paths_or_writes_to_ro(
        grant in folders(), local in folders(), deny in denylist(), probe in path(), write in any::<bool>()
    ) {
        let mounts = effective_mounts(&grant, &policy(local), &deny);
        let access = if write { Access::Write } else { Access::Read };
        if let Ok(mode) = check_path(&probe, &mounts, &deny, access) {
            prop_assert!(deny.denying(&probe).is_none());
            let deepest = mounts
                .iter()
                .filter(|m| m.path.contains(&probe))
                .max_by_key(|m| m.path.as_str().len());
            prop_assert!(deepest.is_some());
            if write {
                prop_assert_eq!(mode, FolderMode::Rw);
                prop_assert!(deepest.is_some_and(|m| m.mode == FolderMode::Rw));
            }
        }
    }

    #[test]
    fn check_path_on_arbitrary_mounts_never_allows_denylisted_paths(
        raw in prop::collection::vec((path(), mode()), 0..5), deny in denylist(), probe in path()
    ) {
        let mounts: Vec<Mount> = raw
            .into_iter()
            .map(|(path, mode)| Mount { path, mode, excluded: Vec::new() })
            .collect();
        if check_path(&probe, &mounts, &deny, Access::Read).is_ok() {
            prop_assert!(deny.denying(&probe).is_none());
        }
    }

    #[test]
    fn egress_none_refuses_and_all_allows_everything(host in any::<String>(), port in any::<u16>()) {
        let denied = check_egress(&Egress::None, &host, port).unwrap_err();
        prop_assert_eq!(denied.code(), "egress_denied");
        prop_assert!(check_egress(&Egress::All, &host, port).is_ok());
    }

    #[test]
    fn a_wildcard_never_matches_its_own_suffix(
        suffix in host_name(), head in "[a-z0-9]{1,5}", port in 1..=u16::MAX, with_port in any::<bool>()
    ) {
        let entry = if with_port { format!("*.{suffix}:{port}") } else { format!("*.{suffix}") };
        let egress = Egress::Allowlist { hosts: vec![entry] };
        for variant in [suffix.clone(), format!("{suffix}."), suffix.to_ascii_uppercase()] {
            prop_assert!(check_egress(&egress, &variant, port).is_err());
        }
        let below = format!("{head}.{suffix}");
        prop_assert!(check_egress(&egress, &below, port).is_ok());
    }

    #[test]
    fn parsers_never_panic(text in any::<String>()) {
        let _ = CanonicalPath::new(text.clone());
        let _ = AllowlistEntry::parse(&text);
        let _ = Destination::parse(&text);
        let _ = validate_allowlist(std::slice::from_ref(&text));
    }
}
