//! `ranOn`: where a routed execute ran, what passed on it first, and the one-line summary a
//! person reads.
//!
//! This file owns that record and its wording. It never changes the route.

use serde::{Deserialize, Serialize};

use super::access::RunKind;
use super::attempt::{Attempt, describe_attempts};
use super::plan::{Candidate, Route};
use super::{CLOUD_ID, CLOUD_NAME};

/// Where a run ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum RanOnKind {
    /// The server's own executor.
    Cloud,
    /// A context.
    Context,
}

/// The `ranOn` record of a routed execute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RanOn {
    /// `cloud` or `context`.
    pub kind: RanOnKind,
    /// `"cloud"` or the context id.
    pub id: String,
    /// `"the server"` or the context name.
    pub name: String,
    /// Whether the requester operates the machine (always false on the server).
    pub yours: bool,
    /// Candidates that passed on the run first, in order.
    pub attempts: Vec<Attempt>,
    /// Whether it ran on the server after at least one context passed on it.
    pub fell_back_to_cloud: bool,
}

impl RanOn {
    /// The record for the server with nothing tried first.
    pub fn cloud() -> Self {
        Self {
            kind: RanOnKind::Cloud,
            id: CLOUD_ID.to_owned(),
            name: CLOUD_NAME.to_owned(),
            yours: false,
            attempts: Vec::new(),
            fell_back_to_cloud: false,
        }
    }
}

impl Route {
    /// The `ranOn` record for a run dispatched to [`Route::current`].
    pub fn ran_on(&self) -> RanOn {
        let attempts = self.attempts().to_vec();
        match self.current() {
            Candidate::Cloud => RanOn {
                fell_back_to_cloud: !attempts.is_empty(),
                attempts,
                ..RanOn::cloud()
            },
            Candidate::Context { id, name, run } => RanOn {
                kind: RanOnKind::Context,
                id: id.clone(),
                name: name.clone(),
                yours: *run == RunKind::Operator,
                attempts,
                fell_back_to_cloud: false,
            },
        }
    }
}

/// One sentence with friendly names only, e.g. "Ran on build-box (your machine)." or
/// "Ran on the server after build-box was busy and laptop was offline."
pub fn friendly_line(ran_on: &RanOn) -> String {
    let place = match ran_on.kind {
        RanOnKind::Cloud => CLOUD_NAME.to_owned(),
        RanOnKind::Context if ran_on.yours => format!("{} (your machine)", ran_on.name),
        RanOnKind::Context => format!("{} (shared by its operator)", ran_on.name),
    };
    if ran_on.attempts.is_empty() {
        format!("Ran on {place}.")
    } else {
        format!(
            "Ran on {place} after {}.",
            describe_attempts(&ran_on.attempts)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::AttemptOutcome;

    fn attempt(name: &str, outcome: AttemptOutcome) -> Attempt {
        Attempt {
            id: format!("ec_{name}"),
            name: name.into(),
            outcome,
            reason: outcome.as_str().into(),
        }
    }

    fn on_context(name: &str, yours: bool, attempts: Vec<Attempt>) -> RanOn {
        RanOn {
            kind: RanOnKind::Context,
            id: format!("ec_{name}"),
            name: name.into(),
            yours,
            attempts,
            fell_back_to_cloud: false,
        }
    }

    #[test]
    fn lines_for_a_context() {
        assert_eq!(
            friendly_line(&on_context("build-box", true, vec![])),
            "Ran on build-box (your machine)."
        );
        assert_eq!(
            friendly_line(&on_context("build-box", false, vec![])),
            "Ran on build-box (shared by its operator)."
        );
        assert_eq!(
            friendly_line(&on_context(
                "laptop",
                true,
                vec![attempt("build-box", AttemptOutcome::Busy)]
            )),
            "Ran on laptop (your machine) after build-box was busy."
        );
    }

    #[test]
    fn lines_for_the_server() {
        let mut ran_on = RanOn::cloud();
        assert_eq!(friendly_line(&ran_on), "Ran on the server.");
        ran_on.attempts = vec![attempt("build-box", AttemptOutcome::Busy)];
        assert_eq!(
            friendly_line(&ran_on),
            "Ran on the server after build-box was busy."
        );
        ran_on
            .attempts
            .push(attempt("laptop", AttemptOutcome::Offline));
        assert_eq!(
            friendly_line(&ran_on),
            "Ran on the server after build-box was busy and laptop was offline."
        );
        ran_on.attempts.push(attempt("nas", AttemptOutcome::Denied));
        assert_eq!(
            friendly_line(&ran_on),
            "Ran on the server after build-box was busy, laptop was offline and nas was not available to you."
        );
    }

    #[test]
    fn serializes_exactly_the_wire_names() {
        let mut ran_on = RanOn::cloud();
        ran_on.attempts = vec![attempt("build-box", AttemptOutcome::Busy)];
        ran_on.fell_back_to_cloud = true;
        let json = serde_json::to_value(&ran_on).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "cloud", "id": "cloud", "name": "the server", "yours": false,
                "attempts": [{"id": "ec_build-box", "name": "build-box", "outcome": "busy", "reason": "busy"}],
                "fellBackToCloud": true
            })
        );
    }
}
