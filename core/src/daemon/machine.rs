//! The daemon's public API, timers and connection lifecycle.

use crate::ids::RunId;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::runs::RunState;
use super::*;
use crate::time::NextWake;
use crate::wire::{
    DaemonFrame, ErrorBody, MAX_CONCURRENT_LIMIT, MAX_PTY_OUTPUT_DATA, PROTOCOL_VERSION,
    PtyOutputFrame, close_code,
};

impl Daemon {
    /// A daemon that trusts the frame keys of `keys`. It asks to connect at once.
    pub fn new(config: DaemonConfig, keys: KeySet, now: Now) -> Self {
        Self::with_pending_results(config, keys, now, Vec::new())
    }

    /// A daemon restarted with the results it had not delivered before it stopped.
    pub fn with_pending_results(
        mut config: DaemonConfig,
        keys: KeySet,
        now: Now,
        pending: Vec<PendingResult>,
    ) -> Self {
        config.max_concurrent = config.max_concurrent.clamp(1, MAX_CONCURRENT_LIMIT);
        let rng = crate::rng::SplitMix64::new(config.seed);
        let journal = super::record::DaemonJournal::new(now, pending.iter().map(|p| &p.run_id));
        let config_waits = config.waits.clone();
        let mut daemon = Self {
            config,
            keys,
            rng,
            link: Link::Connecting,
            failures: 0,
            draining: false,
            paused: false,
            host_jobs: 0,
            grant: None,
            runs: BTreeMap::new(),
            pending: pending.into_iter().map(|p| (p.run_id, p.frame)).collect(),
            seen: SeenRuns::default(),
            refused_key_version: None,
            outputs: VecDeque::new(),
            journal,
            now,
            waits: crate::wait::Schedule::new(config_waits, now),
            waits_online: false,
            wait_wake: (now.instant, "idle"),
        };
        daemon.command(Command::Connect);
        daemon.drain_waits();
        daemon
    }

    /// Results not yet acknowledged: persist them to survive a restart.
    pub fn pending_results(&self) -> Vec<PendingResult> {
        self.pending
            .iter()
            .map(|(run_id, frame)| PendingResult {
                run_id: run_id.clone(),
                frame: frame.clone(),
            })
            .collect()
    }

    /// Runs holding a slot now (accepted or committed).
    pub fn slots_used(&self) -> u32 {
        self.runs.len() as u32
    }

    /// Runs this daemon holds at once under the current grant.
    pub fn slots_total(&self) -> u32 {
        let granted = self
            .grant
            .as_ref()
            .map_or(self.config.max_concurrent, |(_, g)| g.limits.max_concurrent);
        self.config.max_concurrent.min(granted)
    }

    /// Ids of committed runs handed to an executor and not yet finished.
    pub fn executing(&self) -> Vec<RunId> {
        self.runs
            .iter()
            .filter(|(_, r)| matches!(r.state, RunState::Executing { .. }))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// True once the daemon has stopped (for good or after a drain).
    pub fn is_stopped(&self) -> bool {
        matches!(self.link, Link::Stopped)
    }

    /// True while an operator's pause holds ([`Input::Pause`]).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// True while the server's `welcome` has verified and the connection is up.
    pub fn is_ready(&self) -> bool {
        matches!(self.link, Link::Ready { .. })
    }

    /// Whether `run_id` is committed and handed to an executor here: only such a run's
    /// terminal output is sent.
    fn holds(&self, run_id: &str) -> bool {
        self.runs
            .get(run_id)
            .is_some_and(|r| matches!(r.state, RunState::Executing { .. }))
    }

    /// Feeds one input at time `now`. The records it produces ([`Output::Persist`]) are
    /// queued ahead of its other outputs.
    pub fn handle_input(&mut self, now: Now, input: Input) -> Result<(), DaemonError> {
        let mark = self.outputs.len();
        let result = self.apply_input(now, input);
        if result.is_ok() && !self.is_stopped() {
            self.sync_waits();
        }
        self.flush_journal(mark);
        result
    }

    fn apply_input(&mut self, now: Now, input: Input) -> Result<(), DaemonError> {
        if self.outputs.len() > MAX_QUEUED_OUTPUTS {
            return Err(DaemonError::OutputBacklog);
        }
        if now.instant < self.now.instant {
            return Err(DaemonError::TimeWentBackwards);
        }
        self.now = now;
        if self.is_stopped() {
            return Ok(());
        }
        match input {
            Input::Timeout => {
                self.on_timeout();
                self.feed_waits(crate::wait::Input::Timeout);
            }
            Input::Connected { session_id } => self.on_connected(session_id),
            Input::ConnectFailed { stop_forever, .. } => {
                if stop_forever {
                    // Refused for good (revoked): what still runs must stop too, as when the
                    // `revoked` frame or close arrives; a stopped daemon ignores every input,
                    // so a run left in its table could never finish.
                    self.cancel_all("revoked");
                    self.stop(true);
                } else if matches!(self.link, Link::Connecting) {
                    self.schedule_retry();
                }
            }
            Input::Frame(bytes) => {
                self.heard();
                self.on_frame(&bytes)
            }
            Input::ServerAlive => self.heard(),
            Input::Disconnected { code } => self.on_disconnected(code),
            Input::CapabilityFetched { run_id, bundle } => self.on_fetched(run_id, bundle),
            Input::CapabilityFetchFailed { run_id, error } => self.on_fetch_failed(run_id, error),
            Input::RunFinished { run_id, result } => self.on_finished(run_id, result),
            Input::Drain => {
                self.draining = true;
                self.send_status();
                self.check_drained();
            }
            Input::Pause => {
                if !self.paused {
                    self.paused = true;
                    self.send_status();
                }
            }
            Input::Resume => {
                if self.paused {
                    self.paused = false;
                    self.send_status();
                }
            }
            Input::ControlAnswered(frame) => {
                if self.is_ready() && matches!(frame, DaemonFrame::ControlResult { .. }) {
                    self.transmit(&frame);
                }
            }
            Input::HostJobs(running) => {
                self.host_jobs = running;
                self.check_drained();
            }
            Input::KeysUpdated(keys) => self.on_keys(keys),
            Input::EnvironmentsChanged(environments) => {
                self.config.environments = environments;
                self.send_capabilities();
            }
            Input::FeaturesChanged(features) => {
                self.config.features = features;
                self.send_capabilities();
            }
            Input::CommandFinished {
                command_id,
                run_id,
                exit_code,
                signal,
                duration_ms,
                reason,
            } => {
                if self.is_ready() {
                    self.transmit(&DaemonFrame::CommandFinished {
                        command_id,
                        run_id,
                        exit_code,
                        signal,
                        duration_ms,
                        reason,
                    });
                }
            }
            Input::TerminalOutput { run_id, data } => {
                if self.is_ready() && self.holds(&run_id) {
                    // Binary frames (PROTOCOL §4.5): the bytes as they are, at most 64 KiB a
                    // frame; the JSON form only for a run id too long for the binary one.
                    for data in data.chunks(MAX_PTY_OUTPUT_DATA) {
                        let binary = PtyOutputFrame {
                            pty_id: &run_id,
                            data,
                        };
                        match binary.encode() {
                            Some(bytes) => self.outputs.push_back(Output::Transmit(bytes)),
                            None => self.transmit(&DaemonFrame::PtyOutput {
                                pty_id: run_id.clone(),
                                data: crate::b64::encode(data),
                            }),
                        }
                    }
                }
            }
            Input::RunOutput { run_id, pieces } => {
                let live = matches!(
                    self.link,
                    Link::Ready {
                        live_output: true,
                        ..
                    }
                );
                if live && self.holds(&run_id) {
                    for piece in pieces {
                        self.transmit(&DaemonFrame::RunOutput {
                            run_id: run_id.clone(),
                            stream: piece.stream,
                            offset: piece.offset,
                            text: piece.text,
                        });
                    }
                }
            }
            Input::TerminalExit { run_id, exit_code } => {
                if self.is_ready() && self.holds(&run_id) {
                    self.transmit(&DaemonFrame::PtyExit {
                        pty_id: run_id,
                        exit_code,
                    });
                }
            }
            Input::WaitChecked {
                wait_id,
                check,
                outcome,
            } => self.on_checked(wait_id, check, outcome),
        }
        Ok(())
    }

    /// The next output. [`Output::Wait`] comes last, when nothing else is queued.
    pub fn poll_output(&mut self) -> Output {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        let (until, reason) = self.next_timer();
        Output::Wait { until, reason }
    }

    fn next_timer(&self) -> (Instant, &'static str) {
        let mut wake = NextWake::idle(self.now.instant);
        if self.is_stopped() {
            // Stopped for good: no input is handled any more, so no timer may be asked for.
            return wake.get();
        }
        match &self.link {
            Link::Idle { retry_at } => wake.consider(*retry_at, "reconnect"),
            Link::AwaitingWelcome { deadline, .. } => wake.consider(*deadline, "welcome timeout"),
            Link::Ready {
                next_heartbeat,
                silent_at,
                ..
            } => {
                wake.consider(*next_heartbeat, "heartbeat");
                wake.consider(*silent_at, "server silent");
            }
            Link::Connecting | Link::Stopped => {}
        }
        wake.consider(self.wait_wake.0, self.wait_wake.1);
        for run in self.runs.values() {
            if let RunState::Executing {
                deadline,
                cancel_sent: false,
                ..
            } = run.state
            {
                wake.consider(
                    deadline.saturating_add(self.config.deadline_grace),
                    "run deadline",
                );
            }
        }
        wake.get()
    }

    fn on_timeout(&mut self) {
        let now = self.now.instant;
        match &mut self.link {
            Link::Idle { retry_at } if *retry_at <= now => {
                self.link = Link::Connecting;
                self.command(Command::Connect);
            }
            Link::AwaitingWelcome { deadline, .. } if *deadline <= now => {
                self.close_and_retry(close_code::PROTOCOL_ERROR, "no welcome in time");
            }
            Link::Ready {
                silent_at,
                heartbeat,
                ..
            } if *silent_at <= now => {
                let silent_for = heartbeat.saturating_mul(SILENT_HEARTBEATS);
                self.event(Event::ServerSilent { silent_for });
                self.close_and_retry(close_code::GOING_AWAY, "server_silent");
            }
            Link::Ready {
                next_heartbeat,
                heartbeat,
                ..
            } if *next_heartbeat <= now => {
                *next_heartbeat = now.saturating_add(*heartbeat);
                self.send_status();
            }
            _ => {}
        }
        let grace = self.config.deadline_grace;
        let overdue: Vec<RunId> = self
            .runs
            .iter_mut()
            .filter_map(|(id, run)| match &mut run.state {
                RunState::Executing {
                    deadline,
                    cancel_sent,
                    ..
                } if !*cancel_sent && deadline.saturating_add(grace) <= now => {
                    *cancel_sent = true;
                    Some(id.clone())
                }
                _ => None,
            })
            .collect();
        for run_id in overdue {
            self.command(Command::Cancel {
                run_id,
                reason: "deadline".into(),
            });
        }
        self.check_drained();
    }

    /// A key set fetched from the server: taken when its version is higher than the one in
    /// force, kept out when lower (a rollback to a set that may list a retired key; reported
    /// once per version offered), ignored when the same.
    fn on_keys(&mut self, keys: KeySet) {
        let held = self.keys.version();
        if keys.version() < held {
            if self.refused_key_version != Some(keys.version()) {
                self.refused_key_version = Some(keys.version());
                self.event(Event::KeySetRefused {
                    held,
                    offered: keys.version(),
                });
            }
            return;
        }
        if keys.version() == held {
            return;
        }
        self.keys = keys.clone();
        match &mut self.link {
            Link::AwaitingWelcome { verifier, .. } | Link::Ready { verifier, .. } => {
                verifier.set_keys(keys)
            }
            _ => {}
        }
    }

    /// The key set in force (a host stores its document when the version changes, so a
    /// restart cannot go back to an older one).
    pub fn key_set(&self) -> &KeySet {
        &self.keys
    }

    /// The server showed it is alive: its silence starts again.
    fn heard(&mut self) {
        if let Link::Ready {
            heartbeat,
            silent_at,
            ..
        } = &mut self.link
        {
            *silent_at = self
                .now
                .instant
                .saturating_add(heartbeat.saturating_mul(SILENT_HEARTBEATS));
        }
    }

    fn on_connected(&mut self, session_id: String) {
        if !matches!(self.link, Link::Connecting | Link::Idle { .. }) {
            // A second socket while one is up: the host lost track; start over cleanly.
            self.close(close_code::PROTOCOL_ERROR, "unexpected second connection");
        }
        let verifier = FrameVerifier::new(self.keys.clone(), session_id);
        self.link = Link::AwaitingWelcome {
            verifier,
            deadline: self.now.instant.saturating_add(self.config.welcome_timeout),
        };
    }

    fn on_disconnected(&mut self, code: Option<u16>) {
        if code.is_some_and(close_code::stops_for_good) {
            self.cancel_all("revoked");
            self.stop(true);
        } else if !matches!(self.link, Link::Idle { .. }) {
            self.schedule_retry();
        }
    }

    /// Closes the socket after a peer error and schedules a reconnect.
    pub(super) fn close_and_retry(&mut self, code: u16, reason: &str) {
        self.close(code, reason);
        self.schedule_retry();
    }

    fn close(&mut self, code: u16, reason: &str) {
        self.outputs.push_back(Output::Close {
            code,
            reason: reason.to_owned(),
        });
    }

    fn schedule_retry(&mut self) {
        // Offers not yet committed die with the connection; the server ends them unstarted.
        self.runs.retain(|_, r| r.is_committed());
        let delay = self.config.backoff.delay(self.failures, &mut self.rng);
        self.failures = self.failures.saturating_add(1);
        let retry_at = self.now.instant.saturating_add(delay);
        self.link = Link::Idle { retry_at };
        self.event(Event::Disconnected { retry_at });
    }

    /// Welcome verified: say hello, resend undelivered results, start heartbeats.
    pub(super) fn become_ready(
        &mut self,
        verifier: FrameVerifier,
        heartbeat: Duration,
        live_output: bool,
    ) {
        self.failures = 0;
        let session_id = verifier.session_id().to_owned();
        self.link = Link::Ready {
            verifier,
            live_output,
            heartbeat,
            next_heartbeat: self.now.instant.saturating_add(heartbeat),
            silent_at: self
                .now
                .instant
                .saturating_add(heartbeat.saturating_mul(SILENT_HEARTBEATS)),
        };
        let hello = DaemonFrame::Hello {
            protocol: PROTOCOL_VERSION,
            features: self.config.features.clone(),
            max_concurrent: self.slots_total(),
            held_runs: self
                .runs
                .iter()
                .filter(|(_, r)| r.is_committed())
                .map(|(id, _)| id.clone())
                .collect(),
            pending_results: self.pending.keys().cloned().collect(),
            environments: self.config.environments.clone(),
            paused: self.paused && !self.draining,
        };
        self.transmit(&hello);
        let resend: Vec<Vec<u8>> = self.pending.values().cloned().collect();
        for frame in resend {
            self.outputs.push_back(Output::Transmit(frame));
        }
        if self.draining || self.paused {
            self.send_status();
        }
        self.event(Event::Ready { session_id });
    }

    pub(super) fn stop(&mut self, forever: bool) {
        self.link = Link::Stopped;
        self.command(Command::Stop { forever });
    }

    pub(super) fn cancel_all(&mut self, reason: &str) {
        let ids: Vec<RunId> = self.runs.keys().cloned().collect();
        for run_id in ids {
            if let Some(run) = self.runs.remove(&run_id)
                && matches!(run.state, RunState::Executing { .. })
            {
                self.command(Command::Cancel {
                    run_id,
                    reason: reason.to_owned(),
                });
            }
        }
    }

    fn on_fetch_failed(&mut self, run_id: RunId, error: ErrorBody) {
        let Some(run) = self.runs.get(&run_id) else {
            return;
        };
        let RunState::Fetching { committed_at } = run.state else {
            return;
        };
        let mut result = RunResult::failed(error);
        result.timing.setup_ms = self.ms_since(committed_at);
        self.finish(run_id, result);
    }

    fn on_fetched(&mut self, run_id: RunId, bundle: Vec<u8>) {
        let Some(run) = self.runs.get(&run_id) else {
            return;
        };
        let RunState::Fetching { committed_at } = run.state else {
            return;
        };
        let CapabilitySource::Digest { sha256, .. } = &run.capability else {
            return;
        };
        let actual = crate::wire::bundle_digest(&bundle);
        if &actual != sha256 {
            let mut result = RunResult::failed(ErrorBody {
                code: "digest_mismatch".into(),
                message: format!("the bundle's sha256 is {actual}, the server announced {sha256}"),
            });
            result.timing.setup_ms = self.ms_since(committed_at);
            self.finish(run_id, result);
            return;
        }
        let sha256 = sha256.clone();
        self.start(
            run_id,
            committed_at,
            Capability::Bundle {
                sha256,
                bytes: bundle,
            },
        );
    }

    /// Hands a committed run to an executor.
    pub(super) fn start(&mut self, run_id: RunId, committed_at: Instant, capability: Capability) {
        let now = self.now.instant;
        // Runs only arrive after `welcome`, which carries the grant; without one, nothing is
        // allowed.
        let grant = self
            .grant
            .as_ref()
            .map_or_else(Grant::nothing, |(_, g)| g.clone());
        let Some(run) = self.runs.get_mut(&run_id) else {
            return;
        };
        let deadline = committed_at.saturating_add(Duration::from_millis(run.timeout_ms));
        run.state = RunState::Executing {
            committed_at,
            started_at: now,
            deadline,
            cancel_sent: false,
        };
        let execute = Execute {
            run_id,
            environment: run.environment,
            capability,
            grant,
            deadline,
            shared_run: run.shared_run,
            requester: run.requester.clone(),
        };
        self.command(Command::Execute(Box::new(execute)));
    }

    fn on_finished(&mut self, run_id: RunId, result: RunResult) {
        if !matches!(
            self.runs.get(&run_id).map(|r| &r.state),
            Some(RunState::Executing { .. })
        ) {
            return;
        }
        self.finish(run_id, result);
    }

    /// Records a committed run's result, sends it, and frees its slot.
    fn finish(&mut self, run_id: RunId, mut result: RunResult) {
        let Some(run) = self.runs.remove(&run_id) else {
            return;
        };
        let (committed_at, started_at) = match run.state {
            RunState::Executing {
                committed_at,
                started_at,
                ..
            } => (committed_at, started_at),
            RunState::Fetching { committed_at } => (committed_at, self.now.instant),
            RunState::Accepted => return,
        };
        // The executor's setup and execute times stand; the rest is on the daemon's clock.
        result.timing.queue_ms = ms_between(run.accepted_at, started_at);
        result.timing.daemon_ms = self.ms_since(committed_at);
        result.timing.server_ms = None;
        result.timing.transit_ms = None;
        let frame = result_frame(&run_id, result);
        self.pending.insert(run_id, frame.clone());
        if self.is_ready() {
            self.outputs.push_back(Output::Transmit(frame));
        }
        self.check_drained();
    }

    pub(super) fn check_drained(&mut self) {
        if self.draining
            && self.runs.is_empty()
            && self.pending.is_empty()
            && self.host_jobs == 0
            && !self.is_stopped()
        {
            if !matches!(self.link, Link::Idle { .. } | Link::Connecting) {
                self.close(close_code::NORMAL, "drained");
            }
            self.stop(false);
        }
    }

    pub(super) fn send_status(&mut self) {
        if self.is_ready() {
            let status = DaemonFrame::Status {
                slots_used: self.slots_used(),
                slots_total: self.slots_total(),
                draining: self.draining || self.paused,
                // A pause under a drain to stop is no pause: the machine is going away.
                paused: self.paused && !self.draining,
            };
            self.transmit(&status);
        }
    }

    pub(super) fn send_capabilities(&mut self) {
        if self.is_ready() {
            let frame = DaemonFrame::CapabilitiesUpdate {
                features: self.config.features.clone(),
                environments: self.config.environments.clone(),
                max_concurrent: self.slots_total(),
            };
            self.transmit(&frame);
        }
    }

    pub(super) fn transmit(&mut self, frame: &DaemonFrame) {
        self.outputs.push_back(Output::Transmit(frame.to_json()));
    }

    pub(super) fn command(&mut self, command: Command) {
        self.outputs.push_back(Output::Command(command));
    }

    pub(super) fn event(&mut self, event: Event) {
        self.outputs.push_back(Output::Event(event));
    }

    fn ms_since(&self, earlier: Instant) -> u64 {
        ms_between(earlier, self.now.instant)
    }
}

fn ms_between(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.saturating_duration_since(earlier).as_millis()).unwrap_or(u64::MAX)
}

/// The `run.result` frame for `result`, cut to fit one message: escaping can make capped
/// output several times longer as JSON (a NUL byte is six), and a frame over the limit would
/// be refused with 1009 on every resend. Each step keeps the first half of `stdout` and
/// `stderr` — as the executors' output caps keep the beginning — and sets `truncated`.
fn result_frame(run_id: &str, mut result: RunResult) -> Vec<u8> {
    loop {
        let frame = DaemonFrame::RunResult {
            run_id: run_id.into(),
            result: result.clone(),
        }
        .to_json();
        if frame.len() <= crate::wire::DEFAULT_MAX_FRAME_LEN
            || (result.stdout.is_empty() && result.stderr.is_empty())
        {
            return frame;
        }
        result.stdout = first_half(&result.stdout);
        result.stderr = first_half(&result.stderr);
        result.truncated = true;
    }
}

/// The first half of `text`, ending on a character boundary.
fn first_half(text: &str) -> String {
    let mut end = text.len() / 2;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
