//! What the daemon does with an operator's request from afar (a verified `control.request`,
//! PROTOCOL §4.7): the owner's local policy decides first (`"daemonControl"` lists the
//! actions it allows; absent: all five), then pause, resume, restart, update now or the
//! recent log lines — each answered exactly once with `control.result`.
//!
//! A pause is kept in `state/paused.json`, so a daemon restarted by its service manager (or
//! by a crash) comes back paused; only `resume` ends it. A restart is a drain that ends with
//! [`DaemonExit::Restart`] (exit 75), which the generated systemd unit and LaunchAgent start
//! again; a daemon no service manager started refuses it rather than stop for good. This
//! module never widens what a run may do and never runs anything.

use std::path::Path;

use outpost_core::daemon::Input;
use outpost_core::wire::{
    ControlAction, ControlOutcome, DEFAULT_CONTROL_LINES, DaemonFrame, MAX_CONTROL_LINES,
};
use serde::{Deserialize, Serialize};

use super::Driver;
use crate::home::write_private;
use crate::{DaemonError, Launcher, recent_log, update};

/// The file that keeps an operator's pause across restarts.
pub const PAUSED_FILE: &str = "paused.json";

/// What `state/paused.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Paused {
    /// When the pause began (RFC 3339, UTC).
    pub since: String,
}

/// Whether an operator's pause holds for the daemon whose state folder is `state`.
pub fn paused_at_start(state: &Path) -> Option<Paused> {
    match std::fs::read(state.join(PAUSED_FILE)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        // A file that cannot be read, or no longer reads, still means paused: the machine
        // stays quiet until someone resumes it (or its owner removes the file).
        Err(_) => Some(Paused {
            since: String::new(),
        }),
        Ok(bytes) => Some(serde_json::from_slice(&bytes).unwrap_or(Paused {
            since: String::new(),
        })),
    }
}

/// Forgets a pause: the machine joined a server anew (a pause belongs to the server whose
/// operator asked for it).
pub(crate) fn forget_pause(state: &Path) {
    match std::fs::remove_file(state.join(PAUSED_FILE)) {
        Ok(()) => tracing::info!("a new join: the pause the last server asked for is lifted"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {PAUSED_FILE} after a new join: {e}"),
    }
}

/// The requests from afar the driver is still working on.
pub(super) struct Requests {
    /// Who started the daemon: a restart from afar needs a service manager.
    pub(super) launcher: Launcher,
    /// When an operator asked for a restart: the drain ends with [`DaemonExit::Restart`], and
    /// after [`crate::DRAIN_LIMIT`] what still runs is stopped.
    pub(super) restart_asked: Option<std::time::Instant>,
    /// `update` requests (their control ids) waiting for the update check under way.
    pub(super) update_answers: Vec<String>,
}

impl Requests {
    /// None in progress, for a daemon `launcher` started.
    pub(super) fn new(launcher: Launcher) -> Self {
        Requests {
            launcher,
            restart_asked: None,
            update_answers: Vec::new(),
        }
    }
}

/// An answer, as the daemon sends it.
struct Answer {
    outcome: ControlOutcome,
    code: &'static str,
    message: String,
    lines: Vec<String>,
    /// Drain once the answer is sent (a restart): a drain with nothing in flight closes the
    /// connection at once, and the answer must leave first.
    then_drain: bool,
}

impl Answer {
    fn done(message: impl Into<String>) -> Self {
        Self {
            outcome: ControlOutcome::Done,
            code: "",
            message: message.into(),
            lines: Vec::new(),
            then_drain: false,
        }
    }

    fn refused(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            outcome: ControlOutcome::Refused,
            code,
            message: message.into(),
            lines: Vec::new(),
            then_drain: false,
        }
    }

    fn failed(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            outcome: ControlOutcome::Failed,
            code,
            message: message.into(),
            lines: Vec::new(),
            then_drain: false,
        }
    }
}

impl Driver {
    /// A verified `control.request`: decide, act, answer (an update answers when its check
    /// comes back).
    pub(super) fn control(
        &mut self,
        control_id: String,
        action: String,
        lines: u32,
    ) -> Result<(), DaemonError> {
        let answer = match ControlAction::parse(&action) {
            None => Answer::refused(
                "unknown_action",
                format!("this daemon does not know the action {action:?}"),
            ),
            Some(known) if !self.owner_allows(known) => Answer::refused(
                "refused_by_owner",
                format!(
                    "the machine's owner does not allow `{known}` from afar (the local policy's \"daemonControl\")"
                ),
            ),
            Some(known) => match self.act(known, &control_id, lines)? {
                Some(answer) => answer,
                // Answered later (an update check runs).
                None => return Ok(()),
            },
        };
        tracing::info!(action = %action, outcome = answer.outcome.as_str(), code = answer.code, "an operator's request from afar: {}", answer.message);
        let then_drain = answer.then_drain;
        self.answer(control_id, action, answer)?;
        if then_drain {
            self.input(Input::Drain)?;
        }
        Ok(())
    }

    fn owner_allows(&self, action: ControlAction) -> bool {
        match &self.policy.current().daemon_control {
            None => true,
            Some(allowed) => allowed.iter().any(|a| a == action.as_str()),
        }
    }

    fn act(
        &mut self,
        action: ControlAction,
        control_id: &str,
        lines: u32,
    ) -> Result<Option<Answer>, DaemonError> {
        let running = self.daemon.slots_used();
        Ok(Some(match action {
            ControlAction::Pause => {
                if self.daemon.is_paused() {
                    return Ok(Some(Answer::done("already paused")));
                }
                let paused = Paused {
                    since: crate::status::now_rfc3339(),
                };
                let text = serde_json::to_vec_pretty(&paused).unwrap_or_default();
                if let Err(e) = write_private(&self.state_dir.join(PAUSED_FILE), &text) {
                    return Ok(Some(Answer::failed(
                        "state_unwritable",
                        format!("cannot keep the pause in {PAUSED_FILE}: {e}"),
                    )));
                }
                self.input(Input::Pause)?;
                Answer::done(format!(
                    "paused: no new runs until resumed; {running} running run(s) finish"
                ))
            }
            ControlAction::Resume => {
                if !self.daemon.is_paused() {
                    return Ok(Some(Answer::done("not paused")));
                }
                match std::fs::remove_file(self.state_dir.join(PAUSED_FILE)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Ok(Some(Answer::failed(
                            "state_unwritable",
                            format!("cannot remove {PAUSED_FILE}: {e}"),
                        )));
                    }
                }
                self.input(Input::Resume)?;
                Answer::done("resumed: taking runs again")
            }
            ControlAction::Restart => {
                if self.requests.launcher == Launcher::Terminal {
                    return Ok(Some(Answer::refused(
                        "no_service_manager",
                        "this daemon was started in a terminal, not by a service manager that would start it again: restart it there",
                    )));
                }
                if self.stop.count() > 0 {
                    return Ok(Some(Answer::refused(
                        "stopping",
                        "the daemon is stopping at its owner's request: it will not restart",
                    )));
                }
                if self.updates.handing_over() || self.requests.restart_asked.is_some() {
                    return Ok(Some(Answer::done("already draining to restart")));
                }
                self.requests.restart_asked = Some(std::time::Instant::now());
                let mut answer = Answer::done(format!(
                    "restarting: no new runs; {running} running run(s) finish and report (at most {} s), then {} starts the daemon again",
                    crate::DRAIN_LIMIT.as_secs(),
                    self.requests.launcher.as_str()
                ));
                answer.then_drain = true;
                answer
            }
            ControlAction::Update => {
                if !self.updates.is_on() {
                    return Ok(Some(Answer::refused(
                        "updates_off",
                        format!(
                            "automatic updates are off on this machine (the local policy's \"autoUpdate\": false, or {}=0)",
                            update::AUTO_UPDATE_VAR
                        ),
                    )));
                }
                if self.updates.handing_over() {
                    return Ok(Some(Answer::done(
                        "an update is already staged; handing over once runs finish",
                    )));
                }
                self.requests.update_answers.push(control_id.to_owned());
                self.updates.check_now();
                return Ok(None);
            }
            ControlAction::Logs => {
                let n = match lines {
                    0 => DEFAULT_CONTROL_LINES,
                    n => n.min(MAX_CONTROL_LINES),
                };
                let kept = recent_log::last(n as usize);
                let mut answer = Answer::done(format!("the last {} log line(s)", kept.len()));
                answer.lines = kept;
                answer
            }
        }))
    }

    /// Answers the update requests waiting for the check that just came back.
    pub(super) fn answer_updates(
        &mut self,
        checked: &Result<update::Checked, update::UpdateError>,
    ) -> Result<(), DaemonError> {
        if self.requests.update_answers.is_empty() {
            return Ok(());
        }
        let answer = || match checked {
            Ok(update::Checked::Staged(staged)) => Answer::done(format!(
                "staged and proven {}; handing over once runs finish",
                staged.version
            )),
            Ok(update::Checked::Nothing) => Answer::done(format!(
                "no newer signed release than {} (or checks are backing off after a failure)",
                update::running_version()
            )),
            Err(update::UpdateError::Http(e)) if e.code() == "no_release" => Answer::done(format!(
                "the server publishes no daemon release: {} stays",
                update::running_version()
            )),
            Err(e) => Answer::failed("update_failed", format!("{e} [{}]", e.code())),
        };
        for control_id in std::mem::take(&mut self.requests.update_answers) {
            let a = answer();
            tracing::info!(
                action = "update",
                outcome = a.outcome.as_str(),
                "an operator's request from afar: {}",
                a.message
            );
            self.answer(control_id, "update".into(), a)?;
        }
        Ok(())
    }

    fn answer(
        &mut self,
        control_id: String,
        action: String,
        answer: Answer,
    ) -> Result<(), DaemonError> {
        self.input(Input::ControlAnswered(DaemonFrame::ControlResult {
            control_id,
            action,
            outcome: answer.outcome,
            code: answer.code.to_owned(),
            message: answer.message,
            lines: answer.lines,
        }))
    }
}
