//! The invariants the simulation checks after every step: exactly-once runs and results,
//! slots, revokes, condition waits (`waits.rs`), liveness, and that no role spins (asks to be woken at a time already
//! handled, or takes far more host steps than simulated time explains).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

mod waits;

pub use waits::WaitCounts;

/// How long a connection must stay ready for a pending result to be surely delivered.
pub(super) const SETTLE: Duration = Duration::from_secs(5);

/// The most host steps (inputs handed to a role) a seed may take per simulated second, on
/// average from the start. Seeds take about 3 (at most 5 in the first 300); a role that
/// spins takes thousands every simulated millisecond.
pub(super) const MAX_STEPS_PER_SIMULATED_SECOND: u64 = 100;

/// Slack on top of that bound, for the burst of setup and connects near time zero.
const STEP_SLACK: u64 = 1000;

/// A state machine the world drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Role {
    /// Node `n`'s dispatcher (the server's, when it is alone).
    Server(usize),
    /// Machine `i`'s daemon.
    Daemon(usize),
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Server(n) => write!(f, "the dispatcher of node {n}"),
            Role::Daemon(i) => write!(f, "the daemon of machine {i}"),
        }
    }
}

/// What a role was last told: when it last got a timeout, and whether any other input
/// reached it since.
#[derive(Debug, Default, Clone, Copy)]
struct Fed {
    timeout_at: Option<Duration>,
    input_since: bool,
}

/// Everything the checker needs to remember.
#[derive(Debug, Default)]
pub(super) struct Checker {
    /// The first violation, if any.
    pub violation: Option<String>,
    /// Run ids some executor started.
    executed: BTreeSet<String>,
    /// Run ids committed by the server, and whether they ended.
    committed: BTreeMap<String, bool>,
    /// Execution ids that finished.
    finished: BTreeSet<String>,
    /// Executions started somewhere (exec id → run id).
    exec_started: BTreeMap<String, String>,
    /// Executions a daemon's executor started (exec id → run id).
    exec_executed: BTreeMap<String, String>,
    /// When a daemon produced a result for a run (and on which machine).
    results: BTreeMap<String, (usize, Duration)>,
    /// Per machine: periods during which both sides were ready, `(start, end)`.
    ready: BTreeMap<usize, Vec<(Duration, Option<Duration>)>>,
    /// Machines revoked, and when.
    revoked: BTreeMap<usize, Duration>,
    /// Per role: its last timeout and whether input came after it.
    fed: BTreeMap<Role, Fed>,
    /// Host steps so far.
    steps: u64,
    /// Condition waits, by id (see `waits.rs`).
    waits: waits::WaitLedger,
}

impl Checker {
    pub fn fail(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(what);
        }
    }

    /// A daemon's executor was told to start `run_id` (`{execution id}.{hop}`).
    pub fn executed(&mut self, run_id: &str, executing: usize, slots: u32) {
        if !self.executed.insert(run_id.to_owned()) {
            self.fail(format!("run {run_id} executed twice"));
        }
        // Nothing runs twice: not the same run, nor two runs of one execution.
        let exec_id = run_id
            .rsplit_once('.')
            .map_or(run_id, |(exec_id, _)| exec_id);
        if let Some(first) = self
            .exec_executed
            .insert(exec_id.to_owned(), run_id.to_owned())
        {
            self.fail(format!(
                "execution {exec_id} executed twice ({first}, then {run_id})"
            ));
        }
        if executing as u64 > u64::from(slots) {
            self.fail(format!("{executing} runs executing with {slots} slots"));
        }
    }

    /// The server committed a run (its lease started).
    pub fn committed(&mut self, exec_id: &str, run_id: &str, machine: usize, now: Duration) {
        if let Some(at) = self.revoked.get(&machine) {
            self.fail(format!(
                "run {run_id} committed on machine {machine} revoked at {at:?}"
            ));
        }
        if let Some(first) = self
            .exec_started
            .insert(exec_id.to_owned(), run_id.to_owned())
        {
            self.fail(format!(
                "execution {exec_id} started twice ({first}, then {run_id})"
            ));
        }
        self.committed.insert(run_id.to_owned(), false);
        let _ = now;
    }

    /// The server ended a run; `lost` when it ended as lost.
    pub fn run_ended(&mut self, run_id: &str, lost: bool, machine: usize, now: Duration) {
        let twice = match self.committed.get_mut(run_id) {
            Some(ended) => std::mem::replace(ended, true),
            None => false,
        };
        if twice {
            self.fail(format!("run {run_id} ended twice"));
        }
        if lost && let Some((m, at)) = self.results.get(run_id).copied() {
            debug_assert_eq!(m, machine);
            let settled = self
                .ready
                .get(&machine)
                .into_iter()
                .flatten()
                .any(|(start, end)| {
                    let from = (*start).max(at);
                    let to = end.unwrap_or(now).min(now);
                    to > from && to - from >= SETTLE
                });
            if settled {
                self.fail(format!(
                    "run {run_id} ended lost although its result existed from {at:?} and machine {machine} was connected long enough to deliver it"
                ));
            }
        }
    }

    /// The execution finished (once).
    pub fn finished(&mut self, exec_id: &str) {
        if !self.finished.insert(exec_id.to_owned()) {
            self.fail(format!("execution {exec_id} finished twice"));
        }
    }

    /// A daemon produced a result.
    pub fn result(&mut self, run_id: &str, machine: usize, now: Duration) {
        self.results
            .entry(run_id.to_owned())
            .or_insert((machine, now));
    }

    /// Both sides of machine `m` became ready / stopped being ready.
    pub fn ready(&mut self, m: usize, ready: bool, now: Duration) {
        let periods = self.ready.entry(m).or_default();
        match (ready, periods.last_mut()) {
            (true, Some((_, None))) => {}
            (true, _) => periods.push((now, None)),
            (false, Some((_, end @ None))) => *end = Some(now),
            (false, _) => {}
        }
    }

    /// Machine `m` was revoked.
    pub fn revoked(&mut self, m: usize, now: Duration) {
        self.revoked.entry(m).or_insert(now);
    }

    /// The host handed `role` one input at `now` (a timeout when `timeout`).
    pub fn fed(&mut self, role: Role, timeout: bool, now: Duration) {
        self.steps += 1;
        let fed = self.fed.entry(role).or_default();
        if timeout {
            *fed = Fed {
                timeout_at: Some(now),
                input_since: false,
            };
        } else {
            fed.input_since = true;
        }
    }

    /// `role`, drained, asks to be woken at `until`. Right after a timeout at `now` it must
    /// have handled everything due by `now`: asking for `until <= now` again, with no other
    /// input since, is a spin (the host would call it back at once, forever).
    pub fn wants_wake(&mut self, role: Role, until: Duration, reason: &str, now: Duration) {
        if until > now {
            return;
        }
        let fed = self.fed.get(&role).copied().unwrap_or_default();
        if fed.timeout_at == Some(now) && !fed.input_since {
            self.fail(format!(
                "{role} asks to be woken at {until:?} ({reason}) at {now:?} again, with no input since its timeout"
            ));
        }
    }

    /// Fails when the steps so far exceed the bound for `elapsed` of simulated time.
    pub fn check_step_rate(&mut self, elapsed: Duration) {
        let budget = MAX_STEPS_PER_SIMULATED_SECOND
            .saturating_mul(elapsed.as_secs())
            .saturating_add(STEP_SLACK);
        if self.steps > budget {
            self.fail(format!(
                "{} host steps in {elapsed:?} of simulated time: more than {MAX_STEPS_PER_SIMULATED_SECOND} per simulated second",
                self.steps
            ));
        }
    }

    /// Host steps so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// After the liveness phase: everything that started ended, every execution finished.
    pub fn final_check(&mut self, submitted: &[crate::ids::ExecutionId]) {
        let open: Vec<&String> = self
            .committed
            .iter()
            .filter(|(_, ended)| !**ended)
            .map(|(id, _)| id)
            .collect();
        if let Some(run) = open.first() {
            self.fail(format!("liveness: run {run} started but never ended"));
        }
        if let Some(e) = submitted
            .iter()
            .find(|e| !self.finished.contains(e.as_str()))
        {
            self.fail(format!("liveness: execution {e} never finished"));
        }
    }

    /// Counts for the report.
    pub fn counts(&self) -> (usize, usize) {
        (self.executed.len(), self.finished.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn catches_a_run_executed_twice_and_too_many_runs() {
        let mut c = Checker::default();
        c.executed("r1", 1, 2);
        assert!(c.violation.is_none());
        c.executed("r1", 1, 2);
        assert!(c.violation.as_deref().unwrap().contains("executed twice"));
        let mut c = Checker::default();
        c.executed("r2", 3, 2);
        assert!(c.violation.is_some());
        // Two runs of one execution: executed twice too.
        let mut c = Checker::default();
        c.executed("x.1", 1, 2);
        c.executed("y.1", 2, 2);
        assert!(c.violation.is_none());
        c.executed("x.2", 1, 2);
        let violation = c.violation.as_deref().unwrap();
        assert!(
            violation.contains("execution x executed twice"),
            "{violation}"
        );
    }

    #[test]
    fn catches_double_ends_double_starts_and_revoked_commits() {
        let mut c = Checker::default();
        c.committed("x", "x.1", 0, T);
        c.run_ended("x.1", false, 0, T);
        c.run_ended("x.1", false, 0, T);
        assert!(c.violation.as_deref().unwrap().contains("ended twice"));
        let mut c = Checker::default();
        c.committed("x", "x.1", 0, T);
        c.committed("x", "x.2", 1, T);
        assert!(c.violation.as_deref().unwrap().contains("started twice"));
        let mut c = Checker::default();
        c.revoked(0, T);
        c.committed("x", "x.1", 0, T * 2);
        assert!(c.violation.as_deref().unwrap().contains("revoked"));
    }

    #[test]
    fn a_lost_result_counts_only_after_a_settled_connection() {
        let mut c = Checker::default();
        c.committed("x", "x.1", 0, T);
        c.result("x.1", 0, T * 2);
        c.ready(0, true, T * 3);
        c.ready(0, false, T * 4); // one second: not long enough to be sure
        c.run_ended("x.1", true, 0, T * 40);
        assert!(c.violation.is_none());
        let mut c = Checker::default();
        c.committed("x", "x.1", 0, T);
        c.result("x.1", 0, T * 2);
        c.ready(0, true, T * 3);
        c.run_ended("x.1", true, 0, T * 40);
        assert!(c.violation.as_deref().unwrap().contains("lost"));
    }

    #[test]
    fn a_role_asking_again_for_a_handled_time_is_a_spin() {
        let mut c = Checker::default();
        // Due now, but no timeout yet at this time: the host will call it back.
        c.wants_wake(Role::Daemon(1), T, "run deadline", T);
        assert!(c.violation.is_none());
        // After a timeout at T, a wake in the future is fine.
        c.fed(Role::Daemon(1), true, T);
        c.wants_wake(Role::Daemon(1), T * 2, "heartbeat", T);
        assert!(c.violation.is_none());
        // New input after the timeout may set a timer due at once (a retry with no delay).
        c.fed(Role::Server(0), true, T);
        c.fed(Role::Server(0), false, T);
        c.wants_wake(Role::Server(0), T, "reconnect", T);
        assert!(c.violation.is_none());
        // The same deadline again right after a timeout at or past it: a spin.
        c.wants_wake(Role::Daemon(1), T, "run deadline", T);
        let v = c.violation.as_deref().unwrap();
        assert!(
            v.contains("the daemon of machine 1") && v.contains("run deadline"),
            "{v}"
        );
    }

    #[test]
    fn too_many_steps_for_the_simulated_time_is_a_spin() {
        let mut c = Checker::default();
        for _ in 0..STEP_SLACK + MAX_STEPS_PER_SIMULATED_SECOND {
            c.fed(Role::Server(0), false, T);
        }
        c.check_step_rate(T);
        assert!(c.violation.is_none());
        c.fed(Role::Server(0), false, T);
        c.check_step_rate(T);
        assert!(c.violation.as_deref().unwrap().contains("host steps"));
        assert_eq!(c.steps(), STEP_SLACK + MAX_STEPS_PER_SIMULATED_SECOND + 1);
    }

    #[test]
    fn liveness_needs_every_start_to_end() {
        let mut c = Checker::default();
        c.committed("x", "x.1", 0, T);
        c.final_check(&["x".into()]);
        assert!(c.violation.as_deref().unwrap().contains("liveness"));
    }
}
