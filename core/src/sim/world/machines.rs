//! The simulated machines: daemons, their fake executors, and what their hosts do for them.

use crate::ids::RunId;
use std::time::Duration;

use super::World;
use crate::daemon;
use crate::server;
use crate::sim::executor::report;
use crate::wire::RunStatus;

impl World {
    pub(super) fn wake_machine(&mut self, i: usize) {
        let now = self.elapsed;
        let m = &mut self.machines[i];
        if m.suspended_until.is_some_and(|t| t <= now) {
            m.suspended_until = None;
        }
        if m.partitioned_until.is_some_and(|t| t <= now) {
            m.partitioned_until = None;
        }
        if m.down_until.is_some_and(|t| t <= now) {
            m.down_until = None;
            self.restore_machine(i);
        }
        if self.machines[i].paused_until.is_some_and(|t| t <= now) {
            self.machines[i].paused_until = None;
            self.note(format!("machine {i} resumed by its operator"));
            self.feed_daemon(i, daemon::Input::Resume);
        }
    }

    pub(super) fn finish_due_runs(&mut self, i: usize) {
        let now = self.elapsed;
        if self.machines[i].suspended_until.is_some() {
            return;
        }
        let due: Vec<(RunId, bool)> = self.machines[i]
            .running
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(id, (_, cancelled))| (id.clone(), *cancelled))
            .collect();
        for (run_id, cancelled) in due {
            self.machines[i].running.remove(&run_id);
            let result = if cancelled {
                report(RunStatus::Cancelled, None)
            } else {
                report(RunStatus::Exited, Some(0))
            };
            if let Some(d) = self.machines[i].daemon.as_ref() {
                let was_executing = d.executing().contains(&run_id);
                self.feed_daemon(
                    i,
                    daemon::Input::RunFinished {
                        run_id: run_id.clone(),
                        result,
                    },
                );
                if was_executing {
                    self.checker.result(&run_id, i, now);
                    self.note(format!(
                        "machine {i} finished {run_id} cancelled={cancelled}"
                    ));
                }
            }
        }
    }

    pub(super) fn pump_daemon(&mut self, i: usize) -> bool {
        let mut any = false;
        loop {
            let suspended = self.machines[i].suspended_until.is_some();
            if suspended && self.machines[i].crash.is_some() {
                // A sleeping machine loses power: what it had not carried out is gone.
                self.crash_machine(i, false);
                return true;
            }
            if suspended {
                return any;
            }
            let Some(d) = self.machines[i].daemon.as_mut() else {
                return any;
            };
            let out = d.poll_output();
            let paused = d.is_paused();
            let idle = matches!(out, daemon::Output::Wait { .. });
            if let Some(crash) = self.machines[i].crash.as_mut()
                && crash.due(idle, self.elapsed)
            {
                self.crash_machine(i, idle);
                return true;
            }
            match out {
                daemon::Output::Wait { .. } => return any,
                daemon::Output::Persist(record) => self.write_daemon_record(i, &record),
                daemon::Output::SaveWait { row, written_ms } => self.save_wait(i, &row, written_ms),
                daemon::Output::ForgetWait { wait_id } => self.forget_wait(i, &wait_id),
                daemon::Output::Transmit(bytes) => {
                    if paused && bytes.windows(19).any(|w| w == b"\"type\":\"run.accept\"") {
                        self.checker
                            .fail(format!("machine {i} accepted a run while paused"));
                    }
                    if let Some(conn) = self.machines[i].conn {
                        self.send(conn, true, bytes);
                    }
                }
                daemon::Output::Close { .. } => self.daemon_closed(i),
                daemon::Output::Event(_) => {}
                daemon::Output::Command(c) => self.carry_out(i, c),
            }
            any = true;
        }
    }

    fn daemon_closed(&mut self, i: usize) {
        if let Some(conn) = self.machines[i].conn.take()
            && let Some((_, n)) = self.conns.remove(&conn)
        {
            self.feed_node(n, server::Input::Disconnected { conn });
        }
    }

    fn carry_out(&mut self, i: usize, command: daemon::Command) {
        let now = self.elapsed;
        match command {
            daemon::Command::Connect => self.connect(i),
            daemon::Command::Execute(execute) => {
                let long = self.rng.chance(1, 6);
                let deadline = execute.deadline.since_origin() + self.machines[i].started;
                let budget = deadline.saturating_sub(now);
                let duration = if long {
                    budget + Duration::from_secs(10)
                } else {
                    Duration::from_millis(50 + self.rng.below(budget.as_millis().max(1) as u64 / 2))
                };
                let m = &mut self.machines[i];
                m.running
                    .insert(execute.run_id.clone(), (now + duration, false));
                let (executing, slots) = m
                    .daemon
                    .as_ref()
                    .map_or((0, 0), |d| (d.executing().len(), d.slots_total()));
                self.checker.executed(&execute.run_id, executing, slots);
                if execute.run_id.starts_with(super::pause::ROGUE_PREFIX) {
                    let msg = format!(
                        "machine {i} executed {}, offered under a key only an older key set listed",
                        execute.run_id
                    );
                    self.checker.fail(msg);
                }
                self.note(format!("machine {i} executes {}", execute.run_id));
            }
            daemon::Command::Cancel { run_id, reason } => {
                if let Some(entry) = self.machines[i].running.get_mut(&run_id) {
                    *entry = (now + Duration::from_millis(10), true);
                    self.note(format!("machine {i} cancels {run_id}: {reason}"));
                }
            }
            daemon::Command::FetchCapability { run_id, .. } => {
                // The workload sends capabilities inline; an empty bundle fails its digest.
                let input = daemon::Input::CapabilityFetched {
                    run_id,
                    bundle: Vec::new(),
                };
                self.feed_daemon(i, input);
            }
            daemon::Command::CheckWait { wait_id, check, .. } => {
                self.start_check(i, wait_id, check)
            }
            daemon::Command::StopCheck { wait_id, check } => self.stop_check(i, &wait_id, check),
            daemon::Command::ApplyGrant { .. }
            | daemon::Command::PtyInput { .. }
            | daemon::Command::PtyResize { .. }
            | daemon::Command::PtyClose { .. }
            | daemon::Command::PtyCredit { .. }
            // The simulated servers send no control requests.
            | daemon::Command::Control { .. } => {}
            daemon::Command::Stop { forever } => {
                self.note(format!("machine {i} stopped forever={forever}"));
            }
        }
    }

    fn connect(&mut self, i: usize) {
        let context_id = self.machines[i].context_id.clone();
        let mut random = [0u8; 48];
        for chunk in random.chunks_mut(8) {
            chunk.copy_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        // The front sends the connection to a node drawn at random. A stopped or dead node
        // answers no ticket request: as unreachable as a partition; so is one that cannot
        // take the machine (its database is out of reach).
        let n = self.some_node();
        let reachable = self.machines[i].partitioned_until.is_none()
            && self.node_running(n)
            && self.take_machine(n, &context_id);
        let issued = if reachable && self.node_running(n) {
            self.touched_node(n);
            self.nodes[n].server.issue_ticket(&context_id, random).ok()
        } else {
            None
        };
        let Some(issued) = issued else {
            let revoked = self
                .store
                .context_row(&context_id)
                .is_some_and(|row| row.revoked);
            let input = daemon::Input::ConnectFailed {
                stop_forever: revoked,
                reason: "unreachable".into(),
            };
            self.feed_daemon(i, input);
            return;
        };
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(conn, (i, n));
        self.machines[i].conn = Some(conn);
        self.feed_node(
            n,
            server::Input::Connect {
                context_id: context_id.into(),
                conn,
                ticket: issued.ticket.expose_secret(),
            },
        );
        if self.machines[i].conn == Some(conn) {
            let input = daemon::Input::Connected {
                session_id: issued.session_id,
            };
            self.feed_daemon(i, input);
        }
    }
}
