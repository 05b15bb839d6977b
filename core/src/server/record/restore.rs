//! Rebuilding a dispatcher from its records in a new process: rows become machines, sessions
//! and executions with deadlines rebased onto the new clock. It must never offer a committed
//! run anywhere else, and never trust an instant from the old process.

use std::sync::Arc;

use super::{PlaceRow, ServerSnapshot};
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
        let written = snapshot.written_ms;
        let mut server = Server::new(signer, session_template, now);
        for row in &snapshot.contexts {
            let mut config = server.session_template.clone();
            config.context_id = row.id.as_str().into();
            let session = Session::restore(
                config,
                row.grant.clone(),
                row.grant_version,
                row.revoked,
                server.signer.clone(),
                now,
            );
            let machine = Machine {
                record: row.record(),
                session,
            };
            server.add_machine(row.id.to_string(), machine);
        }
        for row in &snapshot.chains {
            server.chains.insert(row.user_id.clone(), row.chain.clone());
        }
        let mut offered = Vec::new();
        let mut unplaced = Vec::new();
        let mut lost = Vec::new();
        for row in &snapshot.executions {
            let request = row.request();
            let exec_id = row.exec_id.clone();
            let place = match &row.place {
                PlaceRow::Unplaced => {
                    unplaced.push(exec_id.clone());
                    Place::Unplaced
                }
                PlaceRow::Offered { context_id, run_id } => {
                    offered.push(exec_id.clone());
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
                    match server.machines.get_mut(context_id) {
                        Some(m) => {
                            m.session.restore_committed(
                                spec,
                                rebase(*committed_at_ms, written, now),
                                rebase(*lost_at_ms, written, now),
                            );
                            server.runs.insert(run_id.clone(), exec_id.clone());
                            server
                                .restored_commits
                                .insert(run_id.clone(), *committed_at_ms);
                        }
                        None => lost.push(exec_id.clone()),
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
                    server.queue_wakes.set(&exec_id, Some((until, "queue")));
                    Place::Queued {
                        context_id: context_id.clone(),
                        until,
                    }
                }
                PlaceRow::Cloud => {
                    lost.push(exec_id.clone());
                    Place::OnCloud
                }
            };
            let execution = Execution {
                request,
                route: row.route.clone(),
                place,
                hops: row.hops,
                arrival: 0,
            };
            server.executions.insert(exec_id, execution);
        }
        // A new process knows no arrival order: the queues are served by their deadlines.
        let mut order: Vec<(Option<Instant>, ExecutionId)> = server
            .executions
            .iter()
            .map(|(id, e)| match e.place {
                Place::Queued { until, .. } => (Some(until), id.clone()),
                _ => (None, id.clone()),
            })
            .collect();
        order.sort();
        for (_, id) in order {
            server.next_arrival += 1;
            if let Some(e) = server.executions.get_mut(&id) {
                e.arrival = server.next_arrival;
            }
        }
        // What the restart decides is journaled like an input's changes.
        let mark = server.outputs.len();
        server.start_grace();
        let ids: Vec<String> = server.machines.ids().cloned().collect();
        for id in ids {
            // Each session's timers reach the dispatcher the ordinary way.
            server.feed_or_report(&id, session::Input::Timeout);
        }
        for exec_id in lost {
            server.finish(&exec_id, ExecutionOutcome::Lost);
        }
        for exec_id in offered {
            server.fall_through(&exec_id, AttemptOutcome::Offline, "offline");
        }
        for exec_id in unplaced {
            server.place(&exec_id);
        }
        server.flush_journal(mark);
        server
    }
}
