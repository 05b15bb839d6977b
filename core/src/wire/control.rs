//! Operators' requests for the daemon itself, from afar: pause, resume, restart, update now,
//! and its recent log lines (PROTOCOL §4.7). A server sends `control.request` only to a daemon
//! whose `hello` listed [`FEATURE_CONTROL`]; the daemon answers each with one
//! `control.result`, and its owner's local policy may refuse any action.
//!
//! This module owns the names of the actions and outcomes and the bounds on what an answer
//! carries. It never decides whether an action is allowed (the daemon's host does, from the
//! owner's policy) or what an action does.

use serde::{Deserialize, Serialize};

/// The `hello` feature that says a daemon answers `control.request`.
pub const FEATURE_CONTROL: &str = "control";

/// The most log lines one `control.result` carries.
pub const MAX_CONTROL_LINES: u32 = 200;

/// How many log lines a `logs` request without `lines` asks for.
pub const DEFAULT_CONTROL_LINES: u32 = 100;

/// The most bytes of one log line in a `control.result` (a longer line is cut at a character
/// boundary and ends with `…`).
pub const MAX_CONTROL_LINE_BYTES: usize = 1000;

/// What an operator asks of a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ControlAction {
    /// Take no new runs (offers are refused `draining`); the running ones finish. Lasts
    /// until `resume`, across the daemon's restarts.
    Pause,
    /// Take runs again after a pause.
    Resume,
    /// Drain (take no new runs, let the running ones finish and report), then exit so the
    /// service manager starts the daemon again.
    Restart,
    /// Check for a signed update now; when one is staged, drain and hand over to it.
    Update,
    /// Send the daemon's most recent log lines.
    Logs,
}

impl ControlAction {
    /// Every action, in the order PROTOCOL lists them.
    pub const ALL: [ControlAction; 5] = [
        ControlAction::Pause,
        ControlAction::Resume,
        ControlAction::Restart,
        ControlAction::Update,
        ControlAction::Logs,
    ];

    /// The action as the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
            ControlAction::Restart => "restart",
            ControlAction::Update => "update",
            ControlAction::Logs => "logs",
        }
    }

    /// The action `text` names; none for any other text.
    pub fn parse(text: &str) -> Option<ControlAction> {
        Self::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

impl std::fmt::Display for ControlAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a daemon answered a `control.request`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ControlOutcome {
    /// It did it, or began to (a restart or an update drains first).
    Done,
    /// The owner's local policy, or the daemon's situation, does not allow it: `code` says
    /// which (`refused_by_owner`, `no_service_manager`, `updates_off`, `unknown_action`, …).
    Refused,
    /// It tried and could not (`update_failed`, …).
    Failed,
}

impl ControlOutcome {
    /// The outcome as the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlOutcome::Done => "done",
            ControlOutcome::Refused => "refused",
            ControlOutcome::Failed => "failed",
        }
    }
}

/// Cuts a log line to [`MAX_CONTROL_LINE_BYTES`] at a character boundary, marking the cut.
pub fn bounded_line(line: &str) -> String {
    if line.len() <= MAX_CONTROL_LINE_BYTES {
        return line.to_owned();
    }
    let mut end = MAX_CONTROL_LINE_BYTES - '…'.len_utf8();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_read_back_and_nothing_else_reads() {
        for action in ControlAction::ALL {
            assert_eq!(ControlAction::parse(action.as_str()), Some(action));
            assert_eq!(serde_json::to_value(action).unwrap(), action.as_str());
        }
        assert_eq!(ControlAction::parse("Pause"), None);
        assert_eq!(ControlAction::parse("shutdown"), None);
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_and_marked() {
        let long = "é".repeat(MAX_CONTROL_LINE_BYTES);
        let cut = bounded_line(&long);
        assert!(cut.len() <= MAX_CONTROL_LINE_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded_line("short"), "short");
    }
}
