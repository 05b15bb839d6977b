//! The daemon's handling of verified server frames.

use crate::ids::RunId;
use std::time::Duration;

use super::runs::{Run, RunState};
use super::*;
use crate::b64;
use crate::sign::VerifiedFrame;
use crate::wire::{
    DaemonFrame, FEATURE_RUN_OUTPUT, INLINE_CAPABILITY_LIMIT, PROTOCOL_VERSION, ServerFrame,
    Violation, WireError, close_code,
};

impl Daemon {
    /// Verifies one message from the server and acts on it.
    pub(super) fn on_frame(&mut self, bytes: &[u8]) {
        let wall = self.now.wall;
        let link = std::mem::replace(&mut self.link, Link::Connecting);
        match link {
            Link::AwaitingWelcome {
                mut verifier,
                deadline,
            } => match verifier.verify(bytes, wall) {
                Ok(VerifiedFrame {
                    frame:
                        ServerFrame::Welcome {
                            protocol,
                            grant_version,
                            grant,
                            heartbeat_secs,
                            features,
                            ..
                        },
                    ..
                }) => {
                    if protocol != PROTOCOL_VERSION {
                        self.link = Link::AwaitingWelcome { verifier, deadline };
                        self.violation(
                            Violation::UnsupportedProtocol.code(),
                            format!("server speaks protocol {protocol}"),
                        );
                        return;
                    }
                    self.apply_grant(grant_version, grant);
                    let heartbeat = Duration::from_secs(u64::from(heartbeat_secs.max(1)));
                    let live_output = features.iter().any(|f| f == FEATURE_RUN_OUTPUT);
                    self.become_ready(verifier, heartbeat, live_output);
                }
                Ok(other) => {
                    self.link = Link::AwaitingWelcome { verifier, deadline };
                    self.violation(
                        Violation::UnexpectedFrame.code(),
                        format!("{} before welcome", other.frame.type_name()),
                    );
                }
                Err(e) => {
                    self.link = Link::AwaitingWelcome { verifier, deadline };
                    self.violation(e.code(), e.to_string());
                }
            },
            Link::Ready {
                mut verifier,
                live_output,
                heartbeat,
                next_heartbeat,
                silent_at,
            } => {
                let verified = verifier.verify(bytes, wall);
                self.link = Link::Ready {
                    verifier,
                    live_output,
                    heartbeat,
                    next_heartbeat,
                    silent_at,
                };
                match verified {
                    Ok(v) => self.on_server_frame(v.frame),
                    Err(e) => self.violation(e.code(), e.to_string()),
                }
            }
            // Not connected: a late message from a socket already given up. Ignore it.
            other => self.link = other,
        }
    }

    /// A peer error: report it, close the socket, reconnect later. Nothing is executed.
    fn violation(&mut self, code: &'static str, detail: String) {
        self.event(Event::ProtocolViolation { code, detail });
        self.close_and_retry(close_code::PROTOCOL_ERROR, code);
    }

    fn on_server_frame(&mut self, frame: ServerFrame) {
        match frame {
            ServerFrame::Welcome { .. } => {
                self.violation(Violation::UnexpectedFrame.code(), "a second welcome".into());
            }
            ServerFrame::RunRequest {
                run_id,
                environment,
                capability,
                timeout_ms,
                shared_run,
                requester,
            } => self.on_request(
                run_id,
                environment,
                capability,
                timeout_ms,
                shared_run,
                requester,
            ),
            ServerFrame::RunCommit { run_id } => self.on_commit(run_id),
            ServerFrame::RunCancel { run_id, reason } => self.on_cancel(run_id, reason),
            ServerFrame::RunAck { run_id } => {
                if self.pending.remove(&run_id).is_some() {
                    self.event(Event::ResultDelivered { run_id });
                    self.check_drained();
                }
            }
            ServerFrame::GrantUpdate {
                grant_version,
                grant,
            } => {
                let before = self.slots_total();
                if self.apply_grant(grant_version, grant) && self.slots_total() != before {
                    self.send_capabilities();
                }
            }
            ServerFrame::Revoked { .. } => {
                self.cancel_all("revoked");
                self.pending.clear();
                self.stop(true);
            }
            ServerFrame::PtyInput { pty_id, data } => match b64::decode(&data) {
                Ok(data) => self.command(Command::PtyInput { pty_id, data }),
                Err(_) => {
                    let bad = WireError::InvalidFrame("pty.input data is not base64url".into());
                    self.violation(bad.code(), bad.to_string());
                }
            },
            ServerFrame::PtyResize { pty_id, cols, rows } => {
                self.command(Command::PtyResize { pty_id, cols, rows })
            }
            ServerFrame::PtyClose { pty_id } => self.command(Command::PtyClose { pty_id }),
            ServerFrame::PtyCredit { pty_id, bytes } => {
                self.command(Command::PtyCredit { pty_id, bytes })
            }
            register @ ServerFrame::WaitRegister { .. } => {
                if let Some(spec) = crate::wait::WaitSpec::from_frame(register) {
                    self.feed_waits(crate::wait::Input::Register(spec));
                }
            }
            ServerFrame::WaitCancel { wait_id } => {
                self.feed_waits(crate::wait::Input::Cancel { wait_id })
            }
            ServerFrame::WaitAck { wait_id } => {
                self.feed_waits(crate::wait::Input::Acked { wait_id })
            }
            ServerFrame::ControlRequest {
                control_id,
                action,
                lines,
            } => self.command(Command::Control {
                control_id,
                action,
                lines,
            }),
        }
    }

    /// Applies a grant if it is newer than the one in force. Returns whether it was.
    fn apply_grant(&mut self, version: u64, grant: Grant) -> bool {
        if self.grant.as_ref().is_some_and(|(v, _)| *v >= version) {
            return false;
        }
        self.grant = Some((version, grant.clone()));
        self.command(Command::ApplyGrant { version, grant });
        true
    }

    fn reject(&mut self, run_id: RunId, refusal: Refusal, message: String) {
        self.transmit(&DaemonFrame::RunReject {
            run_id: run_id.clone(),
            code: refusal.code().into(),
            message,
        });
        self.event(Event::RunRejected { run_id, refusal });
    }

    fn on_request(
        &mut self,
        run_id: RunId,
        environment: Environment,
        capability: CapabilitySource,
        timeout_ms: u64,
        shared_run: bool,
        requester: String,
    ) {
        if self.runs.contains_key(&run_id)
            || self.pending.contains_key(&run_id)
            || self.journal.started_before_restart(&run_id)
            || self.seen.contains(&run_id)
        {
            // A run id runs at most once here, whatever the server sends: a repeat of a run
            // held now, started before a restart, or finished within the retention is
            // refused, and the run it names goes on (or stays ended) as it was.
            return self.reject(
                run_id,
                Refusal::RunSeen,
                "this machine already holds or held a run with this id; a run id runs once".into(),
            );
        }
        if self.draining {
            return self.reject(
                run_id,
                Refusal::Draining,
                "the daemon is shutting down".into(),
            );
        }
        if self.paused {
            return self.reject(
                run_id,
                Refusal::Draining,
                "the daemon is paused by an operator: it takes no new runs until resumed".into(),
            );
        }
        if !self.config.environments.contains(&environment) {
            return self.reject(
                run_id,
                Refusal::EnvironmentUnavailable,
                format!(
                    "no {} executor is available on this machine",
                    environment.as_str()
                ),
            );
        }
        if self
            .grant
            .as_ref()
            .is_some_and(|(_, g)| !g.allows(environment))
        {
            return self.reject(
                run_id,
                Refusal::EnvironmentNotGranted,
                format!(
                    "the grant does not allow {} runs on this machine",
                    environment.as_str()
                ),
            );
        }
        if environment == Environment::Pty && shared_run {
            return self.reject(
                run_id,
                Refusal::PtyOperatorOnly,
                "terminals are only for the machine's operator; a shared run never opens one"
                    .into(),
            );
        }
        if let Err(why) = check_inline(&capability) {
            return self.reject(run_id, Refusal::InvalidCapability, why);
        }
        if self.slots_used() >= self.slots_total() {
            return self.reject(
                run_id,
                Refusal::Busy,
                format!("all {} slots are taken", self.slots_total()),
            );
        }
        self.runs.insert(
            run_id.clone(),
            Run {
                environment,
                capability,
                timeout_ms,
                shared_run,
                requester,
                accepted_at: self.now.instant,
                state: RunState::Accepted,
            },
        );
        self.transmit(&DaemonFrame::RunAccept { run_id });
    }

    fn on_commit(&mut self, run_id: RunId) {
        let now = self.now.instant;
        let Some(run) = self.runs.get_mut(&run_id) else {
            return; // Never accepted, or already gone: nothing to start.
        };
        if run.is_committed() {
            return;
        }
        match run.capability.clone() {
            CapabilitySource::Digest { sha256, size } => {
                run.state = RunState::Fetching { committed_at: now };
                self.command(Command::FetchCapability {
                    run_id,
                    sha256,
                    size,
                });
            }
            inline @ CapabilitySource::Inline { .. } => {
                self.start(run_id, now, Capability::Inline(inline));
            }
        }
    }

    fn on_cancel(&mut self, run_id: RunId, reason: String) {
        let Some(run) = self.runs.get_mut(&run_id) else {
            return;
        };
        match &mut run.state {
            RunState::Executing { cancel_sent, .. } => {
                if !*cancel_sent {
                    *cancel_sent = true;
                    self.command(Command::Cancel { run_id, reason });
                }
            }
            // Nothing started: forget it.
            RunState::Accepted | RunState::Fetching { .. } => {
                self.runs.remove(&run_id);
                self.check_drained();
            }
        }
    }
}

/// Inline files must decode and stay inside the capability folder.
fn check_inline(capability: &CapabilitySource) -> Result<(), String> {
    match capability {
        CapabilitySource::Inline { manifest, files } => {
            let size = manifest.len()
                + files
                    .iter()
                    .map(|f| f.content_b64.len() * 3 / 4)
                    .sum::<usize>();
            if size > INLINE_CAPABILITY_LIMIT {
                return Err(format!(
                    "an inline capability of {size} bytes is over the {INLINE_CAPABILITY_LIMIT}-byte limit; send it by digest"
                ));
            }
            for f in files {
                let escapes = f.path.is_empty()
                    || f.path.starts_with('/')
                    || f.path.split(['/', '\\']).any(|c| c == ".." || c.is_empty());
                if escapes {
                    return Err(format!(
                        "file path {:?} leaves the capability folder",
                        f.path
                    ));
                }
                if b64::decode(&f.content_b64).is_err() {
                    return Err(format!("file {:?} is not base64url", f.path));
                }
            }
            Ok(())
        }
        CapabilitySource::Digest { sha256, .. } => {
            if sha256.len() == 64
                && sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                Ok(())
            } else {
                Err("sha256 is not 64 lowercase hex digits".into())
            }
        }
    }
}
