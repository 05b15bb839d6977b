//! What the driver does with each event and each command of the core: a connection's
//! frames and state, a ticket, a finished run or check, an update check; a run to start or
//! cancel, a grant to apply, a bundle to fetch, a terminal's keystrokes.
//!
//! It owns those reactions and the bundle fetch's retries; it never polls the core or
//! writes the store (the loop in `driver.rs` does, once per wake).

use std::sync::Arc;
use std::time::Duration;

use outpost_adapters::http::SignedClient;
use outpost_adapters::runtime::LinkEvent;
use outpost_core::daemon::{Command, Event as CoreEvent, Input};
use outpost_core::wire::close_code;

use super::Driver;
use crate::update;
use crate::{DaemonError, DaemonExit, Event};

/// Refusals of the ticket request after which reconnecting cannot help.
const FINAL_REFUSALS: [&str; 2] = ["context_revoked", "unknown_key"];

/// How many times a bundle fetch is tried before the run fails `bundle_unavailable`.
const FETCH_TRIES: u32 = 4;

/// Fetches a run's bundle, trying again after a failure that may pass (the server busy or
/// rate-limiting, the connection cut): after 1, 2 and 4 s. A refusal of the request itself
/// fails at once.
fn fetch_patiently(
    client: &SignedClient,
    sha256: &str,
) -> Result<Vec<u8>, outpost_adapters::http::HttpError> {
    let mut wait = Duration::from_secs(1);
    let mut tries = 1;
    loop {
        match client.fetch_bundle(sha256) {
            Err(e) if e.is_transient() && tries < FETCH_TRIES => {
                tracing::info!(%sha256, code = e.code(), "fetching a bundle failed; trying again in {} s", wait.as_secs());
                std::thread::sleep(wait);
                wait *= 2;
                tries += 1;
            }
            done => return done,
        }
    }
}

impl Driver {
    pub(super) fn command(&mut self, command: Command) {
        match command {
            Command::Connect => self.connect(),
            Command::Execute(execute) => {
                tracing::info!(run = %execute.run_id, environment = execute.environment.as_str(), "run started");
                self.runner.start(*execute);
            }
            Command::Cancel { run_id, reason } => {
                tracing::info!(run = %run_id, %reason, "cancelling run");
                self.runner.cancel(&run_id);
            }
            Command::ApplyGrant { version, grant } => {
                // Off kills every job; the driver reports them on its next wake.
                self.commands.shared.set_granted(grant.commands.enabled);
                let _ = self.tx.send(Event::CommandsAudit);
                self.features.granted = grant.fs.clone();
                self.features.look_now();
                tracing::info!(
                    version,
                    folders = grant.fs.len(),
                    egress = ?grant.egress,
                    commands = grant.commands.enabled,
                    "grant in force"
                );
            }
            Command::Stop { forever } => {
                if forever {
                    self.commands.shared.revoke();
                }
                self.exit = Some(if !forever && self.updates.handing_over() {
                    DaemonExit::Updated
                } else if !forever && self.requests.restart_asked.is_some() {
                    DaemonExit::Restart
                } else if !forever {
                    DaemonExit::Drained
                } else if self.connection.last_close == Some(close_code::REPLACED) {
                    DaemonExit::Replaced
                } else {
                    DaemonExit::Revoked
                });
            }
            Command::FetchCapability { run_id, sha256, .. } => {
                let client = self.client.clone();
                let tx = self.tx.clone();
                self.host.spawn_blocking(Box::new(move || {
                    let input = match fetch_patiently(&client, &sha256) {
                        Ok(bundle) => Input::CapabilityFetched { run_id, bundle },
                        Err(e) => {
                            tracing::warn!(run = %run_id, "cannot fetch the run's bundle: {e}");
                            let error = outpost_core::wire::ErrorBody {
                                code: "bundle_unavailable".into(),
                                message: format!("the daemon could not fetch the bundle: {e}"),
                            };
                            Input::CapabilityFetchFailed { run_id, error }
                        }
                    };
                    let _ = tx.send(Event::Input(input));
                }));
            }
            Command::PtyInput { pty_id, data } => self.runner.terminals().input(&pty_id, data),
            Command::PtyResize { pty_id, cols, rows } => {
                self.runner.terminals().resize(&pty_id, cols, rows);
            }
            Command::PtyCredit { pty_id, bytes } => self.runner.terminals().credit(&pty_id, bytes),
            Command::PtyClose { pty_id } => {
                tracing::info!(run = %pty_id, "closing a terminal");
                self.runner.cancel(&pty_id);
            }
            Command::CheckWait {
                wait_id,
                check,
                requester,
                operator,
                source,
            } => {
                tracing::debug!(wait = %wait_id, check, "checking a condition");
                self.checks
                    .start(wait_id, check, requester, operator, source);
            }
            Command::StopCheck { wait_id, check } => {
                tracing::info!(wait = %wait_id, check, "stopping a condition check");
                self.checks.stop(&wait_id, check);
            }
            // Decided and answered as an event of its own: acting may feed the core.
            Command::Control {
                control_id,
                action,
                lines,
            } => {
                let _ = self.tx.send(Event::Control {
                    control_id,
                    action,
                    lines,
                });
            }
        }
    }

    /// Fetches a fresh key set and a ticket on a blocking thread; [`Event::Ticket`] brings
    /// them back.
    fn connect(&mut self) {
        self.connection.attempt += 1;
        let conn = self.connection.attempt;
        let client = self.client.clone();
        let roots = self.roots.clone();
        let tx = self.tx.clone();
        self.host.spawn_blocking(Box::new(move || {
            let keys = client.server_keys(&roots);
            let ticket = client.connect_ticket();
            let _ = tx.send(Event::Ticket { conn, keys, ticket });
        }));
    }

    pub(super) fn on_event(&mut self, event: Event) -> Result<(), DaemonError> {
        match event {
            // The loop looks at the signal's count before it sleeps again.
            Event::Stop => Ok(()),
            Event::PolicyChanged => {
                self.features.look_now();
                Ok(())
            }
            Event::Control {
                control_id,
                action,
                lines,
            } => self.control(control_id, action, lines),
            Event::UpdateChecked(checked) => {
                self.updates.checked();
                self.answer_updates(&checked)?;
                match checked {
                    Ok(update::Checked::Staged(staged)) if self.stop.count() == 0 => {
                        tracing::info!(version = %staged.version, "handing over to the update once the runs in flight have finished and reported");
                        self.updates.begin_hand_over(update::hand_over_limit());
                        self.input(Input::Drain)
                    }
                    Ok(_) => Ok(()),
                    Err(e) => {
                        tracing::warn!(code = e.code(), "the update check took nothing: {e}");
                        Ok(())
                    }
                }
            }
            Event::CommandsAudit => self.report_commands(),
            Event::Input(input) => {
                match &input {
                    Input::WaitChecked {
                        wait_id,
                        check,
                        outcome,
                    } => {
                        self.checks.finished(wait_id, *check);
                        if let outpost_core::wait::CheckOutcome::Failed(e) = outcome {
                            tracing::info!(wait = %wait_id, check, code = %e.code, "a condition check failed: {}", e.message);
                        }
                    }
                    Input::RunFinished { run_id, result } => {
                        self.runner.finished(run_id);
                        tracing::info!(run = %run_id, status = ?result.status, exit_code = ?result.exit_code, "run finished");
                    }
                    _ => {}
                }
                self.input(input)
            }
            Event::TerminalOutput { run_id, pending } => {
                let data = pending.take();
                if data.is_empty() {
                    return Ok(());
                }
                self.input(Input::TerminalOutput { run_id, data })
            }
            Event::Ticket { conn, .. } if conn != self.connection.attempt => Ok(()),
            Event::Ticket { keys, ticket, .. } => {
                match keys {
                    Ok(keys) if keys.version() != self.keys_version => {
                        // The core takes a higher version and refuses a lower one.
                        self.input(Input::KeysUpdated(keys))?;
                        let in_force = self.daemon.key_set();
                        if in_force.version() != self.keys_version {
                            tracing::info!(
                                version = in_force.version(),
                                "the server's key set changed"
                            );
                            if let Some(document) = in_force.document() {
                                self.store
                                    .save_key_set(Some((in_force.version(), document)))?;
                            }
                            self.keys_version = in_force.version();
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(
                        "cannot refresh the server's key set ({e}); connecting with version {} in force",
                        self.keys_version
                    ),
                }
                match ticket {
                    Ok(ticket) => {
                        self.connection.session_id = Some(ticket.session_id.clone());
                        let at = self.client.in_use();
                        self.connection.server_at = at;
                        let url = self.client.connect_url_at(at, &ticket);
                        let tx = self.tx.clone();
                        let conn = self.connection.attempt;
                        self.host.open(
                            url,
                            self.tls.clone(),
                            Arc::new(move |event| {
                                let _ = tx.send(Event::Link { conn, event });
                            }),
                        );
                        Ok(())
                    }
                    Err(e) => {
                        let stop_forever = FINAL_REFUSALS.contains(&e.code());
                        if stop_forever {
                            self.connection.final_refusal = Some(e.code().to_owned());
                        }
                        tracing::warn!("cannot get a connect ticket: {e}");
                        self.standing
                            .error(format!("cannot get a connect ticket: {e}"));
                        self.input(Input::ConnectFailed {
                            stop_forever,
                            reason: e.to_string(),
                        })
                    }
                }
            }
            Event::Link { conn, event } if conn != self.connection.attempt => {
                match event {
                    LinkEvent::Opened(link) => link.close(close_code::NORMAL, "stale connection"),
                    LinkEvent::Closed { .. } if self.connection.closing == Some(conn) => {
                        self.connection.closing = None
                    }
                    _ => {}
                }
                Ok(())
            }
            Event::Link { event, .. } => match event {
                LinkEvent::Opened(link) => {
                    self.connection.link = Some(link);
                    let session_id = self.connection.session_id.take().unwrap_or_default();
                    self.input(Input::Connected { session_id })
                }
                LinkEvent::Failed(reason) => {
                    tracing::warn!("cannot connect: {reason}");
                    self.client.move_on_from(self.connection.server_at);
                    self.standing.error(format!("cannot connect: {reason}"));
                    self.input(Input::ConnectFailed {
                        stop_forever: false,
                        reason,
                    })
                }
                LinkEvent::Message(message) => {
                    tracing::trace!(target: "outpost::timeline", stage = "daemon.read", frame = %outpost_core::wire::frame_label(&message));
                    self.input(Input::Frame(message.into_bytes()))
                }
                LinkEvent::Alive => self.input(Input::ServerAlive),
                LinkEvent::Closed { code } => {
                    self.connection.link = None;
                    if self.stop.count() == 0 {
                        self.standing.error(match code {
                            Some(code) => format!("the server closed the connection ({code})"),
                            None => "the connection dropped".to_owned(),
                        });
                    }
                    self.connection.last_close = code;
                    self.input(Input::Disconnected { code })
                }
            },
        }
    }

    /// What a core event changes in `connection.json`.
    pub(super) fn note(&mut self, event: &CoreEvent) {
        match event {
            CoreEvent::ProtocolViolation { code, detail } => self.standing.error(format!(
                "the server sent a frame that does not verify ({code}: {detail})"
            )),
            CoreEvent::ServerSilent { silent_for } => self.standing.error(format!(
                "the server sent nothing for {} s",
                silent_for.as_secs()
            )),
            CoreEvent::Disconnected { retry_at } => {
                self.standing.retry_in(self.clock.until(*retry_at));
            }
            _ => {}
        }
    }
}

pub(super) fn log_event(event: &CoreEvent) {
    match event {
        CoreEvent::Ready { session_id } => tracing::info!(session = %session_id, "connected"),
        CoreEvent::ProtocolViolation { code, detail } => {
            tracing::warn!(%code, %detail, "the server sent a frame that does not verify; reconnecting")
        }
        CoreEvent::RunRejected { run_id, refusal } => {
            tracing::info!(run = %run_id, code = refusal.code(), "run declined")
        }
        CoreEvent::ResultDelivered { run_id } => tracing::info!(run = %run_id, "result delivered"),
        CoreEvent::KeySetRefused { held, offered } => tracing::warn!(
            held,
            offered,
            "the server offered key set version {offered}, older than version {held} in force: keeping {held} (a key set never goes back)"
        ),
        CoreEvent::ServerSilent { silent_for } => tracing::warn!(
            silent_secs = silent_for.as_secs(),
            "the server sent nothing for {} s (no frame, no ping): closing the connection and reconnecting",
            silent_for.as_secs()
        ),
        CoreEvent::Disconnected { .. } => tracing::info!("disconnected; reconnecting with backoff"),
    }
}
