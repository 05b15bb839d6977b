//! When a run is stopped and why: at its deadline, at a limit of the caller's own (a
//! terminal's idle time) or when asked (a cancel), first politely (SIGTERM, a terminal's
//! hang-up), then SIGKILL a grace period later. The shell's process runs and the pty's terminal
//! runs each keep one [`StopSchedule`] and ask it, whenever their waiter wakes, what is due.
//!
//! This module owns the times and the reason; it never sends a signal itself (each run knows
//! how to reach its own processes) and never reads a clock (the caller passes `now`).

use std::time::{Duration, Instant};

use outpost_core::executor::Ending;

/// A run's stop times.
#[derive(Debug, Clone)]
pub struct StopSchedule {
    deadline: Instant,
    grace: Duration,
    /// Why it is being stopped, and when SIGKILL is due.
    stopping: Option<(Ending, Instant)>,
    killed: bool,
}

/// What is due now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopStep {
    /// The deadline passed: stop the run, [`Ending::TimedOut`].
    Deadline,
    /// The caller's own limit passed (see [`StopSchedule::next_look`]): stop the run.
    Limit,
    /// The grace after the polite stop passed: kill what is left.
    Kill,
}

impl StopSchedule {
    /// A run started at `start`, held to `timeout` (`Duration::MAX`: never), with `grace`
    /// between the polite stop and SIGKILL.
    pub fn new(start: Instant, timeout: Duration, grace: Duration) -> Self {
        Self {
            deadline: start
                .checked_add(timeout)
                .unwrap_or_else(|| far_future(start)),
            grace,
            stopping: None,
            killed: false,
        }
    }

    /// When the waiter must look again, at the latest `until`: the deadline (or `limit`, an
    /// earlier time of the caller's own) until the run is asked to stop, then the SIGKILL time.
    pub fn next_look(&self, until: Instant, limit: Option<Instant>) -> Instant {
        let step = match self.stopping {
            None => limit.map_or(self.deadline, |at| at.min(self.deadline)),
            Some((_, kill_at)) if !self.killed => kill_at,
            Some(_) => until,
        };
        step.min(until)
    }

    /// What is due at `now`; `limit_passed`: the caller's own limit has passed.
    pub fn due(&self, now: Instant, limit_passed: bool) -> Option<StopStep> {
        match self.stopping {
            None if now >= self.deadline => Some(StopStep::Deadline),
            None if limit_passed => Some(StopStep::Limit),
            Some((_, kill_at)) if !self.killed && now >= kill_at => Some(StopStep::Kill),
            _ => None,
        }
    }

    /// Asks the run to stop for `why` at `now`: `true` the first time (send the polite stop
    /// now); later asks change nothing.
    pub fn ask(&mut self, why: Ending, now: Instant) -> bool {
        if self.stopping.is_some() {
            return false;
        }
        self.stopping = Some((why, now + self.grace));
        true
    }

    /// SIGKILL was sent (on schedule, or because the run ended and its remains go).
    pub fn mark_killed(&mut self) {
        self.killed = true;
    }

    /// How the run ended as far as stopping goes: why it was stopped, else it exited.
    pub fn ending(&self) -> Ending {
        self.stopping.map_or(Ending::Exited, |(why, _)| why)
    }
}

/// A deadline that never comes (a century away), for runs with no timeout.
fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(100 * 365 * 24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_then_a_grace_then_a_kill() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut schedule = StopSchedule::new(t0, s(10), s(2));
        assert_eq!(schedule.next_look(t0 + s(60), None), t0 + s(10));
        assert_eq!(schedule.due(t0 + s(9), false), None);
        assert_eq!(schedule.due(t0 + s(10), false), Some(StopStep::Deadline));
        assert!(schedule.ask(Ending::TimedOut, t0 + s(10)));
        assert!(
            !schedule.ask(Ending::Cancelled, t0 + s(11)),
            "the first reason stands"
        );
        assert_eq!(schedule.next_look(t0 + s(60), None), t0 + s(12));
        assert_eq!(schedule.due(t0 + s(11), false), None);
        assert_eq!(schedule.due(t0 + s(12), false), Some(StopStep::Kill));
        schedule.mark_killed();
        assert_eq!(schedule.due(t0 + s(13), false), None);
        assert_eq!(schedule.next_look(t0 + s(60), None), t0 + s(60));
        assert_eq!(schedule.ending(), Ending::TimedOut);
    }

    #[test]
    fn the_caller_s_limit_and_no_timeout() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let schedule = StopSchedule::new(t0, Duration::MAX, s(2));
        assert_eq!(schedule.next_look(t0 + s(60), Some(t0 + s(5))), t0 + s(5));
        assert_eq!(schedule.due(t0 + s(5), true), Some(StopStep::Limit));
        assert_eq!(
            schedule.due(t0 + s(3600), false),
            None,
            "no timeout: no deadline"
        );
        assert_eq!(schedule.ending(), Ending::Exited);
    }
}
