//! Rebuilding a dispatcher from its records in a new process: rows become machines, sessions
//! and executions with deadlines rebased onto the new clock. It must never offer a committed
//! run anywhere else, and never trust an instant from the old process.

use std::sync::Arc;

use super::{ContextRow, ExecutionRow, PlaceRow, ServerSnapshot};
use crate::ids::ExecutionId;
use crate::routing::{AttemptOutcome, Candidate, RunKind};
use crate::server::{Execution, ExecutionOutcome, Machine, Place, Server};
use crate::session::{self, RunSpec, Session, SessionConfig};
use crate::sign::Signer;
use crate::time::{Instant, Now, rebase};

impl Server {
    /// A dispatcher rebuilt in a new process from `snapshot` (a stored snapshot with the
    /// journal written after it folded in), its times rebased onto this process's clock.
    ///
    /// Nothing from the old process's memory survives: no connection, no ticket, no offer.
    /// Committed runs keep their leases and end with their result, `lost` when the lease
    /// ends, or `lost` as soon as the daemon says hello without them. Offers not committed,
    /// and executions that would find a machine offline, wait up to [`super::super::RESTART_GRACE`]
    /// for the machines to reconnect, then move on as usual. Queued executions wait until
    /// their deadline.
    /// Executions that were on the server's own executor end `lost`: it died with the
    /// process. What this decides comes out of [`Server::poll_output`] like any input's
    /// outputs, records first.
    pub fn restore(
        signer: Arc<dyn Signer + Send + Sync>,
        session_template: SessionConfig,
        snapshot: &ServerSnapshot,
        now: Now,
    ) -> Self {
        Self::restore_with_elsewhere(signer, session_template, snapshot, &[], now)
    }

    /// [`Server::restore`] for a node of a cluster: `snapshot` holds what this node owns, and
    /// `elsewhere` the rows of machines other nodes own, known before anything is planned (a
    /// chain that names one passes it over rather than failing `unknown_context`), as if
    /// each came in [`super::super::Input::Elsewhere`].
    pub fn restore_with_elsewhere(
        signer: Arc<dyn Signer + Send + Sync>,
        session_template: SessionConfig,
        snapshot: &ServerSnapshot,
        elsewhere: &[ContextRow],
        now: Now,
    ) -> Self {
        let mut server = Server::new(signer, session_template, now);
        for row in &snapshot.contexts {
            let machine = server.machine_from_row(row, now);
            server.add_machine(row.id.to_string(), machine);
        }
        for row in elsewhere {
            if server.machines.contains(row.id.as_str()) {
                continue;
            }
            let mut machine = server.machine_from_row(row, now);
            machine.elsewhere = true;
            server.add_machine(row.id.to_string(), machine);
        }
        for row in &snapshot.chains {
            server.chains.insert(row.user_id.clone(), row.chain.clone());
        }
        let installed = server.install_executions(&snapshot.executions, snapshot.written_ms, now);
        // What the restart decides is journaled like an input's changes.
        let mark = server.outputs.len();
        server.start_grace();
        let ids: Vec<String> = server.machines.ids().cloned().collect();
        for id in ids {
            // Each session's timers reach the dispatcher the ordinary way.
            server.feed_or_report(&id, session::Input::Timeout);
        }
        server.settle_installed(installed);
        server.flush_journal(mark);
        server
    }

    /// A machine as its row says, with a session that has no connection and no run yet.
    pub(in crate::server) fn machine_from_row(&self, row: &ContextRow, now: Now) -> Machine {
        let mut config = self.session_template.clone();
        config.context_id = row.id.as_str().into();
        let session = Session::restore(
            config,
            row.grant.clone(),
            row.grant_version,
            row.revoked,
            self.signer.clone(),
            now,
        );
        Machine {
            record: row.record(),
            session,
            elsewhere: false,
        }
    }

    /// Takes in execution rows written at `written` (wall milliseconds) by an earlier process
    /// or another node: committed runs go into their machines' sessions with their leases
    /// rebased onto `now`, queued ones wait for their deadlines, and the queues are ordered by
    /// those deadlines (no arrival order survives). A row whose id is held already is left
    /// alone. What must still be decided is returned for [`Server::settle_installed`].
    pub(in crate::server) fn install_executions(
        &mut self,
        rows: &[ExecutionRow],
        written: u64,
        now: Now,
    ) -> Installed {
        let mut installed = Installed::default();
        let mut taken = Vec::new();
        for row in rows {
            let exec_id = row.exec_id.clone();
            if self.executions.contains_key(&exec_id) {
                continue;
            }
            let place = match &row.place {
                PlaceRow::Unplaced => {
                    installed.unplaced.push(exec_id.clone());
                    Place::Unplaced
                }
                PlaceRow::Offered { context_id, run_id } => {
                    installed.offered.push(exec_id.clone());
                    Place::OnContext {
                        context_id: context_id.clone(),
                        run_id: run_id.clone(),
                        started: false,
                    }
                }
                PlaceRow::Committed {
                    context_id,
                    run_id,
                    committed_at_ms,
                    lost_at_ms,
                } => {
                    let shared_run = matches!(
                        row.route.as_ref().map(|r| r.current()),
                        Some(Candidate::Context {
                            run: RunKind::Shared,
                            ..
                        })
                    );
                    let spec = RunSpec {
                        run_id: run_id.clone(),
                        environment: row.environment,
                        capability: row.capability.clone(),
                        timeout_ms: row.timeout_ms,
                        shared_run,
                        requester: row.requester.user_id.clone(),
                    };
                    match self.machines.get_mut(context_id) {
                        Some(m) => {
                            m.session.restore_committed(
                                spec,
                                rebase(*committed_at_ms, written, now),
                                rebase(*lost_at_ms, written, now),
                            );
                            self.runs.insert(run_id.clone(), exec_id.clone());
                            self.restored_commits
                                .insert(run_id.clone(), *committed_at_ms);
                        }
                        None => installed.lost.push(exec_id.clone()),
                    }
                    Place::OnContext {
                        context_id: context_id.clone(),
                        run_id: run_id.clone(),
                        started: true,
                    }
                }
                PlaceRow::Queued {
                    context_id,
                    until_ms,
                } => {
                    let until = rebase(*until_ms, written, now);
                    self.queue_wakes.set(&exec_id, Some((until, "queue")));
                    Place::Queued {
                        context_id: context_id.clone(),
                        until,
                    }
                }
                PlaceRow::Cloud => {
                    installed.lost.push(exec_id.clone());
                    Place::OnCloud
                }
                PlaceRow::HandedOff { .. } => {
                    installed.handed.push(exec_id.clone());
                    Place::Unplaced
                }
            };
            let execution = Execution {
                request: row.request(),
                route: row.route.clone(),
                place,
                hops: row.hops,
                arrival: 0,
            };
            self.executions.insert(exec_id.clone(), execution);
            taken.push(exec_id);
        }
        // No arrival order survives: the queues are served by their deadlines.
        let mut order: Vec<(Option<Instant>, ExecutionId)> = taken
            .into_iter()
            .filter_map(|id| match self.executions.get(&id)?.place {
                Place::Queued { until, .. } => Some((Some(until), id)),
                _ => Some((None, id)),
            })
            .collect();
        order.sort();
        for (_, id) in order {
            self.next_arrival += 1;
            if let Some(e) = self.executions.get_mut(&id) {
                e.arrival = self.next_arrival;
            }
        }
        installed
    }

    /// Decides what installed rows left open: runs that died with their executor end
    /// `lost`, offers not committed move on to their next candidate, and unplaced executions
    /// are planned.
    pub(in crate::server) fn settle_installed(&mut self, installed: Installed) {
        for exec_id in installed.lost {
            self.finish(&exec_id, ExecutionOutcome::Lost);
        }
        for exec_id in installed.offered {
            self.fall_through(&exec_id, AttemptOutcome::Offline, "offline");
        }
        for exec_id in installed.unplaced {
            self.place(&exec_id);
        }
        for exec_id in installed.handed {
            self.go_on_from_hand_off(&exec_id);
        }
    }

    /// Goes on with an execution another node handed here: one handed to the machine it
    /// names is planned afresh (that machine is this node's: it may queue for it); a walk
    /// that reached a machine of its chain resumes there, and never goes back to one it
    /// passed (two nodes would hand it to each other for ever).
    fn go_on_from_hand_off(&mut self, exec_id: &ExecutionId) {
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        let named = e.request.target.context.as_deref();
        let at_named = |route: &crate::routing::Route| Some(route.current().id()) == named;
        let Some(route) = e.route.take().filter(|route| !at_named(route)) else {
            return self.place(exec_id);
        };
        let requester = e.request.requester.clone();
        let target = e.request.target.clone();
        let environment = e.request.environment;
        self.journal.touch_execution(exec_id);
        let views = self.views(environment);
        match route.resume(&requester, &target, &views) {
            Ok(route) => self.dispatch(exec_id, route),
            Err(err) => self.routing_failed(exec_id, &err),
        }
    }
}

/// What [`Server::install_executions`] left to decide.
#[derive(Default)]
pub(in crate::server) struct Installed {
    offered: Vec<ExecutionId>,
    handed: Vec<ExecutionId>,
    unplaced: Vec<ExecutionId>,
    lost: Vec<ExecutionId>,
}
