//! The daemon's one loop: after the start (`bootstrap`: key, join, key set, outbox), the
//! core's `handle_input` / `poll_output` over a channel of [`Event`]s from the sockets and
//! threads it started.
//!
//! Rules it keeps: every [`Output::Persist`] is committed to the outbox before any output polled
//! with it is carried out; events of an older connection attempt are ignored (each attempt has
//! a number); one wake carries out at most [`MAX_OUTPUTS_PER_WAKE`] outputs or the daemon stops
//! loudly. It never reads a frame itself: bytes go to the core as they came.
//!
//! One wake is one commit: the events already waiting when the driver wakes (frames of the
//! current connection, finished runs, fetched bundles; at most [`BATCH`]) are fed one after
//! another, their outputs polled, and all their records written in one transaction before any
//! of those outputs is carried out. An event that changes which connection later events
//! belong to (a ticket, an open, a close), or an output that does (a close, a connect, a
//! stop), ends the batch.
//!
//! This file keeps the loop, the batch and the ways out (drain, interrupt, finish); what each
//! event and each command does is in `events.rs`, the features that change while the daemon
//! runs in `features.rs`, the requests from afar in `control.rs`, and everything before the
//! loop (key, join, key set, outbox, and the services the loop drives) in `bootstrap.rs`.

pub(crate) mod control;
mod events;
mod features;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant as StdInstant};

use outpost_core::daemon::{Command, Daemon, DaemonRecord, Event as CoreEvent, Input, Output};
use outpost_core::executor::Registry;
use outpost_core::keyset::PinnedRoots;
use outpost_core::wire::close_code;

use super::checks::Checks;
use super::home::{Home, SERVER_FILE};
use super::policy::PolicySource;
use super::runner::Runner;
use super::standing::Standing;
use super::trim::Trim;
use super::update::{self, Schedule};
use super::{DaemonError, DaemonExit, DaemonOptions, Event, StopSignal, bootstrap, watch};
use crate::store::{DaemonStore, WaitWrite};
use events::log_event;
use features::Features;
use outpost_adapters::clock::Clock;
use outpost_adapters::http::SignedClient;
use outpost_adapters::runtime::{Host, Link, LinkEvent};

/// The most outputs one wake may carry out; more means the core and the host disagree, and
/// the daemon stops with [`DaemonError::RunawayOutputs`] rather than spin.
pub const MAX_OUTPUTS_PER_WAKE: usize = 65_536;

/// The most events one wake feeds the core before it commits and carries out their outputs.
pub const BATCH: usize = 64;

/// How long a stopping daemon waits for cancelled runs to clean up.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long a stopping daemon waits for the server to close its side of the connection, so
/// the frames queued before the close (a result, `command.finished`) leave before it exits.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

struct Driver {
    daemon: Daemon,
    store: DaemonStore,
    clock: Arc<Clock>,
    host: Arc<dyn Host>,
    client: Arc<SignedClient>,
    roots: Arc<PinnedRoots>,
    tls: Arc<rustls::ClientConfig>,
    runner: Runner,
    tx: Sender<Event>,
    rx: Receiver<Event>,
    /// The connection to the server: the current attempt, its link, how the last ended.
    connection: Connection,
    server_file: std::path::PathBuf,
    keys_version: u64,
    stop: StopSignal,
    state_dir: std::path::PathBuf,
    updates: Schedule,
    features: Features,
    /// The daemon's host commands, the owner's switch for them and the background ones running.
    commands: Commands,
    exit: Option<DaemonExit>,
    /// An event taken while batching that could not join the batch: handled next.
    deferred: Option<Event>,
    /// Condition checks running now.
    checks: Checks,
    /// An input was fed since [`Driver::tick`] last looked (its outputs are still to poll).
    fed: bool,
    /// Tells the driver when the policy file changes (none: the features are looked at on
    /// a short timer instead).
    policy_watch: Option<watch::Watch>,
    /// What `state/connection.json` says.
    standing: Standing,
    /// The owner's local policy as it is now (which requests from afar it allows).
    policy: Arc<PolicySource>,
    /// Requests from afar in progress: a restart asked for, update answers owed.
    requests: control::Requests,
    /// When the daemon last did more than wait, for giving its code's pages back.
    trim: Trim,
}

/// The connection to the server as the driver holds it.
#[derive(Default)]
struct Connection {
    /// The number of the current connection attempt; events of others are stale.
    attempt: u64,
    /// The open link of attempt `attempt`, once it is up.
    link: Option<Link>,
    /// The attempt this daemon closed last, until the server has closed its side.
    closing: Option<u64>,
    /// The server's id for the current session, once it is ready (for the logs).
    session_id: Option<String>,
    /// Which of the server's URLs the current attempt's WebSocket went to (the client's
    /// [`SignedClient::in_use`] token): a failure to open it moves the client on from that
    /// one.
    server_at: usize,
    /// The close code the last connection ended with, if one came.
    last_close: Option<u16>,
    /// The server refused this daemon for good (revoked, deleted): why, to say at exit.
    final_refusal: Option<String>,
}

/// The daemon's host commands as the driver holds them.
struct Commands {
    /// The commands themselves, for the daemon's whole life (every run's bridge shares them).
    shared: Arc<outpost_host::HostCommands>,
    /// The owner's local switch as last applied.
    opted_in: bool,
    /// Background host commands running, as last told to the core (a drain waits for them).
    background: usize,
}

/// Outputs polled from the core and not yet carried out.
#[derive(Default)]
struct Polled {
    records: Vec<DaemonRecord>,
    /// Wait rows to save or forget ([`Output::SaveWait`], [`Output::ForgetWait`]), in order.
    waits: Vec<Output>,
    outputs: Vec<Output>,
    /// When the core wants [`Input::Timeout`] (its latest `Wait`).
    until: Option<outpost_core::time::Instant>,
    /// Among `outputs` is one after which no further input may join the batch.
    barrier: bool,
}

impl Polled {
    fn take(&mut self, output: Output) {
        match output {
            Output::Persist(record) => self.records.push(record),
            Output::SaveWait { .. } | Output::ForgetWait { .. } => self.waits.push(output),
            Output::Wait { until, .. } => self.until = Some(until),
            output => {
                self.barrier |= matches!(
                    output,
                    Output::Close { .. } | Output::Command(Command::Connect | Command::Stop { .. })
                );
                self.outputs.push(output);
            }
        }
    }
}

pub(super) fn run(
    options: DaemonOptions,
    home: &Home,
    registry: Registry,
    host: Arc<dyn Host>,
    stop: StopSignal,
) -> Result<DaemonExit, DaemonError> {
    let clock = Arc::new(Clock::new()?);
    // This daemon answers operators' requests from afar (the owner's policy decides which).
    let mut options = options;
    let feature = outpost_core::wire::FEATURE_CONTROL;
    if !options.features.iter().any(|f| f == feature) {
        options.features.push(feature.to_owned());
    }
    let Some(joined) = bootstrap::join(&options, home, &registry, &stop)? else {
        return Ok(DaemonExit::Interrupted);
    };
    let bootstrap::Joined {
        url,
        client,
        roots,
        trust,
        keys,
        environments,
        new_join,
    } = joined;
    let tls = trust.client_config();
    let bootstrap::Restored {
        store,
        daemon,
        keys_version,
        seed,
    } = bootstrap::restore(
        &options,
        home,
        keys,
        &roots,
        new_join,
        &environments,
        &clock,
    )?;
    if new_join {
        control::forget_pause(&home.folders.state);
    }
    let (tx, rx) = channel();
    let bootstrap::Services {
        commands,
        policy,
        policy_watch,
        checks,
        runner,
        standing,
        auto_update,
    } = bootstrap::services(
        bootstrap::Wiring {
            options: &options,
            home,
            host: &host,
            clock: &clock,
            client: &client,
            url: &url,
            stop: &stop,
            events: &tx,
        },
        registry,
        &store,
    )?;
    tracing::info!(server = %url, host = host.name(), environments = ?environments.iter().map(|e| e.as_str()).collect::<Vec<_>>(), "daemon starting");
    let mut driver = Driver {
        daemon,
        store,
        clock,
        host,
        client,
        roots,
        tls,
        runner,
        tx,
        rx,
        connection: Connection::default(),
        server_file: home.folders.config.join(SERVER_FILE),
        keys_version,
        stop,
        state_dir: home.folders.state.clone(),
        updates: Schedule::new(auto_update, seed),
        features: Features::new(&options.features),
        policy_watch,
        commands: Commands {
            shared: commands,
            opted_in: options.local.commands_enabled,
            background: 0,
        },
        exit: None,
        deferred: None,
        checks,
        fed: false,
        standing,
        policy,
        requests: control::Requests::new(options.launcher),
        trim: Trim::new(),
    };
    if let Some(paused) = control::paused_at_start(&driver.state_dir) {
        tracing::info!(since = %paused.since, "paused by an operator: taking no runs until resumed");
        driver.input(Input::Pause)?;
    }
    driver.serve()
}

impl Driver {
    fn serve(&mut self) -> Result<DaemonExit, DaemonError> {
        let mut drain_asked = false;
        loop {
            let until = self.carry_out()?;
            self.standing.update(
                self.daemon.is_ready(),
                self.daemon.slots_used(),
                self.stop.count() > 0
                    || self.updates.handing_over()
                    || self.requests.restart_asked.is_some(),
                self.daemon.is_paused(),
            );
            if let Some(exit) = self.exit {
                let exit = self.finish(exit);
                if let Some(code) = self.connection.final_refusal.take()
                    && code == "unknown_key"
                {
                    return Err(DaemonError::Unregistered {
                        code,
                        server_file: self.server_file.clone(),
                    });
                }
                return Ok(exit);
            }
            // What the tick fed the core (a job's end, a feature, the jobs' count) is carried
            // out before the driver sleeps: the outputs may not wait for the next wake.
            if self.tick()? {
                continue;
            }
            match self.stop.count() {
                0 => {}
                1 if !drain_asked => {
                    drain_asked = true;
                    tracing::info!(
                        "stopping: runs in flight and background host commands finish, and their results are delivered first (again to stop at once)"
                    );
                    self.input(Input::Drain)?;
                    continue;
                }
                1 => {}
                _ => return self.interrupt(),
            }
            if self.updates.hand_over_overdue() {
                tracing::warn!(
                    "runs or host commands outlasted the update's hand-over limit of {} s: stopping them and handing over",
                    update::hand_over_limit().as_secs()
                );
                self.interrupt()?;
                return Ok(DaemonExit::Updated);
            }
            if self
                .requests
                .restart_asked
                .is_some_and(|since| since.elapsed() >= crate::DRAIN_LIMIT)
            {
                tracing::warn!(
                    "runs or host commands outlasted the restart's drain limit of {} s: stopping them and restarting",
                    crate::DRAIN_LIMIT.as_secs()
                );
                self.interrupt()?;
                return Ok(DaemonExit::Restart);
            }
            if let Some(event) = self.deferred.take() {
                self.on_event(event)?;
                continue;
            }
            // Asleep until the core's timer, the driver's own next timer, or an event (both
            // read again after a drop, which may take milliseconds).
            let mut wait = self.clock.until(until);
            let mut own = self.own_timer();
            if self.trim_when_quiet(wait.min(own)) {
                wait = self.clock.until(until);
                own = self.own_timer();
            }
            match self.rx.recv_timeout(wait.min(own)) {
                Ok(event) => self.on_event(event)?,
                Err(RecvTimeoutError::Timeout) if wait <= own => self.input(Input::Timeout)?,
                // The driver's own timer: `tick` at the top of the loop does what is due.
                Err(RecvTimeoutError::Timeout) => {}
                // The driver holds a sender itself: the channel never disconnects.
                Err(RecvTimeoutError::Disconnected) => {}
            }
        }
    }

    /// Drops the code the daemon holds mapped once it has been connected with nothing running
    /// for [`QUIET`](super::trim::QUIET), and again after each later wake while it stays so,
    /// when it is about to sleep for `sleep` (on a wake it had anyway: see [`Trim::due`]);
    /// returns whether it tried.
    fn trim_when_quiet(&mut self, sleep: Duration) -> bool {
        let idle = self.daemon.is_ready()
            && self.daemon.slots_used() == 0
            && self.checks.is_idle()
            && self.commands.background == 0;
        let Some(due) = self.trim.due(idle, StdInstant::now(), sleep) else {
            return false;
        };
        match self.trim.drop_code(due) {
            Ok(bytes) => tracing::debug!(?due, mib = bytes >> 20, "idle: code pages given back"),
            Err(e) => tracing::debug!("idle: the code's pages could not be given back: {e}"),
        }
        true
    }

    /// How long until [`Driver::tick`] has something to do: the next feature look and the
    /// update timetable's next moment (a background host command's end is an event).
    fn own_timer(&self) -> Duration {
        let now = StdInstant::now();
        let mut next = self
            .features
            .next_look(self.policy_watched())
            .unwrap_or(now);
        if let Some(due) = self.updates.next_due() {
            next = next.min(due);
        }
        if let Some(since) = self.requests.restart_asked {
            next = next.min(since + crate::DRAIN_LIMIT);
        }
        next.saturating_duration_since(now)
    }

    /// Whether edits of the policy file reach the driver as events (else it looks on a short
    /// timer).
    fn policy_watched(&self) -> bool {
        self.policy_watch
            .as_ref()
            .is_some_and(watch::Watch::is_alive)
    }

    /// The driver's own timers (returns whether it fed the core): announces a changed `fs` feature, marks this version proven
    /// once it ran its trial minute, starts a due update check on a blocking thread.
    fn tick(&mut self) -> Result<bool, DaemonError> {
        self.fed = false;
        let watched = self.policy_watched();
        if let Some(features) = self.features.look(&self.runner, watched) {
            tracing::info!(
                ?features,
                "the folders this machine can mount changed; announcing it"
            );
            self.input(Input::FeaturesChanged(features))?;
        }
        let opted_in = self.runner.commands_opted_in();
        if opted_in != self.commands.opted_in {
            tracing::info!(
                on = opted_in,
                "the owner turned host commands {}",
                if opted_in {
                    "on"
                } else {
                    "off (every job is killed)"
                }
            );
            self.commands.opted_in = opted_in;
            self.commands.shared.set_local_opt_in(opted_in);
        }
        if self.commands.background > 0 {
            self.commands.shared.reap();
        }
        self.report_commands()?;
        let jobs = self.commands.shared.jobs_running();
        if jobs != self.commands.background {
            self.commands.background = jobs;
            self.input(Input::HostJobs(jobs))?;
        }
        if self.updates.prove_due() {
            update::mark_proven(&self.state_dir);
        }
        if self.updates.check_due() {
            let forced = self.updates.take_forced();
            let (client, roots, dir, tx) = (
                self.client.clone(),
                self.roots.clone(),
                self.state_dir.clone(),
                self.tx.clone(),
            );
            self.host.spawn_blocking(Box::new(move || {
                let checked = update::check(&client, &roots, &dir, update::unix_now(), forced);
                let _ = tx.send(Event::UpdateChecked(checked));
            }));
        }
        Ok(self.fed)
    }

    /// Reports every host command that ended since the last call with `command.finished`.
    fn report_commands(&mut self) -> Result<(), DaemonError> {
        for event in self.commands.shared.drain_audit() {
            if let outpost_host::AuditEvent::CommandFinished {
                command_id,
                run_id,
                exit_code,
                signal,
                duration_ms,
                reason,
                ..
            } = event
            {
                tracing::info!(command = %command_id, run = %run_id, %reason, "host command finished");
                self.input(Input::CommandFinished {
                    command_id,
                    run_id,
                    exit_code,
                    signal,
                    duration_ms,
                    reason,
                })?;
            }
        }
        Ok(())
    }

    fn input(&mut self, input: Input) -> Result<(), DaemonError> {
        self.fed = true;
        self.checks.seen().observe_input(&input);
        let now = self.clock.now();
        self.daemon.handle_input(now, input)?;
        Ok(())
    }

    /// Polls the core's outputs until it waits, into `polled`.
    fn poll(&mut self, polled: &mut Polled) -> Result<(), DaemonError> {
        for _ in 0..MAX_OUTPUTS_PER_WAKE {
            let output = self.daemon.poll_output();
            let waits = matches!(output, Output::Wait { .. });
            polled.take(output);
            if waits {
                return Ok(());
            }
        }
        Err(DaemonError::RunawayOutputs)
    }

    /// Polls the outputs of what was fed, feeds the events already waiting that may join them
    /// (see the module docs), commits all their records in one transaction, then carries out
    /// the other outputs in order. Returns when the core wants a timeout.
    fn carry_out(&mut self) -> Result<outpost_core::time::Instant, DaemonError> {
        let mut polled = Polled::default();
        self.poll(&mut polled)?;
        let mut fed = 1;
        while !polled.barrier && fed < BATCH {
            let Ok(event) = self.rx.try_recv() else { break };
            if !self.joins_batch(&event) {
                self.deferred = Some(event);
                break;
            }
            self.on_event(event)?;
            self.poll(&mut polled)?;
            fed += 1;
        }
        if polled.outputs.len() > MAX_OUTPUTS_PER_WAKE {
            return Err(DaemonError::RunawayOutputs);
        }
        // Every record polled is committed before anything polled with it is carried out.
        self.store.append(&polled.records)?;
        if !polled.records.is_empty() {
            tracing::trace!(target: "outpost::timeline", stage = "daemon.committed", frame = %change_names(&polled.records));
        }
        // Taken for good: a write that fails ends the daemon, and the next process starts
        // from what its store holds.
        let events = self.checks.seen().take_unsaved();
        let mut writes: Vec<WaitWrite<'_>> = events.writes().collect();
        writes.extend(polled.waits.iter().filter_map(|o| match o {
            Output::SaveWait { row, written_ms } => Some(WaitWrite::Save {
                row,
                written_ms: *written_ms,
            }),
            Output::ForgetWait { wait_id } => Some(WaitWrite::Forget(wait_id)),
            _ => None,
        }));
        // The events of this batch's checks are committed with its rows.
        self.store.write_waits(&writes)?;
        for output in &polled.waits {
            self.checks.seen().observe(output);
        }
        for output in polled.outputs {
            self.checks.seen().observe(&output);
            match output {
                Output::Persist(_)
                | Output::SaveWait { .. }
                | Output::ForgetWait { .. }
                | Output::Wait { .. } => {}
                Output::Transmit(bytes) => {
                    if let Some(link) = &self.connection.link {
                        tracing::trace!(target: "outpost::timeline", stage = "daemon.send", frame = %outpost_core::wire::frame_label(&bytes));
                        link.send(bytes);
                    }
                }
                Output::Close { code, reason } => {
                    if let Some(link) = self.connection.link.take() {
                        link.close(code, &reason);
                        self.connection.closing = Some(self.connection.attempt);
                    }
                    // Whatever that socket still reports is stale now.
                    self.connection.attempt += 1;
                }
                Output::Command(command) => self.command(command),
                Output::Event(event) => {
                    if matches!(event, CoreEvent::Ready { .. }) {
                        // What a dropped connection had in flight is gone: full windows.
                        self.runner.terminals().reset_windows();
                        self.updates.connected();
                    }
                    self.note(&event);
                    if let CoreEvent::ResultDelivered { run_id } = &event {
                        self.runner.delivered(run_id);
                    }
                    log_event(&event);
                }
            }
        }
        polled.until.ok_or(DaemonError::RunawayOutputs)
    }

    /// Whether `event` may be fed before the outputs polled so far are carried out: it must
    /// not change which connection frames belong to.
    fn joins_batch(&self, event: &Event) -> bool {
        match event {
            Event::Input(_) | Event::TerminalOutput { .. } => true,
            Event::Link {
                conn,
                event: LinkEvent::Message(_) | LinkEvent::Alive,
            } => *conn == self.connection.attempt && self.connection.link.is_some(),
            // An update check may start the drain: it is fed on its own.
            Event::Link { .. }
            | Event::Ticket { .. }
            | Event::UpdateChecked(_)
            | Event::CommandsAudit
            // A control may start a drain or answer at once: fed on its own.
            | Event::Control { .. }
            // A stop and a policy edit are looked at by the loop, between batches.
            | Event::Stop
            | Event::PolicyChanged => false,
        }
    }

    /// A second stop request (or a drain past its limit): cancel what runs and kill every
    /// host command, keep the results in the outbox, report the killed commands, go.
    fn interrupt(&mut self) -> Result<DaemonExit, DaemonError> {
        tracing::warn!("stopping at once: runs in flight are cancelled");
        self.checks.stop_all();
        self.commands.shared.shutdown();
        self.runner.cancel_all();
        self.collect_runs(true)?;
        // The jobs just killed end with `command.finished` (`shutdown`) like any other.
        self.report_commands()?;
        self.carry_out()?;
        self.close_link(close_code::GOING_AWAY, "stopping");
        Ok(DaemonExit::Interrupted)
    }

    /// Closes the connection after what is queued on it, then waits (at most [`CLOSE_GRACE`])
    /// until the server has closed its side — of this connection, or of the one the core
    /// closed last — so what was sent just before leaves before the process exits or execs.
    fn close_link(&mut self, code: u16, reason: &str) {
        if let Some(link) = self.connection.link.take() {
            link.close(code, reason);
            self.connection.closing = Some(self.connection.attempt);
        }
        let deadline = StdInstant::now() + CLOSE_GRACE;
        while let Some(closing) = self.connection.closing {
            let left = deadline.saturating_duration_since(StdInstant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Link {
                    conn,
                    event: LinkEvent::Closed { .. },
                }) if conn == closing => self.connection.closing = None,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }

    /// Waits (bounded) for run threads to end; with `record`, their results enter the outbox.
    fn collect_runs(&mut self, record: bool) -> Result<(), DaemonError> {
        let deadline = StdInstant::now() + STOP_GRACE;
        while self.runner.running() > 0 {
            let left = deadline.saturating_duration_since(StdInstant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Input(Input::RunFinished { run_id, result })) => {
                    self.runner.finished(&run_id);
                    if record {
                        self.input(Input::RunFinished { run_id, result })?;
                        self.carry_out()?;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        Ok(())
    }

    fn finish(&mut self, exit: DaemonExit) -> DaemonExit {
        // Waits resume from the store on the next start; a check cut short is checked again.
        self.checks.stop_all();
        if matches!(exit, DaemonExit::Revoked | DaemonExit::Replaced) {
            self.commands.shared.revoke();
        } else {
            self.commands.shared.shutdown();
        }
        if self
            .report_commands()
            .and_then(|()| self.carry_out().map(|_| ()))
            .is_err()
        {
            tracing::warn!("cannot report the host commands stopped on exit");
        }
        if !matches!(exit, DaemonExit::Drained | DaemonExit::Updated) {
            self.runner.cancel_all();
            let _ = self.collect_runs(false);
        }
        self.close_link(close_code::NORMAL, "stopped");
        exit
    }
}

/// The kinds of `records`' changes (`runStarted+resultPending`), to label a commit in a
/// trace.
fn change_names(records: &[DaemonRecord]) -> String {
    let names: Vec<&str> = records.iter().map(|r| r.change.kind()).collect();
    names.join("+")
}
