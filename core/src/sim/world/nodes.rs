//! The nodes of a cluster over the shared store (docs/CLUSTER.md): what each node's host does
//! around its dispatcher — writes each drain's records as one fenced batch, takes a machine
//! when a daemon's connection reaches it, lets one go when the store says another node took
//! it, takes its inbox of hand-offs, heartbeats, and takes over what a node judged dead held —
//! and the faults of a cluster: kills, pauses, cuts from the database, lost and late notices.
//!
//! A node that fails a write stops whole and starts again from the store, as the server does.
//! It never decides what a dispatcher decides; with one node every fence is that node's, and
//! the world is the single server's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::disk::PendingCrash;
use super::store::{Refused, node_row};
use super::{World, server_signer};
use crate::ids::ExecutionId;
use crate::server::{self, Server, ServerRecord};
use crate::session::{ConnId, SessionConfig};
use crate::sim::checker::Role;
use crate::sim::now_in_process;

/// How often a node heartbeats, reads the fences it holds and takes its inbox.
pub(super) const BEAT_EVERY: Duration = Duration::from_secs(2);

/// A node that could not write its heartbeat for this long stops (the server's bound).
const CUT_OFF: Duration = Duration::from_secs(10);

/// One node: its dispatcher and its process's state.
pub(super) struct Node {
    /// Its dispatcher (stale while the node is down: never fed then).
    pub server: Server,
    /// When its current process started: its instants count from here.
    pub started: Duration,
    /// A crash waiting for its point in its output stream, and how long it then stays down.
    pub crash: Option<(PendingCrash, Duration)>,
    /// Its process is stopped (SIGSTOP) until then.
    pub paused_until: Option<Duration>,
    /// What reached the stopped process, in order, for when it resumes.
    pub paused_inputs: Vec<server::Input>,
    /// It cannot reach the database until then.
    pub cut_until: Option<Duration>,
    /// It is down (killed, or stopped after a failed write) until then.
    pub down_until: Option<Duration>,
    /// The fences it holds: a machine's id, or its own row, to the epoch.
    pub fences: BTreeMap<String, u64>,
    /// When its heartbeat last reached the store.
    pub last_beat: Duration,
}

/// What a `NOTIFY` tells a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Notice {
    /// A hand-off waits in its inbox.
    Inbox,
    /// A machine it held was taken.
    Owners,
}

impl Node {
    pub fn new(server: Server) -> Self {
        Self {
            server,
            started: Duration::ZERO,
            crash: None,
            paused_until: None,
            paused_inputs: Vec::new(),
            cut_until: None,
            down_until: None,
            fences: BTreeMap::new(),
            last_beat: Duration::ZERO,
        }
    }
}

impl World {
    /// Whether node `n`'s process runs and reads its input now.
    pub(super) fn node_running(&self, n: usize) -> bool {
        let node = &self.nodes[n];
        node.down_until.is_none() && node.paused_until.is_none()
    }

    /// Whether node `n` reaches the database now.
    fn node_reaches_store(&self, n: usize) -> bool {
        self.nodes[n].cut_until.is_none()
    }

    /// The node that owns machine `context_id`, by the store.
    pub(super) fn owner_node(&self, context_id: &str) -> Option<usize> {
        self.store.owner(context_id).map(|(node, _)| node)
    }

    /// Writes node `n`'s drained records as one batch; `false` when it failed and the node
    /// stopped.
    pub(super) fn commit_batch(&mut self, n: usize, batch: Vec<ServerRecord>) -> bool {
        if batch.is_empty() {
            return true;
        }
        if !self.node_reaches_store(n) {
            self.fail_stop(n, "its batch did not reach the database");
            return false;
        }
        if let Err(refused) = self.store.write(n, &self.nodes[n].fences, &batch) {
            match refused {
                Refused::Fenced(key) => {
                    self.cluster.fenced += 1;
                    self.fail_stop(n, &format!("its fence of {key} failed"));
                }
                Refused::EndedTwice(exec_id) => {
                    self.checker
                        .fail(format!("{exec_id} ended twice in the store"));
                }
            }
            return false;
        }
        for record in &batch {
            self.written(record);
        }
        true
    }

    /// Node `n` stops: its memory, its connections and its executor's runs are gone; it
    /// starts again from the store once it can reach it.
    pub(super) fn fail_stop(&mut self, n: usize, why: &str) {
        self.note(format!("node {n} stops: {why}"));
        let back = self.elapsed + Duration::from_millis(500 + self.rng.below(4_500));
        self.take_down(n, back);
    }

    /// Node `n`'s process is gone until `back`.
    fn take_down(&mut self, n: usize, back: Duration) {
        let node = &mut self.nodes[n];
        node.crash = None;
        node.paused_until = None;
        node.paused_inputs.clear();
        node.down_until = Some(back.max(node.cut_until.unwrap_or_default()));
        self.cloud.retain(|_, (_, on)| *on != n);
        for conn in self.conns_of(n) {
            self.break_conn(conn);
        }
    }

    /// The connections that reached node `n`.
    fn conns_of(&self, n: usize) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, (_, on))| *on == n)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Node `n`'s pending crash came due: it restarts at once, or stays down a while.
    pub(super) fn crash_node(&mut self, n: usize, drained: bool) {
        let down_for = self.nodes[n].crash.map_or(Duration::ZERO, |(_, d)| d);
        if down_for.is_zero() {
            self.restart_node(n, drained);
        } else {
            self.note(format!("node {n} killed for {down_for:?}"));
            self.take_down(n, self.elapsed + down_for);
        }
    }

    /// Node `n` starts from the store: it claims its own machines and those of dead nodes,
    /// and restores what it owns, knowing the rest as owned elsewhere. `drained`: it died
    /// idle, so (alone) its records must fold into exactly its state.
    pub(super) fn restart_node(&mut self, n: usize, drained: bool) {
        let now = self.elapsed;
        if let Some(cut) = self.nodes[n].cut_until {
            // It cannot start without its database: it tries again then.
            self.nodes[n].down_until = Some(cut);
            return;
        }
        self.store.beat(n, now);
        let fences = self.store.claim(n, now);
        let owned: BTreeSet<String> = fences.keys().cloned().collect();
        let (state, elsewhere) = match self.store.owned_snapshot(n, &owned) {
            Ok(read) => read,
            Err(e) => return self.checker.fail(format!("the store does not read: {e}")),
        };
        if drained && self.nodes.len() == 1 {
            let mut live = self.nodes[n].server.snapshot();
            live.written_ms = state.written_ms;
            if live != state {
                return self.checker.fail(format!(
                    "the server's records fold into another state than its own:\n{live:#?}\n{state:#?}"
                ));
            }
        }
        let process_now = now_in_process(now, now);
        let server = Server::restore_with_elsewhere(
            server_signer(),
            SessionConfig::new("template"),
            &state,
            &elsewhere,
            process_now,
        );
        let conns = self.conns_of(n);
        let node = &mut self.nodes[n];
        node.server = server;
        node.started = now;
        node.crash = None;
        node.down_until = None;
        node.paused_until = None;
        node.paused_inputs.clear();
        node.fences = fences;
        node.last_beat = now;
        self.cloud.retain(|_, (_, on)| *on != n);
        // A new process: nothing it was told before counts.
        self.checker.fed(Role::Server(n), false, now);
        self.restarts += 1;
        self.note(format!(
            "node {n} restored from {} contexts, {} executions, {} elsewhere",
            state.contexts.len(),
            state.executions.len(),
            elsewhere.len()
        ));
        for conn in conns {
            self.break_conn(conn);
        }
        for i in 0..self.machines.len() {
            if self.owner_node(&self.machines[i].context_id) == Some(n) {
                self.reconcile(i);
            }
        }
        self.resend_unanswered(n);
    }

    /// An operator whose change to machine `i` was never answered (its record never
    /// written) sends it again, to the machine's owner.
    pub(super) fn reconcile(&mut self, i: usize) {
        let Some(row) = self.store.context_row(&self.machines[i].context_id) else {
            return;
        };
        let (record, grant) = (
            self.workload.records[i].clone(),
            self.workload.grants[i].clone(),
        );
        if row.record() != record {
            self.note(format!("access of {} sent again", record.id));
            self.feed_owner(server::Input::UpdateAccess(record.clone()));
        }
        if row.grant != grant {
            self.note(format!("grant of {} sent again", record.id));
            self.feed_owner(server::Input::UpdateGrant {
                context_id: record.id.as_str().into(),
                grant,
            });
        }
        if self.revoked_machine == Some(i) && !row.revoked {
            self.note(format!("revoke of {} sent again", record.id));
            self.feed_owner(server::Input::Revoke {
                context_id: record.id.as_str().into(),
            });
        }
    }

    /// A client whose execute sent to node `n` was never answered (its record never
    /// written: the node died) sends it again, to any node.
    fn resend_unanswered(&mut self, n: usize) {
        let unanswered: Vec<ExecutionId> = self
            .sent_to
            .iter()
            .filter(|(id, on)| **on == n && !self.durable_execs.contains(*id))
            .map(|(id, _)| id.clone())
            .collect();
        for exec_id in unanswered {
            if let Some(request) = self.workload.requests.get(&exec_id).cloned() {
                let to = self.entry_node();
                self.note(format!("execute {exec_id} again, to node {to}"));
                self.sent_to.insert(exec_id, to);
                self.feed_node(to, server::Input::Execute(Box::new(request)));
            }
        }
    }

    /// The node a client's request reaches: any node that is up, drawn at random.
    pub(super) fn entry_node(&mut self) -> usize {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].down_until.is_none())
            .collect();
        match up.len() {
            0 => 0,
            1 => up[0],
            len => up[self.rng.below(len as u64) as usize],
        }
    }

    /// Node `n` takes machine `context_id` for a daemon whose connection reached it (if it
    /// does not hold it already) and adopts it from the store; the node that held it hears
    /// by a notice. `false` when the node cannot reach the database.
    pub(super) fn take_machine(&mut self, n: usize, context_id: &str) -> bool {
        let held = self.nodes[n].fences.get(context_id).copied();
        if let Some(epoch) = held
            && self.store.owner(context_id) == Some((n, epoch))
        {
            return true;
        }
        if !self.node_reaches_store(n) {
            return false;
        }
        let before = self.owner_node(context_id);
        let epoch = self.store.take(context_id, n);
        self.cluster.takes += 1;
        self.nodes[n].fences.insert(context_id.to_owned(), epoch);
        self.note(format!("node {n} takes {context_id} at epoch {epoch}"));
        self.adopt(n, context_id);
        if let Some(before) = before.filter(|b| *b != n) {
            self.notify(before, Notice::Owners);
        }
        true
    }

    /// Node `n`, which holds `context_id`'s fence now, adopts it from the store.
    fn adopt(&mut self, n: usize, context_id: &str) {
        match self.store.context_snapshot(context_id) {
            Ok(Some(snapshot)) => {
                self.feed_node(n, server::Input::Adopt(Box::new(snapshot)));
                if let Some(i) = self
                    .machines
                    .iter()
                    .position(|m| m.context_id == context_id)
                {
                    self.reconcile(i);
                }
            }
            Ok(None) => self
                .checker
                .fail(format!("{context_id} has no row to adopt")),
            Err(e) => self.checker.fail(format!("the store does not read: {e}")),
        }
    }

    /// Sends node `n` a notice: late, or lost, in the fault phase.
    pub(super) fn notify(&mut self, n: usize, notice: Notice) {
        let mut at = self.elapsed + Duration::from_millis(1 + self.rng.below(5));
        if self.in_fault_phase() {
            match self.rng.below(10) {
                0 => {
                    self.cluster.notices_lost += 1;
                    return self.note(format!("notice {notice:?} to node {n} lost"));
                }
                1 | 2 => at += Duration::from_millis(100 + self.rng.below(3_000)),
                _ => {}
            }
        }
        self.net_seq += 1;
        self.notices.insert((at, self.net_seq), (n, notice));
    }

    /// Delivers the notices due; a stopped process reads its notices when it resumes, a dead
    /// one never.
    pub(super) fn deliver_notices(&mut self) {
        let due: Vec<(Duration, u64)> = self
            .notices
            .range(..=(self.elapsed, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let Some((n, notice)) = self.notices.remove(&key) else {
                continue;
            };
            if self.nodes[n].down_until.is_some() {
                continue;
            }
            if let Some(resume) = self.nodes[n].paused_until {
                self.net_seq += 1;
                self.notices.insert((resume, self.net_seq), (n, notice));
                continue;
            }
            match notice {
                Notice::Inbox => self.read_inbox(n),
                Notice::Owners => self.read_fences(n),
            }
        }
    }

    /// Drains node `n` until it is idle: what it did so far is committed (a crash it met on
    /// the way included, and what its restart did).
    fn settle_node(&mut self, n: usize) {
        for _ in 0..100 {
            if !self.pump_node(n) {
                return;
            }
        }
    }

    /// Node `n` reads the fences it holds: each machine another node took, it lets go.
    fn read_fences(&mut self, n: usize) {
        self.settle_node(n);
        if !self.node_running(n) || !self.node_reaches_store(n) {
            return;
        }
        let lost: Vec<String> = self.nodes[n]
            .fences
            .iter()
            .filter(|(key, epoch)| {
                !key.starts_with("@node:") && self.store.owner(key) != Some((n, **epoch))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for context_id in lost {
            self.nodes[n].fences.remove(&context_id);
            let Some(row) = self.store.context_row(&context_id) else {
                continue;
            };
            self.note(format!("node {n} lets {context_id} go"));
            self.feed_node(n, server::Input::Elsewhere(Box::new(row)));
        }
    }

    /// Node `n` takes the hand-offs to its machines, once what it did so far is committed
    /// (its host drains its dispatcher before it reads the store for it).
    fn read_inbox(&mut self, n: usize) {
        self.settle_node(n);
        if !self.node_running(n) || !self.node_reaches_store(n) {
            return;
        }
        match self.store.take_inbox(n) {
            Ok(rows) if rows.is_empty() => {}
            Ok(rows) => {
                self.note(format!("node {n} takes {} hand-offs", rows.len()));
                self.feed_node(n, server::Input::HandedOver(rows));
            }
            Err(e) => self.checker.fail(format!("the store does not read: {e}")),
        }
    }

    /// Every running node's heartbeat: it writes its beat (or stops, cut off too long),
    /// reads its fences and its inbox, and takes over what the nodes judged dead hold.
    pub(super) fn beat_all(&mut self) {
        let now = self.elapsed;
        for n in 0..self.nodes.len() {
            if !self.node_running(n) {
                continue;
            }
            if !self.node_reaches_store(n) {
                if now.saturating_sub(self.nodes[n].last_beat) >= CUT_OFF {
                    self.fail_stop(n, "it could not write its heartbeat");
                }
                continue;
            }
            self.store.beat(n, now);
            self.nodes[n].last_beat = now;
            self.read_fences(n);
            if !self.node_running(n) {
                continue;
            }
            self.read_inbox(n);
            self.take_from_the_dead(n);
        }
    }

    /// Node `n` takes over, one compare-and-set each, what nodes judged dead hold: their
    /// machines (adopted from the store) and the executions no machine held.
    fn take_from_the_dead(&mut self, n: usize) {
        self.settle_node(n);
        if !self.node_running(n) {
            return;
        }
        let now = self.elapsed;
        for (key, dead, epoch) in self.store.held_by_dead(now) {
            if dead == n {
                continue;
            }
            if key == node_row(dead) {
                match self.store.take_over_node(dead, epoch, n) {
                    Ok(Some(rows)) => {
                        self.cluster.taken_from_dead += rows.len();
                        self.note(format!("node {n} takes over node {dead}'s executions"));
                        if !rows.is_empty() {
                            self.feed_node(n, server::Input::TakeOver(rows));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => self.checker.fail(format!("the store does not read: {e}")),
                }
            } else if let Some(taken) = self.store.take_from(&key, dead, epoch, n) {
                self.nodes[n].fences.insert(key.clone(), taken);
                self.cluster.taken_from_dead += 1;
                self.note(format!("node {n} takes {key} from dead node {dead}"));
                self.adopt(n, &key);
            }
        }
    }

    /// A fault of the cluster: a node killed for a while, or cut off from the database.
    pub(super) fn inject_cluster_fault(&mut self) {
        let n = self.rng.below(self.nodes.len() as u64) as usize;
        if !self.node_running(n) || self.nodes[n].crash.is_some() {
            return;
        }
        let now = self.elapsed;
        if self.rng.chance(1, 2) {
            let secs = 1 + self.rng.below(40);
            self.note(format!("fault: node {n} killed, down for {secs}s"));
            let crash = PendingCrash {
                outputs: self.rng.below(6) as u32,
                latest: now + Duration::from_secs(2),
            };
            self.nodes[n].crash = Some((crash, Duration::from_secs(secs)));
        } else if self.nodes[n].cut_until.is_none() {
            let secs = 2 + self.rng.below(40);
            self.note(format!(
                "fault: node {n} cut off from the database for {secs}s"
            ));
            self.nodes[n].cut_until = Some(now + Duration::from_secs(secs));
        }
    }

    /// Ends the cuts and the downtimes that are over.
    pub(super) fn wake_nodes(&mut self) {
        let now = self.elapsed;
        for n in 0..self.nodes.len() {
            if self.nodes[n].cut_until.is_some_and(|t| t <= now) {
                self.nodes[n].cut_until = None;
                self.note(format!("node {n} reaches the database again"));
            }
            if self.nodes[n].down_until.is_some_and(|t| t <= now) {
                self.restart_node(n, false);
            }
        }
    }
}
