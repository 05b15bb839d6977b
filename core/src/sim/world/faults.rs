//! Fault injection: disconnects, crashes (carried out in `restart.rs`), suspends, partitions,
//! access and grant changes, revokes, operators' pauses.

use std::time::Duration;

use super::World;
use crate::daemon;
use crate::server;
use crate::session::ConnId;

impl World {
    pub(super) fn inject_fault(&mut self) {
        self.faults += 1;
        let now = self.elapsed;
        let n = self.machines.len() as u64;
        let i = self.rng.below(n) as usize;
        let roll = self.rng.below(100);
        match roll {
            0..=24 => {
                if let Some(conn) = self.machines[i].conn {
                    self.note(format!("fault: disconnect machine {i}"));
                    self.break_conn(conn);
                }
            }
            25..=39 if self.machines[i].daemon.is_some() && self.machines[i].crash.is_none() => {
                self.note(format!("fault: crash machine {i}"));
                self.schedule_machine_crash(i);
            }
            40..=49 => {
                let n = self.some_node();
                if self.node_running(n) && self.nodes[n].crash.is_none() {
                    self.note(format!("fault: node {n} restart"));
                    self.schedule_node_crash(n);
                }
            }
            50..=59 => {
                let secs = 5 + self.rng.below(115);
                self.note(format!("fault: suspend machine {i} for {secs}s"));
                let m = &mut self.machines[i];
                let until = now + Duration::from_secs(secs);
                m.suspended_until = Some(until);
                // Processes sleep too: their remaining work shifts by the suspension.
                for (at, _) in m.running.values_mut() {
                    *at += Duration::from_secs(secs);
                }
                for check in m.checks.values_mut() {
                    check.at += Duration::from_secs(secs);
                }
            }
            60..=69 => {
                let secs = 5 + self.rng.below(85);
                self.note(format!("fault: partition machine {i} for {secs}s"));
                self.machines[i].partitioned_until = Some(now + Duration::from_secs(secs));
                if let Some(conn) = self.machines[i].conn {
                    self.break_conn(conn);
                }
            }
            70..=79 => {
                let record = self.workload.toggle_access(i, &mut self.rng);
                self.note(format!(
                    "fault: access of {} now {:?}",
                    record.id, record.opted_in
                ));
                self.feed_owner(server::Input::UpdateAccess(record));
            }
            80..=84 => {
                let grant = self.workload.change_egress(i, &mut self.rng);
                let context_id = self.machines[i].context_id.clone();
                self.note(format!("fault: grant of {context_id} changed"));
                self.feed_owner(server::Input::UpdateGrant {
                    context_id: context_id.into(),
                    grant,
                });
            }
            85..=86 if !self.workload.revoked_any && self.owner_running(i) => {
                self.workload.revoked_any = true;
                let context_id = self.machines[i].context_id.clone();
                self.note(format!("fault: revoke {context_id}"));
                self.checker.revoked(i, now);
                self.revoked_machine = Some(i);
                self.feed_owner(server::Input::Revoke {
                    context_id: context_id.into(),
                });
                self.end_waits_of(i);
            }
            87..=90 => {
                let n = self.some_node();
                if self.node_running(n) && self.nodes[n].crash.is_none() {
                    let secs = 2 + self.rng.below(118);
                    self.note(format!("fault: node {n} process stopped for {secs}s"));
                    self.pause_node(n, secs);
                }
            }
            91..=94 => self.resend_finished_run(i),
            95..=96 => self.roll_keys_back(i),
            97..=98 if self.machines[i].paused_until.is_none() => {
                let secs = 5 + self.rng.below(55);
                self.note(format!("fault: operator pauses machine {i} for {secs}s"));
                self.machines[i].paused_until = Some(now + Duration::from_secs(secs));
                self.feed_daemon(i, daemon::Input::Pause);
            }
            _ => {}
        }
    }

    /// A node drawn at random (no draw when there is one).
    pub(super) fn some_node(&mut self) -> usize {
        match self.nodes.len() {
            1 => 0,
            len => self.rng.below(len as u64) as usize,
        }
    }

    /// Whether the node that owns machine `i` runs now.
    fn owner_running(&self, i: usize) -> bool {
        self.owner_node(&self.machines[i].context_id)
            .is_some_and(|n| self.node_running(n))
    }

    /// Both ends of `conn` learn it is gone.
    pub(super) fn break_conn(&mut self, conn: ConnId) {
        let Some((i, n)) = self.conns.remove(&conn) else {
            return;
        };
        self.feed_node(n, server::Input::Disconnected { conn });
        let m = &mut self.machines[i];
        if m.conn == Some(conn) {
            m.conn = None;
            self.feed_daemon(i, daemon::Input::Disconnected { code: None });
        }
    }
}
