//! Crashes and restarts that go through the records: each role's host writes what the role
//! hands it to its disk (the nodes', to their shared store: `nodes.rs`), and a restarted role
//! is restored from those bytes alone.

use std::time::Duration;

use super::World;
use super::disk::PendingCrash;
use crate::daemon::{self, Daemon};
use crate::server::{ExecutionOutcome, PlaceRow, ServerChange, ServerRecord};
use crate::sim::checker::Role;
use crate::sim::now_in_process;
use crate::sim::pair::test_keys;

impl World {
    /// Schedules a crash of node `n` at a random point of its next outputs; it restarts at
    /// once.
    pub(super) fn schedule_node_crash(&mut self, n: usize) {
        let crash = PendingCrash {
            outputs: self.rng.below(6) as u32,
            latest: self.elapsed + Duration::from_secs(2),
        };
        self.nodes[n].crash = Some((crash, Duration::ZERO));
    }

    /// Schedules a crash of machine `i`'s daemon at a random point of its next outputs.
    pub(super) fn schedule_machine_crash(&mut self, i: usize) {
        self.machines[i].crash = Some(PendingCrash {
            outputs: self.rng.below(4) as u32,
            latest: self.elapsed + Duration::from_secs(2),
        });
    }

    /// A node's record was committed to the store: what a client or the checker can learn.
    pub(super) fn written(&mut self, record: &ServerRecord) {
        let now = self.elapsed;
        match &record.change {
            ServerChange::Execution(row) => {
                self.durable_execs.insert(row.exec_id.clone());
                if let PlaceRow::Committed {
                    context_id, run_id, ..
                } = &row.place
                    && !self.commits.contains_key(&row.exec_id)
                    && let Some(i) = self
                        .machines
                        .iter()
                        .position(|m| &m.context_id == context_id)
                {
                    self.checker.committed(&row.exec_id, run_id, i, now);
                    self.check_access_at_commit(&row.exec_id, i);
                    self.commits
                        .insert(row.exec_id.clone(), (run_id.clone(), i));
                }
            }
            ServerChange::ExecutionEnded(ended) => {
                self.durable_execs.insert(ended.exec_id.clone());
                self.checker.finished(&ended.exec_id);
                if let Some((run_id, i)) = self.commits.remove(&ended.exec_id) {
                    let lost = ended.outcome == ExecutionOutcome::Lost;
                    self.checker.run_ended(&run_id, lost, i, now);
                    let finished = self.finished_runs.entry(i).or_default();
                    finished.push(run_id);
                    if finished.len() > 16 {
                        finished.remove(0);
                    }
                }
            }
            ServerChange::Context(_) | ServerChange::Chain(_) => {}
        }
    }

    /// Machine `i`'s host writes a record before it carries out the next output.
    pub(super) fn write_daemon_record(&mut self, i: usize, record: &daemon::DaemonRecord) {
        if let Err(e) = self.machines[i].disk.write_daemon(record) {
            self.checker.fail(format!("machine {i} disk: {e}"));
        }
    }

    /// Machine `i`'s daemon dies with its executor's processes; it comes back later from its
    /// disk. `drained`: it died idle, so its disk must hold exactly its state.
    pub(super) fn crash_machine(&mut self, i: usize, drained: bool) {
        self.machines[i].crash = None;
        let now = self.elapsed;
        self.note(format!("machine {i} crashed"));
        if let Some(conn) = self.machines[i].conn {
            self.break_conn(conn);
        }
        let m = &mut self.machines[i];
        if let Some(d) = m.daemon.take()
            && drained
        {
            match m.disk.daemon_state() {
                Ok(mut state) => {
                    state.written_ms = 0;
                    let mut live = d.snapshot();
                    live.written_ms = 0;
                    if live != state {
                        let msg = format!(
                            "machine {i}'s records fold into another state than its own:\n{live:#?}\n{state:#?}"
                        );
                        self.checker.fail(msg);
                    }
                }
                Err(e) => self
                    .checker
                    .fail(format!("machine {i} disk does not read: {e}")),
            }
        }
        let m = &mut self.machines[i];
        m.running.clear();
        m.checks.clear();
        m.conn = None;
        self.checker.checks_died(i);
        m.down_until = Some(now + Duration::from_millis(500 + self.rng.below(30_000)));
    }

    /// Machine `i`'s daemon starts again from its disk.
    pub(super) fn restore_machine(&mut self, i: usize) {
        // A new process: its monotonic clock starts again.
        self.machines[i].started = self.elapsed;
        let now = now_in_process(self.elapsed, self.elapsed);
        let state = match self.machines[i].disk.daemon_state() {
            Ok(state) => state,
            Err(e) => {
                return self
                    .checker
                    .fail(format!("machine {i} disk does not read: {e}"));
            }
        };
        let Some(rows) = self.wait_rows(i) else {
            return;
        };
        let m = &mut self.machines[i];
        let mut daemon = Daemon::restore(m.config.clone(), test_keys(), &state, now);
        daemon.restore_waits(rows);
        m.daemon = Some(daemon);
        // A new process: nothing it was told before counts.
        self.checker.fed(Role::Daemon(i), false, self.elapsed);
        self.restarts += 1;
        let waits = self.machines[i].disk.waits.len();
        self.note(format!(
            "machine {i} restored with {} started, {} results in its outbox, {waits} waits",
            state.started.len(),
            state.outbox.len()
        ));
    }
}
