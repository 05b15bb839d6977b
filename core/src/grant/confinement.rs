//! Who decides whether a run is sandboxed: the machine owner's local policy, then the run's
//! kind, and only last — and only to ask for less — the manifest.
//!
//! This file owns that decision ([`must_confine`]). It never looks at what the kernel can
//! enforce: a host that cannot sandbox a run that must be sandboxed refuses it
//! (`confinement_unavailable`), it never runs it with less.

use serde::{Deserialize, Serialize};

/// The owner's rule for sandboxing shell and terminal runs (`confinement` in `policy.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConfinementPolicy {
    /// Every run is sandboxed, whatever its manifest says (the default).
    #[default]
    Required,
    /// The operator's own runs whose manifest says `confine: false` run unsandboxed; shared
    /// runs, waits' `exec` and the `cloud` executor are sandboxed all the same.
    OperatorMayOptOut,
}

impl ConfinementPolicy {
    /// The name `policy.json` and `outpost context policy confinement` use.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfinementPolicy::Required => "required",
            ConfinementPolicy::OperatorMayOptOut => "operator-may-opt-out",
        }
    }

    /// Reads [`ConfinementPolicy::as_str`]'s names.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "required" => Some(ConfinementPolicy::Required),
            "operator-may-opt-out" => Some(ConfinementPolicy::OperatorMayOptOut),
            _ => None,
        }
    }
}

/// Who asked for a run, as far as sandboxing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// The context's operator (or the owner, through `outpost run`).
    Operator,
    /// A member the machine was shared with.
    Shared,
    /// Something the owner did not type and no member asked for: a wait's `exec` check, a run
    /// on the server's `cloud` executor. Always sandboxed.
    Unattended,
}

/// Whether a run must be sandboxed. Only [`ConfinementPolicy::OperatorMayOptOut`], an
/// [`RunKind::Operator`] run and a manifest that says `confine: false` together leave a run
/// unsandboxed; the grant has no say.
pub fn must_confine(policy: ConfinementPolicy, kind: RunKind, manifest_confine: bool) -> bool {
    match (policy, kind) {
        (ConfinementPolicy::OperatorMayOptOut, RunKind::Operator) => manifest_confine,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_and_the_operator_together_opt_out() {
        use ConfinementPolicy::*;
        use RunKind::*;
        for kind in [Operator, Shared, Unattended] {
            for manifest in [true, false] {
                assert!(
                    must_confine(Required, kind, manifest),
                    "{kind:?} {manifest}"
                );
            }
        }
        assert!(!must_confine(OperatorMayOptOut, Operator, false));
        assert!(must_confine(OperatorMayOptOut, Operator, true));
        assert!(must_confine(OperatorMayOptOut, Shared, false));
        assert!(must_confine(OperatorMayOptOut, Unattended, false));
    }

    #[test]
    fn names_round_trip_and_absent_means_required() {
        for p in [
            ConfinementPolicy::Required,
            ConfinementPolicy::OperatorMayOptOut,
        ] {
            assert_eq!(ConfinementPolicy::parse(p.as_str()), Some(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
        }
        assert_eq!(ConfinementPolicy::parse("off"), None);
        let policy: super::super::LocalPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(policy.confinement, ConfinementPolicy::Required);
    }
}
