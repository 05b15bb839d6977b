//! Condition waits on the daemon's side: the schedule that re-checks each wait until it
//! matches, fails or is cancelled, and the durable rows that let it resume after a crash.
//!
//! A wait is a condition (a small JavaScript program the host evaluates in a sandbox) that
//! the [`Schedule`] asks the host to check every `interval` until one check matches. The
//! schedule owns *when* a wait is checked, how many checks run at once, the consecutive-error
//! count, expiry, cancellation, and the exactly-once hand-over of the ending to the server;
//! the host owns the engine, the store and the socket.
//!
//! ## Run loop
//!
//! ```text
//! loop {
//!     match schedule.poll_output() {
//!         Output::Save(row)     => write the row durably (replacing the wait's last row),
//!         Output::Forget { .. } => delete the wait's row,
//!         Output::Check { .. }  => start a check on a worker; feed `Input::Checked` when done,
//!         Output::Stop { .. }   => cancel that check and wait for its cleanup, then feed
//!                                  `Input::Checked` with whatever it ended with,
//!         Output::Send(report)  => send `wait.matched` / `wait.failed`,
//!         Output::Wait { until, .. } => wait for input or `until`, then feed `Input::Timeout`
//!     }
//! }
//! ```
//!
//! `Wait` always comes last (the drain rule, as for every role). **Write-ahead order:** a
//! `Save` is durable before any later output of the same drain is carried out, so an ending
//! is on disk before its report leaves and a wait is on disk before its first check.
//!
//! ## Promises
//!
//! - A wait is saved when it is registered, with its deadline and error count: a wait whose
//!   first row was lost could never time out.
//! - At most one check of a wait runs at a time, at most [`ScheduleConfig::max_running`] in
//!   all; a check starts no sooner than `interval` after the wait's last check ended.
//! - [`MAX_CONSECUTIVE_ERRORS`] failed checks in a row fail the wait; a check that does not
//!   fail resets the count.
//! - A match is saved with its result and its [`continuation_id`] in one row and is never
//!   checked again; its report is sent on every connection until the server acknowledges it.
//! - A wait that expired or was cancelled never reports a match, even from a check that was
//!   running when it ended: that check is stopped and its outcome dropped. The stop is
//!   saved before it is asked for, so a crash before the check stops ends the wait as it
//!   was ending instead of checking it again.
//!
//! This module never evaluates a condition, reads a clock or touches a store.

mod row;
mod schedule;
mod wire;

#[cfg(test)]
mod tests;

use crate::ids::WaitId;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use row::{WaitRow, WaitRowError};
pub use schedule::{Schedule, WaitView};

use crate::time::Instant;

/// How long after a check its wait is checked again unless the registration says otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// The shortest interval a wait may ask for; shorter ones are raised to it.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Failed checks in a row that fail a wait.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 5;

/// Checks that run at once across all waits by default.
pub const DEFAULT_MAX_RUNNING: usize = 8;

/// How the schedule behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleConfig {
    /// Checks running at once across every wait (at least 1).
    pub max_running: usize,
}

impl Default for ScheduleConfig {
    /// [`DEFAULT_MAX_RUNNING`] checks at once.
    fn default() -> Self {
        Self {
            max_running: DEFAULT_MAX_RUNNING,
        }
    }
}

/// A wait as the server registers it (`wait.register`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitSpec {
    /// The wait's id, unique per server; a registration with a known id is the same wait.
    pub wait_id: WaitId,
    /// Who registered it: the only user whose runs and grants its checks may see.
    pub requester: String,
    /// The condition's JavaScript source.
    pub source: String,
    /// The least time between the end of one check and the start of the next, in ms (raised
    /// to [`MIN_INTERVAL`]).
    pub interval_ms: u64,
    /// When the wait gives up, wall-clock milliseconds; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The requester is the machine's operator: only then may its checks read files in the
    /// mounts or run host commands (and those only under host-command trust). Absent: not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator: bool,
}

impl WaitSpec {
    /// The interval the schedule keeps: the asked one, at least [`MIN_INTERVAL`].
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms).max(MIN_INTERVAL)
    }
}

/// The stable id of the continuation a match of `wait_id` creates: the same on every report
/// of that match, so the server starts its follow-up once however often the report arrives.
pub fn continuation_id(wait_id: &str) -> String {
    format!("{wait_id}.then")
}

/// What one check of a wait came to, as the host reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The condition returned `false`.
    NotYet,
    /// The condition returned `{ resumeText, payload? }`.
    Matched {
        /// For the requester.
        resume_text: String,
        /// The payload as JSON text, handed to the continuation.
        payload: Option<String>,
        /// What the check observed (its `ctx` calls), as JSON text.
        evidence: String,
    },
    /// The check failed: the program threw, broke a limit, or the engine refused it.
    Failed(CheckError),
    /// The host stopped the check (after [`Output::Stop`]).
    Stopped,
}

pub use crate::wire::CheckError;

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "outcome",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Ending {
    /// A check matched (`wait.matched`).
    Matched {
        /// For the requester.
        resume_text: String,
        /// JSON text, handed to the continuation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
        /// What the matching check observed, JSON text.
        evidence: String,
        /// [`continuation_id`] of the wait.
        continuation_id: String,
        /// When it matched, wall-clock milliseconds.
        matched_at_ms: u64,
    },
    /// The wait ended without a match (`wait.failed`).
    Failed {
        /// Why it ended, sent as its code (`check_errors`, `expired`, `cancelled`).
        reason: FailReason,
        /// When, wall-clock milliseconds.
        at_ms: u64,
    },
}

/// Why a wait ended without a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// [`MAX_CONSECUTIVE_ERRORS`] checks failed in a row.
    CheckErrors,
    /// Its `expiresAt` passed.
    Expired,
    /// The server cancelled it.
    Cancelled,
}

impl FailReason {
    /// The stable code on the wire.
    pub fn code(self) -> &'static str {
        match self {
            FailReason::CheckErrors => "check_errors",
            FailReason::Expired => "expired",
            FailReason::Cancelled => "cancelled",
        }
    }

    /// The reason a wire code names, if it names one.
    pub fn from_code(code: &str) -> Option<Self> {
        [Self::CheckErrors, Self::Expired, Self::Cancelled]
            .into_iter()
            .find(|r| r.code() == code)
    }
}

/// A wait's ending for the server, sent until acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The wait that ended, as `wait.register` named it; sent as `wait.matched` or `wait.failed`.
    pub wait_id: WaitId,
    /// Checks that ran to an outcome.
    pub checks: u64,
    /// The last failed check's error, if any.
    pub last_error: Option<CheckError>,
    /// How it ended.
    pub ending: Ending,
}

/// What the host tells the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed: start what is due, end what expired.
    Timeout,
    /// `wait.register`. A known id changes nothing (a repeated registration); an ended wait
    /// not yet acknowledged has its report sent again.
    Register(WaitSpec),
    /// `wait.cancel`. An unknown id is answered with a cancelled report all the same, so the
    /// server's cancel always completes.
    Cancel {
        /// The wait to end; known or not, a `cancelled` report answers.
        wait_id: WaitId,
    },
    /// A check the schedule started ended.
    Checked {
        /// The wait named in the [`Output::Check`] this answers.
        wait_id: WaitId,
        /// The number [`Output::Check`] gave it; another number is stale and ignored.
        check: u64,
        /// Not yet, matched, failed, or stopped after [`Output::Stop`].
        outcome: CheckOutcome,
    },
    /// The server recorded the wait's ending (`wait.ack`): its row may go.
    Acked {
        /// The wait whose ending the server stored; only an ended wait is forgotten
        /// ([`Output::Forget`]).
        wait_id: WaitId,
    },
    /// A connection to the server is up: every unacknowledged report is sent again.
    Connected,
    /// The connection went away: reports wait for the next one.
    Disconnected,
}

/// What the schedule asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write this row durably, replacing the wait's previous one, before carrying out any
    /// later output. Boxed: a row is the largest thing a wait outputs.
    Save(Box<WaitRow>),
    /// Delete the wait's row: the server has its ending.
    Forget {
        /// The ended wait whose row to delete, after its [`Input::Acked`].
        wait_id: WaitId,
    },
    /// Start check number `check` of a wait.
    Check {
        /// The wait whose condition to evaluate; report it back in [`Input::Checked`].
        wait_id: WaitId,
        /// Its number (1 for the first check of the wait).
        check: u64,
        /// The requester, for the `ctx` calls' access checks.
        requester: String,
        /// Whether the requester is the machine's operator ([`WaitSpec::operator`]).
        operator: bool,
        /// The condition's JavaScript source, as [`WaitSpec::source`] holds it.
        source: String,
    },
    /// Stop the running check `check` and, once its cleanup is done, report it with
    /// [`Input::Checked`].
    Stop {
        /// The wait whose running check to stop.
        wait_id: WaitId,
        /// The number of the check to stop, as its [`Output::Check`] gave it.
        check: u64,
    },
    /// Send this report to the server.
    Send(Report),
    /// Nothing more until `until` or new input.
    Wait {
        /// When to feed [`Input::Timeout`].
        until: Instant,
        /// Why (`check`, `expiry`, `idle`).
        reason: &'static str,
    },
}

/// Host misuse of the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The host did not drain outputs.
    #[error(
        "more than {} outputs are waiting: drain poll_output first",
        crate::MAX_QUEUED_OUTPUTS
    )]
    OutputBacklog,
    /// Time went backwards.
    #[error("time went backwards")]
    TimeWentBackwards,
}
