//! The invariants of condition waits: checks of one wait never overlap and never follow its
//! ending, the ending a machine saved is the one the server records (once), a saved ending
//! never changes, a row is forgotten only after the server has the ending, a match never
//! comes after its wait expired, every matched wait starts its follow-up exactly once, and
//! every wait ends.
//!
//! It only remembers what the world told it; it never drives a role.

use std::collections::BTreeMap;

use super::Checker;
use crate::wait::{Ending, FailReason};

/// Wall-clock time reaches the roles in whole seconds, so two processes' millisecond wall
/// clocks (the one that registered an expiry, the one that stamped a match) may differ by
/// up to a second.
const WALL_SLACK_MS: u64 = 1_000;

/// What the checker knows of one wait.
#[derive(Debug, Default)]
pub(in crate::sim) struct WaitFacts {
    /// The machine it was registered on.
    machine: usize,
    /// When it expires, wall-clock milliseconds.
    expires_at_ms: Option<u64>,
    /// The check running on the machine, by number.
    running: Option<u64>,
    /// Checks the machine started.
    checks: u64,
    /// The first ending the machine saved durably.
    saved: Option<Ending>,
    /// The ending the server's host recorded, if it recorded one.
    recorded: Option<Ending>,
    /// The host ended it itself (its machine was revoked) instead of recording a report.
    ended_by_host: bool,
    /// Follow-ups the host started for it.
    continuations: u32,
    /// The machine deleted its row (the server had acknowledged the ending).
    forgotten: bool,
}

/// Wait counts for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WaitCounts {
    /// Waits registered.
    pub registered: usize,
    /// Checks the machines started.
    pub checks: u64,
    /// Waits whose ending the server recorded as a match.
    pub matched: usize,
    /// Waits whose ending the server recorded as a failure (errors, expiry, cancel).
    pub failed: usize,
    /// Waits the server ended itself because their machine was revoked.
    pub revoked: usize,
}

impl Checker {
    fn wait(&mut self, wait_id: &str) -> Option<&mut WaitFacts> {
        if !self.waits.contains_key(wait_id) {
            self.fail(format!("wait {wait_id} is not one the server registered"));
        }
        self.waits.get_mut(wait_id)
    }

    /// The server's host registered a wait on `machine` (its row is durable).
    pub fn wait_registered(&mut self, wait_id: &str, machine: usize, expires_at_ms: Option<u64>) {
        let facts = WaitFacts {
            machine,
            expires_at_ms,
            ..WaitFacts::default()
        };
        if self.waits.insert(wait_id.to_owned(), facts).is_some() {
            self.fail(format!("wait {wait_id} registered twice"));
        }
    }

    /// Machine `machine` started check `check` of a wait.
    pub fn check_started(&mut self, wait_id: &str, check: u64, machine: usize) {
        let Some(w) = self.wait(wait_id) else { return };
        let problem = if w.machine != machine {
            Some(format!(
                "checked on machine {machine}, registered on {}",
                w.machine
            ))
        } else if let Some(other) = w.running {
            Some(format!(
                "check {check} started while check {other} still runs"
            ))
        } else if w.saved.is_some() {
            Some(format!("check {check} started after the wait ended"))
        } else {
            None
        };
        w.running = Some(check);
        w.checks += 1;
        if let Some(problem) = problem {
            self.fail(format!("wait {wait_id}: {problem}"));
        }
    }

    /// The machine reported check `check` of a wait as done (or stopped).
    pub fn check_ended(&mut self, wait_id: &str, check: u64) {
        if let Some(w) = self.waits.get_mut(wait_id)
            && w.running == Some(check)
        {
            w.running = None;
        }
    }

    /// Machine `machine` crashed: its checks died with it.
    pub fn checks_died(&mut self, machine: usize) {
        for w in self.waits.values_mut().filter(|w| w.machine == machine) {
            w.running = None;
        }
    }

    /// The machine wrote a wait's row durably, with its ending if it ended.
    pub fn wait_saved(&mut self, wait_id: &str, ending: Option<&Ending>) {
        let Some(w) = self.wait(wait_id) else { return };
        let problem = match (&w.saved, ending) {
            (None, Some(ending)) => {
                w.saved = Some(ending.clone());
                None
            }
            (Some(first), Some(now)) if first != now => Some(format!(
                "its saved ending changed from {first:?} to {now:?}"
            )),
            (Some(_), None) => Some("it was saved active after it had ended".to_owned()),
            _ => None,
        };
        if let Some(problem) = problem {
            self.fail(format!("wait {wait_id}: {problem}"));
        }
    }

    /// The machine deleted a wait's row.
    pub fn wait_forgotten(&mut self, wait_id: &str) {
        let Some(w) = self.wait(wait_id) else { return };
        w.forgotten = true;
        if w.recorded.is_none() && !w.ended_by_host {
            self.fail(format!(
                "wait {wait_id}: its row was deleted before the server recorded its ending"
            ));
        }
    }

    /// The server's host recorded a wait's ending from a report (the first one).
    pub fn wait_recorded(&mut self, wait_id: &str, ending: &Ending) {
        let Some(w) = self.wait(wait_id) else { return };
        let problem = if w.recorded.is_some() {
            Some("its ending was recorded twice".to_owned())
        } else if w.saved.as_ref() != Some(ending) && !(w.saved.is_none() && is_cancel(ending)) {
            Some(format!(
                "the server recorded {ending:?}, the machine saved {:?}",
                w.saved
            ))
        } else {
            match (ending, w.expires_at_ms) {
                (Ending::Matched { matched_at_ms, .. }, Some(expiry))
                    if *matched_at_ms > expiry + WALL_SLACK_MS =>
                {
                    Some(format!(
                        "it matched at {matched_at_ms} after it expired at {expiry}"
                    ))
                }
                _ => None,
            }
        };
        w.recorded = Some(ending.clone());
        if let Some(problem) = problem {
            self.fail(format!("wait {wait_id}: {problem}"));
        }
    }

    /// A report of an ending the host had already recorded arrived again.
    pub fn wait_reported_again(&mut self, wait_id: &str, ending: &Ending) {
        let Some(w) = self.wait(wait_id) else { return };
        // A machine answers a cancel of a wait it holds no row of with a cancelled report.
        let unknown_cancel = w.forgotten && is_cancel(ending);
        if !unknown_cancel && w.recorded.as_ref().is_some_and(|first| first != ending) {
            let first = w.recorded.clone();
            self.fail(format!(
                "wait {wait_id}: reported {ending:?} after {first:?} was recorded"
            ));
        }
    }

    /// The host ended a wait itself: its machine was revoked.
    pub fn wait_ended_by_host(&mut self, wait_id: &str) {
        if let Some(w) = self.wait(wait_id) {
            w.ended_by_host = true;
        }
    }

    /// The host started a matched wait's follow-up.
    pub fn continuation_started(&mut self, wait_id: &str) {
        let Some(w) = self.wait(wait_id) else { return };
        w.continuations += 1;
        if w.continuations > 1 {
            let n = w.continuations;
            self.fail(format!("wait {wait_id}: its follow-up started {n} times"));
        }
    }

    /// Whether every wait ended at the server.
    pub fn waits_settled(&self) -> bool {
        self.waits
            .values()
            .all(|w| w.recorded.is_some() || w.ended_by_host)
    }

    /// After the liveness phase: every wait ended, every match started its follow-up.
    pub fn final_check_waits(&mut self) {
        let open = self
            .waits
            .iter()
            .find(|(_, w)| w.recorded.is_none() && !w.ended_by_host);
        if let Some((id, w)) = open {
            let msg = format!(
                "liveness: wait {id} never ended ({} checks, saved ending {:?})",
                w.checks, w.saved
            );
            return self.fail(msg);
        }
        let unfollowed = self.waits.iter().find(|(_, w)| {
            matches!(w.recorded, Some(Ending::Matched { .. })) && w.continuations != 1
        });
        if let Some((id, _)) = unfollowed {
            let msg = format!("wait {id} matched but its follow-up never started");
            self.fail(msg);
        }
    }

    /// Counts for the report.
    pub fn wait_counts(&self) -> WaitCounts {
        let recorded = |matched: bool| {
            self.waits
                .values()
                .filter(|w| {
                    w.recorded
                        .as_ref()
                        .is_some_and(|e| matches!(e, Ending::Matched { .. }) == matched)
                })
                .count()
        };
        WaitCounts {
            registered: self.waits.len(),
            checks: self.waits.values().map(|w| w.checks).sum(),
            matched: recorded(true),
            failed: recorded(false),
            revoked: self
                .waits
                .values()
                .filter(|w| w.ended_by_host && w.recorded.is_none())
                .count(),
        }
    }
}

/// A machine answers `wait.cancel` of a wait it holds no row of (never registered there, or
/// already acknowledged and deleted) with a cancelled report it saves nowhere.
fn is_cancel(ending: &Ending) -> bool {
    matches!(
        ending,
        Ending::Failed {
            reason: FailReason::Cancelled,
            ..
        }
    )
}

/// The waits the checker follows, by id.
pub(in crate::sim) type WaitLedger = BTreeMap<String, WaitFacts>;

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(at_ms: u64) -> Ending {
        Ending::Matched {
            resume_text: "up".into(),
            payload: None,
            evidence: "[]".into(),
            continuation_id: "w.then".into(),
            matched_at_ms: at_ms,
        }
    }

    fn expired() -> Ending {
        Ending::Failed {
            reason: FailReason::Expired,
            at_ms: 9,
        }
    }

    #[test]
    fn overlapping_checks_and_checks_after_the_end_are_caught() {
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.check_started("w", 1, 0);
        c.check_ended("w", 1);
        c.check_started("w", 2, 0);
        assert!(c.violation.is_none());
        c.check_started("w", 3, 0);
        assert!(c.violation.as_deref().unwrap().contains("still runs"));
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.wait_saved("w", Some(&matched(5)));
        c.check_started("w", 1, 0);
        assert!(
            c.violation
                .as_deref()
                .unwrap()
                .contains("after the wait ended")
        );
        // A crash ends the running check: the next one may start.
        let mut c = Checker::default();
        c.wait_registered("w", 1, None);
        c.check_started("w", 1, 1);
        c.checks_died(1);
        c.check_started("w", 2, 1);
        assert!(c.violation.is_none());
    }

    #[test]
    fn the_recorded_ending_must_be_the_saved_one_once() {
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.wait_saved("w", Some(&matched(5)));
        c.wait_recorded("w", &expired());
        assert!(
            c.violation
                .as_deref()
                .unwrap()
                .contains("the machine saved")
        );
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.wait_saved("w", Some(&matched(5)));
        c.wait_saved("w", Some(&expired()));
        assert!(c.violation.as_deref().unwrap().contains("changed"));
        let mut c = Checker::default();
        c.wait_registered("w", 0, Some(4));
        c.wait_saved("w", Some(&matched(1_005)));
        c.wait_recorded("w", &matched(1_005));
        assert!(c.violation.as_deref().unwrap().contains("after it expired"));
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.wait_saved("w", Some(&matched(5)));
        c.wait_recorded("w", &matched(5));
        c.wait_reported_again("w", &matched(5));
        c.continuation_started("w");
        c.wait_forgotten("w");
        c.final_check_waits();
        assert!(c.violation.is_none(), "{:?}", c.violation);
        c.continuation_started("w");
        assert!(c.violation.as_deref().unwrap().contains("2 times"));
    }

    #[test]
    fn a_row_forgotten_early_or_a_wait_never_ended_is_caught() {
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.wait_saved("w", Some(&matched(5)));
        c.wait_forgotten("w");
        assert!(c.violation.as_deref().unwrap().contains("deleted before"));
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        assert!(!c.waits_settled());
        c.final_check_waits();
        assert!(c.violation.as_deref().unwrap().contains("never ended"));
        let mut c = Checker::default();
        c.wait_registered("w", 0, None);
        c.wait_saved("w", Some(&matched(5)));
        c.wait_recorded("w", &matched(5));
        c.final_check_waits();
        assert!(c.violation.as_deref().unwrap().contains("follow-up"));
    }
}
