//! The seeded simulation: one server or a cluster of nodes over a shared store, several
//! daemons, a faulty network, fake executors.

use crate::ids::{ExecutionId, RunId, WaitId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

mod disk;
mod faults;
mod feed;
mod machines;
mod network;
mod nodes;
mod pause;
mod pump;
mod restart;
mod store;
#[cfg(test)]
mod tests;
mod waits;

use disk::{Disk, PendingCrash};
use nodes::{BEAT_EVERY, Node, Notice};
use store::SharedStore;
use waits::{HostWaits, RunningCheck};

use super::checker::{Checker, Role, WaitCounts};
use super::now_at;
use super::pair::test_keys;
use super::workload::Workload;
use crate::daemon::{self, Daemon, DaemonConfig};
use crate::keyset::test_root;
use crate::rng::SplitMix64;
use crate::routing::{ContextView, check_access};
use crate::server::{self, ContextRecord, ExecutionOutcome, Server};
use crate::session::{ConnId, RunResult, SessionConfig};
use crate::wire::{Grant, RunStatus, Timing};

/// The most rounds of the world loop at one simulated time before it counts as stuck.
const MAX_ROUNDS_AT_ONE_TIME: u32 = 100;

/// How to run one simulation.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed: same seed, same transcript.
    pub seed: u64,
    /// Daemons (machines).
    pub machines: usize,
    /// Server nodes over one shared store: 1 is the single server; more is a cluster whose
    /// nodes are killed, paused and cut off from the store, and whose notices are lost.
    pub nodes: usize,
    /// Executions submitted during the fault phase.
    pub executions: usize,
    /// How long faults are injected.
    pub fault_phase: Duration,
    /// How long the fault-free liveness phase may take to finish every execution.
    pub liveness_limit: Duration,
    /// Whether to inject faults at all.
    pub faults: bool,
    /// Whether to keep the transcript's lines (its hash is always kept).
    pub keep_transcript: bool,
}

impl SimConfig {
    /// The defaults for `seed`: 3 machines, 24 executions, 8 minutes of faults.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            machines: 3,
            nodes: 1,
            executions: 24,
            fault_phase: Duration::from_secs(8 * 60),
            liveness_limit: Duration::from_secs(3 * 3600),
            faults: true,
            keep_transcript: false,
        }
    }
}

/// What a simulation found.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed the world ran with; the same seed and config replay the same transcript.
    pub seed: u64,
    /// The first violated invariant, if any.
    pub violation: Option<String>,
    /// A hash of the transcript.
    pub transcript_hash: u64,
    /// The transcript's lines, when kept.
    pub transcript: Vec<String>,
    /// Runs executors started.
    pub executed: usize,
    /// Executions finished.
    pub finished: usize,
    /// Faults injected.
    pub faults: usize,
    /// Simulated time at the end.
    pub elapsed: Duration,
    /// Host steps: inputs handed to the server and the daemons.
    pub steps: u64,
    /// Server (node) and daemon restarts, each restored from the records on its disk.
    pub restarts: usize,
    /// Records the roles handed their hosts.
    pub records: usize,
    /// Condition waits registered, checked and ended.
    pub waits: WaitCounts,
    /// What the nodes of a cluster did (all zero for one server).
    pub cluster: ClusterCounts,
}

/// What the nodes of a simulated cluster did, for the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterCounts {
    /// Executions handed from one node to the owner of their machine.
    pub handoffs: usize,
    /// Machines taken by the node a daemon's connection reached.
    pub takes: usize,
    /// Machines and executions taken over from nodes judged dead.
    pub taken_from_dead: usize,
    /// Batches the store refused because the writer's fence was gone (the node stopped).
    pub fenced: usize,
    /// Notices lost on their way.
    pub notices_lost: usize,
}

impl ClusterCounts {
    /// Adds another run's counts to these (totals over seeds).
    pub fn add(&mut self, other: &ClusterCounts) {
        self.handoffs += other.handoffs;
        self.takes += other.takes;
        self.taken_from_dead += other.taken_from_dead;
        self.fenced += other.fenced;
        self.notices_lost += other.notices_lost;
    }
}

/// Runs one seeded simulation.
pub fn simulate(config: &SimConfig) -> SimReport {
    let mut world = World::new(config);
    world.run();
    world.report()
}

struct Msg {
    conn: ConnId,
    to_server: bool,
    /// A WebSocket ping from the server's host (no frame): the daemon hears the server is
    /// alive.
    ping: bool,
    bytes: Vec<u8>,
}

/// How often the server's host pings every connection (its sessions' heartbeat).
const PING_EVERY: Duration = Duration::from_secs(15);

struct Machine {
    context_id: String,
    config: DaemonConfig,
    daemon: Option<Daemon>,
    /// Runs on the fake executor: finish time and whether it was cancelled.
    running: BTreeMap<RunId, (Duration, bool)>,
    /// Checks on the fake condition engine, by wait.
    checks: BTreeMap<WaitId, RunningCheck>,
    conn: Option<ConnId>,
    down_until: Option<Duration>,
    suspended_until: Option<Duration>,
    partitioned_until: Option<Duration>,
    /// An operator paused the daemon (it takes no new runs) until then, when it resumes.
    paused_until: Option<Duration>,
    ready: bool,
    /// The daemon's home: its records, as bytes.
    disk: Disk,
    /// When the daemon's current process started: its instants count from here.
    started: Duration,
    /// A crash waiting for its point in the daemon's output stream.
    crash: Option<PendingCrash>,
}

struct World {
    config: SimConfig,
    rng: SplitMix64,
    elapsed: Duration,
    /// The server's nodes (one, unless a cluster is simulated).
    nodes: Vec<Node>,
    /// The database the nodes share: their records and fences, as bytes.
    store: SharedStore,
    /// Notices (`NOTIFY`) on their way to a node, by arrival.
    notices: BTreeMap<(Duration, u64), (usize, Notice)>,
    /// When the nodes next heartbeat.
    next_beat: Duration,
    /// Which node each submitted execute was sent to last.
    sent_to: BTreeMap<ExecutionId, usize>,
    /// Executions the server's disk knows (an execute answered to its client).
    durable_execs: BTreeSet<ExecutionId>,
    /// Runs whose commit the server's disk holds, by execution: the run and its machine.
    commits: BTreeMap<ExecutionId, (RunId, usize)>,
    /// The machine revoked, if one was.
    revoked_machine: Option<usize>,
    machines: Vec<Machine>,
    /// Open connections: their machine and the node they reached.
    conns: BTreeMap<ConnId, (usize, usize)>,
    next_conn: ConnId,
    net: BTreeMap<(Duration, u64), Msg>,
    net_seq: u64,
    /// Runs on the nodes' own executors: when each ends, and on which node.
    cloud: BTreeMap<ExecutionId, (Duration, usize)>,
    workload: Workload,
    /// The server's table of condition waits, and those still to be registered.
    waits: HostWaits,
    next_fault: Duration,
    /// When the nodes' hosts next ping their connections.
    next_ping: Duration,
    /// Per machine, the last runs it finished (the server recorded their end): what a faulty
    /// server could send again.
    finished_runs: BTreeMap<usize, Vec<RunId>>,
    /// Rogue frames sent so far (their run ids).
    rogue: u64,
    faults: usize,
    cluster: ClusterCounts,
    checker: Checker,
    restarts: usize,
    hash: u64,
    lines: Vec<String>,
}

impl World {
    fn new(config: &SimConfig) -> Self {
        let mut rng = SplitMix64::new(config.seed);
        let now = now_at(Duration::ZERO);
        let mut server = Server::new(server_signer(), SessionConfig::new("template"), now);
        let workload = Workload::new(config, &mut rng);
        let mut checker = Checker::default();
        let mut setup = |server: &mut Server, input| {
            checker.fed(Role::Server(0), false, Duration::ZERO);
            if let Err(e) = server.handle_input(now, input) {
                checker.fail(format!("the server refused its setup: {e}"));
            }
        };
        let mut machines = Vec::new();
        for (i, (record, grant, daemon_config)) in workload.machines.iter().enumerate() {
            setup(
                &mut server,
                server::Input::Register {
                    record: record.clone(),
                    grant: grant.clone(),
                },
            );
            let mut daemon_config = daemon_config.clone();
            daemon_config.seed = config.seed.wrapping_add(i as u64);
            machines.push(Machine {
                context_id: record.id.to_string(),
                daemon: Some(Daemon::new(daemon_config.clone(), test_keys(), now)),
                config: daemon_config,
                running: BTreeMap::new(),
                checks: BTreeMap::new(),
                conn: None,
                down_until: None,
                suspended_until: None,
                paused_until: None,
                partitioned_until: None,
                ready: false,
                disk: Disk::default(),
                started: Duration::ZERO,
                crash: None,
            });
        }
        for (user, chain) in &workload.chains {
            setup(
                &mut server,
                server::Input::SetChain {
                    user_id: user.clone(),
                    chain: chain.clone(),
                },
            );
        }
        let waits = HostWaits::draw(config.machines, config.fault_phase, &mut rng);
        let first_fault = Duration::from_millis(2000 + rng.below(5000));
        // Node 0 registers every machine; the others start from the store once its records
        // are written (`World::run`).
        let mut first = Node::new(server);
        let mut store = SharedStore::default();
        for (record, _, _) in &workload.machines {
            first
                .fences
                .insert(record.id.to_string(), store.take(record.id.as_str(), 0));
        }
        first
            .fences
            .insert(store::node_row(0), store.take(&store::node_row(0), 0));
        store.beat(0, Duration::ZERO);
        let mut nodes = vec![first];
        for _ in 1..config.nodes.max(1) {
            let mut node = Node::new(Server::new(
                server_signer(),
                SessionConfig::new("template"),
                now,
            ));
            // Not started yet: `run` starts it from the store.
            node.down_until = Some(Duration::ZERO);
            nodes.push(node);
        }
        Self {
            config: config.clone(),
            rng,
            elapsed: Duration::ZERO,
            nodes,
            store,
            notices: BTreeMap::new(),
            next_beat: BEAT_EVERY,
            sent_to: BTreeMap::new(),
            durable_execs: BTreeSet::new(),
            commits: BTreeMap::new(),
            revoked_machine: None,
            machines,
            conns: BTreeMap::new(),
            next_conn: 1,
            net: BTreeMap::new(),
            net_seq: 0,
            cloud: BTreeMap::new(),
            workload,
            waits,
            next_fault: first_fault,
            next_ping: PING_EVERY,
            finished_runs: BTreeMap::new(),
            rogue: 0,
            faults: 0,
            cluster: ClusterCounts::default(),
            checker,
            restarts: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            lines: Vec::new(),
        }
    }

    fn note(&mut self, line: String) {
        let stamped = format!("{:>9}ms {line}", self.elapsed.as_millis());
        for b in stamped.bytes() {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        if self.config.keep_transcript {
            self.lines.push(stamped);
        }
    }

    fn in_fault_phase(&self) -> bool {
        self.config.faults && self.elapsed < self.config.fault_phase
    }

    fn run(&mut self) {
        let end = self.config.fault_phase + self.config.liveness_limit;
        let mut stalls = 0u32;
        // The registrations are written; the other nodes start from the store.
        self.pump_all();
        self.wake_nodes();
        loop {
            self.pump_all();
            self.checker.check_step_rate(self.elapsed);
            if self.checker.violation.is_some() {
                return;
            }
            let done = self.elapsed >= self.config.fault_phase
                && (0..self.nodes.len()).all(|n| self.node_running(n))
                && self.workload.pending.is_empty()
                && self
                    .nodes
                    .iter()
                    .all(|node| node.server.executions_in_flight() == 0)
                && !self.store.handoffs_waiting()
                && self.waits_done();
            if done || self.elapsed >= end {
                break;
            }
            let next = self.next_event().max(self.elapsed);
            if next == self.elapsed {
                // Something is due now that the last round did not handle. Once is normal
                // (an input set a timer due at once); again and again, time never moves.
                stalls += 1;
                if stalls > MAX_ROUNDS_AT_ONE_TIME {
                    let msg = format!(
                        "time stuck at {:?}: {stalls} rounds without anything moving it",
                        self.elapsed
                    );
                    self.checker.fail(msg);
                    return;
                }
            } else {
                stalls = 0;
                self.elapsed = next;
            }
            self.fire_due();
        }
        if self.checker.violation.is_some() {
            return;
        }
        self.checker.final_check(&self.workload.submitted);
        self.checker.final_check_waits();
    }

    fn report(&self) -> SimReport {
        let (executed, finished) = self.checker.counts();
        SimReport {
            seed: self.config.seed,
            violation: self.checker.violation.clone(),
            transcript_hash: self.hash,
            transcript: self.lines.clone(),
            executed,
            finished,
            faults: self.faults,
            elapsed: self.elapsed,
            steps: self.checker.steps(),
            restarts: self.restarts,
            records: self.store.written
                + self.machines.iter().map(|m| m.disk.written).sum::<usize>(),
            waits: self.checker.wait_counts(),
            cluster: self.cluster,
        }
    }

    /// The earliest time something is due; every role's wake-up is checked for a spin.
    fn next_event(&mut self) -> Duration {
        let now = self.elapsed;
        let mut next = self.elapsed + Duration::from_secs(3600);
        let mut consider = |at: Duration| {
            if at < next {
                next = at;
            }
        };
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            if let Some(at) = node.down_until {
                // A dead process wakes for nothing but its start.
                consider(at);
                continue;
            }
            if let Some(at) = node.cut_until {
                consider(at);
            }
            if let Some(resume) = node.paused_until {
                // A stopped process wakes for nothing but its resumption.
                consider(resume);
                continue;
            }
            let (until, reason) = node.server.poll_timeout();
            let node_until = until.since_origin() + node.started;
            self.checker
                .wants_wake(Role::Server(n), node_until, reason, now);
            consider(node_until);
            // The node's wake-up table must never be later than a session's own timer.
            let missed = self.machines.iter().find_map(|m| {
                let session = node.server.session(&m.context_id)?;
                let (own, why) = session.poll_timeout()?;
                (own < until).then(|| format!("{} ({why}) at {own:?}", m.context_id))
            });
            if let Some(missed) = missed {
                let msg = format!("node {n} would wake at {until:?} but the session of {missed}");
                self.checker.fail(msg);
            }
        }
        for (i, m) in self.machines.iter_mut().enumerate() {
            if let Some(at) = m.down_until {
                consider(at);
            }
            if let Some(at) = m.paused_until {
                consider(at);
            }
            if let Some(at) = m.suspended_until {
                consider(at);
                continue;
            }
            if let Some(at) = m.partitioned_until {
                consider(at);
            }
            if let Some(d) = m.daemon.as_mut()
                && let daemon::Output::Wait { until, reason } = d.poll_output()
            {
                let until = until.since_origin() + m.started;
                self.checker.wants_wake(Role::Daemon(i), until, reason, now);
                consider(until);
            }
            for (at, _) in m.running.values() {
                consider(*at);
            }
            for check in m.checks.values() {
                consider(check.at);
            }
        }
        if let Some(at) = self.waits.next_due() {
            consider(at);
        }
        if let Some((at, _)) = self.net.keys().next() {
            consider(*at);
        }
        for (at, _) in self.cloud.values() {
            consider(*at);
        }
        if let Some((at, _)) = self.notices.keys().next() {
            consider(*at);
        }
        if self.nodes.len() > 1 {
            consider(self.next_beat);
        }
        if let Some((at, _)) = self.workload.pending.front() {
            consider(*at);
        }
        if self.in_fault_phase() {
            consider(self.next_fault);
        }
        consider(self.next_ping);
        next
    }

    /// Handles everything due at the current time.
    fn fire_due(&mut self) {
        let now = self.elapsed;
        self.wake_nodes();
        self.resume_nodes_if_due();
        while self
            .workload
            .pending
            .front()
            .is_some_and(|(at, _)| *at <= now)
        {
            if let Some((_, request)) = self.workload.pending.pop_front() {
                self.note(format!(
                    "execute {} by {}",
                    request.exec_id, request.requester.user_id
                ));
                self.workload.submitted.push(request.exec_id.clone());
                let n = self.entry_node();
                self.sent_to.insert(request.exec_id.clone(), n);
                self.feed_node(n, server::Input::Execute(Box::new(request)));
            }
        }
        self.fire_due_waits();
        if self.in_fault_phase() && self.next_fault <= now {
            if self.nodes.len() > 1 && self.rng.chance(1, 4) {
                self.faults += 1;
                self.inject_cluster_fault();
            } else {
                self.inject_fault();
            }
            self.next_fault = now + Duration::from_millis(2000 + self.rng.below(18_000));
        }
        for i in 0..self.machines.len() {
            self.wake_machine(i);
        }
        if self.next_ping <= now {
            self.next_ping = now + PING_EVERY;
            self.ping_all();
        }
        if self.next_beat <= now {
            self.next_beat = now + BEAT_EVERY;
            self.beat_all();
        }
        self.deliver_notices();
        let due: Vec<(Duration, u64)> = self
            .net
            .range(..=(now, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some(msg) = self.net.remove(&key) {
                self.deliver(msg);
            }
        }
        let finished: Vec<(ExecutionId, usize)> = self
            .cloud
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(id, (_, n))| (id.clone(), *n))
            .collect();
        for (exec_id, n) in finished {
            self.cloud.remove(&exec_id);
            let result = Box::new(ok_result(0));
            self.feed_node(n, server::Input::CloudFinished { exec_id, result });
        }
        for n in 0..self.nodes.len() {
            self.feed_node(n, server::Input::Timeout);
        }
        for i in 0..self.machines.len() {
            self.finish_due_runs(i);
            self.finish_due_checks(i);
            if self.machines[i].suspended_until.is_none() {
                self.feed_daemon(i, daemon::Input::Timeout);
            }
        }
    }
}

/// The server's frame signer, the same key in every process.
fn server_signer() -> Arc<dyn crate::sign::Signer + Send + Sync> {
    Arc::new(test_root::frame_signer())
}

fn view_of(record: &ContextRecord, grant: &Grant, features: Vec<String>) -> ContextView {
    ContextView {
        id: record.id.to_string(),
        name: record.name.clone(),
        operator: record.operator.clone(),
        online: true,
        busy: false,
        draining: false,
        paused: false,
        unusable: None,
        local_fs_available: features.iter().any(|f| f == "fs"),
        features,
        grant_has_fs: !grant.fs.is_empty(),
        commands_enabled: grant.commands.enabled,
        shared_with_all_members: record.shared_with_all_members,
        opted_in: record.opted_in.clone(),
        operator_is_member: record.operator_is_member,
    }
}

fn ok_result(exit_code: i32) -> RunResult {
    RunResult {
        status: RunStatus::Exited,
        exit_code: Some(exit_code),
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        timing: Timing::default(),
        error: None,
        egress_denied: Vec::new(),
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self::new(0)
    }
}
