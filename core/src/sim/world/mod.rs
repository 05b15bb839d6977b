//! The seeded simulation: one server, several daemons, a faulty network, fake executors.

use crate::ids::{ExecutionId, RunId, WaitId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

mod disk;
mod faults;
mod feed;
mod machines;
mod network;
mod pause;
mod pump;
mod restart;
#[cfg(test)]
mod tests;
mod waits;

use disk::{Disk, PendingCrash};
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
    /// Server and daemon restarts, each restored from the records on its disk.
    pub restarts: usize,
    /// Records the roles handed their hosts.
    pub records: usize,
    /// Condition waits registered, checked and ended.
    pub waits: WaitCounts,
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
    server: Server,
    /// The server's database: its records, as bytes.
    server_disk: Disk,
    /// When the server's current process started: its instants count from here.
    server_started: Duration,
    /// A crash waiting for its point in the server's output stream.
    server_crash: Option<PendingCrash>,
    /// Executions the server's disk knows (an execute answered to its client).
    durable_execs: BTreeSet<ExecutionId>,
    /// Runs whose commit the server's disk holds, by execution: the run and its machine.
    commits: BTreeMap<ExecutionId, (RunId, usize)>,
    /// The machine revoked, if one was.
    revoked_machine: Option<usize>,
    machines: Vec<Machine>,
    conns: BTreeMap<ConnId, usize>,
    next_conn: ConnId,
    net: BTreeMap<(Duration, u64), Msg>,
    net_seq: u64,
    cloud: BTreeMap<ExecutionId, Duration>,
    workload: Workload,
    /// The server's table of condition waits, and those still to be registered.
    waits: HostWaits,
    next_fault: Duration,
    /// When the server's host next pings its connections.
    next_ping: Duration,
    /// Until when the server's process is stopped (a pause fault), if it is.
    paused_until: Option<Duration>,
    /// What reached the stopped server, in order, for when it resumes.
    paused_inputs: Vec<server::Input>,
    /// Per machine, the last runs it finished (the server recorded their end): what a faulty
    /// server could send again.
    finished_runs: BTreeMap<usize, Vec<RunId>>,
    /// Rogue frames sent so far (their run ids).
    rogue: u64,
    faults: usize,
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
            checker.fed(Role::Server, false, Duration::ZERO);
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
        Self {
            config: config.clone(),
            rng,
            elapsed: Duration::ZERO,
            server,
            server_disk: Disk::default(),
            server_started: Duration::ZERO,
            server_crash: None,
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
            paused_until: None,
            paused_inputs: Vec::new(),
            finished_runs: BTreeMap::new(),
            rogue: 0,
            faults: 0,
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
        loop {
            self.pump_all();
            self.checker.check_step_rate(self.elapsed);
            if self.checker.violation.is_some() {
                return;
            }
            let done = self.elapsed >= self.config.fault_phase
                && !self.server_paused()
                && self.workload.pending.is_empty()
                && self.server.executions_in_flight() == 0
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
            records: self.server_disk.written
                + self.machines.iter().map(|m| m.disk.written).sum::<usize>(),
            waits: self.checker.wait_counts(),
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
        let (until, reason) = self.server.poll_timeout();
        let server_until = until.since_origin() + self.server_started;
        match self.paused_until {
            // A stopped process wakes for nothing but its resumption.
            Some(resume) => consider(resume),
            None => {
                self.checker
                    .wants_wake(Role::Server, server_until, reason, now);
                consider(server_until);
            }
        }
        // The server's wake-up table must never be later than a session's own timer.
        let missed = self.machines.iter().find_map(|m| {
            let session = self.server.session(&m.context_id)?;
            let (own, why) = session.poll_timeout()?;
            (own < until).then(|| format!("{} ({why}) at {own:?}", m.context_id))
        });
        if let Some(missed) = missed {
            let msg = format!("the server would wake at {until:?} but the session of {missed}");
            self.checker.fail(msg);
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
        for at in self.cloud.values() {
            consider(*at);
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
        self.resume_server_if_due();
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
                self.feed_server(server::Input::Execute(Box::new(request)));
            }
        }
        self.fire_due_waits();
        if self.in_fault_phase() && self.next_fault <= now {
            self.inject_fault();
            self.next_fault = now + Duration::from_millis(2000 + self.rng.below(18_000));
        }
        for i in 0..self.machines.len() {
            self.wake_machine(i);
        }
        if self.next_ping <= now {
            self.next_ping = now + PING_EVERY;
            if !self.server_paused() {
                self.ping_all();
            }
        }
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
        let finished: Vec<ExecutionId> = self
            .cloud
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for exec_id in finished {
            self.cloud.remove(&exec_id);
            let result = Box::new(ok_result(0));
            self.feed_server(server::Input::CloudFinished { exec_id, result });
        }
        self.feed_server(server::Input::Timeout);
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
